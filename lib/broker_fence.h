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
 */
int broker_fence(const struct gm_lease *lease, int pid, int keep, char *err, size_t len);

/* The same for a reserved shell: pid into the cgroup of this user's
 * reservation id, on a connection of its own.  keep: pid is the shell
 * that evals gpuman reserve's lines, which goes home alive at the end. */
int broker_fence_reservation(const char *path, const char *id, int pid, int keep, char *err,
                             size_t len);

/* The PAM hook's (root): login session pid of user uid opens only the GPUs
 * of uid's leases, while gpuman.conf says [fence] sessions = yes. */
int broker_fence_session(const char *path, unsigned uid, int pid, char *err, size_t len);

#endif
