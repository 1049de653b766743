/*
 * internal.h - what the files of the dispatch engine share, and nobody
 * else includes: the engine's state (struct engine, one struct slot per
 * running job) and the functions one file of engine/ calls in another.
 * engine.h describes the protocol and the public calling sequence.
 *
 *   state.c       the slots, the in-memory queue, messages, transactions
 *   place.c       where jobs run on this machine (placement_local): a run
 *                 file, a lease, a runner; and the rounds of placing
 *   slurm.c       where tasks run on a Slurm allocation (placement_slurm):
 *                 srun steps
 *   runner.c      starting runners, their ends, adoption after a restart
 *   record.c      results into the store, accounting samples, job records
 *   heuristics.c  a batch's learned out-of-memory floors and tail plan
 *   loop.c        the event loop (engine_run)
 *   json.c        requests and jobs as JSON
 *
 * All of it runs in the one engine process, single-threaded.
 */
#ifndef GM_ENGINE_INTERNAL_H
#define GM_ENGINE_INTERNAL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "engine.h"
#include "outcome.h"
#include "lease.h"
#include "parse.h"
#include "policy.h"
#include "protocol.h"
#include "proctree.h"
#include "lease_api.h"
#include "util.h"

#define TICK_MS 1000       /* NVML re-read and accounting sample */
#define EFT_TAIL_PER_GPU 8 /* plan the tail only: at most this many queued per GPU */
#define EFT_OVERHEAD_MS 10 /* a start's cost, so that noise in tiny tasks holds nothing */
#define MAX_RUN_SLOTS 65536

struct launch {
	struct engine *e;
	const struct job *job;
	int batch;
	int no_framework_env;
	const char *log; /* log path */
	int run_fd;
	int go[2]; /* the runner's end, ours */
	pid_t runner;
	/* Its runner, started as it waited in the broker's line (early.c),
	 * until the grant takes it; 0 none */
	pid_t early_pid;
	int early_pidfd;
	char err[256];
};

/* The queue head's early runner between rounds (early.c); pid 0: none. */
struct early_runner {
	int64_t job;
	int attempt;
	pid_t pid;
	int pidfd, run_fd, run_slot, go;
};

/* ---- the engine's state ---------------------------------------------- */

struct slot {
	int64_t id;
	size_t type;        /* slurm: the GPU type of its step */
	long long log_from; /* slurm: its log's size when it started */
	int run_slot;       /* its run file: <run_dir>/slot-<n>.run */
	int attempt;        /* job.attempts of this start */
	pid_t runner;
	int own;   /* our child (SIGCHLD); else adopted (pidfd / tick) */
	int pidfd; /* adopted runner: readable once it exits; -1 */
	int go_fd; /* our end of the go socket until the go is given */
	int abort; /* the claim did not commit: no go */
	int64_t start_ms;
	size_t ngpu;
	unsigned *gpu; /* NVML indices */
	int64_t placed_free;
	int has_peak;
	int64_t peak;
	int samples;
	double util_sum;
	int acct_dirty;
	int signalled;   /* interrupts sent */
	int where_known; /* slurm: its node and GPUs are in the store */
};

struct engine {
	const struct engine_config *cfg;
	const struct placement *place;
	void *place_data;       /* the placement's own */
	int closed;             /* the placement can start nothing more */
	char runner_path[4200]; /* gpuman-runner, next to our own program */
	struct slot **slots;
	size_t nslots;
	int64_t *queue; /* queued ids in order; [qhead, qcount) live */
	size_t qhead, qcount, qcap;
	size_t deps_waiting; /* queue: queued jobs still waiting for --after jobs */
	struct gm_snapshot *snap;
	int64_t tick_at; /* monotonic: next NVML read */
	int sfd, ifd, reg_wd, wake_wd;
	sigset_t oldmask;
	int dirty;     /* something changed since placement last failed */
	int interrupt; /* Ctrl-C count (batch) */
	int stop;      /* dispatcher: SIGTERM */
	int in_tx;
	int ended_any; /* a job left "running" in this round */
	/* Run slots whose result this round records: not reused before the
	 * round commits, or a crash in between would lose that result. */
	int *held_slots;
	size_t nheld, heldcap;
	int64_t *ended; /* queue: jobs that ended this round (their .json) */
	size_t nended, endedcap;
	struct engine_counts counts;
	/* batch: per NVML index (up to gpu_cap) */
	size_t gpu_cap;
	int64_t *done_ms; /* sum of done tasks' durations */
	unsigned *done_n;
	int64_t *floor_mib; /* OOM at this much free: -1 none */
	char err[GM_ERRBUF_SIZE];
	int failed; /* a store error: stop */
	/* what keeps queued jobs from starting (a full disk...), said once */
	char wait_said[GM_ERRBUF_SIZE + 64];
	int blocked_told; /* batch: cfg->blocked said since a task last started */
	struct early_runner early;
};

/*
 * Where jobs run, behind a small table of functions (as lib/nvml.c keeps
 * NVML behind its own): the loop (loop.c) owns the queue, the rounds and
 * their transactions, signals and the store's counts; a placement starts
 * jobs and judges their ends.  placement_local leases GPUs of this machine
 * and starts a runner per job (place.c, runner.c, record.c); placement_slurm
 * starts srun steps in a Slurm allocation (slurm.c).
 */
