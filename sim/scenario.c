/*
 * scenario.c - read and validate the simulator's scenario file.
 *
 * Scenarios are written by hand, so every mistake is reported with the file
 * and the place: line:column for JSON syntax (jansson's json_error_t), the
 * key path for everything else ("gpus[2].memory_total_mib: expected a
 * number").  Unknown keys are errors, with a suggestion when a known key is a
 * typo away: a silently ignored "memory_totl_mib" would simulate a different
 * machine from the one its author meant.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <jansson.h>
#include "scenario.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define DEFAULT_DRIVER_VERSION "580.95.05"
#define DEFAULT_CUDA_DRIVER_VERSION 13000
#define DEFAULT_MAX_SM_CLOCK_MHZ 1500
#define CORES_PER_SPEED 2560.0 /* cuda_cores default: a speed-1.0 GPU has 2560 */
#define MAX_SCENARIO_BYTES (16u << 20)
#define MAX_MIB ((double)(1ull << 40))
#define MAX_PID 4194304 /* the kernel's largest pid_max */

static const struct {
	const char *name;
	int code;
} nvml_errors[] = {
    {"uninitialized", 1},     {"invalid_argument", 2},   {"not_supported", 3},
    {"no_permission", 4},     {"not_found", 6},          {"insufficient_size", 7},
    {"driver_not_loaded", 9}, {"library_not_found", 12}, {"function_not_found", 13},
    {"gpu_is_lost", 15},      {"operating_system", 17},  {"lib_rm_version_mismatch", 18},
    {"unknown", 999},
};

static const char *const function_names[FN_COUNT] = {
#define SCENARIO_FN_NAME(name) #name,
    SCENARIO_FUNCTIONS(SCENARIO_FN_NAME)
#undef SCENARIO_FN_NAME
};

static const char *const compute_modes[] = {
    [SCENARIO_COMPUTE_DEFAULT] = "default",
    [SCENARIO_COMPUTE_EXCLUSIVE_THREAD] = "exclusive_thread",
    [SCENARIO_COMPUTE_PROHIBITED] = "prohibited",
    [SCENARIO_COMPUTE_EXCLUSIVE_PROCESS] = "exclusive_process",
};

/* Every object may carry a "comment": JSON has no comments of its own. */
static const char *const top_keys[] = {"comment",
                                       "driver_version",
                                       "cuda_driver_version",
                                       "init_error",
                                       "missing_symbols",
                                       "gpus",
                                       "timeline",
                                       NULL};
static const char *const timeline_keys[] = {"comment", "repeat_s", "phases", NULL};
static const char *const phase_keys[] = {"comment", "at_s", "gpus", NULL};
static const char *const phase_gpu_keys[] = {"comment",         "gpu",       "utilization_gpu",
                                             "memory_used_mib", "processes", NULL};
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

/* How a key was found: the getters return one of these, or -1 on error. */
enum field { FIELD_ABSENT = 0, FIELD_NULL = 1, FIELD_SET = 2 };

struct loader {
	const char *file;
	char *err;
	size_t errlen;
};

/* "file: where.key: message"; returns -1 so that callers can return it. */
static int bad(struct loader *ld, const char *where, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(struct loader *ld, const char *where, const char *key, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!ld->err || !ld->errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (*where && key)
		snprintf(ld->err, ld->errlen, "%s: %s.%s: %s", ld->file, where, key, msg);
	else if (*where || key)
		snprintf(ld->err, ld->errlen, "%s: %s: %s", ld->file, *where ? where : key, msg);
	else
		snprintf(ld->err, ld->errlen, "%s: %s", ld->file, msg);
	return -1;
}

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
		return "true";
	case JSON_FALSE:
		return "false";
	default:
		return "null";
	}
}

/* Levenshtein distance of two short strings; large when either is long. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), prev[33], cur[33], i, j;

	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		prev[j] = j;
	for (i = 1; i <= la; i++) {
		cur[0] = i;
		for (j = 1; j <= lb; j++) {
			size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
			cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
		}
		memcpy(prev, cur, (lb + 1) * sizeof *cur);
	}
	return prev[lb];
}

static int check_keys(struct loader *ld, const json_t *obj, const char *where,
                      const char *const *known)
{
	void *it;

	for (it = json_object_iter((json_t *)obj); it;
	     it = json_object_iter_next((json_t *)obj, it)) {
		const char *key = json_object_iter_key(it), *best = NULL;
		size_t i, best_dist = SIZE_MAX;

		for (i = 0; known[i] && strcmp(known[i], key); i++)
			;
		if (known[i])
			continue;
		for (i = 0; known[i]; i++) {
			size_t d = edit_distance(key, known[i]);
			if (d < best_dist) {
				best_dist = d;
				best = known[i];
			}
		}
		if (best && (best_dist <= 2 || (best_dist <= 3 && strlen(key) >= 10)))
			return bad(ld, where, NULL, "unknown key '%s' (did you mean '%s'?)", key,
			           best);
		return bad(ld, where, NULL, "unknown key '%s'", key);
	}
	return 0;
}

/*
 * A number at obj[key] within [min, max]; whole: it must be an integer.
 * Returns enum field or -1.
 */
