/*
 * nvml_sim.c - the NVML simulator: a libnvidia-ml.so.1 that answers the NVML
 * C functions gpuman uses from a JSON scenario ($GPUMAN_SIM) and from the
 * live gpuman-simload processes in the simulator's state directory.
 *
 * It implements NVML's ABI (symbol names, struct layouts, return codes; see
 * shared/nvml-reference.md) with its own declarations, so it builds without
 * NVIDIA's header.  Only the NVML functions and gpumanSimError() are
 * exported: the Makefile builds sim objects with -fvisibility=hidden and the
 * functions below are marked SIM_EXPORT.
 *
 * The scenario is parsed once, by the first nvmlInit*, so queries cost
 * microseconds; the live processes change all the time and are re-read from
 * the state directory, at most once per LIVE_TTL_NS so that a burst of
 * queries (a whole snapshot of 8 GPUs) reads the directory once.
 *
 * "missing_symbols": a shared object cannot hide its own symbols from dlsym
 * at run time, so a function the scenario lists stays visible but answers
 * NVML_ERROR_FUNCTION_NOT_FOUND.  Libraries whose dlsym really returns NULL
 * are the per-branch builds (build/sim/r390/, r470/, ...): these same
 * objects linked with the exports of that driver branch, see sim/branch.c
 * and sim/driver-branches.txt.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "scenario.h"
#include "simstate.h"
#include "nvml_sim.h"

/* How long one reading of the live processes serves later queries: shorter
 * than any client could notice (a real driver lags more), long enough that
 * one snapshot of every GPU reads the directory once. */
#define LIVE_TTL_NS 5000000LL

#define MIB 1048576ULL

enum { NVML_TEMPERATURE_GPU = 0 };
enum {
	NVML_CLOCK_GRAPHICS = 0,
	NVML_CLOCK_SM = 1,
	NVML_CLOCK_MEM = 2,
	NVML_CLOCK_VIDEO = 3,
	NVML_CLOCK_COUNT = 4
};

/* nvmlMemory_t: bytes; "used" includes reserved memory. */
struct nvml_memory {
	unsigned long long total, free, used;
};

/* nvmlMemory_v2_t: "used" excludes reserved, like nvidia-smi. */
struct nvml_memory_v2 {
	unsigned version;
	unsigned long long total, reserved, free, used;
};
#define NVML_MEMORY_V2_VERSION (unsigned)(sizeof(struct nvml_memory_v2) | 2u << 24)

/* nvmlUtilization_t: percent. */
struct nvml_utilization {
	unsigned gpu, memory;
};

/* nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it (68 bytes). */
struct nvml_pci_info {
	char bus_id_legacy[16];
	unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[32];
};

/* The original nvmlPciInfo_t, which nvmlDeviceGetPciInfo and _v2 fill
 * (52 bytes): the "%04X:%02X:%02X.0" bus id first, then four reserved
 * words.  Writing the 68-byte layout here overruns the caller's struct. */
struct nvml_pci_info_v2 {
	char bus_id[16];
	unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
	unsigned reserved[4];
};

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
_Static_assert(sizeof(struct nvml_memory_v2) == 40, "nvmlMemory_v2_t is 40 bytes");
_Static_assert(NVML_MEMORY_V2_VERSION == 0x02000028, "nvmlMemory_v2 version word");
_Static_assert(sizeof(struct nvml_pci_info) == 68, "nvmlPciInfo_t is 68 bytes");
_Static_assert(sizeof(struct nvml_pci_info_v2) == 52, "the old nvmlPciInfo_t is 52 bytes");
_Static_assert(sizeof(struct nvml_process_v1) == 16, "nvmlProcessInfo_v1_t is 16 bytes");
_Static_assert(sizeof(struct nvml_process_v2) == 24, "nvmlProcessInfo_v2_t is 24 bytes");

/* The exported ABI; a device handle (nvmlDevice_t) points at the GPU's
 * struct scenario_gpu inside the loaded scenario. */