enum place {
	PLACE_STARTED, /* it runs */
	PLACE_SKIPPED, /* no longer queued (failed, cancelled meanwhile) */
	PLACE_LATER,   /* it cannot start now, a later job may */
	PLACE_BLOCKED  /* nothing can start now: first come, first served */
};
struct placement {
	const char *name;
	/* Before the first round; -1 with err set. */
	int (*init)(struct engine *e, char *err, size_t len);
	/* Once a second while jobs are queued or running; may be NULL. */
	void (*tick)(struct engine *e);
	/* Could no job start now whatever it asks (saves a round)? */
	int (*full)(struct engine *e);
	enum place (*place)(struct engine *e, int64_t id);
	/* The process of slot s, our child (or adopted), has ended with wait
	 * status ws: record the job and remove the slot. */
	void (*ended)(struct engine *e, struct slot *s, int ws);
	/* Jobs the store says are running that no slot holds: at the start,
	 * and when the queue is woken. */
	void (*adopt)(struct engine *e);
	/* Ctrl-C of a batch, the e->interrupt-th. */
	void (*interrupt)(struct engine *e);
	void (*release)(struct engine *e);
};
extern const struct placement placement_local, placement_slurm, placement_sbatch;

/* slurm.c, shared with sbatch.c: the /bin/sh wrapper of a Slurm task ($1
 * record file, $2 the task's line, $3 its number, $4 gpuman) and what it
 * records. */
extern const char slurm_wrapper[];
struct slurm_record {
	int started, ended;
	int64_t start_ms, end_ms;
	char node[64], gpus[64];
	int status;
};
void slurm_read_record(const char *path, struct slurm_record *r);
/* The sampler's peak memory and utilization (record.usage) into j. */
void slurm_read_usage(const char *record, struct job *j);
/* A started step's or job's node and GPUs (its record) into the store,
 * once per slot (queue and status show them while it runs). */
void slurm_note_where(struct engine *e, struct slot *s, const struct slurm_record *rc);
/* A finished step's or job's outcome (upd) into the store, with its node
 * if it started and was not noted yet; counted, and a job put back in
 * line when requeued. */
void slurm_record_end(struct engine *e, struct slot *s, struct job *upd,
                      const struct slurm_record *rc);

/* state.c */
void engine_say(struct engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void engine_run_path(const struct engine *e, int run_slot, char *buf, size_t len);
int engine_slot_number_busy(const struct engine *e, int n);
void engine_hold_slot_number(struct engine *e, int n);
/* Open the round's transaction unless open; -1 (e->failed set) on error. */
int engine_tx(struct engine *e);
void engine_slot_free(struct slot *s);
void engine_slot_remove(struct engine *e, struct slot *s);
struct slot *engine_slot_add(struct engine *e, int64_t id);
struct slot *engine_slot_by_id(struct engine *e, int64_t id);
int engine_parse_gpus(struct slot *s, const char *text);
int engine_queue_reload(struct engine *e);
void engine_queue_insert(struct engine *e, int64_t id);

/* json.c */
struct gm_request *engine_request_copy(const struct gm_request *req);
int engine_request_exclude(struct gm_request *req, unsigned index);

/* record.c */
/* The result in a run file (protocol.h); 0 if it holds a complete one. */
int engine_read_result(int fd, struct protocol_result *r);
void engine_count_move(struct engine *e, enum job_state from, enum job_state to);
void engine_note_ended(struct engine *e, int64_t id);
void engine_write_job_record(struct engine *e, int64_t id);
void engine_record_end(struct engine *e, struct slot *s, int64_t id, int fd);
void engine_refresh_snapshot(struct engine *e);
void engine_flush_accounting(struct engine *e);

/*
 * The time limit a job's runner keeps, in seconds (0 none): submit --time,
 * or the admin's max_lease (gpuman.conf) where that is shorter -- then
 * *where says so, for the job's record ("" otherwise).
 */
long long engine_time_limit_s(const struct engine *e, const struct job *job, char *where,
                              size_t len);

/* heuristics.c */
void engine_batch_learn(struct engine *e, const struct slot *s, const struct job *upd);
long engine_snap_pos(const struct gm_snapshot *snap, unsigned index);
int engine_batch_holdback(struct engine *e, const struct gm_request *req, unsigned *excl,
                          size_t *nexcl);

/* runner.c */
int engine_spawn_runner(void *data, const struct gm_lease *lease, pid_t *job_pid, char *err,
                        size_t len);
pid_t engine_prespawn_runner(void *data, int fd);
void engine_runner_ended(struct engine *e, struct slot *s, int killed);
void engine_adopt(struct engine *e);
int engine_adopted_ended(struct engine *e, struct slot *s);

/* early.c: the head job's runner, started as it waits in the broker's line */
/* A pidfd of pid (readable once it exits), or -1 with errno. */
int engine_pidfd_open(pid_t pid);
/* L's runner is pid, started now: 0, or -1 (no pidfd: it is not used). */
int engine_early_started(struct launch *L, pid_t pid);
/* Is L's early runner still there? */
int engine_early_alive(const struct launch *L);
/* The grant took it as the job's runner. */
void engine_early_taken(struct launch *L);
/* acquire_opts' prespawn_drop: L's early runner ends (its go with it). */
void engine_prespawn_drop(void *data);
/* The engine's early runner ends, and what it held is closed. */
void engine_early_drop(struct engine *e);
/* Into L, for this job's placement: its run slot (L->run_fd and L->go[1]
 * set), or -1 (none; one of another job is ended). */
int engine_early_take(struct engine *e, struct launch *L, int64_t job, int attempt);
/* After the placement: L's early runner back to the engine while its job
 * waits in the line (waits), else ended. */
void engine_early_keep(struct engine *e, struct launch *L, int run_slot, int waits);

/* place.c */
/* Commit the round's writes, then let its claimed jobs go: 0, or -1. */
int engine_commit_go(struct engine *e);
/* A round of placing: queued jobs in order, while they start. */
void engine_schedule(struct engine *e);

#endif
