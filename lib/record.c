/*
 * record.c - the JSON codecs of a request, a usable set, a lease and a
 * waiter (record.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parse.h"
#include "policy.h"
#include "record.h"
#include "lease_view.h"
#include "util.h"

char *record_place_key(const struct gm_request *req, const char *command)
{
	char *text = gm_request_text(req), *key = NULL;

	if (text && asprintf(&key, "%s\n%s", text, command ? command : "") < 0)
		key = NULL;
	free(text);
	return key;
}

/* Lists and sizes as gm_request_set() reads them. */
static void set_list(json_t *o, const char *key, const struct gpu_list *list)
{
	size_t need = 1;
	char *s;

	if (!list->count)
		return;
	for (size_t i = 0; i < list->count; i++)
		need += strlen(list->items[i]) + 1;
	s = calloc(1, need);
	if (!s)
		return;
	for (size_t i = 0; i < list->count; i++) {
		if (i)
			strcat(s, ",");
		strcat(s, list->items[i]);
	}
	json_object_set_new(o, key, json_string(s));
	free(s);
}

static void set_size(json_t *o, const char *key, const struct gm_size *size)
{
	char buf[32];

	if (size->is_pct)
		snprintf(buf, sizeof buf, "%u%%", size->pct);
	else
		snprintf(buf, sizeof buf, "%llu", (unsigned long long)size->mib);
	json_object_set_new(o, key, json_string(buf));
}

json_t *record_request_json(const struct gm_request *req)
{
	json_t *o = json_object();
	char buf[32];

	if (!o)
		return NULL;
	snprintf(buf, sizeof buf, "%u", req->count);
	json_object_set_new(o, "n", json_string(buf));
	json_object_set_new(o, "by", json_string(policy_name(req->by)));
	if (req->has_min_free)
		set_size(o, "min-free", &req->min_free);
	if (req->has_max_util) {
		snprintf(buf, sizeof buf, "%u", req->max_util);
		json_object_set_new(o, "max-util", json_string(buf));
	}
	set_list(o, "only", &req->only);
	set_list(o, "exclude", &req->exclude);
	if (req->share)
		set_size(o, "mem", &req->mem);
	if (req->idle)
		json_object_set_new(o, "idle", json_string(""));
	if (req->mig[0])
		json_object_set_new(o, "mig", json_string(req->mig));
	return o;
}

static int skipped(const char *key, const char *const *skip)
{
	for (size_t i = 0; skip && skip[i]; i++)
		if (!strcmp(key, skip[i]))
			return 1;
	return 0;
}

struct gm_request *record_request_parse(json_t *o, const char *const *skip, char *err, size_t len)
{
	struct gm_request *req = gm_request_new();
	const char *key;
	json_t *v;

	if (!req || !json_is_object(o)) {
		gm_fail(req ? GM_ERR_INVALID : GM_ERR_NOMEM, err, len, "%s",
		        req ? "malformed request" : "out of memory");
		goto failed;
	}
	json_object_foreach(o, key, v)
	{
		if (skipped(key, skip))
			continue;
		/* The same parser as the command line and the C API: what a
		 * user cannot ask for there, they cannot ask for here.  The wait
		 * travels beside the request, never in it. */
		if (!json_is_string(v) || !strcmp(key, "wait")) {
			gm_fail(GM_ERR_INVALID, err, len, "malformed request");
			goto failed;
		}
		if (gm_request_set(req, key, json_string_value(v), err, len) != GM_OK)
			goto failed;
	}
	return req;
failed:
	gm_request_free(req);
	return NULL;
}

json_t *record_usable_json(const unsigned char *usable, const struct gm_snapshot *snap)
{
	json_t *o = json_object();

	for (size_t i = 0; o && usable && i < snap->gpu_count; i++)
		if (usable[i])
			json_object_set_new(o, snap->gpus[i].uuid, json_integer(usable[i]));
	return o;
}

json_t *record_usable_migs_json(const unsigned char *mig_usable, const struct gm_snapshot *snap)
{
	json_t *o = json_object();

	for (size_t i = 0; o && mig_usable && i < snap->mig_count; i++)
		if (mig_usable[i] && snap->migs[i].uuid[0])
			json_object_set_new(o, snap->migs[i].uuid, json_integer(mig_usable[i]));
	return o;
}