SIM_EXPORT enum nvml_return nvmlInit_v2(void);
SIM_EXPORT enum nvml_return nvmlInit(void);
SIM_EXPORT enum nvml_return nvmlInitWithFlags(unsigned flags);
SIM_EXPORT enum nvml_return nvmlShutdown(void);
SIM_EXPORT const char *nvmlErrorString(enum nvml_return result);
SIM_EXPORT enum nvml_return nvmlSystemGetDriverVersion(char *version, unsigned length);
SIM_EXPORT enum nvml_return nvmlSystemGetCudaDriverVersion_v2(int *version);
SIM_EXPORT enum nvml_return nvmlSystemGetCudaDriverVersion(int *version);
SIM_EXPORT enum nvml_return nvmlDeviceGetCount_v2(unsigned *count);
SIM_EXPORT enum nvml_return nvmlDeviceGetCount(unsigned *count);
SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                          struct scenario_gpu **device);
SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByIndex(unsigned index,
                                                       struct scenario_gpu **device);
SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByUUID(const char *uuid,
                                                      struct scenario_gpu **device);
SIM_EXPORT enum nvml_return nvmlDeviceGetIndex(struct scenario_gpu *device, unsigned *index);
SIM_EXPORT enum nvml_return nvmlDeviceGetName(struct scenario_gpu *device, char *name,
                                              unsigned length);
SIM_EXPORT enum nvml_return nvmlDeviceGetUUID(struct scenario_gpu *device, char *uuid,
                                              unsigned length);
SIM_EXPORT enum nvml_return nvmlDeviceGetPciInfo_v3(struct scenario_gpu *device,
                                                    struct nvml_pci_info *pci);
SIM_EXPORT enum nvml_return nvmlDeviceGetPciInfo_v2(struct scenario_gpu *device,
                                                    struct nvml_pci_info_v2 *pci);
SIM_EXPORT enum nvml_return nvmlDeviceGetPciInfo(struct scenario_gpu *device,
                                                 struct nvml_pci_info_v2 *pci);
SIM_EXPORT enum nvml_return nvmlDeviceGetMinorNumber(struct scenario_gpu *device, unsigned *minor);
SIM_EXPORT enum nvml_return nvmlDeviceGetMemoryInfo_v2(struct scenario_gpu *device,
                                                       struct nvml_memory_v2 *memory);
SIM_EXPORT enum nvml_return nvmlDeviceGetMemoryInfo(struct scenario_gpu *device,
                                                    struct nvml_memory *memory);
SIM_EXPORT enum nvml_return nvmlDeviceGetUtilizationRates(struct scenario_gpu *device,
                                                          struct nvml_utilization *util);
SIM_EXPORT enum nvml_return nvmlDeviceGetPowerUsage(struct scenario_gpu *device,
                                                    unsigned *power_mw);
SIM_EXPORT enum nvml_return nvmlDeviceGetEnforcedPowerLimit(struct scenario_gpu *device,
                                                            unsigned *limit_mw);
SIM_EXPORT enum nvml_return nvmlDeviceGetTemperature(struct scenario_gpu *device, int sensor,
                                                     unsigned *temp_c);
SIM_EXPORT enum nvml_return nvmlDeviceGetCudaComputeCapability(struct scenario_gpu *device,
                                                               int *major, int *minor);
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
SIM_EXPORT enum nvml_return nvmlDeviceGetComputeMode(struct scenario_gpu *device, int *mode);
SIM_EXPORT enum nvml_return nvmlDeviceGetMigMode(struct scenario_gpu *device, unsigned *current,
                                                 unsigned *pending);
SIM_EXPORT enum nvml_return nvmlDeviceGetNumGpuCores(struct scenario_gpu *device, unsigned *cores);
SIM_EXPORT enum nvml_return nvmlDeviceGetMaxClockInfo(struct scenario_gpu *device, int type,
                                                      unsigned *clock_mhz);
SIM_EXPORT enum nvml_return nvmlDeviceGetProcessUtilization(struct scenario_gpu *device,
                                                            struct nvml_proc_util_sample *samples,
                                                            unsigned *count,
                                                            unsigned long long last_seen_us);
SIM_EXPORT const char *gpumanSimError(void);

