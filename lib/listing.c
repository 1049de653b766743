/*
 * listing.c - the live leases and waiters as JSON: one schema for
 * `gpuman status --json`, `gpuman serve` and gm_leases_json (the Python
 * binding's leases()); which lease each process runs under, and the waste
 * finder's report as JSON (listing.h).
 */
#include <stdlib.h>
#include "lease_api.h"
#include "listing.h"
#include "proctree.h"
#include "record.h"
#include "snapshot.h"
#include "util.h"

json_t *listing_leases_json(const struct registry_view *view)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < view->lease_count; i++) {
		const struct lease_info *l = &view->leases[i];
		json_t *o = record_lease_json(l);

		/* held longer than its user's max_lease (gpuman.conf) */
		json_object_set_new(o, "over_limit_ms",
		                    l->over_limit_ms ? json_integer(l->over_limit_ms)
		                                     : json_null());
		json_array_append_new(arr, o);
	}
	return arr;
}

json_t *listing_waiters_json(const struct registry_view *view)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < view->waiter_count; i++) {
		const struct waiter_info *w = &view->waiters[i];
		json_t *o = json_object();

		json_object_set_new(o, "position", json_integer((json_int_t)i + 1));
		json_object_set_new(o, "user", json_string(w->user));
		json_object_set_new(o, "uid", json_integer(w->uid));
		json_object_set_new(o, "pid", json_integer(w->pid));
		json_object_set_new(o, "command", json_string(w->command));
		json_object_set_new(o, "since_ms", json_integer(w->since_ms));
		json_object_set_new(o, "request", json_string(w->summary));
		json_object_set_new(o, "limit", w->limit[0] ? json_string(w->limit) : json_null());
		json_array_append_new(arr, o);
	}
	return arr;
}

json_t *listing_more_json(const struct view_more *more, size_t count)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < count; i++) {
		json_t *o = json_object();

		json_object_set_new(o, "user", json_string(more[i].user));
		json_object_set_new(o, "uid", json_integer(more[i].uid));
		json_object_set_new(o, "count", json_integer((json_int_t)more[i].count));
		if (more[i].gpus)
			json_object_set_new(o, "gpus", json_integer((json_int_t)more[i].gpus));
		json_array_append_new(arr, o);
	}
	return arr;
}

json_t *listing_status_json(const struct gm_snapshot *snap, const struct registry_view *view)
{
	json_t *o = snapshot_json(snap);

	json_object_set_new(o, "leases", listing_leases_json(view));
	json_object_set_new(o, "waiters", listing_waiters_json(view));
	/* a long line, summarised by the broker: the rest, per user */
	if (view->more_waiter_count)
		json_object_set_new(o, "waiters_more",
		                    listing_more_json(view->more_waiters, view->more_waiter_count));
	if (view->more_lease_count)
		json_object_set_new(o, "leases_more",
		                    listing_more_json(view->more_leases, view->more_lease_count));
	return o;
}

long *listing_proc_leases(const struct gm_snapshot *snap, const struct registry_view *view)
{
	struct proctree tree = PROCTREE_INIT;
	long *out = calloc(snap->proc_count + 1, sizeof *out);

	if (!out)
		return NULL;
	/* Reading every process's parent costs; only a GPU process needs it. */
	if (view->lease_count && snap->proc_count)
		proctree_read(&tree);
	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];

		out[i] = -1;
		for (size_t l = 0; l < view->lease_count && out[i] < 0; l++)
			if (!view->leases[l].reservation &&
			    proctree_within(&tree, view->leases[l].job_pid, (int)p->pid))
				out[i] = (long)l;
		/* A reservation has no process: its user's on its GPUs are in it. */
		for (size_t l = 0; l < view->lease_count && out[i] < 0; l++) {
			const struct lease_info *li = &view->leases[l];

			for (size_t g = 0; li->reservation && p->has_user && p->uid == li->uid &&
			                   g < li->gpu_count;
			     g++)
				if (li->indices[g] == p->gpu)
					out[i] = (long)l;
		}
	}
	proctree_release(&tree);
	return out;
}

