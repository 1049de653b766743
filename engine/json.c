/*
 * json.c - a job's request as JSON text (the job store's "request" column)
 * and back, requests copied to add to, and jobs as JSON (job_json).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "parse.h"
#include "policy.h"
#include "record.h"
#include "util.h"
#include "internal.h"

/* ---- requests as JSON ------------------------------------------------- */

char *engine_request_json(const struct gm_request *req, int no_framework_env)
{
	json_t *o = record_request_json(req);
	char *text;

	if (!o)
		return NULL;
	if (no_framework_env)
		json_object_set_new(o, "no-framework-env", json_string(""));
	text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return text;
}

struct gm_request *engine_request_parse(const char *text, int *no_framework_env, char *err,
                                        size_t len)
{
	static const char *const skip[] = {"no-framework-env", NULL};
	json_t *o = text ? json_loads(text, 0, NULL) : NULL;
	struct gm_request *req = NULL;

	if (no_framework_env)
		*no_framework_env = 0;
	if (!json_is_object(o)) {
		gm_fail(GM_ERR_INVALID, err, len, "the job's request is unreadable");
		goto done;
	}
	req = record_request_parse(o, skip, err, len);
	if (req && no_framework_env)
		*no_framework_env = json_object_get(o, "no-framework-env") != NULL;
done:
	json_decref(o);
	return req;
}

/* A deep copy of req, to add exclusions or a minimum to. */
struct gm_request *engine_request_copy(const struct gm_request *req)
{
	struct gm_request *c = gm_request_new();
	const struct gpu_list *src[2] = {&req->only, &req->exclude};

	if (!c)
		return NULL;
	*c = *req;
	c->only = (struct gpu_list)GPU_LIST_INIT;
	c->exclude = (struct gpu_list)GPU_LIST_INIT;
	for (int l = 0; l < 2; l++) {
		struct gpu_list *dst = l ? &c->exclude : &c->only;

		dst->items = calloc(src[l]->count + 1, sizeof *dst->items);
		if (!dst->items)
			goto failed;
		for (size_t i = 0; i < src[l]->count; i++) {
			if (!(dst->items[i] = strdup(src[l]->items[i])))
				goto failed;
			dst->count++;
		}
	}
	return c;
failed:
	gm_request_free(c);
	return NULL;
}

int engine_request_exclude(struct gm_request *req, unsigned index)
{
	char **grown = realloc(req->exclude.items, (req->exclude.count + 2) * sizeof *grown);
	char num[16];

	if (!grown)
		return -1;
	req->exclude.items = grown;
	snprintf(num, sizeof num, "%u", index);
	if (!(grown[req->exclude.count] = strdup(num)))
		return -1;
	req->exclude.count++;
	return 0;
}

static json_t *opt_int(int has, int64_t v)
{
	return has ? json_integer(v) : json_null();
}

const char *job_where(const struct job *job, char *buf, size_t len)
{
	if (!job->gpus || !*job->gpus)
		snprintf(buf, len, "-");
	else if (job->node)
		snprintf(buf, len, "%s:%s", job->node, job->gpus);
	else
		snprintf(buf, len, "%s", job->gpus);
	return buf;
}

json_t *job_json(const struct job *job, const char *log_path, int batch)
{
	json_t *o = json_object(), *gpus = json_array(), *argv = NULL;
	const char *ip = job->gpus, *up = job->uuids;
	int64_t dur = job->start_ms && job->end_ms ? job->end_ms - job->start_ms : -1;

	while (ip && *ip) {
		json_t *g = json_object();
		size_t ul = up ? strcspn(up, ",") : 0;

		json_object_set_new(g, "index", json_integer(strtol(ip, NULL, 10)));
		json_object_set_new(g, "uuid", up ? json_stringn(up, ul) : json_null());
		json_array_append_new(gpus, g);
		ip += strcspn(ip, ",");
		ip += *ip == ',';
		if (up) {
			up += ul;
			up += *up == ',';
		}
	}
	if (job->argv)
		argv = json_loads(job->argv, 0, NULL);
	json_object_set_new(o, batch ? "task" : "id", json_integer(job->id));
	json_object_set_new(o, "state", json_string(job_state_name(job->state)));
	if (!batch) {
		json_t *after = json_array();

		json_object_set_new(o, "name", job->name ? json_string(job->name) : json_null());
		json_object_set_new(o, "priority", json_integer(job->priority));
		for (const char *p = job->after; p && *p;) {
			json_array_append_new(after, json_integer(strtoll(p, NULL, 10)));
			p += strcspn(p, ",");
			p += *p == ',';
		}
		json_object_set_new(o, "after", after);
		json_object_set_new(o, "notify",
		                    job->notify ? json_string(job->notify) : json_null());
		json_object_set_new(o, "time_limit_s",
		                    opt_int(job->time_limit_s > 0, job->time_limit_s));
		json_object_set_new(o, "array_task",
		                    opt_int(job->array_task >= 0, job->array_task));
	}
	json_object_set_new(o, "command", json_string(job->command ? job->command : ""));
	if (!batch) {
		json_object_set_new(o, "argv", argv ? argv : json_null());
		json_object_set_new(o, "cwd", job->cwd ? json_string(job->cwd) : json_null());
	} else {
		json_decref(argv);
	}
	json_object_set_new(o, "node", job->node ? json_string(job->node) : json_null());
	json_object_set_new(o, "gpus", gpus);
	if (!batch)
		json_object_set_new(o, "submit_ms", opt_int(job->submit_ms != 0, job->submit_ms));
	json_object_set_new(o, "start_ms", opt_int(job->start_ms != 0, job->start_ms));
	json_object_set_new(o, "end_ms", opt_int(job->end_ms != 0, job->end_ms));
	json_object_set_new(o, "duration_ms", opt_int(dur >= 0, dur));
	json_object_set_new(o, "exit_status", opt_int(job->has_exit, job->exit_status));
	json_object_set_new(o, "reason", job->reason ? json_string(job->reason) : json_null());
	json_object_set_new(o, "attempts", json_integer(job->attempts));
	json_object_set_new(o, "oom_requeues", json_integer(job->ooms));
	json_object_set_new(o, "peak_mem_mib", opt_int(job->has_peak, job->peak_mem_mib));
	json_object_set_new(o, "mean_util_pct",
	                    job->util_samples ? json_real(job->util_sum / job->util_samples)
	                                      : json_null());
	json_object_set_new(o, "util_samples", json_integer(job->util_samples));
	json_object_set_new(o, "log", log_path ? json_string(log_path) : json_null());
	return o;
}
