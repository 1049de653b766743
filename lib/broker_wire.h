/*
 * broker_wire.h - the lease broker's protocol, which its clients (lib/broker*.c)
 * and the broker itself (broker/) share: where it lives, which transport a
 * caller takes (the rule), connecting to it and the framing of its messages.
 * Nothing here knows a lease or the registry, so both the lease transports'
 * chooser (lease_api.c) and the GPU readings (snapshot.c) may ask it.
 *
 * framing both sides share.
 *
 * The broker is one process started by root that owns the line and the
 * leases of the machine.  A caller connects to its Unix socket; the kernel
 * tells the broker who it is (SO_PEERCRED), so nothing a caller writes can
 * make it somebody else.  One connection carries one request and, once
 * granted, *is* the lease: the job inherits the descriptor, and the lease
 * ends when the last process holding it closes it (release, exit, kill -9),
 * which the broker sees as end-of-file at once.
 *
 * Messages are JSON objects, one per line, each with "v": BROKER_VERSION
 * and "op"; no line is longer than BROKER_MAX_LINE bytes.
 *
 *   client -> broker
 *     {"op":"acquire","request":{"n":"2","mem":"8G",...},"wait":true,
 *      "command":"...","usable":{"GPU-...":1,...},"reserve_ms":N}   the
 *                              request, as gm_request_set() keys and
 *                              values; with reserve_ms, a reservation
 *                              that outlives the connection until then;
 *                              with "within":ID, inside the caller's own
 *                              reservation ID, whose GPUs it may then use;
 *                              "queued_job":true, a queue's next job, which
 *                              the view shows as RECORD_QUEUED_JOB
 *     {"op":"release","id":ID}  end one's own reservation (root: anyone's)
 *     {"op":"job","pid":N}      the lease's job was started (for restores)
 *     {"op":"release"}          end the lease now, whoever else holds it
 *     {"op":"release","id":ID,"token":T}   the same from a new connection
 *                              (after the broker was restarted)
 *     {"op":"view"}             every lease and waiter, for status
 *     {"op":"snapshot","max_age_ms":N}   the GPUs as the broker's NVML
 *                              session read them, no older than N ms
 *                              (default BROKER_SNAPSHOT_MAX_AGE_MS; -1:
 *                              any reading), lib/snapshot_wire.c's form;
 *                              "view":true: the view's answer follows
 *                              on the next line (one round trip for a
 *                              look at the GPUs and their leases)
 *     {"op":"fence","pid":N}    place process N (stopped before its exec)
 *                              in the lease's cgroup, whose device filter
 *                              refuses the GPUs the lease does not hold;
 *                              "keep":true: N is the lease's supervisor,
 *                              moved back out alive when the lease ends;
 *                              on a new connection with "id":RESV, into the
 *                              cgroup of one's own reservation (a shell)
 *     {"op":"preplace","pid":N}   in the line, where "queued" said
 *                              "preplace":true: N, the job started early,
 *                              waits for its grant in the cgroup of its
 *                              lease-to-be, refused every GPU; the grant
 *                              says "placed":true once the lease's rule is
 *                              there (else the client asks "fence");
 *                              "keep":true: N is a supervisor, as fence's.
 *                              No answer; ignored once granted
 *     {"op":"session","pid":N,"uid":U}   root only (the PAM hook): login
 *                              session N of U opens only U's leases' GPUs
 *   broker -> client
 *     {"op":"queued","position":N,"why":"...","place":T[,"preplace":true]}
 *     {"op":"granted","token":T,...}   the lease's record (record.h: "id",
 *                              "share_mib", "gpus":[{"index","uuid",
 *                              "mig_uuid"}], ...), each GPU with its
 *                              "total_mib" [,"placed":true]
 *     {"op":"refused","code":N,"error":"...","explain":"..."}  (code: gm_err)
 *     {"op":"view","leases":[...],"waiters":[...]}   a reservation's lease
 *                              has "reservation":true and "expires_ms"; a
 *                              waiter held back by its cap a "limit".  The
 *                              first 256 waiters and 2048 leases are
 *                              listed; the rest are counted per user in
 *                              "more_waiters":[{"uid","user","count"}] and
 *                              "more_leases" (with "gpus")
 *   A connection over one of the broker's caps (connections of a user, or
 *   in all) is answered "refused" at once and closed; the client finds the
 *   reason in its socket (broker_send_failed).  Numbers on the wire are
 *   range-checked as the command line's are: reserve_ms from 1 to
 *   MAX_DURATION_MS.
 *     {"op":"released"}
 *     {"op":"snapshot","age_ms":A,"snapshot":{...}[,"stale":"..."]}  the
 *                              reading, A ms old when sent; "stale" says
 *                              why it is older than asked (the driver did
 *                              not answer within BROKER_SNAPSHOT_WAIT_MS).
 *                              Another user's processes are what the
 *                              caller's own /proc shows of them (hidepid).
 *     {"op":"fenced","enforced":true,"mechanism":"..."}, or
 *     {"op":"fenced","enforced":false,"why":"..."}  (no fence here: as before);
 *                              a refusal ends the lease
 *   the view has "placement": {"enforced":B,"mechanism":..., "why":...}
 */
