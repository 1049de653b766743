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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "scenario.h"
#include "scenario_load.h"

#define DEFAULT_DRIVER_VERSION "580.95.05"
#define DEFAULT_CUDA_DRIVER_VERSION 13000
#define MAX_SCENARIO_BYTES (16u << 20)

static const char *const function_names[FN_COUNT] = {
#define SCENARIO_FN_NAME(name) #name,
    SCENARIO_FUNCTIONS(SCENARIO_FN_NAME)
#undef SCENARIO_FN_NAME
};

/* Every object may carry a "comment": JSON has no comments of its own. */
static const char *const top_keys[] = {"comment",    "driver_version",  "cuda_driver_version",
                                       "init_error", "missing_symbols", "gpus",
                                       "timeline",   "latency",         NULL};

/* The keys of "latency", by what they cost. */
static const char *const latency_keys[] = {
    "comment",   "init_ms",        "attach_ms",    "query_ms",
    "memory_ms", "utilization_ms", "processes_ms", "process_utilization_ms",
    NULL};
static const char *const family_keys[FAMILY_COUNT] = {
    [FAMILY_QUERY] = "query_ms",
    [FAMILY_MEMORY] = "memory_ms",
    [FAMILY_UTILIZATION] = "utilization_ms",
    [FAMILY_PROCESSES] = "processes_ms",
    [FAMILY_PROCESS_UTILIZATION] = "process_utilization_ms",
};

/* A minute a call is more than any driver takes: a bigger number is a
 * mistake (seconds written as milliseconds), not a simulation. */
#define MAX_LATENCY_MS 600000.0

static int parse_latency(struct loader *ld, const json_t *root, struct scenario *sc)
{
	const json_t *lat = json_object_get(root, "latency");
	struct scenario_latency *l = &sc->latency;
	double x;
	int f;

	if (!lat || json_is_null(lat))
		return 0;
	if (!json_is_object(lat))
		return loader_bad(ld, "", "latency", "expected an object of milliseconds, got %s",
		                  loader_type_name(lat));
	if (loader_check_keys(ld, lat, "latency", latency_keys) < 0)
		return -1;
	f = loader_get_number(ld, lat, "latency", "init_ms", 0, MAX_LATENCY_MS, 0, &x);
	if (f < 0)
		return -1;
	l->init_ms = f == FIELD_SET ? x : 0;
	f = loader_get_number(ld, lat, "latency", "attach_ms", 0, MAX_LATENCY_MS, 0, &x);
	if (f < 0)
		return -1;
	l->attach_ms = f == FIELD_SET ? x : 0;
	for (int fam = 0; fam < FAMILY_COUNT; fam++) {
		f = loader_get_number(ld, lat, "latency", family_keys[fam], 0, MAX_LATENCY_MS, 0,
		                      &x);
		if (f < 0)
			return -1;
		l->call_ms[fam] = f == FIELD_SET ? x : 0;
	}
	return 0;
}

enum scenario_family scenario_fn_family(enum scenario_fn fn)
{
	switch (fn) {
	case FN_nvmlDeviceGetMemoryInfo:
	case FN_nvmlDeviceGetMemoryInfo_v2:
	case FN_nvmlDeviceGetBAR1MemoryInfo:
		return FAMILY_MEMORY;
	case FN_nvmlDeviceGetUtilizationRates:
		return FAMILY_UTILIZATION;
	case FN_nvmlDeviceGetComputeRunningProcesses:
	case FN_nvmlDeviceGetComputeRunningProcesses_v2:
	case FN_nvmlDeviceGetComputeRunningProcesses_v3:
	case FN_nvmlDeviceGetGraphicsRunningProcesses:
	case FN_nvmlDeviceGetGraphicsRunningProcesses_v2:
	case FN_nvmlDeviceGetGraphicsRunningProcesses_v3:
	case FN_nvmlDeviceGetMPSComputeRunningProcesses:
	case FN_nvmlDeviceGetMPSComputeRunningProcesses_v2:
	case FN_nvmlDeviceGetMPSComputeRunningProcesses_v3:
		return FAMILY_PROCESSES;
	case FN_nvmlDeviceGetProcessUtilization:
		return FAMILY_PROCESS_UTILIZATION;
	default:
		return FAMILY_QUERY;
	}
}

static int parse_missing(struct loader *ld, const json_t *root, struct scenario *sc)
{
	const json_t *list = json_object_get(root, "missing_symbols");
	char where[48];
	size_t i, fn;

	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return loader_bad(ld, "", "missing_symbols", "expected an array, got %s",
		                  loader_type_name(list));
	for (i = 0; i < json_array_size(list); i++) {
		const json_t *v = json_array_get(list, i);

		snprintf(where, sizeof where, "missing_symbols[%zu]", i);
		if (!json_is_string(v))
			return loader_bad(ld, where, NULL, "expected a string, got %s",
			                  loader_type_name(v));
		for (fn = 0; fn < FN_COUNT && strcmp(function_names[fn], json_string_value(v));
		     fn++)
			;
		if (fn == FN_COUNT)
			return loader_bad(ld, where, NULL,
			                  "'%s' is not an NVML function the simulator implements",
			                  json_string_value(v));
		sc->missing[fn] = 1;
	}
	return 0;
}

