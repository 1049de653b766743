/*
 * scenario_gpu.c - one GPU of a scenario file: its identity (UUID, PCI bus
 * id), measurements, properties, processes and MIG slices, each checked
 * where it is read so that an error names the key path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "scenario.h"
#include "scenario_load.h"

#define DEFAULT_MAX_SM_CLOCK_MHZ 1500
#define CORES_PER_SPEED 2560.0 /* cuda_cores default: a speed-1.0 GPU has 2560 */
#define MAX_PID 4194304        /* the kernel's largest pid_max */

static const char *const compute_modes[] = {
    [SCENARIO_COMPUTE_DEFAULT] = "default",
    [SCENARIO_COMPUTE_EXCLUSIVE_THREAD] = "exclusive_thread",
    [SCENARIO_COMPUTE_PROHIBITED] = "prohibited",
    [SCENARIO_COMPUTE_EXCLUSIVE_PROCESS] = "exclusive_process",
};

/* Every object may carry a "comment": JSON has no comments of its own. */
static const char *const gpu_keys[] = {"comment",
                                       "name",
                                       "uuid",
                                       "pci_bus_id",
                                       "memory_total_mib",
                                       "memory_used_mib",
                                       "memory_utilization",
                                       "utilization_gpu",
                                       "power_draw_w",
                                       "power_limit_w",
                                       "temperature_c",
                                       "compute_capability",
                                       "compute_mode",
                                       "mig_mode",
                                       "cuda_cores",
                                       "max_sm_clock_mhz",
                                       "minor_number",
                                       "speed",
                                       "processes",
                                       "fail",
                                       "fail_at",
                                       "memory_reserved_mib",
                                       "mig_devices",
#define READING_KEY(id, key, min, max, scale) key,
                                       SCENARIO_READINGS(READING_KEY)
#undef READING_KEY
                                           NULL};

static const struct {
	const char *key;
	double min, max, scale;
} readings[READING_COUNT] = {
#define READING_ROW(id, key, min, max, scale) {key, min, max, scale},
    SCENARIO_READINGS(READING_ROW)
#undef READING_ROW
};
_Static_assert(READING_COUNT <= 32, "reading_has has 32 bits");
static const char *const mig_keys[] = {"comment",
                                       "profile",
                                       "uuid",
                                       "memory_total_mib",
                                       "memory_used_mib",
                                       "gpu_instance_id",
                                       "compute_instance_id",
                                       "processes",
                                       NULL};
static const char *const proc_keys[] = {"comment", "pid", "used_mib", "utilization", "type", NULL};

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

