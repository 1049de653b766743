/*
 * nvml_procs.c - the simulator's process lists (compute, graphics, MPS; the
 * scenario's processes and live simload ones) and per-process utilization,
 * with NVML's count protocol.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "scenario.h"
#include "simstate.h"
#include "nvml_sim.h"

/* nvmlProcessInfo_v1_t, as the unversioned process-list functions fill it. */
struct nvml_process_v1 {
	unsigned pid;
	unsigned long long used_gpu_memory;
};

/* nvmlProcessInfo_v2_t; the _v3 functions use it too (24 bytes on every
 * driver but 535.43.02-535.86.05). */
struct nvml_process_v2 {
	unsigned pid;
	unsigned long long used_gpu_memory; /* bytes; ULLONG_MAX: not available */
	unsigned gpu_instance_id, compute_instance_id;
};

/* nvmlProcessUtilizationSample_t: one sample of one process, percent. */
struct nvml_proc_util_sample {
	unsigned pid;
	unsigned long long timestamp_us; /* CPU wall clock, microseconds */
	unsigned sm_util, mem_util, enc_util, dec_util;
};

_Static_assert(sizeof(struct nvml_proc_util_sample) == 32, "nvmlProcessUtilizationSample_t");
_Static_assert(sizeof(struct nvml_process_v1) == 16, "nvmlProcessInfo_v1_t is 16 bytes");
_Static_assert(sizeof(struct nvml_process_v2) == 24, "nvmlProcessInfo_v2_t is 24 bytes");

/* The exported ABI (see nvml_sim.c). */
SIM_EXPORT enum nvml_return nvmlDeviceGetComputeRunningProcesses_v3(struct scenario_gpu *device,
                                                                    unsigned *count,
                                                                    struct nvml_process_v2 *infos);
SIM_EXPORT enum nvml_return nvmlDeviceGetComputeRunningProcesses_v2(struct scenario_gpu *device,
                                                                    unsigned *count,
                                                                    struct nvml_process_v2 *infos);
SIM_EXPORT enum nvml_return nvmlDeviceGetComputeRunningProcesses(struct scenario_gpu *device,
                                                                 unsigned *count,
                                                                 struct nvml_process_v1 *infos);
SIM_EXPORT enum nvml_return nvmlDeviceGetGraphicsRunningProcesses_v3(struct scenario_gpu *device,
                                                                     unsigned *count,
                                                                     struct nvml_process_v2 *infos);
SIM_EXPORT enum nvml_return nvmlDeviceGetGraphicsRunningProcesses_v2(struct scenario_gpu *device,
                                                                     unsigned *count,
                                                                     struct nvml_process_v2 *infos);
SIM_EXPORT enum nvml_return nvmlDeviceGetGraphicsRunningProcesses(struct scenario_gpu *device,
                                                                  unsigned *count,
                                                                  struct nvml_process_v1 *infos);
SIM_EXPORT enum nvml_return
nvmlDeviceGetMPSComputeRunningProcesses_v3(struct scenario_gpu *device, unsigned *count,
                                           struct nvml_process_v2 *infos);
SIM_EXPORT enum nvml_return
nvmlDeviceGetMPSComputeRunningProcesses_v2(struct scenario_gpu *device, unsigned *count,
                                           struct nvml_process_v2 *infos);
SIM_EXPORT enum nvml_return nvmlDeviceGetMPSComputeRunningProcesses(struct scenario_gpu *device,
                                                                    unsigned *count,
                                                                    struct nvml_process_v1 *infos);
SIM_EXPORT enum nvml_return nvmlDeviceGetProcessUtilization(struct scenario_gpu *device,
                                                            struct nvml_proc_util_sample *samples,
                                                            unsigned *count,
                                                            unsigned long long last_seen_us);

static void put_process(void *infos, int v1, unsigned i, unsigned pid, int has_mem,
                        uint64_t used_mib, const struct scenario_gpu *where)
{
	unsigned long long bytes = has_mem ? used_mib * MIB : ULLONG_MAX;

	if (v1) {
		struct nvml_process_v1 *p = (struct nvml_process_v1 *)infos + i;

		p->pid = pid;
		p->used_gpu_memory = bytes;
	} else {
		struct nvml_process_v2 *p = (struct nvml_process_v2 *)infos + i;

		p->pid = pid;
		p->used_gpu_memory = bytes;
		/* The MIG instance it runs in; none (all ones) off MIG. */
		p->gpu_instance_id = where->is_mig ? where->gpu_instance_id : 0xFFFFFFFFu;
		p->compute_instance_id = where->is_mig ? where->compute_instance_id : 0xFFFFFFFFu;
	}
}

