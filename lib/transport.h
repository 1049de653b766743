/*
 * transport.h - the two lease transports behind one interface: the broker
 * (broker.h, a root daemon on a socket) and the daemonless registry (files
 * in a shared directory, registry.h).  registry_open() chooses one, once;
 * everything after calls it through this table and never asks which it is.
 * Both place requests by the same rules (line.h).
 *
 * What one transport cannot give is a capability bit it lacks, which
 * callers report ("not available here") instead of branching on the
 * transport: only the broker keeps a GPU-hours ledger users cannot delete.
 */
#ifndef GM_TRANSPORT_H
#define GM_TRANSPORT_H

#include <stddef.h>
#include "gpuman.h"

struct registry;
struct registry_view;
struct acquire_opts;

/* Capabilities */
#define TRANSPORT_GPU_HOURS 1u /* a ledger of each user's GPU-hours (max_gpu_hours) */

struct lease_transport {
	const char *name; /* "broker", "registry" */
	unsigned caps;    /* TRANSPORT_* */
	/* registry_acquire() */
	enum gm_err (*acquire)(struct registry *reg, struct gm_context *ctx,
	                       const struct gm_request *req, const struct acquire_opts *opts,
	                       struct gm_lease **out, char **explain, char *err, size_t len);
	/* The live leases and waiters; the waiters whose place sorts after
	 * upto (NULL: none) may be left out. */
	enum gm_err (*read)(struct registry *reg, struct registry_view *view, const char *upto,
	                    char *err, size_t len);
	/* registry_release(): end one's own reservation (root: anyone's). */
	enum gm_err (*release_id)(struct registry *reg, const char *id, char *err, size_t len);
	/* End a lease of this transport (not freeing it). */
	void (*release)(struct gm_lease *lease);
	/* registry_wake_fd() */
	int (*wake_fd)(const struct registry *reg);
	/* Free what the transport keeps in reg (may be NULL). */
	void (*close)(struct registry *reg);
};

extern const struct lease_transport transport_broker; /* broker_transport.c */
extern const struct lease_transport transport_files;  /* registry.c */

/*
 * The transport to lease through: the broker when broker_wanted() says so
 * (its socket's path into sock), else the registry's files.
 */
const struct lease_transport *transport_choose(char *sock, size_t len);

/* The transport that granted lease. */
const struct lease_transport *transport_of_lease(const struct gm_lease *lease);

#endif