unsigned char *record_usable_from(json_t *o, const struct gm_snapshot *snap)
{
	unsigned char *u;

	if (!json_is_object(o))
		return NULL;
	u = calloc(snap->gpu_count + 1, 1);
	for (size_t i = 0; u && i < snap->gpu_count; i++)
		u[i] = (unsigned char)json_integer_value(json_object_get(o, snap->gpus[i].uuid));
	return u;
}

unsigned char *record_usable_migs_from(json_t *o, const struct gm_snapshot *snap)
{
	unsigned char *u;

	if (!json_is_object(o))
		return NULL;
	u = calloc(snap->mig_count + 1, 1);
	for (size_t i = 0; u && i < snap->mig_count; i++)
		u[i] = (unsigned char)json_integer_value(json_object_get(o, snap->migs[i].uuid));
	return u;
}

json_t *record_lease_json(const struct lease_info *li)
{
	json_t *o = json_object(), *gpus = json_array();

	if (!o || !gpus) {
		json_decref(o);
		json_decref(gpus);
		return NULL;
	}
	for (size_t g = 0; g < li->gpu_count; g++) {
		const char *mig = li->migs && li->migs[g][0] ? li->migs[g] : NULL;

		json_array_append_new(gpus,
		                      json_pack("{s:i, s:s, s:o}", "index", (int)li->indices[g],
		                                "uuid", li->uuids[g], "mig_uuid",
		                                mig ? json_string(mig) : json_null()));
	}
	json_object_set_new(o, "id", json_string(li->id));
	json_object_set_new(o, "uid", json_integer(li->uid));
	json_object_set_new(o, "user", json_string(li->user));
	json_object_set_new(o, "pid", json_integer(li->pid));
	json_object_set_new(o, "job_pid", json_integer(li->job_pid));
	json_object_set_new(o, "command", json_string(li->command));
	json_object_set_new(o, "start_ms", json_integer(li->start_ms));
	json_object_set_new(o, "kind", json_string(li->exclusive ? "exclusive" : "share"));
	json_object_set_new(o, "share_mib",
	                    li->exclusive ? json_null() : json_integer((json_int_t)li->share_mib));
	json_object_set_new(o, "gpus", gpus);
	/* a reservation (gpuman reserve): held by nobody until then */
	json_object_set_new(o, "reservation", json_boolean(li->reservation));
	json_object_set_new(o, "expires_ms",
	                    li->reservation ? json_integer(li->expires_ms) : json_null());
	return o;
}

static void copy_str(char *dst, size_t len, json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	snprintf(dst, len, "%s", s ? s : "");
}

int record_lease_parse(json_t *o, struct lease_info *li)
{
	json_t *gpus = json_object_get(o, "gpus"), *g;
	size_t i;

	memset(li, 0, sizeof *li);
	copy_str(li->id, sizeof li->id, o, "id");
	li->uid = (unsigned)json_integer_value(json_object_get(o, "uid"));
	copy_str(li->user, sizeof li->user, o, "user");
	li->pid = (int)json_integer_value(json_object_get(o, "pid"));
	li->job_pid = (int)json_integer_value(json_object_get(o, "job_pid"));
	/* written by the transports beside the record (lease files, the
	 * broker's state), not shown to users */
	li->pid_start = (unsigned long long)json_integer_value(json_object_get(o, "pid_start"));
	li->job_start = (unsigned long long)json_integer_value(json_object_get(o, "job_start"));
	copy_str(li->command, sizeof li->command, o, "command");
	li->start_ms = json_integer_value(json_object_get(o, "start_ms"));
	li->exclusive = !strcmp(json_string_value(json_object_get(o, "kind")) ?: "", "exclusive");
	li->share_mib = (uint64_t)json_integer_value(json_object_get(o, "share_mib"));
	li->reservation = json_is_true(json_object_get(o, "reservation"));
	li->expires_ms = json_integer_value(json_object_get(o, "expires_ms"));
	li->gpu_count = json_array_size(gpus);
	li->uuids = calloc(li->gpu_count + 1, sizeof *li->uuids);
	li->indices = calloc(li->gpu_count + 1, sizeof *li->indices);
	li->migs = calloc(li->gpu_count + 1, sizeof *li->migs);
	if (!li->uuids || !li->indices || !li->migs) {
		record_lease_release(li);
		return -1;
	}
	json_array_foreach(gpus, i, g)
	{
		copy_str(li->uuids[i], sizeof li->uuids[i], g, "uuid");
		copy_str(li->migs[i], sizeof li->migs[i], g, "mig_uuid");
		li->indices[i] = (unsigned)json_integer_value(json_object_get(g, "index"));
	}
	return 0;
}

