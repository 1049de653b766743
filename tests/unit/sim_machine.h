/*
 * sim_machine.h - a machine of the NVML simulator for the tests of the
 * public API (test_api.c, test_reserve_api.c, test_registry.c): a scenario
 * file, a state directory and the simulator's state under a fresh
 * directory, and the environment that points gpuman at them.  Standard
 * headers only, so that those tests still see gpuman through gpuman.h
 * alone.
 */
#ifndef GM_TEST_SIM_MACHINE_H
#define GM_TEST_SIM_MACHINE_H

#include <stdio.h>
#include <stdlib.h>

/* dir: a mkdtemp template, filled in; scenario: the scenario's JSON.  0,
 * or -1 if it cannot be made. */
static inline int sim_machine_setup(char *dir, const char *scenario)
{
	char path[256], sim[512];
	const char *build = getenv("GM_BUILD") ? getenv("GM_BUILD") : "build";
	FILE *f;

	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof path, "%s/machine.json", dir);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(scenario, f);
	fclose(f);
	snprintf(sim, sizeof sim, "%s/sim/libnvidia-ml.so.1", build);
	setenv("GPUMAN_NVML", sim, 1);
	setenv("GPUMAN_SIM", path, 1);
	snprintf(path, sizeof path, "%s/state", dir);
	setenv("GPUMAN_STATE_DIR", path, 1);
	snprintf(path, sizeof path, "%s/simstate", dir);
	setenv("GPUMAN_SIM_STATE", path, 1);
	unsetenv("CUDA_VISIBLE_DEVICES");
	unsetenv("GPUMAN_BROKER");
	unsetenv("GPUMAN_RESERVATION");
	return 0;
}

/* Two GPUs: "small" (11 GiB, 1000 MiB used, pid 4242 on it), "big" (24 GiB). */
static inline int two_gpus_setup(char *dir)
{
	return sim_machine_setup(
	    dir,
	    "{ \"driver_version\": \"580.95.05\", \"cuda_driver_version\": 13000,\n"
	    "  \"gpus\": [\n"
	    "    { \"name\": \"small\", \"uuid\": \"GPU-11111111-aaaa-bbbb-cccc-000000000001\",\n"
	    "      \"memory_total_mib\": 11264, \"memory_used_mib\": 1000,\n"
	    "      \"utilization_gpu\": 5, \"power_draw_w\": 55, \"power_limit_w\": 250,\n"
	    "      \"processes\": [ { \"pid\": 4242, \"used_mib\": 500 } ] },\n"
	    "    { \"name\": \"big\", \"uuid\": \"GPU-22222222-aaaa-bbbb-cccc-000000000002\",\n"
	    "      \"memory_total_mib\": 24576, \"memory_used_mib\": 100 } ] }\n");
}

static inline int sim_machine_teardown(const char *dir)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
