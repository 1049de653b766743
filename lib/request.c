/*
 * request.c - requests built from command-line style options, and back:
 * gm_request_set parses exactly as the command line does, and
 * gm_request_text prints a request as options that parse to the same one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parse.h"
#include "policy.h"
#include "util.h"

GM_API struct gm_request *gm_request_new(void)
{
	struct gm_request *req = calloc(1, sizeof *req);

	if (!req)
		return NULL;
	req->count = 1;
	req->by = GM_BY_MEMORY;
	req->wait_ms = -1;
	return req;
}

GM_API void gm_request_free(struct gm_request *req)
{
	if (!req)
		return;
	gpu_list_release(&req->only);
	gpu_list_release(&req->exclude);
	free(req);
}

/* Parse into a temporary and swap on success, so a bad value leaves the
 * request as it was. */
GM_API enum gm_err gm_request_set(struct gm_request *req, const char *key, const char *value,
                                  char *errbuf, size_t errlen)
{
	char why[256] = "";
	const char *v = value ? value : "";
	int rc = 0;

	if (!req || !key)
		return gm_fail(GM_ERR_INVALID, errbuf, errlen, "no request or option given");
	if (!strcmp(key, "n")) {
		unsigned count;

		rc = parse_count(v, &count, why, sizeof why);
		if (rc == 0 && count > 1 && req->mig[0]) {
			snprintf(why, sizeof why,
			         "--mig takes one slice per job: CUDA uses one MIG "
			         "device per process");
			rc = -1;
		}
		if (rc == 0)
			req->count = count;
	} else if (!strcmp(key, "by")) {
		int by = policy_from_name(v);

		if (by < 0) {
			snprintf(
			    why, sizeof why,
			    "unknown policy '%s' (use memory, memory-rate, power, util or index)",
			    v);
			rc = -1;
		} else {
			req->by = (enum gm_policy)by;
		}
	} else if (!strcmp(key, "min-free")) {
		struct gm_size size;

		rc = parse_size(v, &size, why, sizeof why);
		if (rc == 0) {
			req->has_min_free = 1;
			req->min_free = size;
		}
	} else if (!strcmp(key, "max-util")) {
		unsigned pct;

		rc = parse_percent(v, &pct, why, sizeof why);
		if (rc == 0) {
			req->has_max_util = 1;
			req->max_util = pct;
		}
	} else if (!strcmp(key, "only") || !strcmp(key, "exclude")) {
		struct gpu_list list = GPU_LIST_INIT;
		struct gpu_list *dst = key[0] == 'o' ? &req->only : &req->exclude;

		rc = gpu_list_parse(v, &list, why, sizeof why);
		if (rc == 0) {
			gpu_list_release(dst);
			*dst = list;
		}
	} else if (!strcmp(key, "exclusive")) {
		req->share = 0;
	} else if (!strcmp(key, "mem")) {
		struct gm_size size;

		rc = parse_size(v, &size, why, sizeof why);
		if (rc == 0 && req->mig[0]) {
			snprintf(why, sizeof why, "--mig takes a whole slice, never a share of it");
			rc = -1;
		}
		if (rc == 0 && (size.is_pct ? size.pct == 0 : size.mib == 0)) {
			snprintf(why, sizeof why,
			         "a share of nothing reserves nothing (use --exclusive)");
			rc = -1;
		}
		if (rc == 0) {
			req->share = 1;
			req->mem = size;
		}
	} else if (!strcmp(key, "mig")) {
		size_t len = strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789.+");

		if (!*v || v[len] || len >= sizeof req->mig) {
			snprintf(why, sizeof why,
			         "not a MIG profile (e.g. 1g.10gb, 3g.40gb, or any)");
			rc = -1;
		} else if (req->share) {
			snprintf(why, sizeof why, "a slice is never shared (drop --mem)");
			rc = -1;
		} else if (req->count > 1) {
			snprintf(why, sizeof why,
			         "one slice per job: CUDA uses one MIG device "
			         "per process (drop -n)");
			rc = -1;
		} else {
			strcpy(req->mig, v);
		}
	} else if (!strcmp(key, "idle")) {
		req->idle = 1;
	} else if (!strcmp(key, "wait")) {
		int64_t ms = -1;

		if (*v)
			rc = parse_duration_ms(v, &ms, why, sizeof why);
		if (rc == 0) {
			req->has_wait = 1;
			req->wait_ms = ms;
		}
	} else {
		return gm_fail(GM_ERR_INVALID, errbuf, errlen, "unknown request option '%s'", key);
	}
	if (rc < 0)
		return gm_fail(GM_ERR_INVALID, errbuf, errlen, "%s%s '%s': %s", key[1] ? "--" : "-",
		               key, v, why);
	return GM_OK;
}

static int list_dup(struct gpu_list *dst, const struct gpu_list *src)
{
	dst->count = 0;
	dst->items = src->count ? calloc(src->count, sizeof *dst->items) : NULL;
	if (src->count && !dst->items)
		return -1;
	for (size_t i = 0; i < src->count; i++) {
		dst->items[i] = strdup(src->items[i]);
		if (!dst->items[i])
			return -1;
		dst->count++;
	}
	return 0;
}

