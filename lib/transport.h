/*
 * transport.h - the two lease transports behind one interface: the broker
 * (broker.h, a root daemon on a socket; broker_transport.c) and the
 * daemonless registry (files in a shared directory, registry.h).
 * lease_api.c chooses one at registry_open(), once; everything after calls
 * it through this table and never asks which it is.  Both place requests
 * by the same rules (line.h) and show their leases and line as one view
 * (lease_view.h).  Neither transport knows the other: both depend on this
 * header, lease.h, lease_view.h and record.h alone.
 *
 * What one transport cannot give is a capability bit it lacks, which
 * callers report ("not available here") instead of branching on the
 * transport: only the broker keeps a GPU-hours ledger users cannot delete.
 */
#ifndef GM_TRANSPORT_H
#define GM_TRANSPORT_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "config.h"
#include "gpuman.h"

struct registry_view;
struct gm_snapshot;

/* A handle on the transport chosen (registry_open(), lease_api.h). */
struct registry {
	/* The registry's directory; with the broker, its socket's (which
	 * callers that watch the registry for changes may watch: nothing is
	 * written there, so they look again on their own timer). */
	char dir[PATH_MAX];
	struct config cfg; /* the admin's gpuman.conf, read at open: its caps bind every grant */
	/* The transport chosen at open; everything goes through it. */
	const struct lease_transport *transport;
	/* The registry's own (registry.h) */
	int lock_fd;              /* the directory, read-only: the registry lock */
	int held_fd;              /* the descriptor holding the lock now, or -1 */
	struct files_place *kept; /* a ticket kept for keep_place, or NULL */
	/* The broker's own (broker.h) */
	char *broker;               /* its socket */
	struct broker_place *place; /* a kept place in its line, or NULL */
};

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
	/*
	 * Optional, with spawn (same data): called once the broker, whose
	 * fence can place a waiter's job before its grant, has put the request
	 * in its line.  It starts the job now (gpuman run forks the child that
	 * waits for the go; fd, the connection, is the lease's descriptor once
	 * granted): its pid, or -1.  The broker moves it into its lease's
	 * cgroup while it waits; spawn, at the grant, then starts nothing new.
	 * prespawn_drop ends that job: the connection was lost (the broker
	 * restarts), and with it what the job held.
	 */
	pid_t (*prespawn)(void *data, int fd);
	void (*prespawn_drop)(void *data);
	/* The job prespawn starts is a supervisor (gpuman-runner), moved
	 * home alive when the lease ends, as broker_fence's keep. */
	int prespawn_keeps;
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
	 * A request without --wait that does not fit keeps a place in the
	 * line (the broker's, or a ticket in the registry), first come first
	 * served with every other waiter, until the next registry_acquire()
	 * of this registry: the same request then gets what the place was
	 * given (or still waits); another one gives the place up.  For a
	 * dispatcher retrying its head job; poll registry_wake_fd() (the
	 * broker) or watch the registry (the files) to learn when to try
	 * again.
	 */
	int keep_place;
	/* > 0: take a reservation of this many ms (gpuman reserve): the lease
	 * outlives this process; end it with registry_release(). */
	int64_t reserve_ms;
};

/* Capabilities */
#define TRANSPORT_GPU_HOURS 1u /* a ledger of each user's GPU-hours (max_gpu_hours) */

struct lease_transport {
	const char *name; /* "broker", "registry" */
	unsigned caps;    /* TRANSPORT_* */
	/* Set up reg (its common fields zeroed, lock_fd and held_fd -1) for
	 * this transport; sock: the broker's socket (broker_wanted()). */
	enum gm_err (*open)(struct registry *reg, const char *sock, char *err, size_t len);
	/* registry_acquire() */
	enum gm_err (*acquire)(struct registry *reg, struct gm_context *ctx,
	                       const struct gm_request *req, const struct acquire_opts *opts,
	                       struct gm_lease **out, char **explain, char *err, size_t len);
	/* The live leases and waiters; the waiters whose place sorts after
	 * upto (NULL: none) may be left out.  with (NULL: none): a reading of
	 * the GPUs just taken, which may carry the view as it stood then (the
	 * broker's, context_want_view()): read from it, not asked again. */
	enum gm_err (*read)(struct registry *reg, struct registry_view *view, const char *upto,
	                    const struct gm_snapshot *with, char *err, size_t len);
	/* registry_release(): end one's own reservation (root: anyone's). */
	enum gm_err (*release_id)(struct registry *reg, const char *id, char *err, size_t len);
	/* End a lease of this transport (not freeing it). */
	void (*release)(struct gm_lease *lease);
	/* registry_wake_fd() */
	int (*wake_fd)(const struct registry *reg);
	/* registry_drop_place() */
	void (*drop_place)(struct registry *reg);
	/* Free what the transport keeps in reg. */
	void (*close)(struct registry *reg);
};

extern const struct lease_transport transport_broker; /* broker_transport.c */
extern const struct lease_transport transport_files;  /* registry.c */

#endif
