/*
 * pick.h - the step between a snapshot and the policy that every choice
 * shares (gm_pick, gm_acquire): which GPUs the inherited
 * CUDA_VISIBLE_DEVICES allows, and how a child must be told about its GPUs.
 */
#ifndef GM_PICK_H
#define GM_PICK_H

#include <stddef.h>
#include "gpuman.h"
#include "policy.h"
#include "visible.h"

struct pick_env {
	struct visible vis;        /* the inherited CUDA_VISIBLE_DEVICES */
	long *entry_gpu;           /* per entry: snapshot position or -1 */
	size_t usable_entries;     /* entries CUDA can use (prefix) */
	unsigned char *usable;     /* per snapshot position; NULL: all usable */
	unsigned char *mig_usable; /* per slice (snap->migs); NULL: as its GPU */
};
/* usable[] value of a GPU that an unmappable bare index may name. */
#define PICK_UNMAPPED 2
#define PICK_ENV_INIT                                                                              \
	{                                                                                          \
		VISIBLE_INIT, NULL, 0, NULL, NULL                                                  \
	}

/* Read CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER from the environment and
 * resolve them against snap.  Returns 0, -1 on out-of-memory. */
int pick_env_init(struct pick_env *env, const struct gm_snapshot *snap);
void pick_env_release(struct pick_env *env);

/* CUDA_VISIBLE_DEVICES for a child given the chosen snapshot positions:
 * subsets of the inherited entries under an allocation, else full UUIDs
 * (which CUDA cannot misread).  Caller frees; NULL on out-of-memory. */
char *pick_env_cuda_visible(const struct pick_env *env, const struct gm_snapshot *snap,
                            const size_t *pos, size_t count);

/* "GPU 3 (NVIDIA TITAN RTX): reason\n" for each GPU with a reason, and how
 * many fit when fewer than wanted do.  Caller frees; NULL on out-of-memory. */
char *pick_explain(const struct gm_snapshot *snap, const struct policy_result *res,
                   unsigned wanted);

#endif
