/*
 * broker_fence.h - the client side of the broker's kernel fence
 * (broker_wire.h, "fence" and "session"; the broker's side is broker/fence.c).
 */
#ifndef GM_BROKER_FENCE_H
#define GM_BROKER_FENCE_H

#include <stddef.h>
#include "gpuman.h"

/*
 * Place pid in lease's cgroup before it runs anything (a broker lease's
 * connection; the caller waits for the answer).  keep: pid is the lease's
 * supervisor, not its job.  1 placed; 0 the broker enforces no placement
 * here (why in err); -1 refused or no answer (err): the job must not run.
 * A broker that went between the grant and this (a restart) is asked
 * again by the lease's id (broker_fence_reservation): its successor
 * restored the lease for this process.
 */
int broker_fence(const struct gm_lease *lease, int pid, int keep, char *err, size_t len);

/* The same on a connection of its own, naming the lease by id: a reserved
 * shell's (pid into the cgroup of this user's reservation id; keep: pid is
 * the shell that evals gpuman reserve's lines, which goes home alive at
 * the end), or broker_fence's own lease after a restart. */
int broker_fence_reservation(const char *path, const char *id, int pid, int keep, char *err,
                             size_t len);

/* The PAM hook's (root): login session pid of user uid opens only the GPUs
 * of uid's leases, while gpuman.conf says [fence] sessions = yes. */
int broker_fence_session(const char *path, unsigned uid, int pid, char *err, size_t len);

#endif
