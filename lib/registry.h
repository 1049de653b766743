/*
 * registry.h - the daemonless registry, one of the two lease transports
 * (transport.h): leases shared by every process and user of the machine.
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
 * ahead that block it, and wakes when one of them leaves the line (a
 * waiter whose turn has come unlocks its ticket before it publishes its
 * lease, so the next one is awake by the time the registry lock is free).
 * A hand-off so wakes the next waiter and the two behind it, whatever the
 * line's length, and an attempt reads the leases and the line only as far
 * as it holds back every GPU (registry_impl.h, struct registry_scope).  A
 * waiter behind the head looks at it every second (stopped, it holds
 * nothing back); others at those they sleep behind every 10 s.  A request
 * that will wait reads first without the registry lock, and if that shows
 * it must wait, queues its ticket without the lock: 500 arrivals at once do
 * not stand between the lock and the hand-offs.  NVML is read before the
 * lock is taken, never under it: a driver that takes seconds to answer
 * delays its own caller, not every user's.
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

#include <stddef.h>
#include "gpuman.h"
#include "lease_view.h"
#include "transport.h"

/*
 * registry_pick() on reg (NULL: no usable registry, say an unsafe state
 * directory: choose from NVML alone rather than not at all; run will
 * refuse).
 */
enum gm_err registry_files_pick(struct registry *reg, struct gm_context *ctx,
                                const struct gm_snapshot *snap, const struct gm_request *req,
                                unsigned **indices, size_t *count, long *mig_pos, char **explain,
                                char *errbuf, size_t errlen);

#endif
