/*
 * cmd_queue.c - `gpuman queue [--all | --state S] [--clear] [--json]`: the
 * user's queued and running jobs (with --all, finished ones too), with where
 * they run and what they used; --clear forgets finished jobs.
 *
 * Jobs are streamed from the store one row at a time, and the default
 * listing asks the store only for live states (an index): its cost is what
 * is queued and running, not the history.
 */
#include <jansson.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "jobs.h"
#include "gpuman-internal.h"
#include "protocol.h"

enum { OPT_ALL = OPT_CMD_BASE, OPT_STATE, OPT_CLEAR, OPT_USER };

struct queue_opts {
	unsigned states; /* JOB_STATES set; 0: every job */
	int clear;
	const char *user; /* -u: a user's name or uid, or "all"; NULL: mine */
};

/* "queued,running" into a set of states; -1 naming the culprit if bad. */
static int parse_states(struct cli *cli, const char *arg, unsigned *states)
{
	char *copy = strdup(arg), *save = NULL;
	int rc = 0;

	if (!copy)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	*states = 0;
	for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		int s = job_state_parse(w);

		if (s < 0) {
			rc = cli_usage(cli,
			               "--state '%s': no such state (use queued, running, done, "
			               "failed, cancelled, interrupted or timeout)",
			               w);
			break;
		}
		*states |= JOB_STATES(s);
	}
	if (!rc && !*states)
		rc = cli_usage(cli, "--state '%s': name a state", arg);
	free(copy);
	return rc ? rc : CLI_CONTINUE;
}

/* -u WHO: "all" sets *all; another user than me goes to other (empty: me).
 * A user that does not exist is a usage error. */
static int which_user(struct cli *cli, const char *who, char *other, size_t len, int *all)
{
	struct passwd *pw;
	char *end;
	unsigned long uid;

	if (!strcmp(who, "all")) {
		*all = 1;
		return CLI_CONTINUE;
	}
	pw = getpwnam(who);
	if (!pw && *who && (uid = strtoul(who, &end, 10), !*end))
		pw = getpwuid((uid_t)uid);
	if (!pw)
		return cli_usage(cli, "-u '%s': no such user (a name, a uid, or all)", who);
	if (pw->pw_uid != geteuid())
		snprintf(other, len, "%s", pw->pw_name);
	return CLI_CONTINUE;
}

static int queue_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct queue_opts *o = data;

	switch (opt) {
	case 'a':
	case OPT_ALL:
		o->states = 0;
		return CLI_CONTINUE;
	case OPT_STATE:
		return parse_states(cli, arg, &o->states);
	case OPT_CLEAR:
		o->clear = 1;
		return CLI_CONTINUE;
	case 'u':
	case OPT_USER:
		o->user = arg;
		return CLI_CONTINUE;
	default:
		return -1;
	}
}

struct lister {
	struct cli *cli;
	struct queue *q;
	int64_t now;
	size_t shown;
};

/* An array task without a name: <array>_<task>, as Slurm writes it. */
static const char *array_name(char *buf, size_t len, const struct job *j)
{
	if (j->array_task < 0)
		return "-";
	snprintf(buf, len, "%lld_%d", (long long)j->array_of, j->array_task);
	return buf;
}

