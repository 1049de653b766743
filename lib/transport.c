/*
 * transport.c - choosing the lease transport (transport.h), once.
 */
#include "broker.h"
#include "lease.h"
#include "transport.h"

const struct lease_transport *transport_choose(char *sock, size_t len)
{
	return broker_wanted(sock, len) ? &transport_broker : &transport_files;
}

const struct lease_transport *transport_of_lease(const struct gm_lease *lease)
{
	/* A broker lease names its socket (lease.h). */
	return lease->broker ? &transport_broker : &transport_files;
}
