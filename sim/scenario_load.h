/*
 * scenario_load.h - private to the scenario reader (scenario.c and its
 * scenario_*.c parts); the simulator and simload see scenario.h only.
 *
 * Every parser takes the loader, which names the file, and a key path
 * ("gpus[2]"); on a mistake it writes "file: where.key: message" into the
 * loader's buffer and returns -1, so that a caller can return it at once.
 */
#ifndef GM_SIM_SCENARIO_LOAD_H
#define GM_SIM_SCENARIO_LOAD_H

#include <stddef.h>
#include <jansson.h>
#include "scenario.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_MIB ((double)(1ull << 40))

/* How a key was found: the getters return one of these, or -1 on error. */
enum field { FIELD_ABSENT = 0, FIELD_NULL = 1, FIELD_SET = 2 };

struct loader {
	const char *file;
	char *err; /* the caller's buffer for the message */
	size_t errlen;
};

/* scenario_load.c: the checked getters. */
/* "file: where.key: message"; returns -1 so that callers can return it. */
int loader_bad(struct loader *ld, const char *where, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *loader_type_name(const json_t *v);
/* Unknown keys of obj, with a suggestion when a key of known is a typo away. */
int loader_check_keys(struct loader *ld, const json_t *obj, const char *where,
                      const char *const *known);
/* A number at obj[key] within [min, max] (whole: an integer); enum field or -1. */
int loader_get_number(struct loader *ld, const json_t *obj, const char *where, const char *key,
                      double min, double max, int whole, double *out);
/* A non-empty string shorter than size bytes; enum field or -1. */
int loader_get_string(struct loader *ld, const json_t *obj, const char *where, const char *key,
                      size_t size, const char **out);
/* An NVML error name (null or absent: 0); 0 or -1. */
int loader_get_error_name(struct loader *ld, const json_t *obj, const char *where, const char *key,
                          int *code);

/* scenario_gpu.c: gpus[index], and the checks across GPUs. */
int scenario_parse_gpu(struct loader *ld, const json_t *obj, size_t index,
                       struct scenario_gpu *gpu);
/* obj's "processes" into gpu->procs (which the caller frees, even on error). */
int scenario_parse_processes(struct loader *ld, const json_t *obj, const char *where,
                             struct scenario_gpu *gpu);
int scenario_check_unique(struct loader *ld, const struct scenario *sc);

/* scenario_timeline.c: root's "timeline" into sc->base and sc->phases. */
int scenario_parse_timeline(struct loader *ld, const json_t *root, struct scenario *sc);
/* Frees n states and the process arrays they own. */
void scenario_states_free(struct scenario_gpu_state *states, size_t n);

#endif
