/*
 * daemon.h - private to `gpuman daemon`, the lease broker (cmd_daemon.c:
 * its start-up, state file and small helpers; daemon_conn.c: connections and
 * requests; daemon_place.c: the limits and the line): its connections, its
 * leases, the daemon itself and the functions its files share.
 */
#ifndef GM_CLI_DAEMON_H
#define GM_CLI_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <sys/types.h>
#include "gpuman-internal.h"
#include "cli.h"

#define DEFAULT_STATE "/run/gpuman-broker/leases.json"
/* A connection must say what it wants this soon (a stalled or silent
 * client is dropped, never waited for). */
#define FIRST_MESSAGE_MS 5000
/* While anybody waits, NVML is read again this often: a process that ends
 * outside gpuman frees memory without any event the broker sees. */
#define RECHECK_MS 1000
/* A snapshot this fresh is reused by the passes of one burst of events. */
#define SNAPSHOT_REUSE_MS 20
#define MAX_CONNS_PER_USER 4096
/* Replies are small except the view; a client that does not read them is
 * dropped before it costs the broker much memory. */
#define MAX_OUTPUT_BYTES (8u << 20)

enum ev_kind { EV_LISTEN, EV_CONN, EV_PIDFD, EV_READER };

enum conn_state {
	CONN_NEW,     /* no message yet */
	CONN_WAITING, /* in the line */
	CONN_LEASED,  /* its lease lives */
	CONN_CLOSING  /* flushing its last reply */
};

struct blease;

struct conn {
	enum ev_kind kind; /* first: epoll's data points here */
	int fd;
	unsigned uid;
	int pid;
	enum conn_state state;
	int64_t opened_ms; /* monotonic */
	char *pend;        /* a partial line received */
	size_t pend_len;
	char *out; /* replies not yet taken by the client */
	size_t out_len, out_off;
	/* in the line */
	struct gm_request *req;
	int wait;
	int64_t reserve_ms; /* > 0: a reservation for this long */
	char within[64];    /* inside this reservation of its user's; "" none */
	int told;           /* "queued" sent */
	int64_t since_ms;   /* wall clock */
	uint64_t seq;
	char command[256];
	char summary[128];
	char user[33];       /* its user's name, looked up once */
	char limit[256];     /* its user's limit keeps it waiting (line.h), "" not */
	json_t *usable;      /* UUID -> pick_env usable value; NULL: all */
	json_t *usable_migs; /* the same for MIG slices; NULL: as their GPU */
	char (*cand)[96];
	size_t cand_count;
	struct conn *prev, *next;   /* every connection */
	struct conn *lprev, *lnext; /* the line, in arrival order */
	int in_line;
	struct blease *lease;
	/* Closed: freed at the end of the loop turn, as an event of the same
	 * turn may still name it. */
	int dead;
	struct conn *grave;
};

struct blease {
	enum ev_kind kind; /* EV_PIDFD, for restored leases */
	char id[64];
	char token[40];
	unsigned uid;
	char user[33];
	int pid; /* the process that asked */
	uint64_t pid_start;
	int job_pid; /* the job it started, if it said so */
	uint64_t job_start;
	char command[256];
	int64_t start_ms;
	int exclusive;
	uint64_t share_mib;
	size_t n;
	unsigned *indices;
	char (*uuids)[96];
	char (*migs)[96];   /* the MIG slice of each GPU it holds, "" none */
	int reservation;    /* held by nobody until expires_ms */
	int64_t expires_ms; /* wall clock */
	struct conn *conn;  /* NULL: restored, watched by pidfd, or a reservation */
	int pidfd;
	struct blease *prev, *next;
	int ended; /* freed at the end of the loop turn */
	struct blease *grave;
};

/* max_gpu_hours: what a user's ended leases held today (daemon_hours.c). */
struct hours_use {
	unsigned uid;
	int64_t day_ms;  /* local midnight that began the day */
	int64_t used_ms; /* GPU-ms */
};

struct daemon {
	int epfd;
	struct {
		enum ev_kind kind;
		int fd;
	} listener;
	const char *state_path;
	struct gm_snapshot *snap;
	int64_t snap_at; /* monotonic ms */
	struct conn *conns;
	struct conn *line_head, *line_tail;
	size_t line_len;
	uint64_t next_seq;
	struct blease *leases;
	size_t lease_count;
	int dirty;   /* the line may move: serve it */
	int changed; /* leases changed: persist */
	size_t out_total;
	struct conn *dead_conns;
	struct blease *ended_leases;
	struct broker_buf scratch;
	struct config cfg;        /* the admin's gpuman.conf */
	struct timespec cfg_mtim; /* of the file read; reread when it changes */
	int cfg_read;
	struct hours_use *hours; /* the ledger of max_gpu_hours */
	size_t hours_count;
	struct daemon_reader *reader; /* the NVML session (daemon_snapshot.c) */
};

void daemon_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void daemon_user_name(unsigned uid, char *out, size_t len);

