/*
 * scenario.h - the simulated machine: a JSON scenario file describing the
 * driver, its GPUs, their processes and the faults to inject.
 *
 * Shared by the NVML simulator (nvml_sim.c) and gpuman-simload (simload.c) so
 * that both read the same machine the same way: the same validation, the same
 * default UUIDs and PCI ids, and the same CUDA device order.
 *
 * Calling sequence:
 *
 *   struct scenario *sc;
 *   char err[SCENARIO_ERR_SIZE];
 *   if (scenario_load(path, &sc, err, sizeof err) != 0)
 *           report err;   (names the file, and line:column or the key path)
 *   ... sc->gpus[i] ...
 *   scenario_free(sc);
 *
 * A loaded scenario is read-only; it is safe to read from several threads.
 */
#ifndef GM_SIM_SCENARIO_H
#define GM_SIM_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#define SCENARIO_ERR_SIZE 1024
#define SCENARIO_MAX_GPUS 64
#define SCENARIO_NAME_SIZE 96 /* NVML's name and UUID buffer size */

/*
 * Every NVML function the simulator implements, in one list so that the
 * names accepted by "missing_symbols" and the functions that honour it cannot
 * drift apart.  nvmlErrorString is not here: it returns no error code, so it
 * cannot pretend to be missing.
 */
#define SCENARIO_FUNCTIONS(X)                                                                      \
	X(nvmlInit_v2)                                                                             \
	X(nvmlInit)                                                                                \
	X(nvmlInitWithFlags)                                                                       \
	X(nvmlShutdown)                                                                            \
	X(nvmlSystemGetDriverVersion)                                                              \
	X(nvmlSystemGetCudaDriverVersion_v2)                                                       \
	X(nvmlSystemGetCudaDriverVersion)                                                          \
	X(nvmlDeviceGetCount_v2)                                                                   \
	X(nvmlDeviceGetCount)                                                                      \
	X(nvmlDeviceGetHandleByIndex_v2)                                                           \
	X(nvmlDeviceGetHandleByIndex)                                                              \
	X(nvmlDeviceGetHandleByUUID)                                                               \
	X(nvmlDeviceGetIndex)                                                                      \
	X(nvmlDeviceGetName)                                                                       \
	X(nvmlDeviceGetUUID)                                                                       \
	X(nvmlDeviceGetPciInfo_v3)                                                                 \
	X(nvmlDeviceGetPciInfo_v2)                                                                 \
	X(nvmlDeviceGetPciInfo)                                                                    \
	X(nvmlDeviceGetMinorNumber)                                                                \
	X(nvmlDeviceGetMemoryInfo_v2)                                                              \
	X(nvmlDeviceGetMemoryInfo)                                                                 \
	X(nvmlDeviceGetUtilizationRates)                                                           \
	X(nvmlDeviceGetPowerUsage)                                                                 \
	X(nvmlDeviceGetEnforcedPowerLimit)                                                         \
	X(nvmlDeviceGetTemperature)                                                                \
	X(nvmlDeviceGetCudaComputeCapability)                                                      \
	X(nvmlDeviceGetComputeRunningProcesses_v3)                                                 \
	X(nvmlDeviceGetComputeRunningProcesses_v2)                                                 \
	X(nvmlDeviceGetComputeRunningProcesses)                                                    \
	X(nvmlDeviceGetGraphicsRunningProcesses_v3)                                                \
	X(nvmlDeviceGetGraphicsRunningProcesses_v2)                                                \
	X(nvmlDeviceGetGraphicsRunningProcesses)                                                   \
	X(nvmlDeviceGetComputeMode)                                                                \
	X(nvmlDeviceGetMigMode)                                                                    \
	X(nvmlDeviceGetNumGpuCores)                                                                \
	X(nvmlDeviceGetMaxClockInfo)                                                               \
	X(nvmlDeviceGetClockInfo)                                                                  \
	X(nvmlDeviceGetHandleByPciBusId_v2)                                                        \
	X(nvmlDeviceGetHandleByPciBusId)                                                           \
	X(nvmlSystemGetNVMLVersion)                                                                \
	X(nvmlDeviceGetMaxPcieLinkGeneration)                                                      \
	X(nvmlDeviceGetMaxPcieLinkWidth)                                                           \
	X(nvmlDeviceGetCurrPcieLinkGeneration)                                                     \
	X(nvmlDeviceGetCurrPcieLinkWidth)                                                          \
	X(nvmlDeviceGetPcieThroughput)                                                             \
	X(nvmlDeviceGetTemperatureThreshold)                                                       \
	X(nvmlDeviceGetFanSpeed)                                                                   \
	X(nvmlDeviceGetFanSpeed_v2)                                                                \
	X(nvmlDeviceGetNumFans)                                                                    \
	X(nvmlDeviceGetEncoderUtilization)                                                         \
	X(nvmlDeviceGetDecoderUtilization)                                                         \
	X(nvmlDeviceGetPowerManagementLimit)                                                       \
	X(nvmlDeviceGetPowerManagementDefaultLimit)                                                \
	X(nvmlDeviceGetPowerManagementLimitConstraints)                                            \
	X(nvmlDeviceGetPerformanceState)                                                           \
	X(nvmlDeviceGetPersistenceMode)                                                            \
	X(nvmlDeviceGetProcessUtilization)                                                         \
	X(nvmlDeviceGetTemperatureV)                                                               \
	X(nvmlDeviceGetMaxMigDeviceCount)                                                          \
	X(nvmlDeviceGetMigDeviceHandleByIndex)                                                     \
	X(nvmlDeviceIsMigDeviceHandle)                                                             \
	X(nvmlDeviceGetGpuInstanceId)                                                              \
	X(nvmlDeviceGetComputeInstanceId)                                                          \
	X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)                                            \
	X(nvmlDeviceGetMPSComputeRunningProcesses_v3)                                              \
	X(nvmlDeviceGetMPSComputeRunningProcesses_v2)                                              \
	X(nvmlDeviceGetMPSComputeRunningProcesses)                                                 \
	X(nvmlDeviceGetBAR1MemoryInfo)                                                             \
	X(nvmlSystemGetProcessName)                                                                \
	X(nvmlDeviceGetTotalEnergyConsumption)                                                     \
	X(nvmlDeviceGetCpuAffinity)                                                                \
	X(nvmlDeviceGetCpuAffinityWithinScope)                                                     \
	X(nvmlDeviceGetMemoryAffinity)                                                             \
	X(nvmlDeviceGetP2PStatus)