/* Where a device's processes live: the device itself and, for a GPU split
 * into MIG slices, each slice (NVML lists those on the GPU too, with their
 * instance ids).  Source 0 is the device; NULL past the last. */
static const struct scenario_gpu *proc_source(const struct scenario_gpu *device, size_t s)
{
	return s == 0 ? device : s <= device->mig_count ? &device->migs[s - 1] : NULL;
}

/* Put (infos non-NULL, from entry i on) or count one source's processes. */
static unsigned source_procs(const struct scenario_gpu *src, unsigned kind, void *infos, int v1,
                             unsigned i)
{
	unsigned n = 0;
	size_t j;

	for (j = 0; j < src->proc_count; j++) {
		const struct scenario_proc *p = &src->procs[j];

		if (!(p->kind & kind))
			continue;
		if (infos)
			put_process(infos, v1, i + n, p->pid, p->has_mem, p->used_mib, src);
		n++;
	}
	for (j = 0; (kind & SCENARIO_PROC_COMPUTE) && j < sim_live.count; j++) {
		const struct simstate_use *u = &sim_live.uses[j];

		if (strcmp(u->uuid, src->uuid))
			continue;
		if (infos)
			put_process(infos, v1, i + n, u->pid, 1, u->used_mib, src);
		n++;
	}
	return n;
}

/*
 * NVML's process-list protocol: when *count is too small (a caller asks how
 * many with *count 0 and infos NULL) set *count to the number of processes
 * and answer INSUFFICIENT_SIZE, or SUCCESS with *count 0 when there are
 * none; otherwise fill infos and set *count.  Live simload processes are
 * compute processes.
 */
