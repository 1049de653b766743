/*
 * nvml.c - the NVML backend, and the only file of gpuman that knows NVML.
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
#include "util.h"

/* ---- NVML declarations (our own; nvml.h is never included) ------------ */

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_INSUFFICIENT_POWER = 8,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_IRQ_ISSUE = 11,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_CORRUPTED_INFOROM = 14,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_RESET_REQUIRED = 16,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
	NVML_ERROR_IN_USE = 19,
	NVML_ERROR_MEMORY = 20,
	NVML_ERROR_NO_DATA = 21,
	NVML_ERROR_VGPU_ECC_NOT_ENABLED = 22,
	NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
	NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_DEPRECATED = 26,
	NVML_ERROR_NOT_READY = 27,
	NVML_ERROR_GPU_NOT_FOUND = 28,
	NVML_ERROR_INVALID_STATE = 29,
	NVML_ERROR_UNKNOWN = 999
};

#define NVML_NAME_LEN 96 /* name and UUID buffers */
#define NVML_DRIVER_VERSION_LEN 80
#define NVML_TEMPERATURE_GPU 0
/* nvmlClockType_t */
#define NVML_CLOCK_GRAPHICS 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define MIB (1024ull * 1024ull)

/* NVML fills these buffers; ours must be at least as large. */
_Static_assert(sizeof(((struct gm_gpu *)0)->name) >= NVML_NAME_LEN, "name buffer");
_Static_assert(sizeof(((struct gm_gpu *)0)->uuid) >= NVML_NAME_LEN, "uuid buffer");
_Static_assert(sizeof(((struct gm_snapshot *)0)->driver_version) >= NVML_DRIVER_VERSION_LEN,
               "driver version buffer");

/* nvmlDevice_t is an opaque pointer; any object pointer type has its ABI. */
typedef struct nvml_device *nvml_dev;

struct nvml_utilization {
	unsigned gpu, memory; /* percent */
};

struct nvml_memory_v1 {
	unsigned long long total, free, used; /* bytes; used includes reserved */
};

struct nvml_memory_v2 {
	unsigned version;                               /* NVML_MEMORY_V2 */
	unsigned long long total, reserved, free, used; /* bytes */
};
/* sizeof(struct) | (2 << 24); NVML answers FUNCTION_NOT_FOUND to plain 2. */
#define NVML_MEMORY_V2 ((unsigned)(sizeof(struct nvml_memory_v2) | (2u << 24)))
_Static_assert(sizeof(struct nvml_memory_v2) == 40, "nvmlMemory_v2_t is 40 bytes");

/* The _v3 layout (68 bytes).  nvmlDeviceGetPciInfo and _v2 fill the older
 * 52-byte struct, with the bus id in the first 16 bytes, where
 * bus_id_legacy is; a 68-byte buffer holds either and pci_bus_id() copes
 * with both. */
struct nvml_pci {
	char bus_id_legacy[16];
	unsigned domain, bus, device, device_id, subsystem_id;
	char bus_id[32];
};

/* Process entries are parsed from raw bytes: 24 bytes from _v2 on ({pid, pad,
 * usedGpuMemory, gpuInstanceId, computeInstanceId}), 16 bytes before. */
#define PROC_V2_SIZE 24
#define PROC_V1_SIZE 16
/* What we allocate per entry whatever the version: _v3 on some 535 drivers
 * writes 32-byte entries, and a buffer too big costs nothing. */
#define PROC_ALLOC_SIZE 32
#define PROC_SLACK 8 /* processes may start between two calls */
#define PROC_TRIES 4
#define PROC_MAX 65536 /* a count beyond this is garbage, not processes */

#define GPU_MAX 64
#define MIG_MAX 64 /* slots per GPU; A100 and H100 have 7 */

typedef int (*fn_void)(void);
typedef const char *(*fn_errstr)(int);
typedef const char *(*fn_simerr)(void);
typedef int (*fn_str)(char *, unsigned);
typedef int (*fn_int)(int *);
typedef int (*fn_uint)(unsigned *);
typedef int (*fn_handle)(unsigned, nvml_dev *);
typedef int (*fn_dev_str)(nvml_dev, char *, unsigned);
typedef int (*fn_dev_pci)(nvml_dev, struct nvml_pci *);
typedef int (*fn_dev_mem1)(nvml_dev, struct nvml_memory_v1 *);
typedef int (*fn_dev_mem2)(nvml_dev, struct nvml_memory_v2 *);
typedef int (*fn_dev_util)(nvml_dev, struct nvml_utilization *);
typedef int (*fn_dev_uint)(nvml_dev, unsigned *);
typedef int (*fn_dev_int)(nvml_dev, int *);
typedef int (*fn_dev_2int)(nvml_dev, int *, int *);
typedef int (*fn_dev_2uint)(nvml_dev, unsigned *, unsigned *);
typedef int (*fn_dev_sel_uint)(nvml_dev, int, unsigned *);
typedef int (*fn_dev_procs)(nvml_dev, unsigned *, void *);
typedef int (*fn_dev_idx_handle)(nvml_dev, unsigned, nvml_dev *);

