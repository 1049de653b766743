/*
 * jobstore.h - the job store shared by `gpuman batch` and the per-user
 * queue: one SQLite database (WAL) holding every job, its state, where it
 * ran and what it used.  Not part of libgpuman.so (no gm_* call needs it):
 * the Makefile builds it into its own archive for gpuman and the tests.
 *
 * One process writes jobs' progress (the dispatcher, or the batch process
 * itself); others (submit, queue, cancel, wait) read, insert and cancel
 * through their own connections.  SQLite's locks make that safe; the busy
 * timeout makes short waits invisible.  A connection is never carried
 * across fork(): close it first, or open a new one only in a new program.
 *
 * Calling sequence:
 *
 *   struct jobstore *st;
 *   if (jobstore_open(&st, "/path/jobs.db", err, sizeof err) != GM_OK) ...
 *   struct job job = JOB_INIT;
 *   job.command = "python train.py"; ...
 *   jobstore_insert(st, &job, err, sizeof err);      (sets job.id)
 *   ...
 *   jobstore_begin(st, ...); several updates; jobstore_commit(st, ...);
 *   jobstore_close(st);
 *
 * Strings in a struct job read from the store are owned by the job and
 * freed by job_release(); jobs built by a caller for insert may point
 * anywhere (the store copies them) but must then not be released.
 */
#ifndef GM_JOBSTORE_H
#define GM_JOBSTORE_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"

/* A queued job's reason while something of its machine, not the GPUs,
 * keeps it from starting (a full disk, a dispatcher that cannot start);
 * cleared when it starts. */
#define JOB_WAITING "waiting: "
/* The first queued job's reason while the GPUs keep it waiting: this, then
 * who holds them; cleared when it starts. */
#define JOB_BLOCKED "waiting for GPUs"

enum job_state {
	JOB_QUEUED = 0,
	JOB_RUNNING = 1,
	JOB_DONE = 2,        /* exited 0 */
	JOB_FAILED = 3,      /* non-zero exit, signal, never placeable, runner died */
	JOB_CANCELLED = 4,   /* gpuman cancel */
	JOB_INTERRUPTED = 5, /* batch stopped by Ctrl-C while it ran */
	JOB_TIMEOUT = 6      /* ended, whole, at its time limit (submit --time) */
};
#define JOB_STATE_COUNT 7

/* "queued", "running", ...; job_state_parse returns -1 for unknown names. */
const char *job_state_name(enum job_state state);
int job_state_parse(const char *name);
/* Has the job ended (nothing will run it again unless resumed)? */
int job_state_final(enum job_state state);

struct job {
	int64_t id;
	enum job_state state;
	char *command;  /* for people; for a shell job the line itself */
	char *argv;     /* JSON array of arguments; NULL: run command with /bin/sh */
	char *cwd;      /* NULL: the dispatcher's */
	char *env;      /* NAME=VALUE\0...; NULL: the dispatcher's environment */
	size_t env_len; /* bytes of env */
	char *request;  /* JSON object: request options by command-line name */
	char *log;      /* its log file (stdout and stderr) */
	int64_t submit_ms, start_ms, end_ms; /* wall clock; 0 = not yet */
	char *gpus;                          /* NVML indices "1,7"; NULL before placement */
	char *uuids;                         /* "GPU-...,GPU-..." */
	int has_exit;
	int exit_status;         /* exit code, or 128+N when killed by signal N */
	char *reason;            /* why it failed, was requeued or cancelled;
	                          * queued: JOB_WAITING... or JOB_BLOCKED... */
	int attempts;            /* starts so far, retries and requeues included */
	int retries;             /* further starts allowed after a failure */
	int ooms;                /* requeues after CUDA out-of-memory errors */
	int64_t min_free_mib;    /* extra free memory asked after an OOM; 0 none */
	int64_t placed_free_mib; /* free MiB of its GPU(s) when placed; -1 unknown */
	int has_peak;
	int64_t peak_mem_mib; /* most GPU memory its processes held at a sample */
	int util_samples;     /* samples that saw its processes on its GPUs */
	double util_sum;      /* sum of those samples' mean GPU utilization, % */
	int runner_pid;       /* the runner that supervises it while running */
	int run_slot;         /* its run file while running (engine.h); -1 none */
	char *name;           /* submit --name (schema 2); NULL: none */
	int priority;         /* submit --priority (schema 3): higher starts first */
	char *after;          /* submit --after: ids "3,4" it waits for; NULL: none */
	char *notify;         /* submit --notify: how its end is told (notify.h); NULL: not */
	int64_t time_limit_s; /* submit --time (schema 4): ended, whole, after this; 0 none */
	char *node;           /* the node it ran on (batch --slurm); NULL: this machine */
	char *machine;        /* where it runs (submit's GPUMAN_SIM, ...: queue.h); NULL: here */
	int array_task;       /* submit --array: its index; -1 not part of an array */
	int64_t array_of;     /* schema 5: its array's first job id; 0 none */
	int array_limit;      /* --array ...%K: at most K of its array run at once; 0 any */
};
#define JOB_INIT                                                                                   \
	{                                                                                          \
		0, JOB_QUEUED, NULL, NULL, NULL, NULL, 0, NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0,   \
		    NULL, 0, 0, 0, 0, -1, 0, 0, 0, 0.0, 0, -1, NULL, 0, NULL, NULL, 0, NULL, NULL, \
		    -1, 0, 0                                                                       \
	}

