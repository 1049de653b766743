/*
 * registry.h - leases shared by every process and user of the machine.
 *
 * The registry is a directory (GPUMAN_STATE_DIR, else /run/gpuman if it
 * exists, else /tmp/gpuman) holding:
 *
 *   .               the directory itself is flock'd exclusively while a
 *                   caller chooses and leases, so that choosing and leasing
 *                   are one atomic step (a file could be renamed away by
 *                   its creator; the directory only by its owner, root)
 *   lease.<id>      one per lease: JSON naming its GPUs, kind and holder;
 *                   alive exactly while some process holds an flock on it
 *   wait.<ns>.<id>  one per waiting request (its ticket), flock'd likewise;
 *                   names sort in arrival order, which is the serving order
 *   resv.<id>       one per reservation (gpuman reserve): a lease that no
 *                   process holds, alive until its "expires_ms" or until its
 *                   owner removes it (the sticky directory lets only the
 *                   owner and root); it counts only while it is a plain
 *                   file of mode 0644 named after the id it holds, names
 *                   its owner's uid,
 *                   and -- with an admin's max_reserve -- no longer than
 *                   that after its last change (ctime, which nobody sets
 *                   back).  Nothing wakes waiters at its expiry: they look
 *                   again within RECHECK_MS anyway.
 *
 * Files are created under a temporary name, locked, made 0644 whatever the
 * umask (others must read them), written, then renamed into place, so a
 * reader never sees an unlocked live file.  The kernel drops a dead
 * holder's flock, so a killed holder's lease is dead at once; readers try
 * the lock to tell, and unlink dead files where the sticky directory lets
 * them.  The owner of a file (st_uid), never its content, names its user.
 *
 * Anyone who can read a file can flock it, so the lock alone proves
 * nothing: a lease or ticket counts only if the uid it names is its
 * owner's, and its holder (pid; for a lease, or its job_pid) is a live,
 * non-zombie process of that owner -- someone else's lock on a dead lease
 * revives nothing.  A ticket whose holder is stopped holds nothing back
 * until it runs again, and one whose name claims a time more than 30 s
 * before the file's ctime is ignored: it cannot jump the line.
 *
 * Anyone who can open the directory can flock it, so a caller waiting for
 * the lock waits in the kernel's queue (a thread blocks in flock) while
 * the holder gets on with it, names a holder that keeps it for seconds,
 * and gives up (GM_ERR_TIMEOUT, naming pid, user and command) only at its
 * deadline or when the holder is provably stuck: stopped or ended for
 * 5 s, asleep without CPU time for 10 s, or holding it for a minute.
 *
 * Only the head of the line sleeps on inotify (a lease's last close --
 * release or holder death -- or a ticket's removal wakes it); every other
 * waiter sleeps in a child blocked on the locks of the two nearest tickets
 * ahead that block it, and wakes when one of them leaves the line.  A
 * hand-off so wakes the next waiter and the two behind it, whatever the
 * line's length, and an attempt reads the leases and the line only as far
 * as it holds back every GPU (registry_impl.h, struct registry_scope).  A
 * waiter behind the head looks at it every second (stopped, it holds
 * nothing back); others at those they sleep behind every 10 s.
 *
 * The directory is everyone's: one user may fill it with files, or fill
 * its file system's inodes.  Past 256 lease and ticket files opened in one
 * read, only those whose inode /proc/locks shows flock'd are opened, so
 * another user's dead files cost a reader their names in the listing
 * (about 0.3 us each here); a file that cannot be created names the user
 * who owns most of the directory.  The daemonless registry does not hold
 * against a user who takes every inode: the broker (gpuman daemon) does.
 */
#ifndef GM_REGISTRY_H
#define GM_REGISTRY_H

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include "config.h"
#include "gpuman.h"

struct registry {
	char dir[PATH_MAX];
	int lock_fd;       /* the directory, read-only: the registry lock */
	int held_fd;       /* the descriptor holding the lock now, or -1 */
	struct config cfg; /* the admin's gpuman.conf, read at open: its caps bind every grant */
	char *broker;      /* non-NULL: leases go through the broker at this
	                    * socket (broker.h) and dir is not used */
	struct broker_place *place; /* a kept place in its line, or NULL */
	/* The transport chosen at open (transport.h); everything goes
	 * through it. */
	const struct lease_transport *transport;
};

/* With a lease broker (broker_wanted()), only remember its socket: reading
 * and acquiring then go through it.  Otherwise resolve, create if needed and check the state
 * directory: refused if it is a symlink, not a directory, owned by another non-root user, or
 * writable by others without the sticky bit.  GM_ERR_STATE says what to do.  Also reads the admin's
 * gpuman.conf (config.h); one that does not parse fails the open, naming the file and line. */
enum gm_err registry_open(struct registry **out, char *errbuf, size_t errlen);
void registry_close(struct registry *reg);

/* A live lease, as its file says (user from the file's owner). */
struct lease_info {
	char id[64];
	unsigned uid;
	char user[33];
	int pid;     /* the holder (gpuman run, or the API caller) */
	int job_pid; /* the job whose processes use the GPUs */
	char command[256];
	int64_t start_ms;
	int exclusive;
	uint64_t share_mib; /* per GPU, for shares */
	size_t gpu_count;
	char (*uuids)[96];
	unsigned *indices;
	/* Per GPU: the MIG slice ("MIG-...") the lease holds on it, "" for
	 * the whole GPU.  The file names a slice's GPU in "uuid", as readers
	 * older than slices read it: for them the GPU is leased exclusively,
	 * so they never place a job on it. */
	char (*migs)[96];
	int reservation;    /* held by nobody until expires_ms (gpuman reserve) */
	int64_t expires_ms; /* wall clock; reservations only */
	/* The admin's max_lease for its user, where it has held its GPUs
	 * longer (a library client's lease: nobody else may end it); 0 not. */
	int64_t over_limit_ms;
	char limit_from[96]; /* with over_limit_ms: "[limits]", "[user alice]" */
};

