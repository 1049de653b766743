/*
 * cmd_cancel.c - `gpuman cancel ID...`: a queued job never starts; a running
 * one gets SIGTERM through its runner (SIGKILL 10 s later), which records it
 * as cancelled.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "cli.h"
#include "jobs.h"
#include "protocol.h"
#include "gpuman-internal.h"
#include "submit_slurm.h"

/* Signal a running job's runner, if it still lives.  Its run file is
 * locked exactly while it lives, which also proves its pid is not reused. */
static int signal_runner(const struct queue *q, const struct job *job, int sig)
{
	char path[PATH_MAX + 64];
	int fd, pidfd = -1, rc = -1;

	if (job->run_slot < 0)
		return -1;
	char dir[PATH_MAX + 32];

	snprintf(path, sizeof path, "%s/slot-%d.run",
	         queue_run_dir(q, job->machine, dir, sizeof dir), job->run_slot);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || job->runner_pid <= 0)
		goto done;
	if (flock(fd, LOCK_SH | LOCK_NB) == 0)
		goto done; /* it has ended */
#ifdef SYS_pidfd_open
	pidfd = (int)syscall(SYS_pidfd_open, job->runner_pid, 0);
	if (pidfd >= 0 && flock(fd, LOCK_SH | LOCK_NB) < 0)
		rc = (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
	else if (pidfd < 0)
#endif
		rc = kill(job->runner_pid, sig);
done:
	if (pidfd >= 0)
		close(pidfd);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* ended_ok: a job that has already ended is no error (cancel --all); 2:
 * nor is one that is not there (a range). */
static int cancel_one(struct cli *cli, struct queue *q, int64_t id, int ended_ok)
{
	char err[GM_ERRBUF_SIZE];
	struct job job;
	enum gm_err rc;

	for (int tries = 0; tries < 5; tries++) {
		rc = jobstore_get(q->store, id, 0, &job, err, sizeof err);
		if (rc == GM_ERR_NOT_FOUND && ended_ok == 2)
			return EXIT_USAGE; /* in a range: said once for the range */
		if (rc == GM_ERR_NOT_FOUND)
			return cli_error(cli, EXIT_USAGE, "no job %lld in your queue",
			                 (long long)id);
		if (rc != GM_OK)
			return cli_error(cli, EXIT_FAIL, "%s", err);
		if (job.state == JOB_QUEUED) {
			struct job upd = job;
			int changed = 0;

			upd.state = JOB_CANCELLED;
			upd.reason = (char *)"cancelled before it started";
			upd.end_ms = now_ms();
			rc = jobstore_update(q->store, &upd, JOB_QUEUED, job.attempts, &changed,
			                     err, sizeof err);
			upd.reason = NULL;
			job_release(&job);
			if (rc != GM_OK)
				return cli_error(cli, EXIT_FAIL, "%s", err);
			if (changed) {
				printf("%lld cancelled\n", (long long)id);
				return EXIT_OK;
			}
			continue; /* it has just started: cancel it running */
		}
		if (job.state == JOB_RUNNING) {
			int on_slurm = submit_slurm_cancel(q, &job, err, sizeof err);

			if (on_slurm) {
				job_release(&job);
				return on_slurm > 0 ? EXIT_OK
				                    : cli_error(cli, EXIT_FAIL, "%s", err);
			}
			if (signal_runner(q, &job, SIGTERM) == 0) {
				printf("%lld cancelling (running on GPU %s)\n", (long long)id,
				       job.gpus ? job.gpus : "?");
				job_release(&job);
				return EXIT_OK;
			}
			job_release(&job);
			usleep(20000); /* ending right now, or not started yet */
			continue;
		}
		const char *state = job_state_name(job.state);

		job_release(&job);
		if (ended_ok)
			return EXIT_OK;
		return cli_error(cli, EXIT_FAIL, "job %lld has already ended (%s)", (long long)id,
		                 state);
	}
	return cli_error(cli, EXIT_FAIL, "job %lld: could not cancel it, try again", (long long)id);
}

enum { OPT_ALL = OPT_CMD_BASE, OPT_USER, OPT_NAME };

/* Which live jobs: --all, or those of -u USER (Slurm's scancel -u; the
 * queue is its owner's, so USER can only be oneself) and of -n NAME. */
struct cancel_opts {
	int all;
	const char *user;
	const char *name;
};

static int cancel_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct cancel_opts *o = data;

	(void)cli;
	switch (opt) {
	case 'a':
	case OPT_ALL:
		o->all = 1;
		return CLI_CONTINUE;
	case 'u':
	case OPT_USER:
		o->user = arg;
		return CLI_CONTINUE;
	case 'n':
	case OPT_NAME:
		o->name = arg;
		return CLI_CONTINUE;
	}
	return -1;
}

