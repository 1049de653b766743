/*
 * pick.c - choosing without reserving, and what choices share: the
 * inherited CUDA_VISIBLE_DEVICES as the usable set, the child's
 * CUDA_VISIBLE_DEVICES, and reasons for people.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pick.h"
#include "util.h"

int pick_env_init(struct pick_env *env, const struct gm_snapshot *snap)
{
	const char *order = getenv("CUDA_DEVICE_ORDER");
	int pci_order = order && !strcmp(order, "PCI_BUS_ID");
	const char *slurm;

	*env = (struct pick_env)PICK_ENV_INIT;
	if (visible_parse(getenv("CUDA_VISIBLE_DEVICES"), &env->vis) < 0)
		return -1;
	if (!env->vis.set)
		return 0;
	env->usable = calloc(snap->gpu_count ? snap->gpu_count : 1, 1);
	env->entry_gpu = calloc(env->vis.count ? env->vis.count : 1, sizeof *env->entry_gpu);
	if (!env->usable || !env->entry_gpu) {
		pick_env_release(env);
		return -1;
	}
	/* In a Slurm job, Slurm's list of the job's GPUs wins: under a device
	 * cgroup CUDA_VISIBLE_DEVICES is renumbered from 0 and would name the
	 * wrong physical GPU. */
	slurm = getenv("SLURM_STEP_GPUS");
	if (!slurm || !*slurm)
		slurm = getenv("SLURM_JOB_GPUS");
	env->usable_entries = visible_resolve_slurm(&env->vis, slurm, snap, env->entry_gpu);
	if (env->usable_entries == (size_t)-1)
		env->usable_entries = visible_resolve(&env->vis, snap, pci_order, env->entry_gpu);
	for (size_t i = 0; i < env->usable_entries; i++)
		env->usable[env->entry_gpu[i]] = 1;
	/* An index gpuman cannot map may name any GPU not named otherwise:
	 * none of those is offered, and the policy says why. */
	if (env->usable_entries < env->vis.count &&
	    env->entry_gpu[env->usable_entries] == VISIBLE_UNMAPPED)
		for (size_t g = 0; g < snap->gpu_count; g++)
			if (!env->usable[g])
				env->usable[g] = PICK_UNMAPPED;
	/* A slice is inside the allocation when an entry names it ("MIG-" and
	 * its UUID, or a unique prefix, as CUDA takes it) or its whole GPU. */
	env->mig_usable = calloc(snap->mig_count + 1, 1);
	if (!env->mig_usable) {
		pick_env_release(env);
		return -1;
	}
	for (size_t m = 0; m < snap->mig_count; m++) {
		long pos = -1;

		for (size_t g = 0; g < snap->gpu_count; g++)
			if (snap->gpus[g].index == snap->migs[m].gpu)
				pos = (long)g;
		env->mig_usable[m] = pos >= 0 && env->usable[pos] == 1;
		for (size_t e = 0; e < env->vis.count; e++)
			if (!strncmp(env->vis.entries[e], "MIG-", 4) && snap->migs[m].uuid[0] &&
			    !strncmp(snap->migs[m].uuid, env->vis.entries[e],
			             strlen(env->vis.entries[e])))
				env->mig_usable[m] = 1;
	}
	return 0;
}

void pick_env_release(struct pick_env *env)
{
	visible_release(&env->vis);
	free(env->entry_gpu);
	free(env->usable);
	free(env->mig_usable);
	*env = (struct pick_env)PICK_ENV_INIT;
}

char *pick_env_cuda_visible(const struct pick_env *env, const struct gm_snapshot *snap,
                            const size_t *pos, size_t count)
{
	size_t len = 1;
	char *out, *p;

	for (size_t i = 0; i < count; i++)
		len += sizeof snap->gpus[0].uuid + 1;
	for (size_t e = 0; e < env->vis.count; e++)
		len += strlen(env->vis.entries[e]) + 1;
	out = p = malloc(len);
	if (!out)
		return NULL;
	*p = '\0';
	for (size_t i = 0; i < count; i++) {
		const char *entry = snap->gpus[pos[i]].uuid;

		if (env->vis.set)
			for (size_t e = 0; e < env->usable_entries; e++)
				if (env->entry_gpu[e] == (long)pos[i])
					entry = env->vis.entries[e];
		p += sprintf(p, "%s%s", i ? "," : "", entry);
	}
	return out;
}

char *pick_explain(const struct gm_snapshot *snap, const struct policy_result *res, unsigned wanted)
{
	size_t len = 96, fit = 0;
	char *out, *p;

	for (size_t i = 0; i < res->gpu_count; i++)
		len += strlen(res->why[i]) + sizeof snap->gpus[i].name + 32;
	out = p = malloc(len);
	if (!out)
		return NULL;
	*p = '\0';
	/* One reason for every GPU (--only naming none, --mig on a machine
	 * without MIG) is said once, not once a GPU. */
	if (res->gpu_count > 1 && res->why[0][0]) {
		size_t same = 1;

		while (same < res->gpu_count && !strcmp(res->why[same], res->why[0]))
			same++;
		if (same == res->gpu_count) {
			if (same == 2)
				sprintf(p, "both GPUs: %s\n", res->why[0]);
			else
				sprintf(p, "all %zu GPUs: %s\n", same, res->why[0]);
			return out;
		}
	}
	for (size_t i = 0; i < res->gpu_count; i++) {
		if (!res->why[i][0]) {
			fit++;
			continue;
		}
		p += sprintf(p, "GPU %u (%s): %s\n", snap->gpus[i].index,
		             snap->gpus[i].name[0] ? snap->gpus[i].name : "unknown", res->why[i]);
	}
	/* The GPUs that do fit are not listed: say how many, against -n. */
	if (fit && fit < wanted)
		sprintf(p, "%zu GPU%s fit%s, the request needs %u (-n)\n", fit, fit == 1 ? "" : "s",
		        fit == 1 ? "s" : "", wanted);
	return out;
}