/* The start time of a process (clock ticks since boot, field 22 of
 * /proc/PID/stat): with the pid, it names one process even after the pid
 * is reused.  0 when it does not exist. */
uint64_t daemon_proc_start(int pid);

/* The real uid of a process, or -1. */
long daemon_proc_uid(int pid);

void daemon_proc_command(int pid, char *out, size_t len);

void daemon_random_hex(char *buf, size_t bytes);

void conn_close(struct daemon *d, struct conn *c);

void conn_flush(struct daemon *d, struct conn *c);

/* Queue msg for c and send what the socket takes now.  Returns -1 when
 * the client is to be dropped (it does not read). */
int conn_send(struct daemon *d, struct conn *c, json_t *msg);

/* Reply and close once the reply is out. */
void conn_finish(struct daemon *d, struct conn *c, json_t *msg);

void daemon_refuse(struct daemon *d, struct conn *c, enum gm_err code, const char *error,
                   const char *explain);

json_t *daemon_lease_json(const struct blease *l, int secret);

/* Write every lease to the state file (a new file renamed into place, so a
 * broker killed mid-write leaves the previous one). */
void daemon_persist(struct daemon *d);

void daemon_lease_free(struct blease *l);

void daemon_lease_end(struct daemon *d, struct blease *l);

/* ---- daemon_hours.c: max_gpu_hours -------------------------------------- */

int64_t daemon_day_start(int64_t at_ms); /* local midnight before at_ms */
/* Add what l held today to its user's ledger (as it ends). */
void daemon_hours_charge(struct daemon *d, const struct blease *l);
/* uid's GPU-ms today: ended leases and live ones. */
int64_t daemon_hours_used(struct daemon *d, unsigned uid);
/* The ledger for the state file, and back (today's entries only). */
json_t *daemon_hours_json(const struct daemon *d);
void daemon_hours_restore(struct daemon *d, json_t *arr);

void daemon_lease_add(struct daemon *d, struct blease *l);

void daemon_line_remove(struct daemon *d, struct conn *c);

void conn_free(struct conn *c);

/* The end of a loop turn: nothing names them any more. */
void daemon_bury(struct daemon *d);

void daemon_accept_all(struct daemon *d);

/* Read gpuman.conf again if it changed since (or was never read).  A file
 * that no longer parses keeps the limits read before it.  0, or -1 when
 * there are none to go by. */
int daemon_config_fresh(struct daemon *d);

/* Reservations whose time is up end; returns the next expiry (wall clock
 * ms), or -1 for none. */
int64_t daemon_expire(struct daemon *d);

struct gm_snapshot *daemon_snapshot(struct daemon *d, int fresh);

/* c->cand: the GPUs c could ever be given (line_candidates). */
void daemon_candidates(struct daemon *d, struct conn *c, const struct gm_snapshot *snap);

void daemon_grant(struct daemon *d, struct conn *c, const struct gm_snapshot *snap,
                  const struct policy_result *res);

/* Serve the line with the rules (lib/line.h): grant, refuse or tell each
 * waiter its place. */
void daemon_serve_line(struct daemon *d, int fresh);

void conn_readable(struct daemon *d, struct conn *c);

/* Connections that have not said what they want in time are dropped. */
int64_t daemon_drop_silent(struct daemon *d);

/* ---- daemon_snapshot.c: the machine's one NVML session ------------------ */

/*
 * NVML is opened and read by a reader thread, never on the event loop: a
 * driver call that takes seconds (persistence mode off, a GPU fallen off
 * the bus) delays no grant, release or answer.  Start it (opens NVML and
 * takes the first reading, which the line needs; its eventfd joins
 * d->epfd, so call after epoll_create1): 0, or -1 with a message said.
 */
int daemon_reader_start(struct daemon *d);
void daemon_reader_stop(struct daemon *d);
/* The reader's eventfd fired: take its reading into d->snap, serve the
 * line again and answer the snapshots waiting for it. */
void daemon_reader_ready(struct daemon *d);
/* Answer the waiters whose time limit passed; the next limit (monotonic
 * ms), or -1. */
int64_t daemon_reader_due(struct daemon *d);
/* {"op":"snapshot"} from c. */
void daemon_snapshot_op(struct daemon *d, struct conn *c, json_t *msg);
/* c is closing: it waits for no reading any more. */
void daemon_snapshot_forget(struct daemon *d, struct conn *c);
/* ---- daemon_fence.c: the kernel fence of each lease's job ---------------- */

void daemon_fence_init(void);                                           /* at start-up */
void daemon_fence_place(struct daemon *d, struct conn *c, json_t *msg); /* "fence" */
void daemon_fence_end(struct daemon *d, const struct blease *l);        /* kills what is left */
void daemon_fence_view(json_t *view);                                   /* "placement" for status */
/* [fence] sessions: a login session placed ("session", from the PAM hook),
 * and uid's sessions following its leases (skip: one ending) */
void daemon_fence_session(struct daemon *d, struct conn *c, json_t *msg);
void daemon_fence_sessions(struct daemon *d, unsigned uid, const struct blease *skip);

#endif