/*
 * The mutex guards initialisation and the live-process cache.  The scenario
 * itself is read-only between the first nvmlInit and the last nvmlShutdown,
 * so device queries read it without the lock (as with the real library,
 * calling nvmlShutdown while another thread queries is the caller's bug).
 */
static pthread_mutex_t sim_mutex = PTHREAD_MUTEX_INITIALIZER;
struct scenario *sim;
static unsigned sim_init_count;
static char sim_error[SCENARIO_ERR_SIZE];
/* nvmlErrorString(NVML_ERROR_UNKNOWN) after the simulator's own failure:
 * clients that know nothing of gpumanSimError still show why. */
static char sim_unknown_text[SCENARIO_ERR_SIZE + 64];

static struct simstate sim_state = SIMSTATE_INIT;
static struct simstate_live sim_live = SIMSTATE_LIVE_INIT;
static long long live_read_ns = -1; /* CLOCK_MONOTONIC of the last reading, -1: none */
static uint64_t live_used_mib[SCENARIO_MAX_GPUS];
static unsigned live_util_pct[SCENARIO_MAX_GPUS];

static long long monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Live use of a slice (simload under CUDA_VISIBLE_DEVICES=MIG-...).  Call
 * with sim_mutex held, after live_refresh. */
static uint64_t live_mig_mib(const struct scenario_gpu *mig)
{
	uint64_t mib = 0;

	for (size_t i = 0; i < sim_live.count; i++)
		if (!strcmp(sim_live.uses[i].uuid, mig->uuid))
			mib += sim_live.uses[i].used_mib;
	return mib;
}

/* The scenario's timeline phase of this moment into sim->gpus.  Call with
 * sim_mutex held: readers of a GPU's processes, memory and utilization
 * hold it too. */