/* Free the strings of a job read from the store; keep the struct. */
void job_release(struct job *job);

struct jobstore;

/*
 * Open (creating if needed, mode 0600) the database at path: WAL journal,
 * synchronous=NORMAL (a crash of any process loses nothing committed; a
 * power loss may lose the last commits), a busy timeout of some seconds.
 * GM_ERR_STATE with a message naming the file on failure.
 */
enum gm_err jobstore_open(struct jobstore **out, const char *path, char *errbuf, size_t errlen);
void jobstore_close(struct jobstore *st);

/* Transactions: several changes become visible, and durable, at once.
 * Each returns GM_OK or GM_ERR_IO with the message. */
enum gm_err jobstore_begin(struct jobstore *st, char *errbuf, size_t errlen);
enum gm_err jobstore_commit(struct jobstore *st, char *errbuf, size_t errlen);
void jobstore_rollback(struct jobstore *st);

/* Insert a job; its id is job->id when non-zero (batch: the task number),
 * else the next free one (never reused), written back to job->id.  Its
 * job->after ids go in with it: call it inside jobstore_begin/commit so
 * that they do atomically. */
enum gm_err jobstore_insert(struct jobstore *st, struct job *job, char *errbuf, size_t errlen);

/* Read one job (env only if with_env).  GM_ERR_NOT_FOUND if none. */
enum gm_err jobstore_get(struct jobstore *st, int64_t id, int with_env, struct job *out,
                         char *errbuf, size_t errlen);

/*
 * Jobs in id order: with state >= 0 only those in that state; only ids
 * above after_id; at most limit (0: all).  *jobs (caller frees with
 * jobstore_free_list) holds *count jobs, without env.
 */
enum gm_err jobstore_list(struct jobstore *st, int state, int64_t after_id, size_t limit,
                          struct job **jobs, size_t *count, char *errbuf, size_t errlen);
void jobstore_free_list(struct job *jobs, size_t count);

/* A set of states for jobstore_each: JOB_STATES(JOB_QUEUED) | ... */
#define JOB_STATES(s) (1u << (s))
#define JOB_STATES_LIVE (JOB_STATES(JOB_QUEUED) | JOB_STATES(JOB_RUNNING))

/*
 * Call fn for each job whose state is in the set states (0: every job), in
 * id order, without env, one row at a time: memory does not grow with the
 * store, and a set of live states reads only those jobs (an index on the
 * state), however many finished jobs the store holds.  The job passed to fn
 * is valid during the call only.  A non-zero return from fn stops the walk
 * and is returned in *stopped (may be NULL).
 */
enum gm_err jobstore_each(struct jobstore *st, unsigned states,
                          int (*fn)(void *data, const struct job *job), void *data, int *stopped,
                          char *errbuf, size_t errlen);

/* Ended jobs whose end is still to be told (--notify), in id order
 * (caller frees *ids); then mark each one told.  An index holds only
 * those: cheap to ask after every round. */
enum gm_err jobstore_notify_due(struct jobstore *st, int64_t **ids, size_t *count, char *errbuf,
                                size_t errlen);
enum gm_err jobstore_set_notified(struct jobstore *st, int64_t id, char *errbuf, size_t errlen);

/* Make jobs first..last (inserted in one transaction) one array, whose
 * id is first's (job->array_of). */
enum gm_err jobstore_set_array(struct jobstore *st, int64_t first, int64_t last, char *errbuf,
                               size_t errlen);
/*
 * *yes = 1 when the newest job like this one (the same request, environment
 * and machine; of the last 64 jobs) was submitted at since_ms or later and
 * has not failed, else 0.  Submit checks a request against the machine's
 * GPUs, which loads the driver; it trusts a check made a moment ago.
 */
enum gm_err jobstore_queued_like(struct jobstore *st, const struct job *like, int64_t since_ms,
                                 int *yes, char *errbuf, size_t errlen);
/* Record the node a job ran on (batch --slurm; NULL: none). */
enum gm_err jobstore_set_node(struct jobstore *st, int64_t id, const char *node, char *errbuf,
                              size_t errlen);
