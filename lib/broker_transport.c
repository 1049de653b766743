/*
 * broker_transport.c - the broker (broker.h) as a lease transport
 * (transport.h): the glue between the library's registry handle and the
 * broker's client, so that neither calls the other.
 */
#include <unistd.h>
#include "broker.h"
#include "lease.h"
#include "registry.h"
#include "transport.h"

static enum gm_err b_acquire(struct registry *reg, struct gm_context *ctx,
                             const struct gm_request *req, const struct acquire_opts *opts,
                             struct gm_lease **out, char **explain, char *err, size_t len)
{
	return broker_acquire(reg->broker, &reg->place, ctx, req, opts, out, explain, err, len);
}

static enum gm_err b_read(struct registry *reg, struct registry_view *view, const char *upto,
                          char *err, size_t len)
{
	(void)upto; /* the broker's view is short to read whole */
	return broker_read(reg->broker, view, err, len);
}

static enum gm_err b_release_id(struct registry *reg, const char *id, char *err, size_t len)
{
	return broker_release_id(reg->broker, id, err, len);
}

static void b_release(struct gm_lease *lease)
{
	broker_release(lease);
	if (lease->fd >= 0)
		close(lease->fd);
	lease->fd = -1;
}

static int b_wake_fd(const struct registry *reg)
{
	return reg->place ? broker_place_fd(reg->place) : -1;
}

static void b_close(struct registry *reg)
{
	broker_place_free(reg->place);
	reg->place = NULL;
}

const struct lease_transport transport_broker = {
    "broker", TRANSPORT_GPU_HOURS, b_acquire, b_read, b_release_id, b_release, b_wake_fd, b_close,
};