static int print_row(void *data, const struct job *j)
{
	struct lister *l = data;
	struct cli *cli = l->cli;
	char dur[32], peak[32], util[16], cmd[CLI_SAFE_SIZE], why[CLI_SAFE_SIZE],
	    name[CLI_SAFE_SIZE], where[160], task[48];
	const char *color = j->state == JOB_FAILED    ? c_red(cli)
	                    : j->state == JOB_RUNNING ? c_green(cli)
	                    : j->state == JOB_DONE    ? ""
	                                              : c_yellow(cli);

	if (!l->shown++)
		printf("%s%6s  %-11s %-5s %9s %6s %5s  %-12s %s%s\n", c_bold(cli), "ID", "STATE",
		       "GPU", "TIME", "PEAK", "UTIL", "NAME", "COMMAND", c_reset(cli));
	if (j->state == JOB_QUEUED)
		fmt_duration(dur, sizeof dur, l->now - j->submit_ms);
	else if (j->state == JOB_RUNNING)
		fmt_duration(dur, sizeof dur, l->now - j->start_ms);
	else
		fmt_duration(dur, sizeof dur,
		             j->start_ms && j->end_ms ? j->end_ms - j->start_ms : -1);
	printf("%6lld  %s%-11s%s %-5s %9s %6s %5s  %-12s %s\n", (long long)j->id, color,
	       job_state_name(j->state), c_reset(cli),
	       j->state == JOB_QUEUED ? "-" : job_where(j, where, sizeof where), dur,
	       fmt_peak(peak, sizeof peak, j), fmt_util(util, sizeof util, j),
	       j->name ? cli_safe(name, j->name) : array_name(task, sizeof task, j),
	       cli_safe(cmd, j->command));
	if (j->reason && (j->state != JOB_DONE || j->ooms))
		printf("%6s  %s%s%s\n", "", c_dim(cli), cli_safe(why, j->reason), c_reset(cli));
	else if (j->state == JOB_QUEUED && j->after)
		printf("%6s  %sstarts after job%s %s has succeeded%s\n", "", c_dim(cli),
		       strchr(j->after, ',') ? "s" : "", j->after, c_reset(cli));
	if (!job_state_final(j->state) && j->time_limit_s > 0) {
		char limit[32];

		protocol_format_limit(j->time_limit_s, limit, sizeof limit);
		printf("%6s  %stime limit %s%s\n", "", c_dim(cli), limit, c_reset(cli));
	}
	return 0;
}

/* One element of the --json array, indented as one dump of the whole array
 * would be, so that the output is the same while memory stays flat. */
static int print_json_row(void *data, const struct job *j)
{
	struct lister *l = data;
	char log[PATH_MAX + 64];
	json_t *o = job_json(j, queue_log_path(l->q, j, log, sizeof log), 0);
	char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	json_decref(o);
	if (!text)
		return -1;
	fputs(l->shown++ ? ",\n  " : "\n  ", stdout);
	for (const char *p = text; *p; p++) {
		putchar(*p);
		if (*p == '\n')
			fputs("  ", stdout);
	}
	free(text);
	return 0;
}

static int clear_history(struct cli *cli, struct queue *q)
{
	char err[GM_ERRBUF_SIZE];
	size_t n = 0;

	if (queue_prune(q, INT64_MAX, &n, err, sizeof err) < 0)
		return cli_error(cli, EXIT_FAIL, "%s", err);
	if (cli->json)
		return cli_print_json(json_pack("{s:I}", "cleared", (json_int_t)n));
	printf("%zu finished job%s cleared\n", n, n == 1 ? "" : "s");
	return EXIT_OK;
}