static int parse_top(struct loader *ld, const json_t *root, struct scenario *sc)
{
	const json_t *gpus;
	const char *version;
	double x;
	size_t i;
	int f;

	if (!json_is_object(root))
		return loader_bad(ld, "", NULL, "expected a JSON object at the top level, got %s",
		                  loader_type_name(root));
	if (loader_check_keys(ld, root, "", top_keys) < 0)
		return -1;

	f = loader_get_string(ld, root, "", "driver_version", sizeof sc->driver_version, &version);
	if (f < 0)
		return -1;
	if (f == FIELD_SET && (version[0] < '1' || version[0] > '9' || atoi(version) > 9999))
		return loader_bad(
		    ld, "", "driver_version",
		    "'%s' is not a driver version (expected e.g. \"580.95.05\"; its first "
		    "number picks the driver branch the simulator exports)",
		    version);
	sc->has_driver_version = f != FIELD_NULL;
	snprintf(sc->driver_version, sizeof sc->driver_version, "%s",
	         f == FIELD_SET ? version : DEFAULT_DRIVER_VERSION);

	f = loader_get_number(ld, root, "", "cuda_driver_version", 1000, 99990, 1, &x);
	if (f < 0)
		return -1;
	sc->has_cuda_driver_version = f != FIELD_NULL;
	sc->cuda_driver_version = f == FIELD_SET ? (int)x : DEFAULT_CUDA_DRIVER_VERSION;

	if (loader_get_error_name(ld, root, "", "init_error", &sc->init_error) < 0 ||
	    parse_missing(ld, root, sc) < 0)
		return -1;

	gpus = json_object_get(root, "gpus");
	if (!gpus)
		return loader_bad(ld, "", NULL,
		                  "missing required key 'gpus' ([] for a machine without GPUs)");
	if (!json_is_array(gpus))
		return loader_bad(ld, "", "gpus", "expected an array, got %s",
		                  loader_type_name(gpus));
	if (json_array_size(gpus) > SCENARIO_MAX_GPUS)
		return loader_bad(ld, "", "gpus", "%zu GPUs, the simulator supports at most %d",
		                  json_array_size(gpus), SCENARIO_MAX_GPUS);
	sc->gpu_count = json_array_size(gpus);
	sc->gpus = calloc(sc->gpu_count ? sc->gpu_count : 1, sizeof *sc->gpus);
	if (!sc->gpus)
		return loader_bad(ld, "", "gpus", "out of memory");
	for (i = 0; i < sc->gpu_count; i++)
		if (scenario_parse_gpu(ld, json_array_get(gpus, i), i, &sc->gpus[i]) < 0)
			return -1;
	if (scenario_check_unique(ld, sc) < 0 || parse_latency(ld, root, sc) < 0)
		return -1;
	return scenario_parse_timeline(ld, root, sc);
}

/* The whole file, NUL-terminated; errors name the file and errno's text. */
static char *read_file(struct loader *ld, const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *buf = NULL, *grown;
	size_t cap = 0, n;

	*len = 0;
	if (!fp) {
		loader_bad(ld, "", NULL, "cannot open: %s", strerror(errno));
		goto failed;
	}
	for (;;) {
		if (*len + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 8192;
			if (cap > MAX_SCENARIO_BYTES) {
				loader_bad(ld, "", NULL, "larger than %u MiB, not a scenario",
				           MAX_SCENARIO_BYTES >> 20);
				goto failed;
			}
			grown = realloc(buf, cap);
			if (!grown) {
				loader_bad(ld, "", NULL, "out of memory");
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
		loader_bad(ld, "", NULL, "cannot read: %s", strerror(errno));
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
	/* jansson would say only "'{' expected near" an invisible character */
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {
		loader_bad(&ld, "", NULL,
		           "the file starts with a byte order mark (U+FEFF); save it as UTF-8 "
		           "without one");
		goto done;
	}
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
		loader_bad(&ld, "", NULL, "out of memory");
		goto done;
	}
	sc->realpath = realpath(path, NULL);
	if (!sc->realpath) {
		loader_bad(&ld, "", NULL, "cannot resolve the path: %s", strerror(errno));
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
			scenario_states_free(sc->phases[p].gpus, sc->gpu_count);
		free(sc->phases);
		scenario_states_free(sc->base, sc->gpu_count);
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
