/*
 * cmd_wait.c - `gpuman wait ID...`: block until the jobs have ended; exit 0
 * if all succeeded.  It sleeps on the queue directory's events file, which
 * the dispatcher rewrites when jobs end, and looks once a second whether a
 * dispatcher still lives (starting one if not).
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

static int wait_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = { CLI_COMMON_OPTIONS, { 0 } };
	struct queue q;
	char err[GM_ERRBUF_SIZE];
	int status, ifd = -1, n = argc - 1;
	int64_t *ids = NULL;

	status = cli_parse(cli, &cmd_wait, argc, argv, "", longopts, NULL, NULL);
	if (status != CLI_CONTINUE)
		return status;
	if (optind >= argc)
		return cli_usage(cli, "which jobs? (gpuman wait ID...)");
	n = argc - optind;
	ids = calloc((size_t)n, sizeof *ids);
	if (!ids)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	for (int i = 0; i < n; i++)
		if ((ids[i] = parse_job_id(argv[optind + i])) < 0) {
			free(ids);
			return cli_usage(cli, "'%s' is not a job id", argv[optind + i]);
		}
	if (queue_open(cli, &q) != EXIT_OK) {
		free(ids);
		return EXIT_FAIL;
	}
	ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (ifd < 0 || inotify_add_watch(ifd, q.dir, IN_CLOSE_WRITE) < 0) {
		status = cli_error(cli, EXIT_FAIL, "cannot watch '%s': %s", q.dir, strerror(errno));
		goto done;
	}
	for (;;) {
		int pending = 0, failed = 0;
		struct pollfd pfd = { ifd, POLLIN, 0 };
		char buf[4096];

		for (int i = 0; i < n; i++) {
			struct job job;
			enum gm_err rc = jobstore_get(q.store, ids[i], 0, &job, err, sizeof err);

			if (rc == GM_ERR_NOT_FOUND) {
				status = cli_error(cli, EXIT_USAGE, "no job %lld in your queue",
						   (long long)ids[i]);
				goto done;
			}
			if (rc != GM_OK) {
				status = cli_error(cli, EXIT_FAIL, "%s", err);
				goto done;
			}
			pending += !job_state_final(job.state);
			failed += job.state != JOB_DONE;
			job_release(&job);
		}
		if (!pending) {
			json_t *arr = cli->json ? json_array() : NULL;

			for (int i = 0; i < n; i++) {
				struct job job;

				if (jobstore_get(q.store, ids[i], 0, &job, err, sizeof err) != GM_OK)
					continue;
				if (arr)
					json_array_append_new(
						arr, json_pack("{s:I, s:s, s:s?}", "id", (json_int_t)job.id,
							       "state", job_state_name(job.state),
							       "reason", job.reason));
				else
					printf("%lld %s%s%s\n", (long long)job.id, job_state_name(job.state),
				       job.reason && job.state != JOB_DONE ? ": " : "",
				       job.reason && job.state != JOB_DONE ? job.reason : "");
				job_release(&job);
			}
			if (arr)
				cli_print_json(arr);
			status = failed ? EXIT_FAIL : EXIT_OK;
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
	queue_close(&q);
	return status;
}

const struct cmd_entry cmd_wait = {
	"wait", "wait until queued jobs have ended",
	"usage: gpuman wait [--json] ID...\n"
	"\n"
	"Block until every job named has ended, then print one line per job (id,\n"
	"state and, unless done, why).  Starts the dispatcher if it has died.\n"
	"\n"
	"  --json       [{\"id\", \"state\", \"reason\"}] instead of the lines\n"
	"\n"
	"Exit status: 0 every job succeeded, 1 one did not, 2 no such job.\n",
	wait_exec,
};
