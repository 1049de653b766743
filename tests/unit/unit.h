/*
 * unit.h - helpers shared by the cmocka unit tests: a fake gm_snapshot built
 * in memory, GPU by GPU and process by process, so that the pure modules
 * (policy, visible, formatting) are tested without NVML or the simulator.
 *
 *   struct gm_snapshot snap;
 *   fake_snapshot_init(&snap);
 *   struct gm_gpu *g = fake_gpu(&snap, 0, "GPU-8f3a...", 24576, 20000, 5,
 *                               60000, 300000, 100);
 *   g->compute_mode = GM_COMPUTE_EXCLUSIVE_PROCESS;   (adjust freely)
 *   fake_proc(&snap, 0, 28329, 4096);
 *   ...
 *   fake_snapshot_release(&snap);
 *
 * The arrays are allocated once with room for FAKE_MAX_GPUS GPUs and
 * FAKE_MAX_PROCS processes, so pointers returned by fake_gpu() and
 * fake_proc() stay valid until fake_snapshot_release().  Include this after
 * cmocka.h (it uses assert_true to fail loudly when a test overfills it).
 */
#ifndef GM_TESTS_UNIT_H
#define GM_TESTS_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpuman.h"
#include "snapshot_types.h"

#define FAKE_MAX_GPUS 64
#define FAKE_MAX_PROCS 256
/* Pass for a reading the GPU does not report (its validity bit stays clear). */
#define FAKE_NONE (-1LL)

static inline void fake_snapshot_init(struct gm_snapshot *snap)
{
	memset(snap, 0, sizeof *snap);
	snprintf(snap->driver_version, sizeof snap->driver_version, "580.95.05");
	snap->cuda_driver_version = 13000;
	snap->gpus = calloc(FAKE_MAX_GPUS, sizeof *snap->gpus);
	snap->procs = calloc(FAKE_MAX_PROCS, sizeof *snap->procs);
	assert_non_null(snap->gpus);
	assert_non_null(snap->procs);
	snap->taken_ms = 1700000000000LL;
}

static inline void fake_snapshot_release(struct gm_snapshot *snap)
{
	size_t i;

	for (i = 0; i < snap->note_count; i++)
		free(snap->notes[i]);
	free(snap->notes);
	for (i = 0; i < snap->mig_count; i++)
		free(snap->migs[i].pids);
	free(snap->migs);
	free(snap->gpus);
	free(snap->procs);
	memset(snap, 0, sizeof *snap);
}

/*
 * Put the GPU with this NVML index in MIG mode (if it is not yet) and
 * append a slice of it: profile "1g.10gb", UUID "MIG-<uuid_tail>", memory,
 * and pid (0: none) running in it.  Add slices in GPU order.
 */
static inline struct gm_mig *fake_mig(struct gm_snapshot *snap, unsigned index, const char *profile,
                                      const char *uuid_tail, uint64_t total_mib, uint64_t free_mib,
                                      unsigned pid)
{
	struct gm_mig *m;
	size_t i;

	for (i = 0; i < snap->gpu_count; i++)
		if (snap->gpus[i].index == index) {
			snap->gpus[i].valid |= GM_HAS_MIG;
			snap->gpus[i].mig_mode = 1;
		}
	snap->migs = realloc(snap->migs, (snap->mig_count + 1) * sizeof *snap->migs);
	assert_true(snap->migs != NULL);
	m = &snap->migs[snap->mig_count++];
	memset(m, 0, sizeof *m);
	m->gpu = index;
	snprintf(m->uuid, sizeof m->uuid, "MIG-%s", uuid_tail);
	snprintf(m->profile, sizeof m->profile, "%s", profile);
	snprintf(m->name, sizeof m->name, "Test GPU MIG %s", profile);
	m->valid = GM_MIG_HAS_MEMORY | GM_MIG_HAS_PROCESSES;
	m->mem_total_mib = total_mib;
	m->mem_free_mib = free_mib;
	m->mem_used_mib = total_mib - free_mib;
	m->gpu_instance_id = (unsigned)snap->mig_count;
	if (pid) {
		m->pids = calloc(1, sizeof *m->pids);
		assert_true(m->pids != NULL);
		m->pids[0] = pid;
		m->pid_count = 1;
	}
	return m;
}

/* A UUID of the usual shape that differs from GPU to GPU in its first hex
 * digits: "GPU-00000003-1111-2222-3333-444455556666" for index 3. */
static inline void fake_uuid(char *buf, size_t len, unsigned index)
{
	snprintf(buf, len, "GPU-%08x-1111-2222-3333-444455556666", index);
}