/*
 * From now on this connection's dispatching reads (jobstore_ready_ids,
 * _ids, _has_live, _notify_due) see only the jobs whose job->machine is
 * machine ("" also takes the jobs of a store older than machines); NULL:
 * every job, as before.  The queue's dispatchers run one per machine.
 */
enum gm_err jobstore_set_machine(struct jobstore *st, const char *machine, char *errbuf,
                                 size_t errlen);
/*
 * Why none of this machine's queued jobs can start: its dispatcher cannot
 * (the GPUs or the lease registry will not open).  Said on each of them as
 * "waiting: the dispatcher cannot start: WHY; ...", over no reason or a
 * waiting one, never over a reason of the job's own (requeued after running
 * out of memory); WHY NULL takes back what an earlier call said.  *news
 * (may be NULL): 1 when no queued job of the machine said it before (its
 * log should then say it), else 0.
 */
enum gm_err jobstore_set_stalled(struct jobstore *st, const char *why, int *news, char *errbuf,
                                 size_t errlen);
/* The machines ("" for NULL) of the jobs queued, running or with an end
 * still to tell, each once: *machines (each string and the array freed by
 * the caller) holds *count. */
enum gm_err jobstore_live_machines(struct jobstore *st, char ***machines, size_t *count,
                                   char *errbuf, size_t errlen);

/* Is any job queued or running, or an end still to be told?  (Then a
 * dispatcher must live.)  Index probes. */
enum gm_err jobstore_has_live(struct jobstore *st, int *live, char *errbuf, size_t errlen);

/*
 * Ended jobs among ids[0..n): *ended (caller frees) gets the subset whose
 * state is final, with their states, in one read; for `gpuman wait`.
 */
struct job_end {
	int64_t id;
	enum job_state state;
};
enum gm_err jobstore_ended(struct jobstore *st, const int64_t *ids, size_t n,
                           struct job_end **ended, size_t *count, char *errbuf, size_t errlen);

/*
 * The jobs whose end was recorded at or after since_ms (wall clock; not
 * their end time, which may come far earlier; an index): fn gets each id
 * and state.  What a waiter asks at each event: it costs what ended
 * lately, not what it waits for.  Ends recorded before schema 6 are not
 * among them.
 */
enum gm_err jobstore_ended_since(struct jobstore *st, int64_t since_ms,
                                 void (*fn)(void *data, int64_t id, enum job_state state),
                                 void *data, char *errbuf, size_t errlen);

/*
 * Delete the jobs that ended (a final state) before ended_before_ms
 * (INT64_MAX: every ended job), in one transaction.  For each one, before
 * the commit, fn (may be NULL) gets its id and log column (may be NULL) so
 * the caller can remove its files once the call has returned GM_OK.
 * *deleted (may be NULL) gets how many.  Costs what it deletes: an index
 * on the end time.
 */
enum gm_err jobstore_prune(struct jobstore *st, int64_t ended_before_ms,
                           void (*fn)(void *data, int64_t id, const char *log), void *data,
                           size_t *deleted, char *errbuf, size_t errlen);

/*
 * The queue's serving order: queued jobs whose --after jobs have all
 * succeeded (or been pruned), highest priority first, then by id (caller
 * frees *ids).  *waiting gets how many queued jobs still wait for others.
 */
enum gm_err jobstore_ready_ids(struct jobstore *st, int64_t **ids, size_t *count, size_t *waiting,
                               char *errbuf, size_t errlen);

/* Ids of the jobs in a state, in id order (caller frees *ids). */
enum gm_err jobstore_ids(struct jobstore *st, enum job_state state, int64_t **ids, size_t *count,
                         char *errbuf, size_t errlen);

/* How many jobs are in each state: counts[JOB_STATE_COUNT]. */
enum gm_err jobstore_counts(struct jobstore *st, size_t *counts, char *errbuf, size_t errlen);

/*
 * Write every mutable field of job (state, times, placement, result,
 * counters, accounting, runner) -- but only if the stored job is still in
 * state expect with expect_attempts attempts, so that a stale writer (a
 * dispatcher that lost a race, a result of an earlier attempt) changes
 * nothing.  *changed is 1 if it was written, 0 if not.
 */
enum gm_err jobstore_update(struct jobstore *st, const struct job *job, enum job_state expect,
                            int expect_attempts, int *changed, char *errbuf, size_t errlen);

/* Only the accounting of a running job (peak memory, utilization samples). */
enum gm_err jobstore_account(struct jobstore *st, const struct job *job, char *errbuf,
                             size_t errlen);

/* Delete one job (id > 0) or all of them (id == 0). */
enum gm_err jobstore_delete(struct jobstore *st, int64_t id, char *errbuf, size_t errlen);

#endif