static void timeline_refresh(void)
{
	struct timespec ts;

	if (!sim->phase_count)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	scenario_apply_time(sim, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* Call with sim_mutex held. */
static void live_refresh(void)
{
	long long now = monotonic_ns();
	size_t i;
	long gpu;

	timeline_refresh();
	if (live_read_ns >= 0 && now - live_read_ns < LIVE_TTL_NS)
		return;
	simstate_read(&sim_state, &sim_live); /* on failure: no live processes */
	memset(live_used_mib, 0, sizeof live_used_mib);
	memset(live_util_pct, 0, sizeof live_util_pct);
	for (i = 0; i < sim_live.count; i++) {
		gpu = scenario_find_uuid(sim, sim_live.uses[i].uuid);
		if (gpu < 0) {
			const struct scenario_gpu *mig =
			    scenario_find_mig(sim, sim_live.uses[i].uuid);

			if (!mig)
				continue; /* an entry written for another scenario's GPU */
			gpu = (long)mig->parent->index; /* the GPU holds its slices' memory */
		}
		live_used_mib[gpu] += sim_live.uses[i].used_mib;
		live_util_pct[gpu] += sim_live.uses[i].utilization;
	}
	live_read_ns = now;
}

/* The simulated branch that stands for a driver: the newest one not newer
 * than it (the oldest for older drivers). */
static unsigned branch_for(unsigned major)
{
	unsigned b = sim_branches[0];

	for (size_t i = 0; sim_branches[i]; i++)
		if (sim_branches[i] <= major)
			b = sim_branches[i];
	return b;
}

/*
 * A scenario's driver belongs to one branch, and each library is one
 * branch: like a real libnvidia-ml.so of another version than the kernel
 * module, the wrong library refuses to start, and says which one is right.
 * Call with sim_mutex held.
 */
static int branch_mismatch(const struct scenario *sc)
{
	unsigned want;
	Dl_info self;
	char dir[PATH_MAX] = ".", *slash;

	if (!sc->has_driver_version)
		return 0;
	want = branch_for((unsigned)atoi(sc->driver_version));
	if (want == sim_branch)
		return 0;
	if (dladdr((void *)branch_for, &self) && self.dli_fname) {
		snprintf(dir, sizeof dir, "%s", self.dli_fname);
		slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		/* r470/ beside r580/ (the default library is a link into r580/) */
		if ((slash = strrchr(dir, '/')) && slash[1] == 'r' && slash[2] >= '0' &&
		    slash[2] <= '9')
			*slash = '\0';
	}
	snprintf(sim_error, sizeof sim_error,
	         "%.300s: driver_version '%s' is branch R%u but this simulator library is R%u: "
	         "use %.400s/r%u/libnvidia-ml.so.1 (gpuman --sim chooses it itself)",
	         sc->path, sc->driver_version, want, sim_branch, dir, want);
	return 1;
}

static enum nvml_return sim_init(enum scenario_fn fn)
{
	struct scenario *sc = NULL;
	const char *path = getenv("GPUMAN_SIM");
	enum nvml_return ret = NVML_SUCCESS;

	pthread_mutex_lock(&sim_mutex);
	if (sim) {
		/* Like NVML, every init is matched by one shutdown. */
		if (sim->missing[fn])
			ret = NVML_ERROR_FUNCTION_NOT_FOUND;
		else
			sim_init_count++;
		goto done;
	}
	if (!path || !*path) {
		snprintf(sim_error, sizeof sim_error,
		         "GPUMAN_SIM is not set: point it at a scenario file (e.g. "
		         "examples/lab-8gpu.json) to use the NVML simulator");
		ret = NVML_ERROR_UNKNOWN;
		goto done;
	}
	if (scenario_load(path, &sc, sim_error, sizeof sim_error) < 0) {
		ret = NVML_ERROR_UNKNOWN;
		goto done;
	}
	sim_error[0] = '\0';
	if (branch_mismatch(sc)) {
		ret = NVML_ERROR_LIB_RM_VERSION_MISMATCH;
		goto done;
	}
	if (sc->missing[fn]) {
		ret = NVML_ERROR_FUNCTION_NOT_FOUND;
		goto done;
	}
	if (sc->init_error) {
		snprintf(sim_error, sizeof sim_error, "%s: init_error '%s' makes nvmlInit fail",
		         path, scenario_error_name(sc->init_error));
		ret = (enum nvml_return)sc->init_error;
		goto done;
	}
	/* A missing or unusable state directory just means no live processes. */
	simstate_open(&sim_state, sc->realpath, 0, NULL, 0);
	live_read_ns = -1;
	sim = sc;
	sc = NULL;
	sim_init_count = 1;
done:
	if (ret == NVML_ERROR_UNKNOWN)
		snprintf(sim_unknown_text, sizeof sim_unknown_text,
		         "Unknown Error (gpuman NVML simulator: %s)", sim_error);
	pthread_mutex_unlock(&sim_mutex);
	scenario_free(sc);
	return ret;
}

SIM_EXPORT enum nvml_return nvmlInit_v2(void)
{
	return sim_init(FN_nvmlInit_v2);
}

SIM_EXPORT enum nvml_return nvmlInit(void)
{
	return sim_init(FN_nvmlInit);
}

/* NVML_INIT_FLAG_NO_GPUS needs no handling: the simulator's init never fails
 * for want of GPUs ("gpus": [] is a working driver without GPUs). */
SIM_EXPORT enum nvml_return nvmlInitWithFlags(unsigned flags)
{
	(void)flags;
	return sim_init(FN_nvmlInitWithFlags);
}

SIM_EXPORT enum nvml_return nvmlShutdown(void)
{
	enum nvml_return ret = NVML_SUCCESS;

	pthread_mutex_lock(&sim_mutex);
	if (!sim)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (sim->missing[FN_nvmlShutdown])
		ret = NVML_ERROR_FUNCTION_NOT_FOUND;
	else if (--sim_init_count == 0) {
		simstate_close(&sim_state);
		simstate_live_release(&sim_live);
		scenario_free(sim);
		sim = NULL;
	}
	pthread_mutex_unlock(&sim_mutex);
	return ret;
}

SIM_EXPORT const char *nvmlErrorString(enum nvml_return result)
{
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_NO_PERMISSION:
		return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERROR_LIBRARY_NOT_FOUND:
		return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return "Function Not Found";
	case NVML_ERROR_GPU_IS_LOST:
		return "GPU is lost";
	case NVML_ERROR_OPERATING_SYSTEM:
		return "The operating system has blocked the request";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
		return "RM has detected an NVML/RM version mismatch";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
		return "Argument version mismatch";
	default:
		if (result == NVML_ERROR_UNKNOWN && sim_unknown_text[0])
			return sim_unknown_text;
		return "Unknown Error";
	}
}

SIM_EXPORT const char *gpumanSimError(void)
{
	return sim_error;
}

/* The checks every system query makes, in NVML's order. */
enum nvml_return sim_system_query(enum scenario_fn fn, int args_ok)
{
	enum nvml_return ret = NVML_SUCCESS;

	if (!sim)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (sim->missing[fn])
		ret = NVML_ERROR_FUNCTION_NOT_FOUND;
	else if (!args_ok)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	return ret;
}

static int in_array(const struct scenario_gpu *dev, const struct scenario_gpu *arr, size_t n)
{
	uintptr_t base = (uintptr_t)arr, p = (uintptr_t)dev;

	return arr && p >= base && p < base + n * sizeof *dev && (p - base) % sizeof *dev == 0;
}

/* A handle we gave out: a GPU, or one of a GPU's MIG slices. */
static int device_valid(const struct scenario_gpu *dev)
{
	if (in_array(dev, sim->gpus, sim->gpu_count))
		return 1;
	for (size_t i = 0; i < sim->gpu_count; i++)
		if (in_array(dev, sim->gpus[i].migs, sim->gpus[i].mig_count))
			return 1;
	return 0;
}

/*
 * The checks every device query makes: initialised, present in this driver,
 * a handle we gave out, sane arguments, the GPU's injected fault, and
 * whether the GPU reports the field at all (need: enum scenario_has bits).
 */
enum nvml_return sim_device_query(enum scenario_fn fn, const struct scenario_gpu *dev, int args_ok,
                                  unsigned need)
{
	enum nvml_return ret = sim_system_query(fn, 1);

	if (ret == NVML_SUCCESS && (!device_valid(dev) || !args_ok))
		ret = NVML_ERROR_INVALID_ARGUMENT;
	/* A slice shares its GPU's fate. */
	if (ret == NVML_SUCCESS && (dev->is_mig ? dev->parent->fail : dev->fail))
		ret = (enum nvml_return)(dev->is_mig ? dev->parent->fail : dev->fail);
	if (ret == NVML_SUCCESS && (dev->has & need) != need)
		ret = NVML_ERROR_NOT_SUPPORTED;
	return ret;
}

/* One of the scenario's readings, or NOT_SUPPORTED where it gives none. */
enum nvml_return sim_reading(const struct scenario_gpu *dev, enum scenario_reading r, unsigned *out)
{
	if (!(dev->reading_has & (1u << r)))
		return NVML_ERROR_NOT_SUPPORTED;
	*out = dev->reading[r];
	return NVML_SUCCESS;
}

enum nvml_return sim_copy_string(const char *value, char *buf, unsigned length)
{
	if (strlen(value) >= length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, value, strlen(value) + 1);
	return NVML_SUCCESS;
}

SIM_EXPORT enum nvml_return nvmlSystemGetDriverVersion(char *version, unsigned length)
{
	enum nvml_return ret = sim_system_query(FN_nvmlSystemGetDriverVersion, version != NULL);

	if (ret == NVML_SUCCESS && !sim->has_driver_version)
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret == NVML_SUCCESS)
		ret = sim_copy_string(sim->driver_version, version, length);
	return ret;
}

