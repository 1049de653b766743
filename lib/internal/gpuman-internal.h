/*
 * gpuman-internal.h - what gpuman's own programs (cli/, serve/) use of the
 * library beyond the public include/gpuman.h.  Not installed, no ABI: it may
 * change with every commit.  The CLI is built on include/ and this folder
 * only (no -Ilib), so each private header it leans on is named here, with
 * the reason the public API does not serve yet; a header that leaves this
 * list because gpuman.h gained what it was needed for is the goal.
 *
 * lib/ and engine/ include their headers directly; nothing in lib/ includes
 * this file.
 */
#ifndef GM_INTERNAL_H
#define GM_INTERNAL_H

#include "gpuman.h"

/* The snapshot's layouts (struct gm_gpu, gm_proc, gm_mig, gm_snapshot):
 * every table the CLI prints reads their fields; the public header has
 * accessors for some only. */
#include "../snapshot_types.h"
/* snapshot_take (batch and status take one snapshot, no gm_context), the
 * JSON forms of a snapshot, a GPU, a process and a slice (json_text,
 * snapshot_*_json), state and compute-mode names, CUDA index and position. */
#include "../snapshot.h"
/* registry_open/_close/_read/_pick/_acquire (over either transport) and
 * struct registry_view: the dispatcher, batch, run, pick and status hold
 * the lease handle itself (its wake-up descriptor, its view of leases and
 * waiters); gpuman.h has a context-wide acquire only. */
#include "../lease_api.h"
/* struct gm_lease's fields (exclusive, note) that run prints. */
#include "../lease.h"
/* policy_choose/_candidate/_result_release: the broker daemon places its
 * clients' requests with the library's own policy. */
#include "../policy.h"
/* pick_env_* and pick_explain: the environment pick prints, and why. */
#include "../pick.h"
/* parse_count, parse_duration_ms, size_mib, size_format: option values the
 * CLI reads in the library's units and words. */
#include "../parse.h"
/* text_printable: what the CLI echoes of a user's string. */
#include "../text.h"
/* spell_*: "did you mean" for a mistyped command or option. */
#include "../spell.h"
/* now_ms, monotonic_ms, str_copy. */
#include "../util.h"
/* proctree_*: which processes belong to a lease (status, the daemon). */
#include "../proctree.h"
/* waste_*: the idle-lease report of status, top and waste. */
#include "../waste.h"
/* listing_*: status --json and the views' lease of each process and
 * waste report (status, ps, top, waste, serve). */
#include "../listing.h"
/* config_load/_release: gpuman.conf's limits, which submit checks early. */
#include "../config.h"
/* caps_over, caps_barred, caps_reserve_ok: the admin's limits, which the
 * daemon applies with the registry's own functions. */
#include "../caps.h"
/* line_decide and friends: the leasing rules the broker serves its line
 * with; record_*: the one JSON codec of a request. */
#include "../line.h"
#include "../record.h"
/* broker_take_line and the broker's paths: the daemon's side of the
 * broker's protocol.  broker_wanted and broker_fence_*: run, reserve and
 * the PAM hook place their jobs and shells in the broker's fence. */
#include "../broker_wire.h"
#include "../broker.h"
/* The GPU field table: serve's metrics are its rows. */
#include "../gpu_fields.h"
/* context_open_local and snapshot_wire_encode: the broker holds the
 * machine's NVML session and sends its readings to clients. */
#include "../context.h"
#include "../snapshot_wire.h"
/* slurm_*: batch --slurm's allocation (issue 6's back-end). */
#include "../slurm.h"
/* fence_*: the broker's kernel fence of each lease's job (broker/fence.c). */
#include "../fence.h"

#endif
