/*
 * scenario_timeline.c - a scenario's "timeline": phases that change GPUs'
 * load and processes over time, read with the rest of the file and applied
 * by the simulator at each call (scenario_apply_time).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <jansson.h>
#include "scenario.h"
#include "scenario_load.h"

/* Every object may carry a "comment": JSON has no comments of its own. */
static const char *const timeline_keys[] = {"comment", "repeat_s", "phases", NULL};
static const char *const phase_keys[] = {"comment", "at_s", "gpus", NULL};
static const char *const phase_gpu_keys[] = {"comment",         "gpu",       "utilization_gpu",
                                             "memory_used_mib", "processes", NULL};

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

void scenario_states_free(struct scenario_gpu_state *states, size_t n)
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
		return loader_bad(ld, where, NULL, "expected an object, got %s",
		                  loader_type_name(obj));
	if (loader_check_keys(ld, obj, where, phase_gpu_keys) < 0)
		return -1;
	f = loader_get_number(ld, obj, where, "gpu", 0, SCENARIO_MAX_GPUS - 1, 1, &x);
	if (f < 0)
		return -1;
	if (f != FIELD_SET)
		return loader_bad(ld, where, NULL,
		                  "missing required key 'gpu' (its index in \"gpus\")");
	if ((size_t)x >= sc->gpu_count)
		return loader_bad(ld, where, "gpu", "%u: the scenario has %zu GPUs", (unsigned)x,
		                  sc->gpu_count);
	if (seen[(size_t)x]++)
		return loader_bad(ld, where, "gpu", "GPU %u is already changed in this phase",
		                  (unsigned)x);
	gpu = &sc->gpus[(size_t)x];
	st = &states[(size_t)x];
	if (gpu->mig_count)
		return loader_bad(ld, where, "gpu",
		                  "GPU %u has MIG slices, which a timeline cannot change",
		                  gpu->index);
	f = loader_get_number(ld, obj, where, "utilization_gpu", 0, 100, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET)
		st->util_gpu_pct = (unsigned)x;
	f = loader_get_number(ld, obj, where, "memory_used_mib", 0, MAX_MIB, 1, &x);
	if (f < 0)
		return -1;
	if (f == FIELD_SET)
		st->mem_used_mib = (uint64_t)x;
	if (json_object_get(obj, "processes")) {
		memset(&tmp, 0, sizeof tmp);
		if (scenario_parse_processes(ld, obj, where, &tmp) < 0) {
			free(tmp.procs);
			return -1;
		}
		state_release(st);
		st->procs = tmp.procs ? tmp.procs : calloc(1, sizeof *st->procs);
		if (!st->procs)
			return loader_bad(ld, where, "processes", "out of memory");
		st->proc_count = tmp.proc_count;
		st->procs_used_mib = tmp.procs_used_mib;
		st->procs_util_pct = tmp.procs_util_pct;
	}
	if ((gpu->has & SCENARIO_HAS_MEMORY) &&
	    gpu->mem_reserved_mib + st->mem_used_mib + st->procs_used_mib > gpu->mem_total_mib)
		return loader_bad(ld, where, NULL,
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
int scenario_parse_timeline(struct loader *ld, const json_t *root, struct scenario *sc)
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
		return loader_bad(ld, "", "timeline", "expected an object, got %s",
		                  loader_type_name(tl));
	if (loader_check_keys(ld, tl, "timeline", timeline_keys) < 0)
		return -1;
	f = loader_get_number(ld, tl, "timeline", "repeat_s", 0, 1e7, 0, &x);
	if (f < 0)
		return -1;
	sc->repeat_s = f == FIELD_SET ? x : 0;
	phases = json_object_get(tl, "phases");
	if (!phases || !json_is_array(phases) || !json_array_size(phases))
		return loader_bad(ld, "timeline", "phases", "expected a non-empty array of phases");
	if (stat(sc->realpath, &st) < 0)
		return loader_bad(ld, "", NULL, "cannot stat: %s", strerror(errno));
	sc->epoch_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;

	sc->base = calloc(sc->gpu_count ? sc->gpu_count : 1, sizeof *sc->base);
	sc->phases = calloc(json_array_size(phases), sizeof *sc->phases);
	if (!sc->base || !sc->phases)
		return loader_bad(ld, "", "timeline", "out of memory");
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
			return loader_bad(ld, where, NULL, "expected an object, got %s",
			                  loader_type_name(ph));
		if (loader_check_keys(ld, ph, where, phase_keys) < 0)
			return -1;
		f = loader_get_number(ld, ph, where, "at_s", 0, 1e7, 0, &x);
		if (f < 0)
			return -1;
		if (f != FIELD_SET)
			return loader_bad(ld, where, NULL, "missing required key 'at_s'");
		if (p && x <= sc->phases[p - 1].at_s)
			return loader_bad(ld, where, "at_s",
			                  "%g is not after the phase before (%g)", x,
			                  sc->phases[p - 1].at_s);
		if (sc->repeat_s > 0 && x >= sc->repeat_s)
			return loader_bad(ld, where, "at_s", "%g is not before repeat_s (%g)", x,
			                  sc->repeat_s);
		phase->at_s = x;
		phase->gpus = calloc(sc->gpu_count ? sc->gpu_count : 1, sizeof *phase->gpus);
		if (!phase->gpus)
			return loader_bad(ld, where, NULL, "out of memory");
		sc->phase_count = p + 1;
		for (size_t i = 0; i < sc->gpu_count; i++)
			if (state_copy(&phase->gpus[i], &prev[i]) < 0)
				return loader_bad(ld, where, NULL, "out of memory");
		list = json_object_get(ph, "gpus");
		if (!list || !json_is_array(list))
			return loader_bad(ld, where, "gpus",
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
