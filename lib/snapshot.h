/*
 * snapshot.h - the snapshot's JSON form, for modules that extend it
 * (status adds leases and waiters).
 */
#ifndef GM_SNAPSHOT_H
#define GM_SNAPSHOT_H

#include <jansson.h>
#include "gpuman.h"
#include "snapshot_types.h"

/* The snapshot without what costs NVML calls that choosing GPUs never
 * needs: with proc_util_window_ms > 0 also each process's utilization over
 * that window (nvml_proc_util), with clocks the GPUs' clocks (nvml_clocks).
 * gm_snapshot_take is (ctx, 0, 1, ...); leases and the engine take (0, 0). */
enum gm_err snapshot_take(struct gm_context *ctx, unsigned proc_util_window_ms, int clocks,
                          struct gm_snapshot **out, char *errbuf, size_t errlen);

/* The same, from the lease broker where one runs (gm_open chose it), with
 * a reading no older than max_age_ms (-1: any; snapshot_take asks for
 * BROKER_SNAPSHOT_MAX_AGE_MS).  A lease only needs the GPUs' names, so
 * broker_acquire takes any age: a slow driver never delays a grant. */
enum gm_err snapshot_take_aged(struct gm_context *ctx, unsigned proc_util_window_ms, int clocks,
                               long max_age_ms, struct gm_snapshot **out, char *errbuf,
                               size_t errlen);

/* One GPU / one process / the whole snapshot as JSON objects (new refs). */
json_t *snapshot_gpu_json(const struct gm_snapshot *snap, size_t pos);
/* Where CUDA numbers the GPU at pos: in its default fastest-first order, or
 * with CUDA_DEVICE_ORDER=PCI_BUS_ID; -1 if CUDA does not see it. */
long snapshot_cuda_index(const struct gm_snapshot *snap, size_t pos, int pci_order);
/* One MIG slice as a JSON object (new ref). */
json_t *snapshot_mig_json(const struct gm_mig *mig);
json_t *snapshot_proc_json(const struct gm_snapshot *snap, const struct gm_proc *proc);
json_t *snapshot_json(const struct gm_snapshot *snap);
/* {"by":"broker"|"self","age_ms":N,"nvml_init_ms":X}: who read the GPUs. */
json_t *snapshot_reading_json(const struct gm_snapshot *snap);
/* The one line status says where a GPU runs without persistence mode,
 * with what it costs here and the fix: 1 with it in buf, 0 none. */
int snapshot_persistence_note(const struct gm_snapshot *snap, char *buf, size_t len);
/* The snapshot position of the GPU with this NVML index, or -1. */
long snapshot_position(const struct gm_snapshot *snap, unsigned index);
/* A JSON string of s, with bytes that are not UTF-8 shown as '?'. */
json_t *json_text(const char *s);
const char *gpu_state_name(enum gm_gpu_state state);
const char *compute_mode_name(int mode);

#endif
