/*
 * registry_impl.h - private to the registry's files (registry.c: one
 * attempt and the transport; registry_dir.c, registry_read.c,
 * registry_files.c, registry_wait.c, registry_lock.c): the names of the
 * files in the state directory, one attempt and one waiter, and the
 * functions they call across files.  Callers use lease_api.h.
 */
#ifndef GM_REGISTRY_IMPL_H
#define GM_REGISTRY_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "lease.h"
#include "lease_view.h"
#include "pick.h"
#include "policy.h"
#include "registry.h"
#include "snapshot.h"
#include "transport.h"

#define LEASE_PREFIX "lease."
#define WAIT_PREFIX "wait."
#define RESV_PREFIX "resv."
#define TMP_PREFIX ".tmp."
#define MAX_FILE_BYTES 65536
/* A temporary file is locked right after its creation; one this old with no
 * lock is debris of a crash between open and flock. */
#define TMP_STALE_MS 60000
/* How often an eligible waiter re-reads NVML for changes made outside
 * gpuman (a process that exits frees memory without any lease event). */
#define RECHECK_MS 1000

struct attempt {
	struct registry_view view;
	struct gm_snapshot *snap; /* owned unless given by the caller */
	int snap_given;
	struct pick_env env;
	/* The rules' decision (line.h) for this request */
	enum policy_outcome outcome;
	struct policy_result res; /* the policy's answer, when it ran */
	char *why;                /* for people: why it is not granted (owned) */
	unsigned char *cand;      /* per snapshot position: could ever be given it */
	int unread;               /* queued on sight of a line: no why yet (queue_behind) */
};

/*
 * What a waiter knows of the waiters ahead of it.  Tickets are immutable and
 * later arrivals sort after us, so the set only shrinks: read once, then
 * drop names as inotify reports their last close or removal.
 */
struct ahead {
	size_t count;
	char (*names)[128];
	uint64_t *blocks;  /* bit i: that waiter may take my candidate i */
	int *pids;         /* each one's holder */
	unsigned *uids;    /* and its user */
	size_t mine_count; /* my candidates (at most 64 tracked) */
};

struct locker;

/* A waiter between attempts. */
struct waiting {
	int cancel_fd; /* readable once gm_cancel() was called; -1: none */
	struct registry *reg;
	const char *mine; /* our ticket's name */
	struct ahead ah;
	int ifd;        /* inotify on the registry; -1 until we have room */
	int no_inotify; /* the per-user inotify limit is reached: poll */
	/* Waiting behind the waiters ahead that block us (at most two): a
	 * thread each (a locker), blocked in flock on its ticket, done when
	 * that waiter leaves the line. */
	struct locker *behind_lk[2]; /* NULL: none */
	int behind_fd[2];            /* their opens of the tickets */
	char behind[2][128];         /* the tickets they wait on */
	int behind_holder[2];        /* those tickets' holders and their users */
	unsigned behind_uid[2];
	/* The holders' /proc/PID/stat, kept open: a look at whether one has
	 * stopped is one read; -1: none. */
	int behind_stat[2];
	int64_t pair_ms; /* when to look at a pair next (registry_wait.c) */
};
#define WAITING_INIT(cancel, reg, mine)                                                            \
	{                                                                                          \
		(cancel), (reg), (mine), {0}, -1, 0, {NULL, NULL}, {-1, -1}, {"", ""}, {0, 0},     \
		    {0, 0}, {-1, -1}, 0                                                            \
	}

/* Free what a waiter holds between attempts: its inotify, its lockers. */
void registry_waiting_release(struct waiting *w);

/* Names of the few users whose leases a reader meets, remembered: every
 * read of the registry names each lease's owner, and getpwuid_r reads
 * /etc/passwd each time (a dispatcher reads the registry per task). */
void registry_user_name(unsigned uid, char *out, size_t len);

/*
 * The pid namespace we live in (the inode of /proc/self/ns/pid), written in
 * every lease and ticket: a pid of another namespace (a container sharing
 * the state directory) cannot be looked up here, only trusted.
 */
json_int_t registry_own_pidns(void);

/* The state directory, made if need be, checked against another user's
 * tampering, and opened as reg->lock_fd (registry_dir.c). */
enum gm_err registry_dir_open(struct registry *reg, char *err, size_t len);

/* Would count more GPUs take uid beyond its cap?  caps_over(). */
int registry_over_cap(const struct registry *reg, const struct registry_view *view, unsigned uid,
                      unsigned count, char *why, size_t len);

/* The files transport's read (transport.h): the whole line up to upto
 * (registry_read_scoped without a cover); tickets sorting after it are
 * not read: a waiter is held back only by those ahead of it, and leaving
 * the rest unopened halves the work of a read in a long line. */
enum gm_err registry_files_read(struct registry *reg, struct registry_view *view, const char *upto,
                                const struct gm_snapshot *with, char *err, size_t len);

/* Does s start with prefix (a file name with LEASE_PREFIX, say)? */
int registry_starts_with(const char *s, const char *prefix);

