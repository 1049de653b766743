/*
 * nvml.c - the NVML backend: the library loaded and kept, its errors in
 * words, and what an answer means for a field (nvml_gpu.c and nvml_procs.c
 * read the fields).
 *
 * The library is loaded at run time with dlopen (never linked), so that gpuman
 * starts on machines without the driver and can be pointed at the simulator.
 * We declare the few NVML types we use ourselves, from the layouts in
 * shared/nvml-reference.md, and look every versioned function up with its
 * fallbacks: a newer symbol that is missing, or that answers
 * NVML_ERROR_FUNCTION_NOT_FOUND (an older driver, a wrong struct version, or
 * the simulator mimicking a missing symbol), falls back to the older one, and
 * the fallback is remembered so that later snapshots make one call, not two.
 *
 * Loaded libraries are cached per process, keyed by path: NVML is initialised
 * once and kept.  Everything else is a pure translation of NVML's answers into
 * a gm_snapshot, where "not supported" is a clear validity bit, never a zero.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nvml.h"
#include "nvml_abi.h"
#include "util.h"

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvml *cache;

/* ---- errors ------------------------------------------------------------ */

/* The constant's name, which is what people search for. */
const char *nvml_err_name(int rc)
{
	switch (rc) {
#define NAME(e)                                                                                    \
	case e:                                                                                    \
		return #e
		NAME(NVML_SUCCESS);
		NAME(NVML_ERROR_UNINITIALIZED);
		NAME(NVML_ERROR_INVALID_ARGUMENT);
		NAME(NVML_ERROR_NOT_SUPPORTED);
		NAME(NVML_ERROR_NO_PERMISSION);
		NAME(NVML_ERROR_ALREADY_INITIALIZED);
		NAME(NVML_ERROR_NOT_FOUND);
		NAME(NVML_ERROR_INSUFFICIENT_SIZE);
		NAME(NVML_ERROR_INSUFFICIENT_POWER);
		NAME(NVML_ERROR_DRIVER_NOT_LOADED);
		NAME(NVML_ERROR_TIMEOUT);
		NAME(NVML_ERROR_IRQ_ISSUE);
		NAME(NVML_ERROR_LIBRARY_NOT_FOUND);
		NAME(NVML_ERROR_FUNCTION_NOT_FOUND);
		NAME(NVML_ERROR_CORRUPTED_INFOROM);
		NAME(NVML_ERROR_GPU_IS_LOST);
		NAME(NVML_ERROR_RESET_REQUIRED);
		NAME(NVML_ERROR_OPERATING_SYSTEM);
		NAME(NVML_ERROR_LIB_RM_VERSION_MISMATCH);
		NAME(NVML_ERROR_IN_USE);
		NAME(NVML_ERROR_MEMORY);
		NAME(NVML_ERROR_NO_DATA);
		NAME(NVML_ERROR_VGPU_ECC_NOT_ENABLED);
		NAME(NVML_ERROR_INSUFFICIENT_RESOURCES);
		NAME(NVML_ERROR_FREQ_NOT_SUPPORTED);
		NAME(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
		NAME(NVML_ERROR_DEPRECATED);
		NAME(NVML_ERROR_NOT_READY);
		NAME(NVML_ERROR_GPU_NOT_FOUND);
		NAME(NVML_ERROR_INVALID_STATE);
		NAME(NVML_ERROR_UNKNOWN);
#undef NAME
	}
	return "NVML_ERROR_UNKNOWN";
}

/*
 * "the NVIDIA driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)": our own
 * words for the errors people meet, NVML's string for the rest, and always
 * the constant, which is what people search for.
 */
void nvml_err_text(const struct nvml *nv, int rc, char *buf, size_t len)
{
	const char *text = NULL;

	switch (rc) {
	case NVML_ERROR_DRIVER_NOT_LOADED:
		text = "the NVIDIA driver is not loaded";
		break;
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
		text = "the NVIDIA driver and libnvidia-ml differ in version "
		       "(reboot, or reload the driver)";
		break;
	case NVML_ERROR_NO_PERMISSION:
		text = "no permission to access the GPU devices";
		break;
	case NVML_ERROR_GPU_IS_LOST:
		text = "GPU has fallen off the bus";
		break;
	default:
		if (nv && nv->error_string)
			text = nv->error_string(rc);
		break;
	}
	if (!text || !*text)
		text = "unknown error";
	snprintf(buf, len, "%s (%s)", text, nvml_err_name(rc));
}

/* ---- loading ----------------------------------------------------------- */

static void resolve(struct nvml *nv)
{
	void *dl = nv->dl;

	nv->init[0] = (fn_void)dlsym(dl, "nvmlInit_v2");
	nv->init[1] = (fn_void)dlsym(dl, "nvmlInit");
	nv->cuda_version[0] = (fn_int)dlsym(dl, "nvmlSystemGetCudaDriverVersion_v2");
	nv->cuda_version[1] = (fn_int)dlsym(dl, "nvmlSystemGetCudaDriverVersion");
	nv->count[0] = (fn_uint)dlsym(dl, "nvmlDeviceGetCount_v2");
	nv->count[1] = (fn_uint)dlsym(dl, "nvmlDeviceGetCount");
	nv->handle[0] = (fn_handle)dlsym(dl, "nvmlDeviceGetHandleByIndex_v2");
	nv->handle[1] = (fn_handle)dlsym(dl, "nvmlDeviceGetHandleByIndex");
	nv->pci[0] = (fn_dev_pci)dlsym(dl, "nvmlDeviceGetPciInfo_v3");
	nv->pci[1] = (fn_dev_pci)dlsym(dl, "nvmlDeviceGetPciInfo_v2");
	nv->pci[2] = (fn_dev_pci)dlsym(dl, "nvmlDeviceGetPciInfo");
	nv->memory_v2 = (fn_dev_mem2)dlsym(dl, "nvmlDeviceGetMemoryInfo_v2");
	nv->memory_v1 = (fn_dev_mem1)dlsym(dl, "nvmlDeviceGetMemoryInfo");
	nv->procs[PROC_COMPUTE][0] =
	    (fn_dev_procs)dlsym(dl, "nvmlDeviceGetComputeRunningProcesses_v2");
	nv->procs[PROC_COMPUTE][1] =
	    (fn_dev_procs)dlsym(dl, "nvmlDeviceGetComputeRunningProcesses");
	nv->procs[PROC_GRAPHICS][0] =
	    (fn_dev_procs)dlsym(dl, "nvmlDeviceGetGraphicsRunningProcesses_v2");
	nv->procs[PROC_GRAPHICS][1] =
	    (fn_dev_procs)dlsym(dl, "nvmlDeviceGetGraphicsRunningProcesses");
	/* MPS clients: in this list, not (or not only) in the compute one. */
	nv->procs[PROC_MPS][0] =
	    (fn_dev_procs)dlsym(dl, "nvmlDeviceGetMPSComputeRunningProcesses_v2");
	nv->procs[PROC_MPS][1] = (fn_dev_procs)dlsym(dl, "nvmlDeviceGetMPSComputeRunningProcesses");

	nv->error_string = (fn_errstr)dlsym(dl, "nvmlErrorString");
	nv->sim_error = (fn_simerr)dlsym(dl, "gpumanSimError");
	nv->driver_version = (fn_str)dlsym(dl, "nvmlSystemGetDriverVersion");
	nv->name = (fn_dev_str)dlsym(dl, "nvmlDeviceGetName");
	nv->uuid = (fn_dev_str)dlsym(dl, "nvmlDeviceGetUUID");
	nv->utilization = (fn_dev_util)dlsym(dl, "nvmlDeviceGetUtilizationRates");
	nv->power = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetPowerUsage");
	nv->power_limit = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetEnforcedPowerLimit");
	nv->cores = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetNumGpuCores");
	nv->temperature = (fn_dev_sel_uint)dlsym(dl, "nvmlDeviceGetTemperature");
	nv->clock = (fn_dev_sel_uint)dlsym(dl, "nvmlDeviceGetClockInfo");
	nv->max_clock = (fn_dev_sel_uint)dlsym(dl, "nvmlDeviceGetMaxClockInfo");
	nv->cc = (fn_dev_2int)dlsym(dl, "nvmlDeviceGetCudaComputeCapability");
	nv->compute_mode = (fn_dev_int)dlsym(dl, "nvmlDeviceGetComputeMode");
	nv->persistence = (fn_dev_int)dlsym(dl, "nvmlDeviceGetPersistenceMode");
	nv->mig_mode = (fn_dev_2uint)dlsym(dl, "nvmlDeviceGetMigMode");
	nv->proc_util = (fn_dev_proc_util)dlsym(dl, "nvmlDeviceGetProcessUtilization");
	nv->max_migs = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetMaxMigDeviceCount");
	nv->mig_handle = (fn_dev_idx_handle)dlsym(dl, "nvmlDeviceGetMigDeviceHandleByIndex");
	nv->gpu_instance_id = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetGpuInstanceId");
	nv->compute_instance_id = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetComputeInstanceId");
	nv->minor = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetMinorNumber");
	for (size_t i = 0; i < gpu_field_count; i++)
		if (gpu_fields[i].read == GF_READ_DEV_UINT)
			nv->reading[i] = (fn_dev_uint)dlsym(dl, gpu_fields[i].nvml);
}

static int64_t monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Called with cache_lock held. */
static enum gm_err nvml_init_locked(struct nvml *nv, char *errbuf, size_t errlen)
{
	char text[256];
	const char *sim;
	int64_t start_us = monotonic_us();
	int rc;

	CALL_VERSIONED(rc, nv, OP_INIT, nv->init);
	nv->init_rc = rc;
	if (rc == NVML_SUCCESS) {
		nv->init_ms = (double)(monotonic_us() - start_us) / 1000.0;
		nv->initialised = 1;
		return GM_OK;
	}
	/*
	 * The simulator explains itself: a malformed scenario (file, line:column
	 * or key path) comes with NVML_ERROR_UNKNOWN, which says nothing, so its
	 * text stands alone; an injected error ("init_error") keeps NVML's
	 * meaning and gets the scenario's words after it.
	 */
	sim = nv->sim_error ? nv->sim_error() : NULL;
	if (sim && *sim && rc == NVML_ERROR_UNKNOWN)
		return gm_fail(GM_ERR_SCENARIO, errbuf, errlen, "%s", sim);
	nvml_err_text(nv, rc, text, sizeof text);
	if (sim && *sim)
		return gm_fail(GM_ERR_NVML, errbuf, errlen, "nvmlInit: %s; %s", text, sim);
	return gm_fail(GM_ERR_NVML, errbuf, errlen, "nvmlInit: %s", text);
}

static int same_path(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Called with cache_lock held: load a library that is not in the cache. */
static enum gm_err nvml_load_locked(const char *path, struct nvml **out, char *errbuf,
                                    size_t errlen)
{
	static const char *const defaults[] = {"libnvidia-ml.so.1", "libnvidia-ml.so"};
	const char *shown = path ? path : defaults[0];
	char first_error[384] = "";
	struct nvml *nv = NULL, *it;
	enum gm_err err = GM_OK;
	void *dl = NULL;
	size_t i;

	if (path) {
		dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!dl)
			snprintf(first_error, sizeof first_error, "%s", dlerror());
	} else {
		for (i = 0; i < ARRAY_SIZE(defaults) && !dl; i++) {
			dl = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL);
			/* The soname's error is the telling one. */
			if (!dl && i == 0)
				snprintf(first_error, sizeof first_error, "%s", dlerror());
		}
	}
	if (!dl) {
		/* No hint about the driver here: the command line adds one. */
		err = gm_fail(GM_ERR_NVML_LOAD, errbuf, errlen,
		              "cannot load the NVML library '%s': %s", shown, first_error);
		goto out;
	}

	/* Another path to the same file (a symlink, "./x" and "x"): dlopen gave
	 * us the same handle, and NVML is already initialised through it. */
	for (it = cache; it; it = it->next) {
		if (it->dl == dl) {
			dlclose(dl);
			dl = NULL;
			*out = it;
			goto out;
		}
	}

	nv = calloc(1, sizeof *nv);
	if (!nv || (path && !(nv->path = strdup(path)))) {
		err = gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory loading '%s'", shown);
		goto out;
	}
	nv->dl = dl;
	resolve(nv);
	if (!nv->init[0] && !nv->init[1]) {
		err = gm_fail(GM_ERR_NVML_LOAD, errbuf, errlen,
		              "'%s' is not an NVML library: it has no nvmlInit_v2 or nvmlInit",
		              shown);
		goto out;
	}
	if ((!nv->count[0] && !nv->count[1]) || (!nv->handle[0] && !nv->handle[1])) {
		err = gm_fail(GM_ERR_NVML_LOAD, errbuf, errlen,
		              "'%s' is not a usable NVML library: it lacks "
		              "nvmlDeviceGetCount or nvmlDeviceGetHandleByIndex",
		              shown);
		goto out;
	}
	dl = NULL;
	nv->next = cache;
	cache = nv;
	*out = nv;
	nv = NULL;
out:
	if (nv) {
		free(nv->path);
		free(nv);
	}
	if (dl)
		dlclose(dl);
	return err;
}

