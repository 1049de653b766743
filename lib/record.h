/*
 * record.h - the JSON form of the records both lease transports and the
 * job store pass around, one codec each: a request (the broker's wire, the
 * registry's tickets, the queue's stored jobs), the GPUs an inherited
 * CUDA_VISIBLE_DEVICES lets a caller use (the wire and the tickets), a
 * lease and a waiter (lease_view.h).
 */
#ifndef GM_RECORD_H
#define GM_RECORD_H

#include <stddef.h>
#include <jansson.h>
#include "gpuman.h"
#include "snapshot_types.h"

/* A request as gm_request_set() keys and string values ("n", "by",
 * "min-free", "max-util", "only", "exclude", "mem", "idle", "mig"); the
 * wait is not part of it.  New reference; NULL on out-of-memory. */
json_t *record_request_json(const struct gm_request *req);

/* What the line shows of a queued job that keeps its place in it
 * (keep_place): the line is everyone's to read, a queue its user's alone;
 * its lease names its command once it runs. */
#define RECORD_QUEUED_JOB "its next queued job or batch task"

/* What a place kept in a line (acquire_opts.keep_place) waits for: the
 * request as text and the command; another key gives the place up.
 * Caller frees; NULL on out-of-memory. */
char *record_place_key(const struct gm_request *req, const char *command);

/* Back: each key through gm_request_set(), so what the command line
 * refuses is refused here; a key in skip (NULL-terminated; may be NULL) is
 * passed over.  A new request (caller frees), or NULL with err naming the
 * bad key or value. */
struct gm_request *record_request_parse(json_t *o, const char *const *skip, char *err, size_t len);

/* Per snapshot position (per slice), pick_env's usable values as an object
 * by UUID, and back (NULL object: NULL, everything usable; caller frees). */
json_t *record_usable_json(const unsigned char *usable, const struct gm_snapshot *snap);
json_t *record_usable_migs_json(const unsigned char *mig_usable, const struct gm_snapshot *snap);
unsigned char *record_usable_from(json_t *o, const struct gm_snapshot *snap);
unsigned char *record_usable_migs_from(json_t *o, const struct gm_snapshot *snap);

/*
 * A lease: one record for the registry's lease files, the broker's wire
 * (its view) and state file, and status --json / serve / the Python
 * binding: "id", "uid", "user", "pid", "job_pid", "command", "start_ms",
 * "kind" ("exclusive" or "share"), "share_mib" (null when exclusive),
 * "gpus" ([{"index", "uuid", "mig_uuid" (null for a whole GPU)}]),
 * "reservation" and "expires_ms" (null unless a reservation).  Each
 * transport adds what only it keeps (a file's "pidns", the state file's
 * token).  New reference; NULL on out-of-memory.
 */
struct lease_info;
json_t *record_lease_json(const struct lease_info *li);

/* Back, into *li (its arrays allocated; free with record_lease_release).
 * Fields are read as they are; whoever reads a lease from someone else
 * checks it (the registry believes a file's owner, not its "uid").
 * 0, or -1 on out-of-memory. */
int record_lease_parse(json_t *o, struct lease_info *li);
void record_lease_release(struct lease_info *li);

/*
 * A waiter: one record for the registry's tickets and the broker's view:
 * "name" (its place; sorts in arrival order), "uid", "user", "pid",
 * "command", "since_ms", "summary" (for people: "2 GPUs exclusive", never
 * read back for placing), "limit" (why its user's cap keeps it waiting),
 * "candidates" (UUIDs of the GPUs it may be placed on), "request"
 * (record_request_json: what the rules place it by), "usable" and
 * "usable_migs" (record_usable_json), "within" (a reservation of its
 * user's it asks inside).  Strings that are "" and a NULL request or
 * usable set are left out.  New reference; NULL on out-of-memory.
 */
struct waiter_info;
json_t *record_waiter_json(const struct waiter_info *wi);

/* Back, into *wi (free with record_waiter_release): 0; 1 when its
 * "request" does not parse (wi->req NULL, the rest read); -1 on
 * out-of-memory.  As for a lease, whoever reads it from someone else
 * checks it. */
int record_waiter_parse(json_t *o, struct waiter_info *wi);
void record_waiter_release(struct waiter_info *wi);

#endif