/* nvmlProcessUtilizationSample_t */
struct nvml_proc_sample {
	unsigned pid;
	unsigned long long timestamp_us; /* CPU wall clock */
	unsigned sm, mem, enc, dec;      /* percent */
};
_Static_assert(sizeof(struct nvml_proc_sample) == 32, "nvmlProcessUtilizationSample_t");
typedef int (*fn_dev_proc_util)(nvml_dev, struct nvml_proc_sample *, unsigned *,
                                unsigned long long);

/*
 * Functions with versions: which one to try first.  Each level is raised when
 * a version answers FUNCTION_NOT_FOUND, so that the fallback is found once per
 * library, not once per call.  Atomic because contexts in several threads may
 * share one loaded library; a lost race only costs one more call.
 */
enum nvml_op {
	OP_INIT,
	OP_CUDA_VERSION,
	OP_COUNT,
	OP_HANDLE,
	OP_PCI,
	OP_MEMORY,
	OP_PROCS_COMPUTE,
	OP_PROCS_GRAPHICS,
	OP_COUNT_OF
};

/* One loaded library; shared by every nvml_open of the same path. */
struct nvml {
	struct nvml *next; /* the cache list */
	char *path;        /* as given to nvml_open; NULL: the driver's */
	void *dl;
	int refs;        /* open handles; informational, see nvml_close */
	int initialised; /* nvmlInit succeeded */
	atomic_uint level[OP_COUNT_OF];

	/* Index 0 is the newest version. NULL: not exported. */
	fn_void init[2]; /* nvmlInit_v2, nvmlInit */
	fn_int cuda_version[2];
	fn_uint count[2];
	fn_handle handle[2];
	fn_dev_pci pci[3];
	fn_dev_mem2 memory_v2;
	fn_dev_mem1 memory_v1;
	fn_dev_procs procs[2][2]; /* [compute, graphics][v2, v1] */

	fn_errstr error_string;
	fn_simerr sim_error; /* gpumanSimError: only the simulator has it */
	fn_str driver_version;
	fn_dev_str name, uuid;
	fn_dev_util utilization;
	fn_dev_uint power, power_limit, cores;
	fn_dev_sel_uint temperature, clock, max_clock;
	fn_dev_2int cc;
	fn_dev_int compute_mode;
	fn_dev_2uint mig_mode;
	fn_dev_proc_util proc_util;
	/* MIG slices (R450+; a driver before has none of them). */
	fn_dev_uint max_migs, gpu_instance_id, compute_instance_id;
	fn_dev_idx_handle mig_handle;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvml *cache;

/* ---- errors ------------------------------------------------------------ */

/* The constant's name, which is what people search for. */
static const char *err_name(int rc)
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
static void err_text(const struct nvml *nv, int rc, char *buf, size_t len)
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
	snprintf(buf, len, "%s (%s)", text, err_name(rc));
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
	nv->procs[0][0] = (fn_dev_procs)dlsym(dl, "nvmlDeviceGetComputeRunningProcesses_v2");
	nv->procs[0][1] = (fn_dev_procs)dlsym(dl, "nvmlDeviceGetComputeRunningProcesses");
	nv->procs[1][0] = (fn_dev_procs)dlsym(dl, "nvmlDeviceGetGraphicsRunningProcesses_v2");
	nv->procs[1][1] = (fn_dev_procs)dlsym(dl, "nvmlDeviceGetGraphicsRunningProcesses");

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
	nv->mig_mode = (fn_dev_2uint)dlsym(dl, "nvmlDeviceGetMigMode");
	nv->proc_util = (fn_dev_proc_util)dlsym(dl, "nvmlDeviceGetProcessUtilization");
	nv->max_migs = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetMaxMigDeviceCount");
	nv->mig_handle = (fn_dev_idx_handle)dlsym(dl, "nvmlDeviceGetMigDeviceHandleByIndex");
	nv->gpu_instance_id = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetGpuInstanceId");
	nv->compute_instance_id = (fn_dev_uint)dlsym(dl, "nvmlDeviceGetComputeInstanceId");
}

/* The first version to try, and remembering that older ones are needed. */
static unsigned level_get(struct nvml *nv, enum nvml_op op)
{
	return atomic_load_explicit(&nv->level[op], memory_order_relaxed);
}

static void level_raise(struct nvml *nv, enum nvml_op op, unsigned level)
{
	if (level_get(nv, op) < level)
		atomic_store_explicit(&nv->level[op], level, memory_order_relaxed);
}

/*
 * Call the newest available version of a function among fns[], falling back
 * while a version is missing or answers FUNCTION_NOT_FOUND.  rc is
 * FUNCTION_NOT_FOUND when no version exists.
 */
#define CALL_VERSIONED(rc, nv, op, fns, ...)                                                       \
	do {                                                                                       \
		unsigned v_;                                                                       \
		(rc) = NVML_ERROR_FUNCTION_NOT_FOUND;                                              \
		for (v_ = level_get((nv), (op)); v_ < ARRAY_SIZE(fns); v_++) {                     \
			if (!(fns)[v_])                                                            \
				continue;                                                          \
			(rc) = (fns)[v_](__VA_ARGS__);                                             \
			if ((rc) != NVML_ERROR_FUNCTION_NOT_FOUND)                                 \
				break;                                                             \
			level_raise((nv), (op), v_ + 1);                                           \
		}                                                                                  \
	} while (0)