static int get_number(struct loader *ld, const json_t *obj, const char *where, const char *key,
                      double min, double max, int whole, double *out)
{
	const json_t *v = json_object_get(obj, key);
	double x;

	if (!v)
		return FIELD_ABSENT;
	if (json_is_null(v))
		return FIELD_NULL;
	if (!json_is_number(v))
		return bad(ld, where, key, "expected a number, got %s", type_name(v));
	x = json_number_value(v);
	if (!isfinite(x) || x < min || x > max) {
		if (max >= MAX_MIB)
			return bad(ld, where, key, "expected a number of at least %g, got %g", min,
			           x);
		return bad(ld, where, key, "expected a number from %g to %g, got %g", min, max, x);
	}
	if (whole && x != (double)(long long)x)
		return bad(ld, where, key, "expected a whole number, got %g", x);
	*out = x;
	return FIELD_SET;
}

/* A string at obj[key] shorter than size bytes; returns enum field or -1. */
static int get_string(struct loader *ld, const json_t *obj, const char *where, const char *key,
                      size_t size, const char **out)
{
	const json_t *v = json_object_get(obj, key);

	if (!v)
		return FIELD_ABSENT;
	if (json_is_null(v))
		return FIELD_NULL;
	if (!json_is_string(v))
		return bad(ld, where, key, "expected a string, got %s", type_name(v));
	*out = json_string_value(v);
	if (!**out)
		return bad(ld, where, key, "expected a non-empty string");
	if (strlen(*out) >= size)
		return bad(ld, where, key, "longer than %zu characters", size - 1);
	return FIELD_SET;
}

/* An NVML error name (or null/absent: 0); returns 0 or -1. */
static int get_error_name(struct loader *ld, const json_t *obj, const char *where, const char *key,
                          int *code)
{
	const char *name;
	int f = get_string(ld, obj, where, key, 64, &name);

	*code = 0;
	if (f < 0)
		return -1;
	if (f != FIELD_SET)
		return 0;
	*code = scenario_error_code(name);
	if (*code < 0)
		return bad(ld, where, key,
		           "unknown NVML error '%s' (use uninitialized, invalid_argument, "
		           "not_supported, no_permission, not_found, insufficient_size, "
		           "driver_not_loaded, library_not_found, function_not_found, gpu_is_lost, "
		           "operating_system, lib_rm_version_mismatch or unknown)",
		           name);
	return 0;
}

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
	int f = get_string(ld, obj, where, "uuid", 80, &s);

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
		return bad(ld, where, "uuid",
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
	int n = -1, f = get_string(ld, obj, where, "pci_bus_id", 32, &s);

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
			return bad(ld, where, "pci_bus_id",
			           "'%s' is not a PCI bus id (expected e.g. \"00000000:65:00.0\")",
			           s);
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
		return bad(ld, where, NULL, "expected an object, got %s", type_name(obj));
	if (check_keys(ld, obj, where, proc_keys) < 0)
		return -1;

	f = get_number(ld, obj, where, "pid", 1, MAX_PID, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_NULL)
		return bad(ld, where, "pid", "expected a number, got null");
	if (f == FIELD_ABSENT)
		return bad(ld, where, NULL, "missing required key 'pid'");
	proc->pid = (unsigned)x;

	/* Required so that "not available" (null) is always a choice, never a slip. */
	f = get_number(ld, obj, where, "used_mib", 0, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_ABSENT)
		return bad(ld, where, NULL,
		           "missing required key 'used_mib' (null if the driver does not report "
		           "it)");
	proc->has_mem = f == FIELD_SET;
	proc->used_mib = f == FIELD_SET ? (uint64_t)x : 0;

	f = get_number(ld, obj, where, "utilization", 0, 100, 1, &x);
	if (f < 0)
		return -1;
	proc->utilization = f == FIELD_SET ? (unsigned)x : 0;

	f = get_string(ld, obj, where, "type", 16, &type);
	if (f < 0)
		return -1;
	if (f != FIELD_SET || !strcmp(type, "compute"))
		proc->kind = SCENARIO_PROC_COMPUTE;
	else if (!strcmp(type, "graphics"))
		proc->kind = SCENARIO_PROC_GRAPHICS;
	else if (!strcmp(type, "mps"))
		proc->kind = SCENARIO_PROC_MPS;
	else if (!strcmp(type, "both"))
		proc->kind = SCENARIO_PROC_COMPUTE | SCENARIO_PROC_GRAPHICS;
	else
		return bad(ld, where, "type",
		           "unknown type '%s' (use compute, graphics, both or mps)", type);
	return 0;
}