enum gm_err nvml_open(const char *path, struct nvml **out, char *errbuf, size_t errlen)
{
	struct nvml *nv = NULL;
	enum gm_err err = GM_OK;

	*out = NULL;
	pthread_mutex_lock(&cache_lock);
	for (nv = cache; nv; nv = nv->next)
		if (same_path(nv->path, path))
			break;
	if (!nv) {
		err = nvml_load_locked(path, &nv, errbuf, errlen);
		if (err != GM_OK)
			goto out;
	}
	/* A library whose init failed stays loaded and is asked again: the
	 * driver may have been loaded since. */
	if (!nv->initialised) {
		err = nvml_init_locked(nv, errbuf, errlen);
		if (err != GM_OK)
			goto out;
	}
	nv->refs++;
	*out = nv;
out:
	pthread_mutex_unlock(&cache_lock);
	return err;
}

int nvml_wrong_version(const char *path)
{
	struct nvml *nv;
	int wrong = 0;

	pthread_mutex_lock(&cache_lock);
	for (nv = cache; nv; nv = nv->next)
		if (same_path(nv->path, path))
			wrong =
			    !nv->initialised && nv->init_rc == NVML_ERROR_LIB_RM_VERSION_MISMATCH;
	pthread_mutex_unlock(&cache_lock);
	return wrong;
}