static enum nvml_return cuda_driver_version(enum scenario_fn fn, int *version)
{
	enum nvml_return ret = sim_system_query(fn, version != NULL);

	if (ret == NVML_SUCCESS && !sim->has_cuda_driver_version)
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret == NVML_SUCCESS)
		*version = sim->cuda_driver_version;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlSystemGetCudaDriverVersion_v2(int *version)
{
	return cuda_driver_version(FN_nvmlSystemGetCudaDriverVersion_v2, version);
}

SIM_EXPORT enum nvml_return nvmlSystemGetCudaDriverVersion(int *version)
{
	return cuda_driver_version(FN_nvmlSystemGetCudaDriverVersion, version);
}

static enum nvml_return device_count(enum scenario_fn fn, unsigned *count)
{
	enum nvml_return ret = sim_system_query(fn, count != NULL);

	if (ret == NVML_SUCCESS)
		*count = (unsigned)sim->gpu_count;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetCount_v2(unsigned *count)
{
	return device_count(FN_nvmlDeviceGetCount_v2, count);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetCount(unsigned *count)
{
	return device_count(FN_nvmlDeviceGetCount, count);
}

/* A GPU the process may not open has no handle; other faults show up in the
 * queries made with the handle unless the scenario puts them here. */
enum nvml_return sim_give_handle(struct scenario_gpu *gpu, struct scenario_gpu **device)
{
	/* A GPU that fell off the bus often fails right here on real machines
	 * ("fail_at": "handle"). */
	if (gpu->fail == NVML_ERROR_NO_PERMISSION || gpu->fail_at_handle)
		return (enum nvml_return)gpu->fail;
	*device = gpu;
	return NVML_SUCCESS;
}

static enum nvml_return handle_by_index(enum scenario_fn fn, unsigned index,
                                        struct scenario_gpu **device)
{
	enum nvml_return ret = sim_system_query(fn, device != NULL);

	if (ret == NVML_SUCCESS && index >= sim->gpu_count)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		ret = sim_give_handle(&sim->gpus[index], device);
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                          struct scenario_gpu **device)
{
	return handle_by_index(FN_nvmlDeviceGetHandleByIndex_v2, index, device);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByIndex(unsigned index, struct scenario_gpu **device)
{
	return handle_by_index(FN_nvmlDeviceGetHandleByIndex, index, device);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByUUID(const char *uuid,
                                                      struct scenario_gpu **device)
{
	enum nvml_return ret =
	    sim_system_query(FN_nvmlDeviceGetHandleByUUID, uuid != NULL && device != NULL);
	long pos = ret == NVML_SUCCESS ? scenario_find_uuid(sim, uuid) : -1;
	struct scenario_gpu *mig =
	    ret == NVML_SUCCESS && pos < 0 ? scenario_find_mig(sim, uuid) : NULL;

	if (mig && (mig->parent->fail_at_handle || mig->parent->fail == NVML_ERROR_NO_PERMISSION))
		return (enum nvml_return)mig->parent->fail;
	if (mig) {
		*device = mig;
		return NVML_SUCCESS;
	}
	if (ret == NVML_SUCCESS && pos < 0)
		ret = NVML_ERROR_NOT_FOUND;
	if (ret == NVML_SUCCESS)
		ret = sim_give_handle(&sim->gpus[pos], device);
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetIndex(struct scenario_gpu *device, unsigned *index)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetIndex, device, index != NULL, 0);

	if (ret == NVML_SUCCESS && device->is_mig)
		ret = NVML_ERROR_NOT_SUPPORTED; /* slices have no NVML index */
	if (ret == NVML_SUCCESS)
		*index = device->index;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetName(struct scenario_gpu *device, char *name,
                                              unsigned length)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetName, device, name != NULL, 0);

	if (ret == NVML_SUCCESS)
		ret = sim_copy_string(device->name, name, length);
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetUUID(struct scenario_gpu *device, char *uuid,
                                              unsigned length)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetUUID, device, uuid != NULL, 0);

	if (ret == NVML_SUCCESS)
		ret = sim_copy_string(device->uuid, uuid, length);
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetPciInfo_v3(struct scenario_gpu *device,
                                                    struct nvml_pci_info *pci)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetPciInfo_v3, device, pci != NULL, 0);

