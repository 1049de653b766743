/*
 * outcome.h - what the end of a job means, as pure functions: no I/O, no
 * state, so that every rule is tested by a table (tests/unit/test_outcome.c).
 * The engine records a runner's result with outcome_decide; batch --slurm
 * judges a finished step with outcome_classify, outcome_next and
 * outcome_reason, so that a task is retried or requeued by the same rules
 * on a workstation and across a cluster.
 */
#ifndef GM_OUTCOME_H
#define GM_OUTCOME_H

#include <stddef.h>
#include <stdint.h>
#include "jobstore.h"
#include "protocol.h"

/* A job that runs out of GPU memory is requeued this often at most. */
#define OUTCOME_MAX_OOM_REQUEUES 3

enum outcome_kind {
	OUTCOME_OK,     /* exit status 0 */
	OUTCOME_FAILED, /* a non-zero exit status of its own */
	OUTCOME_OOM,    /* failed, and its output said CUDA out of memory */
	OUTCOME_KILLED  /* killed by a signal (128+N), or it never ended (-1) */
};
/* status: protocol_exit_status(), or -1 when the job did not end by itself
 * (its step ended first); oom: protocol_says_oom() of its output. */
enum outcome_kind outcome_classify(int status, int oom);
const char *outcome_kind_name(enum outcome_kind kind);

enum outcome_next {
	OUTCOME_DONE,
	OUTCOME_REQUEUE_OOM, /* again, somewhere with more memory */
	OUTCOME_RETRY,       /* again: --retries allows it */
	OUTCOME_FAIL
};
/* A job's starts, this one included, its out-of-memory requeues so far
 * and the retries it may have. */
struct outcome_counts {
	int attempts, ooms, retries;
};
/* What follows an end of this kind; may_retry 0: no retry whatever
 * --retries says (the allocation is gone). */
enum outcome_next outcome_next(enum outcome_kind kind, const struct outcome_counts *c,
                               int may_retry);
/* The reason of a retry or failure: "<what>[ (CUDA out of memory)]" and,
 * for OUTCOME_RETRY, "; retry N of M".  what: protocol_describe_status()
 * or a cause such as "killed by Slurm: time limit". */
void outcome_reason(enum outcome_next next, const char *what, int oom,
                    const struct outcome_counts *c, char *buf, size_t len);

/* ---- a batch's tail ------------------------------------------------------- */

/*
 * Fastest finish first, at the tail of a sweep: plan the q queued tasks
 * greedily by earliest finish over ng GPUs.  state[k]: 0 not available,
 * 1 free, 2 running a task of ours; avail_ms[k]: when GPU k can start a
 * task (now if free, the estimated end of its task if busy; the plan
 * overwrites it); task_ms[k]: what a task takes there, start included
 * (< 0 unknown: the GPU takes no part in the plan).  Sets used[k] for each
 * free GPU the plan gives a task now, clears the others; returns how many.
 * A free GPU left unused is one on which the remaining tasks would finish
 * later than on a faster GPU that frees up first: leave it idle.
 */
size_t outcome_tail_plan(size_t ng, const unsigned char *state, int64_t *avail_ms,
                         const int64_t *task_ms, size_t q, unsigned char *used);

/* ---- the engine's records ------------------------------------------------ */

/* A running job whose runner has ended. */
struct outcome_in {
	int have_result;          /* 0: the runner died without writing one */
	int requeue_dead;         /* then run it again (batch --resume) */
	struct protocol_result r; /* with have_result */
	const struct job *job;    /* as the store has it: attempts include this start */
	long long limit_s;        /* the time limit its runner kept (engine_time_limit_s) */
	const char *limit_where;  /* "" submit --time; else the admin's max_lease, where */
};
struct outcome {
	enum job_state state;
	int uncount;          /* aborted before it ran: this start does not count */
	int ooms;             /* the job's out-of-memory requeues now */
	int64_t min_free_mib; /* the free memory it needs now (0 any) */
	int has_exit;         /* the result holds its exit status and times */
	char reason[512];     /* "" none */
};
void outcome_decide(const struct outcome_in *in, struct outcome *out);

#endif
