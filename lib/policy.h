/*
 * policy.h - choosing GPUs: a pure function of a snapshot, the live leases
 * and a request.  No I/O, no clock, so every rule is tested without a GPU.
 */
#ifndef GM_POLICY_H
#define GM_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"
#include "snapshot_types.h"
#include "parse.h"

enum gm_policy {
	GM_BY_MEMORY = 0,      /* most free MiB first */
	GM_BY_MEMORY_RATE = 1, /* highest free/total first */
	GM_BY_POWER = 2,       /* lowest draw/limit first; no reading sorts last */
	GM_BY_UTIL = 3,        /* lowest utilization first; no reading sorts last */
	GM_BY_INDEX = 4        /* lowest NVML index first */
};
/* "memory" -> GM_BY_MEMORY ...; -1 if unknown. */
int policy_from_name(const char *name);
const char *policy_name(enum gm_policy by);

/* The request behind gm_request; every ties to one command-line option. */
struct gm_request {
	unsigned count;    /* -n, GPUs wanted (default 1) */
	enum gm_policy by; /* --by */
	int has_min_free;  /* --min-free */
	struct gm_size min_free;
	int has_max_util; /* --max-util */
	unsigned max_util;
	struct gpu_list only;    /* --only */
	struct gpu_list exclude; /* --exclude */
	int share;               /* 1: --mem SIZE; 0: --exclusive (default) */
	struct gm_size mem;
	int idle;        /* --idle: only GPUs without any process */
	int has_wait;    /* --wait */
	int64_t wait_ms; /* -1: forever */
	char mig[32];    /* --mig: one MIG slice of this profile
	                  * ("1g.10gb", or "any"); "" a whole GPU */
};

/* A lease already granted, as the policy sees it. */
struct policy_lease {
	const char *uuid;     /* the GPU it holds */
	const char *mig;      /* the MIG slice of that GPU it holds, NULL
	                       * or "": the whole GPU */
	int exclusive;        /* 1 exclusive, 0 memory share */
	uint64_t share_mib;   /* the share's size on this GPU */
	uint64_t pending_mib; /* part of the share its job does not hold yet */
	const char *holder;   /* "alice (pid 4242)", for reasons */
};

struct policy_input {
	const struct gm_snapshot *snap;
	const struct policy_lease *leases;
	size_t lease_count;
	/* Per snapshot position: 0 = outside the usable set (inherited
	 * CUDA_VISIBLE_DEVICES), 2 = maybe inside, but named by an index in
	 * CUDA's order that the driver does not reveal; NULL = every GPU
	 * usable. */
	const unsigned char *usable;
	/* Per snapshot position: non-NULL = held back for an earlier waiter,
	 * with this text as the reason; NULL array = none held back. */
	const char *const *held_for;
	/* Per slice (snap->migs): 0 = outside the inherited
	 * CUDA_VISIBLE_DEVICES; NULL = every slice of a usable GPU usable. */
	const unsigned char *mig_usable;
	/* Per snapshot position: non-NULL = never given to this requester by
	 * the admin's config (caps.h), with this text as the reason; NULL
	 * array = none barred. */
	const char *const *barred;
};

enum policy_outcome {
	POLICY_OK = 0,      /* chosen[] holds count GPUs */
	POLICY_NOT_NOW = 1, /* could be met later, when GPUs free up */
	POLICY_NEVER = 2    /* cannot be met on this machine at all */
};

struct policy_result {
	enum policy_outcome outcome;
	size_t count;
	size_t *chosen; /* positions into snap->gpus, best first; for
	                 * a --mig request into snap->migs */
	int mig;        /* chosen[] are slices */
	/* Per snapshot position: why that GPU was not chosen ("" if it was,
	 * or if it was eligible but not needed).  One line, for people. */
	char (*why)[160];
	size_t gpu_count;
};
#define POLICY_RESULT_INIT                                                                         \
	{                                                                                          \
		POLICY_OK, 0, NULL, 0, NULL, 0                                                     \
	}

/* Returns 0, or -1 on out-of-memory. */
int policy_choose(const struct policy_input *in, const struct gm_request *req,
                  struct policy_result *out);
void policy_result_release(struct policy_result *res);

/*
 * Could the GPU at pos ever serve req, whatever frees up?  The static part
 * of eligibility: not lost, usable, --only/--exclude, compute mode not
 * prohibited, total memory at least --mem / --min-free.  A waiting request
 * holds back exactly these GPUs from later arrivals.
 */
int policy_candidate(const struct policy_input *in, const struct gm_request *req, size_t pos);

/* Memory a new share/min-free check can count on: NVML's free memory less
 * what granted shares have not yet allocated. */
uint64_t policy_effective_free_mib(const struct policy_input *in, size_t pos);

#endif