/* clang-format off */
enum scenario_fn {
#define SCENARIO_FN_ENUM(name) FN_##name,
	SCENARIO_FUNCTIONS(SCENARIO_FN_ENUM)
#undef SCENARIO_FN_ENUM
	FN_COUNT
};
/* clang-format on */

/* Bits of scenario_gpu.has: the NVML answers this GPU supports.  A field
 * that is null in the scenario (or absent, where it has no default) leaves
 * its bit clear and NVML answers NVML_ERROR_NOT_SUPPORTED. */
enum scenario_has {
	SCENARIO_HAS_MEMORY = 1u << 0,       /* memory_total_mib, memory_used_mib */
	SCENARIO_HAS_UTIL = 1u << 1,         /* utilization_gpu (+ memory_utilization) */
	SCENARIO_HAS_POWER = 1u << 2,        /* power_draw_w */
	SCENARIO_HAS_POWER_LIMIT = 1u << 3,  /* power_limit_w */
	SCENARIO_HAS_TEMPERATURE = 1u << 4,  /* temperature_c */
	SCENARIO_HAS_CC = 1u << 5,           /* compute_capability */
	SCENARIO_HAS_COMPUTE_MODE = 1u << 6, /* compute_mode */
	SCENARIO_HAS_MIG = 1u << 7,          /* mig_mode */
	SCENARIO_HAS_CORES = 1u << 8,        /* cuda_cores */
	SCENARIO_HAS_CLOCK = 1u << 9         /* max_sm_clock_mhz */
};

/*
 * Readings monitoring tools show (nvtop, nvitop, gpustat), each one unsigned
 * number: X(id, scenario key, min, max, scale).  The scenario gives the key
 * in its unit (scale 1000 turns watts into NVML's milliwatts); absent or
 * null, NVML answers NOT_SUPPORTED.
 */