void record_lease_release(struct lease_info *li)
{
	free(li->uuids);
	free(li->indices);
	free(li->migs);
	li->uuids = NULL;
	li->indices = NULL;
	li->migs = NULL;
	li->gpu_count = 0;
}

/* A string that only some waiters have: left out when "". */
static void set_some(json_t *o, const char *key, const char *s)
{
	if (s[0])
		json_object_set_new(o, key, json_string(s));
}

json_t *record_waiter_json(const struct waiter_info *wi)
{
	json_t *o = json_object(), *cand = json_array();

	if (!o || !cand) {
		json_decref(o);
		json_decref(cand);
		return NULL;
	}
	for (size_t i = 0; i < wi->cand_count; i++)
		json_array_append_new(cand, json_string(wi->cand[i]));
	set_some(o, "name", wi->name);
	json_object_set_new(o, "uid", json_integer(wi->uid));
	set_some(o, "user", wi->user);
	json_object_set_new(o, "pid", json_integer(wi->pid));
	if (wi->pid_start)
		json_object_set_new(o, "pid_start", json_integer((json_int_t)wi->pid_start));
	json_object_set_new(o, "command", json_string(wi->command));
	json_object_set_new(o, "since_ms", json_integer(wi->since_ms));
	json_object_set_new(o, "summary", json_string(wi->summary));
	set_some(o, "limit", wi->limit);
	json_object_set_new(o, "candidates", cand);
	if (wi->req) {
		json_t *r = record_request_json(wi->req);

		if (!r) {
			json_decref(o);
			return NULL;
		}
		json_object_set_new(o, "request", r);
	}
	if (wi->usable)
		json_object_set(o, "usable", wi->usable);
	if (wi->usable_migs)
		json_object_set(o, "usable_migs", wi->usable_migs);
	set_some(o, "within", wi->within);
	return o;
}

int record_waiter_parse(json_t *o, struct waiter_info *wi)
{
	json_t *cand = json_object_get(o, "candidates"), *c, *r = json_object_get(o, "request");
	char err[GM_ERRBUF_SIZE];
	size_t i;

	memset(wi, 0, sizeof *wi);
	copy_str(wi->name, sizeof wi->name, o, "name");
	wi->uid = (unsigned)json_integer_value(json_object_get(o, "uid"));
	copy_str(wi->user, sizeof wi->user, o, "user");
	wi->pid = (int)json_integer_value(json_object_get(o, "pid"));
	wi->pid_start = (unsigned long long)json_integer_value(json_object_get(o, "pid_start"));
	copy_str(wi->command, sizeof wi->command, o, "command");
	wi->since_ms = json_integer_value(json_object_get(o, "since_ms"));
	copy_str(wi->summary, sizeof wi->summary, o, "summary");
	copy_str(wi->limit, sizeof wi->limit, o, "limit");
	copy_str(wi->within, sizeof wi->within, o, "within");
	wi->cand_count = json_array_size(cand);
	wi->cand = calloc(wi->cand_count + 1, sizeof *wi->cand);
	if (!wi->cand)
		return -1;
	json_array_foreach(cand, i, c)
	    snprintf(wi->cand[i], sizeof wi->cand[i], "%s", json_string_value(c) ?: "");
	wi->usable = json_incref(json_object_get(o, "usable"));
	wi->usable_migs = json_incref(json_object_get(o, "usable_migs"));
	if (r && !(wi->req = record_request_parse(r, NULL, err, sizeof err)))
		return 1;
	return 0;
}

void record_waiter_release(struct waiter_info *wi)
{
	free(wi->cand);
	gm_request_free(wi->req);
	json_decref(wi->usable);
	json_decref(wi->usable_migs);
	wi->cand = NULL;
	wi->cand_count = 0;
	wi->req = NULL;
	wi->usable = wi->usable_migs = NULL;
}

void registry_view_release(struct registry_view *view)
{
	for (size_t i = 0; i < view->lease_count; i++)
		record_lease_release(&view->leases[i]);
	for (size_t i = 0; i < view->waiter_count; i++)
		record_waiter_release(&view->waiters[i]);
	free(view->leases);
	free(view->waiters);
	free(view->more_waiters);
	free(view->more_leases);
	*view = (struct registry_view)REGISTRY_VIEW_INIT;
}
