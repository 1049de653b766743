/*
 * early.c - the runner of the queue's head job, started as the job waits
 * in the broker's line (acquire_opts' prespawn), so that the broker moves
 * it into the cgroup of its lease-to-be while it waits: a move waits for a
 * kernel grace period where cgroup v2 lacks favordynmods (gpuman-trust(7)),
 * and paid at the grant it lay between one job's end and the next one's
 * start.  At the grant it learns its lease (engine_spawn_runner).
 *
 * One at a time, as the engine keeps one place in the line.  Between
 * rounds the engine holds it (struct early_runner); during a placement its
 * launch does (try_place takes it, and gives it back if the job still
 * waits).  It holds the connection, so it ends before the place is given
 * up: the broker would otherwise keep a waiter nobody waits for.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "internal.h"

int engine_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* SIGKILL through the pidfd (its pid may be reaped and reused by then:
 * the engine's reap() waits for any child), then reap it if still ours. */
static void end_runner(pid_t pid, int pidfd)
{
	siginfo_t si;

	if (pidfd < 0)
		return;
#ifdef SYS_pidfd_send_signal
	syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
#endif
	(void)pid;
	while (waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	close(pidfd);
}

int engine_early_started(struct launch *L, pid_t pid)
{
	int fd = engine_pidfd_open(pid);

	if (fd < 0)
		return -1;
	L->early_pid = pid;
	L->early_pidfd = fd;
	return 0;
}

int engine_early_alive(const struct launch *L)
{
	struct pollfd p = {L->early_pidfd, POLLIN, 0};

	return L->early_pid > 0 && poll(&p, 1, 0) == 0;
}

void engine_early_taken(struct launch *L)
{
	close(L->early_pidfd);
	L->early_pidfd = -1;
	L->early_pid = 0;
}

void engine_prespawn_drop(void *data)
{
	struct launch *L = data;

	if (L->early_pid <= 0)
		return;
	end_runner(L->early_pid, L->early_pidfd);
	L->early_pid = 0;
	L->early_pidfd = -1;
	if (L->go[1] >= 0)
		close(L->go[1]);
	L->go[1] = -1;
}

void engine_early_drop(struct engine *e)
{
	struct early_runner *r = &e->early;

	if (r->pid <= 0)
		return;
	end_runner(r->pid, r->pidfd);
	close(r->go);
	close(r->run_fd);
	r->pid = 0;
}

int engine_early_take(struct engine *e, struct launch *L, int64_t job, int attempt)
{
	struct early_runner *r = &e->early;

	if (r->pid <= 0)
		return -1;
	if (r->job != job || r->attempt != attempt) {
		/* Another job heads the queue now (a cancel, a higher
		 * priority): that one's runner serves nobody. */
		engine_early_drop(e);
		return -1;
	}
	L->early_pid = r->pid;
	L->early_pidfd = r->pidfd;
	L->run_fd = r->run_fd;
	L->go[1] = r->go;
	r->pid = 0;
	return r->run_slot;
}

void engine_early_keep(struct engine *e, struct launch *L, int run_slot, int waits)
{
	struct early_runner *r = &e->early;

	if (L->early_pid <= 0)
		return;
	if (!waits || !engine_early_alive(L)) {
		engine_prespawn_drop(L);
		return;
	}
	r->job = L->job->id;
	r->attempt = L->job->attempts + 1;
	r->pid = L->early_pid;
	r->pidfd = L->early_pidfd;
	r->run_fd = L->run_fd;
	r->run_slot = run_slot;
	r->go = L->go[1];
	L->early_pid = 0;
	L->early_pidfd = -1;
	L->run_fd = L->go[1] = -1;
}
