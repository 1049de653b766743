/*
 * cmd_logs.c - `gpuman logs [-f] ID`: a queued job's output (stdout and
 * stderr, as one log); -f follows it until the job ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "jobs.h"

enum { OPT_FOLLOW = OPT_CMD_BASE };

static int logs_option(struct cli *cli, int opt, const char *arg, void *data)
{
	(void)cli;
	(void)arg;
	if (opt != 'f' && opt != OPT_FOLLOW)
		return -1;
	*(int *)data = 1;
	return CLI_CONTINUE;
}

/* Copy what the log holds beyond *off to stdout. */
static void copy_new(const char *path, off_t *off)
{
	char buf[65536];
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_size < *off)
		*off = 0; /* started over (a new attempt) */
	while ((n = pread(fd, buf, sizeof buf, *off)) > 0) {
		if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
			break;
		*off += n;
	}
	fflush(stdout);
	close(fd);
}

static int logs_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_OPTIONS, { "follow", no_argument, NULL, OPT_FOLLOW }, { 0 }
	};
	struct queue q;
	struct job job = JOB_INIT;
	char err[GM_ERRBUF_SIZE], path[PATH_MAX + 64], dir[PATH_MAX + 32];
	int follow = 0, status, ifd = -1;
	int64_t id;
	off_t off = 0;

	status = cli_parse(cli, &cmd_logs, argc, argv, "f", longopts, logs_option, &follow);
	if (status != CLI_CONTINUE)
		return status;
	if (optind + 1 != argc)
		return cli_usage(cli, "which job? (gpuman logs [-f] ID)");
	id = parse_job_id(argv[optind]);
	if (id < 0)
		return cli_usage(cli, "'%s' is not a job id", argv[optind]);
	if (queue_open(cli, &q) != EXIT_OK)
		return EXIT_FAIL;
	if (jobstore_get(q.store, id, 0, &job, err, sizeof err) != GM_OK) {
		status = cli_error(cli, strncmp(err, "no job", 6) ? EXIT_FAIL : EXIT_USAGE, "%s", err);
		goto done;
	}
	queue_log_path(&q, &job, path, sizeof path);
	if (!job_state_final(job.state) && queue_ensure_dispatcher(&q, err, sizeof err) < 0)
		cli_error(cli, 0, "warning: cannot start the dispatcher: %s", err);
	if (follow) {
		ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
		if (ifd < 0 ||
		    inotify_add_watch(ifd, queue_path(&q, "logs", dir, sizeof dir),
				      IN_MODIFY | IN_CREATE | IN_CLOSE_WRITE) < 0 ||
		    inotify_add_watch(ifd, q.dir, IN_CLOSE_WRITE) < 0) {
			status = cli_error(cli, EXIT_FAIL, "cannot watch '%s': %s", q.dir,
					   strerror(errno));
			goto done;
		}
	} else if (job.state == JOB_QUEUED && access(path, F_OK) < 0) {
		cli_error(cli, 0, "job %lld has not started yet", (long long)id);
	}
	copy_new(path, &off);
	while (follow && !job_state_final(job.state)) {
		struct pollfd pfd = { ifd, POLLIN, 0 };
		char buf[4096];

		if (poll(&pfd, 1, 1000) > 0)
			while (read(ifd, buf, sizeof buf) > 0)
				;
		copy_new(path, &off);
		job_release(&job);
		if (jobstore_get(q.store, id, 0, &job, err, sizeof err) != GM_OK)
			break;
		if (!job_state_final(job.state) && queue_ensure_dispatcher(&q, err, sizeof err) < 0)
			break;
	}
	if (follow)
		copy_new(path, &off);
	status = EXIT_OK;
done:
	if (ifd >= 0)
		close(ifd);
	job_release(&job);
	queue_close(&q);
	return status;
}

const struct cmd_entry cmd_logs = {
	"logs", "a queued job's output",
	"usage: gpuman logs [-f] ID\n"
	"\n"
	"Print the output (stdout and stderr together) of job ID.  A job run more\n"
	"than once (--retries, out-of-memory requeues) has each attempt after a\n"
	"'--- gpuman: attempt N' line.\n"
	"\n"
	"  -f, --follow   keep printing as the job writes, until it ends\n",
	logs_exec,
};
