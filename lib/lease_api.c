/*
 * lease_api.c - leasing through the transport this machine has (lease_api.h):
 * the one place that chooses between the lease broker and the daemonless
 * registry, at registry_open(), and the gm_* lease API of gpuman.h on top.
 * Both transports sit below it (transport.h) and neither knows the other.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "broker_wire.h"
#include "config.h"
#include "context.h"
#include "lease.h"
#include "lease_api.h"
#include "registry.h"
#include "util.h"

/* The rule is broker_wanted()'s (broker_wire.h). */
static const struct lease_transport *transport_choose(char *sock, size_t len)
{
	return broker_wanted(sock, len) ? &transport_broker : &transport_files;
}

/* The transport that granted lease: a broker lease names its socket. */
static const struct lease_transport *transport_of_lease(const struct gm_lease *lease)
{
	return lease->broker ? &transport_broker : &transport_files;
}

enum gm_err registry_open(struct registry **out, char *err, size_t len)
{
	struct registry *reg;
	enum gm_err rc;
	char sock[PATH_MAX];

	*out = NULL;
	reg = calloc(1, sizeof *reg);
	if (!reg)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	reg->lock_fd = -1;
	reg->held_fd = -1;
	reg->transport = transport_choose(sock, sizeof sock);
	rc = reg->transport->open(reg, sock, err, len);
	/* With the broker, which enforces the caps, its clients read the file
	 * for what their own side keeps (max_lease ends run's and the queue's
	 * jobs, status marks leases past it). */
	if (rc == GM_OK)
		rc = config_load(&reg->cfg, 0, err, len);
	if (rc != GM_OK) {
		registry_close(reg);
		return rc;
	}
	*out = reg;
	return GM_OK;
}

void registry_close(struct registry *reg)
{
	if (!reg)
		return;
	reg->transport->close(reg);
	config_release(&reg->cfg);
	free(reg);
}

enum gm_err registry_acquire(struct registry *reg, struct gm_context *ctx,
                             const struct gm_request *req, const struct acquire_opts *opts,
                             struct gm_lease **out, char **explain, char *err, size_t len)
{
	return reg->transport->acquire(reg, ctx, req, opts, out, explain, err, len);
}

/* Leases held longer than their user's max_lease: run and the queue end
 * theirs, a library client's stays until its owner ends it. */
static void mark_over_limit(const struct registry *reg, struct registry_view *view)
{
	int64_t now = now_ms();

	for (size_t i = 0; i < view->lease_count; i++) {
		struct lease_info *l = &view->leases[i];
		int64_t limit = l->reservation
		                    ? 0
		                    : config_max_lease_ms(&reg->cfg, l->uid, l->limit_from,
		                                          sizeof l->limit_from);

		l->over_limit_ms = limit && now - l->start_ms > limit ? limit : 0;
	}
}

enum gm_err registry_read(struct registry *reg, struct registry_view *view, char *err, size_t len)
{
	return registry_read_with(reg, NULL, view, err, len);
}

enum gm_err registry_read_with(struct registry *reg, const struct gm_snapshot *with,
                               struct registry_view *view, char *err, size_t len)
{
	enum gm_err rc = reg->transport->read(reg, view, NULL, with, err, len);

	if (rc != GM_OK)
		return rc;
	mark_over_limit(reg, view);
	/* Not available here: said in status, not silently skipped. */
	view->gpu_hours_unenforced =
	    config_has_gpu_hours(&reg->cfg) && !(reg->transport->caps & TRANSPORT_GPU_HOURS);
	return GM_OK;
}

enum gm_err registry_release(struct registry *reg, const char *id, char *err, size_t len)
{
	return reg->transport->release_id(reg, id, err, len);
}

int registry_wake_fd(const struct registry *reg)
{
	return reg->transport->wake_fd(reg);
}

void registry_drop_place(struct registry *reg)
{
	reg->transport->drop_place(reg);
}

enum gm_err registry_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                          const struct gm_request *req, unsigned **indices, size_t *count,
                          long *mig_pos, char **explain, char *errbuf, size_t errlen)
{
	struct registry *reg = NULL;
	enum gm_err rc;

	if (registry_open(&reg, NULL, 0) != GM_OK)
		reg = NULL;
	rc = registry_files_pick(reg, ctx, snap, req, indices, count, mig_pos, explain, errbuf,
	                         errlen);
	registry_close(reg);
	return rc;
}

void registry_explain(char *errbuf, size_t errlen, char *explain)
{
	if (explain && *explain && errbuf && errlen) {
		size_t used = strlen(errbuf);

		snprintf(errbuf + used, errlen - used, ":\n%s", explain);
	}
	free(explain);
}

/* ---- the public lease API ----------------------------------------------- */

GM_API enum gm_err gm_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                           const struct gm_request *req, unsigned **indices, size_t *count,
                           char **explain)
{
	char why[512] = "";
	enum gm_err rc =
	    registry_pick(ctx, snap, req, indices, count, NULL, explain, why, sizeof why);

	/* Another error's reason (a broker that does not answer) goes where
	 * the caller reads why: gm_pick has no errbuf. */
	if (rc != GM_OK && rc != GM_ERR_UNAVAILABLE && rc != GM_ERR_NEVER && *why && explain &&
	    !*explain)
		*explain = strdup(why);
	return rc;
}

GM_API enum gm_err gm_acquire(struct gm_context *ctx, const struct gm_request *req,
                              struct gm_lease **out, char *errbuf, size_t errlen)
{
	struct registry *reg;
	char *explain = NULL;
	enum gm_err rc;

	*out = NULL;
	if (!ctx || !req)
		return gm_fail(GM_ERR_INVALID, errbuf, errlen, "no context or request");
	rc = registry_open(&reg, errbuf, errlen);
	if (rc != GM_OK)
		return rc;
	rc = registry_acquire(reg, ctx, req, NULL, out, &explain, errbuf, errlen);
	if (rc == GM_ERR_INTERRUPTED) {
		uint64_t count;

		/* consumed: the next gm_acquire waits again */
		if (read(ctx->cancel_fd, &count, sizeof count) < 0)
			count = 0;
	}
	registry_explain(errbuf, errlen, explain);
	registry_close(reg);
	return rc;
}

GM_API void gm_cancel(struct gm_context *ctx)
{
	uint64_t one = 1;

	/* write(2) is async-signal-safe: callable from a handler. */
	if (ctx && ctx->cancel_fd >= 0 && write(ctx->cancel_fd, &one, sizeof one) < 0)
		return;
}

GM_API void gm_lease_release(struct gm_lease *lease)
{
	if (!lease)
		return;
	transport_of_lease(lease)->release(lease);
	lease_free(lease);
}
