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
	int set;          /* 0: variable unset (all GPUs visible) */
	size_t count;     /* entries CUDA accepts (after truncation) */
	char **entries;   /* owned; the original spelling of each entry */
	int truncated;    /* an invalid entry cut the list short */
};
#define VISIBLE_INIT { 0, 0, NULL, 0 }

/*
 * Parse a CUDA_VISIBLE_DEVICES value; NULL means unset.  Entries are
 * trimmed of blanks; the first entry that is not a non-negative integer,
 * "GPU-..." or "MIG-..." prefix, or that repeats an earlier entry, ends the
 * list (as CUDA does).  Returns 0, -1 only on out-of-memory.
 */
int visible_parse(const char *value, struct visible *out);
void visible_release(struct visible *vis);

/*
 * CUDA's enumeration order of the snapshot's GPUs: positions into
 * snap->gpus, fastest first by cuda_rank (ties by NVML index) unless
 * pci_order, lost GPUs left out.  order must hold snap->gpu_count entries;
 * returns how many were written.
 */
size_t visible_cuda_order(const struct gm_snapshot *snap, int pci_order, size_t *order);

/*
 * Map each entry to a snapshot position: entry_gpu[i] = position in
 * snap->gpus, or -1 if the entry names no GPU of the snapshot (CUDA would
 * truncate there too; the caller treats entries after it as invisible).
 * entry_gpu must hold vis->count entries.  Returns the number of usable
 * entries (the prefix up to the first unresolvable one).
 */
size_t visible_resolve(const struct visible *vis, const struct gm_snapshot *snap, int pci_order,
		       long *entry_gpu);

#endif
