/*
 * runner.c - the engine's side of each job's supervisor: starting
 * gpuman-runner under the registry lock, noticing its end (and killing what
 * a dead runner left), and adopting live runners after a restart.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "broker.h"
#include "protocol.h"
#include "util.h"
#include "internal.h"

extern char **environ;

/* ---- small system helpers --------------------------------------------- */

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* A submitted job's argument vector from its JSON; NULL-terminated,
 * strings owned (free with free_strv). */
static char **json_argv(const char *text)
{
	json_t *a = json_loads(text, 0, NULL), *v;
	char **argv = NULL;
	size_t i;

	if (!json_is_array(a) || !json_array_size(a))
		goto done;
	argv = calloc(json_array_size(a) + 1, sizeof *argv);
	if (!argv)
		goto done;
	json_array_foreach(a, i, v)
	{
		argv[i] = strdup(json_is_string(v) ? json_string_value(v) : "");
		if (!argv[i]) {
			for (size_t k = 0; k < i; k++)
				free(argv[k]);
			free(argv);
			argv = NULL;
			goto done;
		}
	}
done:
	json_decref(a);
	return argv;
}

static void free_strv(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

static int strv_add(char ***v, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int strv_add(char ***v, size_t *n, const char *fmt, ...)
{
	char **grown = realloc(*v, (*n + 2) * sizeof *grown);
	va_list ap;
	int rc;

	if (!grown)
		return -1;
	*v = grown;
	va_start(ap, fmt);
	rc = vasprintf(&grown[*n], fmt, ap);
	va_end(ap);
	if (rc < 0)
		return -1;
	grown[++*n] = NULL;
	return 0;
}

/*
 * A job's runner died without its result, or its engine did too, and some
 * processes of the job may live on: those that lost their parent came to
 * us (a subreaper) if the runner was our child; others still hold the run
 * file, which every process of the job inherits.  Kill them all before the
 * job is recorded, so that it never runs again beside them (protocol.h).
 */
static void end_survivors(struct engine *e, struct slot *s, int64_t id, int fd)
{
	if (s && s->own) {
		pid_t *keep = calloc(e->nslots + 1, sizeof *keep);
		size_t n = 0;

		for (size_t i = 0; keep && i < e->nslots; i++)
			if (e->slots[i]->own && e->slots[i] != s)
				keep[n++] = e->slots[i]->runner;
		if (keep && jobtree_kill_children(keep, n))
			engine_say(e, "job %lld: killed the processes its dead runner left",
			           (long long)id);
		free(keep);
	}
	if (fd < 0)
		return;
	for (int i = 0; i < 250 && flock(fd, LOCK_EX | LOCK_NB) < 0; i++) {
		if (i == 0)
			engine_say(e, "job %lld: killing the processes its dead runner left",
			           (long long)id);
		jobtree_kill_holders(fd);
		usleep(20000);
	}
	flock(fd, LOCK_UN);
}

/*
 * The runner of s has exited (killed: by a signal, if known): record its
 * job's end.  A runner writes its result before it ends the job's leftover
 * processes, so a runner killed in between leaves a result and survivors:
 * they still hold the run file.
 */
void engine_runner_ended(struct engine *e, struct slot *s, int killed)
{
	struct protocol_result r;
	char path[4200];
	int fd;

	fd = -1;
	if (s->run_slot >= 0) {
		engine_run_path(e, s->run_slot, path, sizeof path);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0 || killed || engine_read_result(fd, &r) < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		end_survivors(e, s, s->id, fd);
	engine_record_end(e, s, s->id, fd);
	if (fd >= 0)
		close(fd);
	e->dirty = 1;
	engine_hold_slot_number(e, s->run_slot);
	engine_slot_remove(e, s);
}

/* ---- adoption after a restart ---------------------------------------- */

/*
 * Every job the store says is running and that we do not supervise: its
 * runner lives (run file locked: watch it), has finished (record its
 * result), or died (record that).
 */
void engine_adopt(struct engine *e)
{
	int64_t *ids = NULL;
	size_t n = 0;

	if (jobstore_ids(e->cfg->store, JOB_RUNNING, &ids, &n, e->err, sizeof e->err) != GM_OK) {
		e->failed = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char path[4200];
		struct job job;
		struct slot *s;
		int fd = -1, run_slot;

		if (engine_slot_by_id(e, ids[i]))
			continue;
		if (jobstore_get(e->cfg->store, ids[i], 0, &job, e->err, sizeof e->err) != GM_OK)
			continue;
		run_slot = job.run_slot;
		if (run_slot >= 0) {
			engine_run_path(e, run_slot, path, sizeof path);
			fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		}
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
			/* Alive.  Its pid is the runner's while the lock is held;
			 * checking the lock again after pidfd_open rules out a
			 * reused pid. */
			s = engine_slot_add(e, ids[i]);
			if (!s) { /* out of memory: look again next time */
				job_release(&job);
				close(fd);
				continue;
			}
			{
				s->run_slot = run_slot;
				s->attempt = job.attempts;
				s->runner = job.runner_pid;
				s->start_ms = job.start_ms;
				s->placed_free = job.placed_free_mib;
				s->has_peak = job.has_peak;
				s->peak = job.peak_mem_mib;
				s->samples = job.util_samples;
				s->util_sum = job.util_sum;
				engine_parse_gpus(s, job.gpus);
				s->pidfd = job.runner_pid > 0 ? pidfd_open_(job.runner_pid) : -1;
				if (s->pidfd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
					/* it ended meanwhile: record it below */
					engine_slot_remove(e, s);
					s = NULL;
				} else if (job.runner_pid <= 0 ||
				           !jobtree_holds(job.runner_pid, fd)) {
					/* The runner is gone (its pid, if any, is
					 * another process now) but the job's processes
					 * hold the file: end them, record it below. */
					engine_slot_remove(e, s);
					s = NULL;
					end_survivors(e, NULL, ids[i], fd);
				} else {
					engine_say(e, "job %lld: re-adopted its runner (pid %d)",
					           (long long)ids[i], job.runner_pid);
				}
			}
			if (s) {
				job_release(&job);
				close(fd);
				continue;
			}
		}
		job_release(&job);
		/* Ended, with or without a result. */
		engine_record_end(e, NULL, ids[i], fd);
		engine_hold_slot_number(e, run_slot);
		if (fd >= 0)
			close(fd);
	}
	free(ids);
}

/* An adopted runner without a pidfd: has its lock gone? */
int engine_adopted_ended(struct engine *e, struct slot *s)
{
	char path[4200];
	int fd, ended;

	if (s->run_slot < 0)
		return 1;
	engine_run_path(e, s->run_slot, path, sizeof path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	ended = flock(fd, LOCK_SH | LOCK_NB) == 0;
	close(fd);
	return ended;
}

/*
 * Start gpuman-runner for a claimed job (see runner/gpuman-runner.c for its
 * arguments).  posix_spawn (vfork and exec) rather than fork: see there.
 * Called by the registry under its lock, with the GPUs chosen and before
 * the lease is published, so that the lease names the runner from the
 * start; the runner is the ancestor of the job's processes.
 */
int engine_spawn_runner(void *data, const struct gm_lease *lease, pid_t *job_pid, char *err,
                        size_t len)
{
	static const int defaults[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGCHLD,
	                               SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM};
	struct launch *L = data;
	const struct job *job = L->job;
	struct child_env env = CHILD_ENV_INIT;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t set;
	char **args = NULL, **jargv = NULL, *uuids = NULL, where[300];
	size_t n = 0, ulen = 1;
	long long limit_s;
	pid_t pid;
	int rc = -1, erc;

	for (size_t i = 0; i < gm_lease_gpu_count(lease); i++)
		ulen += strlen(gm_lease_gpu_uuid(lease, i)) + 1;
	uuids = calloc(1, ulen);
	if (!uuids)
		goto oom;
	for (size_t i = 0; i < gm_lease_gpu_count(lease); i++) {
		if (i)
			strcat(uuids, ",");
		strcat(uuids, gm_lease_gpu_uuid(lease, i));
	}
	if (strv_add(&args, &n, "gpuman-runner") ||
	    strv_add(&args, &n, "--job=%lld", (long long)job->id) ||
	    strv_add(&args, &n, "--attempt=%d", job->attempts + 1) ||
	    strv_add(&args, &n, "--run-fd=%d", L->run_fd) ||
	    strv_add(&args, &n, "--go-fd=%d", L->go[0]) ||
	    strv_add(&args, &n, "--lease-fd=%d", lease->fd) ||
	    strv_add(&args, &n, "--lease-path=%s", lease->path) ||
	    strv_add(&args, &n, "--lease-id=%s", gm_lease_id(lease)) ||
	    strv_add(&args, &n, "--gpus=%s", gm_lease_indices(lease)) ||
	    strv_add(&args, &n, "--uuids=%s", uuids) ||
	    strv_add(&args, &n, "--cuda-visible=%s", gm_lease_cuda_visible(lease)) ||
	    strv_add(&args, &n, "--log=%s", L->log))
		goto oom;
	/* The runner keeps the time: the limit holds while the engine is away. */
	limit_s = engine_time_limit_s(L->e, job, where, sizeof where);
	if (limit_s > 0 && strv_add(&args, &n, "--time-limit=%lld", limit_s))
		goto oom;
	if (!lease->rec.exclusive &&
	    (strv_add(&args, &n, "--mem-fraction=%.6f", gm_lease_mem_fraction(lease)) ||
	     (L->no_framework_env && strv_add(&args, &n, "--no-framework-env"))))
		goto oom;
	if ((L->batch && strv_add(&args, &n, "--task")) ||
	    (job->cwd && strv_add(&args, &n, "--cwd=%s", job->cwd)))
		goto oom;
	if (job->argv) {
		jargv = json_argv(job->argv);
		if (!jargv || strv_add(&args, &n, "--"))
			goto oom;
		for (size_t i = 0; jargv[i]; i++)
			if (strv_add(&args, &n, "%s", jargv[i]))
				goto oom;
	} else if (strv_add(&args, &n, "--line=%s", job->command)) {
		goto oom;
	}
	if (job->env && child_env_init_block(&env, job->env, job->env_len) < 0)
		goto oom;

	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	/* The same descriptor number again: clears close-on-exec. */
	posix_spawn_file_actions_adddup2(&fa, L->run_fd, L->run_fd);
	posix_spawn_file_actions_adddup2(&fa, L->go[0], L->go[0]);
	posix_spawn_file_actions_adddup2(&fa, lease->fd, lease->fd);
	/* The runner's own signals wait, blocked, until its handlers are in
	 * place (it unblocks them then): a cancel in between would otherwise
	 * kill it before it could record anything ("runner died"). */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGALRM);
	posix_spawnattr_setsigmask(&attr, &set);
	sigemptyset(&set);
	for (size_t i = 0; i < ARRAY_SIZE(defaults); i++)
		sigaddset(&set, defaults[i]);
	posix_spawnattr_setsigdefault(&attr, &set);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	erc = posix_spawn(&pid, L->e->runner_path, &fa, &attr, args, job->env ? env.vars : environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (erc) {
		snprintf(err, len, "cannot start '%s': %s", L->e->runner_path, strerror(erc));
		str_copy(L->err, sizeof L->err, err);
		goto done;
	}
	/* Into the lease's cgroup while it waits for the go, with the job it
	 * will start; as its supervisor it leaves alive when the lease ends. */
	if (lease->broker && broker_fence(lease, pid, 1, err, len) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		str_copy(L->err, sizeof L->err, err);
		goto done;
	}
	L->runner = pid;
	*job_pid = pid;
	rc = 0;
	goto done;
oom:
	snprintf(err, len, "out of memory");
done:
	free_strv(args);
	free_strv(jargv);
	free(uuids);
	child_env_release(&env);
	return rc;
}
