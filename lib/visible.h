/*
 * visible.h - CUDA_VISIBLE_DEVICES as CUDA reads it.
 *
 * CUDA numbers devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID;
 * NVML numbers them by PCI bus.  An inherited CUDA_VISIBLE_DEVICES (a Slurm
 * allocation, a container) is the whole usable set: gpuman only picks from it
 * and hands children subsets of its own entries, so the child's CUDA reads
 * them exactly as the parent's would.
 */
#ifndef GM_VISIBLE_H
#define GM_VISIBLE_H

#include <stddef.h>
#include "gpuman.h"

struct visible {
	int set;        /* 0: variable unset (all GPUs visible) */
	size_t count;   /* entries CUDA accepts (after truncation) */
	char **entries; /* owned; the original spelling of each entry */
	int truncated;  /* an invalid entry cut the list short */
};
#define VISIBLE_INIT                                                                               \
	{                                                                                          \
		0, 0, NULL, 0                                                                      \
	}

/*
 * Parse a CUDA_VISIBLE_DEVICES value; NULL means unset.  Entries are
 * trimmed of blanks; the first entry that is not a non-negative integer,
 * "GPU-..." or "MIG-..." prefix, or that repeats an earlier entry, ends the
 * list (as CUDA does).  Returns 0, -1 only on out-of-memory.
 */
int visible_parse(const char *value, struct visible *out);
void visible_release(struct visible *vis);

/* entry_gpu value of a bare index gpuman cannot map (see below). */
#define VISIBLE_UNMAPPED (-2L)

/*
 * Whether the snapshot reveals CUDA's default, fastest-first order: every
 * GPU CUDA sees has a cuda_rank (NVML gives no core count before driver
 * R510), or they are all one model, whose ties CUDA breaks by PCI bus id
 * as NVML numbers them.  gpuman never guesses the order otherwise.
 */
int visible_order_known(const struct gm_snapshot *snap);

/*
 * CUDA's enumeration order of the snapshot's GPUs: positions into
 * snap->gpus, fastest first by cuda_rank (ties by NVML index) unless
 * pci_order, lost GPUs left out.  order must hold snap->gpu_count entries;
 * returns how many were written: 0 when the fastest-first order is asked
 * for and not known (visible_order_known).
 */
size_t visible_cuda_order(const struct gm_snapshot *snap, int pci_order, size_t *order);

/*
 * Map each entry to a snapshot position: entry_gpu[i] = position in
 * snap->gpus, or -1 if the entry names no GPU of the snapshot (CUDA would
 * truncate there too; the caller treats entries after it as invisible), or
 * VISIBLE_UNMAPPED for a bare index in fastest-first order when that order
 * is not known: it names some GPU, and gpuman cannot tell which.
 * entry_gpu must hold vis->count entries.  Returns the number of usable
 * entries (the prefix up to the first unresolvable one).
 */
size_t visible_resolve(const struct visible *vis, const struct gm_snapshot *snap, int pci_order,
                       long *entry_gpu);

/*
 * Inside a Slurm job, Slurm's own record of its GPUs (SLURM_STEP_GPUS in a
 * step, else SLURM_JOB_GPUS: node-global GPU indices, the GPUs' order in
 * gres.conf, which is NVML's order when it lists /dev/nvidia0... in order
 * as AutoDetect=nvml does) says which physical GPU each entry of
 * CUDA_VISIBLE_DEVICES is.  Without a device cgroup Slurm sets both to the
 * same indices; with ConstrainDevices it renumbers CUDA_VISIBLE_DEVICES from
 * 0, and only the SLURM_*_GPUS list still names the physical GPUs.
 *
 * Map entry i to the GPU whose NVML index is the list's entry i.  Returns
 * the number of entries mapped (all of them), or (size_t)-1 when the list
 * does not apply: unset or malformed, not one index per entry (the user
 * changed CUDA_VISIBLE_DEVICES), UUID entries, or an index NVML does not
 * show (NVML itself renumbered the GPUs the cgroup lets it open; then
 * CUDA's reading of CUDA_VISIBLE_DEVICES is already right).  entry_gpu as
 * for visible_resolve; unchanged on (size_t)-1 only in what it means.
 */
size_t visible_resolve_slurm(const struct visible *vis, const char *slurm_gpus,
                             const struct gm_snapshot *snap, long *entry_gpu);

#endif
