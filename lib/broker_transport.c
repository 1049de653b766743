/*
 * broker_transport.c - the broker's client (broker.h) as a lease transport
 * (transport.h), for the handle lease_api.c opens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "broker.h"
#include "lease.h"
#include "transport.h"
#include "util.h"

static enum gm_err b_open(struct registry *reg, const char *sock, char *err, size_t len)
{
	const char *slash = strrchr(sock, '/');

	reg->broker = strdup(sock);
	if (!reg->broker)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	/* dir: the socket's, which exists, for callers that watch the
	 * registry for changes (the engine): they then look again on
	 * their own timer, as nothing is written there. */
	if (slash && slash != sock)
		snprintf(reg->dir, sizeof reg->dir, "%.*s", (int)(slash - sock), sock);
	else
		str_copy(reg->dir, sizeof reg->dir, "/");
	return GM_OK;
}

static enum gm_err b_acquire(struct registry *reg, struct gm_context *ctx,
                             const struct gm_request *req, const struct acquire_opts *opts,
                             struct gm_lease **out, char **explain, char *err, size_t len)
{
	return broker_acquire(reg->broker, &reg->place, ctx, req, opts, out, explain, err, len);
}

static enum gm_err b_read(struct registry *reg, struct registry_view *view, const char *upto,
                          const struct gm_snapshot *with, char *err, size_t len)
{
	(void)upto; /* the broker's view is short to read whole */
	return broker_read(reg->broker, with, view, err, len);
}

static enum gm_err b_release_id(struct registry *reg, const char *id, char *err, size_t len)
{
	return broker_release_id(reg->broker, id, err, len);
}

static int b_wake_fd(const struct registry *reg)
{
	return reg->place ? broker_place_fd(reg->place) : -1;
}

static void b_drop_place(struct registry *reg)
{
	broker_place_free(reg->place); /* the broker ends a closed waiter */
	reg->place = NULL;
}

static void b_close(struct registry *reg)
{
	b_drop_place(reg);
	free(reg->broker);
	reg->broker = NULL;
}

const struct lease_transport transport_broker = {
    "broker",     TRANSPORT_GPU_HOURS, b_open,    b_acquire,    b_read,
    b_release_id, broker_release,      b_wake_fd, b_drop_place, b_close,
};
