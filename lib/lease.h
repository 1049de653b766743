/*
 * lease.h - what a gm_lease holds: the caller's handle on its own lease,
 * whichever transport granted it (transport.h).  lease.c frees it and
 * answers gm_lease_*(); ending it is the transport's (gm_lease_release()).
 */
#ifndef GM_LEASE_H
#define GM_LEASE_H

#include <limits.h>
#include <stdint.h>
#include "gpuman.h"
#include "lease_view.h"

struct gm_lease {
	/* The lease's one record (lease_view.h, record.h), as the registry's
	 * lease file and the broker's view show it to everyone: its id, kind,
	 * share and, per GPU, index, UUID and slice (rec.migs).  The holder's
	 * own fields below are what only this process has of it. */
	struct lease_info rec;
	int fd;              /* flock'd (or the broker connection); -1 once released */
	char path[PATH_MAX]; /* lease.<id> in the registry */
	/* What a job is told: CUDA_VISIBLE_DEVICES, "0,2", and per GPU the
	 * share of its memory. */
	char *cuda_visible;
	char *indices_text;
	double mem_fraction;
	/* For people: "GPU 0 is in MIG mode: ..." when a whole-GPU request
	 * passed over GPUs in MIG mode; "" otherwise. */
	char note[160];
	/* Leases granted by the broker (broker.h): fd is the connection,
	 * path is empty, broker names the socket, token proves the lease is
	 * ours when the broker was restarted.  NULL for registry leases. */
	char *broker;
	char token[40];
	/* The broker placed the job started while it waited (acquire_opts'
	 * prespawn) in the lease's cgroup already: no "fence" to ask. */
	int placed;
};

/*
 * Free the lease in this process without releasing it: close our
 * descriptor, remove nothing.  For a process that forked the lease's holder
 * (the dispatcher after starting a runner): the lease lives on in the child,
 * which releases it with gm_lease_release().
 */
void lease_detach(struct gm_lease *lease);

/* Free what a lease holds and the lease, ending nothing. */
void lease_free(struct gm_lease *lease);

/* Room for a record of n GPUs in lease->rec (each one's slice "").
 * 0, or -1 on out-of-memory. */
int lease_gpus_alloc(struct gm_lease *lease, size_t n);

#endif
