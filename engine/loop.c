/*
 * loop.c - the engine's event loop (engine_run): rounds of placing and
 * committing, Ctrl-C and SIGTERM, runners' exits, registry and queue
 * changes, and the tick that samples the GPUs.
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
#include "protocol.h"
#include "util.h"
#include "internal.h"

/* End of a round: commit and go, then drop the run files of the recorded
 * jobs. */
static void commit_round(struct engine *e)
{
	int ok;

	engine_flush_accounting(e);
	ok = engine_commit_go(e) == 0;
	for (size_t i = 0; ok && i < e->nended; i++)
		engine_write_job_record(e, e->ended[i]);
	e->nended = 0;
	/* Jobs that waited for the ones that ended may start now (or were
	 * cancelled with them, by the store). */
	if (ok && e->ended_any && !e->cfg->request && e->deps_waiting)
		engine_queue_reload(e);
	if (ok && e->ended_any && e->cfg->events_path && touch_watched(e->cfg->events_path) < 0 &&
	    errno != ENOENT)
		engine_say(e, "warning: cannot write '%s': %s", e->cfg->events_path,
		           strerror(errno));
	e->ended_any = 0;
	if (ok && e->cfg->round_done)
		e->cfg->round_done(e->cfg->round_data);
}

/* ---- events ----------------------------------------------------------- */

static void reap(struct engine *e)
{
	pid_t pid;
	int ws;

	while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
		for (size_t i = 0; i < e->nslots; i++)
			if (e->slots[i]->own && e->slots[i]->runner == pid) {
				e->place->ended(e, e->slots[i], ws);
				break;
			}
	}
}

static void read_signals(struct engine *e)
{
	struct signalfd_siginfo si[8];
	ssize_t n = read(e->sfd, si, sizeof si);

	for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof si[0]; i++) {
		int sig = (int)si[i].ssi_signo;

		if (sig == SIGCHLD)
			continue; /* reaped below */
		if (!e->cfg->batch) {
			e->stop = 1; /* dispatcher: leave, the runners go on */
			continue;
		}
		e->interrupt++;
		e->counts.interrupting = 1;
		e->place->interrupt(e);
	}
	reap(e);
}

static void read_inotify(struct engine *e)
{
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t got;

	while ((got = read(e->ifd, buf, sizeof buf)) > 0) {
		for (char *p = buf; p < buf + got;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			if (ev->mask & IN_Q_OVERFLOW) {
				e->dirty = 1;
				if (e->wake_wd >= 0)
					engine_queue_reload(e);
			} else if (ev->wd == e->reg_wd && ev->len &&
			           (!strncmp(ev->name, "lease.", 6) ||
			            !strncmp(ev->name, "wait.", 5))) {
				e->dirty = 1;
			} else if (ev->wd == e->wake_wd && ev->len &&
			           !strcmp(ev->name, e->cfg->wake_name)) {
				engine_queue_reload(e);
				engine_adopt(e);
			}
			p += sizeof *ev + ev->len;
		}
	}
}

static int setup(struct engine *e)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, &e->oldmask) < 0)
		return -1;
	e->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	e->ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (e->sfd < 0 || e->ifd < 0)
		return -1;
	e->wake_wd = -1;
	if (e->cfg->wake_dir && e->cfg->wake_name &&
	    (e->wake_wd = inotify_add_watch(e->ifd, e->cfg->wake_dir, IN_CLOSE_WRITE)) < 0)
		return -1;
	return 0;
}

/* Dispatcher: nothing left.  Drop the lock, then look once more: a submit
 * that committed before our look found the lock held and counted on us. */
static int may_exit(struct engine *e)
{
	int live = 0;

	commit_round(e);
	if (e->cfg->dispatcher_lock_fd < 0)
		return 1;
	flock(e->cfg->dispatcher_lock_fd, LOCK_UN);
	/* One probe, however long the history (ends still to be told count
	 * as work: the next dispatcher tells them). */
	if (jobstore_has_live(e->cfg->store, &live, e->err, sizeof e->err) != GM_OK || !live)
		return 1;
	if (flock(e->cfg->dispatcher_lock_fd, LOCK_EX | LOCK_NB) < 0) {
		e->stop = 1; /* another dispatcher has started */
		return 1;
	}
	engine_queue_reload(e);
	engine_adopt(e);
	return 0;
}

enum engine_result engine_run(const struct engine_config *cfg, char *err, size_t len)
{
	struct engine eng, *e = &eng;
	size_t counts[JOB_STATE_COUNT];
	enum engine_result result = ENGINE_DONE;
	struct pollfd *pfd = NULL;

