/*
 * nvml.h - the NVML backend.  lib/nvml*.c are the only files that know
 * NVML: nvml.c dlopens the library and looks up versioned symbols with
 * fallbacks; nvml_gpu.c and nvml_procs.c turn NVML's answers into a
 * gm_snapshot; nvml_abi.h declares the few types they need themselves.
 */
#ifndef GM_NVML_H
#define GM_NVML_H

#include <stddef.h>
#include "gpuman.h"

struct nvml;

/*
 * Load the library at path (dlopen, then nvmlInit_v2/nvmlInit once) or, when
 * path is NULL, the driver's "libnvidia-ml.so.1" then "libnvidia-ml.so".
 * GM_ERR_NVML_LOAD with dlerror()'s text when it cannot be loaded;
 * GM_ERR_NVML when init fails (the detail names NVML's error string).
 */
enum gm_err nvml_open(const char *path, struct nvml **out, char *errbuf, size_t errlen);
void nvml_close(struct nvml *nv);
/* Whether the library at path (as given to nvml_open) refused to start
 * because it is not the driver's version (LIB_RM_VERSION_MISMATCH). */
int nvml_wrong_version(const char *path);
/* How long the library's nvmlInit took in this process, ms. */
double nvml_init_ms(const struct nvml *nv);

/*
 * Fill snap (zeroed by the caller): driver versions, every GPU with its
 * fields and validity bits, and every compute/graphics process (pid, gpu,
 * used_mib or has_mem=0, kind; de-duplicated by pid per GPU).  user and
 * command are left for snapshot.c.  A GPU answering NO_PERMISSION is
 * skipped with a note; GPU_IS_LOST and other per-GPU errors keep the GPU
 * with its state and note.  Only a failure to count GPUs fails the call.
 */
enum gm_err nvml_snapshot(struct nvml *nv, struct gm_snapshot *snap, char *errbuf, size_t errlen);

/*
 * Fill has_util/util_pct of snap's processes from NVML's per-process
 * utilization samples of the last window_ms: the mean SM utilization of a
 * process's samples, and 0 for a process without any (the driver keeps
 * samples of processes that did work only).  A GPU that does not report it
 * (old GPU or driver, MIG) leaves its processes without util and gets a
 * note.  Costs one or two NVML calls per GPU.
 */
void nvml_proc_util(struct nvml *nv, struct gm_snapshot *snap, unsigned window_ms);

/*
 * Fill the clocks of snap's GPUs (enum gm_clock, now and max; the max SM
 * clock is nvml_snapshot's already, for CUDA's order).  Six NVML calls per
 * GPU, which cost 2.5 ms on one GPU of a gVisor machine: only the views
 * that show clocks ask for them, never pick or a lease.
 */
void nvml_clocks(struct nvml *nv, struct gm_snapshot *snap);

#endif
