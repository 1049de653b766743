/*
 * cmd_logs.c - `gpuman logs [-f] ID`: a queued job's output (stdout and
 * stderr, as one log); -f follows it until the job ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "jobs.h"
#include "gpuman-internal.h"

enum { OPT_FOLLOW = OPT_CMD_BASE, OPT_TAIL };

struct logs_opts {
	int follow;
	long tail; /* last lines only; -1: the whole log */
};

static int logs_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct logs_opts *o = data;
	char *end;

	switch (opt) {
	case 'f':
	case OPT_FOLLOW:
		o->follow = 1;
		return CLI_CONTINUE;
	case OPT_TAIL:
		errno = 0;
		o->tail = strtol(arg, &end, 10);
		if (errno || end == arg || *end || o->tail < 0)
			return cli_usage(cli, "--tail '%s': give a number of lines (0 or more)",
			                 arg);
		return CLI_CONTINUE;
	default:
		return -1;
	}
}

/* Where the last `lines` lines of the file begin (a final line without a
 * newline counts), reading backwards from the end: a long log costs what
 * is printed. */
static off_t tail_offset(const char *path, long lines)
{
	char buf[65536];
	struct stat st;
	off_t pos, start = 0;
	long seen = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0 || st.st_size == 0)
		goto done;
	pos = st.st_size;
	start = pos;
	if (lines == 0)
		goto done;
	/* A trailing newline ends the last line, it does not start one. */
	if (pread(fd, buf, 1, pos - 1) == 1 && buf[0] == '\n')
		pos--;
	while (pos > 0) {
		size_t chunk = pos < (off_t)sizeof buf ? (size_t)pos : sizeof buf;
		ssize_t n = pread(fd, buf, chunk, pos - (off_t)chunk);

		if (n != (ssize_t)chunk)
			break;
		for (ssize_t i = n - 1; i >= 0; i--)
			if (buf[i] == '\n' && ++seen == lines) {
				start = pos - (off_t)chunk + i + 1;
				goto done;
			}
		pos -= (off_t)chunk;
	}
	start = 0; /* fewer lines than asked: all of it */
done:
	close(fd);
	return start;
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
	static const struct option longopts[] = {CLI_COMMON_OPTIONS,
	                                         {"follow", no_argument, NULL, OPT_FOLLOW},
	                                         {"tail", required_argument, NULL, OPT_TAIL},
	                                         {0}};
	struct logs_opts o = {0, -1};
	struct queue q;
	struct job job = JOB_INIT;
	char err[GM_ERRBUF_SIZE], path[PATH_MAX + 64], dir[PATH_MAX + 32],
	    said[GM_ERRBUF_SIZE + 256] = "";
	int status, ifd = -1;
	int64_t id;
	off_t off = 0;

	status = cli_parse(cli, &cmd_logs, argc, argv, "f", longopts, logs_option, &o);
	if (status != CLI_CONTINUE)
		return status;
	if (optind + 1 != argc)
		return cli_usage(cli, "which job? (gpuman logs [-f] [--tail N] ID)");
	id = parse_job_id(argv[optind]);
	if (id < 0)
		return cli_usage(cli, "'%s' is not a job id", argv[optind]);
	if (cli_queue_open(cli, &q) != EXIT_OK)
		return EXIT_FAIL;
	if (jobstore_get(q.store, id, 0, &job, err, sizeof err) != GM_OK) {
		status =
		    cli_error(cli, strncmp(err, "no job", 6) ? EXIT_FAIL : EXIT_USAGE, "%s", err);
		goto done;
	}
	queue_log_path(&q, &job, path, sizeof path);
	if (!job_state_final(job.state) && queue_ensure_dispatcher(&q, err, sizeof err) < 0)
		cli_error(cli, 0, "warning: cannot start the dispatcher: %s", err);
	if (o.follow) {
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
		job_tell_held(cli, &job, 1, said, sizeof said);
	}
	if (o.tail >= 0)
		off = tail_offset(path, o.tail);
	copy_new(path, &off);
	for (int64_t checked = monotonic_ms(); o.follow && !job_state_final(job.state);) {
		struct pollfd pfd = {ifd, POLLIN, 0};

		if (poll(&pfd, 1, 1000) > 0 && !queue_drain_events(ifd) &&
		    monotonic_ms() - checked < 1000)
			continue; /* only a dispatcher probe's close */
		copy_new(path, &off);
		job_release(&job);
		if (jobstore_get(q.store, id, 0, &job, err, sizeof err) != GM_OK)
			break;
		job_tell_held(cli, &job, 1, said, sizeof said);
		/* Once a second: the probe is itself an event on the directory. */
		if (monotonic_ms() - checked >= 1000) {
			checked = monotonic_ms();
			if (!job_state_final(job.state) &&
			    queue_ensure_dispatcher(&q, err, sizeof err) < 0)
				break;
		}
	}
	if (o.follow)
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
    "logs",
    "a queued job's output",
    "usage: gpuman logs [-f] [--tail N] ID\n"
    "\n"
    "Print the output (stdout and stderr together) of job ID.  A job run more\n"
    "than once (--retries, out-of-memory requeues) has each attempt after a\n"
    "'--- gpuman: attempt N' line.\n"
    "\n"
    "  -f, --follow       keep printing as the job writes, until it ends (and\n"
    "                     say what keeps it queued: the machine, or who holds\n"
    "                     the GPUs it waits for)\n"
    "  --tail N           only the last N lines (then, with -f, what follows)\n",
    logs_exec,
    NULL,
};