/* splitmix64's finaliser: turns a small counter into well-spread bits, so
 * that default UUIDs look like real ones and differ in their first digits. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void default_uuid(struct scenario_gpu *gpu)
{
	uint64_t hi = mix64(0x67706d00u + 2 * (uint64_t)gpu->index);
	uint64_t lo = mix64(0x67706d00u + 2 * (uint64_t)gpu->index + 1);

	snprintf(gpu->uuid, sizeof gpu->uuid, "GPU-%08x-%04x-%04x-%04x-%012llx",
	         (unsigned)(hi >> 32), (unsigned)(hi >> 16) & 0xffff, (unsigned)hi & 0xffff,
	         (unsigned)(lo >> 48), (unsigned long long)(lo & 0xffffffffffffULL));
}

static int parse_uuid(struct loader *ld, const json_t *obj, const char *where,
                      struct scenario_gpu *gpu)
{
	const char *s, *p;
	int f = loader_get_string(ld, obj, where, "uuid", 80, &s);

	if (f < 0)
		return -1;
	if (f != FIELD_SET) {
		default_uuid(gpu);
		return 0;
	}
	/* Commas or blanks would break CUDA_VISIBLE_DEVICES lists. */
	for (p = s + 4; strncmp(s, "GPU-", 4) == 0 && *p; p++)
		if (!(*p == '-' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			break;
	if (strncmp(s, "GPU-", 4) || *p || !s[4])
		return loader_bad(
		    ld, where, "uuid",
		    "'%s' is not a GPU UUID (expected \"GPU-\" followed by lowercase hex "
		    "digits and dashes)",
		    s);
	strcpy(gpu->uuid, s);
	return 0;
}

static int parse_pci(struct loader *ld, const json_t *obj, const char *where,
                     struct scenario_gpu *gpu)
{
	const char *s;
	unsigned domain = 0, bus, device, function;
	int n = -1, f = loader_get_string(ld, obj, where, "pci_bus_id", 32, &s);

	if (f < 0)
		return -1;
	if (f != FIELD_SET) {
		/* NVML numbers GPUs by PCI bus, so default buses follow the position. */
		bus = gpu->index + 1;
		device = function = 0;
	} else if (sscanf(s, "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &n) != 4 || s[n] ||
	           bus > 0xff || device > 0x1f || function > 7) {
		n = -1;
		domain = 0;
		if (sscanf(s, "%x:%x.%x%n", &bus, &device, &function, &n) != 3 || s[n] ||
		    bus > 0xff || device > 0x1f || function > 7)
			return loader_bad(
			    ld, where, "pci_bus_id",
			    "'%s' is not a PCI bus id (expected e.g. \"00000000:65:00.0\")", s);
	}
	gpu->pci_domain = domain;
	gpu->pci_bus = bus;
	gpu->pci_device = device;
	gpu->pci_function = function;
	snprintf(gpu->pci_bus_id, sizeof gpu->pci_bus_id, "%08X:%02X:%02X.%X", domain, bus, device,
	         function);
	snprintf(gpu->pci_bus_id_legacy, sizeof gpu->pci_bus_id_legacy, "%04X:%02X:%02X.%X",
	         domain & 0xffff, bus, device, function);
	return 0;
}

static int parse_proc(struct loader *ld, const json_t *obj, const char *where,
                      struct scenario_proc *proc)
{
	const char *type;
	double x;
	int f;

	if (!json_is_object(obj))
		return loader_bad(ld, where, NULL, "expected an object, got %s",
		                  loader_type_name(obj));
	if (loader_check_keys(ld, obj, where, proc_keys) < 0)
		return -1;

	f = loader_get_number(ld, obj, where, "pid", 1, MAX_PID, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_NULL)
		return loader_bad(ld, where, "pid", "expected a number, got null");
	if (f == FIELD_ABSENT)
		return loader_bad(ld, where, NULL, "missing required key 'pid'");
	proc->pid = (unsigned)x;

	/* Required so that "not available" (null) is always a choice, never a slip. */
	f = loader_get_number(ld, obj, where, "used_mib", 0, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_ABSENT)
		return loader_bad(
		    ld, where, NULL,
		    "missing required key 'used_mib' (null if the driver does not report "
		    "it)");
	proc->has_mem = f == FIELD_SET;
	proc->used_mib = f == FIELD_SET ? (uint64_t)x : 0;

	f = loader_get_number(ld, obj, where, "utilization", 0, 100, 1, &x);
	if (f < 0)
		return -1;
	proc->utilization = f == FIELD_SET ? (unsigned)x : 0;

	f = loader_get_string(ld, obj, where, "type", 16, &type);
	if (f < 0)
		return -1;
	if (f != FIELD_SET || !strcmp(type, "compute"))
		proc->kind = SCENARIO_PROC_COMPUTE;
	else if (!strcmp(type, "graphics"))
		proc->kind = SCENARIO_PROC_GRAPHICS;
	else if (!strcmp(type, "mps"))
		proc->kind = SCENARIO_PROC_MPS;
	else if (!strcmp(type, "compute+mps")) /* an MPS client listed by both calls */
		proc->kind = SCENARIO_PROC_COMPUTE | SCENARIO_PROC_MPS;
	else if (!strcmp(type, "both"))
		proc->kind = SCENARIO_PROC_COMPUTE | SCENARIO_PROC_GRAPHICS;
	else
		return loader_bad(ld, where, "type",
		                  "unknown type '%s' (use compute, graphics, both, mps or "
		                  "compute+mps)",
		                  type);
	return 0;
}

int scenario_parse_processes(struct loader *ld, const json_t *obj, const char *where,
                             struct scenario_gpu *gpu)
{
	const json_t *list = json_object_get(obj, "processes");
	char pwhere[96];
	size_t j, k;

	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return loader_bad(ld, where, "processes", "expected an array, got %s",
		                  loader_type_name(list));
	gpu->proc_count = json_array_size(list);
	gpu->procs = calloc(gpu->proc_count ? gpu->proc_count : 1, sizeof *gpu->procs);
	if (!gpu->procs)
		return loader_bad(ld, where, "processes", "out of memory");
	for (j = 0; j < gpu->proc_count; j++) {
		struct scenario_proc *proc = &gpu->procs[j];

		snprintf(pwhere, sizeof pwhere, "%s.processes[%zu]", where, j);
		if (parse_proc(ld, json_array_get(list, j), pwhere, proc) < 0)
			return -1;
		for (k = 0; k < j; k++)
			if (gpu->procs[k].pid == proc->pid)
				return loader_bad(
				    ld, pwhere, "pid",
				    "%u is already listed on this GPU as processes[%zu] "
				    "(use \"type\": \"both\" for a process in both lists)",
				    proc->pid, k);
		if (proc->has_mem)
			gpu->procs_used_mib += proc->used_mib;
		gpu->procs_util_pct += proc->utilization;
	}
	return 0;
}

/* Fields that NVML reports: absent or null hides them (NOT_SUPPORTED). */
static int parse_measurements(struct loader *ld, const json_t *obj, const char *where,
                              struct scenario_gpu *gpu)
{
	const char *cc;
	double total = 0, used = 0, x;
	int f, n = -1;

	f = loader_get_number(ld, obj, where, "memory_total_mib", 0, MAX_MIB, 1, &total);
	if (f < 0)
		return -1;
	if (f == FIELD_ABSENT)
		return loader_bad(
		    ld, where, NULL,
		    "missing required key 'memory_total_mib' (null if the GPU does not "
		    "report memory)");
	if (f == FIELD_SET)
		gpu->has |= SCENARIO_HAS_MEMORY;
	f = loader_get_number(ld, obj, where, "memory_used_mib", 0, MAX_MIB, 1, &used);
	if (f < 0)
		return -1;
	if (f == FIELD_NULL)
		gpu->has &= ~SCENARIO_HAS_MEMORY;
	gpu->mem_total_mib = (uint64_t)total;
	gpu->mem_used_mib = (uint64_t)used;
	f = loader_get_number(ld, obj, where, "memory_reserved_mib", 0, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	gpu->mem_reserved_mib = f == FIELD_SET ? (uint64_t)x : 0;

	for (size_t i = 0; i < READING_COUNT; i++) {
		f = loader_get_number(ld, obj, where, readings[i].key, readings[i].min,
		                      readings[i].max, readings[i].scale == 1, &x);
		if (f < 0)
			return -1;
		if (f == FIELD_SET) {
			gpu->reading[i] = (unsigned)(x * readings[i].scale + 0.5);
			gpu->reading_has |= 1u << i;
		}
	}

	f = loader_get_number(ld, obj, where, "utilization_gpu", 0, 100, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		gpu->has |= SCENARIO_HAS_UTIL;
		gpu->util_gpu_pct = (unsigned)x;
	}
	f = loader_get_number(ld, obj, where, "memory_utilization", 0, 100, 1, &x);
	if (f < 0)
		return -1;
	gpu->util_mem_pct = f == FIELD_SET ? (unsigned)x : 0;

	f = loader_get_number(ld, obj, where, "power_draw_w", 0, 100000, 0, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		gpu->has |= SCENARIO_HAS_POWER;
		gpu->power_mw = (unsigned)(x * 1000 + 0.5);
	}
	f = loader_get_number(ld, obj, where, "power_limit_w", 0, 100000, 0, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		gpu->has |= SCENARIO_HAS_POWER_LIMIT;
		gpu->power_limit_mw = (unsigned)(x * 1000 + 0.5);
	}
	f = loader_get_number(ld, obj, where, "temperature_c", 0, 200, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		gpu->has |= SCENARIO_HAS_TEMPERATURE;
		gpu->temperature_c = (unsigned)x;
	}

	f = loader_get_string(ld, obj, where, "compute_capability", 8, &cc);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		if (sscanf(cc, "%d.%d%n", &gpu->cc_major, &gpu->cc_minor, &n) != 2 || cc[n] ||
		    gpu->cc_major < 1 || gpu->cc_major > 99 || gpu->cc_minor < 0 ||
		    gpu->cc_minor > 9)
			return loader_bad(
			    ld, where, "compute_capability",
			    "'%s' is not a compute capability (expected e.g. \"8.6\")", cc);
		gpu->has |= SCENARIO_HAS_CC;
	}
	return 0;
}

/* Fields with defaults: absent takes the default, null hides them. */
static int parse_properties(struct loader *ld, const json_t *obj, const char *where,
                            struct scenario_gpu *gpu)
{
	const char *mode;
	double x;
	size_t i;
	int f;

	f = loader_get_number(ld, obj, where, "speed", 0.001, 1000, 0, &x);
	if (f < 0)
		return -1;
	gpu->speed = f == FIELD_SET ? x : 1.0;

	f = loader_get_string(ld, obj, where, "compute_mode", 32, &mode);
	if (f < 0)
		return -1;
	if (f != FIELD_NULL)
		gpu->has |= SCENARIO_HAS_COMPUTE_MODE;
	gpu->compute_mode = SCENARIO_COMPUTE_DEFAULT;
	if (f == FIELD_SET) {
		for (i = 0; i < ARRAY_SIZE(compute_modes) && strcmp(mode, compute_modes[i]); i++)
			;
		if (i == ARRAY_SIZE(compute_modes))
			return loader_bad(
			    ld, where, "compute_mode",
			    "unknown compute mode '%s' (use default, exclusive_thread, "
			    "prohibited or exclusive_process)",
			    mode);
		gpu->compute_mode = (int)i;
	}

	f = loader_get_number(ld, obj, where, "mig_mode", 0, 1, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_NULL)
		gpu->has |= SCENARIO_HAS_MIG;
	gpu->mig_mode = f == FIELD_SET ? (unsigned)x : 0;

	/* CUDA still knows the cores and clock that NVML hides, so the rank keeps
	 * the defaults when a field is null. */
	gpu->cuda_cores = (unsigned)(CORES_PER_SPEED * gpu->speed + 0.5);
	f = loader_get_number(ld, obj, where, "cuda_cores", 1, 1000000, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_NULL)
		gpu->has |= SCENARIO_HAS_CORES;
	if (f == FIELD_SET)
		gpu->cuda_cores = (unsigned)x;

	gpu->max_sm_clock_mhz = DEFAULT_MAX_SM_CLOCK_MHZ;
	f = loader_get_number(ld, obj, where, "max_sm_clock_mhz", 1, 100000, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_NULL)
		gpu->has |= SCENARIO_HAS_CLOCK;
	if (f == FIELD_SET)
		gpu->max_sm_clock_mhz = (unsigned)x;
	gpu->cuda_rank = (uint64_t)gpu->cuda_cores * gpu->max_sm_clock_mhz;

	f = loader_get_number(ld, obj, where, "minor_number", 0, 1000000, 1, &x);
	if (f < 0)
		return -1;
	gpu->minor_number = f == FIELD_SET ? (unsigned)x : gpu->index;
	return 0;
}

/* One slice: a device of its own, with memory, name, UUID and processes. */
static int parse_mig(struct loader *ld, const json_t *obj, const char *where,
                     struct scenario_gpu *gpu, size_t k, struct scenario_gpu *mig)
{
	const char *s, *p;
	double x;
	int f;

	if (!json_is_object(obj))
		return loader_bad(ld, where, NULL, "expected an object, got %s",
		                  loader_type_name(obj));
	if (loader_check_keys(ld, obj, where, mig_keys) < 0)
		return -1;
	mig->is_mig = 1;
	mig->parent = gpu;
	mig->index = gpu->index;
	mig->speed = gpu->speed;
	mig->has = SCENARIO_HAS_MEMORY | (gpu->has & SCENARIO_HAS_CC);
	mig->cc_major = gpu->cc_major;
	mig->cc_minor = gpu->cc_minor;
	f = loader_get_string(ld, obj, where, "profile", sizeof mig->mig_profile, &s);
	if (f < 0)
		return -1;
	if (f != FIELD_SET)
		return loader_bad(ld, where, NULL,
		                  "missing required key 'profile' (e.g. \"1g.10gb\")");
	strcpy(mig->mig_profile, s);
	snprintf(mig->name, sizeof mig->name, "%.60s MIG %s", gpu->name, s);
	f = loader_get_number(ld, obj, where, "memory_total_mib", 1, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_SET)
		return loader_bad(ld, where, NULL, "missing required key 'memory_total_mib'");
	mig->mem_total_mib = (uint64_t)x;
	f = loader_get_number(ld, obj, where, "memory_used_mib", 0, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	mig->mem_used_mib = f == FIELD_SET ? (uint64_t)x : 0;
	f = loader_get_number(ld, obj, where, "gpu_instance_id", 0, 1000, 1, &x);
	if (f < 0)
		return -1;
	mig->gpu_instance_id = f == FIELD_SET ? (unsigned)x : (unsigned)k + 1;
	f = loader_get_number(ld, obj, where, "compute_instance_id", 0, 1000, 1, &x);
	if (f < 0)
		return -1;
	mig->compute_instance_id = f == FIELD_SET ? (unsigned)x : 0;
	f = loader_get_string(ld, obj, where, "uuid", 80, &s);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		for (p = s + 4; strncmp(s, "MIG-", 4) == 0 && *p; p++)
			if (!(*p == '-' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
				break;
		if (strncmp(s, "MIG-", 4) || *p || !s[4])
			return loader_bad(
			    ld, where, "uuid",
			    "'%s' is not a MIG UUID (expected \"MIG-\" followed by lowercase "
			    "hex digits and dashes)",
			    s);
		strcpy(mig->uuid, s);
	} else {
		uint64_t hi = mix64(0x6d696700u + 64 * (uint64_t)gpu->index + 2 * k);
		uint64_t lo = mix64(0x6d696700u + 64 * (uint64_t)gpu->index + 2 * k + 1);

		snprintf(mig->uuid, sizeof mig->uuid, "MIG-%08x-%04x-%04x-%04x-%012llx",
		         (unsigned)(hi >> 32), (unsigned)(hi >> 16) & 0xffff, (unsigned)hi & 0xffff,
		         (unsigned)(lo >> 48), (unsigned long long)(lo & 0xffffffffffffULL));
	}
	if (scenario_parse_processes(ld, obj, where, mig) < 0)
		return -1;
	if (mig->mem_used_mib + mig->procs_used_mib > mig->mem_total_mib)
		return loader_bad(ld, where, NULL,
		                  "memory in use exceeds memory_total_mib (%llu MiB)",
		                  (unsigned long long)mig->mem_total_mib);
	return 0;
}

/* "mig_devices": the GPU's slices; they need "mig_mode": 1.  The GPU's own
 * memory and processes include its slices', as NVML shows a MIG parent. */
static int parse_migs(struct loader *ld, const json_t *obj, const char *where,
                      struct scenario_gpu *gpu)
{
	const json_t *list = json_object_get(obj, "mig_devices");
	char mwhere[96];
	uint64_t slices_mib = 0;

	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return loader_bad(ld, where, "mig_devices", "expected an array, got %s",
		                  loader_type_name(list));
	if (json_array_size(list) && !gpu->mig_mode)
		return loader_bad(ld, where, "mig_devices", "MIG devices need \"mig_mode\": 1");
	if (json_array_size(list) > SCENARIO_MAX_MIGS)
		return loader_bad(ld, where, "mig_devices", "%zu MIG devices, a GPU has at most %d",
		                  json_array_size(list), SCENARIO_MAX_MIGS);
	gpu->mig_count = json_array_size(list);
	gpu->migs = calloc(gpu->mig_count ? gpu->mig_count : 1, sizeof *gpu->migs);
	if (!gpu->migs)
		return loader_bad(ld, where, "mig_devices", "out of memory");
	for (size_t k = 0; k < gpu->mig_count; k++) {
		struct scenario_gpu *m = &gpu->migs[k];

		snprintf(mwhere, sizeof mwhere, "%s.mig_devices[%zu]", where, k);
		if (parse_mig(ld, json_array_get(list, k), mwhere, gpu, k, m) < 0)
			return -1;
		for (size_t j = 0; j < k; j++)
			if (gpu->migs[j].gpu_instance_id == m->gpu_instance_id &&
			    gpu->migs[j].compute_instance_id == m->compute_instance_id)
				return loader_bad(ld, mwhere, "gpu_instance_id",
				                  "instance %u/%u is also mig_devices[%zu]",
				                  m->gpu_instance_id, m->compute_instance_id, j);
		slices_mib += m->mem_total_mib;
		gpu->mem_used_mib += m->mem_used_mib;
		gpu->procs_used_mib += m->procs_used_mib;
	}
	if ((gpu->has & SCENARIO_HAS_MEMORY) && slices_mib > gpu->mem_total_mib)
		return loader_bad(
		    ld, where, "mig_devices",
		    "the slices' memory (%llu MiB) exceeds memory_total_mib (%llu MiB)",
		    (unsigned long long)slices_mib, (unsigned long long)gpu->mem_total_mib);
	return 0;
}

int scenario_parse_gpu(struct loader *ld, const json_t *obj, size_t index, struct scenario_gpu *gpu)
{
	char where[32];
	const char *name;
	uint64_t in_use;
	int f;

	snprintf(where, sizeof where, "gpus[%zu]", index);
	gpu->index = (unsigned)index;
	if (!json_is_object(obj))
		return loader_bad(ld, where, NULL, "expected an object, got %s",
		                  loader_type_name(obj));
	if (loader_check_keys(ld, obj, where, gpu_keys) < 0)
		return -1;

	f = loader_get_string(ld, obj, where, "name", sizeof gpu->name, &name);
	if (f < 0)
		return -1;
	if (f == FIELD_NULL)
		return loader_bad(ld, where, "name", "expected a string, got null");
	if (f == FIELD_ABSENT)
		return loader_bad(ld, where, NULL, "missing required key 'name'");
	strcpy(gpu->name, name);
	gpu->pci_device_id = (unsigned)(0x1000 + fnv1a(name) % 0x1800) << 16 | 0x10de;
	gpu->pci_subsystem_id = (unsigned)(mix64(fnv1a(name)) & 0xffff) << 16 | 0x10de;

	if (parse_uuid(ld, obj, where, gpu) < 0 || parse_pci(ld, obj, where, gpu) < 0 ||
	    parse_measurements(ld, obj, where, gpu) < 0 ||
	    parse_properties(ld, obj, where, gpu) < 0 ||
	    loader_get_error_name(ld, obj, where, "fail", &gpu->fail) < 0 ||
	    scenario_parse_processes(ld, obj, where, gpu) < 0 ||
	    parse_migs(ld, obj, where, gpu) < 0)
		return -1;

	f = loader_get_string(ld, obj, where, "fail_at", 16, &name);
	if (f < 0)
		return -1;
	if (f == FIELD_SET && strcmp(name, "query") && strcmp(name, "handle"))
		return loader_bad(ld, where, "fail_at", "unknown place '%s' (use handle or query)",
		                  name);
	gpu->fail_at_handle = f == FIELD_SET && !strcmp(name, "handle");
	if (gpu->fail_at_handle && !gpu->fail)
		return loader_bad(ld, where, "fail_at", "needs a \"fail\" error to inject");

	in_use = gpu->mem_reserved_mib + gpu->mem_used_mib + gpu->procs_used_mib;
	if ((gpu->has & SCENARIO_HAS_MEMORY) && in_use > gpu->mem_total_mib)
		return loader_bad(
		    ld, where, NULL,
		    "memory in use (memory_reserved_mib + memory_used_mib + the processes' "
		    "used_mib = %llu MiB) "
		    "exceeds memory_total_mib (%llu MiB)",
		    (unsigned long long)in_use, (unsigned long long)gpu->mem_total_mib);
	return 0;
}

/* Two GPUs with one UUID or bus id would make handles ambiguous. */
int scenario_check_unique(struct loader *ld, const struct scenario *sc)
{
	char where[32];
	size_t i, j;

	for (i = 0; i < sc->gpu_count; i++) {
		snprintf(where, sizeof where, "gpus[%zu]", i);
		for (j = 0; j < i; j++) {
			if (!strcmp(sc->gpus[i].uuid, sc->gpus[j].uuid))
				return loader_bad(ld, where, "uuid",
				                  "'%s' is also the uuid of gpus[%zu]",
				                  sc->gpus[i].uuid, j);
			if (!strcmp(sc->gpus[i].pci_bus_id, sc->gpus[j].pci_bus_id))
				return loader_bad(ld, where, "pci_bus_id",
				                  "'%s' is also the bus id of gpus[%zu]",
				                  sc->gpus[i].pci_bus_id, j);
		}
	}
	return 0;
}

const char *scenario_compute_mode_name(int mode)
{
	return mode >= 0 && (size_t)mode < ARRAY_SIZE(compute_modes) ? compute_modes[mode] : "?";
}
