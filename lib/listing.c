/*
 * listing.c - the live leases and waiters as JSON: one schema for
 * `gpuman status --json` and gm_leases_json (the Python binding's leases()).
 */
#include <stdlib.h>
#include "listing.h"
#include "util.h"

json_t *listing_leases_json(const struct registry_view *view)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < view->lease_count; i++) {
		const struct lease_info *l = &view->leases[i];
		json_t *o = json_object(), *gpus = json_array();

		for (size_t g = 0; g < l->gpu_count; g++) {
			json_t *jg = json_object();

			json_object_set_new(jg, "index", json_integer(l->indices[g]));
			json_object_set_new(jg, "uuid", json_string(l->uuids[g]));
			json_object_set_new(jg, "mig_uuid",
			                    l->migs && l->migs[g][0] ? json_string(l->migs[g])
			                                             : json_null());
			json_array_append_new(gpus, jg);
		}
		json_object_set_new(o, "id", json_string(l->id));
		json_object_set_new(o, "user", json_string(l->user));
		json_object_set_new(o, "uid", json_integer(l->uid));
		json_object_set_new(o, "pid", json_integer(l->pid));
		json_object_set_new(o, "job_pid", json_integer(l->job_pid));
		json_object_set_new(o, "command", json_string(l->command));
		json_object_set_new(o, "start_ms", json_integer(l->start_ms));
		json_object_set_new(o, "kind", json_string(l->exclusive ? "exclusive" : "share"));
		json_object_set_new(o, "share_mib",
		                    l->exclusive ? json_null()
		                                 : json_integer((json_int_t)l->share_mib));
		json_object_set_new(o, "gpus", gpus);
		/* a reservation (gpuman reserve): held by nobody until then */
		json_object_set_new(o, "reservation", json_boolean(l->reservation));
		json_object_set_new(o, "expires_ms",
		                    l->reservation ? json_integer(l->expires_ms) : json_null());
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
		*json = o ? json_dumps(o, JSON_COMPACT) : NULL;
		if (!*json)
			rc = gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory");
	}
	json_decref(o);
	registry_view_release(&view);
	registry_close(reg);
	return rc;
}
