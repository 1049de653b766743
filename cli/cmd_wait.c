/*
 * cmd_wait.c - `gpuman wait ID|FIRST-LAST...|--all`: block until the jobs
 * have ended; exit 0 if all succeeded.  It sleeps on the queue directory's events file, which
 * the dispatcher rewrites when jobs end, and looks once a second whether a
 * dispatcher still lives (starting one if not).
 *
 * What it costs the queue: at each event, one read of the jobs whose end
 * was recorded lately (an index on when it was recorded, not on the end
 * time: a loaded dispatcher records ends hundreds of ms after they happen),
 * matched against the ids it still waits for (sorted, bsearch) -- not a
 * read per id.  A full look at the pending ids once a second catches
 * whatever else (a store written by a gpuman before schema 6).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>
#include <jansson.h>
#include "cli.h"
#include "jobs.h"
#include "gpuman-internal.h"

/* The ids still waited for: sorted, without repeats. */
struct pending {
	int64_t *ids;
	size_t n;
};

static int cmp_id(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static void pending_drop(struct pending *p, int64_t id)
{
	int64_t *at = bsearch(&id, p->ids, p->n, sizeof *p->ids, cmp_id);

	if (!at)
		return;
	memmove(at, at + 1, (size_t)(p->ids + p->n - (at + 1)) * sizeof *at);
	p->n--;
}

static void ended_lately(void *data, int64_t id, enum job_state state)
{
	(void)state;
	pending_drop(data, id);
}

/* Every pending id, in one read transaction: also proves they exist. */
static enum gm_err look_all(struct queue *q, struct pending *p, char *err, size_t len)
{
	struct job_end *ended = NULL;
	size_t nended = 0;
	enum gm_err rc = jobstore_ended(q->store, p->ids, p->n, &ended, &nended, err, len);

	for (size_t i = 0; rc == GM_OK && i < nended; i++)
		pending_drop(p, ended[i].id);
	free(ended);
	return rc;
}

#define FULL_LOOK_MS 1000
/* An end is stamped as its record is written and seen once its round
 * commits, shortly after: ask for those stamped since the last look less
 * this, and leave the rest to the full look. */
#define END_SLACK_MS 250

/* The first job waited for tells what of its machine holds it back (it
 * holds back every queued job of that machine). */
static void tell_held(struct cli *cli, struct queue *q, const struct pending *p, char *said,
                      size_t len)
{
	char err[GM_ERRBUF_SIZE];
	struct job job;

	if (!p->n || jobstore_get(q->store, p->ids[0], 0, &job, err, sizeof err) != GM_OK)
		return;
	job_tell_held(cli, &job, 0, said, len);
	job_release(&job);
}

/* Append id to *ids (*n of *cap); -1 out of memory. */
static int push_id(int64_t **ids, size_t *n, size_t *cap, int64_t id)
{
	if (*n == *cap) {
		int64_t *grown = realloc(*ids, (*cap = *cap ? *cap * 2 : 64) * sizeof *grown);

		if (!grown)
			return -1;
		*ids = grown;
	}
	(*ids)[(*n)++] = id;
	return 0;
}

/* --all and ranges: the ids of the jobs of the queue in lo..hi, of every
 * state or only of those not yet ended (live), appended to *ids. */
static enum gm_err ids_in(struct queue *q, int64_t lo, int64_t hi, int live, int64_t **ids,
                          size_t *n, size_t *cap, char *err, size_t len)
{
	for (int s = 0; s < JOB_STATE_COUNT; s++) {
		int64_t *got = NULL;
		size_t count = 0;
		enum gm_err rc;

		if (live && job_state_final((enum job_state)s))
			continue;
		rc = jobstore_ids(q->store, (enum job_state)s, &got, &count, err, len);
		for (size_t i = 0; rc == GM_OK && i < count; i++) {
			if (got[i] >= lo && got[i] <= hi && push_id(ids, n, cap, got[i]) < 0)
				rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		}
		free(got);
		if (rc != GM_OK)
			return rc;
	}
	return GM_OK;
}

/* The operands (ids and FIRST-LAST ranges) or --all as ids, in order: a
 * range is the ids of it in the queue, --all the jobs not yet ended.  An
 * exit status (EXIT_OK: *ids and *n set, *n perhaps 0 with --all). */
static int wanted_ids(struct cli *cli, struct queue *q, int all, int argc, char **argv,
                      int64_t **ids, size_t *n)
{
	char err[GM_ERRBUF_SIZE];
	size_t cap = 0;

	*ids = NULL;
	*n = 0;
	if (all) {
		if (ids_in(q, 1, INT64_MAX, 1, ids, n, &cap, err, sizeof err) != GM_OK)
			return cli_error(cli, EXIT_FAIL, "%s", err);
		if (*n)
			qsort(*ids, *n, sizeof **ids, cmp_id);
		return EXIT_OK;
	}
	for (int i = optind; i < argc; i++) {
		int64_t lo, hi;
		size_t before = *n;

		parse_id_range(argv[i], &lo, &hi);
		if (lo == hi) { /* one not there is said by the first look */
			if (push_id(ids, n, &cap, lo) < 0)
				return cli_error(cli, EXIT_FAIL, "out of memory");
			continue;
		}
		if (ids_in(q, lo, hi, 0, ids, n, &cap, err, sizeof err) != GM_OK)
			return cli_error(cli, EXIT_FAIL, "%s", err);
		if (*n == before)
			return cli_error(cli, EXIT_USAGE, "no job of yours in %s", argv[i]);
		qsort(*ids + before, *n - before, sizeof **ids, cmp_id);
	}
	return EXIT_OK;
}

static int report(struct cli *cli, struct queue *q, const int64_t *ids, size_t n)
{
	json_t *arr = cli->json ? json_array() : NULL;
	char err[GM_ERRBUF_SIZE];
	int failed = 0;

	for (size_t i = 0; i < n; i++) {
		struct job job;

		if (jobstore_get(q->store, ids[i], 0, &job, err, sizeof err) != GM_OK) {
			failed = 1; /* cleared meanwhile (queue --clear) */
			continue;
		}
		failed |= job.state != JOB_DONE;
		if (arr)
			json_array_append_new(
			    arr, json_pack("{s:I, s:s, s:s?}", "id", (json_int_t)job.id, "state",
			                   job_state_name(job.state), "reason", job.reason));
		else
			printf("%lld %s%s%s\n", (long long)job.id, job_state_name(job.state),
			       job.reason && job.state != JOB_DONE ? ": " : "",
			       job.reason && job.state != JOB_DONE ? job.reason : "");
		job_release(&job);
	}
	if (arr)
		cli_print_json(arr);
	return failed ? EXIT_FAIL : EXIT_OK;
}

enum { OPT_ALL = OPT_CMD_BASE };

static int wait_option(struct cli *cli, int opt, const char *arg, void *data)
{
	(void)cli;
	(void)arg;
	if (opt != 'a' && opt != OPT_ALL)
		return -1;
	*(int *)data = 1;
	return CLI_CONTINUE;
}

static int wait_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_OPTIONS, {"all", no_argument, NULL, OPT_ALL}, {0}};
	struct queue q = {.store = NULL};
	struct pending p = {NULL, 0};
	char err[GM_ERRBUF_SIZE], said[GM_ERRBUF_SIZE + 256] = "";
	int status, ifd = -1, all = 0;
	size_t n;
	int64_t *ids = NULL, last_look, last_full;
	enum gm_err rc;

	status = cli_parse(cli, &cmd_wait, argc, argv, "a", longopts, wait_option, &all);
	if (status != CLI_CONTINUE)
		return status;
	if (all && optind < argc)
		return cli_usage(cli, "--all or job ids, not both ('%s')", argv[optind]);
	if (!all && optind >= argc)
		return cli_usage(cli, "which jobs? (gpuman wait ID..., FIRST-LAST or --all)");
	for (int i = optind; i < argc; i++) {
		int64_t lo, hi;

		if (parse_id_range(argv[i], &lo, &hi) < 0)
			return cli_usage(cli, "'%s' is not a job id or range of ids (17, 17-36)",
			                 argv[i]);
	}
	if (cli_queue_open(cli, &q) != EXIT_OK) {
		status = EXIT_FAIL;
		goto done;
	}
	status = wanted_ids(cli, &q, all, argc, argv, &ids, &n);
	if (status != EXIT_OK)
		goto done;
	if (!n) { /* --all with nothing queued or running */
		if (cli->json)
			cli_print_json(json_array());
		else
			fprintf(stderr, "gpuman wait: no job of yours is queued or running\n");
		goto done;
	}
	p.ids = malloc(n * sizeof *p.ids);
	if (!p.ids) {
		status = cli_error(cli, EXIT_FAIL, "out of memory");
		goto done;
	}
	memcpy(p.ids, ids, n * sizeof *ids);
	qsort(p.ids, n, sizeof *p.ids, cmp_id);
	for (size_t i = 0; i < n; i++)
		if (!p.n || p.ids[p.n - 1] != p.ids[i])
			p.ids[p.n++] = p.ids[i];
	ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (ifd < 0 || inotify_add_watch(ifd, q.dir, IN_CLOSE_WRITE) < 0) {
		status = cli_error(cli, EXIT_FAIL, "cannot watch '%s': %s", q.dir, strerror(errno));
		goto done;
	}
	/* Watching first, then looking: no end slips in between. */
	last_look = last_full = now_ms();
	rc = look_all(&q, &p, err, sizeof err);
	for (int check_dispatcher = 1;;) {
		struct pollfd pfd = {ifd, POLLIN, 0};
		int64_t now;
		int news = 0;

		if (rc != GM_OK) {
			status =
			    cli_error(cli, rc == GM_ERR_NOT_FOUND ? EXIT_USAGE : EXIT_FAIL, "%s%s",
			              err, rc == GM_ERR_NOT_FOUND ? " in your queue" : "");
			goto done;
		}
		if (!p.n) {
			status = report(cli, &q, ids, n);
			goto done;
		}
		/* At the start and once a second: no more, for the probe
		 * itself is an event on the directory we watch. */
		if (check_dispatcher && queue_ensure_dispatcher(&q, err, sizeof err) < 0) {
			status = cli_error(cli, EXIT_FAIL, "cannot start the dispatcher: %s", err);
			goto done;
		}
		check_dispatcher = 0;
		if (poll(&pfd, 1, FULL_LOOK_MS) > 0)
			news = queue_drain_events(ifd);
		now = now_ms();
		if (now - last_full >= FULL_LOOK_MS) {
			last_full = last_look = now;
			rc = look_all(&q, &p, err, sizeof err);
			if (rc == GM_OK)
				tell_held(cli, &q, &p, said, sizeof said);
			check_dispatcher = 1;
			continue;
		}
		if (!news)
			continue;
		rc = jobstore_ended_since(q.store, last_look - END_SLACK_MS, ended_lately, &p, err,
		                          sizeof err);
		last_look = now;
	}
