/*
 * engine.h - the dispatch engine shared by `gpuman batch`, `gpuman batch
 * --slurm` and the queue's dispatcher: it starts queued jobs of a job store
 * as GPUs that fit free up, records their results, and accounts what they
 * used.  The one header of the engine module (engine/, built into
 * libgmengine.a with the job store, jobstore.h, and the pure rules of a
 * job's end, outcome.h) that the commands include; engine/internal.h is
 * the engine's own.  Where jobs run is a placement (internal.h): this
 * machine's GPUs, each job under its own runner, as below; or, with
 * engine_config.slurm, srun steps in a Slurm allocation (engine/slurm.c).
 *
 * A job's life on this machine, and who writes what:
 *
 *   queued   --(engine: lease GPUs, start the runner, commit "running")-->
 *   running  --(runner: run the job, write the result into its run file,
 *               release the lease, exit; engine: commit the result)-->
 *   done | failed | cancelled | interrupted | queued again (retry, OOM)
 *
 * The runner is gpuman-runner (runner/gpuman-runner.c), a small static
 * program the engine starts with posix_spawn under the registry lock, so
 * that the lease names it from the start.  Each running job has a run file
 * <run_dir>/slot-<n>.run (n recorded in the job's row; the files are
 * reused, not created per job) that its runner holds flock'd from the claim
 * until it exits, and into which it writes its result before releasing its
 * lease.  The runner never touches SQLite: results reach the store through
 * the engine, which reads run files when runners exit, one transaction per
 * round.  So the engine can be killed at any instant: a restarted engine
 * finds each "running" job's runner alive (run file locked: it watches its
 * pidfd), finished (result in the file: recorded now) or dead without a
 * result (failed, "runner died").  A runner waits for a go byte that the
 * engine writes only after the claim has committed; one that gets end of
 * file instead (the engine died in between) does not run its job, which
 * stays queued: no job is lost, none runs twice.  A run slot is not reused
 * before the round that recorded its result has committed.
 *
 * The engine never busy-polls: it sleeps in poll() on a signalfd (its
 * runners' exits, Ctrl-C), inotify on the lease registry (GPUs released by
 * anybody) and on the queue directory's wake file (submit, cancel), pidfds
 * of adopted runners, and a one-second tick only while jobs are queued or
 * running (NVML changes made outside gpuman; accounting samples).
 */
#ifndef GM_ENGINE_H
#define GM_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "gpuman.h"
#include "jobstore.h"
#include "outcome.h"

struct registry;
struct slurm_alloc;

/* batch --slurm: where its tasks run (engine/slurm.c). */
struct engine_slurm {
	struct slurm_alloc *alloc;    /* made or adopted, and released, by the caller */
	const char *const *step_args; /* more srun options for each step; NULL-terminated */
	unsigned per_task;            /* GPUs per task (-n) */
	char ended[256];              /* out: why the allocation ended early, "" if not */
};

struct engine_counts {
	size_t queued, running, done, failed, cancelled, interrupted;
	int64_t started_ms; /* monotonic, when the engine started */
	int interrupting;   /* Ctrl-C seen: running jobs are being stopped */
};

struct engine_config {
	struct jobstore *store;
	const char *run_dir; /* run files; must exist */
	const char *log_dir; /* "<id>.log" for jobs that name no log */
	struct gm_context *ctx;
	struct registry *reg;
	/* 1: a batch (Ctrl-C stops its tasks; a sweep's heuristics: learned
	 * out-of-memory floors, fastest-finish placement at the tail); 0: the
	 * queue's dispatcher (SIGTERM leaves its jobs running). */
	int batch;
	/* Batch: the request of every task.  NULL: the queue; each job has
	 * its own. */
	const struct gm_request *request;
	/* Batch on Slurm: tasks run as srun steps in this allocation, not on
	 * this machine's GPUs (ctx and reg unused then).  NULL: this machine. */
	struct engine_slurm *slurm;
	/* Queue on Slurm: each job its own `sbatch` job with these options
	 * (space-separated; engine/sbatch.c); NULL: not. */
	const char *sbatch_args;
	int no_framework_env; /* batch: no framework memory variables */
	unsigned max_running; /* -j; 0: as many as GPUs allow */
	int requeue_dead;     /* a job whose runner died runs again (--resume) */
	/* Queue: the dispatcher's lock, dropped (and re-taken if jobs came in
	 * meanwhile) when nothing is left; -1 for batch. */
	int dispatcher_lock_fd;
	const char *wake_name; /* file name in wake_dir whose writes mean "look again" */
	const char *wake_dir;
	const char *events_path; /* rewritten after jobs end (wait, logs -f watch it) */
	FILE *log;               /* messages for people (dispatcher.log); may be NULL */
	void (*progress)(void *data, const struct engine_counts *counts);
	void *progress_data;
	/* Batch: none of its tasks runs and the first waits for GPUs that
	 * others hold.  Called with the rules' reason once, and again only
	 * after a task has started since; may be NULL. */
	void (*blocked)(void *data, const char *why);
	void *blocked_data;
	/* Queue: called after each round has committed (the dispatcher tells
	 * the ends that --notify asked for); may be NULL. */
	void (*round_done)(void *data);
	void *round_data;
};

enum engine_result {
	ENGINE_DONE = 0,        /* nothing queued or running is left */
	ENGINE_INTERRUPTED = 1, /* batch: Ctrl-C; every started job ended */
	ENGINE_STOPPED = 2,     /* dispatcher: SIGTERM, or another dispatcher took over */
	ENGINE_ERROR = -1       /* errbuf says why */
};

enum engine_result engine_run(const struct engine_config *cfg, char *errbuf, size_t errlen);

/* A request as JSON text (the job store's "request" column): option names
 * of the command line.  Caller frees; NULL on out-of-memory. */
char *engine_request_json(const struct gm_request *req, int no_framework_env);
/* Parse it back; *no_framework_env may be NULL.  NULL on bad text. */
struct gm_request *engine_request_parse(const char *json, int *no_framework_env, char *errbuf,
                                        size_t errlen);

/* A job as JSON (the schema of `gpuman queue --json`, gpuman-queue(1)); batch: a
 * batch task ("task" instead of "id", no argv, cwd, submit time).  New
 * reference. */
struct json_t;
struct json_t *job_json(const struct job *job, const char *log_path, int batch);

/* Where a job ran, as the GPU columns show it: "NODE:GPUS" for a Slurm
 * task (job->node), else its GPUs; "-" when none.  Returns buf. */
const char *job_where(const struct job *job, char *buf, size_t len);

#endif
