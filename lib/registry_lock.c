/*
 * registry_lock.c - the registry lock, an flock of the state directory
 * itself, which a thread waits for while the caller watches the holder and
 * gives up, naming it, only when it is provably stuck.  See registry.h.
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
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
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

/* ---- the registry lock -------------------------------------------------- */

/*
 * Anyone who can open the state directory can flock it, so a holder may be
 * hostile or hung.  A waiter waits in the kernel's queue for as long as the
 * holder gets on with it -- slow is not stuck: 200 launches at once on a
 * loaded machine wait seconds behind each other -- and gives up only on a
 * holder that provably is not getting on: stopped, ended (its descriptor
 * living on in another process), asleep without using the CPU, or holding
 * it far longer than any gpuman does.  Whoever keeps it waiting for
 * seconds is named.
 */
#define LOCK_QUIET_MS 1000  /* the usual wait: nothing to look at yet */
#define LOCK_CHECK_MS 500   /* then, how often a waiter looks at the holder */
#define LOCK_REPORT_MS 2000 /* one holder this long: name it */
#define LOCK_STUCK_MS 5000  /* stopped, or ended, this long: stuck */
#define LOCK_IDLE_MS 10000  /* asleep without CPU time this long: stuck */
/* gpuman holds the lock to read a few files and NVML and to fork: a
 * fraction of a second.  One holder this long is stuck however busy. */
#define LOCK_HOLD_MAX_MS 60000

/*
 * A thread blocked in flock(2) on a descriptor of its own (registry_impl.h):
 * the kernel, not a timer, does the waiting, and the caller stays free to
 * watch the holder, the deadline and cancellation.  If the caller gives up
 * first, the thread drops the lock the moment it gets it.  A thread, not a
 * child: on this 2-core VM a fork of gpuman cost 1.5-2 ms of CPU, and a
 * waiter of the registry watched two tickets, again after every move of
 * the line.
 */
enum { LOCKER_WAITING, LOCKER_GOT, LOCKER_FAILED, LOCKER_ABANDONED };

struct locker {
	int fd;    /* its own open file description */
	int how;   /* LOCK_EX or LOCK_SH */
	int efd;   /* eventfd, readable once the thread is done */
	int state; /* LOCKER_*, atomic */
	int err;   /* errno of a failed flock */
	int refs;  /* atomic: the thread and the caller */
};