/*
 * -u USER: one's own jobs (a name or a uid).  Root may name anyone: it
 * becomes that user (groups, gid, uid, HOME) for the rest of the command,
 * so that it opens their queue where their own gpuman keeps it by default
 * (~USER/.local/state/gpuman) with their rights, and signals their runners
 * as them.  Anyone else naming another user is refused: a queue is private
 * to its owner.
 */
static int take_user(struct cli *cli, const char *user)
{
	struct passwd *pw = getpwnam(user);
	char *end;
	unsigned long uid;

	if (!pw) {
		errno = 0;
		uid = strtoul(user, &end, 10);
		if (!*user || *end || errno || uid > 0xFFFFFFFFul)
			return cli_usage(cli, "-u '%s': no such user (give a user name or a uid)",
			                 user);
		pw = getpwuid((uid_t)uid);
	} else {
		uid = pw->pw_uid;
	}
	if ((uid_t)uid == geteuid())
		return CLI_CONTINUE;
	if (geteuid() != 0)
		return cli_usage(cli,
		                 "-u '%s': only your own jobs can be cancelled: each user's queue "
		                 "is private to them (they cancel theirs with gpuman cancel --all)",
		                 user);
	if (!pw || !pw->pw_dir || !*pw->pw_dir)
		return cli_usage(cli, "-u '%s': no home directory, so no queue to cancel in", user);
	if (initgroups(pw->pw_name, pw->pw_gid) < 0 ||
	    setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) < 0 ||
	    setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) < 0)
		return cli_error(cli, EXIT_FAIL, "-u '%s': cannot become that user: %s", user,
		                 strerror(errno));
	/* their queue, not the one root's own variables name */
	setenv("HOME", pw->pw_dir, 1);
	unsetenv("XDG_STATE_HOME");
	unsetenv("GPUMAN_QUEUE_DIR");
	return CLI_CONTINUE;
}

struct live_ids {
	int64_t *ids;
	size_t n, cap;
	const char *name; /* only jobs of this name; NULL: all */
};

static int note_live(void *data, const struct job *job)
{
	struct live_ids *l = data;

	if (l->name && (!job->name || strcmp(job->name, l->name)))
		return 0;
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 64;
		int64_t *grown = realloc(l->ids, ncap * sizeof *grown);

		if (!grown)
			return 1;
		l->ids = grown;
		l->cap = ncap;
	}
	l->ids[l->n++] = job->id;
	return 0;
}

/* Every queued job, then every running one: the queued are gone before
 * the end of a running job could let the dispatcher start one of them. */
static int cancel_all(struct cli *cli, struct queue *q, const char *name)
{
	static const unsigned passes[] = {JOB_STATES(JOB_QUEUED), JOB_STATES(JOB_RUNNING)};
	char err[GM_ERRBUF_SIZE];
	int worst = EXIT_OK, stopped = 0, any = 0;

	for (size_t p = 0; p < sizeof passes / sizeof *passes; p++) {
		struct live_ids l = {NULL, 0, 0, name};

		if (jobstore_each(q->store, passes[p], note_live, &l, &stopped, err, sizeof err) !=
		        GM_OK ||
		    stopped) {
			free(l.ids);
			return cli_error(cli, EXIT_FAIL, "%s", stopped ? "out of memory" : err);
		}
		for (size_t i = 0; i < l.n; i++) {
			/* One that ends meanwhile is no failure of --all. */
			int status = cancel_one(cli, q, l.ids[i], 1);

			if (status != EXIT_OK)
				worst = status;
		}
		any += l.n > 0;
		free(l.ids);
	}
	if (!any && name)
		printf("no queued or running job named '%s' to cancel\n", name);
	else if (!any)
		printf("no queued or running jobs to cancel\n");
	return worst;
}

