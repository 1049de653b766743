/*
 * reserve_api.c - reservations in the public API (gm_reserve,
 * gm_release_reservation, gm_reservations_json): the registry's own
 * registry_acquire with reserve_ms, registry_release and registry_read,
 * which serve the registry and the broker alike, as `gpuman reserve` and
 * `gpuman release` use them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "context.h"
#include "lease.h"
#include "listing.h"
#include "parse.h"
#include "policy.h"
#include "lease_api.h"
#include "util.h"

struct gm_reservation {
	char id[64];
	size_t gpu_count;
	unsigned *indices;
	char (*uuids)[96];
	char *cuda_visible;
	char *indices_text;
	int64_t expires_ms;
};

GM_API void gm_reservation_free(struct gm_reservation *r)
{
	if (!r)
		return;
	free(r->indices);
	free(r->uuids);
	free(r->cuda_visible);
	free(r->indices_text);
	free(r);
}

/* This process's copy of a granted reservation's lease. */
static struct gm_reservation *copy_lease(const struct gm_lease *l, int64_t expires_ms)
{
	struct gm_reservation *r = calloc(1, sizeof *r);

	if (!r)
		return NULL;
	str_copy(r->id, sizeof r->id, l->rec.id);
	r->gpu_count = l->rec.gpu_count;
	r->expires_ms = expires_ms;
	r->indices = calloc(r->gpu_count ? r->gpu_count : 1, sizeof *r->indices);
	r->uuids = calloc(r->gpu_count ? r->gpu_count : 1, sizeof *r->uuids);
	r->cuda_visible = strdup(l->cuda_visible ? l->cuda_visible : "");
	r->indices_text = strdup(l->indices_text ? l->indices_text : "");
	if (!r->indices || !r->uuids || !r->cuda_visible || !r->indices_text) {
		gm_reservation_free(r);
		return NULL;
	}
	memcpy(r->indices, l->rec.indices, r->gpu_count * sizeof *r->indices);
	for (size_t i = 0; i < r->gpu_count; i++)
		str_copy(r->uuids[i], sizeof r->uuids[i], gm_lease_gpu_uuid(l, i));
	return r;
}

/* The expiry the registry (or broker) recorded for id; fallback when it
 * cannot be read back (the grant is done either way). */
static int64_t recorded_expiry(struct registry *reg, const char *id, int64_t fallback)
{
	struct registry_view view = REGISTRY_VIEW_INIT;
	int64_t at = fallback;

	if (registry_read(reg, &view, NULL, 0) == GM_OK)
		for (size_t i = 0; i < view.lease_count; i++)
			if (view.leases[i].reservation && !strcmp(view.leases[i].id, id))
				at = view.leases[i].expires_ms;
	registry_view_release(&view);
	return at;
}

GM_API enum gm_err gm_reserve(struct gm_context *ctx, const struct gm_request *req,
                              const char *duration, struct gm_reservation **out, char *errbuf,
                              size_t errlen)
{
	return reserve_telling(ctx, req, duration, NULL, NULL, out, errbuf, errlen);
}

