/*
 * nvml_monitor.c - the NVML readings monitoring tools show beyond what gpuman
 * itself asks (nvtop, nvitop and gpustat ask for them): PCIe link and
 * throughput, clocks, fan, encoder and decoder, temperature thresholds,
 * power limits, performance and persistence state; handles by PCI bus id;
 * and the answer of every function the simulator does not model.
 *
 * Each reading is one number of the scenario (enum scenario_reading); where
 * the scenario gives none, NVML's answer is NOT_SUPPORTED, as a GPU without
 * the sensor answers.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "nvml_sim.h"

/* nvmlTemperatureThresholds_t, nvmlPcieUtilCounter_t, nvmlClockType_t */
enum {
	THRESHOLD_SHUTDOWN = 0,
	THRESHOLD_SLOWDOWN = 1,
	THRESHOLD_MEM_MAX = 2,
	THRESHOLD_GPU_MAX = 3
};
enum { PCIE_TX_BYTES = 0, PCIE_RX_BYTES = 1 };
enum { CLOCK_GRAPHICS = 0, CLOCK_SM = 1, CLOCK_MEM = 2, CLOCK_VIDEO = 3 };
/* nvmlTemperature_v1_t: clients that find nvmlDeviceGetTemperatureV (the
 * newest drivers) use it instead of nvmlDeviceGetTemperature. */
struct nvml_temperature_v1 {
	unsigned version;
	unsigned sensor_type; /* nvmlTemperatureSensors_t */
	int temperature_c;
};
#define NVML_TEMPERATURE_V1 ((unsigned)(sizeof(struct nvml_temperature_v1) | 1u << 24))
_Static_assert(sizeof(struct nvml_temperature_v1) == 12, "nvmlTemperature_v1_t is 12 bytes");

/* The encoder/decoder sampling period NVML reports with its percentage. */
#define CODEC_PERIOD_US 167000u

SIM_EXPORT enum nvml_return nvmlDeviceGetClockInfo(struct scenario_gpu *device, int type,
                                                   unsigned *clock_mhz);
SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id,
                                                             struct scenario_gpu **device);
SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByPciBusId(const char *bus_id,
                                                          struct scenario_gpu **device);
SIM_EXPORT enum nvml_return nvmlSystemGetNVMLVersion(char *version, unsigned length);
SIM_EXPORT enum nvml_return nvmlDeviceGetMaxPcieLinkGeneration(struct scenario_gpu *device,
                                                               unsigned *gen);
SIM_EXPORT enum nvml_return nvmlDeviceGetMaxPcieLinkWidth(struct scenario_gpu *device,
                                                          unsigned *width);
SIM_EXPORT enum nvml_return nvmlDeviceGetCurrPcieLinkGeneration(struct scenario_gpu *device,
                                                                unsigned *gen);
SIM_EXPORT enum nvml_return nvmlDeviceGetCurrPcieLinkWidth(struct scenario_gpu *device,
                                                           unsigned *width);
SIM_EXPORT enum nvml_return nvmlDeviceGetPcieThroughput(struct scenario_gpu *device, int counter,
                                                        unsigned *kbps);
SIM_EXPORT enum nvml_return nvmlDeviceGetTemperatureThreshold(struct scenario_gpu *device,
                                                              int threshold, unsigned *temp_c);
SIM_EXPORT enum nvml_return nvmlDeviceGetFanSpeed(struct scenario_gpu *device, unsigned *pct);
SIM_EXPORT enum nvml_return nvmlDeviceGetFanSpeed_v2(struct scenario_gpu *device, unsigned fan,
                                                     unsigned *pct);
SIM_EXPORT enum nvml_return nvmlDeviceGetNumFans(struct scenario_gpu *device, unsigned *fans);
SIM_EXPORT enum nvml_return nvmlDeviceGetEncoderUtilization(struct scenario_gpu *device,
                                                            unsigned *pct, unsigned *period_us);
SIM_EXPORT enum nvml_return nvmlDeviceGetDecoderUtilization(struct scenario_gpu *device,
                                                            unsigned *pct, unsigned *period_us);
SIM_EXPORT enum nvml_return nvmlDeviceGetPowerManagementLimit(struct scenario_gpu *device,
                                                              unsigned *limit_mw);
SIM_EXPORT enum nvml_return nvmlDeviceGetPowerManagementDefaultLimit(struct scenario_gpu *device,
                                                                     unsigned *limit_mw);
SIM_EXPORT enum nvml_return
nvmlDeviceGetPowerManagementLimitConstraints(struct scenario_gpu *device, unsigned *min_mw,
                                             unsigned *max_mw);