/*
 * How much of the line a read needs.  Tickets sorting after upto are not
 * read (NULL: none).  cover: read the line from its head only until the
 * uncapped waiters read, the first `past` of them left out, hold back
 * every GPU of this snapshot (an attempt: the rest cannot change its
 * outcome while those wait; attempt_run checks that against the rules'
 * decision, line.h, and reads past more of the head when not).  nearest: read it from upto (our own
 * ticket) backwards, only until those read, the nearest one that may take our GPUs left out, hold
 * back every GPU our ticket may take (a waiter deciding whom to wait behind).  Either way a
 * hand-off reads what the head of the line holds, however long the line.  cut (set by the read):
 * some tickets ahead of upto were left unread.
 */
struct registry_scope {
	const char *upto;
	const struct gm_snapshot *cover;
	int nearest;
	size_t past;
	int cut;
};
enum gm_err registry_read_scoped(struct registry *reg, struct registry_view *view,
                                 struct registry_scope *scope, char *err, size_t len);

/* registry_holder.c: what the kernel says of process pid, which must
 * belong to uid and, when start is not 0, have started then
 * (proctree_start), in pid namespace pidns. */
enum registry_holder {
	REGISTRY_HOLDER_GONE,    /* no such process, a zombie, or one of another user */
	REGISTRY_HOLDER_UNKNOWN, /* cannot be looked up here: trust the lock alone */
	REGISTRY_HOLDER_RUNNING,
	REGISTRY_HOLDER_STOPPED, /* Ctrl-Z or a debugger: alive, but makes no progress */
};
enum registry_holder registry_holder_state(int pid, unsigned uid, unsigned long long start,
                                           json_int_t pidns);
/* Is the holder of a ticket (pid of user uid, in our pid namespace) still
 * running -- neither gone nor stopped? */
int registry_holder_runs(int pid, unsigned uid);

/* A waiter that its own user's cap keeps waiting holds nothing back from
 * the users behind it: first come, first served within what each may have. */
int registry_waiter_capped(const struct registry *reg, const struct registry_view *view,
                           const struct waiter_info *wi);

/* Queue: publish a ticket (its name into name) for the request, locked
 * (*fd_out) until the waiter leaves the line. */
enum gm_err registry_write_ticket(struct registry *reg, struct attempt *a,
                                  const struct gm_request *req, const struct acquire_opts *opts,
                                  char *name, size_t name_len, int *fd_out, char *err, size_t len);

/* Publish the lease of the attempt's choice (*out, locked by its fd). */
enum gm_err registry_publish_lease(struct registry *reg, struct attempt *a,
                                   const struct gm_request *req, const struct acquire_opts *opts,
                                   struct gm_lease **out, char *err, size_t len);

/* Free what a waiter knows of those ahead of it. */
void registry_ahead_release(struct ahead *ah);

/* Asked to stop: a flag set by a signal handler, or gm_cancel(). */
int registry_cancelled(const struct waiting *w, const struct acquire_opts *opts);

/* Read the tickets ahead of w again, after its line changed. */
void registry_ahead_refresh(struct waiting *w);

/* Could an attempt now give w anything, or do the waiters ahead of it
 * hold back every GPU it could use? */
int registry_ahead_room(const struct waiting *w);

/*
 * Sleep until something that may let us in happens: a lease closed or
 * removed (release or holder death), an earlier waiter gone, or -- for a
 * waiter with room -- RECHECK_MS passed (NVML changes outside gpuman).
 * Returns GM_OK to try again, GM_ERR_TIMEOUT, GM_ERR_INTERRUPTED or
 * GM_ERR_IO.
 */
enum gm_err registry_wait_for_change(struct waiting *w, int64_t deadline,
                                     const struct acquire_opts *opts);

/*
 * A thread blocked in flock(fd, how) (registry_lock.c); fd is its own
 * open file description.  NULL: no thread could be made (fd is still the
 * caller's).  Its eventfd becomes readable once it is done; locker_end
 * then says how it went and frees it: 1 the lock is held through fd, 0
 * flock failed (errno), -1 it still waited and now drops the lock (and fd)
 * the moment it gets it.
 */
struct locker *locker_start(int fd, int how);
int locker_efd(const struct locker *lk);
int locker_done(const struct locker *lk);
int locker_end(struct locker *lk);

/* Release the registry lock, if held. */
void registry_unlock(struct registry *reg);

/*
 * Take the registry lock: at once when it is free, else by queueing in the
 * kernel until it is, until deadline (monotonic ms, -1: none), until
 * cancelled, or until its holder is stuck.  GM_OK (reg->held_fd holds it),
 * GM_ERR_TIMEOUT (deadline or a stuck holder, named in err),
 * GM_ERR_INTERRUPTED, GM_ERR_STATE, GM_ERR_NOMEM.
 */
enum gm_err registry_lock(struct registry *reg, int64_t deadline, const struct waiting *w,
                          const struct acquire_opts *opts, char *err, size_t len);

/* Take the registry lock only if it is free: 1 taken, else 0 with errno
 * as flock left it (EWOULDBLOCK: someone holds it). */
int registry_trylock(struct registry *reg);

#endif