enum gm_err reserve_telling(struct gm_context *ctx, const struct gm_request *req,
                            const char *duration, void (*on_wait)(void *data, const char *why),
                            void *data, struct gm_reservation **out, char *errbuf, size_t errlen)
{
	struct acquire_opts opts = {.on_wait = on_wait, .on_wait_data = data};
	struct registry *reg = NULL;
	struct gm_lease *lease = NULL;
	char *explain = NULL, why[128] = "";
	int64_t ms = 0;
	enum gm_err rc;

	if (out)
		*out = NULL;
	if (!ctx || !req || !out)
		return gm_fail(GM_ERR_INVALID, errbuf, errlen, "no context, request or out");
	if (!duration || parse_duration_ms(duration, &ms, why, sizeof why) < 0 || ms <= 0)
		return gm_fail(GM_ERR_INVALID, errbuf, errlen,
		               "reservation duration '%s': %s (a duration such as 90m or 4h; a "
		               "reservation always ends)",
		               duration ? duration : "", why[0] ? why : "must be more than 0");
	if (req->mig[0])
		return gm_fail(GM_ERR_INVALID, errbuf, errlen,
		               "mig '%s': MIG slices cannot be reserved yet; reserve the GPU",
		               req->mig);
	rc = registry_open(&reg, errbuf, errlen);
	if (rc != GM_OK)
		return rc;
	opts.reserve_ms = ms;
	rc = registry_acquire(reg, ctx, req, &opts, &lease, &explain, errbuf, errlen);
	if (rc == GM_ERR_INTERRUPTED) {
		uint64_t count;

		/* consumed, as gm_acquire does: the next call waits again */
		if (read(ctx->cancel_fd, &count, sizeof count) < 0)
			count = 0;
	}
	if (rc == GM_OK) {
		*out = copy_lease(lease, recorded_expiry(reg, lease->rec.id, now_ms() + ms));
		if (!*out) {
			/* Out of memory after the grant: give the GPUs back. */
			registry_release(reg, lease->rec.id, NULL, 0);
			rc = gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory");
		}
		/* The reservation outlives this process: close, remove nothing. */
		lease_detach(lease);
	}
	registry_explain(errbuf, errlen, explain);
	registry_close(reg);
	return rc;
}

GM_API const char *gm_reservation_id(const struct gm_reservation *r)
{
	return r->id;
}
GM_API size_t gm_reservation_gpu_count(const struct gm_reservation *r)
{
	return r->gpu_count;
}
GM_API unsigned gm_reservation_gpu_index(const struct gm_reservation *r, size_t i)
{
	return i < r->gpu_count ? r->indices[i] : 0;
}
GM_API const char *gm_reservation_gpu_uuid(const struct gm_reservation *r, size_t i)
{
	return i < r->gpu_count ? r->uuids[i] : "";
}
GM_API const char *gm_reservation_cuda_visible(const struct gm_reservation *r)
{
	return r->cuda_visible;
}
GM_API const char *gm_reservation_indices(const struct gm_reservation *r)
{
	return r->indices_text;
}
GM_API int64_t gm_reservation_expires_ms(const struct gm_reservation *r)
{
	return r->expires_ms;
}

GM_API enum gm_err gm_release_reservation(const char *id, char *errbuf, size_t errlen)
{
	struct registry *reg = NULL;
	enum gm_err rc;

	if (!id)
		return gm_fail(GM_ERR_INVALID, errbuf, errlen, "no reservation id");
	rc = registry_open(&reg, errbuf, errlen);
	if (rc == GM_OK)
		rc = registry_release(reg, id, errbuf, errlen);
	registry_close(reg);
	return rc;
}

GM_API enum gm_err gm_reservations_json(char **json, char *errbuf, size_t errlen)
{
	struct registry *reg;
	struct registry_view view = REGISTRY_VIEW_INIT;
	json_t *all = NULL, *mine = NULL, *o = NULL, *l;
	size_t i;
	enum gm_err rc;

	*json = NULL;
	rc = registry_open(&reg, errbuf, errlen);
	if (rc != GM_OK)
		return rc;
	rc = registry_read(reg, &view, errbuf, errlen);
	if (rc == GM_OK) {
		/* One schema with gm_leases_json: its leases, reservations only. */
		all = listing_leases_json(&view);
		mine = json_array();
		json_array_foreach(all, i, l)
		{
			if (json_is_true(json_object_get(l, "reservation")))
				json_array_append(mine, l);
		}
		o = json_pack("{s:O}", "reservations", mine);
		*json = o ? json_dumps(o, JSON_COMPACT) : NULL;
		if (!*json)
			rc = gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory");
	}
	json_decref(o);
	json_decref(mine);
	json_decref(all);
	registry_view_release(&view);
	registry_close(reg);
	return rc;
}