SIM_EXPORT enum nvml_return nvmlDeviceGetPerformanceState(struct scenario_gpu *device, int *pstate);
SIM_EXPORT enum nvml_return nvmlDeviceGetPersistenceMode(struct scenario_gpu *device, int *mode);
SIM_EXPORT enum nvml_return nvmlDeviceGetTemperatureV(struct scenario_gpu *device,
                                                      struct nvml_temperature_v1 *temp);
struct nvml_bar1_memory;
SIM_EXPORT enum nvml_return nvmlDeviceGetBAR1MemoryInfo(struct scenario_gpu *device,
                                                        struct nvml_bar1_memory *bar1);
SIM_EXPORT enum nvml_return nvmlSystemGetProcessName(unsigned pid, char *name, unsigned length);
SIM_EXPORT enum nvml_return nvmlDeviceGetTotalEnergyConsumption(struct scenario_gpu *device,
                                                                unsigned long long *energy_mj);
SIM_EXPORT enum nvml_return nvmlDeviceGetCpuAffinity(struct scenario_gpu *device, unsigned size,
                                                     unsigned long *set);
SIM_EXPORT enum nvml_return nvmlDeviceGetCpuAffinityWithinScope(struct scenario_gpu *device,
                                                                unsigned size, unsigned long *set,
                                                                int scope);
SIM_EXPORT enum nvml_return nvmlDeviceGetMemoryAffinity(struct scenario_gpu *device, unsigned size,
                                                        unsigned long *set, int scope);
SIM_EXPORT enum nvml_return nvmlDeviceGetP2PStatus(struct scenario_gpu *a, struct scenario_gpu *b,
                                                   int index, int *status);
int sim_unmodelled(void);

/* A device getter of one reading. */
static enum nvml_return one(enum scenario_fn fn, struct scenario_gpu *dev, enum scenario_reading r,
                            unsigned *out)
{
	enum nvml_return ret = sim_device_query(fn, dev, out != NULL, 0);

	return ret == NVML_SUCCESS ? sim_reading(dev, r, out) : ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetClockInfo(struct scenario_gpu *device, int type,
                                                   unsigned *clock_mhz)
{
	static const enum scenario_reading by_type[] = {
	    [CLOCK_GRAPHICS] = READING_CLOCK_GRAPHICS_MHZ,
	    [CLOCK_SM] = READING_CLOCK_SM_MHZ,
	    [CLOCK_MEM] = READING_CLOCK_MEM_MHZ,
	    [CLOCK_VIDEO] = READING_CLOCK_VIDEO_MHZ,
	};
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetClockInfo, device,
	                                        clock_mhz != NULL && type >= 0 && type <= 3, 0);

	return ret == NVML_SUCCESS ? sim_reading(device, by_type[type], clock_mhz) : ret;
}

/* Bus ids compare by value: "0000:21:00.0" and "00000000:21:00.0" are one
 * GPU; so are upper and lower case hex digits. */
static int parse_bus_id(const char *s, unsigned *d, unsigned *b, unsigned *dev, unsigned *f)
{
	int n = -1;

	*f = 0;
	if (sscanf(s, "%x:%x:%x.%x%n", d, b, dev, f, &n) == 4 && !s[n])
		return 0;
	n = -1;
	if (sscanf(s, "%x:%x.%x%n", b, dev, f, &n) == 3 && !s[n]) {
		*d = 0;
		return 0;
	}
	return -1;
}

static enum nvml_return handle_by_bus_id(enum scenario_fn fn, const char *bus_id,
                                         struct scenario_gpu **device)
{
	enum nvml_return ret = sim_system_query(fn, bus_id != NULL && device != NULL);
	unsigned d, b, dev, f;

