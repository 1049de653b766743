/*
 * snapshot_wire.h - a gm_snapshot on the lease broker's wire (the
 * "snapshot" op of broker_wire.h): one encoder, for the broker, and one
 * decoder, for its clients.  Lossless, unlike snapshot_json().
 */
#ifndef GM_SNAPSHOT_WIRE_H
#define GM_SNAPSHOT_WIRE_H

#include <stddef.h>
#include <jansson.h>
#include "gpuman.h"
#include "snapshot_types.h"

/* snap as a JSON object (a new reference). */
json_t *snapshot_wire_encode(const struct gm_snapshot *snap);

/* o back into a new snapshot (*out, freed with gm_snapshot_free);
 * GM_ERR_STATE when o is not one, GM_ERR_NOMEM. */
enum gm_err snapshot_wire_decode(const json_t *o, struct gm_snapshot **out, char *errbuf,
                                 size_t errlen);

#endif
