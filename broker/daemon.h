/*
 * daemon.h - private to `gpuman daemon`, the lease broker (main.c: its
 * start-up; lease.c: its leases; util.c: small helpers; state.c: its
 * state file; conn.c: connections and requests; place.c: the limits and
 * the line): its connections, its leases, the daemon itself and the
 * functions its files share.
 */
#ifndef GM_BROKER_DAEMON_H
#define GM_BROKER_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <sys/types.h>
#include "gpuman-internal.h"
#include "cmdline.h"

/* A connection must say what it wants this soon (a stalled or silent
 * client is dropped, never waited for). */
#define FIRST_MESSAGE_MS 5000
/* While anybody waits, NVML is read again this often: a process that ends
 * outside gpuman frees memory without any event the broker sees. */
#define RECHECK_MS 1000
/* A snapshot this fresh is reused by the passes of one burst of events. */
#define SNAPSHOT_REUSE_MS 20
/*
 * What one user may hold, so that nobody stalls everyone (the trust model's
 * availability bound).  Connections: a user's cap is a small part of what
 * the broker may open in all (daemon_conn_limits: at most a 64th of the
 * descriptors it has), so that it takes 64 accounts to fill it; every
 * waiter and lease is a connection, so these bound them too.
 * Reservations hold no connection: their own caps, per user and in all,
 * bound them and the state file.
 */
#define MAX_CONNS_PER_USER 1024
#define MAX_RESERVATIONS_PER_USER CAPS_RESERVATIONS_PER_USER /* caps.h */
#define MAX_RESERVATIONS 1024
/* A turn of the loop accepts at most this many connections and serves at
 * most EVENTS_PER_USER events of each user; the rest wait for the next
 * turn (epoll reports them again), behind the other users'. */
#define ACCEPT_PER_TURN 64
/* What a request may wait behind before the broker reads it: the kernel
 * queues connections in arrival order, so another user's flood of
 * connections delays a request by at most this many accepts (the same
 * number is gpuman.socket's Backlog=). */
#define LISTEN_BACKLOG 1024
#define EVENTS_PER_USER 16
/* The view shows this many waiters and leases one by one, and the rest as
 * a count per user: its cost and size do not grow with the line. */
#define VIEW_WAITERS 256
#define VIEW_LEASES 2048
/* A view built for one change is reused this long at most (a waiter's
 * GPU-hours limit changes with the clock alone). */
#define VIEW_REUSE_MS 1000
/* Replies are small except the view; a client that does not read them is
 * dropped before it costs the broker much memory. */
#define MAX_OUTPUT_BYTES (8u << 20)

enum ev_kind { EV_LISTEN, EV_CONN, EV_PIDFD, EV_READER, EV_WORKER };

enum conn_state {
	CONN_NEW,     /* no message yet */
	CONN_WAITING, /* in the line */
	CONN_LEASED,  /* its lease lives */
	CONN_CLOSING  /* flushing its last reply */
};

struct blease;
struct keeper;

/* One user's holdings, counted as they change: what an accept or a pass
 * asks of a user costs O(1), not a walk of every connection. */
struct user_slot {
	unsigned uid;
	int used;
	char name[33];          /* looked up once */
	size_t conns;           /* connections open */
	size_t reservations;    /* reservations held */
	size_t reserve_waiting; /* reservations asked for, in the line */
	unsigned gpus;          /* GPUs its leases and reservations hold */
	uint64_t turn;          /* the loop turn that events counts */
	unsigned events;
	uint64_t view_gen;  /* the view build that limit is for */
	uint64_t tally_gen; /* the view build that counts these */
	size_t tally_waiters, tally_leases, tally_gpus;
	char limit[200]; /* hours limit, for that build; "" none */
};

/* Text sent unchanged to many connections (the view). */
struct shared_text {
	size_t refs;
	size_t len;
	char data[];
};

