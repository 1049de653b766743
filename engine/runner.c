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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "broker.h"
#include "protocol.h"
#include "util.h"
#include "internal.h"

extern char **environ;

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
				s->pidfd =
				    job.runner_pid > 0 ? engine_pidfd_open(job.runner_pid) : -1;
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
 * gpuman-runner's arguments for L's job: the job's (head), then its
 * command (tail), around the lease's (lease_args).  0, -1 out of memory.
 */
static int job_args(const struct launch *L, int lease_fd, char ***args, size_t *n)
{
	const struct job *job = L->job;
	char where[300];
	long long limit_s = engine_time_limit_s(L->e, job, where, sizeof where);

	/* The runner keeps the time: the limit holds while the engine is away. */
	return strv_add(args, n, "gpuman-runner") ||
	               strv_add(args, n, "--job=%lld", (long long)job->id) ||
	               strv_add(args, n, "--attempt=%d", job->attempts + 1) ||
	               strv_add(args, n, "--run-fd=%d", L->run_fd) ||
	               strv_add(args, n, "--go-fd=%d", L->go[0]) ||
	               strv_add(args, n, "--lease-fd=%d", lease_fd) ||
	               strv_add(args, n, "--log=%s", L->log) ||
	               (limit_s > 0 && strv_add(args, n, "--time-limit=%lld", limit_s)) ||
	               (L->batch && strv_add(args, n, "--task")) ||
	               (job->cwd && strv_add(args, n, "--cwd=%s", job->cwd))
	           ? -1
	           : 0;
}

static int command_args(const struct job *job, char ***args, size_t *n)
{
	char **jargv = NULL;
	int rc = 0;

	if (!job->argv)
		return strv_add(args, n, "--line=%s", job->command) ? -1 : 0;
	jargv = json_argv(job->argv);
	if (!jargv || strv_add(args, n, "--"))
		rc = -1;
	for (size_t i = 0; rc == 0 && jargv[i]; i++)
		if (strv_add(args, n, "%s", jargv[i]))
			rc = -1;
	free_strv(jargv);
	return rc;
}

/* What the lease decides: its id, its GPUs, its memory share. */
static int lease_args(const struct launch *L, const struct gm_lease *lease, char ***args, size_t *n)
{
	size_t ulen = 1;
	char *uuids;
	int rc;

	for (size_t i = 0; i < gm_lease_gpu_count(lease); i++)
		ulen += strlen(gm_lease_gpu_uuid(lease, i)) + 1;
	if (!(uuids = calloc(1, ulen)))
		return -1;
	for (size_t i = 0; i < gm_lease_gpu_count(lease); i++) {
		if (i)
			strcat(uuids, ",");
		strcat(uuids, gm_lease_gpu_uuid(lease, i));
	}
	rc = strv_add(args, n, "--lease-path=%s", lease->path) ||
	             strv_add(args, n, "--lease-id=%s", gm_lease_id(lease)) ||
	             strv_add(args, n, "--gpus=%s", gm_lease_indices(lease)) ||
	             strv_add(args, n, "--uuids=%s", uuids) ||
	             strv_add(args, n, "--cuda-visible=%s", gm_lease_cuda_visible(lease)) ||
	             (!lease->rec.exclusive &&
	              (strv_add(args, n, "--mem-fraction=%.6f", gm_lease_mem_fraction(lease)) ||
	               (L->no_framework_env && strv_add(args, n, "--no-framework-env"))))
	         ? -1
	         : 0;
	free(uuids);
	return rc;
}

/*
 * posix_spawn (vfork and exec) gpuman-runner with args, holding L's run
 * file, its end of the go socket (made here) and lease_fd: its pid, or -1
 * with L->err said.
 */
