/*
 * listing.h - the live leases and waiters of a registry view as JSON arrays
 * (new references), the schema of `gpuman status --json`; the whole status
 * document, which `gpuman serve` publishes too; which lease each process
 * runs under; and the waste finder's report on a snapshot and a view, as
 * status, top, waste and serve show it.
 */
#ifndef GM_LISTING_H
#define GM_LISTING_H

#include <jansson.h>
#include "lease_view.h"
#include "snapshot_types.h"
#include "waste.h"

/* How far back the views (status, top, waste, serve) average per-process
 * utilization: NVML keeps samples of the last seconds, so asking costs no
 * waiting. */
#define LISTING_UTIL_WINDOW_S 10

json_t *listing_leases_json(const struct registry_view *view);
json_t *listing_waiters_json(const struct registry_view *view);
/* The broker's counts of what it did not list, per user. */
json_t *listing_more_json(const struct view_more *more, size_t count);
/* The `status --json` document: the snapshot, leases and waiters. */
json_t *listing_status_json(const struct gm_snapshot *snap, const struct registry_view *view);

/* For each process of snap, the position in view of the lease it runs
 * under (the lease's job or a descendant; for a reservation, its user's
 * processes on its GPUs), or -1.  Caller frees; NULL when out of memory. */
long *listing_proc_leases(const struct gm_snapshot *snap, const struct registry_view *view);

/* The waste finder on snap and view, each process's lease worked out and
 * opts' time and window (LISTING_UTIL_WINDOW_S) set: 0, or -1 out of
 * memory. */
int listing_find_waste(const struct gm_snapshot *snap, const struct registry_view *view,
                       struct waste_opts *opts, struct waste_report *rep);
/* The report as a JSON array of findings. */
json_t *listing_waste_json(const struct gm_snapshot *snap, const struct registry_view *view,
                           const struct waste_opts *opts, const struct waste_report *rep);

#endif