struct conn {
	enum ev_kind kind; /* first: epoll's data points here */
	int fd;
	/* Who is at the other end (SO_PEERCRED: w.uid, w.pid), and, for a
	 * request, the one waiter record (lease_view.h, record.h) that the
	 * view and the state file show: its request, command, summary,
	 * candidates, its user's limit, reservation and usable GPUs. */
	struct waiter_info w;
	enum conn_state state;
	int64_t opened_ms; /* monotonic */
	char *pend;        /* a partial line received */
	size_t pend_len;
	char *out; /* replies not yet taken by the client */
	size_t out_len, out_off;
	struct shared_text *shared; /* the view, sent after out */
	size_t shared_off;
	/* in the line */
	int wait;
	int64_t reserve_ms; /* > 0: a reservation for this long */
	int told;           /* "queued" sent */
	int queued_job;     /* a queue's next job (keep_place): shown as RECORD_QUEUED_JOB */
	uint64_t seq;
	struct conn *prev, *next;   /* every connection */
	struct conn *lprev, *lnext; /* the line, in arrival order */
	int in_line;
	struct blease *lease;
	/* Its place in line across a restart (restart.c): the token told in
	 * "queued" (its pid's start time is w.pid_start), and whether it is a
	 * place restored from the state file that no connection holds yet. */
	char place[40];
	int ghost;
	char *place_record; /* its state file entry, made once */
	size_t place_record_len;
	size_t joined_at; /* > 0: its place is to be written (state.c) */
	int on_file;      /* its place is in the state file */
	/* Its job, placed while it waits (fence.c, "preplace"): the cgroup's
	 * name, the lease's id to be; "" none. */
	char pre_id[64];
	int pre_placed; /* the job is in it, under a rule that refuses every GPU */
	int pre_pid;
	uint64_t pre_start;
	struct keeper *pre_keep; /* the job is a supervisor ("keep"), or NULL */
	/* Closed: freed at the end of the loop turn, as an event of the same
	 * turn may still name it. */
	int dead;
	struct conn *grave;
};

struct blease {
	enum ev_kind kind; /* EV_PIDFD, for restored leases */
	/* The one lease record (lease_view.h, record.h).  rec.pid is the
	 * process that asked; rec.job_pid the job it started if it said so
	 * (0: it did not; the record shows pid then). */
	struct lease_info rec;
	char token[40];
	int preplaced;     /* its id is its waiter's, whose job was being placed (fence.c) */
	struct conn *conn; /* NULL: restored, watched by pidfd, or a reservation */
	int pidfd;
	struct blease *prev, *next;
	int ended; /* freed at the end of the loop turn */
	struct blease *grave;
	char *record; /* its line in the state file, made once */
	size_t record_len;
};

/* The state file, a journal (state.c): open to append to, its snapshot's
 * and its changes' sizes, and this turn's changes. */
struct state_file {
	int fd;      /* -1: the next write is a snapshot */
	int lock_fd; /* STATE.lock, held while this broker runs; -1 none */
	size_t snapshot_bytes, appended_bytes;
	char *pend; /* this turn's change lines */
	size_t pend_len, pend_cap;
	struct conn **joined; /* waiters who joined the line this turn */
	size_t joined_count, joined_cap;
	int lost;         /* a change could not be kept in pend: write a snapshot */
	int failing;      /* the last write failed (said once) */
	int64_t retry_ms; /* monotonic: when it is tried again */
};

/* max_gpu_hours: what a user's ended leases held today (hours.c). */
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
	struct state_file state;
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
	struct daemon_reader *reader; /* the NVML session (snapshot.c) */
	struct daemon_worker *worker; /* slow kernel calls (worker.c) */
	int64_t places_until;         /* restored places are held till (monotonic ms) */
	/* users seen, by uid (open addressing; never shrinks: uids are few) */
	struct user_slot *users;
	size_t users_cap, users_used;
	size_t conn_count, max_conns, max_conns_per_user;
	size_t reservation_count, reserve_waiting;
	uint64_t turn;
	/* The view: built once per change (gen), sent to every asker. */
	uint64_t gen, view_gen, view_builds;
	int64_t view_at; /* monotonic */
	struct shared_text *view;
	/* the socket this broker bound, removed when it stops if the path
	 * still names it (by inode); "" none */
	char bound_path[108];
	dev_t bound_dev;
	ino_t bound_ino;
};

void daemon_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void daemon_user_name(unsigned uid, char *out, size_t len);

/* uid's slot (made on first sight, with its name).  NULL: out of memory. */
struct user_slot *daemon_user(struct daemon *d, unsigned uid);

/* uid's name, from its slot. */
const char *daemon_user_cached(struct daemon *d, unsigned uid);