static void locker_unref(struct locker *lk)
{
	if (__atomic_sub_fetch(&lk->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		if (lk->efd >= 0)
			close(lk->efd);
		free(lk);
	}
}

static void *locker_main(void *arg)
{
	struct locker *lk = arg;
	int expected = LOCKER_WAITING, got, rc;
	uint64_t one = 1;

	while ((rc = flock(lk->fd, lk->how)) < 0 && errno == EINTR)
		;
	lk->err = rc < 0 ? errno : 0;
	got =
	    __atomic_compare_exchange_n(&lk->state, &expected, rc < 0 ? LOCKER_FAILED : LOCKER_GOT,
	                                0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	if (got) {
		if (write(lk->efd, &one, sizeof one) < 0)
			lk->err = errno;
	} else {
		close(lk->fd); /* abandoned: the lock goes with the descriptor */
	}
	locker_unref(lk);
	return NULL;
}

/* Asked to stop: a flag set by a signal handler, or gm_cancel(). */
int registry_cancelled(const struct waiting *w, const struct acquire_opts *opts)
{
	struct pollfd pfd = {w->cancel_fd, POLLIN, 0};

	if (opts && opts->interrupted && *opts->interrupted)
		return 1;
	return w->cancel_fd >= 0 && poll(&pfd, 1, 0) > 0;
}

struct locker *locker_start(int fd, int how)
{
	struct locker *lk = calloc(1, sizeof *lk);
	pthread_attr_t attr;
	pthread_t thread;
	sigset_t all, old;
	int perr;

	if (!lk)
		return NULL;
	lk->fd = fd;
	lk->how = how;
	lk->refs = 2;
	lk->state = LOCKER_WAITING;
	lk->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (lk->efd < 0) {
		free(lk);
		return NULL;
	}
	/* The thread takes no signal: the caller's handlers run in the
	 * caller's thread and interrupt its poll. */
	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	perr = pthread_create(&thread, &attr, locker_main, lk);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (perr) {
		close(lk->efd);
		free(lk);
		return NULL;
	}
	return lk;
}

int locker_efd(const struct locker *lk)
{
	return lk->efd;
}

int locker_done(const struct locker *lk)
{
	return __atomic_load_n(&lk->state, __ATOMIC_ACQUIRE) != LOCKER_WAITING;
}

int locker_end(struct locker *lk)
{
	int expected = LOCKER_WAITING, state;

	if (__atomic_compare_exchange_n(&lk->state, &expected, LOCKER_ABANDONED, 0,
	                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		locker_unref(lk); /* the thread closes the descriptor */
		return -1;
	}
	state = __atomic_load_n(&lk->state, __ATOMIC_ACQUIRE);
	if (state == LOCKER_FAILED)
		errno = lk->err;
	locker_unref(lk);
	return state == LOCKER_GOT ? 1 : 0;
}

/* The pid that took an flock on the inode (dev, ino), from /proc/locks;
 * 0 if none is shown. */
static int lock_holder_pid(dev_t dev, ino_t ino)
{
	FILE *f = fopen("/proc/locks", "re");
	char line[256];
	int pid = 0;

	if (!f)
		return 0;
	while (!pid && fgets(line, sizeof line, f)) {
		char kind[16];
		unsigned maj, min;
		unsigned long long i;
		int p;

		if (strstr(line, "->")) /* a waiter, not a holder */
			continue;
		if (sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%llu", kind, &p, &maj, &min, &i) ==
		        5 &&
		    !strcmp(kind, "FLOCK") && i == (unsigned long long)ino && maj == major(dev) &&
		    min == minor(dev))
			pid = p;
	}
	fclose(f);
	return pid;
}

/* What we know of the holder that keeps us waiting. */
struct lock_holder {
	int pid;                /* 0: none seen */
	char who[320];          /* "pid N (user U: COMMAND)" */
	int64_t since_ms;       /* seen holding since (monotonic) */
	int64_t active_ms;      /* last seen using the CPU */
	int64_t stopped_ms;     /* stopped or ended since; 0: not */
	unsigned long long cpu; /* utime + stime, clock ticks */
	int reported;
};

/* Read state and CPU time of pid: 0, or -1 if it is gone. */
static int proc_stat(int pid, char *state, unsigned long long *cpu)
{
	char buf[1024];
	const char *p = proctree_stat(pid, buf, sizeof buf);
	unsigned long long ut, st;

	if (!p ||
	    sscanf(p, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", state, &ut, &st) != 3)
		return -1;
	*cpu = ut + st;
	return 0;
}

static void holder_describe(struct lock_holder *h)
{
	char path[64], cmd[256] = "?", raw[256], user[33] = "?", buf[2048], *p;
	unsigned uid;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/status", h->pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		if ((p = strstr(buf, "\nUid:\t")) && sscanf(p + 6, "%u", &uid) == 1)
			registry_user_name(uid, user, sizeof user);
	}
	if (proctree_command(h->pid, raw, sizeof raw) > 0)
		text_printable(cmd, sizeof cmd, raw);
	snprintf(h->who, sizeof h->who, "pid %d (user %s: %s)", h->pid, user, cmd);
}

/*
 * Look at the holder of the lock on (dev, ino) now.  Returns NULL while it
 * may be getting on, or why it is stuck.
 */
static const char *holder_check(struct lock_holder *h, dev_t dev, ino_t ino, int64_t now)
{
	unsigned long long cpu = 0;
	char state = '?';
	int pid = lock_holder_pid(dev, ino), gone, hidden;

	if (pid <= 0)
		return NULL; /* released meanwhile, or not shown to us */
	gone = proc_stat(pid, &state, &cpu) < 0 || state == 'Z' || state == 'X';
	/* Another user's live process that a /proc mounted with hidepid will
	 * not show: not ended, but neither its work nor its stop can be seen. */
	hidden = gone && state == '?' && kill(pid, 0) < 0 && errno == EPERM;
	if (pid != h->pid) {
		memset(h, 0, sizeof *h);
		h->pid = pid;
		h->since_ms = h->active_ms = now;
		h->cpu = cpu;
		if (hidden)
			snprintf(h->who, sizeof h->who,
			         "pid %d (another user's; /proc's hidepid hides it)", pid);
		else
			holder_describe(h);
	}
	if (hidden) /* as long as an idle holder we could see is given */
		return now - h->since_ms >= LOCK_IDLE_MS
		           ? "cannot be watched here and has held it 10 s"
		           : NULL;
	if (cpu != h->cpu || state == 'R' || state == 'D')
		h->active_ms = now;
	h->cpu = cpu;
	if (gone || state == 'T' || state == 't') {
		if (!h->stopped_ms)
			h->stopped_ms = now;
	} else {
		h->stopped_ms = 0;
	}
	if (h->stopped_ms && now - h->stopped_ms >= LOCK_STUCK_MS)
		return gone ? "has ended, and another process holds the lock through its descriptor"
		            : "is stopped";
	if (now - h->active_ms >= LOCK_IDLE_MS)
		return "sleeps without using the CPU";
	if (now - h->since_ms >= LOCK_HOLD_MAX_MS)
		return "has held it for a minute";
	return NULL;
}

void registry_unlock(struct registry *reg)
{
	if (reg->held_fd < 0)
		return;
	flock(reg->held_fd, LOCK_UN);
	if (reg->held_fd != reg->lock_fd)
		close(reg->held_fd);
	reg->held_fd = -1;
}

int registry_trylock(struct registry *reg)
{
	if (flock(reg->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return 0;
	reg->held_fd = reg->lock_fd;
	return 1;
}

/* Wait for the registry lock without a thread (none could be made). */
static enum gm_err lock_blocking(struct registry *reg, const struct waiting *w,
                                 const struct acquire_opts *opts, char *err, size_t len)
{
	while (flock(reg->lock_fd, LOCK_EX) < 0) {
		if (errno != EINTR)
			return gm_fail(GM_ERR_STATE, err, len, "cannot lock the registry '%s': %s",
			               reg->dir, strerror(errno));
		if (registry_cancelled(w, opts))
			return gm_fail(GM_ERR_INTERRUPTED, err, len, "interrupted");
	}
	reg->held_fd = reg->lock_fd;
	return GM_OK;
}

/*
 * Take the registry lock: at once when it is free, else by queueing in the
 * kernel until it is, until deadline (monotonic ms, -1: none), until
 * cancelled, or until its holder is stuck.  GM_OK (reg->held_fd holds it),
 * GM_ERR_TIMEOUT (deadline or a stuck holder, named in err),
 * GM_ERR_INTERRUPTED, GM_ERR_STATE, GM_ERR_NOMEM.
 */
enum gm_err registry_lock(struct registry *reg, int64_t deadline, const struct waiting *w,
                          const struct acquire_opts *opts, char *err, size_t len)
{
	struct lock_holder h;
	struct locker *lk = NULL;
	struct stat st, lst;
	const char *stuck = NULL;
	int64_t start = monotonic_ms();
	enum gm_err rc = GM_OK;
	int fd, got;

	if (registry_trylock(reg))
		return GM_OK;
	if (errno != EWOULDBLOCK && errno != EINTR)
		return gm_fail(GM_ERR_STATE, err, len, "cannot lock the registry '%s': %s",
		               reg->dir, strerror(errno));
	memset(&h, 0, sizeof h);
	fd = open(reg->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(reg->lock_fd, &st) < 0 || fstat(fd, &lst) < 0 ||
	    st.st_dev != lst.st_dev || st.st_ino != lst.st_ino || !(lk = locker_start(fd, LOCK_EX)))
		goto no_thread;
	for (;;) {
		struct pollfd pfd[2] = {{locker_efd(lk), POLLIN, 0}, {w->cancel_fd, POLLIN, 0}};
		int64_t now = monotonic_ms(), until = now + LOCK_CHECK_MS;

		if (now - start < LOCK_QUIET_MS)
			until = start + LOCK_QUIET_MS;
		if (deadline >= 0 && deadline < until)
			until = deadline;
		poll(pfd, w->cancel_fd >= 0 ? 2 : 1, until > now ? (int)(until - now) : 0);
		if (locker_done(lk))
			break;
		now = monotonic_ms();
		if (registry_cancelled(w, opts)) {
			rc = gm_fail(GM_ERR_INTERRUPTED, err, len, "interrupted");
			break;
		}
		if (now - start >= LOCK_QUIET_MS)
			stuck = holder_check(&h, st.st_dev, st.st_ino, now);
		if (stuck) {
			rc =
			    gm_fail(GM_ERR_TIMEOUT, err, len,
			            "the registry lock ('%s') is held by %s, which %s; not waiting "
			            "for it (every gpuman of every user waits on it: ask its owner "
			            "or an admin to end it)",
			            reg->dir, h.who, stuck);
			break;
		}
		if (deadline >= 0 && now >= deadline) {
			rc = gm_fail(
			    GM_ERR_TIMEOUT, err, len,
			    "no GPU met the request within the wait: the registry lock ('%s') "
			    "was held by %s",
			    reg->dir, h.pid ? h.who : "another process");
			break;
		}
		if (h.pid && !h.reported && now - h.since_ms >= LOCK_REPORT_MS) {
			char msg[PATH_MAX + sizeof h.who + 64];

			h.reported = 1;
			snprintf(msg, sizeof msg, "the registry lock ('%s') is held by %s",
			         reg->dir, h.who);
			if (opts && opts->on_lock_wait)
				opts->on_lock_wait(opts->on_wait_data, msg);
		}
	}
	/* Given up while the thread waits: it drops the lock when it gets it.
	 * Else it is done: got it (even as we were giving up), or failed. */
	got = locker_end(lk);
	if (got < 0)
		return rc;
	if (!got) {
		rc = gm_fail(GM_ERR_STATE, err, len, "cannot lock the registry '%s': %s", reg->dir,
		             strerror(errno));
		close(fd);
	} else if (rc == GM_ERR_INTERRUPTED) {
		close(fd);
	} else {
		reg->held_fd = fd;
		rc = GM_OK;
	}
	return rc;
no_thread:
	if (fd >= 0)
		close(fd);
	return lock_blocking(reg, w, opts, err, len);
}
