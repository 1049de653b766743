/*
 * cmd_wait.c - `gpuman wait ID...`: block until the jobs have ended; exit 0
 * if all succeeded.  It sleeps on the queue directory's events file, which
 * the dispatcher rewrites when jobs end, and looks once a second whether a
 * dispatcher still lives (starting one if not).
 *
 * Each look is one read transaction over the jobs still pending only
 * (jobstore_ended): waiting on a thousand jobs costs the dispatcher nothing
 * and this process less at every event, rather than a thousand separate
 * reads of whole rows every time any job ends.
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

/* Drop from pending[0..*n) the ids in ended[0..count); keeps the order. */
static void drop_ended(int64_t *pending, size_t *n, const struct job_end *ended, size_t count)
{
	size_t k = 0, e = 0;

	/* Both are in pending's order: jobstore_ended keeps it. */
	for (size_t i = 0; i < *n; i++) {
		if (e < count && ended[e].id == pending[i]) {
			e++;
			continue;
		}
		pending[k++] = pending[i];
	}
	*n = k;
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
			json_array_append_new(arr, json_pack("{s:I, s:s, s:s?}", "id", (json_int_t)job.id,
							     "state", job_state_name(job.state), "reason",
							     job.reason));
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

static int wait_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = { CLI_COMMON_OPTIONS, { 0 } };
	struct queue q = { .store = NULL };
	char err[GM_ERRBUF_SIZE];
	int status, ifd = -1;
	size_t n, npending;
	int64_t *ids = NULL, *pending = NULL;

	status = cli_parse(cli, &cmd_wait, argc, argv, "", longopts, NULL, NULL);
	if (status != CLI_CONTINUE)
		return status;
	if (optind >= argc)
		return cli_usage(cli, "which jobs? (gpuman wait ID...)");
	n = npending = (size_t)(argc - optind);
	ids = calloc(n, sizeof *ids);
	pending = calloc(n, sizeof *pending);
	if (!ids || !pending) {
		status = cli_error(cli, EXIT_FAIL, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < n; i++)
		if ((ids[i] = pending[i] = parse_job_id(argv[optind + (int)i])) < 0) {
			status = cli_usage(cli, "'%s' is not a job id", argv[optind + (int)i]);
			goto done;
		}
	if (queue_open(cli, &q) != EXIT_OK) {
		status = EXIT_FAIL;
		goto done;
	}
	ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (ifd < 0 || inotify_add_watch(ifd, q.dir, IN_CLOSE_WRITE) < 0) {
		status = cli_error(cli, EXIT_FAIL, "cannot watch '%s': %s", q.dir, strerror(errno));
		goto done;
	}
	for (;;) {
		struct pollfd pfd = { ifd, POLLIN, 0 };
		struct job_end *ended = NULL;
		size_t nended = 0;
		char buf[4096];
		enum gm_err rc = jobstore_ended(q.store, pending, npending, &ended, &nended, err,
						sizeof err);

		if (rc != GM_OK) {
			status = cli_error(cli, rc == GM_ERR_NOT_FOUND ? EXIT_USAGE : EXIT_FAIL, "%s%s",
					   err, rc == GM_ERR_NOT_FOUND ? " in your queue" : "");
			goto done;
		}
		drop_ended(pending, &npending, ended, nended);
		free(ended);
		if (!npending) {
			status = report(cli, &q, ids, n);
			goto done;
		}
		if (queue_ensure_dispatcher(&q, err, sizeof err) < 0) {
			status = cli_error(cli, EXIT_FAIL, "cannot start the dispatcher: %s", err);
			goto done;
		}
		if (poll(&pfd, 1, 1000) > 0)
			while (read(ifd, buf, sizeof buf) > 0)
				;
	}
done:
	if (ifd >= 0)
		close(ifd);
	free(ids);
	free(pending);
	queue_close(&q);
	return status;
}

const struct cmd_entry cmd_wait = {
	"wait", "wait until queued jobs have ended",
	"usage: gpuman wait [--json] ID...\n"
	"\n"
	"Block until every job named has ended, then print one line per job (id,\n"
	"state and, unless done, why).  Starts the dispatcher if it has died.  Each\n"
	"time jobs end it reads, in one look at the store, only the jobs it still\n"
	"waits for: waiting on thousands of jobs slows nothing down.\n"
	"\n"
	"  --json       [{\"id\", \"state\", \"reason\"}] instead of the lines\n"
	"\n"
	"Exit status: 0 every job succeeded, 1 one did not, 2 no such job.\n",
	wait_exec,
};