	if (ret == NVML_SUCCESS) {
		memset(pci, 0, sizeof *pci);
		snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "%s",
		         device->pci_bus_id_legacy);
		snprintf(pci->bus_id, sizeof pci->bus_id, "%s", device->pci_bus_id);
		pci->domain = device->pci_domain;
		pci->bus = device->pci_bus;
		pci->device = device->pci_device;
		pci->pci_device_id = device->pci_device_id;
		pci->pci_subsystem_id = device->pci_subsystem_id;
	}
	return ret;
}

/* The 52-byte layout of nvmlDeviceGetPciInfo and _v2. */
static enum nvml_return pci_info_v2(enum scenario_fn fn, struct scenario_gpu *device,
                                    struct nvml_pci_info_v2 *pci)
{
	enum nvml_return ret = sim_device_query(fn, device, pci != NULL, 0);

	if (ret == NVML_SUCCESS) {
		memset(pci, 0, sizeof *pci);
		snprintf(pci->bus_id, sizeof pci->bus_id, "%s", device->pci_bus_id_legacy);
		pci->domain = device->pci_domain;
		pci->bus = device->pci_bus;
		pci->device = device->pci_device;
		pci->pci_device_id = device->pci_device_id;
		pci->pci_subsystem_id = device->pci_subsystem_id;
	}
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetPciInfo_v2(struct scenario_gpu *device,
                                                    struct nvml_pci_info_v2 *pci)
{
	return pci_info_v2(FN_nvmlDeviceGetPciInfo_v2, device, pci);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetPciInfo(struct scenario_gpu *device,
                                                 struct nvml_pci_info_v2 *pci)
{
	return pci_info_v2(FN_nvmlDeviceGetPciInfo, device, pci);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetMinorNumber(struct scenario_gpu *device, unsigned *minor)
{
	enum nvml_return ret =
	    sim_device_query(FN_nvmlDeviceGetMinorNumber, device, minor != NULL, 0);

	if (ret == NVML_SUCCESS)
		*minor = device->minor_number;
	return ret;
}

/* Used memory in MiB, reserved memory not counted: the driver's own, the
 * scenario's processes' and the live processes'; never more than what the
 * reserve leaves (then free is 0). */
static uint64_t gpu_used_mib(const struct scenario_gpu *device)
{
	uint64_t used, room = device->mem_total_mib - device->mem_reserved_mib;

	pthread_mutex_lock(&sim_mutex);
	live_refresh();
	used = device->mem_used_mib + device->procs_used_mib +
	       (device->is_mig ? live_mig_mib(device) : live_used_mib[device->index]);
	pthread_mutex_unlock(&sim_mutex);
	return used < room ? used : room;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetMemoryInfo_v2(struct scenario_gpu *device,
                                                       struct nvml_memory_v2 *memory)
{
	enum nvml_return ret =
	    sim_device_query(FN_nvmlDeviceGetMemoryInfo_v2, device, memory != NULL, 0);
	uint64_t used;

	/* NVML answers FUNCTION_NOT_FOUND, not a version error, to a wrong
	 * version word (e.g. a caller passing 2 instead of 0x02000028). */
	if (ret == NVML_SUCCESS && memory->version != NVML_MEMORY_V2_VERSION)
		ret = NVML_ERROR_FUNCTION_NOT_FOUND;
	if (ret == NVML_SUCCESS && !(device->has & SCENARIO_HAS_MEMORY))
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret == NVML_SUCCESS) {
		used = gpu_used_mib(device);
		memory->total = device->mem_total_mib * MIB;
		memory->reserved = device->mem_reserved_mib * MIB;
		memory->used = used * MIB;
		memory->free = (device->mem_total_mib - device->mem_reserved_mib - used) * MIB;
	}
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetMemoryInfo(struct scenario_gpu *device,
                                                    struct nvml_memory *memory)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetMemoryInfo, device, memory != NULL,
	                                        SCENARIO_HAS_MEMORY);
	uint64_t used;

