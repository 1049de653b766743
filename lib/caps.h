/*
 * caps.h - the admin's limits (config.h), applied where leases are granted:
 * the predicates the leasing rules (line.h) apply for both transports.
 */
#ifndef GM_CAPS_H
#define GM_CAPS_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "snapshot_types.h"

/*
 * Would count more GPUs take uid, which holds held already, beyond its
 * max_gpus?  0 no; 1 not now (what it holds must end first); 2 never (count
 * alone is beyond it).  why (may be NULL) gets a line for people.
 */
int caps_over(const struct config *cfg, unsigned uid, unsigned held, unsigned count, char *why,
              size_t len);

/*
 * The GPUs of snap that uid may never be given (keep_out, GPUs kept for
 * groups uid is not in): barred[pos] points at text[pos], the reason, or
 * is NULL.  Both arrays have snap->gpu_count entries.  Returns how many
 * are barred.
 */
size_t caps_barred(const struct config *cfg, unsigned uid, const struct gm_snapshot *snap,
                   const char **barred, char (*text)[160]);

/* Reservations one user may hold (or ask for), on either transport: no
 * process holds them, so nothing else bounds their number (the broker's
 * state file, the registry's directory and every read of it). */
#define CAPS_RESERVATIONS_PER_USER 64

/* May uid reserve GPUs for ms?  0 yes; -1 no, why says the limit and its
 * section. */
int caps_reserve_ok(const struct config *cfg, unsigned uid, int64_t ms, char *why, size_t len);

#endif