/* Set the connection caps from the descriptors the broker may open. */
void daemon_conn_limits(struct daemon *d);

void shared_text_put(struct shared_text *t);

/* Each line of /proc/PID/status ("Key:\tvalue\n") to fn until it returns
 * nonzero: 0, or -1 when pid is gone. */
int daemon_proc_status(int pid, int (*fn)(const char *line, void *data), void *data);
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
/* The same with tail (a reference the call takes; NULL none) sent after
 * the reply. */
void conn_finish_with(struct daemon *d, struct conn *c, json_t *msg, struct shared_text *tail);

/* The view's text (the "view" op's answer), a new reference: built once
 * per change of the leases or the line, VIEW_REUSE_MS at most.  NULL: out
 * of memory. */
struct shared_text *daemon_view_text(struct daemon *d);

void daemon_refuse(struct daemon *d, struct conn *c, enum gm_err code, const char *error,
                   const char *explain);

json_t *daemon_lease_json(const struct blease *l, int secret);

/* ---- state.c: the state file, a journal of the changes ----------------- */

/* This turn's changes to the state file: one append and one fdatasync (or,
 * now and then, a new snapshot of everything).  Call before a reply that
 * must be on record (a grant) and at the end of each turn that changed. */
void daemon_persist(struct daemon *d);
/* Changes, written by the next daemon_persist: l granted (or its record
 * changed: it is made again), l ended, c joined or left the line, a
 * user's ledger entry changed (entry's reference is taken). */
void daemon_state_lease(struct daemon *d, struct blease *l);
void daemon_state_lease_end(struct daemon *d, const struct blease *l);
void daemon_state_place(struct daemon *d, struct conn *c);
void daemon_state_unplace(struct daemon *d, struct conn *c);
void daemon_state_hours(struct daemon *d, json_t *entry);
/* A write failed: when it is tried again (monotonic ms; due: marks d
 * changed), or -1. */
int64_t daemon_state_due(struct daemon *d);
int daemon_state_lock(struct daemon *d);
void daemon_state_close(struct daemon *d);
/* The file folded into one document (a snapshot's shape), the caller's;
 * NULL with *refuse 0 when there is none, with *refuse 1 (said) when it
 * cannot be read. */
json_t *daemon_state_load(struct daemon *d, int *refuse);

void daemon_lease_free(struct blease *l);

void daemon_lease_end(struct daemon *d, struct blease *l);

/* A lease without a connection (restored) ends when the process of pidfd
 * does: watch that one from now on, instead of any before it. */
void daemon_lease_watch(struct daemon *d, struct blease *l, int pidfd);

/* ---- hours.c: max_gpu_hours -------------------------------------- */

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

/* ---- restart.c: a waiter's place across a restart ----------------------- */

/* A new place token for c. */
void daemon_place_token(struct conn *c);
/* A waiter's entry in the state file (NULL: it has no place to keep), made
 * once; and the state file's entries back in the line (restored places,
 * held for their waiters for a grace period). */
const char *daemon_place_record(struct conn *c);
void daemon_places_restore(struct daemon *d, json_t *arr);
/* Put c (its request read) in the line: at the restored place its token
 * names if the kernel's word on c matches that place's (returns 1), else
 * at the back with a new token (returns 0). */
int daemon_place_take(struct daemon *d, struct conn *c, const char *token);
/* Drop the restored places not taken in time; the next such time
 * (monotonic ms), or -1. */
int64_t daemon_places_due(struct daemon *d);

/* ---- snapshot.c: the machine's one NVML session ------------------ */

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
/* ---- worker.c: slow kernel calls off the loop --------------------------- */

/* A piece of work: run on the worker thread (it must touch nothing of the
 * daemon's), then done on the loop, once, also when cancelled (run never
 * called: a settle or the broker's stop). */
