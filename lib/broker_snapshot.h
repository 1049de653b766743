/*
 * broker_snapshot.h - the GPUs read by the lease broker's NVML session
 * (broker_wire.h, "snapshot"), for a caller on a machine with a broker.
 */
#ifndef GM_BROKER_SNAPSHOT_H
#define GM_BROKER_SNAPSHOT_H

#include <stddef.h>
#include "gpuman.h"

/*
 * The GPUs as the broker at path read them (the "snapshot" op): a reading
 * no older than max_age_ms (-1: any), with proc util and clocks; with_view:
 * with the broker's view in (*out)->view_text (NULL from a broker older
 * than that).  GM_ERR_STATE when the broker cannot be reached or answers
 * nonsense.
 */
enum gm_err broker_snapshot(const char *path, long max_age_ms, int with_view,
                            struct gm_snapshot **out, char *err, size_t len);

#endif
