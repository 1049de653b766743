/*
 * gpu_fields.c - the table of the GPU's numeric readings (gpu_fields.h).
 */
#include "gpu_fields.h"

#define AT(member) offsetof(struct gm_gpu, member)

/* clang-format off */
const struct gpu_field gpu_fields[] = {
    {GM_GPU_MEM_TOTAL_MIB, AT(mem_total_mib), GF_U64, "MiB", GM_HAS_MEMORY,
     "nvmlDeviceGetMemoryInfo_v2", "memory_total_mib", 1, "memory.total",
     "DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).", 1},
    {GM_GPU_MEM_FREE_MIB, AT(mem_free_mib), GF_U64, "MiB", GM_HAS_MEMORY,
     "nvmlDeviceGetMemoryInfo_v2", "memory_free_mib", 1, "memory.free",
     "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", 1},
    {GM_GPU_MEM_USED_MIB, AT(mem_used_mib), GF_U64, "MiB", GM_HAS_MEMORY,
     "nvmlDeviceGetMemoryInfo_v2", "memory_used_mib", 1, "memory.used",
     "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", 1},
    {GM_GPU_UTIL_GPU_PCT, AT(util_gpu_pct), GF_UNSIGNED, "%", GM_HAS_UTIL,
     "nvmlDeviceGetUtilizationRates", "utilization_gpu_pct", 1, "utilization.gpu",
     "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", 1},
    {GM_GPU_UTIL_MEM_PCT, AT(util_mem_pct), GF_UNSIGNED, "%", GM_HAS_UTIL,
     "nvmlDeviceGetUtilizationRates", "utilization_memory_pct", 1, "utilization.memory",
     "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", 1},
    {GM_GPU_POWER_MW, AT(power_mw), GF_UNSIGNED, "mW", GM_HAS_POWER,
     "nvmlDeviceGetPowerUsage", "power_draw_w", 1000, "power.draw",
     "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", 1000},
    {GM_GPU_POWER_LIMIT_MW, AT(power_limit_mw), GF_UNSIGNED, "mW", GM_HAS_POWER_LIMIT,
     "nvmlDeviceGetEnforcedPowerLimit", "power_limit_w", 1000, "enforced.power.limit",
     "DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", 1000},
    {GM_GPU_TEMPERATURE_C, AT(temperature_c), GF_UNSIGNED, "C", GM_HAS_TEMPERATURE,
     "nvmlDeviceGetTemperature", "temperature_c", 1, "temperature.gpu",
     "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", 1},
    /* shown together as "compute_capability": "8.6" */
    {GM_GPU_CC_MAJOR, AT(cc_major), GF_INT, "", GM_HAS_CC,
     "nvmlDeviceGetCudaComputeCapability", NULL, 1, NULL, NULL, NULL, 1},
    {GM_GPU_CC_MINOR, AT(cc_minor), GF_INT, "", GM_HAS_CC,
     "nvmlDeviceGetCudaComputeCapability", NULL, 1, NULL, NULL, NULL, 1},
    /* shown by name ("exclusive_process"), and as a boolean */
    {GM_GPU_COMPUTE_MODE, AT(compute_mode), GF_INT, "", GM_HAS_COMPUTE_MODE,
     "nvmlDeviceGetComputeMode", NULL, 1, "compute_mode", NULL, NULL, 1},
    {GM_GPU_MIG_MODE, AT(mig_mode), GF_INT, "", GM_HAS_MIG,
     "nvmlDeviceGetMigMode", NULL, 1, "mig.mode.current", NULL, NULL, 1},
    {GM_GPU_CUDA_RANK, AT(cuda_rank), GF_U64, "", GM_HAS_CUDA_RANK,
     "nvmlDeviceGetNumGpuCores x nvmlDeviceGetMaxClockInfo(SM)", NULL, 1, NULL, NULL, NULL, 1},
    {GM_GPU_CLOCK_SM_MHZ, AT(clock_mhz[GM_CLOCK_SM]), GF_UNSIGNED, "MHz", GM_HAS_CLOCK_SM,
     "nvmlDeviceGetClockInfo", "clock_sm_mhz", 1, "clocks.sm",
     "DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", 1},
    {GM_GPU_CLOCK_MEM_MHZ, AT(clock_mhz[GM_CLOCK_MEM]), GF_UNSIGNED, "MHz", GM_HAS_CLOCK_MEM,
     "nvmlDeviceGetClockInfo", "clock_memory_mhz", 1, "clocks.mem",
     "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", 1},
    /* dcgm-exporter has no graphics clock */
    {GM_GPU_CLOCK_GRAPHICS_MHZ, AT(clock_mhz[GM_CLOCK_GRAPHICS]), GF_UNSIGNED, "MHz",
     GM_HAS_CLOCK_GRAPHICS, "nvmlDeviceGetClockInfo", "clock_graphics_mhz", 1, "clocks.gr",
     "gpuman_gpu_graphics_clock_mhz", "Graphics clock frequency (in MHz).", 1},
    {GM_GPU_MAX_CLOCK_SM_MHZ, AT(clock_max_mhz[GM_CLOCK_SM]), GF_UNSIGNED, "MHz",
     GM_HAS_MAX_CLOCK_SM, "nvmlDeviceGetMaxClockInfo", "max_clock_sm_mhz", 1, "clocks.max.sm",
     "DCGM_FI_DEV_MAX_SM_CLOCK", "Maximum SM clock frequency (in MHz).", 1},
    {GM_GPU_MAX_CLOCK_MEM_MHZ, AT(clock_max_mhz[GM_CLOCK_MEM]), GF_UNSIGNED, "MHz",
     GM_HAS_MAX_CLOCK_MEM, "nvmlDeviceGetMaxClockInfo", "max_clock_memory_mhz", 1,
     "clocks.max.mem", "DCGM_FI_DEV_MAX_MEM_CLOCK", "Maximum memory clock frequency (in MHz).", 1},
    {GM_GPU_MAX_CLOCK_GRAPHICS_MHZ, AT(clock_max_mhz[GM_CLOCK_GRAPHICS]), GF_UNSIGNED, "MHz",
     GM_HAS_MAX_CLOCK_GRAPHICS, "nvmlDeviceGetMaxClockInfo", "max_clock_graphics_mhz", 1,
     "clocks.max.gr", "gpuman_gpu_max_graphics_clock_mhz",
     "Maximum graphics clock frequency (in MHz).", 1},
    /* shown as a boolean */
    {GM_GPU_PERSISTENCE_MODE, AT(persistence_mode), GF_INT, "", GM_HAS_PERSISTENCE,
     "nvmlDeviceGetPersistenceMode", NULL, 1, "persistence_mode", NULL, NULL, 1},
    {GM_GPU_MINOR_NUMBER, AT(minor), GF_INT, "", GM_HAS_MINOR,
     "nvmlDeviceGetMinorNumber", "minor_number", 1, "minor_number", NULL, NULL, 1},
};
/* clang-format on */

const size_t gpu_field_count = sizeof gpu_fields / sizeof gpu_fields[0];

_Static_assert(sizeof gpu_fields / sizeof gpu_fields[0] == GM_GPU_MINOR_NUMBER + 1,
               "a row for every enum gm_gpu_value, in its order");

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
