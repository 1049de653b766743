/*
 * listing.h - the live leases and waiters of a registry view as JSON arrays
 * (new references), the schema of `gpuman status --json`.
 */
#ifndef GM_LISTING_H
#define GM_LISTING_H

#include <jansson.h>
#include "registry.h"

json_t *listing_leases_json(const struct registry_view *view);
json_t *listing_waiters_json(const struct registry_view *view);

#endif