/* Called with cache_lock held. */
static enum gm_err nvml_init_locked(struct nvml *nv, char *errbuf, size_t errlen)
{
	char text[256];
	const char *sim;
	int rc;

	CALL_VERSIONED(rc, nv, OP_INIT, nv->init);
	if (rc == NVML_SUCCESS) {
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
	err_text(nv, rc, text, sizeof text);
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

/*
 * Drop a reference, but keep NVML initialised and the library loaded for the
 * life of the process: nvmlInit/nvmlShutdown cycles are costly on real
 * drivers (one report: ~42 s of CPU for ~100 cycles on a large node), the next
 * gm_open would pay the init again, and dlclose of libnvidia-ml is unsafe
 * while its internal threads may still run.  The OS reclaims it all at exit.
 */
void nvml_close(struct nvml *nv)
{
	if (!nv)
		return;
	pthread_mutex_lock(&cache_lock);
	if (nv->refs > 0)
		nv->refs--;
	pthread_mutex_unlock(&cache_lock);
}

/* ---- one GPU ----------------------------------------------------------- */

/* What a query's answer means for its field. */
enum answer {
	ANSWER_OK,   /* set the value and its bit */
	ANSWER_NONE, /* not supported: the bit stays clear */
	ANSWER_LOST  /* the GPU fell off the bus: stop asking it */
};

struct gpu_query {
	struct nvml *nv;
	struct gm_snapshot *snap;
	struct gm_gpu *gpu;
	nvml_dev dev;
};

static enum answer answer(struct gpu_query *q, const char *what, int rc)
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
		err_text(q->nv, rc, text, sizeof text);
		snapshot_add_note(q->snap, "GPU %u: %s: %s", q->gpu->index, what, text);
		return ANSWER_NONE;
	}
}

/* NVML may fill a buffer to the last byte without a terminator. */
static void terminate(char *buf, size_t len)
{
	buf[len - 1] = '\0';
}

/* Canonical "00000000:02:00.0" from a bus id string in either NVML form
 * ("0000:02:00.0" legacy, or the 8-digit domain); 0 if s is not one. */