int listing_find_waste(const struct gm_snapshot *snap, const struct registry_view *view,
                       struct waste_opts *opts, struct waste_report *rep)
{
	long *leases = listing_proc_leases(snap, view);
	int rc;

	opts->now_ms = snap->taken_ms;
	opts->window_s = LISTING_UTIL_WINDOW_S;
	rc = leases ? waste_find(snap, view, leases, opts, rep) : -1;
	free(leases);
	return rc;
}

static json_t *gpu_array(uint64_t mask)
{
	json_t *arr = json_array();

	for (unsigned i = 0; i < 64; i++)
		if (mask & ((uint64_t)1 << i))
			json_array_append_new(arr, json_integer(i));
	return arr;
}

json_t *listing_waste_json(const struct gm_snapshot *snap, const struct registry_view *view,
                           const struct waste_opts *opts, const struct waste_report *rep)
{
	json_t *arr = json_array();
	char text[1024];

	for (size_t i = 0; i < rep->count; i++) {
		const struct waste_item *it = &rep->items[i];
		const struct lease_info *l = it->lease >= 0 ? &view->leases[it->lease] : NULL;
		json_t *o = json_object();

		json_object_set_new(o, "kind", json_string(waste_kind_name(it->kind)));
		json_object_set_new(o, "user", it->has_user ? json_text(it->user) : json_null());
		json_object_set_new(o, "pid", json_integer(it->pid));
		json_object_set_new(o, "command",
		                    it->command[0] ? json_text(it->command) : json_null());
		json_object_set_new(o, "lease", l ? json_text(l->id) : json_null());
		json_object_set_new(
		    o, "gpus", gpu_array(it->kind == WASTE_UNLEASED ? it->gpus : it->idle_gpus));
		if (it->kind == WASTE_HOG)
			json_object_set_new(o, "compute_gpus", gpu_array(it->busy_gpus));
		if (it->kind != WASTE_IDLE_LEASE && it->kind != WASTE_OVER_LIMIT)
			json_object_set_new(o, "held_mib", json_integer((json_int_t)it->held_mib));
		if (it->kind == WASTE_IDLE_LEASE || it->kind == WASTE_OVER_LIMIT)
			json_object_set_new(o, "held_s", json_integer(it->age_ms / 1000));
		/* a GPU in MIG mode is judged per slice: the slice, null for GPUs */
		json_object_set_new(o, "mig_uuid",
		                    it->mig_uuid[0] ? json_text(it->mig_uuid) : json_null());
		if (it->kind == WASTE_UNLEASED)
			json_object_set_new(o, "on_lease_of",
			                    it->on_lease >= 0
			                        ? json_text(view->leases[it->on_lease].user)
			                        : json_null());
		json_object_set_new(o, "what",
		                    json_text(waste_what(snap, view, opts, it, text, sizeof text)));
		json_object_set_new(o, "advice",
		                    json_text(waste_advice(snap, view, it, text, sizeof text)));
		json_array_append_new(arr, o);
	}
	return arr;
}

GM_API enum gm_err gm_leases_json(char **json, char *errbuf, size_t errlen)
{
	struct registry *reg;
	struct registry_view view = REGISTRY_VIEW_INIT;
	json_t *o = NULL;
	enum gm_err rc;

	*json = NULL;
	rc = registry_open(&reg, errbuf, errlen);
	if (rc != GM_OK)
		return rc;
	rc = registry_read(reg, &view, errbuf, errlen);
	if (rc == GM_OK) {
		o = json_pack("{s:o, s:o}", "leases", listing_leases_json(&view), "waiters",
		              listing_waiters_json(&view));
		/* past the head of a long line the broker lists, as status has it */
		if (o && view.more_waiter_count)
			json_object_set_new(
			    o, "waiters_more",
			    listing_more_json(view.more_waiters, view.more_waiter_count));
		if (o && view.more_lease_count)
			json_object_set_new(
			    o, "leases_more",
			    listing_more_json(view.more_leases, view.more_lease_count));
		*json = o ? json_dumps(o, JSON_COMPACT) : NULL;
		if (!*json)
			rc = gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory");
	}
	json_decref(o);
	registry_view_release(&view);
	registry_close(reg);
	return rc;
}