/* A live waiting request. */
struct waiter_info {
	char name[128]; /* file name; sorts in arrival order */
	unsigned uid;
	char user[33];
	int pid;
	char command[256];
	int64_t since_ms;
	char summary[128]; /* "2 GPUs exclusive", "1 GPU, 8 GiB share" */
	char limit[200];   /* why its user's max_gpus keeps it waiting now; "" if not */
	size_t cand_count; /* GPUs it may be placed on (UUIDs) */
	char (*cand)[96];
	/* What the rules (line.h) place it by, from its ticket (record.h);
	 * owned by the view.  NULL from the broker's view, which places its
	 * line itself. */
	struct gm_request *req;
	struct json_t *usable, *usable_migs; /* NULL: everything */
	char within[64];                     /* inside this reservation of its user's; "" not */
};

struct registry_view {
	struct lease_info *leases;
	size_t lease_count;
	struct waiter_info *waiters; /* in arrival order */
	size_t waiter_count;
	/* gpuman.conf sets max_gpu_hours, which only the broker enforces,
	 * and this view is the daemonless registry's. */
	int gpu_hours_unenforced;
	/* Does the kernel keep each job to its lease's GPUs (the broker's
	 * fence, lib/fence.h)?  placement: the mechanism, or why not. */
	int placement_enforced;
	char placement[256];
	/* The broker lists a long line's head and counts the rest per user
	 * (so that a view costs it the same however long the line): the
	 * waiters and leases past those above, in line order of users. */
	struct view_more *more_waiters, *more_leases;
	size_t more_waiter_count, more_lease_count;
};
struct view_more {
	unsigned uid;
	char user[33];
	size_t count; /* waiters, or leases */
	size_t gpus;  /* the leases' GPUs */
};
#define REGISTRY_VIEW_INIT                                                                         \
	{                                                                                          \
		NULL, 0, NULL, 0, 0, 0, "", NULL, NULL, 0, 0                                       \
	}

/* Read the live leases and waiters; dead files are skipped and removed
 * where permitted.  Needs no lock. */
enum gm_err registry_read(struct registry *reg, struct registry_view *view, char *errbuf,
                          size_t errlen);
void registry_view_release(struct registry_view *view);

struct acquire_opts {
	const char *command; /* shown in status; default: this process's */
	/*
	 * Optional: called under the registry lock once GPUs are chosen and
	 * before the lease is published, to start the job (gpuman run forks a
	 * child that waits for the go).  It sets *job_pid; returns 0, or -1
	 * with a message, which fails the acquisition.
	 */
	int (*spawn)(void *data, const struct gm_lease *lease, pid_t *job_pid, char *err,
	             size_t errlen);
	void *spawn_data;
	/* Set by a signal handler to stop waiting (GM_ERR_INTERRUPTED). */
	volatile sig_atomic_t *interrupted;
	/*
	 * Optional: place against this snapshot instead of reading NVML (a
	 * dispatcher starting many tasks re-reads NVML about once a second).
	 * Safe when recent: leases are always read fresh, and a stale snapshot
	 * errs on the side of less free memory for gpuman's own jobs.
	 */
	const struct gm_snapshot *snapshot;
	/* Called once when the request starts waiting (to tell the user). */
	void (*on_wait)(void *data, const char *why);
	void *on_wait_data;
	/* Called (with on_wait_data) when one holder of the registry lock has
	 * kept us waiting for seconds: who it is, what it runs. */
	void (*on_lock_wait)(void *data, const char *who);
	/*
	 * With a broker, a request without --wait that does not fit keeps a
	 * place in the broker's line, first come first served with every other
	 * waiter, until the next registry_acquire() of this registry: the same
	 * request then gets what the place was given (or still waits); another
	 * one gives the place up.  For a dispatcher retrying its head job;
	 * poll registry_wake_fd() to learn when to try again.
	 */
	int keep_place;
	/* > 0: take a reservation of this many ms (gpuman reserve): the lease
	 * outlives this process; end it with registry_release(). */
	int64_t reserve_ms;
};

/*
 * Choose and lease GPUs for req, as one atomic step under the registry
 * lock, honouring earlier waiters.  With req->has_wait, wait (up to
 * req->wait_ms, -1 forever) until the request fits.  GM_ERR_UNAVAILABLE /
 * GM_ERR_NEVER / GM_ERR_TIMEOUT come with *explain (caller frees; may be
 * NULL) saying per GPU what excluded it.
 */
/*
 * gm_pick, and for a --mig request the chosen slice too: *mig_pos its
 * position in snap->migs (-1 for a whole-GPU request).  mig_pos may be NULL.
 */
enum gm_err registry_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                          const struct gm_request *req, unsigned **indices, size_t *count,
                          long *mig_pos, char **explain);

enum gm_err registry_acquire(struct registry *reg, struct gm_context *ctx,
                             const struct gm_request *req, const struct acquire_opts *opts,
                             struct gm_lease **out, char **explain, char *errbuf, size_t errlen);

/*
 * End the reservation id of this user (root: of anyone's) before it expires.
 * GM_ERR_INVALID when there is none of that id, or it is another user's
 * (err names the owner).
 */
enum gm_err registry_release(struct registry *reg, const char *id, char *errbuf, size_t errlen);

/* Readable when the place that acquire_opts.keep_place kept may have been
 * served: time to call registry_acquire() again.  -1 when there is none. */
int registry_wake_fd(const struct registry *reg);

#endif