static int pci_canonical(const char *s, char *out, size_t len)
{
	unsigned domain, bus, device, function;
	int end = 0;

	if (sscanf(s, "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &end) != 4 ||
	    s[end] != '\0')
		return 0;
	snprintf(out, len, "%08X:%02X:%02X.%X", domain, bus & 0xff, device & 0xff, function & 0x7);
	return 1;
}

static void pci_bus_id(struct nvml_pci *pci, char *out, size_t len)
{
	terminate(pci->bus_id, sizeof pci->bus_id);
	terminate(pci->bus_id_legacy, sizeof pci->bus_id_legacy);
	if (pci_canonical(pci->bus_id, out, len) || pci_canonical(pci->bus_id_legacy, out, len))
		return;
	snprintf(out, len, "%08X:%02X:%02X.0", pci->domain, pci->bus & 0xff, pci->device & 0xff);
}

/* Total, free and used MiB of a device (a GPU or a MIG slice); NVML's
 * answer. */
static int read_memory(struct nvml *nv, nvml_dev dev, uint64_t *total, uint64_t *free_mib,
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

static enum answer query_memory(struct gpu_query *q)
{
	struct gm_gpu *gpu = q->gpu;
	enum answer a;

	a = answer(q, "memory",
	           read_memory(q->nv, q->dev, &gpu->mem_total_mib, &gpu->mem_free_mib,
	                       &gpu->mem_used_mib));
	if (a == ANSWER_OK)
		gpu->valid |= GM_HAS_MEMORY;
	return a;
}

/* The clocks of enum gm_clock, by NVML's number. */
static const struct {
	int type;
	unsigned has, has_max;
	const char *what, *what_max;
} clocks[GM_CLOCK_COUNT] = {
    [GM_CLOCK_SM] = {NVML_CLOCK_SM, GM_HAS_CLOCK_SM, GM_HAS_MAX_CLOCK_SM, "SM clock",
                     "max SM clock"},
    [GM_CLOCK_MEM] = {NVML_CLOCK_MEM, GM_HAS_CLOCK_MEM, GM_HAS_MAX_CLOCK_MEM, "memory clock",
                      "max memory clock"},
    [GM_CLOCK_GRAPHICS] = {NVML_CLOCK_GRAPHICS, GM_HAS_CLOCK_GRAPHICS, GM_HAS_MAX_CLOCK_GRAPHICS,
                           "graphics clock", "max graphics clock"},
};

/* The fields of one GPU, in one pass; stops at the first GPU_IS_LOST. */
static enum answer query_fields(struct gpu_query *q)
{
	struct nvml *nv = q->nv;
	struct gm_gpu *gpu = q->gpu;
	struct nvml_utilization util;
	struct nvml_pci pci;
	unsigned u1, u2;
	int i1, i2, rc;
	enum answer a;

#define ASK(what, call)                                                                            \
	do {                                                                                       \
		rc = (call);                                                                       \
		a = answer(q, (what), rc);                                                         \
		if (a == ANSWER_LOST)                                                              \
			return a;                                                                  \
	} while (0)

	if (nv->name) {
		ASK("name", nv->name(q->dev, gpu->name, sizeof gpu->name));
		terminate(gpu->name, sizeof gpu->name);
		if (a != ANSWER_OK)
			gpu->name[0] = '\0';
	}
	if (nv->uuid) {
		ASK("uuid", nv->uuid(q->dev, gpu->uuid, sizeof gpu->uuid));
		terminate(gpu->uuid, sizeof gpu->uuid);
		if (a != ANSWER_OK)
			gpu->uuid[0] = '\0';
	}
	memset(&pci, 0, sizeof pci);
	CALL_VERSIONED(rc, nv, OP_PCI, nv->pci, q->dev, &pci);
	ASK("pci info", rc);
	if (a == ANSWER_OK) {
		pci_bus_id(&pci, gpu->pci_bus_id, sizeof gpu->pci_bus_id);
		gpu->valid |= GM_HAS_PCI;
	}
	if (query_memory(q) == ANSWER_LOST)
		return ANSWER_LOST;
	if (nv->utilization) {
		memset(&util, 0, sizeof util);
		ASK("utilization", nv->utilization(q->dev, &util));
		if (a == ANSWER_OK) {
			gpu->util_gpu_pct = util.gpu;
			gpu->util_mem_pct = util.memory;
			gpu->valid |= GM_HAS_UTIL;
		}
	}
	if (nv->power) {
		ASK("power", nv->power(q->dev, &u1));
		if (a == ANSWER_OK) {
			gpu->power_mw = u1;
			gpu->valid |= GM_HAS_POWER;
		}
	}
	if (nv->power_limit) {
		ASK("power limit", nv->power_limit(q->dev, &u1));
		if (a == ANSWER_OK) {
			gpu->power_limit_mw = u1;
			gpu->valid |= GM_HAS_POWER_LIMIT;
		}
	}
	if (nv->temperature) {
		ASK("temperature", nv->temperature(q->dev, NVML_TEMPERATURE_GPU, &u1));
		if (a == ANSWER_OK) {
			gpu->temperature_c = u1;
			gpu->valid |= GM_HAS_TEMPERATURE;
		}
	}
	if (nv->cc) {
		ASK("compute capability", nv->cc(q->dev, &i1, &i2));
		if (a == ANSWER_OK) {
			gpu->cc_major = i1;
			gpu->cc_minor = i2;
			gpu->valid |= GM_HAS_CC;
		}
	}
	if (nv->compute_mode) {
		ASK("compute mode", nv->compute_mode(q->dev, &i1));
		if (a == ANSWER_OK) {
			gpu->compute_mode = i1;
			gpu->valid |= GM_HAS_COMPUTE_MODE;
		}
	}
	if (nv->mig_mode) {
		ASK("MIG mode", nv->mig_mode(q->dev, &u1, &u2));
		if (a == ANSWER_OK) {
			gpu->mig_mode = u1 ? 1 : 0;
			gpu->valid |= GM_HAS_MIG;
		}
	}
	/* CUDA's FASTEST_FIRST order ranks by cores x max SM clock: both or
	 * nothing.  (The other clocks are nvml_clocks()'s.) */
	if (nv->cores && nv->max_clock) {
		ASK("core count", nv->cores(q->dev, &u1));
		if (a == ANSWER_OK) {
			ASK("max SM clock", nv->max_clock(q->dev, NVML_CLOCK_SM, &u2));
			if (a == ANSWER_OK) {
				gpu->cuda_rank = (uint64_t)u1 * u2;
				gpu->clock_max_mhz[GM_CLOCK_SM] = u2;
				gpu->valid |= GM_HAS_CUDA_RANK | GM_HAS_MAX_CLOCK_SM;
			}
		}
	}
#undef ASK
	return ANSWER_OK;
}

/* ---- processes --------------------------------------------------------- */

/* One process of one list, merged over its GPU instances. */
struct raw_proc {
	unsigned pid;
	unsigned gi, ci; /* MIG instance; 0xFFFFFFFF when MIG is off */
	int has_mem;
	unsigned long long used; /* bytes */
};

static int raw_cmp(const void *a, const void *b)
{
	const struct raw_proc *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->gi != y->gi)
		return x->gi < y->gi ? -1 : 1;
	if (x->ci != y->ci)
		return x->ci < y->ci ? -1 : 1;
	return 0;
}

static int proc_cmp(const void *a, const void *b)
{
	const struct gm_proc *x = a, *y = b;

	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/*
 * Read one process list (compute or graphics) of a GPU by NVML's protocol:
 * ask for the count with an empty buffer (SUCCESS means none), then fill a
 * buffer with slack, again while processes keep appearing.  On ANSWER_OK,
 * *out (caller frees) holds *count entries sorted by pid, one per pid: a
 * process on several MIG instances has their memory summed.  Returns an enum
 * answer, or -1 when out of memory.
 */
static int read_procs(struct gpu_query *q, int graphics, struct raw_proc **out, size_t *count)
{
	static const char *const what[] = {"compute processes", "graphics processes"};
	enum nvml_op op = graphics ? OP_PROCS_GRAPHICS : OP_PROCS_COMPUTE;
	struct nvml *nv = q->nv;
	struct raw_proc *raw = NULL, *r;
	unsigned char *buf = NULL, *e;
	unsigned n = 0, cap = 0, i, v;
	size_t stride, k = 0;
	int rc, ret, tries;

	*out = NULL;
	*count = 0;
	/* The newest version that exists (FUNCTION_NOT_FOUND: an older one). */
	rc = NVML_ERROR_FUNCTION_NOT_FOUND;
	for (v = level_get(nv, op); v < 2; v++) {
		if (!nv->procs[graphics][v])
			continue;
		n = 0;
		rc = nv->procs[graphics][v](q->dev, &n, NULL);
		if (rc != NVML_ERROR_FUNCTION_NOT_FOUND)
			break;
		level_raise(nv, op, v + 1);
	}
	stride = v == 0 ? PROC_V2_SIZE : PROC_V1_SIZE;
	for (tries = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && tries < PROC_TRIES; tries++) {
		if (n > PROC_MAX)
			break;
		cap = n + PROC_SLACK;
		free(buf);
		buf = calloc(cap, PROC_ALLOC_SIZE);
		if (!buf) {
			ret = -1;
			goto out;
		}
		n = cap;
		rc = nv->procs[graphics][v](q->dev, &n, buf);
	}
	if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
		snapshot_add_note(q->snap,
		                  "GPU %u: %s: NVML kept asking for more room (%u "
		                  "entries); list not read",
		                  q->gpu->index, what[graphics], n);
		ret = ANSWER_NONE;
		goto out;
	}
	ret = answer(q, what[graphics], rc);
	if (ret != ANSWER_OK || !buf)
		goto out; /* SUCCESS on the first call: no processes */
	if (n > cap)
		n = cap; /* never read past what we allocated */
	if (n == 0)
		goto out;

	raw = calloc(n, sizeof *raw);
	if (!raw) {
		ret = -1;
		goto out;
	}
	for (i = 0; i < n; i++) {
		r = &raw[i];
		e = buf + (size_t)i * stride;
		memcpy(&r->pid, e, sizeof r->pid);
		memcpy(&r->used, e + 8, sizeof r->used);
		r->gi = r->ci = UINT_MAX;
		if (stride == PROC_V2_SIZE) {
			memcpy(&r->gi, e + 16, sizeof r->gi);
			memcpy(&r->ci, e + 20, sizeof r->ci);
		}
		r->has_mem = r->used != ULLONG_MAX;
	}
	qsort(raw, n, sizeof *raw, raw_cmp);
	/* Fold each pid into one entry.  An identical (pid, instance) twice is a
	 * repeat and counts once; other instances of the pid add their memory. */
	for (i = 0; i < n; i++) {
		if (k > 0 && raw[k - 1].pid == raw[i].pid) {
			r = &raw[k - 1];
			if (raw_cmp(r, &raw[i]) != 0 && r->has_mem && raw[i].has_mem)
				r->used += raw[i].used;
			else if (!r->has_mem && raw[i].has_mem) {
				r->has_mem = 1;
				r->used = raw[i].used;
			}
			r->gi = raw[i].gi;
			r->ci = raw[i].ci;
			continue;
		}
		raw[k++] = raw[i];
	}
	*out = raw;
	*count = k;
	raw = NULL;
out:
	free(raw);
	free(buf);
	return ret;
}

/* The processes and MIG slices of one GPU, appended to snap->procs and
 * snap->migs; cap and mig_cap are their room. */
struct proc_sink {
	struct gm_snapshot *snap;
	size_t cap;
	size_t mig_cap;
};

/*
 * Merge a list into the GPU's processes, which start at first and are sorted
 * by pid up to sorted_end.  A process in both the compute and the graphics
 * list is one process using one amount of memory: the kinds add up, the
 * memory does not.  -1 when out of memory.
 */
static int merge_procs(struct proc_sink *sink, unsigned gpu, size_t first, size_t sorted_end,
                       const struct raw_proc *raw, size_t n, unsigned kind)
{
	struct gm_snapshot *snap = sink->snap;
	struct gm_proc key, *p, *procs;
	size_t i, cap;
	uint64_t mib;

	for (i = 0; i < n; i++) {
		mib = raw[i].has_mem ? raw[i].used / MIB : 0;
		key.pid = raw[i].pid;
		p = sorted_end > first ? bsearch(&key, snap->procs + first, sorted_end - first,
		                                 sizeof key, proc_cmp)
		                       : NULL;
		if (p) {
			p->kind |= kind;
			if (raw[i].has_mem && (!p->has_mem || mib > p->used_mib)) {
				p->has_mem = 1;
				p->used_mib = mib;
			}
			continue;
		}
		if (snap->proc_count == sink->cap) {
			cap = sink->cap ? sink->cap * 2 : 32;
			procs = realloc(snap->procs, cap * sizeof *procs);
			if (!procs)
				return -1;
			snap->procs = procs;
			sink->cap = cap;
		}
		p = &snap->procs[snap->proc_count++];
		memset(p, 0, sizeof *p);
		p->pid = raw[i].pid;
		p->gpu = gpu;
		p->has_mem = raw[i].has_mem;
		p->used_mib = mib;
		p->kind = kind;
	}
	return 0;
}

/* Both process lists of one GPU.  Returns an enum answer, or -1 (no memory). */
static int query_procs(struct gpu_query *q, struct proc_sink *sink)
{
	static const unsigned kinds[] = {GM_PROC_COMPUTE, GM_PROC_GRAPHICS};
	struct gm_snapshot *snap = sink->snap;
	size_t first = snap->proc_count, n;
	struct raw_proc *raw;
	int graphics, a;

	for (graphics = 0; graphics < 2; graphics++) {
		a = read_procs(q, graphics, &raw, &n);
		if (a == ANSWER_OK) {
			if (merge_procs(sink, q->gpu->index, first, snap->proc_count, raw, n,
			                kinds[graphics]) < 0)
				a = -1;
			else if (!graphics)
				q->gpu->valid |= GM_HAS_PROCESSES;
		}
		free(raw);
		if (a == -1 || a == ANSWER_LOST)
			return a;
	}
	if (snap->proc_count - first > 1)
		qsort(snap->procs + first, snap->proc_count - first, sizeof *snap->procs, proc_cmp);
	return ANSWER_OK;
}

/* ---- MIG slices -------------------------------------------------------- */

/* "1g.10gb" from a slice's name ("NVIDIA A100-SXM4-80GB MIG 1g.10gb"): the
 * name is where NVML states a MIG device's profile. */
static void mig_profile(const char *name, char *out, size_t len)
{
	const char *p = strstr(name, " MIG ");

	out[0] = '\0';
	if (p)
		snprintf(out, len, "%s", p + 5);
}

static int mig_cmp(const void *a, const void *b)
{
	const struct gm_mig *x = a, *y = b;

	if (x->gpu != y->gpu)
		return x->gpu < y->gpu ? -1 : 1;
	if (x->gpu_instance_id != y->gpu_instance_id)
		return x->gpu_instance_id < y->gpu_instance_id ? -1 : 1;
	if (x->compute_instance_id != y->compute_instance_id)
		return x->compute_instance_id < y->compute_instance_id ? -1 : 1;
	return strcmp(x->uuid, y->uuid);
}

static void drop_migs(struct gm_snapshot *snap, size_t from)
{
	while (snap->mig_count > from)
		free(snap->migs[--snap->mig_count].pids);
}

static struct gm_mig *new_mig(struct proc_sink *sink)
{
	struct gm_snapshot *snap = sink->snap;
	struct gm_mig *migs, *m;
	size_t cap;

	if (snap->mig_count == sink->mig_cap) {
		cap = sink->mig_cap ? sink->mig_cap * 2 : 8;
		migs = realloc(snap->migs, cap * sizeof *migs);
		if (!migs)
			return NULL;
		snap->migs = migs;
		sink->mig_cap = cap;
	}
	m = &snap->migs[snap->mig_count++];
	memset(m, 0, sizeof *m);
	return m;
}

/* One slice's fields and processes; its processes join the GPU's list
 * (from first on), where NVML shows them only to privileged callers.
 * Returns an enum answer, or -1 (no memory). */
static int query_mig(struct gpu_query *mq, struct proc_sink *sink, size_t first, struct gm_mig *m)
{
	struct nvml *nv = mq->nv;
	struct gm_snapshot *snap = sink->snap;
	struct raw_proc *raw;
	unsigned gi, ci;
	size_t n;
	int a;

	m->gpu = mq->gpu->index;
	if (nv->name && nv->name(mq->dev, m->name, sizeof m->name) == NVML_SUCCESS) {
		terminate(m->name, sizeof m->name);
		mig_profile(m->name, m->profile, sizeof m->profile);
	} else
		m->name[0] = '\0';
	if (nv->uuid && nv->uuid(mq->dev, m->uuid, sizeof m->uuid) == NVML_SUCCESS)
		terminate(m->uuid, sizeof m->uuid);
	else
		m->uuid[0] = '\0';
	a = answer(mq, "MIG slice memory",
	           read_memory(nv, mq->dev, &m->mem_total_mib, &m->mem_free_mib, &m->mem_used_mib));
	if (a == ANSWER_LOST)
		return a;
	if (a == ANSWER_OK)
		m->valid |= GM_MIG_HAS_MEMORY;
	if (nv->gpu_instance_id && nv->compute_instance_id &&
	    nv->gpu_instance_id(mq->dev, &gi) == NVML_SUCCESS &&
	    nv->compute_instance_id(mq->dev, &ci) == NVML_SUCCESS) {
		m->gpu_instance_id = gi;
		m->compute_instance_id = ci;
		m->valid |= GM_MIG_HAS_INSTANCE;
	}
	a = read_procs(mq, 0, &raw, &n);
	if (a != ANSWER_OK)
		return a;
	m->pids = calloc(n + 1, sizeof *m->pids);
	if (!m->pids || merge_procs(sink, mq->gpu->index, first, snap->proc_count, raw, n,
	                            GM_PROC_COMPUTE) < 0) {
		free(raw);
		return -1;
	}
	for (size_t k = 0; k < n; k++)
		m->pids[k] = raw[k].pid; /* sorted by pid, one each */
	m->pid_count = n;
	m->valid |= GM_MIG_HAS_PROCESSES;
	free(raw);
	if (snap->proc_count - first > 1)
		qsort(snap->procs + first, snap->proc_count - first, sizeof *snap->procs, proc_cmp);
	return ANSWER_OK;
}

/* The slices of a GPU in MIG mode (its processes start at first).  NVML
 * numbers slots, not slices: an empty slot answers NOT_FOUND.  Returns an
 * enum answer, or -1 (no memory). */
static int query_migs(struct gpu_query *q, struct proc_sink *sink, size_t first)
{
	struct nvml *nv = q->nv;
	struct gm_snapshot *snap = sink->snap;
	struct gpu_query mq = *q;
	size_t mig_first = snap->mig_count;
	struct gm_mig *m;
	unsigned max = 0, i;
	int rc, a;

	if (!(q->gpu->valid & GM_HAS_MIG) || !q->gpu->mig_mode || !nv->max_migs || !nv->mig_handle)
		return ANSWER_OK;
	a = answer(q, "MIG device count", nv->max_migs(q->dev, &max));
	for (i = 0; a == ANSWER_OK && i < max && i < MIG_MAX; i++) {
		mq.dev = NULL;
		rc = nv->mig_handle(q->dev, i, &mq.dev);
		if (rc == NVML_ERROR_NOT_FOUND)
			continue;
		if (answer(q, "MIG device handle", rc) != ANSWER_OK) {
			a = rc == NVML_ERROR_GPU_IS_LOST ? ANSWER_LOST : ANSWER_OK;
			continue;
		}
		m = new_mig(sink);
		a = m ? query_mig(&mq, sink, first, m) : -1;
		if (a == ANSWER_NONE)
			a = ANSWER_OK; /* the slice without its process list */
	}
	if (a == ANSWER_LOST || a == -1) {
		drop_migs(snap, mig_first);
		return a;
	}
	if (snap->mig_count - mig_first > 1)
		qsort(snap->migs + mig_first, snap->mig_count - mig_first, sizeof *snap->migs,
		      mig_cmp);
	return ANSWER_OK;
}

/* ---- the snapshot ------------------------------------------------------ */

static void mark_lost(struct gm_gpu *gpu, struct nvml *nv)
{
	/* What was read before the loss describes a GPU that is gone: keep its
	 * identity, drop its measurements. */
	gpu->state = GM_GPU_LOST;
	gpu->valid &= GM_HAS_PCI;
	err_text(nv, NVML_ERROR_GPU_IS_LOST, gpu->note, sizeof gpu->note);
}

enum gm_err nvml_snapshot(struct nvml *nv, struct gm_snapshot *snap, char *errbuf, size_t errlen)
{
	struct proc_sink sink = {snap, 0, 0};
	struct gpu_query q;
	struct gm_gpu *gpu;
	enum gm_err err = GM_OK;
	unsigned count = 0, i;
	char text[160];
	size_t first;
	nvml_dev dev;
	int rc, a, cuda;

	if (nv->driver_version) {
		rc = nv->driver_version(snap->driver_version, sizeof snap->driver_version);
		terminate(snap->driver_version, sizeof snap->driver_version);
		if (rc != NVML_SUCCESS)
			snap->driver_version[0] = '\0';
	}
	CALL_VERSIONED(rc, nv, OP_CUDA_VERSION, nv->cuda_version, &cuda);
	if (rc == NVML_SUCCESS)
		snap->cuda_driver_version = cuda;

	CALL_VERSIONED(rc, nv, OP_COUNT, nv->count, &count);
	if (rc != NVML_SUCCESS) {
		err_text(nv, rc, text, sizeof text);
		err = gm_fail(GM_ERR_NVML, errbuf, errlen, "nvmlDeviceGetCount: %s", text);
		goto out;
	}
	if (count > GPU_MAX) {
		snapshot_add_note(snap, "NVML reports %u GPUs; only the first %d are shown", count,
		                  GPU_MAX);
		count = GPU_MAX;
	}
	if (count == 0)
		goto out;
	snap->gpus = calloc(count, sizeof *snap->gpus);
	if (!snap->gpus) {
		err = gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory reading %u GPUs", count);
		goto out;
	}

	for (i = 0; i < count; i++) {
		gpu = &snap->gpus[snap->gpu_count];
		memset(gpu, 0, sizeof *gpu);
		gpu->index = i;
		dev = NULL;
		CALL_VERSIONED(rc, nv, OP_HANDLE, nv->handle, i, &dev);
		if (rc == NVML_ERROR_NO_PERMISSION) {
			/* Not ours to use (a container, a cgroup): leave it out, but
			 * keep the others' NVML numbering. */
			snapshot_add_note(snap, "GPU %u: no permission to query it (%s); skipped",
			                  i, err_name(rc));
			continue;
		}
		snap->gpu_count++;
		if (rc == NVML_ERROR_GPU_IS_LOST) {
			mark_lost(gpu, nv);
			continue;
		}
		if (rc != NVML_SUCCESS) {
			err_text(nv, rc, text, sizeof text);
			gpu->state = GM_GPU_ERROR;
			snprintf(gpu->note, sizeof gpu->note, "cannot get a handle: %.130s", text);
			continue;
		}

		q.nv = nv;
		q.snap = snap;
		q.gpu = gpu;
		q.dev = dev;
		first = snap->proc_count;
		a = query_fields(&q);
		if (a != ANSWER_LOST)
			a = query_procs(&q, &sink);
		if (a != ANSWER_LOST && a != -1)
			a = query_migs(&q, &sink, first);
		if (a == -1) {
			err = gm_fail(GM_ERR_NOMEM, errbuf, errlen,
			              "out of memory reading the processes of GPU %u", i);
			goto out;
		}
		if (a == ANSWER_LOST) {
			mark_lost(gpu, nv);
			snap->proc_count = first;
		}
	}
out:
	return err;
}

/* ---- per-process utilization ------------------------------------------ */

/* One GPU's samples since since_us into *buf (grown as NVML asks); NOT_FOUND
 * (nobody did work in the window) is no samples.  Returns NVML's answer. */
static int read_proc_samples(struct nvml *nv, nvml_dev dev, unsigned long long since_us,
                             struct nvml_proc_sample **buf, unsigned *count)
{
	struct nvml_proc_sample *grown;
	unsigned n = 0, cap = 0;
	int rc, tries;

	rc = nv->proc_util(dev, NULL, &n, since_us);
	for (tries = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && tries < PROC_TRIES; tries++) {
		if (n > PROC_MAX)
			break;
		cap = n + PROC_SLACK;
		grown = realloc(*buf, cap * sizeof **buf);
		if (!grown)
			return NVML_ERROR_MEMORY;
		*buf = grown;
		memset(*buf, 0, cap * sizeof **buf);
		n = cap;
		rc = nv->proc_util(dev, *buf, &n, since_us);
	}
	if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && !cap)) {
		n = 0;
		rc = NVML_SUCCESS;
	}
	*count = rc == NVML_SUCCESS ? (n < cap ? n : cap) : 0;
	return rc;
}

