/*
 * gpu_fields.c - the table of the GPU's numeric readings (gpu_fields.h).
 */
#include <stdio.h>
#include "gpu_fields.h"

#define AT(member) .offset = offsetof(struct gm_gpu, member)

/*
 * Each row: its id, its place, type, unit as kept and validity bits, then
 * by name where NVML gives it and what each output calls it; a name left
 * out is NULL, which tests/unit/test_gpu_fields.c refuses (GF_NONE says
 * none).  .read is GF_READ_OWN unless given.
 */
/* clang-format off */
const struct gpu_field gpu_fields[] = {
    {GM_GPU_MEM_TOTAL_MIB, AT(mem_total_mib), GF_U64, "MiB", GM_HAS_MEMORY,
     .nvml = "nvmlDeviceGetMemoryInfo_v2", .scale = 1, .shown_unit = "MiB",
     .json = "memory_total_mib", .csv = "memory_total_mib",
     .smi = "memory.total", .smi_alias = GF_NONE, .smi_unit = "MiB",
     .label = GF_NONE, /* info and the page: used / total */
     .metric = "DCGM_FI_DEV_FB_TOTAL", .help = "Framebuffer memory total (in MiB)."},
    {GM_GPU_MEM_FREE_MIB, AT(mem_free_mib), GF_U64, "MiB", GM_HAS_MEMORY,
     .nvml = "nvmlDeviceGetMemoryInfo_v2", .scale = 1, .shown_unit = "MiB",
     .json = "memory_free_mib", .csv = "memory_free_mib",
     .smi = "memory.free", .smi_alias = GF_NONE, .smi_unit = "MiB", .label = GF_NONE,
     .metric = "DCGM_FI_DEV_FB_FREE", .help = "Framebuffer memory free (in MiB)."},
    {GM_GPU_MEM_USED_MIB, AT(mem_used_mib), GF_U64, "MiB", GM_HAS_MEMORY,
     .nvml = "nvmlDeviceGetMemoryInfo_v2", .scale = 1, .shown_unit = "MiB",
     .json = "memory_used_mib", .csv = "memory_used_mib",
     .smi = "memory.used", .smi_alias = GF_NONE, .smi_unit = "MiB", .label = GF_NONE,
     .metric = "DCGM_FI_DEV_FB_USED", .help = "Framebuffer memory used (in MiB)."},
    {GM_GPU_UTIL_GPU_PCT, AT(util_gpu_pct), GF_UNSIGNED, "%", GM_HAS_UTIL,
     .nvml = "nvmlDeviceGetUtilizationRates", .scale = 1, .shown_unit = "%",
     .json = "utilization_gpu_pct", .csv = "util_pct",
     .smi = "utilization.gpu", .smi_alias = GF_NONE, .smi_unit = "%",
     .label = GF_NONE, /* info: with utilization memory; the page: a bar */
     .metric = "DCGM_FI_DEV_GPU_UTIL", .help = "GPU utilization (in %)."},
    {GM_GPU_UTIL_MEM_PCT, AT(util_mem_pct), GF_UNSIGNED, "%", GM_HAS_UTIL,
     .nvml = "nvmlDeviceGetUtilizationRates", .scale = 1, .shown_unit = "%",
     .json = "utilization_memory_pct", .csv = "util_memory_pct",
     .smi = "utilization.memory", .smi_alias = GF_NONE, .smi_unit = "%", .label = GF_NONE,
     .metric = "DCGM_FI_DEV_MEM_COPY_UTIL", .help = "Memory utilization (in %)."},
    {GM_GPU_POWER_MW, AT(power_mw), GF_UNSIGNED, "mW", GM_HAS_POWER,
     .nvml = "nvmlDeviceGetPowerUsage", .scale = 1000, .shown_unit = "W",
     .json = "power_draw_w", .csv = "power_w",
     .smi = "power.draw", .smi_alias = GF_NONE, .smi_unit = "W", .label = "power draw",
     .metric = "DCGM_FI_DEV_POWER_USAGE", .help = "Power draw (in W)."},
    /* nvidia-smi's power.limit is the management limit, which the enforced
     * one is unless another limit (a board's) is lower */
    {GM_GPU_POWER_LIMIT_MW, AT(power_limit_mw), GF_UNSIGNED, "mW", GM_HAS_POWER_LIMIT,
     .nvml = "nvmlDeviceGetEnforcedPowerLimit", .scale = 1000, .shown_unit = "W",
     .json = "power_limit_w", .csv = "power_limit_w",
     .smi = "power.limit", .smi_alias = "enforced.power.limit", .smi_unit = "W",
     .label = "power limit",
     .metric = "DCGM_FI_DEV_POWER_MGMT_LIMIT", .help = "Power management limit (in W)."},
    {GM_GPU_TEMPERATURE_C, AT(temperature_c), GF_UNSIGNED, "C", GM_HAS_TEMPERATURE,
     .nvml = "nvmlDeviceGetTemperature", .scale = 1, .shown_unit = "C",
     .json = "temperature_c", .csv = "temperature_c",
     .smi = "temperature.gpu", .smi_alias = GF_NONE, .smi_unit = GF_NONE,
     .label = "temperature",
     .metric = "DCGM_FI_DEV_GPU_TEMP", .help = "GPU temperature (in C)."},
    /* shown together as "compute_capability": "8.6" */
    {GM_GPU_CC_MAJOR, AT(cc_major), GF_INT, "", GM_HAS_CC,
     .nvml = "nvmlDeviceGetCudaComputeCapability", .scale = 1, .shown_unit = "",
     .json = GF_NONE, .csv = GF_NONE, .smi = GF_NONE, .smi_alias = GF_NONE,
     .smi_unit = GF_NONE, .label = GF_NONE, .metric = GF_NONE, .help = GF_NONE},
    {GM_GPU_CC_MINOR, AT(cc_minor), GF_INT, "", GM_HAS_CC,
     .nvml = "nvmlDeviceGetCudaComputeCapability", .scale = 1, .shown_unit = "",
     .json = GF_NONE, .csv = GF_NONE, .smi = GF_NONE, .smi_alias = GF_NONE,
     .smi_unit = GF_NONE, .label = GF_NONE, .metric = GF_NONE, .help = GF_NONE},
    /* shown by name ("exclusive_process"; nvidia-smi's compute_mode
     * "Exclusive_Process"), and as a boolean */
    {GM_GPU_COMPUTE_MODE, AT(compute_mode), GF_INT, "", GM_HAS_COMPUTE_MODE,
     .nvml = "nvmlDeviceGetComputeMode", .scale = 1, .shown_unit = "",
     .json = GF_NONE, .csv = GF_NONE, .smi = GF_NONE, .smi_alias = GF_NONE,
     .smi_unit = GF_NONE, .label = GF_NONE, .metric = GF_NONE, .help = GF_NONE},
    /* shown as a boolean (nvidia-smi's mig.mode.current: "Enabled") */
    {GM_GPU_MIG_MODE, AT(mig_mode), GF_INT, "", GM_HAS_MIG,
     .nvml = "nvmlDeviceGetMigMode", .scale = 1, .shown_unit = "",
     .json = GF_NONE, .csv = GF_NONE, .smi = GF_NONE, .smi_alias = GF_NONE,
     .smi_unit = GF_NONE, .label = GF_NONE, .metric = GF_NONE, .help = GF_NONE},
    /* as cuda_index: the order CUDA numbers GPUs in */
    {GM_GPU_CUDA_RANK, AT(cuda_rank), GF_U64, "", GM_HAS_CUDA_RANK,
     .nvml = "nvmlDeviceGetNumGpuCores x nvmlDeviceGetMaxClockInfo(SM)", .scale = 1,
     .shown_unit = "", .json = GF_NONE, .csv = GF_NONE, .smi = GF_NONE,
     .smi_alias = GF_NONE, .smi_unit = GF_NONE, .label = GF_NONE, .metric = GF_NONE,
     .help = GF_NONE},
    /* info and the page: each clock now with its max, "1503 MHz (max 1582 MHz)" */
    {GM_GPU_CLOCK_SM_MHZ, AT(clock_mhz[GM_CLOCK_SM]), GF_UNSIGNED, "MHz", GM_HAS_CLOCK_SM,
     .nvml = "nvmlDeviceGetClockInfo", .scale = 1, .shown_unit = "MHz",
     .json = "clock_sm_mhz", .csv = "clock_sm_mhz",
     .smi = "clocks.sm", .smi_alias = "clocks.current.sm", .smi_unit = "MHz",
     .label = GF_NONE,
     .metric = "DCGM_FI_DEV_SM_CLOCK", .help = "SM clock frequency (in MHz)."},
    {GM_GPU_CLOCK_MEM_MHZ, AT(clock_mhz[GM_CLOCK_MEM]), GF_UNSIGNED, "MHz", GM_HAS_CLOCK_MEM,
     .nvml = "nvmlDeviceGetClockInfo", .scale = 1, .shown_unit = "MHz",
     .json = "clock_memory_mhz", .csv = "clock_memory_mhz",
     .smi = "clocks.mem", .smi_alias = "clocks.current.memory", .smi_unit = "MHz",
     .label = GF_NONE,
     .metric = "DCGM_FI_DEV_MEM_CLOCK", .help = "Memory clock frequency (in MHz)."},
    /* dcgm-exporter has no graphics clock */
    {GM_GPU_CLOCK_GRAPHICS_MHZ, AT(clock_mhz[GM_CLOCK_GRAPHICS]), GF_UNSIGNED, "MHz",
     GM_HAS_CLOCK_GRAPHICS, .nvml = "nvmlDeviceGetClockInfo", .scale = 1, .shown_unit = "MHz",
     .json = "clock_graphics_mhz", .csv = "clock_graphics_mhz",
     .smi = "clocks.gr", .smi_alias = "clocks.current.graphics", .smi_unit = "MHz",
     .label = GF_NONE,
     .metric = "gpuman_gpu_graphics_clock_mhz", .help = "Graphics clock frequency (in MHz)."},
    {GM_GPU_MAX_CLOCK_SM_MHZ, AT(clock_max_mhz[GM_CLOCK_SM]), GF_UNSIGNED, "MHz",
     GM_HAS_MAX_CLOCK_SM, .nvml = "nvmlDeviceGetMaxClockInfo", .scale = 1, .shown_unit = "MHz",
     .json = "max_clock_sm_mhz", .csv = "max_clock_sm_mhz",
     .smi = "clocks.max.sm", .smi_alias = "clocks.max.streaming_multiprocessor",
     .smi_unit = "MHz", .label = GF_NONE,
     .metric = "DCGM_FI_DEV_MAX_SM_CLOCK", .help = "Maximum SM clock frequency (in MHz)."},
    {GM_GPU_MAX_CLOCK_MEM_MHZ, AT(clock_max_mhz[GM_CLOCK_MEM]), GF_UNSIGNED, "MHz",
     GM_HAS_MAX_CLOCK_MEM, .nvml = "nvmlDeviceGetMaxClockInfo", .scale = 1, .shown_unit = "MHz",
     .json = "max_clock_memory_mhz", .csv = "max_clock_memory_mhz",
     .smi = "clocks.max.mem", .smi_alias = "clocks.max.memory", .smi_unit = "MHz",
     .label = GF_NONE,
     .metric = "DCGM_FI_DEV_MAX_MEM_CLOCK", .help = "Maximum memory clock frequency (in MHz)."},
    {GM_GPU_MAX_CLOCK_GRAPHICS_MHZ, AT(clock_max_mhz[GM_CLOCK_GRAPHICS]), GF_UNSIGNED, "MHz",
     GM_HAS_MAX_CLOCK_GRAPHICS, .nvml = "nvmlDeviceGetMaxClockInfo", .scale = 1,
     .shown_unit = "MHz", .json = "max_clock_graphics_mhz", .csv = "max_clock_graphics_mhz",
     .smi = "clocks.max.gr", .smi_alias = "clocks.max.graphics", .smi_unit = "MHz",
     .label = GF_NONE, .metric = "gpuman_gpu_max_graphics_clock_mhz",
     .help = "Maximum graphics clock frequency (in MHz)."},
    /* shown as a boolean; status says once what off costs */
    {GM_GPU_PERSISTENCE_MODE, AT(persistence_mode), GF_INT, "", GM_HAS_PERSISTENCE,
     .nvml = "nvmlDeviceGetPersistenceMode", .scale = 1, .shown_unit = "",
     .json = GF_NONE, .csv = GF_NONE, .smi = GF_NONE, .smi_alias = GF_NONE,
     .smi_unit = GF_NONE, .label = GF_NONE, .metric = GF_NONE, .help = GF_NONE},
    {GM_GPU_MINOR_NUMBER, AT(minor), GF_INT, "", GM_HAS_MINOR,
     .nvml = "nvmlDeviceGetMinorNumber", .scale = 1, .shown_unit = "",
     .json = "minor_number", .csv = GF_NONE, .smi = GF_NONE, .smi_alias = GF_NONE,
     .smi_unit = GF_NONE, .label = GF_NONE, .metric = GF_NONE, .help = GF_NONE},
    /* the speed the fan is meant to run at, % of its most; a GPU cooled by
     * its chassis (most data-centre boards) has none: NOT_SUPPORTED */
    {GM_GPU_FAN_SPEED_PCT, AT(fan_speed_pct), GF_UNSIGNED, "%", GM_HAS_FAN,
     .nvml = "nvmlDeviceGetFanSpeed", .read = GF_READ_DEV_UINT, .scale = 1, .shown_unit = "%",
     .json = "fan_speed_pct", .csv = "fan_speed_pct",
     .smi = "fan.speed", .smi_alias = GF_NONE, .smi_unit = "%", .label = "fan speed",
     .metric = "DCGM_FI_DEV_FAN_SPEED", .help = "Fan speed (in %)."},
};
/* clang-format on */