static int queue_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS,
	                                         {"all", no_argument, NULL, OPT_ALL},
	                                         {"state", required_argument, NULL, OPT_STATE},
	                                         {"clear", no_argument, NULL, OPT_CLEAR},
	                                         {"user", required_argument, NULL, OPT_USER},
	                                         {0}};
	struct queue_opts o = {JOB_STATES_LIVE, 0, NULL};
	char other[64] = "";
	int all = 0;
	struct queue q;
	struct lister l;
	char err[GM_ERRBUF_SIZE];
	int status, stopped = 0;
	enum gm_err rc;

	status = cli_parse(cli, &cmd_queue, argc, argv, "au:", longopts, queue_option, &o);
	if (status != CLI_CONTINUE)
		return status;
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	if (o.user) {
		status = which_user(cli, o.user, other, sizeof other, &all);
		if (status != CLI_CONTINUE)
			return status;
		if (o.clear)
			return cli_usage(cli, "--clear forgets your own jobs only: leave out -u");
		if (other[0])
			return queue_show_others(cli, other, (unsigned)geteuid());
	}
	if (cli_queue_open(cli, &q) != EXIT_OK)
		return EXIT_FAIL;
	if (o.clear) {
		status = clear_history(cli, &q);
		goto done;
	}
	if (queue_has_work(&q) && queue_ensure_dispatcher(&q, err, sizeof err) < 0)
		cli_error(cli, 0, "warning: cannot start the dispatcher: %s", err);
	l = (struct lister){cli, &q, now_ms(), 0};
	if (cli->json && all)
		fputs("{\"jobs\": ", stdout);
	else if (all)
		printf("%syour queue:%s\n", c_bold(cli), c_reset(cli));
	if (cli->json) {
		fputs("[", stdout);
		rc =
		    jobstore_each(q.store, o.states, print_json_row, &l, &stopped, err, sizeof err);
		fputs(l.shown ? "\n]\n" : "]\n", stdout);
	} else {
		rc = jobstore_each(q.store, o.states, print_row, &l, &stopped, err, sizeof err);
		if (rc == GM_OK && !l.shown)
			printf(o.states == JOB_STATES_LIVE
			           ? "no queued or running jobs (gpuman queue --all shows "
			             "finished ones)\n"
			           : "no jobs\n");
	}
	if (rc != GM_OK)
		status = cli_error(cli, EXIT_FAIL, "%s", err);
	else if (stopped)
		status = cli_error(cli, EXIT_FAIL, "out of memory");
	else
		status = EXIT_OK;
	if (status == EXIT_OK && all) {
		if (cli->json)
			fputs(", \"others\": ", stdout);
		else
			printf("\n%sother users:%s\n", c_bold(cli), c_reset(cli));
		fflush(stdout);
		status = queue_show_others(cli, NULL, (unsigned)geteuid());
		if (cli->json)
			fputs("}\n", stdout);
	}
done:
	queue_close(&q);
	return status;
}

const struct cmd_entry cmd_queue = {
    "queue",
    "your queued and running jobs",
    "usage: gpuman queue [--all | --state STATE[,STATE]] [-u USER|all] [--json]\n"
    "       gpuman queue --clear\n"
    "\n"
    "List your queued and running jobs: id, state, GPUs (NVML indices), time\n"
    "waiting or running, peak GPU memory and mean utilization of its GPUs\n"
    "(sampled about once a second from NVML, for the job's own processes; '-'\n"
    "when it was never sampled), its name (submit --name) and the command.\n"
    "\n"
    "  -a, --all       finished jobs too (done, failed, cancelled), with the reason\n"
    "  --state LIST    only jobs in these states: queued, running, done, failed,\n"
    "                  cancelled, interrupted, timeout (comma-separated)\n"
    "  --clear         forget every finished job and delete its log; queued and\n"
    "                  running jobs stay\n"
    "  -u, --user USER another user's running jobs and waiting requests, as\n"
    "                  'gpuman status' shows them to everyone (their queue is\n"
    "                  private: only they can read it); all: your queue, then\n"
    "                  every other user's (--json: {\"jobs\": [...], \"others\": [...]})\n"
    "  --json          a JSON array of jobs, oldest first; each has id, state, name,\n"
    "                  priority, after ([ids]), notify, time_limit_s, array_task,\n"
    "                  command, argv, cwd, node\n"
    "                  (Slurm), gpus ([{index, uuid}]), submit_ms,\n"
    "                  start_ms, end_ms, duration_ms, exit_status, reason, attempts,\n"
    "                  oom_requeues, peak_mem_mib, mean_util_pct, util_samples, log\n"
    "                  (null: unknown); with --clear {\"cleared\": N}\n"
    "\n"
    "Listing costs what is listed: the default view reads only queued and\n"
    "running jobs, however long the history.  Starts the dispatcher if jobs\n"
    "wait and none runs.\n",
    queue_exec,
    NULL,
};
