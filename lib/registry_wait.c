/*
 * registry_wait.c - the wait line: a waiter between attempts sleeps on
 * inotify until a lease ends or a ticket ahead of it goes, and only the
 * waiters that nobody ahead blocks try again.  See registry.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "caps.h"
#include "context.h"
#include "lease.h"
#include "parse.h"
#include "pick.h"
#include "proctree.h"
#include "policy.h"
#include "registry.h"
#include "snapshot.h"
#include "text.h"
#include "util.h"
#include "registry_impl.h"

/* ---- waiting ------------------------------------------------------------ */

void registry_ahead_release(struct ahead *ah)
{
	free(ah->names);
	free(ah->blocks);
	free(ah->pids);
	free(ah->uids);
	memset(ah, 0, sizeof *ah);
}

static void ahead_build(struct ahead *ah, const struct registry *reg,
                        const struct registry_view *view, const char *mine)
{
	const struct waiter_info *me = NULL;

	registry_ahead_release(ah);
	for (size_t w = 0; w < view->waiter_count; w++)
		if (!strcmp(view->waiters[w].name, mine))
			me = &view->waiters[w];
	ah->names = calloc(view->waiter_count + 1, sizeof *ah->names);
	ah->blocks = calloc(view->waiter_count + 1, sizeof *ah->blocks);
	ah->pids = calloc(view->waiter_count + 1, sizeof *ah->pids);
	ah->uids = calloc(view->waiter_count + 1, sizeof *ah->uids);
	if (!ah->names || !ah->blocks || !ah->pids || !ah->uids || !me) {
		registry_ahead_release(ah); /* no blocks: we have room, and look */
		return;
	}
	ah->mine_count = me->cand_count < 64 ? me->cand_count : 64;
	for (size_t w = 0; w < view->waiter_count; w++) {
		const struct waiter_info *wi = &view->waiters[w];
		uint64_t mask = 0;

		if (strcmp(wi->name, mine) >= 0)
			break;
		/* Capped now, it blocks nothing; when its user's lease ends, that
		 * close wakes us and the attempt sees it again. */
		for (size_t i = 0; i < ah->mine_count && !registry_waiter_capped(reg, view, wi);
		     i++)
			for (size_t c = 0; c < wi->cand_count; c++)
				if (!strcmp(me->cand[i], wi->cand[c]))
					mask |= 1ull << i;
		snprintf(ah->names[ah->count], sizeof ah->names[0], "%s", wi->name);
		ah->pids[ah->count] = wi->pid;
		ah->uids[ah->count] = wi->uid;
		ah->blocks[ah->count++] = mask;
	}
}

static void ahead_forget(struct ahead *ah, const char *name)
{
	for (size_t i = 0; i < ah->count; i++)
		if (!strcmp(ah->names[i], name)) {
			ah->count--;
			memmove(ah->names[i], ah->names[i + 1],
			        (ah->count - i) * sizeof ah->names[0]);
			memmove(&ah->blocks[i], &ah->blocks[i + 1],
			        (ah->count - i) * sizeof ah->blocks[0]);
			memmove(&ah->pids[i], &ah->pids[i + 1],
			        (ah->count - i) * sizeof ah->pids[0]);
			memmove(&ah->uids[i], &ah->uids[i + 1],
			        (ah->count - i) * sizeof ah->uids[0]);
			return;
		}
}

/* Could an attempt now give us anything, or do earlier waiters hold every
 * GPU we could use? */
static int ahead_leaves_room(const struct ahead *ah)
{
	uint64_t all = ah->mine_count >= 64 ? ~0ull : (1ull << ah->mine_count) - 1, held = 0;

	if (!ah->blocks)
		return 1;
	for (size_t i = 0; i < ah->count; i++)
		held |= ah->blocks[i];
	return (held & all) != all || ah->mine_count == 0;
}

int registry_ahead_room(const struct waiting *w)
{
	return ahead_leaves_room(&w->ah);
}

/* Without inotify (the kernel allows 128 instances per user), a waiter with
 * room re-checks this often. */