struct work {
	char key[64]; /* a lease's id: see daemon_work_settle */
	void (*run)(struct work *job);
	void (*done)(struct daemon *d, struct work *job);
	int early; /* can wait (a waiter's job placed early): the others go
	            * first, and one of its key that cannot wait cancels it
	            * while it has not begun */
	int cancelled;
	struct work *next;
};
/* Start the thread (its eventfd joins d->epfd): 0, or -1 with a message. */
int daemon_worker_start(struct daemon *d);
/* Cancel what is queued, let the running piece end, call every done. */
void daemon_worker_stop(struct daemon *d);
void daemon_work_submit(struct daemon *d, struct work *job);
/* The worker's eventfd fired: call done for what it finished. */
void daemon_worker_ready(struct daemon *d);
/* Key's work, queued or running, is finished (queued work cancelled) and
 * its done called before this returns: a lease's end never overtakes its
 * placement. */
void daemon_work_settle(struct daemon *d, const char *key);

/* ---- fence.c, fence_end.c: the kernel fence of each lease's job ----- */

void daemon_fence_init(void);                                           /* at start-up */
void daemon_fence_place(struct daemon *d, struct conn *c, json_t *msg); /* "fence" */
void daemon_fence_end(struct daemon *d, const struct blease *l);        /* kills what is left */
void daemon_fence_forget(struct conn *c); /* c closes: its placements answer nobody */
/* Answer c's release of l (ended) once l's supervisors are home. */
void daemon_fence_released(struct daemon *d, struct conn *c, const struct blease *l,
                           json_t *answer);
/* A waiter's job, placed before its grant ("preplace"); a waiter that
 * leaves ends it. */
int daemon_fence_can_preplace(void);
void daemon_fence_preplace(struct daemon *d, struct conn *c, json_t *msg);
/* c's grant of l, its job placed as it waited: 1, answer (the grant)
 * taken, sent with "placed" once l's filter is in (on the worker); 0, not
 * placed, answer the caller's to send (the client asks "fence"). */
int daemon_fence_granted(struct daemon *d, struct conn *c, const struct blease *l, json_t *answer);
void daemon_fence_unplace(struct daemon *d, struct conn *c);
void daemon_fence_view(json_t *view); /* "placement" for status */
/* After the leases are restored: the fence's record of the broker before
 * (its keepers, the cgroups of leases that ended meanwhile: ended). */
void daemon_fence_restore(struct daemon *d);
/* pid asks for l's end from inside its cgroup (gpuman release in a shell
 * that evals gpuman reserve's lines): it goes home with l's keeper, on the
 * worker, before the release is answered (daemon_fence_released). */
void daemon_fence_spare(struct daemon *d, const struct blease *l, int pid);
struct fence;
/* For sessions.c: the mechanism (ops NULL: none), and the answer to a
 * "fence" or "session" request. */
const struct fence *daemon_fence_mechanism(void);
void daemon_fenced(struct daemon *d, struct conn *c, int enforced, const char *why);

/* ---- fence_who.c: whom the fence places, and what it refuses them ------- */

struct fence_rule;
struct fence_machine;
struct gm_snapshot;
/* Are all of pid's uids uid (a set-uid program is not the user's)? */
int daemon_proc_all_uids(int pid, unsigned uid);
/* The pid, as the broker numbers it, that a client (peer) calls pid in its
 * pid namespace; 0 if none. */
int daemon_pid_here(int peer, int pid);
/* The machine's GPU nodes for snap's reading (kept until the next). */
const struct fence_machine *daemon_fence_machine(const struct gm_snapshot *snap);
/* The devices to refuse to the job of lease one, or (one NULL) to uid's
 * login sessions, which may open the GPUs of its live leases but skip's;
 * all (if not NULL): every device such a rule could name.  0, or -1 with
 * why. */
int daemon_fence_rule(struct daemon *d, const struct blease *one, unsigned uid,
                      const struct blease *skip, struct fence_rule *r, struct fence_rule *all,
                      char *why, size_t len);

/* ---- sessions.c: login sessions ([fence] sessions = yes) -------------------- */

/* A login session placed ("session", from the PAM hook), and uid's
 * sessions following its leases (skip: one ending), on the worker. */
void daemon_fence_session(struct daemon *d, struct conn *c, json_t *msg);
void daemon_fence_sessions(struct daemon *d, unsigned uid, const struct blease *skip);
/* The answer to a grant or release that a user's sessions follow: sent
 * once the changes queued before it are in (at once where none is). */
void daemon_fence_answer(struct daemon *d, struct conn *c, json_t *answer);
/* c closes: nothing is sent to it any more. */
void daemon_sessions_forget(struct conn *c);

#endif