#define SCENARIO_READINGS(X)                                                                       \
	X(PCIE_GEN, "pcie_gen", 1, 7, 1)                                                           \
	X(PCIE_MAX_GEN, "pcie_max_gen", 1, 7, 1)                                                   \
	X(PCIE_WIDTH, "pcie_width", 1, 32, 1)                                                      \
	X(PCIE_MAX_WIDTH, "pcie_max_width", 1, 32, 1)                                              \
	X(PCIE_TX_KBPS, "pcie_tx_kbps", 0, 1e9, 1)                                                 \
	X(PCIE_RX_KBPS, "pcie_rx_kbps", 0, 1e9, 1)                                                 \
	X(TEMP_SHUTDOWN_C, "temperature_shutdown_c", 0, 200, 1)                                    \
	X(TEMP_SLOWDOWN_C, "temperature_slowdown_c", 0, 200, 1)                                    \
	X(TEMP_MEM_MAX_C, "temperature_mem_max_c", 0, 200, 1)                                      \
	X(TEMP_GPU_MAX_C, "temperature_gpu_max_c", 0, 200, 1)                                      \
	X(CLOCK_GRAPHICS_MHZ, "clock_graphics_mhz", 0, 100000, 1)                                  \
	X(CLOCK_SM_MHZ, "clock_sm_mhz", 0, 100000, 1)                                              \
	X(CLOCK_MEM_MHZ, "clock_memory_mhz", 0, 100000, 1)                                         \
	X(CLOCK_VIDEO_MHZ, "clock_video_mhz", 0, 100000, 1)                                        \
	X(MAX_CLOCK_MEM_MHZ, "max_clock_memory_mhz", 1, 100000, 1)                                 \
	X(MAX_CLOCK_VIDEO_MHZ, "max_clock_video_mhz", 1, 100000, 1)                                \
	X(FAN_PCT, "fan_pct", 0, 100, 1)                                                           \
	X(ENCODER_PCT, "encoder_utilization", 0, 100, 1)                                           \
	X(DECODER_PCT, "decoder_utilization", 0, 100, 1)                                           \
	X(POWER_DEFAULT_MW, "power_limit_default_w", 0, 100000, 1000)                              \
	X(POWER_MIN_MW, "power_limit_min_w", 0, 100000, 1000)                                      \
	X(POWER_MAX_MW, "power_limit_max_w", 0, 100000, 1000)                                      \
	X(PSTATE, "performance_state", 0, 15, 1)                                                   \
	X(PERSISTENCE, "persistence_mode", 0, 1, 1)                                                \
	X(BAR1_TOTAL_MIB, "bar1_total_mib", 1, 1e7, 1)                                             \
	X(BAR1_USED_MIB, "bar1_used_mib", 0, 1e7, 1)

/* clang-format off */
enum scenario_reading {
#define SCENARIO_READING_ENUM(id, key, min, max, scale) READING_##id,
	SCENARIO_READINGS(SCENARIO_READING_ENUM)
#undef SCENARIO_READING_ENUM
	READING_COUNT
};
/* clang-format on */

/* NVML's compute modes, numbered as nvmlComputeMode_t. */
enum scenario_compute_mode {
	SCENARIO_COMPUTE_DEFAULT = 0,
	SCENARIO_COMPUTE_EXCLUSIVE_THREAD = 1,
	SCENARIO_COMPUTE_PROHIBITED = 2,
	SCENARIO_COMPUTE_EXCLUSIVE_PROCESS = 3
};

/* Bits of scenario_proc.kind: the NVML process lists it appears in. */
enum scenario_proc_kind {
	SCENARIO_PROC_COMPUTE = 1,
	SCENARIO_PROC_GRAPHICS = 2,
	SCENARIO_PROC_MPS = 4 /* an MPS client: in the MPS list */
};

struct scenario_proc {
	unsigned pid;
	int has_mem;          /* 0: used_mib was null, NVML reports "not available" */
	uint64_t used_mib;    /* counted in the GPU's used memory when has_mem */
	unsigned utilization; /* percent, added to the GPU's utilization */
	unsigned kind;        /* enum scenario_proc_kind bits */
};