	if (ret == NVML_SUCCESS) {
		/* v1's used counts the reserve. */
		used = gpu_used_mib(device) + device->mem_reserved_mib;
		memory->total = device->mem_total_mib * MIB;
		memory->used = used * MIB;
		memory->free = (device->mem_total_mib - used) * MIB;
	}
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetUtilizationRates(struct scenario_gpu *device,
                                                          struct nvml_utilization *util)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetUtilizationRates, device,
	                                        util != NULL, SCENARIO_HAS_UTIL);
	unsigned gpu;

	/* As on real hardware, a GPU split into MIG slices has no utilization. */
	if (ret == NVML_SUCCESS && device->mig_mode)
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret == NVML_SUCCESS) {
		pthread_mutex_lock(&sim_mutex);
		live_refresh();
		gpu = device->util_gpu_pct + device->procs_util_pct + live_util_pct[device->index];
		pthread_mutex_unlock(&sim_mutex);
		util->gpu = gpu < 100 ? gpu : 100;
		util->memory = device->util_mem_pct;
	}
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetPowerUsage(struct scenario_gpu *device, unsigned *power_mw)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetPowerUsage, device,
	                                        power_mw != NULL, SCENARIO_HAS_POWER);

	if (ret == NVML_SUCCESS)
		*power_mw = device->power_mw;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetEnforcedPowerLimit(struct scenario_gpu *device,
                                                            unsigned *limit_mw)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetEnforcedPowerLimit, device,
	                                        limit_mw != NULL, SCENARIO_HAS_POWER_LIMIT);

	if (ret == NVML_SUCCESS)
		*limit_mw = device->power_limit_mw;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetTemperature(struct scenario_gpu *device, int sensor,
                                                     unsigned *temp_c)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetTemperature, device,
	                                        temp_c != NULL && sensor == NVML_TEMPERATURE_GPU,
	                                        SCENARIO_HAS_TEMPERATURE);

	if (ret == NVML_SUCCESS)
		*temp_c = device->temperature_c;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetCudaComputeCapability(struct scenario_gpu *device,
                                                               int *major, int *minor)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetCudaComputeCapability, device,
	                                        major != NULL && minor != NULL, SCENARIO_HAS_CC);

	if (ret == NVML_SUCCESS) {
		*major = device->cc_major;
		*minor = device->cc_minor;
	}
	return ret;
}

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
		live_refresh();
	else
		timeline_refresh();
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

