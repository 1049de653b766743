/*
 * cmd_dispatcher.c - `gpuman dispatcher --lock-fd=N DIR`, not for people:
 * the per-user queue's dispatcher, exec'd by queue_ensure_dispatcher()
 * (engine/queue.c) with its lock already locked on descriptor N.  It runs the
 * engine until the queue is empty, then exits.  Its messages go to
 * DIR/dispatcher.log.
 *
 * One runs per machine (GPUMAN_DISPATCHER_MACHINE, a key of
 * queue_machine_key): it places and runs only the jobs submitted for that
 * machine, in that machine's environment, whatever the environment of the
 * command that started it; the jobs themselves run with their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "engine.h"
#include "jobs.h"
#include "notify.h"
#include "gpuman-internal.h"
#include "submit_slurm.h"

static void stamp(char *buf, size_t len)
{
	time_t t = time(NULL);
	struct tm tm;

	strftime(buf, len, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
}

/*
 * The dispatcher stays resident while jobs are queued: drop the code pages
 * that starting it mapped (opening the store, loading NVML; the kernel maps
 * code 16 pages around each fault), so that only the code its loop runs
 * comes back.  Only r-xp mappings: code is never written, so it faults
 * back in unchanged from the page cache.
 */
static void trim_code_pages(void)
{
	FILE *maps = fopen("/proc/self/maps", "re");
	char line[512];

	if (!maps)
		return;
	while (fgets(line, sizeof line, maps)) {
		unsigned long lo, hi;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || strcmp(perms, "r-xp") ||
		    !strchr(line, '/'))
			continue;
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
	}
	fclose(maps);
}

/* After each round: tell the ends that --notify asked for.  A job is
 * marked told even when its program could not start (said in the log):
 * a missing notify-send must not keep the dispatcher alive for ever. */
static void tell_ends(void *data)
{
	struct queue *q = data;
	int64_t *ids = NULL;
	size_t n = 0;
	char err[GM_ERRBUF_SIZE], when[32];

	if (jobstore_notify_due(q->store, &ids, &n, err, sizeof err) != GM_OK) {
		stamp(when, sizeof when);
		fprintf(stderr, "%s dispatcher %d: %s\n", when, (int)getpid(), err);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct job job;

		if (jobstore_get(q->store, ids[i], 1, &job, err, sizeof err) == GM_OK) {
			if (notify_send(&job, err, sizeof err) < 0) {
				stamp(when, sizeof when);
				fprintf(stderr,
				        "%s dispatcher %d: job %lld: cannot tell its end: %s\n",
				        when, (int)getpid(), (long long)ids[i], err);
			}
			job_release(&job);
		}
		jobstore_set_notified(q->store, ids[i], NULL, 0);
	}
	free(ids);
}

/* The GPUs or the registry will not open: say so on the queued jobs, where
 * gpuman queue and gpuman wait show it, and in the log when that is news
 * (each gpuman wait tries again once a second). */
static void say_stalled(struct queue *q, const char *when, const char *why)
{
	char err[GM_ERRBUF_SIZE];
	int news;

	if (jobstore_set_stalled(q->store, why, &news, err, sizeof err) != GM_OK) {
		fprintf(stderr, "%s dispatcher %d: %s\n", when, (int)getpid(), err);
		news = 1;
	}
	if (news)
		fprintf(stderr, "%s dispatcher %d: cannot start: %s\n", when, (int)getpid(), why);
}