/* One clock reading into gpu: 0, or -1 when the GPU is lost. */
static int read_clock(struct nvml *nv, nvml_dev dev, struct gm_snapshot *snap, struct gm_gpu *gpu,
                      int c, int max)
{
	fn_dev_sel_uint fn = max ? nv->max_clock : nv->clock;
	char text[160];
	unsigned mhz = 0;
	int rc;

	if (!fn || (max && (gpu->valid & clocks[c].has_max)))
		return 0;
	rc = fn(dev, clocks[c].type, &mhz);
	switch (rc) {
	case NVML_SUCCESS:
		if (max)
			gpu->clock_max_mhz[c] = mhz;
		else
			gpu->clock_mhz[c] = mhz;
		gpu->valid |= max ? clocks[c].has_max : clocks[c].has;
		return 0;
	case NVML_ERROR_GPU_IS_LOST:
		return -1;
	case NVML_ERROR_NOT_SUPPORTED:
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return 0;
	default:
		err_text(nv, rc, text, sizeof text);
		snapshot_add_note(snap, "GPU %u: %s: %s", gpu->index,
		                  max ? clocks[c].what_max : clocks[c].what, text);
		return 0;
	}
}

void nvml_clocks(struct nvml *nv, struct gm_snapshot *snap)
{
	nvml_dev dev;
	int rc;

	for (size_t i = 0; i < snap->gpu_count; i++) {
		struct gm_gpu *gpu = &snap->gpus[i];

		if (gpu->state != GM_GPU_OK)
			continue;
		dev = NULL;
		CALL_VERSIONED(rc, nv, OP_HANDLE, nv->handle, gpu->index, &dev);
		if (rc != NVML_SUCCESS)
			continue; /* the snapshot itself said why */
		for (int c = 0; c < GM_CLOCK_COUNT; c++)
			if (read_clock(nv, dev, snap, gpu, c, 0) < 0 ||
			    read_clock(nv, dev, snap, gpu, c, 1) < 0)
				break; /* fell off the bus since: the next snapshot says so */
	}
}

