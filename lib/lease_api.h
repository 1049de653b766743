/*
 * lease_api.h - leasing GPUs, whichever transport serves this machine: the
 * lease broker (broker.h) or the daemonless registry (registry.h), chosen
 * once at registry_open() by the rule in broker_wire.h and called through
 * one table (transport.h).  The gm_* lease API of gpuman.h is built on it.
 */
#ifndef GM_LEASE_API_H
#define GM_LEASE_API_H

#include <stddef.h>
#include "gpuman.h"
#include "lease_view.h"
#include "transport.h"

/* Choose the transport (broker_wanted()).  With a lease broker, only
 * remember its socket: reading and acquiring then go through it.  Otherwise resolve, create if
 * needed and check the state directory: refused if it is a symlink, not a directory, owned by
 * another non-root user, or writable by others without the sticky bit.  GM_ERR_STATE says what to
 * do.  Also reads the admin's gpuman.conf (config.h); one that does not parse fails the open,
 * naming the file and line. */
enum gm_err registry_open(struct registry **out, char *errbuf, size_t errlen);
void registry_close(struct registry *reg);

/* gm_reserve, and on_wait(data, why) (may be NULL) told once as a wait
 * begins, with the rules' reason, as `gpuman run --wait` is
 * (reserve_api.c). */
enum gm_err reserve_telling(struct gm_context *ctx, const struct gm_request *req,
                            const char *duration, void (*on_wait)(void *data, const char *why),
                            void *data, struct gm_reservation **out, char *errbuf, size_t errlen);

/* Read the live leases and waiters; dead files are skipped and removed
 * where permitted.  Needs no lock. */
enum gm_err registry_read(struct registry *reg, struct registry_view *view, char *errbuf,
                          size_t errlen);
/* The same as they stood when `with` was read, where its reader sent them
 * with it (context_want_view()); otherwise read now. */
enum gm_err registry_read_with(struct registry *reg, const struct gm_snapshot *with,
                               struct registry_view *view, char *errbuf, size_t errlen);

/*
 * gm_pick, and for a --mig request the chosen slice too: *mig_pos its
 * position in snap->migs (-1 for a whole-GPU request).  mig_pos may be NULL;
 * errbuf (may be NULL) says why, for an error other than "not now/never".
 */
enum gm_err registry_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                          const struct gm_request *req, unsigned **indices, size_t *count,
                          long *mig_pos, char **explain, char *errbuf, size_t errlen);

/*
 * Choose and lease GPUs for req, as one atomic step under the registry
 * lock, honouring earlier waiters.  With req->has_wait, wait (up to
 * req->wait_ms, -1 forever) until the request fits.  GM_ERR_UNAVAILABLE /
 * GM_ERR_NEVER / GM_ERR_TIMEOUT come with *explain (caller frees; may be
 * NULL) saying per GPU what excluded it.
 */
enum gm_err registry_acquire(struct registry *reg, struct gm_context *ctx,
                             const struct gm_request *req, const struct acquire_opts *opts,
                             struct gm_lease **out, char **explain, char *errbuf, size_t errlen);

/*
 * End the reservation id of this user (root: of anyone's) before it expires.
 * GM_ERR_INVALID when there is none of that id, or it is another user's
 * (err names the owner).
 */
enum gm_err registry_release(struct registry *reg, const char *id, char *errbuf, size_t errlen);

/* A public call's message: the per-GPU explain of registry_acquire() (freed
 * here; may be NULL) after errbuf's line. */
void registry_explain(char *errbuf, size_t errlen, char *explain);

/* Readable when the place that acquire_opts.keep_place kept may have been
 * served: time to call registry_acquire() again.  -1 when there is none. */
int registry_wake_fd(const struct registry *reg);

/* Give up the place that acquire_opts.keep_place kept, if any: the request
 * is gone (a queue whose last waiting job was cancelled), and its place
 * would hold back those behind it for nothing. */
void registry_drop_place(struct registry *reg);

#endif