static int cancel_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS,
	                                         {"all", no_argument, NULL, OPT_ALL},
	                                         {"user", required_argument, NULL, OPT_USER},
	                                         {"name", required_argument, NULL, OPT_NAME},
	                                         {0}};
	struct cancel_opts o = {0, NULL, NULL};
	struct queue q;
	char err[GM_ERRBUF_SIZE];
	int status, worst = EXIT_OK, all;

	status = cli_parse(cli, &cmd_cancel, argc, argv, "au:n:", longopts, cancel_option, &o);
	if (status != CLI_CONTINUE)
		return status;
	if (o.user && (status = take_user(cli, o.user)) != CLI_CONTINUE)
		return status;
	all = o.all || o.user || o.name;
	if (all && optind < argc)
		return cli_usage(cli, "%s or job ids, not both ('%s')",
		                 o.name   ? "-n"
		                 : o.user ? "-u"
		                          : "--all",
		                 argv[optind]);
	if (!all && optind >= argc)
		return cli_usage(cli,
		                 "which jobs? (gpuman cancel ID..., --all, -n NAME or -u USER)");
	for (int i = optind; i < argc; i++) {
		int64_t lo, hi;

		if (parse_id_range(argv[i], &lo, &hi) < 0)
			return cli_usage(cli, "'%s' is not a job id or range of ids (17, 17-36)",
			                 argv[i]);
	}
	if (cli_queue_open(cli, &q) != EXIT_OK)
		return EXIT_FAIL;
	if (all)
		worst = cancel_all(cli, &q, o.name);
	for (int i = optind; i < argc; i++) {
		int64_t lo = 0, hi = -1;
		int found = 0;

		parse_id_range(argv[i], &lo, &hi);
		/* A range (an array's ids): the ids in it that are not in the
		 * queue, or have ended, are no error. */
		for (int64_t id = lo; id <= hi; id++) {
			status = cancel_one(cli, &q, id, lo != hi ? 2 : 0);
			if (status == EXIT_USAGE && lo != hi)
				continue;
			found = 1;
			if (status == EXIT_USAGE || (status != EXIT_OK && worst != EXIT_USAGE))
				worst = status;
		}
		if (!found && lo != hi)
			worst = cli_error(cli, EXIT_USAGE, "no job of yours in %s", argv[i]);
	}
	queue_wake(&q);
	if (queue_has_work(&q) && queue_ensure_dispatcher(&q, err, sizeof err) < 0)
		cli_error(cli, 0, "warning: cannot start the dispatcher: %s", err);
	queue_close(&q);
	return worst;
}

/* The runner's grace period, in words. */
#define TEXT_(x) #x
#define TEXT(x) TEXT_(x)
#define GRACE_TEXT TEXT(PROTOCOL_CANCEL_GRACE_S)

const struct cmd_entry cmd_cancel = {
    "cancel",
    "cancel queued or running jobs",
    "usage: gpuman cancel ID|FIRST-LAST...\n"
    "       gpuman cancel --all | -n NAME | -u USER\n"
    "\n"
    "A queued job is removed from the queue (state cancelled).  A running job's\n"
    "processes get SIGTERM, and SIGKILL " GRACE_TEXT " seconds later if they are still there;\n"
    "it is recorded as cancelled with its exit status.\n"
    "\n"
    "FIRST-LAST: every job of yours in that range that has not ended (an\n"
    "array's ids, as submit --array prints them).\n"
    "\n"
    "  -a, --all        every queued job, then every running one\n"
    "  -n, --name NAME  every queued or running job named NAME (submit --name; an\n"
    "                   array's are NAME_<task>), as Slurm's scancel -n\n"
    "  -u, --user USER  every job of USER, as Slurm's scancel -u: USER is you (a\n"
    "                   name or uid); another user's queue is private to them,\n"
    "                   except to root, who cancels in USER's queue at its\n"
    "                   default place (~USER/.local/state/gpuman) as USER\n"
    "\n"
    "Exit status: 0 all cancelled, 1 one had already ended, 2 no such job.\n",
    cancel_exec,
    NULL,
};