void nvml_proc_util(struct nvml *nv, struct gm_snapshot *snap, unsigned window_ms)
{
	struct nvml_proc_sample *buf = NULL;
	unsigned long long since_us, sum;
	struct timespec ts;
	unsigned n, hits, s;
	char text[160];
	nvml_dev dev;
	size_t i, k;
	int rc, any;

	if (!snap->proc_count)
		return;
	if (!nv->proc_util) {
		snapshot_add_note(snap, "per-process utilization: this NVML library has no "
		                        "nvmlDeviceGetProcessUtilization");
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	since_us =
	    (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
	since_us -= (unsigned long long)window_ms * 1000ULL;
	for (i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *gpu = &snap->gpus[i];

		any = 0;
		for (k = 0; k < snap->proc_count && !any; k++)
			any = snap->procs[k].gpu == gpu->index;
		if (!any || gpu->state != GM_GPU_OK)
			continue;
		dev = NULL;
		CALL_VERSIONED(rc, nv, OP_HANDLE, nv->handle, gpu->index, &dev);
		if (rc == NVML_SUCCESS)
			rc = read_proc_samples(nv, dev, since_us, &buf, &n);
		if (rc != NVML_SUCCESS) {
			err_text(nv, rc, text, sizeof text);
			snapshot_add_note(snap, "GPU %u: per-process utilization not available: %s",
			                  gpu->index, text);
			continue;
		}
		for (k = 0; k < snap->proc_count; k++) {
			struct gm_proc *p = &snap->procs[k];

			if (p->gpu != gpu->index)
				continue;
			sum = 0;
			hits = 0;
			for (s = 0; s < n; s++)
				if (buf[s].pid == p->pid) {
					sum += buf[s].sm < 100 ? buf[s].sm : 100;
					hits++;
				}
			p->has_util = 1;
			/* Rounded up: a process that did any work is never shown idle. */
			p->util_pct = hits ? (unsigned)((sum + hits - 1) / hits) : 0;
		}
	}
	free(buf);
}