/*
 * Drop a reference, but keep NVML initialised and the library loaded for the
 * life of the process: nvmlInit/nvmlShutdown cycles are costly on real
 * drivers (one report: ~42 s of CPU for ~100 cycles on a large node), the next
 * gm_open would pay the init again, and dlclose of libnvidia-ml is unsafe
 * while its internal threads may still run.  The OS reclaims it all at exit.
 */
double nvml_init_ms(const struct nvml *nv)
{
	return nv ? nv->init_ms : 0;
}

void nvml_close(struct nvml *nv)
{
	if (!nv)
		return;
	pthread_mutex_lock(&cache_lock);
	if (nv->refs > 0)
		nv->refs--;
	pthread_mutex_unlock(&cache_lock);
}

/* ---- answers: an NVML call's result in the snapshot's terms --------- */

enum answer nvml_answer(struct gpu_query *q, const char *what, int rc)
{
	char text[160];

	switch (rc) {
	case NVML_SUCCESS:
		return ANSWER_OK;
	case NVML_ERROR_GPU_IS_LOST:
		return ANSWER_LOST;
	case NVML_ERROR_NOT_SUPPORTED:
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return ANSWER_NONE;
	default:
		/* Unexpected, but one field must not cost the GPU: say it. */
		nvml_err_text(q->nv, rc, text, sizeof text);
		snapshot_add_note(q->snap, "GPU %u: %s: %s", q->gpu->index, what, text);
		return ANSWER_NONE;
	}
}

