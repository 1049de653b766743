/*
 * nvml_sim.h - what the simulator's source files share (nothing here is
 * exported: sim objects are built with -fvisibility=hidden and only the NVML
 * functions, marked SIM_EXPORT, leave the library).
 */
#ifndef GM_SIM_NVML_SIM_H
#define GM_SIM_NVML_SIM_H

#include <pthread.h>
#include <stdint.h>
#include "scenario.h"
#include "simstate.h"

#define SIM_EXPORT __attribute__((visibility("default")))

/* nvmlReturn_t (an int-sized enum). */
enum nvml_return {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_UNKNOWN = 999
};

/* The driver branch this library is (390, 470, ...) and every simulated
 * branch, oldest first, 0-terminated (sim/branch.c). */
extern const unsigned sim_branch;
extern const unsigned sim_branches[];

/* The loaded scenario; NULL before the first and after the last init. */
extern struct scenario *sim;

#define MIB 1048576ULL

/*
 * The live-process cache (nvml_sim.c), which the device and process queries
 * (nvml_device.c, nvml_procs.c) read: take sim_mutex, call
 * sim_live_refresh() (or sim_timeline_refresh() where only the scenario's
 * own processes matter), read, unlock.
 */
extern pthread_mutex_t sim_mutex;
/* The gpuman-simload processes running now, and per GPU (by index) the MiB
 * and utilization percent they add. */
extern struct simstate_live sim_live;
extern uint64_t sim_live_used_mib[SCENARIO_MAX_GPUS];
extern unsigned sim_live_util_pct[SCENARIO_MAX_GPUS];
/* The timeline's phase of this moment into sim->gpus. */
void sim_timeline_refresh(void);
/* That, and the live processes re-read if the last reading is stale. */
void sim_live_refresh(void);
/* The MiB live processes use on one MIG slice. */
uint64_t sim_live_mig_mib(const struct scenario_gpu *mig);

/* The checks every system query makes, in NVML's order: initialised,
 * present in this driver, sane arguments. */
enum nvml_return sim_system_query(enum scenario_fn fn, int args_ok);
/* ... and every device query: a handle we gave out, the GPU's injected
 * fault, and whether the GPU reports the field (enum scenario_has bits). */
enum nvml_return sim_device_query(enum scenario_fn fn, const struct scenario_gpu *dev, int args_ok,
                                  unsigned need);
/* One of the scenario's readings, or NOT_SUPPORTED where it gives none. */
enum nvml_return sim_reading(const struct scenario_gpu *dev, enum scenario_reading r,
                             unsigned *out);
/* NUL-terminated value into buf, or INSUFFICIENT_SIZE with buf untouched. */
enum nvml_return sim_copy_string(const char *value, char *buf, unsigned length);
/* A handle for gpu, or the fault the scenario injects at handle time. */
enum nvml_return sim_give_handle(struct scenario_gpu *gpu, struct scenario_gpu **device);

#endif
