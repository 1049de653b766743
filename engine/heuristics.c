/*
 * heuristics.c - what a batch learns as its tasks end, and how that holds
 * back a placement: out-of-memory floors per GPU, and fastest finish first
 * over the measured task durations at the tail of the sweep.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "policy.h"
#include "util.h"
#include "internal.h"

void engine_batch_learn(struct engine *e, const struct slot *s, const struct job *upd)
{
	if (!e->cfg->batch || !s)
		return;
	for (size_t i = 0; i < s->ngpu; i++) {
		unsigned g = s->gpu[i];

		if (g >= e->gpu_cap)
			continue;
		if (upd->state == JOB_DONE && s->ngpu == 1) {
			e->done_ms[g] += upd->end_ms - upd->start_ms;
			e->done_n[g]++;
		}
		if (upd->state == JOB_QUEUED && upd->ooms > 0 && s->placed_free >= 0 &&
		    upd->reason && strstr(upd->reason, "out of memory") &&
		    s->placed_free > e->floor_mib[g])
			e->floor_mib[g] = s->placed_free;
	}
}

long engine_snap_pos(const struct gm_snapshot *snap, unsigned index)
{
	for (size_t k = 0; k < snap->gpu_count; k++)
		if (snap->gpus[k].index == index)
			return (long)k;
	return -1;
}

/*
 * Batch only: GPUs this task should not take now.  (1) A GPU where a task
 * of this batch ran out of memory gets no further task while it has no
 * more free memory than then.  (2) Near the end, fastest finish first:
 * plan the remaining tasks greedily by earliest finish over the GPUs'
 * measured task durations, and leave idle a free GPU the plan gives nothing
 * now (a faster GPU will finish that task sooner).  Returns 1 when every
 * free GPU is held back.
 */
int engine_batch_holdback(struct engine *e, const struct gm_request *req, unsigned *excl,
                          size_t *nexcl)
{
	const struct gm_snapshot *snap = e->snap;
	size_t ng = snap->gpu_count, q = e->qcount - e->qhead, free_known = 0, free_unknown = 0;
	int64_t now = now_ms(), *avail = NULL;
	unsigned char *state = NULL; /* 0 out, 1 free, 2 own busy */
	struct registry_view view = REGISTRY_VIEW_INIT;
	int held_all = 0;

	*nexcl = 0;
	for (size_t k = 0; k < ng; k++) {
		unsigned g = snap->gpus[k].index;

		if (g < e->gpu_cap && e->floor_mib[g] >= 0 &&
		    (snap->gpus[k].valid & GM_HAS_MEMORY) &&
		    (int64_t)snap->gpus[k].mem_free_mib <= e->floor_mib[g])
			excl[(*nexcl)++] = g;
	}
	if (req->count != 1 || req->share || q == 0 || q > EFT_TAIL_PER_GPU * ng)
		return 0;
	avail = calloc(ng + 1, sizeof *avail);
	state = calloc(ng + 1, 1);
	if (!avail || !state || registry_read(e->cfg->reg, &view, NULL, 0) != GM_OK)
		goto done;
	for (size_t k = 0; k < ng; k++) {
		const struct gm_gpu *gpu = &snap->gpus[k];
		int out =
		    gpu->state != GM_GPU_OK ||
		    (req->only.count && !gpu_list_matches(&req->only, gpu->index, gpu->uuid)) ||
		    gpu_list_matches(&req->exclude, gpu->index, gpu->uuid);

		for (size_t x = 0; x < *nexcl; x++)
			out |= excl[x] == gpu->index;
		state[k] = out ? 0 : 1;
	}
	for (size_t l = 0; l < view.lease_count; l++)
		for (size_t g = 0; g < view.leases[l].gpu_count; g++) {
			long k = engine_snap_pos(snap, view.leases[l].indices[g]);

			if (k >= 0)
				state[k] = 0;
		}
	for (size_t i = 0; i < e->nslots; i++) {
		const struct slot *s = e->slots[i];

		for (size_t g = 0; g < s->ngpu; g++) {
			long k = engine_snap_pos(snap, s->gpu[g]);
			unsigned idx = s->gpu[g];

			if (k < 0)
				continue;
			state[k] = 0;
			if (s->ngpu == 1 && idx < e->gpu_cap && e->done_n[idx]) {
				int64_t est = e->done_ms[idx] / e->done_n[idx];
				int64_t end = s->start_ms + est;

				/* Overdue: assume it is as late again as it is now. */
				avail[k] = end > now ? end : now + (now - end);
				state[k] = 2;
			}
		}
	}
	for (size_t k = 0; k < ng; k++) {
		unsigned idx = snap->gpus[k].index;

		if (state[k] != 1)
			continue;
		if (idx < e->gpu_cap && e->done_n[idx]) {
			avail[k] = now;
			free_known++;
		} else {
			free_unknown++;
		}
	}
	if (!free_known)
		goto done;
	{
		unsigned char *used = calloc(ng + 1, 1);
		int64_t *task_ms = calloc(ng + 1, sizeof *task_ms);
		size_t used_count;

		if (!used || !task_ms) {
			free(used);
			free(task_ms);
			goto done;
		}
		for (size_t k = 0; k < ng; k++) {
			unsigned idx = snap->gpus[k].index;

			task_ms[k] = idx < e->gpu_cap && e->done_n[idx]
			                 ? e->done_ms[idx] / e->done_n[idx] + EFT_OVERHEAD_MS
			                 : -1;
		}
		used_count = outcome_tail_plan(ng, state, avail, task_ms, q, used);
		for (size_t k = 0; k < ng; k++)
			if (state[k] == 1 && task_ms[k] >= 0 && !used[k])
				excl[(*nexcl)++] = snap->gpus[k].index;
		held_all = used_count == 0 && free_unknown == 0;
		free(used);
		free(task_ms);
	}
done:
	registry_view_release(&view);
	free(avail);
	free(state);
	return held_all;
}
