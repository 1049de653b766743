/*
 * broker.h - the client side of the lease broker (`gpuman daemon`): a
 * lease asked for and waited for in its line, its view of leases and
 * waiters, ending a lease or a reservation.  The protocol and the rule
 * that picks the broker are broker_wire.h; the fence's client is
 * broker_fence.h; the broker as a lease transport is broker_transport.c.
 */
#ifndef GM_BROKER_H
#define GM_BROKER_H

#include <stddef.h>
#include "broker_fence.h"
#include "broker_snapshot.h"
#include "broker_wire.h"
#include "gpuman.h"

struct registry_view;
struct acquire_opts;

/*
 * registry_acquire() and registry_read() through the broker at path.
 * *place is the place kept in the line for acquire_opts.keep_place (owned
 * by the caller's registry; may be replaced or set to NULL).
 */
struct broker_place;
enum gm_err broker_acquire(const char *path, struct broker_place **place, struct gm_context *ctx,
                           const struct gm_request *req, const struct acquire_opts *opts,
                           struct gm_lease **out, char **explain, char *err, size_t len);
/* Its connection (readable when the broker says something), and its end:
 * leaving the line, or giving up a lease granted meanwhile. */
int broker_place_fd(const struct broker_place *place);
void broker_place_free(struct broker_place *place);
/* The broker's leases and line (the "view" op); from `with` instead when
 * that reading came with them moments ago (context_want_view()). */
enum gm_err broker_read(const char *path, const struct gm_snapshot *with,
                        struct registry_view *view, char *err, size_t len);

/* End a broker lease: on its connection, or, when the broker was restarted
 * since, on a new one with the lease's token; then close our descriptor on
 * it.  Does not free the lease. */
void broker_release(struct gm_lease *lease);

/* End this user's reservation id (registry_release() through the broker). */
enum gm_err broker_release_id(const char *path, const char *id, char *err, size_t len);

#endif