static pid_t spawn(struct launch *L, char **args, int lease_fd)
{
	static const int defaults[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGCHLD,
	                               SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM};
	const struct job *job = L->job;
	struct child_env env = CHILD_ENV_INIT;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t set;
	pid_t pid = -1;
	int erc;

	if (job->env && child_env_init_block(&env, job->env, job->env_len) < 0) {
		snprintf(L->err, sizeof L->err, "out of memory");
		return -1;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	/* The same descriptor number again: clears close-on-exec. */
	posix_spawn_file_actions_adddup2(&fa, L->run_fd, L->run_fd);
	posix_spawn_file_actions_adddup2(&fa, L->go[0], L->go[0]);
	posix_spawn_file_actions_adddup2(&fa, lease_fd, lease_fd);
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
	child_env_release(&env);
	close(L->go[0]);
	L->go[0] = -1;
	if (erc) {
		snprintf(L->err, sizeof L->err, "cannot start '%.180s': %s", L->e->runner_path,
		         strerror(erc));
		return -1;
	}
	return pid;
}

/* The go socket: the engine's end L->go[1], the runner's L->go[0].  A
 * socket, not a pipe: a go or arguments sent to a runner that died fail
 * (protocol_send_strings), rather than raise SIGPIPE. */
static int go_socket(struct launch *L)
{
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, L->go) == 0)
		return 0;
	snprintf(L->err, sizeof L->err, "socketpair: %s", strerror(errno));
	L->go[0] = L->go[1] = -1;
	return -1;
}

/*
 * Start gpuman-runner for a claimed job (see runner/gpuman-runner.c for its
 * arguments), or give the lease to the one started as the job waited in
 * the broker's line (engine_prespawn_runner).  Called with the GPUs chosen
 * and before the lease is published (or the grant answered), so that the
 * lease names the runner from the start; the runner is the ancestor of the
 * job's processes.
 */
int engine_spawn_runner(void *data, const struct gm_lease *lease, pid_t *job_pid, char *err,
                        size_t len)
{
	struct launch *L = data;
	char **args = NULL;
	size_t n = 0;
	pid_t pid = -1;
	int placed = lease->placed;

	if (L->early_pid > 0) {
		/* Its lease's arguments, then (at the commit) the go. */
		if (lease_args(L, lease, &args, &n) < 0 || engine_early_alive(L) <= 0 ||
		    protocol_send_strings(L->go[1], args) < 0) {
			engine_prespawn_drop(L); /* another, as without */
		} else {
			pid = L->early_pid;
			engine_early_taken(L);
		}
		free_strv(args);
		args = NULL;
		n = 0;
	}
	if (pid < 0) {
		placed = 0;
		if ((L->go[1] < 0 && go_socket(L) < 0) || job_args(L, lease->fd, &args, &n) < 0 ||
		    lease_args(L, lease, &args, &n) < 0 || command_args(L->job, &args, &n) < 0) {
			if (!L->err[0])
				snprintf(L->err, sizeof L->err, "out of memory");
			goto done;
		}
		pid = spawn(L, args, lease->fd);
		if (pid < 0)
			goto done;
	}
	/* Into the lease's cgroup while it waits for the go, with the job it
	 * will start; as its supervisor it leaves alive when the lease ends.
	 * One placed as it waited is there already. */
	if (lease->broker && !placed && broker_fence(lease, pid, 1, err, len) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		str_copy(L->err, sizeof L->err, err);
		goto done;
	}
	L->runner = pid;
	*job_pid = pid;
done:
	free_strv(args);
	if (L->runner <= 0 && L->err[0])
		snprintf(err, len, "%s", L->err);
	return L->runner > 0 ? 0 : -1;
}

/*
 * acquire_opts' prespawn: the runner of L's job, started as the job waits
 * in the broker's line, holding fd (the connection: the lease once
 * granted); the broker places it in the cgroup of the lease-to-be, and its
 * lease's arguments follow at the grant.  Its pid, or -1.
 */
pid_t engine_prespawn_runner(void *data, int fd)
{
	struct launch *L = data;
	char **args = NULL;
	size_t n = 0;
	pid_t pid = -1;

	if (go_socket(L) == 0 && job_args(L, fd, &args, &n) == 0 &&
	    strv_add(&args, &n, "--late") == 0 && command_args(L->job, &args, &n) == 0)
		pid = spawn(L, args, fd);
	free_strv(args);
	if (pid > 0 && engine_early_started(L, pid) == 0)
		return pid;
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	if (L->go[1] >= 0)
		close(L->go[1]);
	L->go[0] = L->go[1] = -1;
	L->err[0] = '\0'; /* the grant starts one as without */
	return -1;
}