done:
	if (ifd >= 0)
		close(ifd);
	free(ids);
	free(p.ids);
	queue_close(&q);
	return status;
}

const struct cmd_entry cmd_wait = {
    "wait",
    "wait until queued jobs have ended",
    "usage: gpuman wait [--json] ID|FIRST-LAST...\n"
    "       gpuman wait [--json] --all\n"
    "\n"
    "Block until every job named has ended, then print one line per job (id,\n"
    "state and, unless done, why).  FIRST-LAST: every job of yours in that\n"
    "range (an array's ids, as submit --array prints them).  Starts the\n"
    "dispatcher if it has died, and says on stderr, once, what of the machine\n"
    "keeps the jobs queued (a dispatcher that cannot start, a full disk) until\n"
    "that is mended.  Each time jobs end it reads only the jobs that ended\n"
    "lately (and, once a second, the ones it still waits for): waiting on\n"
    "thousands of jobs slows nothing down.\n"
    "\n"
    "  -a, --all    every job of yours queued or running now\n"
    "  --json       [{\"id\", \"state\", \"reason\"}] instead of the lines\n"
    "\n"
    "Exit status: 0 every job succeeded, 1 one did not, 2 no such job (or none\n"
    "in a range).\n",
    wait_exec,
    NULL,
};