	if (ret != NVML_SUCCESS)
		return ret;
	if (parse_bus_id(bus_id, &d, &b, &dev, &f) < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (size_t i = 0; i < sim->gpu_count; i++) {
		struct scenario_gpu *g = &sim->gpus[i];

		if (g->pci_domain == d && g->pci_bus == b && g->pci_device == dev &&
		    g->pci_function == f)
			return sim_give_handle(g, device);
	}
	return NVML_ERROR_NOT_FOUND;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id,
                                                             struct scenario_gpu **device)
{
	return handle_by_bus_id(FN_nvmlDeviceGetHandleByPciBusId_v2, bus_id, device);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetHandleByPciBusId(const char *bus_id,
                                                          struct scenario_gpu **device)
{
	return handle_by_bus_id(FN_nvmlDeviceGetHandleByPciBusId, bus_id, device);
}

/* NVML's version is the CUDA major version and the driver's: "13.580.95.05". */
SIM_EXPORT enum nvml_return nvmlSystemGetNVMLVersion(char *version, unsigned length)
{
	enum nvml_return ret = sim_system_query(FN_nvmlSystemGetNVMLVersion, version != NULL);
	char buf[96];

	if (ret == NVML_SUCCESS && (!sim->has_driver_version || !sim->has_cuda_driver_version))
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret == NVML_SUCCESS) {
		snprintf(buf, sizeof buf, "%d.%s", sim->cuda_driver_version / 1000,
		         sim->driver_version);
		ret = sim_copy_string(buf, version, length);
	}
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetMaxPcieLinkGeneration(struct scenario_gpu *device,
                                                               unsigned *gen)
{
	return one(FN_nvmlDeviceGetMaxPcieLinkGeneration, device, READING_PCIE_MAX_GEN, gen);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetMaxPcieLinkWidth(struct scenario_gpu *device,
                                                          unsigned *width)
{
	return one(FN_nvmlDeviceGetMaxPcieLinkWidth, device, READING_PCIE_MAX_WIDTH, width);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetCurrPcieLinkGeneration(struct scenario_gpu *device,
                                                                unsigned *gen)
{
	return one(FN_nvmlDeviceGetCurrPcieLinkGeneration, device, READING_PCIE_GEN, gen);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetCurrPcieLinkWidth(struct scenario_gpu *device,
                                                           unsigned *width)
{
	return one(FN_nvmlDeviceGetCurrPcieLinkWidth, device, READING_PCIE_WIDTH, width);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetPcieThroughput(struct scenario_gpu *device, int counter,
                                                        unsigned *kbps)
{
	enum nvml_return ret = sim_device_query(
	    FN_nvmlDeviceGetPcieThroughput, device,
	    kbps != NULL && (counter == PCIE_TX_BYTES || counter == PCIE_RX_BYTES), 0);

	if (ret != NVML_SUCCESS)
		return ret;
	return sim_reading(
	    device, counter == PCIE_TX_BYTES ? READING_PCIE_TX_KBPS : READING_PCIE_RX_KBPS, kbps);
}

/* Thresholds other than these four (acoustic, GPS) are not modelled. */
SIM_EXPORT enum nvml_return nvmlDeviceGetTemperatureThreshold(struct scenario_gpu *device,
                                                              int threshold, unsigned *temp_c)
{
	static const enum scenario_reading by_kind[] = {
	    [THRESHOLD_SHUTDOWN] = READING_TEMP_SHUTDOWN_C,
	    [THRESHOLD_SLOWDOWN] = READING_TEMP_SLOWDOWN_C,
	    [THRESHOLD_MEM_MAX] = READING_TEMP_MEM_MAX_C,
	    [THRESHOLD_GPU_MAX] = READING_TEMP_GPU_MAX_C,
	};
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetTemperatureThreshold, device,
	                                        temp_c != NULL && threshold >= 0, 0);

	if (ret == NVML_SUCCESS && threshold > THRESHOLD_GPU_MAX)
		ret = NVML_ERROR_NOT_SUPPORTED;
	return ret == NVML_SUCCESS ? sim_reading(device, by_kind[threshold], temp_c) : ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetFanSpeed(struct scenario_gpu *device, unsigned *pct)
{
	return one(FN_nvmlDeviceGetFanSpeed, device, READING_FAN_PCT, pct);
}

/* One fan per GPU where the scenario gives a fan speed, none otherwise. */
SIM_EXPORT enum nvml_return nvmlDeviceGetFanSpeed_v2(struct scenario_gpu *device, unsigned fan,
                                                     unsigned *pct)
{
	enum nvml_return ret =
	    sim_device_query(FN_nvmlDeviceGetFanSpeed_v2, device, pct != NULL, 0);

	if (ret == NVML_SUCCESS && fan != 0)
		ret = (device->reading_has & (1u << READING_FAN_PCT)) ? NVML_ERROR_INVALID_ARGUMENT
		                                                      : NVML_ERROR_NOT_SUPPORTED;
	return ret == NVML_SUCCESS ? sim_reading(device, READING_FAN_PCT, pct) : ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetNumFans(struct scenario_gpu *device, unsigned *fans)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetNumFans, device, fans != NULL, 0);

	if (ret == NVML_SUCCESS)
		*fans = (device->reading_has & (1u << READING_FAN_PCT)) ? 1 : 0;
	return ret;
}

static enum nvml_return codec(enum scenario_fn fn, struct scenario_gpu *device,
                              enum scenario_reading r, unsigned *pct, unsigned *period_us)
{
	enum nvml_return ret = sim_device_query(fn, device, pct != NULL && period_us != NULL, 0);

	if (ret == NVML_SUCCESS)
		ret = sim_reading(device, r, pct);
	if (ret == NVML_SUCCESS)
		*period_us = CODEC_PERIOD_US;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetEncoderUtilization(struct scenario_gpu *device,
                                                            unsigned *pct, unsigned *period_us)
{
	return codec(FN_nvmlDeviceGetEncoderUtilization, device, READING_ENCODER_PCT, pct,
	             period_us);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetDecoderUtilization(struct scenario_gpu *device,
                                                            unsigned *pct, unsigned *period_us)
{
	return codec(FN_nvmlDeviceGetDecoderUtilization, device, READING_DECODER_PCT, pct,
	             period_us);
}

/* The management limit is the enforced one (power_limit_w): the simulator
 * has no second source of limits that could differ. */
SIM_EXPORT enum nvml_return nvmlDeviceGetPowerManagementLimit(struct scenario_gpu *device,
                                                              unsigned *limit_mw)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetPowerManagementLimit, device,
	                                        limit_mw != NULL, SCENARIO_HAS_POWER_LIMIT);

	if (ret == NVML_SUCCESS)
		*limit_mw = device->power_limit_mw;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetPowerManagementDefaultLimit(struct scenario_gpu *device,
                                                                     unsigned *limit_mw)
{
	return one(FN_nvmlDeviceGetPowerManagementDefaultLimit, device, READING_POWER_DEFAULT_MW,
	           limit_mw);
}

SIM_EXPORT enum nvml_return
nvmlDeviceGetPowerManagementLimitConstraints(struct scenario_gpu *device, unsigned *min_mw,
                                             unsigned *max_mw)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetPowerManagementLimitConstraints,
	                                        device, min_mw != NULL && max_mw != NULL, 0);
	unsigned lo, hi;

	if (ret == NVML_SUCCESS)
		ret = sim_reading(device, READING_POWER_MIN_MW, &lo);
	if (ret == NVML_SUCCESS)
		ret = sim_reading(device, READING_POWER_MAX_MW, &hi);
	if (ret == NVML_SUCCESS) {
		*min_mw = lo;
		*max_mw = hi;
	}
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetPerformanceState(struct scenario_gpu *device, int *pstate)
{
	unsigned v;
	enum nvml_return ret =
	    one(FN_nvmlDeviceGetPerformanceState, device, READING_PSTATE, pstate ? &v : NULL);

	if (ret == NVML_SUCCESS)
		*pstate = (int)v;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetPersistenceMode(struct scenario_gpu *device, int *mode)
{
	unsigned v;
	enum nvml_return ret =
	    one(FN_nvmlDeviceGetPersistenceMode, device, READING_PERSISTENCE, mode ? &v : NULL);

	if (ret == NVML_SUCCESS)
		*mode = (int)v;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetTemperatureV(struct scenario_gpu *device,
                                                      struct nvml_temperature_v1 *temp)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetTemperatureV, device, temp != NULL,
	                                        SCENARIO_HAS_TEMPERATURE);

	if (ret == NVML_SUCCESS && temp->version != NVML_TEMPERATURE_V1)
		ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (ret == NVML_SUCCESS && temp->sensor_type != 0)
		ret = NVML_ERROR_INVALID_ARGUMENT; /* only NVML_TEMPERATURE_GPU */
	if (ret == NVML_SUCCESS)
		temp->temperature_c = (int)device->temperature_c;
	return ret;
}

/* nvmlBAR1Memory_t: bytes. */
struct nvml_bar1_memory {
	unsigned long long total, free, used;
};

SIM_EXPORT enum nvml_return nvmlDeviceGetBAR1MemoryInfo(struct scenario_gpu *device,
                                                        struct nvml_bar1_memory *bar1)
{
	enum nvml_return ret =
	    sim_device_query(FN_nvmlDeviceGetBAR1MemoryInfo, device, bar1 != NULL, 0);
	unsigned total, used;

	if (ret == NVML_SUCCESS)
		ret = sim_reading(device, READING_BAR1_TOTAL_MIB, &total);
	if (ret == NVML_SUCCESS &&
	    sim_reading(device, READING_BAR1_USED_MIB, &used) != NVML_SUCCESS)
		used = 0;
	if (ret == NVML_SUCCESS) {
		used = used < total ? used : total;
		bar1->total = (unsigned long long)total << 20;
		bar1->used = (unsigned long long)used << 20;
		bar1->free = bar1->total - bar1->used;
	}
	return ret;
}

/* The driver names a process by its executable: argv[0] of a process this
 * machine runs (a live simload); NOT_FOUND for the scenario's imagined pids. */
SIM_EXPORT enum nvml_return nvmlSystemGetProcessName(unsigned pid, char *name, unsigned length)
{
	enum nvml_return ret =
	    sim_system_query(FN_nvmlSystemGetProcessName, name != NULL && length > 0);
	char path[64], buf[256] = "";
	FILE *f;
	size_t n = 0;

	if (ret != NVML_SUCCESS)
		return ret;
	snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
	f = fopen(path, "r");
	if (f) {
		n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
	}
	if (!n)
		return NVML_ERROR_NOT_FOUND;
	buf[n] = '\0';
	/* NVML truncates to the caller's buffer rather than refusing it. */
	snprintf(name, length, "%s", buf);
	return NVML_SUCCESS;
}

/* Energy since boot at the scenario's power draw: it grows as a real
 * counter does between two readings. */
SIM_EXPORT enum nvml_return nvmlDeviceGetTotalEnergyConsumption(struct scenario_gpu *device,
                                                                unsigned long long *energy_mj)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetTotalEnergyConsumption, device,
	                                        energy_mj != NULL, SCENARIO_HAS_POWER);
	struct timespec ts;

	if (ret == NVML_SUCCESS) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		*energy_mj = (unsigned long long)device->power_mw * (unsigned long long)ts.tv_sec +
		             (unsigned long long)device->power_mw * (unsigned long long)ts.tv_nsec /
		                 1000000000ULL;
	}
	return ret;
}

/* Every CPU (or NUMA node 0) of this machine is close to every simulated
 * GPU: a bit mask in the caller's size words of unsigned long. */
static enum nvml_return affinity(enum scenario_fn fn, struct scenario_gpu *device, unsigned size,
                                 unsigned long *set, long count)
{
	enum nvml_return ret = sim_device_query(fn, device, set != NULL && size > 0, 0);
	const unsigned bits = 8 * sizeof *set;

	if (ret != NVML_SUCCESS)
		return ret;
	memset(set, 0, size * sizeof *set);
	for (long c = 0; c < count && (unsigned long)c < (unsigned long)size * bits; c++)
		set[c / bits] |= 1UL << (c % bits);
	return NVML_SUCCESS;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetCpuAffinity(struct scenario_gpu *device, unsigned size,
                                                     unsigned long *set)
{
	return affinity(FN_nvmlDeviceGetCpuAffinity, device, size, set,
	                sysconf(_SC_NPROCESSORS_CONF));
}

SIM_EXPORT enum nvml_return nvmlDeviceGetCpuAffinityWithinScope(struct scenario_gpu *device,
                                                                unsigned size, unsigned long *set,
                                                                int scope)
{
	(void)scope; /* one NUMA node, one socket: the same set */
	return affinity(FN_nvmlDeviceGetCpuAffinityWithinScope, device, size, set,
	                sysconf(_SC_NPROCESSORS_CONF));
}

SIM_EXPORT enum nvml_return nvmlDeviceGetMemoryAffinity(struct scenario_gpu *device, unsigned size,
                                                        unsigned long *set, int scope)
{
	(void)scope;
	return affinity(FN_nvmlDeviceGetMemoryAffinity, device, size, set, 1);
}

/* nvmlGpuP2PStatus_t: OK between two GPUs of one model, NOT_SUPPORTED (5)
 * between different ones, as on mixed workstations. */
SIM_EXPORT enum nvml_return nvmlDeviceGetP2PStatus(struct scenario_gpu *a, struct scenario_gpu *b,
                                                   int index, int *status)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetP2PStatus, a, status != NULL, 0);

	if (ret == NVML_SUCCESS)
		ret = sim_device_query(FN_nvmlDeviceGetP2PStatus, b, index >= 0, 0);
	if (ret == NVML_SUCCESS)
		*status = a != b && !strcmp(a->name, b->name) ? 0 : 5;
	return ret;
}

/* What the functions the simulator does not model answer: NOT_SUPPORTED,
 * as a GPU without the feature does (before init, UNINITIALIZED).  Their
 * arguments are never touched, so no caller's memory is at risk. */
int sim_unmodelled(void)
{
	return sim ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_UNINITIALIZED;
}