/* NVML may fill a buffer to the last byte without a terminator. */
void nvml_terminate(char *buf, size_t len)
{
	buf[len - 1] = '\0';
}

/* Total, free and used MiB of a device (a GPU or a MIG slice); NVML's
 * answer. */
int nvml_read_memory(struct nvml *nv, nvml_dev dev, uint64_t *total, uint64_t *free_mib,
                     uint64_t *used)
{
	struct nvml_memory_v2 m2;
	struct nvml_memory_v1 m1;
	int rc = NVML_ERROR_FUNCTION_NOT_FOUND;

	/* v2 first: its "used" excludes the driver's reservation, as nvidia-smi
	 * shows it; v1's includes it. */
	if (level_get(nv, OP_MEMORY) == 0 && nv->memory_v2) {
		memset(&m2, 0, sizeof m2);
		m2.version = NVML_MEMORY_V2;
		rc = nv->memory_v2(dev, &m2);
		/* Newer drivers answer a struct version they do not know with
		 * ARGUMENT_VERSION_MISMATCH rather than FUNCTION_NOT_FOUND. */
		if (rc == NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
			rc = NVML_ERROR_FUNCTION_NOT_FOUND;
		if (rc == NVML_ERROR_FUNCTION_NOT_FOUND)
			level_raise(nv, OP_MEMORY, 1);
		else if (rc == NVML_SUCCESS) {
			*total = m2.total / MIB;
			*free_mib = m2.free / MIB;
			*used = m2.used / MIB;
		}
	}
	if (rc == NVML_ERROR_FUNCTION_NOT_FOUND && nv->memory_v1) {
		memset(&m1, 0, sizeof m1);
		rc = nv->memory_v1(dev, &m1);
		if (rc == NVML_SUCCESS) {
			*total = m1.total / MIB;
			*free_mib = m1.free / MIB;
			*used = m1.used / MIB;
		}
	}
	return rc;
}
