/*
 * snapshot_wire.c - a gm_snapshot on the lease broker's wire: the one
 * encoder the broker uses and the one decoder its clients use, so that a
 * client that asks the broker gets the very struct it would have read from
 * NVML itself.  Unlike snapshot_json() (the stable form for people and
 * scripts, with units converted and absent fields as null), this form is
 * lossless: raw fields and validity bits.
 *
 * A GPU's readings travel as "values", in the order of the GPU field table
 * (gpu_fields.h, whose rows are only ever appended): a reading added there
 * travels with no change here.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "gpu_fields.h"
#include "snapshot_wire.h"
#include "util.h"

/* Bounds a decoder holds a broker's answer to, whatever it says. */
#define WIRE_MAX_GPUS 4096
#define WIRE_MAX_PROCS (1u << 20)
#define WIRE_MAX_NOTES 4096

static const struct {
	const char *key;
	size_t off, size;
} gpu_strings[] = {
#define S(key, field)                                                                              \
	{                                                                                          \
		key, offsetof(struct gm_gpu, field), sizeof(((struct gm_gpu *)0)->field)           \
	}
    S("uuid", uuid),
    S("name", name),
    S("pci_bus_id", pci_bus_id),
    S("note", note),
#undef S
};

static const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

static json_int_t jint(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

/* A string that is not UTF-8 (a command line) as jansson takes it. */
static json_t *wire_text(const char *s)
{
	json_t *j = json_string(s);
	char *copy;

	if (j)
		return j;
	copy = strdup(s);
	if (!copy)
		return json_string("");
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_string(copy);
	free(copy);
	return j ? j : json_string("");
}

static json_t *gpu_encode(const struct gm_gpu *g)
{
	json_t *o = json_object(), *values = json_array();

	json_object_set_new(o, "index", json_integer(g->index));
	json_object_set_new(o, "state", json_integer(g->state));
	json_object_set_new(o, "valid", json_integer(g->valid));
	for (size_t i = 0; i < gpu_field_count; i++) {
		struct gm_gpu all = *g;
		int64_t v = 0;

		all.valid = ~0u; /* the raw field, read or not: lossless */
		gpu_field_get(&all, &gpu_fields[i], &v);
		json_array_append_new(values, json_integer((json_int_t)v));
	}
	json_object_set_new(o, "values", values);
	for (size_t i = 0; i < ARRAY_SIZE(gpu_strings); i++)
		json_object_set_new(o, gpu_strings[i].key,
		                    wire_text((const char *)g + gpu_strings[i].off));
	return o;
}

static void gpu_decode(const json_t *o, struct gm_gpu *g)
{
	const json_t *values = json_object_get(o, "values");

	g->index = (unsigned)jint(o, "index");
	g->state = (enum gm_gpu_state)jint(o, "state");
	g->valid = (unsigned)jint(o, "valid");
	/* a newer broker's extra readings are left out */
	for (size_t i = 0; i < gpu_field_count && i < json_array_size(values); i++)
		gpu_field_set(g, &gpu_fields[i],
		              (int64_t)json_integer_value(json_array_get(values, i)));
	for (size_t i = 0; i < ARRAY_SIZE(gpu_strings); i++)
		str_copy((char *)g + gpu_strings[i].off, gpu_strings[i].size,
		         jstr(o, gpu_strings[i].key));
}

static json_t *proc_encode(const struct gm_proc *p)
{
	json_t *o = json_object();

	json_object_set_new(o, "pid", json_integer(p->pid));
	json_object_set_new(o, "gpu", json_integer(p->gpu));
	json_object_set_new(o, "kind", json_integer(p->kind));
	json_object_set_new(o, "mps", json_integer(p->mps));
	if (p->has_mem)
		json_object_set_new(o, "used_mib", json_integer((json_int_t)p->used_mib));
	if (p->has_user) {
		json_object_set_new(o, "uid", json_integer(p->uid));
		json_object_set_new(o, "user", wire_text(p->user));
	}
	if (p->command[0])
		json_object_set_new(o, "command", wire_text(p->command));
	if (p->has_util)
		json_object_set_new(o, "util_pct", json_integer(p->util_pct));
	return o;
}

static void proc_decode(const json_t *o, struct gm_proc *p)
{
	p->pid = (unsigned)jint(o, "pid");
	p->gpu = (unsigned)jint(o, "gpu");
	p->kind = (unsigned)jint(o, "kind");
	p->mps = (int)jint(o, "mps");
	p->has_mem = json_object_get(o, "used_mib") != NULL;
	p->used_mib = (uint64_t)jint(o, "used_mib");
	p->has_user = json_object_get(o, "uid") != NULL;
	p->uid = (unsigned)jint(o, "uid");
	str_copy(p->user, sizeof p->user, jstr(o, "user"));
	str_copy(p->command, sizeof p->command, jstr(o, "command"));
	p->has_util = json_object_get(o, "util_pct") != NULL;
	p->util_pct = (unsigned)jint(o, "util_pct");
}

static json_t *mig_encode(const struct gm_mig *m)
{
	json_t *o = json_object(), *pids = json_array();

	json_object_set_new(o, "gpu", json_integer(m->gpu));
	json_object_set_new(o, "uuid", wire_text(m->uuid));
	json_object_set_new(o, "name", wire_text(m->name));
	json_object_set_new(o, "profile", wire_text(m->profile));
	json_object_set_new(o, "valid", json_integer(m->valid));
	json_object_set_new(o, "mem_total_mib", json_integer((json_int_t)m->mem_total_mib));
	json_object_set_new(o, "mem_free_mib", json_integer((json_int_t)m->mem_free_mib));
	json_object_set_new(o, "mem_used_mib", json_integer((json_int_t)m->mem_used_mib));
	json_object_set_new(o, "gi", json_integer(m->gpu_instance_id));
	json_object_set_new(o, "ci", json_integer(m->compute_instance_id));
	for (size_t k = 0; k < m->pid_count; k++)
		json_array_append_new(pids, json_integer(m->pids[k]));
	json_object_set_new(o, "pids", pids);
	return o;
}

static int mig_decode(const json_t *o, struct gm_mig *m)
{
	const json_t *pids = json_object_get(o, "pids");
	size_t n = json_array_size(pids);

	m->gpu = (unsigned)jint(o, "gpu");
	str_copy(m->uuid, sizeof m->uuid, jstr(o, "uuid"));
	str_copy(m->name, sizeof m->name, jstr(o, "name"));
	str_copy(m->profile, sizeof m->profile, jstr(o, "profile"));
	m->valid = (unsigned)jint(o, "valid");
	m->mem_total_mib = (uint64_t)jint(o, "mem_total_mib");
	m->mem_free_mib = (uint64_t)jint(o, "mem_free_mib");
	m->mem_used_mib = (uint64_t)jint(o, "mem_used_mib");
	m->gpu_instance_id = (unsigned)jint(o, "gi");
	m->compute_instance_id = (unsigned)jint(o, "ci");
	if (n > WIRE_MAX_PROCS)
		return -1;
	m->pids = calloc(n + 1, sizeof *m->pids);
	if (!m->pids)
		return -1;
	for (size_t k = 0; k < n; k++)
		m->pids[k] = (unsigned)json_integer_value(json_array_get(pids, k));
	m->pid_count = n;
	return 0;
}

json_t *snapshot_wire_encode(const struct gm_snapshot *snap)
{
	json_t *o = json_object(), *gpus = json_array(), *procs = json_array(),
	       *migs = json_array(), *notes = json_array();

	json_object_set_new(o, "driver_version", wire_text(snap->driver_version));
	json_object_set_new(o, "cuda_driver_version", json_integer(snap->cuda_driver_version));
	json_object_set_new(o, "taken_ms", json_integer(snap->taken_ms));
	json_object_set_new(o, "nvml_init_ms", json_real(snap->nvml_init_ms));
	for (size_t i = 0; i < snap->gpu_count; i++)
		json_array_append_new(gpus, gpu_encode(&snap->gpus[i]));
	for (size_t i = 0; i < snap->proc_count; i++)
		json_array_append_new(procs, proc_encode(&snap->procs[i]));
	for (size_t i = 0; i < snap->mig_count; i++)
		json_array_append_new(migs, mig_encode(&snap->migs[i]));
	for (size_t i = 0; i < snap->note_count; i++)
		json_array_append_new(notes, wire_text(snap->notes[i]));
	json_object_set_new(o, "gpus", gpus);
	json_object_set_new(o, "processes", procs);
	json_object_set_new(o, "migs", migs);
	json_object_set_new(o, "notes", notes);
	return o;
}

enum gm_err snapshot_wire_decode(const json_t *o, struct gm_snapshot **out, char *errbuf,
                                 size_t errlen)
{
	const json_t *gpus = json_object_get(o, "gpus"), *procs = json_object_get(o, "processes");
	const json_t *migs = json_object_get(o, "migs"), *notes = json_object_get(o, "notes");
	struct gm_snapshot *snap;
	size_t i;

	*out = NULL;
	if (!json_is_array(gpus) || !json_is_array(procs) || !json_is_array(migs) ||
	    !json_is_array(notes) || json_array_size(gpus) > WIRE_MAX_GPUS ||
	    json_array_size(procs) > WIRE_MAX_PROCS || json_array_size(migs) > WIRE_MAX_GPUS * 8 ||
	    json_array_size(notes) > WIRE_MAX_NOTES)
		return gm_fail(GM_ERR_STATE, errbuf, errlen,
		               "the lease broker sent a malformed snapshot of the GPUs");
	snap = calloc(1, sizeof *snap);
	if (!snap)
		goto nomem;
	str_copy(snap->driver_version, sizeof snap->driver_version, jstr(o, "driver_version"));
	snap->cuda_driver_version = (int)jint(o, "cuda_driver_version");
	snap->taken_ms = jint(o, "taken_ms");
	snap->nvml_init_ms = json_number_value(json_object_get(o, "nvml_init_ms"));
	snap->gpus = calloc(json_array_size(gpus) + 1, sizeof *snap->gpus);
	snap->procs = calloc(json_array_size(procs) + 1, sizeof *snap->procs);
	snap->migs = calloc(json_array_size(migs) + 1, sizeof *snap->migs);
	snap->notes = calloc(json_array_size(notes) + 1, sizeof *snap->notes);
	if (!snap->gpus || !snap->procs || !snap->migs || !snap->notes)
		goto nomem;
	for (i = 0; i < json_array_size(gpus); i++)
		gpu_decode(json_array_get(gpus, i), &snap->gpus[snap->gpu_count++]);
	for (i = 0; i < json_array_size(procs); i++)
		proc_decode(json_array_get(procs, i), &snap->procs[snap->proc_count++]);
	for (i = 0; i < json_array_size(migs); i++)
		if (mig_decode(json_array_get(migs, i), &snap->migs[snap->mig_count++]) < 0)
			goto nomem;
	for (i = 0; i < json_array_size(notes); i++) {
		snap->notes[i] = strdup(json_string_value(json_array_get(notes, i)) ?: "");
		if (!snap->notes[i])
			goto nomem;
		snap->note_count++;
	}
	*out = snap;
	return GM_OK;
nomem:
	gm_snapshot_free(snap);
	return gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory");
}