	memset(e, 0, sizeof *e);
	e->cfg = cfg;
	e->sfd = e->ifd = e->reg_wd = e->wake_wd = -1;
	e->counts.started_ms = monotonic_ms();
	e->place = cfg->slurm         ? &placement_slurm
	           : cfg->sbatch_args ? &placement_sbatch
	                              : &placement_local;
	if (setup(e) < 0) {
		gm_fail(GM_ERR_IO, err, len, "cannot watch for events: %s", strerror(errno));
		result = ENGINE_ERROR;
		goto done;
	}
	if (e->place->init(e, err, len) < 0) {
		result = ENGINE_ERROR;
		goto done;
	}
	e->tick_at = monotonic_ms() + TICK_MS;
	if (jobstore_counts(cfg->store, counts, err, len) != GM_OK) {
		result = ENGINE_ERROR;
		goto done;
	}
	e->counts.done = counts[JOB_DONE];
	e->counts.failed = counts[JOB_FAILED];
	e->counts.cancelled = counts[JOB_CANCELLED];
	e->counts.interrupted = counts[JOB_INTERRUPTED];
	e->counts.running = counts[JOB_RUNNING];
	e->place->adopt(e);
	engine_queue_reload(e);

	for (;;) {
		int64_t now = monotonic_ms();
		int timeout = -1, n, wake;
		size_t np = 0;

		if (e->failed)
			break;
		if ((e->qcount > e->qhead || e->nslots) && now >= e->tick_at) {
			if (e->place->tick)
				e->place->tick(e);
			if (!cfg->batch)
				engine_queue_reload(e);
			e->dirty = 1;
			e->tick_at = now + TICK_MS;
		}
		if (e->dirty && !e->interrupt && !e->stop)
			engine_schedule(e);
		commit_round(e);
		if (e->failed)
			break;
		e->counts.running = e->nslots;
		e->counts.queued = e->qcount - e->qhead;
		if (cfg->progress)
			cfg->progress(cfg->progress_data, &e->counts);
		if (e->stop) {
			result = ENGINE_STOPPED;
			break;
		}
		if (!e->nslots && (e->interrupt || e->closed || e->qcount == e->qhead)) {
			if (e->interrupt) {
				result = ENGINE_INTERRUPTED;
				break;
			}
			if (e->closed)
				break; /* what is left stays queued */
			if (may_exit(e)) {
				result = e->stop ? ENGINE_STOPPED : ENGINE_DONE;
				break;
			}
			continue;
		}
		if (e->qcount > e->qhead || e->nslots) {
			now = monotonic_ms();
			timeout = e->tick_at > now ? (int)(e->tick_at - now) : 0;
		}
		free(pfd);
		pfd = calloc(e->nslots + 3, sizeof *pfd);
		if (!pfd) {
			gm_fail(GM_ERR_NOMEM, e->err, sizeof e->err, "out of memory");
			e->failed = 1;
			break;
		}
		pfd[np++] = (struct pollfd){e->sfd, POLLIN, 0};
		pfd[np++] = (struct pollfd){e->ifd, POLLIN, 0};
		for (size_t i = 0; i < e->nslots; i++)
			if (e->slots[i]->pidfd >= 0)
				pfd[np++] = (struct pollfd){e->slots[i]->pidfd, POLLIN, 0};
		/* The broker answered the head job's place in its line (a
		 * Slurm allocation has no registry, hence no broker). */
		wake = e->cfg->reg && e->qcount > e->qhead && !e->interrupt && !e->stop
		           ? registry_wake_fd(e->cfg->reg)
		           : -1;
		pfd[np] = (struct pollfd){wake, POLLIN, 0};
		n = poll(pfd, np + 1, timeout);
		if (n < 0 && errno != EINTR) {
			gm_fail(GM_ERR_IO, e->err, sizeof e->err, "poll: %s", strerror(errno));
			e->failed = 1;
			break;
		}
		if (n <= 0)
			continue;
		if (pfd[0].revents)
			read_signals(e);
		if (pfd[1].revents)
			read_inotify(e);
		if (pfd[np].revents)
			e->dirty = 1;
		for (size_t p = 2; p < np; p++) {
			if (!pfd[p].revents)
				continue;
			for (size_t i = 0; i < e->nslots; i++)
				if (e->slots[i]->pidfd == pfd[p].fd) {
					e->place->ended(e, e->slots[i], 0);
					break;
				}
		}
	}
	if (e->failed) {
		commit_round(e);
		gm_fail(GM_ERR_IO, err, len, "%s", e->err);
		result = ENGINE_ERROR;
	}
done:
	if (e->place)
		e->place->release(e);
	for (size_t i = 0; i < e->nslots; i++)
		engine_slot_free(e->slots[i]);
	free(e->held_slots);
	free(e->ended);
	free(e->slots);
	free(e->queue);
	free(pfd);
	if (e->sfd >= 0)
		close(e->sfd);
	if (e->ifd >= 0)
		close(e->ifd);
	{
		/* Take what is still pending before unblocking: a last SIGCHLD,
		 * or a Ctrl-C that must not kill us before the summary. */
		sigset_t set;
		struct timespec zero = {0, 0};
		int sig;

		sigemptyset(&set);
		sigaddset(&set, SIGCHLD);
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGHUP);
		while ((sig = sigtimedwait(&set, NULL, &zero)) > 0)
			if (sig != SIGCHLD && result == ENGINE_DONE && cfg->batch)
				result = ENGINE_INTERRUPTED;
	}
	sigprocmask(SIG_SETMASK, &e->oldmask, NULL);
	return result;
}