const size_t gpu_field_count = sizeof gpu_fields / sizeof gpu_fields[0];

_Static_assert(sizeof gpu_fields / sizeof gpu_fields[0] == GM_GPU_FAN_SPEED_PCT + 1,
               "a row for every enum gm_gpu_value, in its order");
_Static_assert(sizeof gpu_fields / sizeof gpu_fields[0] <= GPU_FIELD_MAX,
               "GPU_FIELD_MAX has room for every row");

int gpu_field_get(const struct gm_gpu *gpu, const struct gpu_field *f, int64_t *out)
{
	const char *p = (const char *)gpu + f->offset;

	if ((gpu->valid & f->need) != f->need)
		return 0;
	switch (f->type) {
	case GF_UNSIGNED:
		*out = *(const unsigned *)(const void *)p;
		break;
	case GF_INT:
		*out = *(const int *)(const void *)p;
		break;
	case GF_U64:
		*out = (int64_t) * (const uint64_t *)(const void *)p;
		break;
	}
	return 1;
}

void gpu_field_set(struct gm_gpu *gpu, const struct gpu_field *f, int64_t v)
{
	char *p = (char *)gpu + f->offset;

	switch (f->type) {
	case GF_UNSIGNED:
		*(unsigned *)(void *)p = (unsigned)v;
		break;
	case GF_INT:
		*(int *)(void *)p = (int)v;
		break;
	case GF_U64:
		*(uint64_t *)(void *)p = (uint64_t)v;
		break;
	}
}

const char *gpu_field_text(const struct gm_gpu *gpu, const struct gpu_field *f, char *buf,
                           size_t len)
{
	int64_t v = 0;

	if (!gpu_field_get(gpu, f, &v))
		return NULL;
	if (f->scale > 1)
		snprintf(buf, len, "%.1f", (double)v / f->scale);
	else
		snprintf(buf, len, "%lld", (long long)v);
	return buf;
}
