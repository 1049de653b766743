/*
 * nvml_device.c - the simulator's answers about one device: identity, PCI,
 * memory (the scenario's and live simload processes'), utilization, power,
 * temperature, clocks and modes, in NVML's struct layouts.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "scenario.h"
#include "simstate.h"
#include "nvml_sim.h"

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

_Static_assert(sizeof(struct nvml_memory_v2) == 40, "nvmlMemory_v2_t is 40 bytes");
_Static_assert(NVML_MEMORY_V2_VERSION == 0x02000028, "nvmlMemory_v2 version word");
_Static_assert(sizeof(struct nvml_pci_info) == 68, "nvmlPciInfo_t is 68 bytes");
_Static_assert(sizeof(struct nvml_pci_info_v2) == 52, "the old nvmlPciInfo_t is 52 bytes");

/* The exported ABI (see nvml_sim.c). */
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
SIM_EXPORT enum nvml_return nvmlDeviceGetComputeMode(struct scenario_gpu *device, int *mode);
SIM_EXPORT enum nvml_return nvmlDeviceGetMigMode(struct scenario_gpu *device, unsigned *current,
                                                 unsigned *pending);
SIM_EXPORT enum nvml_return nvmlDeviceGetNumGpuCores(struct scenario_gpu *device, unsigned *cores);
SIM_EXPORT enum nvml_return nvmlDeviceGetMaxClockInfo(struct scenario_gpu *device, int type,
                                                      unsigned *clock_mhz);

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
	sim_live_refresh();
	used = device->mem_used_mib + device->procs_used_mib +
	       (device->is_mig ? sim_live_mig_mib(device) : sim_live_used_mib[device->index]);
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
		sim_live_refresh();
		gpu = device->util_gpu_pct + device->procs_util_pct +
		      sim_live_util_pct[device->index];
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