struct scenario_gpu {
	unsigned index; /* NVML index: the position in "gpus" */
	char name[SCENARIO_NAME_SIZE];
	char uuid[SCENARIO_NAME_SIZE]; /* "GPU-..." */
	char pci_bus_id[32];           /* "%08X:%02X:%02X.%X", NVML's busId */
	char pci_bus_id_legacy[16];    /* "%04X:%02X:%02X.%X", NVML's busIdLegacy */
	unsigned pci_domain, pci_bus, pci_device, pci_function;
	unsigned pci_device_id; /* (device id << 16) | vendor 0x10DE */
	unsigned pci_subsystem_id;
	unsigned has; /* enum scenario_has bits */
	uint64_t mem_total_mib;
	uint64_t mem_used_mib; /* the driver's own and unattributed use */
	unsigned util_mem_pct; /* memory_utilization */
	unsigned util_gpu_pct; /* utilization_gpu, without processes */
	unsigned power_mw, power_limit_mw;
	unsigned temperature_c;
	int cc_major, cc_minor;
	int compute_mode;  /* enum scenario_compute_mode */
	unsigned mig_mode; /* 0 disabled, 1 enabled */
	unsigned cuda_cores;
	unsigned max_sm_clock_mhz;
	unsigned minor_number; /* /dev/nvidiaN */
	double speed;          /* how fast simulated work runs, 1.0 = reference */
	/* cores x max SM clock, what CUDA's fastest-first order sorts by; the
	 * defaults stand in where the scenario makes NVML hide the fields. */
	uint64_t cuda_rank;
	int fail;                  /* NVML error code injected for this GPU, 0 none */
	int fail_at_handle;        /* fail answers the handle lookup itself ("fail_at": "handle") */
	uint64_t mem_reserved_mib; /* memory_reserved_mib: the driver's, never free */
	unsigned reading[READING_COUNT];
	uint32_t reading_has; /* bit i: reading[i] was given */
	/* MIG: each slice (MIG device) is a scenario_gpu of its own, in its
	 * GPU's migs[], with only memory, name, UUID and processes. */
	int is_mig;
	struct scenario_gpu *parent;                   /* slices: their GPU */
	unsigned gpu_instance_id, compute_instance_id; /* slices */
	char mig_profile[32];                          /* slices: "1g.10gb" */
	size_t mig_count;
	struct scenario_gpu *migs; /* owned; GPUs with "mig_devices" */
	size_t proc_count;
	struct scenario_proc *procs; /* owned by the scenario */
	uint64_t procs_used_mib;     /* sum of the processes' known used_mib */
	unsigned procs_util_pct;     /* sum of the processes' utilization */
};

/* What a timeline phase makes of one GPU (see struct scenario). */
struct scenario_gpu_state {
	unsigned util_gpu_pct;
	uint64_t mem_used_mib;
	size_t proc_count;
	struct scenario_proc *procs; /* owned by the state */
	uint64_t procs_used_mib;
	unsigned procs_util_pct;
};

struct scenario_phase {
	double at_s;                     /* from this many seconds into the timeline */
	struct scenario_gpu_state *gpus; /* [gpu_count], owned */
};

/*
 * "latency": what the driver's calls cost, in milliseconds, so that a
 * benchmark on a machine without a GPU pays what a real driver makes a
 * program pay.  Absent: everything is free (tests stay fast).  init_ms is
 * nvmlInit's own cost; attach_ms is added for each GPU whose
 * persistence_mode is 0 (the driver brings it up for every program that
 * opens it); the others are per call, by the family of the NVML function
 * (scenario_fn_family), query_ms for every device query of no other
 * family.
 */
enum scenario_family {
	FAMILY_QUERY = 0, /* every other device query */
	FAMILY_MEMORY,
	FAMILY_UTILIZATION,
	FAMILY_PROCESSES,
	FAMILY_PROCESS_UTILIZATION,
	FAMILY_COUNT
};

struct scenario_latency {
	double init_ms, attach_ms;
	double call_ms[FAMILY_COUNT]; /* by enum scenario_family */
};