static int parse_processes(struct loader *ld, const json_t *obj, const char *where,
                           struct scenario_gpu *gpu)
{
	const json_t *list = json_object_get(obj, "processes");
	char pwhere[96];
	size_t j, k;

	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return bad(ld, where, "processes", "expected an array, got %s", type_name(list));
	gpu->proc_count = json_array_size(list);
	gpu->procs = calloc(gpu->proc_count ? gpu->proc_count : 1, sizeof *gpu->procs);
	if (!gpu->procs)
		return bad(ld, where, "processes", "out of memory");
	for (j = 0; j < gpu->proc_count; j++) {
		struct scenario_proc *proc = &gpu->procs[j];

		snprintf(pwhere, sizeof pwhere, "%s.processes[%zu]", where, j);
		if (parse_proc(ld, json_array_get(list, j), pwhere, proc) < 0)
			return -1;
		for (k = 0; k < j; k++)
			if (gpu->procs[k].pid == proc->pid)
				return bad(ld, pwhere, "pid",
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

	f = get_number(ld, obj, where, "memory_total_mib", 0, MAX_MIB, 1, &total);
	if (f < 0)
		return -1;
	if (f == FIELD_ABSENT)
		return bad(ld, where, NULL,
		           "missing required key 'memory_total_mib' (null if the GPU does not "
		           "report memory)");
	if (f == FIELD_SET)
		gpu->has |= SCENARIO_HAS_MEMORY;
	f = get_number(ld, obj, where, "memory_used_mib", 0, MAX_MIB, 1, &used);
	if (f < 0)
		return -1;
	if (f == FIELD_NULL)
		gpu->has &= ~SCENARIO_HAS_MEMORY;
	gpu->mem_total_mib = (uint64_t)total;
	gpu->mem_used_mib = (uint64_t)used;
	f = get_number(ld, obj, where, "memory_reserved_mib", 0, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	gpu->mem_reserved_mib = f == FIELD_SET ? (uint64_t)x : 0;

	for (size_t i = 0; i < READING_COUNT; i++) {
		f = get_number(ld, obj, where, readings[i].key, readings[i].min, readings[i].max,
		               readings[i].scale == 1, &x);
		if (f < 0)
			return -1;
		if (f == FIELD_SET) {
			gpu->reading[i] = (unsigned)(x * readings[i].scale + 0.5);
			gpu->reading_has |= 1u << i;
		}
	}

	f = get_number(ld, obj, where, "utilization_gpu", 0, 100, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		gpu->has |= SCENARIO_HAS_UTIL;
		gpu->util_gpu_pct = (unsigned)x;
	}
	f = get_number(ld, obj, where, "memory_utilization", 0, 100, 1, &x);
	if (f < 0)
		return -1;
	gpu->util_mem_pct = f == FIELD_SET ? (unsigned)x : 0;

	f = get_number(ld, obj, where, "power_draw_w", 0, 100000, 0, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		gpu->has |= SCENARIO_HAS_POWER;
		gpu->power_mw = (unsigned)(x * 1000 + 0.5);
	}
	f = get_number(ld, obj, where, "power_limit_w", 0, 100000, 0, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		gpu->has |= SCENARIO_HAS_POWER_LIMIT;
		gpu->power_limit_mw = (unsigned)(x * 1000 + 0.5);
	}
	f = get_number(ld, obj, where, "temperature_c", 0, 200, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		gpu->has |= SCENARIO_HAS_TEMPERATURE;
		gpu->temperature_c = (unsigned)x;
	}

	f = get_string(ld, obj, where, "compute_capability", 8, &cc);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		if (sscanf(cc, "%d.%d%n", &gpu->cc_major, &gpu->cc_minor, &n) != 2 || cc[n] ||
		    gpu->cc_major < 1 || gpu->cc_major > 99 || gpu->cc_minor < 0 ||
		    gpu->cc_minor > 9)
			return bad(ld, where, "compute_capability",
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

	f = get_number(ld, obj, where, "speed", 0.001, 1000, 0, &x);
	if (f < 0)
		return -1;
	gpu->speed = f == FIELD_SET ? x : 1.0;

	f = get_string(ld, obj, where, "compute_mode", 32, &mode);
	if (f < 0)
		return -1;
	if (f != FIELD_NULL)
		gpu->has |= SCENARIO_HAS_COMPUTE_MODE;
	gpu->compute_mode = SCENARIO_COMPUTE_DEFAULT;
	if (f == FIELD_SET) {
		for (i = 0; i < ARRAY_SIZE(compute_modes) && strcmp(mode, compute_modes[i]); i++)
			;
		if (i == ARRAY_SIZE(compute_modes))
			return bad(ld, where, "compute_mode",
			           "unknown compute mode '%s' (use default, exclusive_thread, "
			           "prohibited or exclusive_process)",
			           mode);
		gpu->compute_mode = (int)i;
	}

	f = get_number(ld, obj, where, "mig_mode", 0, 1, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_NULL)
		gpu->has |= SCENARIO_HAS_MIG;
	gpu->mig_mode = f == FIELD_SET ? (unsigned)x : 0;

	/* CUDA still knows the cores and clock that NVML hides, so the rank keeps
	 * the defaults when a field is null. */
	gpu->cuda_cores = (unsigned)(CORES_PER_SPEED * gpu->speed + 0.5);
	f = get_number(ld, obj, where, "cuda_cores", 1, 1000000, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_NULL)
		gpu->has |= SCENARIO_HAS_CORES;
	if (f == FIELD_SET)
		gpu->cuda_cores = (unsigned)x;

	gpu->max_sm_clock_mhz = DEFAULT_MAX_SM_CLOCK_MHZ;
	f = get_number(ld, obj, where, "max_sm_clock_mhz", 1, 100000, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_NULL)
		gpu->has |= SCENARIO_HAS_CLOCK;
	if (f == FIELD_SET)
		gpu->max_sm_clock_mhz = (unsigned)x;
	gpu->cuda_rank = (uint64_t)gpu->cuda_cores * gpu->max_sm_clock_mhz;

	f = get_number(ld, obj, where, "minor_number", 0, 1000000, 1, &x);
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
		return bad(ld, where, NULL, "expected an object, got %s", type_name(obj));
	if (check_keys(ld, obj, where, mig_keys) < 0)
		return -1;
	mig->is_mig = 1;
	mig->parent = gpu;
	mig->index = gpu->index;
	mig->speed = gpu->speed;
	mig->has = SCENARIO_HAS_MEMORY | (gpu->has & SCENARIO_HAS_CC);
	mig->cc_major = gpu->cc_major;
	mig->cc_minor = gpu->cc_minor;
	f = get_string(ld, obj, where, "profile", sizeof mig->mig_profile, &s);
	if (f < 0)
		return -1;
	if (f != FIELD_SET)
		return bad(ld, where, NULL, "missing required key 'profile' (e.g. \"1g.10gb\")");
	strcpy(mig->mig_profile, s);
	snprintf(mig->name, sizeof mig->name, "%.60s MIG %s", gpu->name, s);
	f = get_number(ld, obj, where, "memory_total_mib", 1, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_SET)
		return bad(ld, where, NULL, "missing required key 'memory_total_mib'");
	mig->mem_total_mib = (uint64_t)x;
	f = get_number(ld, obj, where, "memory_used_mib", 0, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	mig->mem_used_mib = f == FIELD_SET ? (uint64_t)x : 0;
	f = get_number(ld, obj, where, "gpu_instance_id", 0, 1000, 1, &x);
	if (f < 0)
		return -1;
	mig->gpu_instance_id = f == FIELD_SET ? (unsigned)x : (unsigned)k + 1;
	f = get_number(ld, obj, where, "compute_instance_id", 0, 1000, 1, &x);
	if (f < 0)
		return -1;
	mig->compute_instance_id = f == FIELD_SET ? (unsigned)x : 0;
	f = get_string(ld, obj, where, "uuid", 80, &s);
	if (f < 0)
		return -1;
	if (f == FIELD_SET) {
		for (p = s + 4; strncmp(s, "MIG-", 4) == 0 && *p; p++)
			if (!(*p == '-' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
				break;
		if (strncmp(s, "MIG-", 4) || *p || !s[4])
			return bad(
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
	if (parse_processes(ld, obj, where, mig) < 0)
		return -1;
	if (mig->mem_used_mib + mig->procs_used_mib > mig->mem_total_mib)
		return bad(ld, where, NULL, "memory in use exceeds memory_total_mib (%llu MiB)",
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
		return bad(ld, where, "mig_devices", "expected an array, got %s", type_name(list));
	if (json_array_size(list) && !gpu->mig_mode)
		return bad(ld, where, "mig_devices", "MIG devices need \"mig_mode\": 1");
	if (json_array_size(list) > SCENARIO_MAX_MIGS)
		return bad(ld, where, "mig_devices", "%zu MIG devices, a GPU has at most %d",
		           json_array_size(list), SCENARIO_MAX_MIGS);
	gpu->mig_count = json_array_size(list);
	gpu->migs = calloc(gpu->mig_count ? gpu->mig_count : 1, sizeof *gpu->migs);
	if (!gpu->migs)
		return bad(ld, where, "mig_devices", "out of memory");
	for (size_t k = 0; k < gpu->mig_count; k++) {
		struct scenario_gpu *m = &gpu->migs[k];

		snprintf(mwhere, sizeof mwhere, "%s.mig_devices[%zu]", where, k);
		if (parse_mig(ld, json_array_get(list, k), mwhere, gpu, k, m) < 0)
			return -1;
		for (size_t j = 0; j < k; j++)
			if (gpu->migs[j].gpu_instance_id == m->gpu_instance_id &&
			    gpu->migs[j].compute_instance_id == m->compute_instance_id)
				return bad(ld, mwhere, "gpu_instance_id",
				           "instance %u/%u is also mig_devices[%zu]",
				           m->gpu_instance_id, m->compute_instance_id, j);
		slices_mib += m->mem_total_mib;
		gpu->mem_used_mib += m->mem_used_mib;
		gpu->procs_used_mib += m->procs_used_mib;
	}
	if ((gpu->has & SCENARIO_HAS_MEMORY) && slices_mib > gpu->mem_total_mib)
		return bad(ld, where, "mig_devices",
		           "the slices' memory (%llu MiB) exceeds memory_total_mib (%llu MiB)",
		           (unsigned long long)slices_mib, (unsigned long long)gpu->mem_total_mib);
	return 0;
}

static int parse_gpu(struct loader *ld, const json_t *obj, size_t index, struct scenario_gpu *gpu)
{
	char where[32];
	const char *name;
	uint64_t in_use;
	int f;

	snprintf(where, sizeof where, "gpus[%zu]", index);
	gpu->index = (unsigned)index;
	if (!json_is_object(obj))
		return bad(ld, where, NULL, "expected an object, got %s", type_name(obj));
	if (check_keys(ld, obj, where, gpu_keys) < 0)
		return -1;

	f = get_string(ld, obj, where, "name", sizeof gpu->name, &name);
	if (f < 0)
		return -1;
	if (f == FIELD_NULL)
		return bad(ld, where, "name", "expected a string, got null");
	if (f == FIELD_ABSENT)
		return bad(ld, where, NULL, "missing required key 'name'");
	strcpy(gpu->name, name);
	gpu->pci_device_id = (unsigned)(0x1000 + fnv1a(name) % 0x1800) << 16 | 0x10de;
	gpu->pci_subsystem_id = (unsigned)(mix64(fnv1a(name)) & 0xffff) << 16 | 0x10de;

	if (parse_uuid(ld, obj, where, gpu) < 0 || parse_pci(ld, obj, where, gpu) < 0 ||
	    parse_measurements(ld, obj, where, gpu) < 0 ||
	    parse_properties(ld, obj, where, gpu) < 0 ||
	    get_error_name(ld, obj, where, "fail", &gpu->fail) < 0 ||
	    parse_processes(ld, obj, where, gpu) < 0 || parse_migs(ld, obj, where, gpu) < 0)
		return -1;

	f = get_string(ld, obj, where, "fail_at", 16, &name);
	if (f < 0)
		return -1;
	if (f == FIELD_SET && strcmp(name, "query") && strcmp(name, "handle"))
		return bad(ld, where, "fail_at", "unknown place '%s' (use handle or query)", name);
	gpu->fail_at_handle = f == FIELD_SET && !strcmp(name, "handle");
	if (gpu->fail_at_handle && !gpu->fail)
		return bad(ld, where, "fail_at", "needs a \"fail\" error to inject");

	in_use = gpu->mem_reserved_mib + gpu->mem_used_mib + gpu->procs_used_mib;
	if ((gpu->has & SCENARIO_HAS_MEMORY) && in_use > gpu->mem_total_mib)
		return bad(ld, where, NULL,
		           "memory in use (memory_reserved_mib + memory_used_mib + the processes' "
		           "used_mib = %llu MiB) "
		           "exceeds memory_total_mib (%llu MiB)",
		           (unsigned long long)in_use, (unsigned long long)gpu->mem_total_mib);
	return 0;
}

static int parse_missing(struct loader *ld, const json_t *root, struct scenario *sc)
{
	const json_t *list = json_object_get(root, "missing_symbols");
	char where[48];
	size_t i, fn;

	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return bad(ld, "", "missing_symbols", "expected an array, got %s", type_name(list));
	for (i = 0; i < json_array_size(list); i++) {
		const json_t *v = json_array_get(list, i);

		snprintf(where, sizeof where, "missing_symbols[%zu]", i);
		if (!json_is_string(v))
			return bad(ld, where, NULL, "expected a string, got %s", type_name(v));
		for (fn = 0; fn < FN_COUNT && strcmp(function_names[fn], json_string_value(v));
		     fn++)
			;
		if (fn == FN_COUNT)
			return bad(ld, where, NULL,
			           "'%s' is not an NVML function the simulator implements",
			           json_string_value(v));
		sc->missing[fn] = 1;
	}
	return 0;
}

/* Two GPUs with one UUID or bus id would make handles ambiguous. */
static int check_unique(struct loader *ld, const struct scenario *sc)
{
	char where[32];
	size_t i, j;

	for (i = 0; i < sc->gpu_count; i++) {
		snprintf(where, sizeof where, "gpus[%zu]", i);
		for (j = 0; j < i; j++) {
			if (!strcmp(sc->gpus[i].uuid, sc->gpus[j].uuid))
				return bad(ld, where, "uuid", "'%s' is also the uuid of gpus[%zu]",
				           sc->gpus[i].uuid, j);
			if (!strcmp(sc->gpus[i].pci_bus_id, sc->gpus[j].pci_bus_id))
				return bad(ld, where, "pci_bus_id",
				           "'%s' is also the bus id of gpus[%zu]",
				           sc->gpus[i].pci_bus_id, j);
		}
	}
	return 0;
}

/* ---- timeline ---------------------------------------------------------- */

static void state_release(struct scenario_gpu_state *st)
{
	free(st->procs);
	st->procs = NULL;
	st->proc_count = 0;
}

/* A deep copy, so that every state owns its process array. */
static int state_copy(struct scenario_gpu_state *to, const struct scenario_gpu_state *from)
{
	*to = *from;
	to->procs = calloc(from->proc_count ? from->proc_count : 1, sizeof *to->procs);
	if (!to->procs)
		return -1;
	if (from->proc_count)
		memcpy(to->procs, from->procs, from->proc_count * sizeof *to->procs);
	return 0;
}

static void states_free(struct scenario_gpu_state *states, size_t n)
{
	for (size_t i = 0; states && i < n; i++)
		state_release(&states[i]);
	free(states);
}

/* One entry of a phase's "gpus": what it changes on that GPU. */
static int parse_phase_gpu(struct loader *ld, const json_t *obj, const char *where,
                           struct scenario *sc, struct scenario_gpu_state *states,
                           unsigned char *seen)
{
	struct scenario_gpu tmp;
	struct scenario_gpu_state *st;
	const struct scenario_gpu *gpu;
	double x;
	int f;

	if (!json_is_object(obj))
		return bad(ld, where, NULL, "expected an object, got %s", type_name(obj));
	if (check_keys(ld, obj, where, phase_gpu_keys) < 0)
		return -1;
	f = get_number(ld, obj, where, "gpu", 0, SCENARIO_MAX_GPUS - 1, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_SET)
		return bad(ld, where, NULL, "missing required key 'gpu' (its index in \"gpus\")");
	if ((size_t)x >= sc->gpu_count)
		return bad(ld, where, "gpu", "%u: the scenario has %zu GPUs", (unsigned)x,
		           sc->gpu_count);
	if (seen[(size_t)x]++)
		return bad(ld, where, "gpu", "GPU %u is already changed in this phase",
		           (unsigned)x);
	gpu = &sc->gpus[(size_t)x];
	st = &states[(size_t)x];
	if (gpu->mig_count)
		return bad(ld, where, "gpu",
		           "GPU %u has MIG slices, which a timeline cannot change", gpu->index);
	f = get_number(ld, obj, where, "utilization_gpu", 0, 100, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET)
		st->util_gpu_pct = (unsigned)x;
	f = get_number(ld, obj, where, "memory_used_mib", 0, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET)
		st->mem_used_mib = (uint64_t)x;
	if (json_object_get(obj, "processes")) {
		memset(&tmp, 0, sizeof tmp);
		if (parse_processes(ld, obj, where, &tmp) < 0) {
			free(tmp.procs);
			return -1;
		}
		state_release(st);
		st->procs = tmp.procs ? tmp.procs : calloc(1, sizeof *st->procs);
		if (!st->procs)
			return bad(ld, where, "processes", "out of memory");
		st->proc_count = tmp.proc_count;
		st->procs_used_mib = tmp.procs_used_mib;
		st->procs_util_pct = tmp.procs_util_pct;
	}
	if ((gpu->has & SCENARIO_HAS_MEMORY) &&
	    gpu->mem_reserved_mib + st->mem_used_mib + st->procs_used_mib > gpu->mem_total_mib)
		return bad(ld, where, NULL,
		           "memory in use (%llu MiB with the processes') exceeds GPU %u's "
		           "memory_total_mib (%llu MiB)",
		           (unsigned long long)(gpu->mem_reserved_mib + st->mem_used_mib +
		                                st->procs_used_mib),
		           gpu->index, (unsigned long long)gpu->mem_total_mib);
	return 0;
}

/*
 * "timeline": { "repeat_s": 60, "phases": [ { "at_s": 20, "gpus": [ { "gpu": 1,
 * "utilization_gpu": 0, "processes": [...] } ] } ] }.  Each phase starts from
 * the one before it (the first from "gpus") and changes what it names; a
 * GPU's "processes" replace its list.
 */
static int parse_timeline(struct loader *ld, const json_t *root, struct scenario *sc)
{
	const json_t *tl = json_object_get(root, "timeline"), *phases, *list;
	unsigned char seen[SCENARIO_MAX_GPUS];
	char where[64], gwhere[96];
	struct stat st;
	double x;
	int f;

	sc->applied = -1;
	if (!tl || json_is_null(tl))
		return 0;
	if (!json_is_object(tl))
		return bad(ld, "", "timeline", "expected an object, got %s", type_name(tl));
	if (check_keys(ld, tl, "timeline", timeline_keys) < 0)
		return -1;
	f = get_number(ld, tl, "timeline", "repeat_s", 0, 1e7, 0, &x);
	if (f < 0)
		return -1;
	sc->repeat_s = f == FIELD_SET ? x : 0;
	phases = json_object_get(tl, "phases");
	if (!phases || !json_is_array(phases) || !json_array_size(phases))
		return bad(ld, "timeline", "phases", "expected a non-empty array of phases");
	if (stat(sc->realpath, &st) < 0)
		return bad(ld, "", NULL, "cannot stat: %s", strerror(errno));
	sc->epoch_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;

	sc->base = calloc(sc->gpu_count ? sc->gpu_count : 1, sizeof *sc->base);
	sc->phases = calloc(json_array_size(phases), sizeof *sc->phases);
	if (!sc->base || !sc->phases)
		return bad(ld, "", "timeline", "out of memory");
	/* base[] takes over the GPUs' own process arrays: from now on every
	 * array gpus[] points to belongs to a state. */
	for (size_t i = 0; i < sc->gpu_count; i++) {
		const struct scenario_gpu *g = &sc->gpus[i];
		struct scenario_gpu_state from = {g->util_gpu_pct,   g->mem_used_mib,
		                                  g->proc_count,     g->procs,
		                                  g->procs_used_mib, g->procs_util_pct};

		sc->base[i] = from;
	}
	for (size_t p = 0; p < json_array_size(phases); p++) {
		const json_t *ph = json_array_get(phases, p);
		struct scenario_phase *phase = &sc->phases[p];
		const struct scenario_gpu_state *prev = p ? sc->phases[p - 1].gpus : sc->base;

		snprintf(where, sizeof where, "timeline.phases[%zu]", p);
		if (!json_is_object(ph))
			return bad(ld, where, NULL, "expected an object, got %s", type_name(ph));
		if (check_keys(ld, ph, where, phase_keys) < 0)
			return -1;
		f = get_number(ld, ph, where, "at_s", 0, 1e7, 0, &x);
		if (f < 0)
			return -1;
		if (f != FIELD_SET)
			return bad(ld, where, NULL, "missing required key 'at_s'");
		if (p && x <= sc->phases[p - 1].at_s)
			return bad(ld, where, "at_s", "%g is not after the phase before (%g)", x,
			           sc->phases[p - 1].at_s);
		if (sc->repeat_s > 0 && x >= sc->repeat_s)
			return bad(ld, where, "at_s", "%g is not before repeat_s (%g)", x,
			           sc->repeat_s);
		phase->at_s = x;
		phase->gpus = calloc(sc->gpu_count ? sc->gpu_count : 1, sizeof *phase->gpus);
		if (!phase->gpus)
			return bad(ld, where, NULL, "out of memory");
		sc->phase_count = p + 1;
		for (size_t i = 0; i < sc->gpu_count; i++)
			if (state_copy(&phase->gpus[i], &prev[i]) < 0)
				return bad(ld, where, NULL, "out of memory");
		list = json_object_get(ph, "gpus");
		if (!list || !json_is_array(list))
			return bad(ld, where, "gpus",
			           "expected an array of the GPUs the phase changes");
		memset(seen, 0, sizeof seen);
		for (size_t k = 0; k < json_array_size(list); k++) {
			snprintf(gwhere, sizeof gwhere, "%s.gpus[%zu]", where, k);
			if (parse_phase_gpu(ld, json_array_get(list, k), gwhere, sc, phase->gpus,
			                    seen) < 0)
				return -1;
		}
	}
	return 0;
}

long scenario_phase_at(const struct scenario *sc, int64_t now_ms)
{
	int64_t t_ms = now_ms - sc->epoch_ms, repeat_ms = (int64_t)(sc->repeat_s * 1000.0);
	double t;
	long k = -1;

	if (!sc->phase_count)
		return -1;
	if (repeat_ms > 0 && t_ms >= 0)
		t_ms %= repeat_ms; /* integers: the simulator does without libm */
	t = (double)t_ms / 1000.0;
	for (size_t p = 0; p < sc->phase_count && sc->phases[p].at_s <= t; p++)
		k = (long)p;
	return k;
}

static void apply_state(struct scenario_gpu *g, const struct scenario_gpu_state *st)
{
	g->util_gpu_pct = st->util_gpu_pct;
	g->mem_used_mib = st->mem_used_mib;
	g->proc_count = st->proc_count;
	g->procs = st->procs;
	g->procs_used_mib = st->procs_used_mib;
	g->procs_util_pct = st->procs_util_pct;
}

long scenario_apply_time(struct scenario *sc, int64_t now_ms)
{
	long k = scenario_phase_at(sc, now_ms);

	if (!sc->base || k == sc->applied)
		return k;
	for (size_t i = 0; i < sc->gpu_count; i++)
		apply_state(&sc->gpus[i], k < 0 ? &sc->base[i] : &sc->phases[k].gpus[i]);
	sc->applied = k;
	return k;
}

static int parse_top(struct loader *ld, const json_t *root, struct scenario *sc)
{
	const json_t *gpus;
	const char *version;
	double x;
	size_t i;
	int f;

	if (!json_is_object(root))
		return bad(ld, "", NULL, "expected a JSON object at the top level, got %s",
		           type_name(root));
	if (check_keys(ld, root, "", top_keys) < 0)
		return -1;

	f = get_string(ld, root, "", "driver_version", sizeof sc->driver_version, &version);
	if (f < 0)
		return -1;
	if (f == FIELD_SET && (version[0] < '1' || version[0] > '9' || atoi(version) > 9999))
		return bad(ld, "", "driver_version",
		           "'%s' is not a driver version (expected e.g. \"580.95.05\"; its first "
		           "number picks the driver branch the simulator exports)",
		           version);
	sc->has_driver_version = f != FIELD_NULL;
	snprintf(sc->driver_version, sizeof sc->driver_version, "%s",
	         f == FIELD_SET ? version : DEFAULT_DRIVER_VERSION);

	f = get_number(ld, root, "", "cuda_driver_version", 1000, 99990, 1, &x);
	if (f < 0)
		return -1;
	sc->has_cuda_driver_version = f != FIELD_NULL;
	sc->cuda_driver_version = f == FIELD_SET ? (int)x : DEFAULT_CUDA_DRIVER_VERSION;

	if (get_error_name(ld, root, "", "init_error", &sc->init_error) < 0 ||
	    parse_missing(ld, root, sc) < 0)
		return -1;

	gpus = json_object_get(root, "gpus");
	if (!gpus)
		return bad(ld, "", NULL,
		           "missing required key 'gpus' ([] for a machine without GPUs)");
	if (!json_is_array(gpus))
		return bad(ld, "", "gpus", "expected an array, got %s", type_name(gpus));
	if (json_array_size(gpus) > SCENARIO_MAX_GPUS)
		return bad(ld, "", "gpus", "%zu GPUs, the simulator supports at most %d",
		           json_array_size(gpus), SCENARIO_MAX_GPUS);
	sc->gpu_count = json_array_size(gpus);
	sc->gpus = calloc(sc->gpu_count ? sc->gpu_count : 1, sizeof *sc->gpus);
	if (!sc->gpus)
		return bad(ld, "", "gpus", "out of memory");
	for (i = 0; i < sc->gpu_count; i++)
		if (parse_gpu(ld, json_array_get(gpus, i), i, &sc->gpus[i]) < 0)
			return -1;
	if (check_unique(ld, sc) < 0)
		return -1;
	return parse_timeline(ld, root, sc);
}

/* The whole file, NUL-terminated; errors name the file and errno's text. */
static char *read_file(struct loader *ld, const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *buf = NULL, *grown;
	size_t cap = 0, n;

	*len = 0;
	if (!fp) {
		bad(ld, "", NULL, "cannot open: %s", strerror(errno));
		goto failed;
	}
	for (;;) {
		if (*len + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 8192;
			if (cap > MAX_SCENARIO_BYTES) {
				bad(ld, "", NULL, "larger than %u MiB, not a scenario",
				    MAX_SCENARIO_BYTES >> 20);
				goto failed;
			}
			grown = realloc(buf, cap);
			if (!grown) {
				bad(ld, "", NULL, "out of memory");
				goto failed;
			}
			buf = grown;
		}
		n = fread(buf + *len, 1, cap - *len - 1, fp);
		*len += n;
		if (n == 0)
			break;
	}
	if (ferror(fp)) {
		bad(ld, "", NULL, "cannot read: %s", strerror(errno));
		goto failed;
	}
	buf[*len] = '\0';
	fclose(fp);
	return buf;

failed:
	if (fp)
		fclose(fp);
	free(buf);
	return NULL;
}

int scenario_load(const char *path, struct scenario **out, char *err, size_t errlen)
{
	struct loader ld = {path, err, errlen};
	struct scenario *sc = NULL;
	json_t *root = NULL;
	json_error_t jerr;
	char *text = NULL;
	size_t len;
	int ret = -1;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	text = read_file(&ld, path, &len);
	if (!text)
		goto done;
	/* Duplicate keys are rejected: the second would silently win. */
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (err && errlen)
			snprintf(err, errlen, "%s:%d:%d: %s", path, jerr.line, jerr.column,
			         jerr.text);
		goto done;
	}
	sc = calloc(1, sizeof *sc);
	if (!sc || !(sc->path = strdup(path))) {
		bad(&ld, "", NULL, "out of memory");
		goto done;
	}
	sc->realpath = realpath(path, NULL);
	if (!sc->realpath) {
		bad(&ld, "", NULL, "cannot resolve the path: %s", strerror(errno));
		goto done;
	}
	if (parse_top(&ld, root, sc) < 0)
		goto done;
	*out = sc;
	sc = NULL;
	ret = 0;

done:
	scenario_free(sc);
	json_decref(root);
	free(text);
	return ret;
}

void scenario_free(struct scenario *sc)
{
	size_t i;

	if (!sc)
		return;
	if (sc->base) {
		/* the states own every process array gpus[] may point to */
		for (i = 0; i < sc->gpu_count && sc->gpus; i++)
			sc->gpus[i].procs = NULL;
		for (size_t p = 0; p < sc->phase_count; p++)
			states_free(sc->phases[p].gpus, sc->gpu_count);
		free(sc->phases);
		states_free(sc->base, sc->gpu_count);
	}
	for (i = 0; i < sc->gpu_count && sc->gpus; i++) {
		for (size_t k = 0; k < sc->gpus[i].mig_count; k++)
			free(sc->gpus[i].migs[k].procs);
		free(sc->gpus[i].migs);
		free(sc->gpus[i].procs);
	}
	free(sc->gpus);
	free(sc->path);
	free(sc->realpath);
	free(sc);
}

int scenario_error_code(const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvml_errors); i++)
		if (!strcmp(nvml_errors[i].name, name))
			return nvml_errors[i].code;
	return -1;
}

const char *scenario_error_name(int code)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvml_errors); i++)
		if (nvml_errors[i].code == code)
			return nvml_errors[i].name;
	return NULL;
}

const char *scenario_compute_mode_name(int mode)
{
	return mode >= 0 && (size_t)mode < ARRAY_SIZE(compute_modes) ? compute_modes[mode] : "?";
}

const char *scenario_function_name(enum scenario_fn fn)
{
	return (unsigned)fn < FN_COUNT ? function_names[fn] : "?";
}

long scenario_find_uuid(const struct scenario *sc, const char *uuid)
{
	size_t i;

	for (i = 0; i < sc->gpu_count; i++)
		if (!strcmp(sc->gpus[i].uuid, uuid))
			return (long)i;
	return -1;
}

struct scenario_gpu *scenario_find_mig(const struct scenario *sc, const char *uuid)
{
	for (size_t i = 0; i < sc->gpu_count; i++)
		for (size_t k = 0; k < sc->gpus[i].mig_count; k++)
			if (!strcmp(sc->gpus[i].migs[k].uuid, uuid))
				return &sc->gpus[i].migs[k];
	return NULL;
}

int scenario_cuda_sees(const struct scenario_gpu *gpu)
{
	return gpu->fail != scenario_error_code("gpu_is_lost") &&
	       gpu->fail != scenario_error_code("no_permission");
}

size_t scenario_cuda_order(const struct scenario *sc, int pci_order, size_t *order)
{
	size_t i, j, n = 0;

	for (i = 0; i < sc->gpu_count; i++) {
		if (!scenario_cuda_sees(&sc->gpus[i]))
			continue;
		/* Insertion sort, stable: equal ranks keep NVML order. */
		for (j = n; j > 0 && !pci_order &&
		            sc->gpus[order[j - 1]].cuda_rank < sc->gpus[i].cuda_rank;
		     j--)
			order[j] = order[j - 1];
		order[j] = i;
		n++;
	}
	return n;
}

/* Position of the GPU one CUDA_VISIBLE_DEVICES entry names, or -1. */
static long resolve_entry(const struct scenario *sc, const size_t *order, size_t n,
                          const char *entry)
{
	size_t i, matches = 0;
	long found = -1;
	char *end;
	unsigned long idx;

	if (*entry >= '0' && *entry <= '9') {
		errno = 0;
		idx = strtoul(entry, &end, 10);
		return *end || errno || idx >= n ? -1 : (long)order[idx];
	}
	if (strncmp(entry, "GPU-", 4))
		return -1;
	for (i = 0; i < n; i++) {
		const char *uuid = sc->gpus[order[i]].uuid;

		if (!strcmp(uuid, entry))
			return (long)order[i];
		if (!strncmp(uuid, entry, strlen(entry))) {
			matches++;
			found = (long)order[i];
		}
	}
	return matches == 1 ? found : -1;
}

size_t scenario_cuda_visible(const struct scenario *sc, const char *value, int pci_order,
                             size_t *out)
{
	size_t order[SCENARIO_MAX_GPUS], n, count = 0, len, i;
	const char *p = value, *comma;
	char entry[SCENARIO_NAME_SIZE];
	long pos;

	n = scenario_cuda_order(sc, pci_order, order);
	if (!value) {
		memcpy(out, order, n * sizeof *order);
		return n;
	}
	while (count < n) {
		comma = strchr(p, ',');
		len = comma ? (size_t)(comma - p) : strlen(p);
		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (!len || len >= sizeof entry)
			break;
		memcpy(entry, p, len);
		entry[len] = '\0';
		pos = resolve_entry(sc, order, n, entry);
		for (i = 0; pos >= 0 && i < count; i++)
			if (out[i] == (size_t)pos)
				pos = -1;
		if (pos < 0)
			break;
		out[count++] = (size_t)pos;
		if (!comma)
			break;
		p = comma + 1;
	}
	return count;
}