static int dispatcher_exec(struct cli *cli, int argc, char **argv)
{
	struct engine_config cfg;
	struct queue q;
	struct gm_context *ctx = NULL;
	struct registry *reg = NULL;
	char err[GM_ERRBUF_SIZE], runs[PATH_MAX + 32], logs[PATH_MAX + 32], events[PATH_MAX + 32],
	    when[32], pid[24];
	enum engine_result res;
	int lock_fd = -1, status = EXIT_FAIL;
	char *machine;

	if (argc != 3 || strncmp(argv[1], "--lock-fd=", 10))
		return cli_usage(cli, "this command is started by gpuman itself");
	lock_fd = atoi(argv[1] + 10);
	/* Ours already: a no-op that proves it. */
	if (lock_fd < 3 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0)
		return cli_error(cli, EXIT_FAIL, "the dispatcher lock is not ours");
	fcntl(lock_fd, F_SETFD, FD_CLOEXEC);
	snprintf(pid, sizeof pid, "%d\n", (int)getpid());
	if (ftruncate(lock_fd, 0) < 0 || pwrite(lock_fd, pid, strlen(pid), 0) < 0)
		cli_error(cli, 0, "warning: cannot write the pid into the lock file");
	setenv("GPUMAN_QUEUE_DIR", argv[2], 1);
	unsetenv(SUBMIT_SLURM_VAR); /* only a Slurm machine's key sets it */
	machine = getenv("GPUMAN_DISPATCHER_MACHINE");
	if (!machine || !(machine = strdup(machine)) || queue_machine_apply(machine) < 0)
		return cli_error(cli, EXIT_FAIL, "no machine (GPUMAN_DISPATCHER_MACHINE)");
	unsetenv("GPUMAN_DISPATCHER_MACHINE");
	if (cli_queue_open(cli, &q) != EXIT_OK) {
		free(machine);
		return EXIT_FAIL;
	}
	stamp(when, sizeof when);
	if (mkdir(queue_run_dir(&q, machine, runs, sizeof runs), 0700) < 0 && errno != EEXIST)
		snprintf(err, sizeof err, "'%.2048s': %s", runs, strerror(errno));
	else if (jobstore_set_machine(q.store, machine, err, sizeof err) == GM_OK)
		err[0] = '\0';
	if (err[0]) {
		fprintf(stderr, "%s dispatcher %d: cannot start: %s\n", when, (int)getpid(), err);
		goto done;
	}
	/* a Slurm machine's jobs go to sbatch: no GPUs of ours to open */
	if (!getenv(SUBMIT_SLURM_VAR) && (gm_open(&ctx, err, sizeof err) != GM_OK ||
	                                  registry_open(&reg, err, sizeof err) != GM_OK)) {
		say_stalled(&q, when, err);
		goto done;
	}
	if (jobstore_set_stalled(q.store, NULL, NULL, err, sizeof err) != GM_OK)
		fprintf(stderr, "%s dispatcher %d: warning: %s\n", when, (int)getpid(), err);
	trim_code_pages();
	memset(&cfg, 0, sizeof cfg);
	cfg.store = q.store;
	cfg.run_dir = runs;
	cfg.log_dir = queue_path(&q, "logs", logs, sizeof logs);
	cfg.ctx = ctx;
	cfg.reg = reg;
	cfg.sbatch_args = getenv(SUBMIT_SLURM_VAR);
	cfg.dispatcher_lock_fd = lock_fd;
	cfg.wake_dir = q.dir;
	cfg.wake_name = "wake";
	cfg.events_path = queue_path(&q, "events", events, sizeof events);
	cfg.log = stderr;
	cfg.round_done = tell_ends;
	cfg.round_data = &q;
	res = engine_run(&cfg, err, sizeof err);
	stamp(when, sizeof when);
	if (res == ENGINE_ERROR)
		fprintf(stderr, "%s dispatcher %d: stopped: %s\n", when, (int)getpid(), err);
	else
		status = EXIT_OK;
done:
	registry_close(reg);
	gm_close(ctx);
	queue_close(&q);
	free(machine);
	return status;
}

/* No summary: `gpuman --help` does not list it. */
const struct cmd_entry cmd_dispatcher = {
    "dispatcher",
    NULL,
    "usage: gpuman dispatcher (started by gpuman submit, queue, wait and logs)\n",
    dispatcher_exec,
    NULL,
};