#ifndef GM_BROKER_WIRE_H
#define GM_BROKER_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"

struct json_t;

#define BROKER_VERSION 1
#define BROKER_MAX_LINE 16384
/* The broker's home: a directory only root can write, so that nobody else
 * can put a socket where clients look (the registry's directory is
 * everyone's).  The broker's state file lives there too (0600). */
#define BROKER_DIR "/run/gpuman-broker"
#define BROKER_DEFAULT_SOCKET BROKER_DIR "/gpuman.sock"
/* Its leases, kept across restarts (gpuman-broker --state). */
#define BROKER_DEFAULT_STATE BROKER_DIR "/leases.json"
/* A reading the broker hands out is at most this old: asked after that,
 * it reads the GPUs again (off its event loop) ... */
#define BROKER_SNAPSHOT_MAX_AGE_MS 500
/* ... and waits this long for the driver at most, then answers with the
 * reading it has and its age: a slow driver delays nobody by more. */
#define BROKER_SNAPSHOT_WAIT_MS 1000

/* A broker that is being restarted (systemd restarts it at once) is worth
 * waiting for; one that stays away is an error to report, never a reason
 * to fall back to the registry, which the others do not look at. */
#define BROKER_CONNECT_PATIENCE_MS 5000

/*
 * Which transport leases go through: the rule, in this order.
 *
 *  1. GPUMAN_BROKER=off (any case): the daemonless registry (the caller's
 *     own choice).
 *  2. GPUMAN_BROKER=PATH: the broker at PATH, which broker_connect() takes
 *     only if root or this very user serves it; a value without a '/' is
 *     refused as neither.
 *  3. Otherwise, BROKER_DIR decides.  Where it is a directory owned by root
 *     that no one else can write (made by gpuman.socket, or by a broker
 *     root started on the default path), this machine has a broker: the
 *     broker at BROKER_DEFAULT_SOCKET, and a socket missing there or that
 *     nobody serves is an error that names it and says what to do (start
 *     the broker; or root removes BROKER_DIR to retire it), never a
 *     fall-back to the registry, whose leases the broker's clients do not
 *     see.  Where it is missing, or anyone but root could have made it or
 *     can write it, the daemonless registry: a socket a user plants
 *     anywhere (the registry's directory included) is never taken for the
 *     broker and turns nobody away.
 *
 * Returns 1 with the socket's path in buf, or 0 for the registry.
 */
int broker_wanted(char *buf, size_t len);

/* The lease variables as set are usable: GPUMAN_BROKER 'off' or a path
 * (a word such as "no" is neither), and GPUMAN_STATE_DIR, where the
 * registry is used, absolute.  GM_ERR_STATE naming the culprit if not:
 * the transports check at their use, submit before a job is queued. */
enum gm_err lease_env_check(char *err, size_t len);

/* The broker at the default path stands for this machine's (rule 3). */
int broker_is_default(const char *path);

/*
 * Connect to the broker at path and check that root or this very user
 * serves it (a socket in a world-writable directory could be anybody's).
 * A broker being restarted is waited for up to a few seconds.  Returns
 * the connected descriptor (close-on-exec), or -1 with a message.
 */
int broker_connect(const char *path, char *err, size_t len);

/* Called once a connection has waited a second for a broker that does not
 * answer, so that a person is not left looking at nothing (the CLI says so
 * on stderr); NULL, as in the library: nothing is said. */
extern void (*broker_waiting_hook)(const char *path, int error, int64_t patience_ms);

/* Send msg (a JSON object; "v" is added) as one line.  0, or -1 with errno. */
int broker_send(int fd, struct json_t *msg);

/* A send to the broker failed: if it refused the connection at once (one
 * of its caps), its reason, which is already in the socket, goes to err
 * and its code is returned; else GM_ERR_STATE with errno's text. */
enum gm_err broker_send_failed(int fd, const char *path, char *err, size_t len);

/*
 * Bytes received on a connection, cut into lines.  broker_take_line()
 * returns 1 with the next complete line's message in *msg (caller
 * decrefs), 0 when no complete line is buffered, -1 when the buffered line
 * is too long or not a JSON object of this version.
 */
struct broker_buf {
	size_t len;
	char data[BROKER_MAX_LINE];
};
int broker_take_line(struct broker_buf *b, struct json_t **msg);

/*
 * One request's start: a connection to the broker at path and its message
 * begun ({"op": op} in msg).  buf and msg are the caller's, allocated or
 * NULL (then GM_ERR_NOMEM).  The descriptor, or -1 with *rc and err set
 * (GM_ERR_STATE where the broker cannot be reached, as broker_connect says).
 */
int broker_request_start(const char *path, const void *buf, struct json_t *msg, const char *op,
                         enum gm_err *rc, char *err, size_t len);

#endif