struct scenario {
	char *path;     /* as given, for messages */
	char *realpath; /* canonical, keys the default state dir */
	int has_driver_version;
	char driver_version[80];
	int has_cuda_driver_version;
	int cuda_driver_version;         /* 13000 means 13.0 */
	int init_error;                  /* NVML error nvmlInit returns, 0 none */
	unsigned char missing[FN_COUNT]; /* 1: the function answers FUNCTION_NOT_FOUND */
	size_t gpu_count;
	struct scenario_gpu *gpus; /* owned */
	/*
	 * "timeline": phases that change GPUs' utilization, driver memory and
	 * processes as time passes, counted from the scenario file's
	 * modification time (touch it to start over), every repeat_s seconds
	 * again when repeat_s > 0.  base[] holds the "gpus" values themselves,
	 * which apply before the first phase.  scenario_apply_time() copies
	 * the current phase into gpus[].
	 */
	size_t phase_count;
	struct scenario_phase *phases;   /* owned; at_s increasing */
	struct scenario_gpu_state *base; /* [gpu_count], owned; NULL without a timeline */
	double repeat_s;
	int64_t epoch_ms;                /* the file's modification time */
	long applied;                    /* phase in gpus[]: -1 base */
	struct scenario_latency latency; /* all 0 without "latency" */
};

/*
 * Read and validate the scenario at path.  Unknown keys, wrong types and
 * impossible values are errors.  On success *out is a new scenario (free it
 * with scenario_free) and 0 is returned; on failure *out is NULL, -1 is
 * returned and err holds one line naming the file and either line:column
 * (syntax) or the key path (e.g. "gpus[2].memory_total_mib").
 */
int scenario_load(const char *path, struct scenario **out, char *err, size_t errlen);
void scenario_free(struct scenario *sc);

/*
 * The timeline's phase at now_ms (wall clock, milliseconds): -1 before the
 * first phase or without a timeline.  scenario_apply_time() puts that
 * phase's values into sc->gpus (not thread-safe: callers serialise it with
 * their readers) and returns it.
 */
long scenario_phase_at(const struct scenario *sc, int64_t now_ms);
long scenario_apply_time(struct scenario *sc, int64_t now_ms);

/* The cost family of an NVML function (FAMILY_QUERY for most). */
enum scenario_family scenario_fn_family(enum scenario_fn fn);

/* NVML error code for a scenario error name ("gpu_is_lost"), or -1. */
int scenario_error_code(const char *name);
/* The scenario name of an NVML error code, or NULL. */
const char *scenario_error_name(int code);
/* The scenario name of a compute mode ("exclusive_process"). */
const char *scenario_compute_mode_name(int mode);

/* Position in sc->gpus of the GPU with exactly this UUID, or -1. */
long scenario_find_uuid(const struct scenario *sc, const char *uuid);
/* The MIG slice with exactly this "MIG-..." UUID, or NULL. */
struct scenario_gpu *scenario_find_mig(const struct scenario *sc, const char *uuid);

/* Most slices a GPU has (an A100/H100 has 7). */
#define SCENARIO_MAX_MIGS 7

/*
 * Whether CUDA enumerates the GPU at all: GPUs that fell off the bus
 * (fail "gpu_is_lost") or that the process may not open ("no_permission")
 * are invisible to CUDA, as they are to gpuman's snapshot.
 */
int scenario_cuda_sees(const struct scenario_gpu *gpu);

/*
 * CUDA's device order: positions into sc->gpus of the GPUs CUDA enumerates,
 * fastest first by cuda_rank (ties: lower NVML index first), or in NVML
 * (PCI bus) order when pci_order is set, as with CUDA_DEVICE_ORDER=PCI_BUS_ID.
 * order must hold sc->gpu_count entries; returns how many were written.
 */
size_t scenario_cuda_order(const struct scenario *sc, int pci_order, size_t *order);

/*
 * The devices a CUDA program sees, in its numbering (CUDA device 0 first):
 * value is CUDA_VISIBLE_DEVICES (NULL when unset: every device).  Entries
 * are indices into CUDA's order or unique prefixes of "GPU-" UUIDs; the first
 * entry that is invalid, unknown, ambiguous or repeated ends the list, as in
 * CUDA.  out must hold sc->gpu_count entries; returns how many were written.
 */
size_t scenario_cuda_visible(const struct scenario *sc, const char *value, int pci_order,
                             size_t *out);

#endif