static enum nvml_return list_processes(enum scenario_fn fn, struct scenario_gpu *device,
                                       unsigned kind, unsigned *count, void *infos, int v1)
{
	enum nvml_return ret = sim_device_query(fn, device, count != NULL, 0);
	const struct scenario_gpu *src;
	unsigned n = 0, i = 0;
	size_t s;

	if (ret != NVML_SUCCESS)
		goto done;
	pthread_mutex_lock(&sim_mutex);
	if (kind & SCENARIO_PROC_COMPUTE)
		sim_live_refresh();
	else
		sim_timeline_refresh();
	for (s = 0; (src = proc_source(device, s)); s++)
		n += source_procs(src, kind, NULL, v1, 0);
	if (*count < n) {
		*count = n;
		ret = NVML_ERROR_INSUFFICIENT_SIZE;
		goto unlock;
	}
	if (n && !infos) {
		ret = NVML_ERROR_INVALID_ARGUMENT;
		goto unlock;
	}
	for (s = 0; (src = proc_source(device, s)); s++)
		i += source_procs(src, kind, infos, v1, i);
	*count = n;
unlock:
	pthread_mutex_unlock(&sim_mutex);
done:
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetComputeRunningProcesses_v3(struct scenario_gpu *device,
                                                                    unsigned *count,
                                                                    struct nvml_process_v2 *infos)
{
	return list_processes(FN_nvmlDeviceGetComputeRunningProcesses_v3, device,
	                      SCENARIO_PROC_COMPUTE, count, infos, 0);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetComputeRunningProcesses_v2(struct scenario_gpu *device,
                                                                    unsigned *count,
                                                                    struct nvml_process_v2 *infos)
{
	return list_processes(FN_nvmlDeviceGetComputeRunningProcesses_v2, device,
	                      SCENARIO_PROC_COMPUTE, count, infos, 0);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetComputeRunningProcesses(struct scenario_gpu *device,
                                                                 unsigned *count,
                                                                 struct nvml_process_v1 *infos)
{
	return list_processes(FN_nvmlDeviceGetComputeRunningProcesses, device,
	                      SCENARIO_PROC_COMPUTE, count, infos, 1);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetGraphicsRunningProcesses_v3(struct scenario_gpu *device,
                                                                     unsigned *count,
                                                                     struct nvml_process_v2 *infos)
{
	return list_processes(FN_nvmlDeviceGetGraphicsRunningProcesses_v3, device,
	                      SCENARIO_PROC_GRAPHICS, count, infos, 0);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetGraphicsRunningProcesses_v2(struct scenario_gpu *device,
                                                                     unsigned *count,
                                                                     struct nvml_process_v2 *infos)
{
	return list_processes(FN_nvmlDeviceGetGraphicsRunningProcesses_v2, device,
	                      SCENARIO_PROC_GRAPHICS, count, infos, 0);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetGraphicsRunningProcesses(struct scenario_gpu *device,
                                                                  unsigned *count,
                                                                  struct nvml_process_v1 *infos)
{
	return list_processes(FN_nvmlDeviceGetGraphicsRunningProcesses, device,
	                      SCENARIO_PROC_GRAPHICS, count, infos, 1);
}

/* MPS clients (scenario type "mps"): in this list only, 24-byte entries from
 * _v2 on like the others. */
SIM_EXPORT enum nvml_return
nvmlDeviceGetMPSComputeRunningProcesses_v3(struct scenario_gpu *device, unsigned *count,
                                           struct nvml_process_v2 *infos)
{
	return list_processes(FN_nvmlDeviceGetMPSComputeRunningProcesses_v3, device,
	                      SCENARIO_PROC_MPS, count, infos, 0);
}

SIM_EXPORT enum nvml_return
nvmlDeviceGetMPSComputeRunningProcesses_v2(struct scenario_gpu *device, unsigned *count,
                                           struct nvml_process_v2 *infos)
{
	return list_processes(FN_nvmlDeviceGetMPSComputeRunningProcesses_v2, device,
	                      SCENARIO_PROC_MPS, count, infos, 0);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetMPSComputeRunningProcesses(struct scenario_gpu *device,
                                                                    unsigned *count,
                                                                    struct nvml_process_v1 *infos)
{
	return list_processes(FN_nvmlDeviceGetMPSComputeRunningProcesses, device, SCENARIO_PROC_MPS,
	                      count, infos, 1);
}

/*
 * Per-process utilization as the driver keeps it: a buffer of samples of the
 * processes that did work, of which the caller gets those newer than
 * last_seen_us.  A process that computed nothing has no sample, and a GPU
 * where nobody computed answers NOT_FOUND, as real drivers do.  The
 * simulator has one sample per working process, taken now: a scenario
 * process's "utilization" and a live simload's --util.  Count protocol as
 * for the process lists.
 */
SIM_EXPORT enum nvml_return nvmlDeviceGetProcessUtilization(struct scenario_gpu *device,
                                                            struct nvml_proc_util_sample *samples,
                                                            unsigned *count,
                                                            unsigned long long last_seen_us)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetProcessUtilization, device,
	                                        count != NULL, SCENARIO_HAS_UTIL);
	struct nvml_proc_util_sample *s;
	struct timespec ts;
	unsigned long long now_us;
	unsigned n = 0, i = 0;
	size_t j;

	if (ret == NVML_SUCCESS && device->mig_mode)
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret != NVML_SUCCESS)
		return ret;
	clock_gettime(CLOCK_REALTIME, &ts);
	now_us = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
	if (last_seen_us >= now_us)
		return NVML_ERROR_NOT_FOUND;
	pthread_mutex_lock(&sim_mutex);
	sim_live_refresh();
	for (j = 0; j < device->proc_count; j++)
		n += device->procs[j].utilization > 0;
	for (j = 0; j < sim_live.count; j++)
		n += sim_live.uses[j].utilization > 0 &&
		     !strcmp(sim_live.uses[j].uuid, device->uuid);
	if (n == 0) {
		ret = NVML_ERROR_NOT_FOUND;
	} else if (*count < n || !samples) {
		*count = n;
		ret = NVML_ERROR_INSUFFICIENT_SIZE;
	} else {
		for (j = 0; j < device->proc_count + sim_live.count; j++) {
			unsigned pid, util;

			if (j < device->proc_count) {
				pid = device->procs[j].pid;
				util = device->procs[j].utilization;
			} else {
				const struct simstate_use *u =
				    &sim_live.uses[j - device->proc_count];

				if (strcmp(u->uuid, device->uuid))
					continue;
				pid = u->pid;
				util = u->utilization;
			}
			if (!util)
				continue;
			s = &samples[i++];
			memset(s, 0, sizeof *s);
			s->pid = pid;
			s->timestamp_us = now_us;
			s->sm_util = util < 100 ? util : 100;
		}
		*count = n;
	}
	pthread_mutex_unlock(&sim_mutex);
	return ret;
}