GM_API struct gm_request *gm_request_dup(const struct gm_request *req)
{
	struct gm_request *copy;

	if (!req || !(copy = malloc(sizeof *copy)))
		return NULL;
	*copy = *req;
	if (list_dup(&copy->only, &req->only) < 0 || list_dup(&copy->exclude, &req->exclude) < 0) {
		/* a failed copy must not free the original's lists */
		if (copy->only.items == req->only.items)
			copy->only = (struct gpu_list)GPU_LIST_INIT;
		if (copy->exclude.items == req->exclude.items)
			copy->exclude = (struct gpu_list)GPU_LIST_INIT;
		gm_request_free(copy);
		return NULL;
	}
	return copy;
}

/* A SIZE as one token that parse_size reads back: "50%", "8G", "512M". */
static void size_text(char *buf, size_t len, const struct gm_size *size)
{
	if (size->is_pct)
		snprintf(buf, len, "%u%%", size->pct);
	else if (size->mib && size->mib % (1024 * 1024) == 0)
		snprintf(buf, len, "%" PRIu64 "T", size->mib / (1024 * 1024));
	else if (size->mib && size->mib % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 "G", size->mib / 1024);
	else
		snprintf(buf, len, "%" PRIu64 "M", size->mib);
}

/* A DURATION that parse_duration_ms reads back: "1h30m", "90s"... "1500ms". */
void duration_text(char *buf, size_t len, int64_t ms)
{
	static const struct {
		int64_t ms;
		char unit;
	} units[] = {
	    {86400000, 'd'},
	    {3600000, 'h'},
	    {60000, 'm'},
	    {1000, 's'},
	};
	size_t used = 0;

	buf[0] = '\0';
	if (ms == 0 || ms % 1000) {
		snprintf(buf, len, "%" PRId64 "ms", ms);
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(units) && used < len; i++)
		if (ms >= units[i].ms) {
			used += (size_t)snprintf(buf + used, len - used, "%" PRId64 "%c",
			                         ms / units[i].ms, units[i].unit);
			ms %= units[i].ms;
		}
}

struct text {
	char *buf;
	size_t len, cap;
	int failed;
};

static void text_add(struct text *t, const char *opt, const char *sep, const char *value)
{
	size_t need = strlen(opt) + strlen(sep) + strlen(value) + 2;
	char *grown;

	if (t->failed)
		return;
	if (t->len + need > t->cap) {
		t->cap = (t->len + need) * 2;
		grown = realloc(t->buf, t->cap);
		if (!grown) {
			t->failed = 1;
			return;
		}
		t->buf = grown;
	}
	t->len += (size_t)sprintf(t->buf + t->len, "%s%s%s%s", t->len ? " " : "", opt, sep, value);
}

static void list_text(struct text *t, const char *opt, const struct gpu_list *list)
{
	size_t need = 1;
	char *joined, *p;

	if (!list->count)
		return;
	for (size_t i = 0; i < list->count; i++)
		need += strlen(list->items[i]) + 1;
	joined = p = malloc(need);
	if (!joined) {
		t->failed = 1;
		return;
	}
	for (size_t i = 0; i < list->count; i++)
		p += sprintf(p, "%s%s", i ? "," : "", list->items[i]);
	text_add(t, opt, " ", joined);
	free(joined);
}

GM_API char *gm_request_text(const struct gm_request *req)
{
	struct text t = {NULL, 0, 0, 0};
	char value[64];

	if (!req)
		return NULL;
	t.buf = calloc(1, 1);
	t.failed = !t.buf;
	if (req->count != 1) {
		snprintf(value, sizeof value, "%u", req->count);
		text_add(&t, "-n", " ", value);
	}
	if (req->by != GM_BY_MEMORY)
		text_add(&t, "--by", " ", policy_name(req->by));
	if (req->has_min_free) {
		size_text(value, sizeof value, &req->min_free);
		text_add(&t, "--min-free", " ", value);
	}
	if (req->has_max_util) {
		snprintf(value, sizeof value, "%u", req->max_util);
		text_add(&t, "--max-util", " ", value);
	}
	list_text(&t, "--only", &req->only);
	list_text(&t, "--exclude", &req->exclude);
	if (req->share) {
		size_text(value, sizeof value, &req->mem);
		text_add(&t, "--mem", " ", value);
	}
	if (req->idle)
		text_add(&t, "--idle", "", "");
	if (req->mig[0])
		text_add(&t, "--mig", " ", req->mig);
	if (req->has_wait) {
		/* optional argument: only --wait=VALUE parses as one */
		duration_text(value, sizeof value, req->wait_ms);
		text_add(&t, "--wait", req->wait_ms >= 0 ? "=" : "",
		         req->wait_ms >= 0 ? value : "");
	}
	if (t.failed) {
		free(t.buf);
		return NULL;
	}
	return t.buf;
}