#define POLL_FALLBACK_MS 50

/*
 * Only the nearest waiters ahead matter: read the line backwards from our
 * ticket until those read hold back every GPU we may take.  In a line of
 * 500 behind one GPU that is one ticket, not 499.
 */
void registry_ahead_refresh(struct waiting *w)
{
	struct registry_scope scope = {w->mine, NULL, 1, 0, 0};
	struct registry_view view;

	if (registry_read_scoped(w->reg, &view, &scope, NULL, 0) == GM_OK) {
		ahead_build(&w->ah, w->reg, &view, w->mine);
		registry_view_release(&view);
	}
}

/* Stop waiting behind ticket k: a locker still waiting drops its shared
 * lock the moment it gets it; one done drops it now. */
static void behind_drop(struct waiting *w, size_t k)
{
	if (w->behind_lk[k] && locker_end(w->behind_lk[k]) >= 0)
		close(w->behind_fd[k]);
	w->behind_lk[k] = NULL;
	w->behind_fd[k] = -1;
	w->behind[k][0] = '\0';
	if (w->behind_stat[k] >= 0)
		close(w->behind_stat[k]);
	w->behind_stat[k] = -1;
}

static void behind_stop(struct waiting *w)
{
	behind_drop(w, 0);
	behind_drop(w, 1);
}

void registry_waiting_release(struct waiting *w)
{
	behind_stop(w);
	if (w->ifd >= 0)
		close(w->ifd);
	w->ifd = -1;
	registry_ahead_release(&w->ah);
}

/* Start a locker blocked on a shared lock of ticket i (of w->ah), done
 * when the ticket's holder leaves the line (served, gone or killed: its
 * exclusive lock goes with it), as slot k: 0, or -1 when the ticket is gone
 * already or no thread could be made. */
static int behind_start(struct waiting *w, size_t k, size_t i)
{
	char path[PATH_MAX + 130];
	int fd;

	snprintf(path, sizeof path, "%s/%s", w->reg->dir, w->ah.names[i]);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1; /* already gone */
	w->behind_lk[k] = locker_start(fd, LOCK_SH);
	if (!w->behind_lk[k]) {
		close(fd);
		return -1;
	}
	w->behind_fd[k] = fd;
	str_copy(w->behind[k], sizeof w->behind[k], w->ah.names[i]);
	w->behind_holder[k] = w->ah.pids[i];
	w->behind_uid[k] = w->ah.uids[i];
	snprintf(path, sizeof path, "/proc/%d/stat", w->ah.pids[i]);
	w->behind_stat[k] = open(path, O_RDONLY | O_CLOEXEC);
	return 0;
}

/* Whether the waiter behind[k] still runs and cannot come to hold nothing
 * back without leaving (an admin's cap on its user could). */
static int behind_holds(const struct waiting *w, size_t k)
{
	char buf[512];
	const char *p;
	int runs;

	if (!w->behind_lk[k])
		return 1;
	if (w->behind_stat[k] >= 0) {
		/* that process's, read again: gone, the read fails */
		p = proctree_stat_fd(w->behind_stat[k], buf, sizeof buf);
		runs = p && !strchr("TtZXx", p[0]);
	} else {
		runs = registry_holder_runs(w->behind_holder[k], w->behind_uid[k]);
	}
	return runs && !config_max_gpus(&w->reg->cfg, w->behind_uid[k], NULL, 0);
}

/*
 * A waiter blocked by two waiters ahead that each hold back all its GPUs
 * looks at them this seldom: either may stop (Ctrl-Z), and then holds
 * nothing back, but the other still does and wakes us when it leaves --
 * only both stopped keep us waiting for nothing.  Each look that finds
 * them as they were doubles the time to the next, up to
 * RECHECK_PAIR_MAX_MS: on this 2-core VM a wake costs a process about
 * 0.3-1 ms whatever it does, and 500 waiters looking every 10 s took 5 %
 * of a core.  A pair stopped long keeps us waiting this long at most.
 */
