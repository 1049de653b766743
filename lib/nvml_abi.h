/*
 * nvml_abi.h - private to the NVML backend (nvml.c, nvml_gpu.c, nvml_procs.c):
 * NVML's types as we declare them ourselves, the loaded library's symbol
 * table, and what the backend's files share.  Nothing outside lib/nvml*.c
 * includes it: only the backend knows NVML exists.
 */
#ifndef GM_NVML_ABI_H
#define GM_NVML_ABI_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "gpu_fields.h"
#include "gpuman.h"
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

/* NVML's process lists, each with its own functions.  _v3 is not used:
 * the same 24 bytes as _v2, except on the 535 drivers that write 32. */
enum proc_list { PROC_COMPUTE, PROC_GRAPHICS, PROC_MPS, PROC_LISTS };

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
	OP_PROCS_MPS,
	OP_COUNT_OF
};

/* One loaded library; shared by every nvml_open of the same path. */
struct nvml {
	struct nvml *next; /* the cache list */
	char *path;        /* as given to nvml_open; NULL: the driver's */
	void *dl;
	int refs;        /* open handles; informational, see nvml_close */
	int initialised; /* nvmlInit succeeded */
	int init_rc;     /* the last nvmlInit's answer */
	atomic_uint level[OP_COUNT_OF];

	/* Index 0 is the newest version. NULL: not exported. */
	fn_void init[2]; /* nvmlInit_v2, nvmlInit */
	fn_int cuda_version[2];
	fn_uint count[2];
	fn_handle handle[2];
	fn_dev_pci pci[3];
	fn_dev_mem2 memory_v2;
	fn_dev_mem1 memory_v1;
	/* [enum proc_list][v2, v1]; MPS NULL on older drivers: not read */
	fn_dev_procs procs[PROC_LISTS][2];

	fn_errstr error_string;
	fn_simerr sim_error; /* gpumanSimError: only the simulator has it */
	fn_str driver_version;
	fn_dev_str name, uuid;
	fn_dev_util utilization;
	fn_dev_uint power, power_limit, cores;
	fn_dev_sel_uint temperature, clock, max_clock;
	fn_dev_2int cc;
	fn_dev_int compute_mode, persistence;
	fn_dev_2uint mig_mode;
	fn_dev_proc_util proc_util;
	/* MIG slices (R450+; a driver before has none of them). */
	fn_dev_uint max_migs, gpu_instance_id, compute_instance_id;
	fn_dev_idx_handle mig_handle;
	/* How long this process's nvmlInit took, ms: what every program
	 * that opens NVML pays on this machine (persistence mode off: seconds). */
	double init_ms;
	fn_dev_uint minor; /* /dev/nvidiaN's N */
	/* The GPU field table's readings of kind GF_READ_DEV_UINT, by row;
	 * NULL for the others and where the driver lacks the function. */
	fn_dev_uint reading[GPU_FIELD_MAX];
};

/* The first version to try, and remembering that older ones are needed. */
static inline unsigned level_get(struct nvml *nv, enum nvml_op op)
{
	return atomic_load_explicit(&nv->level[op], memory_order_relaxed);
}

static inline void level_raise(struct nvml *nv, enum nvml_op op, unsigned level)
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

/* ---- shared by the backend's files ------------------------------------ */

/* NVML_ERROR_X: the constant's name, which is what people search for. */
const char *nvml_err_name(int rc);
/* Our words for the errors people meet, NVML's string for the rest, and the constant. */
void nvml_err_text(const struct nvml *nv, int rc, char *buf, size_t len);

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

/* What rc means for the field what; an unexpected error becomes a note. */
enum answer nvml_answer(struct gpu_query *q, const char *what, int rc);
/* NVML may fill a buffer to the last byte without a terminator. */
void nvml_terminate(char *buf, size_t len);
/* Total, free and used MiB of a device (a GPU or a MIG slice); NVML's answer. */
int nvml_read_memory(struct nvml *nv, nvml_dev dev, uint64_t *total, uint64_t *free_mib,
                     uint64_t *used);
/* The fields of one GPU, in one pass; stops at the first GPU_IS_LOST. */
enum answer nvml_query_fields(struct gpu_query *q);

/* The processes and MIG slices of one GPU, appended to snap->procs and
 * snap->migs; cap and mig_cap are their room. */
struct proc_sink {
	struct gm_snapshot *snap;
	size_t cap;
	size_t mig_cap;
};
/* Both process lists of one GPU: an enum answer, or -1 (no memory). */
int nvml_query_procs(struct gpu_query *q, struct proc_sink *sink);
/* The slices of a GPU in MIG mode (its processes start at first): an enum answer,
 * or -1 (no memory). */
int nvml_query_migs(struct gpu_query *q, struct proc_sink *sink, size_t first);

#endif