SIM_EXPORT enum nvml_return nvmlDeviceGetComputeMode(struct scenario_gpu *device, int *mode)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetComputeMode, device, mode != NULL,
	                                        SCENARIO_HAS_COMPUTE_MODE);

	if (ret == NVML_SUCCESS)
		*mode = device->compute_mode;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetMigMode(struct scenario_gpu *device, unsigned *current,
                                                 unsigned *pending)
{
	enum nvml_return ret = sim_device_query(
	    FN_nvmlDeviceGetMigMode, device, current != NULL && pending != NULL, SCENARIO_HAS_MIG);

	if (ret == NVML_SUCCESS) {
		*current = device->mig_mode;
		*pending = device->mig_mode;
	}
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetNumGpuCores(struct scenario_gpu *device, unsigned *cores)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetNumGpuCores, device, cores != NULL,
	                                        SCENARIO_HAS_CORES);

	if (ret == NVML_SUCCESS)
		*cores = device->cuda_cores;
	return ret;
}

/* Max graphics and SM clocks are max_sm_clock_mhz; memory and video have
 * their own readings. */
SIM_EXPORT enum nvml_return nvmlDeviceGetMaxClockInfo(struct scenario_gpu *device, int type,
                                                      unsigned *clock_mhz)
{
	enum nvml_return ret =
	    sim_device_query(FN_nvmlDeviceGetMaxClockInfo, device,
	                     clock_mhz != NULL && type >= 0 && type < NVML_CLOCK_COUNT, 0);

	if (ret != NVML_SUCCESS)
		return ret;
	if (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM) {
		if (!(device->has & SCENARIO_HAS_CLOCK))
			return NVML_ERROR_NOT_SUPPORTED;
		*clock_mhz = device->max_sm_clock_mhz;
		return NVML_SUCCESS;
	}
	return sim_reading(device,
	                   type == NVML_CLOCK_MEM ? READING_MAX_CLOCK_MEM_MHZ
	                                          : READING_MAX_CLOCK_VIDEO_MHZ,
	                   clock_mhz);
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
	live_refresh();
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