#define RECHECK_PAIR_MS 10000
#define RECHECK_PAIR_MAX_MS 120000

/*
 * Earlier waiters hold every GPU we could use: sleep, by lockers (threads)
 * blocked on their tickets' locks (so that the wait can time out and be
 * interrupted), until one of them leaves.  The lockers are kept from one
 * call to the next while they wait on the same tickets, so an idle line
 * starts and reads nothing.
 *
 * Whom: the nearest waiter that blocks us, and beyond it the nearest that
 * holds back all our GPUs by itself.  Both of them leave before we can
 * get anything, and they are served in line order, so only the two
 * waiters behind the head of the line wake when it moves, and only the
 * first of them reads the line (the other still waits behind its near
 * one).  Where each of the two holds back all our GPUs, a stop of one
 * changes nothing until the other leaves: they are looked at after
 * RECHECK_PAIR_MS, then less often.
 * Otherwise the nearest is looked at every RECHECK_MS: stopped, it holds
 * nothing back.
 *
 * Returns 1 when the line ahead may have changed (look again), 0 after a
 * look that found nothing changed, when only the far one of a pair left
 * (the near one still holds back all our GPUs), or when cancelled or past
 * the deadline (the caller looks).
 */
static int wait_behind(struct waiting *w, int64_t deadline, const struct acquire_opts *opts)
{
	uint64_t all = w->ah.mine_count >= 64 ? ~0ull : (1ull << w->ah.mine_count) - 1;
	int64_t now = monotonic_ms(), until;
	size_t near = w->ah.count, far, want[2];
	int pair;

	while (near-- > 0 && !w->ah.blocks[near])
		;
	if (near == (size_t)-1)
		return 1;
	for (far = near; far-- > 0;)
		if ((w->ah.blocks[far] & all) == all)
			break;
	want[0] = near;
	want[1] = far;
	pair = far != (size_t)-1 && (w->ah.blocks[near] & all) == all;
	/* A slot whose ticket changed starts afresh; the other keeps its
	 * locker. */
	for (size_t k = 0; k < 2; k++)
		if (want[k] == (size_t)-1
		        ? w->behind_lk[k] != NULL
		        : !w->behind_lk[k] || strcmp(w->behind[k], w->ah.names[want[k]]))
			behind_drop(w, k);
	for (size_t k = 0; k < 2; k++)
		if (want[k] != (size_t)-1 && !w->behind_lk[k] && behind_start(w, k, want[k]) < 0) {
			behind_stop(w);
			goto no_locker;
		}
	if (w->pair_ms < RECHECK_PAIR_MS)
		w->pair_ms = RECHECK_PAIR_MS;
	until = now + (pair ? w->pair_ms : RECHECK_MS);
	if (deadline >= 0 && deadline < until)
		until = deadline;
	while (now < until && !registry_cancelled(w, opts)) {
		/* Slots of no locker are ignored (fd -1), as poll() does. */
		struct pollfd pfd[3] = {
		    {w->behind_lk[0] ? locker_efd(w->behind_lk[0]) : -1, POLLIN, 0},
		    {w->behind_lk[1] ? locker_efd(w->behind_lk[1]) : -1, POLLIN, 0},
		    {w->cancel_fd, POLLIN, 0}};
		int n = poll(pfd, 3, (int)(until - now));

		if (n > 0 && (pfd[0].revents || pfd[1].revents)) {
			/* The far one of a pair gone (served, mostly: it was the
			 * head): the near one still holds back all our GPUs, so
			 * nothing is read; it is looked at every RECHECK_MS now.
			 * A read here cost every hand-off a second waiter's. */
			int far_only = pair && !pfd[0].revents;

			if (far_only)
				ahead_forget(&w->ah, w->behind[1]);
			for (size_t k = 0; k < 2; k++)
				if (pfd[k].revents)
					behind_drop(w, k);
			w->pair_ms = RECHECK_PAIR_MS;
			return !far_only;
		}
		if (n < 0 && errno != EINTR)
			return 1;
		now = monotonic_ms();
	}
	if (registry_cancelled(w, opts) || (deadline >= 0 && now >= deadline))
		return 0;
	if (!behind_holds(w, 0) || !behind_holds(w, 1)) {
		w->pair_ms = RECHECK_PAIR_MS;
		return 1;
	}
	if (pair)
		w->pair_ms =
		    w->pair_ms * 2 < RECHECK_PAIR_MAX_MS ? w->pair_ms * 2 : RECHECK_PAIR_MAX_MS;
	return 0;
no_locker:
	/* Gone already, or no thread to be had: look again shortly. */
	{
		struct pollfd pfd = {w->cancel_fd, POLLIN, 0};

		poll(&pfd, w->cancel_fd >= 0 ? 1 : 0, POLL_FALLBACK_MS);
	}
	return 1;
}

