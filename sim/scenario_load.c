/*
 * scenario_load.c - the scenario reader's checked getters: a key's type and
 * range, unknown keys (with the known key a typo away), and the message
 * that names the file and the key path.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <jansson.h>
#include "scenario.h"
#include "scenario_load.h"
#include "../lib/spell.h"

/* The NVML errors a scenario may name, with their codes. */
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

int loader_bad(struct loader *ld, const char *where, const char *key, const char *fmt, ...)
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

const char *loader_type_name(const json_t *v)
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

int loader_check_keys(struct loader *ld, const json_t *obj, const char *where,
                      const char *const *known)
{
	void *it;

	for (it = json_object_iter((json_t *)obj); it;
	     it = json_object_iter_next((json_t *)obj, it)) {
		const char *key = json_object_iter_key(it), *best;
		struct spell near = SPELL_INIT(key);
		size_t i;

		for (i = 0; known[i] && strcmp(known[i], key); i++)
			;
		if (known[i])
			continue;
		for (i = 0; known[i]; i++)
			spell_offer(&near, known[i]);
		best = spell_best(&near);
		if (best)
			return loader_bad(ld, where, NULL, "unknown key '%s' (did you mean '%s'?)",
			                  key, best);
		return loader_bad(ld, where, NULL, "unknown key '%s'", key);
	}
	return 0;
}

/*
 * A number at obj[key] within [min, max]; whole: it must be an integer.
 * Returns enum field or -1.
 */
int loader_get_number(struct loader *ld, const json_t *obj, const char *where, const char *key,
                      double min, double max, int whole, double *out)
{
	const json_t *v = json_object_get(obj, key);
	double x;

	if (!v)
		return FIELD_ABSENT;
	if (json_is_null(v))
		return FIELD_NULL;
	if (!json_is_number(v))
		return loader_bad(ld, where, key, "expected a number, got %s", loader_type_name(v));
	x = json_number_value(v);
	if (!isfinite(x) || x < min || x > max) {
		if (max >= MAX_MIB)
			return loader_bad(ld, where, key,
			                  "expected a number of at least %g, got %g", min, x);
		return loader_bad(ld, where, key, "expected a number from %g to %g, got %g", min,
		                  max, x);
	}
	if (whole && x != (double)(long long)x)
		return loader_bad(ld, where, key, "expected a whole number, got %g", x);
	*out = x;
	return FIELD_SET;
}

/* A string at obj[key] shorter than size bytes; returns enum field or -1. */
int loader_get_string(struct loader *ld, const json_t *obj, const char *where, const char *key,
                      size_t size, const char **out)
{
	const json_t *v = json_object_get(obj, key);

	if (!v)
		return FIELD_ABSENT;
	if (json_is_null(v))
		return FIELD_NULL;
	if (!json_is_string(v))
		return loader_bad(ld, where, key, "expected a string, got %s", loader_type_name(v));
	*out = json_string_value(v);
	if (!**out)
		return loader_bad(ld, where, key, "expected a non-empty string");
	if (strlen(*out) >= size)
		return loader_bad(ld, where, key, "longer than %zu characters", size - 1);
	return FIELD_SET;
}

/* An NVML error name (or null/absent: 0); returns 0 or -1. */
int loader_get_error_name(struct loader *ld, const json_t *obj, const char *where, const char *key,
                          int *code)
{
	char names[512];
	size_t used = 0;
	const char *name;
	int f = loader_get_string(ld, obj, where, key, 64, &name);

	*code = 0;
	if (f < 0)
		return -1;
	if (f != FIELD_SET)
		return 0;
	*code = scenario_error_code(name);
	if (*code >= 0)
		return 0;
	names[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(nvml_errors) && used < sizeof names; i++)
		used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
		                         !i                                ? ""
		                         : i + 1 < ARRAY_SIZE(nvml_errors) ? ", "
		                                                           : " or ",
		                         nvml_errors[i].name);
	return loader_bad(ld, where, key, "unknown NVML error '%s' (use %s)", name, names);
}
