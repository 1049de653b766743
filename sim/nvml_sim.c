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
#include <errno.h>
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
SIM_EXPORT const char *gpumanSimError(void);

/*
 * The mutex guards initialisation and the live-process cache.  The scenario
 * itself is read-only between the first nvmlInit and the last nvmlShutdown,
 * so device queries read it without the lock (as with the real library,
 * calling nvmlShutdown while another thread queries is the caller's bug).
 */
pthread_mutex_t sim_mutex = PTHREAD_MUTEX_INITIALIZER;
struct scenario *sim;
static unsigned sim_init_count;
static char sim_error[SCENARIO_ERR_SIZE];
/* nvmlErrorString(NVML_ERROR_UNKNOWN) after the simulator's own failure:
 * clients that know nothing of gpumanSimError still show why. */
static char sim_unknown_text[SCENARIO_ERR_SIZE + 64];

static struct simstate sim_state = SIMSTATE_INIT;
struct simstate_live sim_live = SIMSTATE_LIVE_INIT;
static long long live_read_ns = -1; /* CLOCK_MONOTONIC of the last reading, -1: none */
uint64_t sim_live_used_mib[SCENARIO_MAX_GPUS];
unsigned sim_live_util_pct[SCENARIO_MAX_GPUS];

/*
 * What the scenario's "latency" says a call costs: real time, slept with
 * clock_nanosleep on an absolute deadline so that signals do not shorten
 * it, so that a program timed against the simulator pays what it would
 * pay a real driver (and spends no CPU on it, as a program waiting on the
 * driver spends none).  A cost under SPEND_SLICE_MS is owed, per thread,
 * until the debt reaches it: one sleep of 20 us costs more CPU than the
 * call it stands for and overshoots by the kernel's timer slack (50 us),
 * so a snapshot of 200 such calls sleeps a few slices of a millisecond
 * instead, the same time in all.
 */
#define SPEND_SLICE_MS 1.0
static _Thread_local double sim_debt_ms;

static void sim_spend(double ms)
{
	struct timespec until;
	long long ns;

	if (ms <= 0)
		return;
	if (ms < SPEND_SLICE_MS) {
		sim_debt_ms += ms;
		if (sim_debt_ms < SPEND_SLICE_MS)
			return;
		ms = sim_debt_ms;
	}
	sim_debt_ms = 0;
	ns = (long long)(ms * 1e6);
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(ns / 1000000000LL);
	until.tv_nsec += (long)(ns % 1000000000LL);
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
}

/* nvmlInit's cost for this scenario: the driver's start-up, and each GPU
 * without persistence mode brought up again. */
static double init_cost_ms(const struct scenario *sc)
{
	double ms = sc->latency.init_ms;

	for (size_t i = 0; i < sc->gpu_count; i++) {
		const struct scenario_gpu *g = &sc->gpus[i];

		if ((g->reading_has & (1u << READING_PERSISTENCE)) &&
		    !g->reading[READING_PERSISTENCE])
			ms += sc->latency.attach_ms;
	}
	return ms;
}

static long long monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Live use of a slice (simload under CUDA_VISIBLE_DEVICES=MIG-...).  Call
 * with sim_mutex held, after sim_live_refresh. */
uint64_t sim_live_mig_mib(const struct scenario_gpu *mig)
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
void sim_timeline_refresh(void)
{
	struct timespec ts;

	if (!sim->phase_count)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	scenario_apply_time(sim, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* Call with sim_mutex held. */
void sim_live_refresh(void)
{
	long long now = monotonic_ns();
	size_t i;
	long gpu;

	sim_timeline_refresh();
	if (live_read_ns >= 0 && now - live_read_ns < LIVE_TTL_NS)
		return;
	simstate_read(&sim_state, &sim_live); /* on failure: no live processes */
	memset(sim_live_used_mib, 0, sizeof sim_live_used_mib);
	memset(sim_live_util_pct, 0, sizeof sim_live_util_pct);
	for (i = 0; i < sim_live.count; i++) {
		gpu = scenario_find_uuid(sim, sim_live.uses[i].uuid);
		if (gpu < 0) {
			const struct scenario_gpu *mig =
			    scenario_find_mig(sim, sim_live.uses[i].uuid);

			if (!mig)
				continue; /* an entry written for another scenario's GPU */
			gpu = (long)mig->parent->index; /* the GPU holds its slices' memory */
		}
		sim_live_used_mib[gpu] += sim_live.uses[i].used_mib;
		sim_live_util_pct[gpu] += sim_live.uses[i].utilization;
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
	double cost_ms = 0;

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
	/* Only the first init of a process starts the driver; later ones
	 * count references, as NVML's do. */
	cost_ms = init_cost_ms(sim);
done:
	if (ret == NVML_ERROR_UNKNOWN)
		snprintf(sim_unknown_text, sizeof sim_unknown_text,
		         "Unknown Error (gpuman NVML simulator: %s)", sim_error);
	pthread_mutex_unlock(&sim_mutex);
	scenario_free(sc);
	sim_spend(cost_ms);
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
	/* The driver answers after its time, whatever it answers. */
	if (sim)
		sim_spend(sim->latency.call_ms[scenario_fn_family(fn)]);
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
