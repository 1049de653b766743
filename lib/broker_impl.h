/*
 * broker_impl.h - private to the broker client's files (broker.c,
 * broker_view.c).  Callers use broker.h.
 */
#ifndef GM_BROKER_IMPL_H
#define GM_BROKER_IMPL_H

#include <stddef.h>
#include <jansson.h>
#include "gpuman.h"

/*
 * One request's start: a connection to the broker at path and its message
 * begun ({"op": op} in msg).  buf and msg are the caller's, allocated or
 * NULL (then GM_ERR_NOMEM).  The descriptor, or -1 with *rc and err set
 * (GM_ERR_STATE where the broker cannot be reached, as broker_connect says).
 */
int broker_request_start(const char *path, const void *buf, json_t *msg, const char *op,
                         enum gm_err *rc, char *err, size_t len);

#endif
