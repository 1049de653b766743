/*
 * nvml_mig.c - MIG slices: a GPU with "mig_mode": 1 and "mig_devices" in
 * its scenario is split into slices, each a device handle of its own
 * ("MIG-..." UUID, name "<GPU> MIG 1g.10gb", its memory and processes),
 * reached from its GPU by index or directly by UUID, as CUDA and the
 * MIG-aware NVML clients reach them.
 */
#include <stddef.h>
#include "nvml_sim.h"

SIM_EXPORT enum nvml_return nvmlDeviceGetMaxMigDeviceCount(struct scenario_gpu *device,
                                                           unsigned *count);
SIM_EXPORT enum nvml_return nvmlDeviceGetMigDeviceHandleByIndex(struct scenario_gpu *device,
                                                                unsigned index,
                                                                struct scenario_gpu **mig);
SIM_EXPORT enum nvml_return nvmlDeviceIsMigDeviceHandle(struct scenario_gpu *device,
                                                        unsigned *is_mig);
SIM_EXPORT enum nvml_return nvmlDeviceGetGpuInstanceId(struct scenario_gpu *device, unsigned *id);
SIM_EXPORT enum nvml_return nvmlDeviceGetComputeInstanceId(struct scenario_gpu *device,
                                                           unsigned *id);
SIM_EXPORT enum nvml_return
nvmlDeviceGetDeviceHandleFromMigDeviceHandle(struct scenario_gpu *mig,
                                             struct scenario_gpu **device);

/* Slots a MIG-capable GPU has (A100, H100: 7); a GPU the scenario gives no
 * MIG mode is not MIG-capable. */
SIM_EXPORT enum nvml_return nvmlDeviceGetMaxMigDeviceCount(struct scenario_gpu *device,
                                                           unsigned *count)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetMaxMigDeviceCount, device,
	                                        count != NULL, SCENARIO_HAS_MIG);

	if (ret == NVML_SUCCESS && device->is_mig)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		*count = device->mig_mode ? SCENARIO_MAX_MIGS : 0;
	return ret;
}

/* NOT_FOUND for an empty slot, as NVML answers: callers walk every slot. */
SIM_EXPORT enum nvml_return nvmlDeviceGetMigDeviceHandleByIndex(struct scenario_gpu *device,
                                                                unsigned index,
                                                                struct scenario_gpu **mig)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetMigDeviceHandleByIndex, device,
	                                        mig != NULL, SCENARIO_HAS_MIG);

	if (ret == NVML_SUCCESS &&
	    (device->is_mig || !device->mig_mode || index >= SCENARIO_MAX_MIGS))
		ret = NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS && index >= device->mig_count)
		ret = NVML_ERROR_NOT_FOUND;
	if (ret == NVML_SUCCESS)
		*mig = &device->migs[index];
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceIsMigDeviceHandle(struct scenario_gpu *device,
                                                        unsigned *is_mig)
{
	enum nvml_return ret =
	    sim_device_query(FN_nvmlDeviceIsMigDeviceHandle, device, is_mig != NULL, 0);

	if (ret == NVML_SUCCESS)
		*is_mig = device->is_mig ? 1 : 0;
	return ret;
}

static enum nvml_return instance_id(enum scenario_fn fn, struct scenario_gpu *device, unsigned *id,
                                    int compute)
{
	enum nvml_return ret = sim_device_query(fn, device, id != NULL, 0);

	if (ret == NVML_SUCCESS && !device->is_mig)
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret == NVML_SUCCESS)
		*id = compute ? device->compute_instance_id : device->gpu_instance_id;
	return ret;
}

SIM_EXPORT enum nvml_return nvmlDeviceGetGpuInstanceId(struct scenario_gpu *device, unsigned *id)
{
	return instance_id(FN_nvmlDeviceGetGpuInstanceId, device, id, 0);
}

SIM_EXPORT enum nvml_return nvmlDeviceGetComputeInstanceId(struct scenario_gpu *device,
                                                           unsigned *id)
{
	return instance_id(FN_nvmlDeviceGetComputeInstanceId, device, id, 1);
}

SIM_EXPORT enum nvml_return
nvmlDeviceGetDeviceHandleFromMigDeviceHandle(struct scenario_gpu *mig, struct scenario_gpu **device)
{
	enum nvml_return ret = sim_device_query(FN_nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
	                                        mig, device != NULL, 0);

	if (ret == NVML_SUCCESS && !mig->is_mig)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		*device = mig->parent;
	return ret;
}