/*
 * Append a healthy GPU with NVML index `index` (GPUs must be added in index
 * order, as snapshots are sorted by it).  uuid NULL gives fake_uuid().
 * total_mib < 0: memory not reported; util < 0, power_mw < 0, limit_mw < 0,
 * cuda_rank < 0: that reading is not reported.  Compute mode is DEFAULT, the
 * process list readable, compute capability 8.6.
 */
static inline struct gm_gpu *fake_gpu(struct gm_snapshot *snap, unsigned index, const char *uuid,
                                      long long total_mib, long long free_mib, long long util,
                                      long long power_mw, long long limit_mw, long long cuda_rank)
{
	struct gm_gpu *g;

	assert_true(snap->gpu_count < FAKE_MAX_GPUS);
	g = &snap->gpus[snap->gpu_count++];
	memset(g, 0, sizeof *g);
	g->index = index;
	g->state = GM_GPU_OK;
	if (uuid)
		snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
	else
		fake_uuid(g->uuid, sizeof g->uuid, index);
	snprintf(g->name, sizeof g->name, "Fake GPU %u", index);
	snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02X:00.0", index + 1);
	g->valid = GM_HAS_CC | GM_HAS_COMPUTE_MODE | GM_HAS_MIG | GM_HAS_PROCESSES | GM_HAS_PCI |
	           GM_HAS_TEMPERATURE;
	g->cc_major = 8;
	g->cc_minor = 6;
	g->compute_mode = GM_COMPUTE_DEFAULT;
	g->temperature_c = 40;
	if (total_mib >= 0) {
		g->valid |= GM_HAS_MEMORY;
		g->mem_total_mib = (uint64_t)total_mib;
		g->mem_free_mib = free_mib < 0 ? (uint64_t)total_mib : (uint64_t)free_mib;
		g->mem_used_mib = g->mem_total_mib - g->mem_free_mib;
	}
	if (util >= 0) {
		g->valid |= GM_HAS_UTIL;
		g->util_gpu_pct = (unsigned)util;
		g->util_mem_pct = (unsigned)util / 2;
	}
	if (power_mw >= 0) {
		g->valid |= GM_HAS_POWER;
		g->power_mw = (unsigned)power_mw;
	}
	if (limit_mw >= 0) {
		g->valid |= GM_HAS_POWER_LIMIT;
		g->power_limit_mw = (unsigned)limit_mw;
	}
	if (cuda_rank >= 0) {
		g->valid |= GM_HAS_CUDA_RANK;
		g->cuda_rank = (uint64_t)cuda_rank;
	}
	return g;
}

/* A GPU with only memory readings, the rest idle: the common case. */
static inline struct gm_gpu *fake_gpu_mem(struct gm_snapshot *snap, unsigned index,
                                          long long total_mib, long long free_mib)
{
	return fake_gpu(snap, index, NULL, total_mib, free_mib, 0, 50000, 250000, 100);
}

/* Mark a GPU as fallen off the bus, as NVML_ERROR_GPU_IS_LOST leaves it. */
static inline void fake_gpu_lost(struct gm_gpu *g)
{
	g->state = GM_GPU_LOST;
	g->valid = 0;
	snprintf(g->note, sizeof g->note, "GPU has fallen off the bus");
}

/* The GPU with this NVML index; fails the test if there is none. */
static inline struct gm_gpu *fake_gpu_at(struct gm_snapshot *snap, unsigned index)
{
	size_t i;

	for (i = 0; i < snap->gpu_count; i++)
		if (snap->gpus[i].index == index)
			return &snap->gpus[i];
	fail_msg("no fake GPU with index %u", index);
	return NULL;
}

/*
 * Add a compute process on the GPU with NVML index `gpu`, keeping the list
 * sorted by GPU then pid as real snapshots are.  used_mib < 0: memory not
 * reported.  Its memory is not taken off the GPU's free memory: set the
 * GPU's numbers as the scenario needs.
 */
static inline struct gm_proc *fake_proc(struct gm_snapshot *snap, unsigned gpu, unsigned pid,
                                        long long used_mib)
{
	struct gm_proc *p;
	size_t i;

	assert_true(snap->proc_count < FAKE_MAX_PROCS);
	for (i = snap->proc_count; i > 0; i--) {
		p = &snap->procs[i - 1];
		if (p->gpu < gpu || (p->gpu == gpu && p->pid < pid))
			break;
		snap->procs[i] = *p;
	}
	p = &snap->procs[i];
	memset(p, 0, sizeof *p);
	p->pid = pid;
	p->gpu = gpu;
	p->has_mem = used_mib >= 0;
	p->used_mib = used_mib >= 0 ? (uint64_t)used_mib : 0;
	p->kind = GM_PROC_COMPUTE;
	p->has_user = 1;
	p->uid = 1000;
	snprintf(p->user, sizeof p->user, "alice");
	snprintf(p->command, sizeof p->command, "python train.py");
	snap->proc_count++;
	return p;
}

#endif