/*
 * Sleep until something that may let us in happens: a lease closed or
 * removed (release or holder death), an earlier waiter gone, or -- for a
 * waiter with room -- RECHECK_MS passed (NVML changes outside gpuman).
 * Returns GM_OK to try again, GM_ERR_TIMEOUT, GM_ERR_INTERRUPTED or
 * GM_ERR_IO.
 */
enum gm_err registry_wait_for_change(struct waiting *w, int64_t deadline,
                                     const struct acquire_opts *opts)
{
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	int64_t recheck_at = monotonic_ms() + RECHECK_MS;

	for (;;) {
		int64_t now = monotonic_ms(), until;
		struct pollfd pfd[2] = {{w->ifd, POLLIN, 0}, {w->cancel_fd, POLLIN, 0}};
		int wake = 0, n;
		ssize_t got;

		if (registry_cancelled(w, opts))
			return GM_ERR_INTERRUPTED;
		if (deadline >= 0 && now >= deadline)
			return GM_ERR_TIMEOUT;
		if (!ahead_leaves_room(&w->ah)) {
			if (wait_behind(w, deadline, opts))
				registry_ahead_refresh(w);
			continue;
		}
		behind_stop(w);
		if (w->ifd < 0 && !w->no_inotify) {
			/* Watch first, then try: no release can slip between. */
			w->ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
			if (w->ifd >= 0 && inotify_add_watch(w->ifd, w->reg->dir,
			                                     IN_CLOSE_WRITE | IN_DELETE) < 0) {
				close(w->ifd);
				w->ifd = -1;
			}
			w->no_inotify = w->ifd < 0;
			return GM_OK;
		}
		if (w->ifd < 0) {
			/* No inotify to be had: look again shortly. */
			n = poll(&pfd[1], 1, POLL_FALLBACK_MS);
			return registry_cancelled(w, opts) ? GM_ERR_INTERRUPTED : GM_OK;
		}
		until = recheck_at;
		if (deadline >= 0 && deadline < until)
			until = deadline;
		if (now >= until)
			return GM_OK;
		/* Slot 0 is ignored when negative, as poll() does with fds. */
		n = poll(pfd, 2, (int)(until - now));
		if (n < 0 && errno != EINTR)
			return GM_ERR_IO;
		if (n <= 0 || !pfd[0].revents)
			continue;
		got = read(w->ifd, buf, sizeof buf);
		for (char *p = buf; got > 0 && p < buf + got;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			if (ev->mask & IN_Q_OVERFLOW) {
				registry_ahead_refresh(w);
				wake = 1;
			} else if (ev->len && (registry_starts_with(ev->name, LEASE_PREFIX) ||
			                       registry_starts_with(ev->name, RESV_PREFIX))) {
				wake = 1;
			} else if (ev->len && registry_starts_with(ev->name, WAIT_PREFIX) &&
			           strcmp(ev->name, w->mine) < 0) {
				ahead_forget(&w->ah, ev->name);
				wake = 1;
			}
			p += sizeof *ev + ev->len;
		}
		if (wake && ahead_leaves_room(&w->ah))
			return GM_OK;
	}
}
