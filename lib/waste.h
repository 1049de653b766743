/*
 * waste.h - what holds GPUs without using them: a pure function of one
 * snapshot (with per-process utilization), the live leases and which lease
 * each process runs under.  No I/O, so every pattern is tested without a GPU.
 *
 *   struct waste_opts opts = WASTE_OPTS_INIT;
 *   struct waste_report rep = WASTE_REPORT_INIT;
 *   opts.now_ms = ...; opts.window_s = ...;
 *   waste_find(snap, view, proc_lease, &opts, &rep);    (-1: out of memory)
 *   ... rep.items[i], waste_advice(snap, &opts, &rep.items[i], buf, len) ...
 *   waste_report_release(&rep);
 *
 * Four patterns:
 *   WASTE_HOG        a process holds memory on GPUs where it computes nothing
 *                    (0 % over the sampled window), whether or not it computes
 *                    on others: the CUDA context on every visible GPU;
 *   WASTE_IDLE_LEASE a lease older than the grace period has GPUs on which
 *                    none of its processes runs;
 *   WASTE_UNLEASED   a compute process outside any gpuman lease (an admin
 *                    sees who bypasses gpuman), noting whose lease it is on;
 *   WASTE_OVER_LIMIT a lease held longer than its user's max_lease
 *                    (gpuman.conf): a library client's, which nobody else
 *                    may end (idle_gpus: its GPUs, age_ms: held for).
 * GPUs whose processes have no utilization reading are not judged for hogs.
 * On a GPU in MIG mode leases and processes are matched per slice: a lease
 * of slice A is used only by its processes in A, and a process in a slice
 * that no lease of its own holds is UNLEASED there (lease: its own lease,
 * if it has one elsewhere; on_lease: whose lease holds that slice).
 */
#ifndef GM_WASTE_H
#define GM_WASTE_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"
#include "lease_view.h"
#include "snapshot_types.h"

struct waste_opts {
	int64_t now_ms;         /* wall clock, to age leases */
	int64_t lease_grace_ms; /* younger leases are still starting */
	unsigned window_s;      /* the utilization window, for the words */
};
#define WASTE_OPTS_INIT                                                                            \
	{                                                                                          \
		0, 10 * 60 * 1000, 10                                                              \
	}

enum waste_kind { WASTE_HOG = 1, WASTE_IDLE_LEASE, WASTE_UNLEASED, WASTE_OVER_LIMIT };

/* GPU sets are bit masks of NVML indices (gpuman reads at most 64 GPUs). */
struct waste_item {
	enum waste_kind kind;
	unsigned pid; /* the process; for a lease, its holder */
	int has_user;
	char user[33];
	char command[256];  /* raw: escape it before showing it */
	long lease;         /* position in the view's leases, -1 none */
	uint64_t held_mib;  /* HOG: memory on its idle GPUs; else on gpus */
	uint64_t idle_gpus; /* HOG: held without computing; IDLE_LEASE: idle */
	uint64_t busy_gpus; /* HOG: where it computes */
	uint64_t gpus;      /* UNLEASED: where it runs */
	long on_lease;      /* UNLEASED: a lease of someone else on its GPUs */
	int64_t age_ms;     /* IDLE_LEASE: held for */
	/* On a GPU in MIG mode the unit is the slice: the slice ("MIG-...") an
	 * IDLE_LEASE or OVER_LIMIT lease holds, or an UNLEASED process runs in
	 * (one item per slice); "" for whole GPUs. */
	char mig_uuid[96];
};

struct waste_report {
	size_t count;
	struct waste_item *items; /* by user (unknown last), kind, pid */
};
#define WASTE_REPORT_INIT                                                                          \
	{                                                                                          \
		0, NULL                                                                            \
	}

/* proc_lease[i]: the position in view->leases of the lease that
 * snap->procs[i] runs under, or -1.  Returns 0, or -1 out of memory. */
int waste_find(const struct gm_snapshot *snap, const struct registry_view *view,
               const long *proc_lease, const struct waste_opts *opts, struct waste_report *out);
void waste_report_release(struct waste_report *rep);

/* "waste", "hog", "idle-lease", "unleased", "over-limit". */
const char *waste_kind_name(enum waste_kind kind);
/* "0,1,5" */
char *waste_gpu_list(uint64_t mask, char *buf, size_t len);
/* Where: "GPU 3", "GPUs 1,3", or for an item about a slice
 * "slice 1g.10gb MIG-1d000000 of GPU 0". */
char *waste_where(const struct gm_snapshot *snap, const struct waste_item *it, uint64_t mask,
                  char *buf, size_t len);
/* What the item is, one sentence for people (raw text escaped). */
char *waste_what(const struct gm_snapshot *snap, const struct registry_view *view,
                 const struct waste_opts *opts, const struct waste_item *it, char *buf, size_t len);
/* What to do about it, one sentence. */
char *waste_advice(const struct gm_snapshot *snap, const struct registry_view *view,
                   const struct waste_item *it, char *buf, size_t len);

#endif
