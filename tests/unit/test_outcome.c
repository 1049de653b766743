/*
 * test_outcome.c - the rules of a job's end (engine/outcome.c), by tables:
 * exit statuses classified, what follows each end, the reasons recorded,
 * the engine's whole decision from a runner's result, and a batch's tail
 * plan on fast and slow GPUs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "outcome.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static void test_classify(void **state)
{
	static const struct {
		int status, oom;
		enum outcome_kind kind;
	} rows[] = {
	    {0, 0, OUTCOME_OK},
	    {0, 1, OUTCOME_OK}, /* printed the words, yet succeeded */
	    {1, 0, OUTCOME_FAILED},
	    {127, 0, OUTCOME_FAILED}, /* command not found */
	    {128, 0, OUTCOME_FAILED}, /* no signal 0 */
	    {1, 1, OUTCOME_OOM},
	    {137, 1, OUTCOME_OOM}, /* killed, but out of memory first */
	    {128 + 9, 0, OUTCOME_KILLED},
	    {128 + 15, 0, OUTCOME_KILLED},
	    {128 + 64, 0, OUTCOME_KILLED},
	    {128 + 65, 0, OUTCOME_FAILED}, /* exit 193 is no signal */
	    {255, 0, OUTCOME_FAILED},
	    {-1, 0, OUTCOME_KILLED}, /* its step ended first */
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		enum outcome_kind k = outcome_classify(rows[i].status, rows[i].oom);

		if (k != rows[i].kind)
			fail_msg("status %d oom %d: %s, not %s", rows[i].status, rows[i].oom,
			         outcome_kind_name(k), outcome_kind_name(rows[i].kind));
	}
	assert_string_equal(outcome_kind_name(OUTCOME_KILLED), "killed");
}

static void test_next(void **state)
{
	static const struct {
		enum outcome_kind kind;
		int attempts, ooms, retries, may_retry;
		enum outcome_next next;
	} rows[] = {
	    {OUTCOME_OK, 1, 0, 0, 1, OUTCOME_DONE},
	    {OUTCOME_OK, 4, 3, 0, 0, OUTCOME_DONE},
	    {OUTCOME_FAILED, 1, 0, 0, 1, OUTCOME_FAIL},
	    {OUTCOME_FAILED, 1, 0, 1, 1, OUTCOME_RETRY}, /* retry 1 of 1 */
	    {OUTCOME_FAILED, 2, 0, 1, 1, OUTCOME_FAIL},  /* used up */
	    {OUTCOME_FAILED, 1, 0, 2, 0, OUTCOME_FAIL},  /* the allocation is gone */
	    {OUTCOME_KILLED, 2, 0, 2, 1, OUTCOME_RETRY},
	    {OUTCOME_OOM, 1, 0, 0, 1, OUTCOME_REQUEUE_OOM},
	    {OUTCOME_OOM, 3, 2, 0, 1, OUTCOME_REQUEUE_OOM},
	    {OUTCOME_OOM, 4, 3, 0, 1, OUTCOME_FAIL},        /* three requeues: enough */
	    {OUTCOME_OOM, 4, 3, 1, 1, OUTCOME_RETRY},       /* then --retries */
	    {OUTCOME_OOM, 1, 0, 0, 0, OUTCOME_REQUEUE_OOM}, /* not a retry */
	    {OUTCOME_FAILED, 4, 3, 1, 1, OUTCOME_RETRY},    /* requeues are not retries */
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		struct outcome_counts c = {rows[i].attempts, rows[i].ooms, rows[i].retries};

		if (outcome_next(rows[i].kind, &c, rows[i].may_retry) != rows[i].next)
			fail_msg("row %zu: %d, not %d", i,
			         outcome_next(rows[i].kind, &c, rows[i].may_retry), rows[i].next);
	}
}

static void test_reason(void **state)
{
	struct outcome_counts c = {2, 1, 3};
	char buf[128];

	(void)state;
	outcome_reason(OUTCOME_RETRY, "exit status 1", 0, &c, buf, sizeof buf);
	assert_string_equal(buf, "exit status 1; retry 1 of 3");
	outcome_reason(OUTCOME_RETRY, "killed by Slurm: time limit", 1, &c, buf, sizeof buf);
	assert_string_equal(buf, "killed by Slurm: time limit (CUDA out of memory); retry 1 of 3");
	outcome_reason(OUTCOME_FAIL, "exit status 2", 1, &c, buf, sizeof buf);
	assert_string_equal(buf, "exit status 2 (CUDA out of memory)");
	outcome_reason(OUTCOME_FAIL, "exit status 2", 0, &c, buf, sizeof buf);
	assert_string_equal(buf, "exit status 2");
}

/* The engine's decision, from the job's row and its runner's result. */
static void test_decide(void **state)
{
	static const struct {
		const char *what;
		int have, requeue_dead;
		enum protocol_stop stop;
		int status, oom;
		int attempts, ooms, retries;
		int64_t placed_free, min_free;
		const char *prior;
		/* expected */
		enum job_state st;
		int uncount, ooms_after, has_exit;
		int64_t min_free_after;
		const char *reason;
	} rows[] = {
	    {"done", 1, 0, PROTOCOL_STOP_NONE, 0, 0, 1, 0, 0, 5000, 0, NULL, JOB_DONE, 0, 0, 1, 0,
	     ""},
	    {"done after an OOM requeue keeps why", 1, 0, PROTOCOL_STOP_NONE, 0, 0, 2, 1, 0, 9000,
	     5001, "CUDA out of memory on GPU 3 with 5000 MiB free; requeued", JOB_DONE, 0, 1, 1,
	     5001, "CUDA out of memory on GPU 3 with 5000 MiB free; requeued"},
	    {"runner died", 0, 0, PROTOCOL_STOP_NONE, 0, 0, 1, 0, 3, -1, 0, NULL, JOB_FAILED, 0, 0,
	     0, 0,
	     "runner died: its supervisor was killed before it "
	     "recorded a result (the job was killed with it)"},
	    {"runner died, --resume", 0, 1, PROTOCOL_STOP_NONE, 0, 0, 1, 0, 0, -1, 0, NULL,
	     JOB_QUEUED, 0, 0, 0, 0, "its runner died; queued again"},
	    {"aborted: never ran", 1, 0, PROTOCOL_STOP_ABORTED, -1, 0, 2, 0, 0, -1, 0, "earlier",
	     JOB_QUEUED, 1, 0, 0, 0, "earlier"},
	    {"cancelled", 1, 0, PROTOCOL_STOP_CANCELLED, 143, 0, 1, 0, 5, -1, 0, NULL,
	     JOB_CANCELLED, 0, 0, 1, 0, "cancelled"},
	    {"timeout: never retried", 1, 0, PROTOCOL_STOP_TIMEOUT, 143, 0, 1, 0, 5, -1, 0, NULL,
	     JOB_TIMEOUT, 0, 0, 1, 0, "time limit (1h30m) reached: ended with its processes"},
	    {"interrupted", 1, 0, PROTOCOL_STOP_INTERRUPTED, 130, 0, 1, 0, 5, -1, 0, NULL,
	     JOB_INTERRUPTED, 0, 0, 1, 0, "interrupted (Ctrl-C)"},
	    {"OOM: needs more than it had", 1, 0, PROTOCOL_STOP_NONE, 1, 1, 1, 0, 0, 5000, 0, NULL,
	     JOB_QUEUED, 0, 1, 1, 5001,
	     "CUDA out of memory on GPU 3 with 5000 MiB free; requeued for a GPU with more"},
	    {"OOM: a higher floor stays", 1, 0, PROTOCOL_STOP_NONE, 1, 1, 2, 1, 0, 5000, 8000, NULL,
	     JOB_QUEUED, 0, 2, 1, 8000,
	     "CUDA out of memory on GPU 3 with 5000 MiB free; requeued for a GPU with more"},
	    {"OOM, free unknown", 1, 0, PROTOCOL_STOP_NONE, 1, 1, 1, 0, 0, -1, 0, NULL, JOB_QUEUED,
	     0, 1, 1, 0, "CUDA out of memory on GPU 3; requeued"},
	    {"OOM after three requeues", 1, 0, PROTOCOL_STOP_NONE, 1, 1, 4, 3, 0, 5000, 5001, NULL,
	     JOB_FAILED, 0, 3, 1, 5001, "exit status 1 (CUDA out of memory)"},
	    {"retry", 1, 0, PROTOCOL_STOP_NONE, 2, 0, 1, 0, 2, -1, 0, NULL, JOB_QUEUED, 0, 0, 1, 0,
	     "exit status 2; retry 1 of 2"},
	    {"killed, no retries", 1, 0, PROTOCOL_STOP_NONE, 137, 0, 1, 0, 0, -1, 0, NULL,
	     JOB_FAILED, 0, 0, 1, 0, "killed by signal 9 (Killed)"},
	    {"not found", 1, 0, PROTOCOL_STOP_NONE, 127, 0, 1, 0, 0, -1, 0, NULL, JOB_FAILED, 0, 0,
	     1, 0, "exit status 127 (command not found?)"},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		struct job job = JOB_INIT;
		struct outcome_in in = {0};
		struct outcome out;

		job.id = 7;
		job.state = JOB_RUNNING;
		job.attempts = rows[i].attempts;
		job.ooms = rows[i].ooms;
		job.retries = rows[i].retries;
		job.placed_free_mib = rows[i].placed_free;
		job.min_free_mib = rows[i].min_free;
		job.gpus = (char *)"3";
		job.time_limit_s = 5400;
		job.reason = (char *)rows[i].prior;
		in.have_result = rows[i].have;
		in.requeue_dead = rows[i].requeue_dead;
		in.job = &job;
		in.r = (struct protocol_result){
		    7, rows[i].attempts, 1000, 2000, rows[i].status, rows[i].oom, rows[i].stop};
		outcome_decide(&in, &out);
		if (out.state != rows[i].st || out.uncount != rows[i].uncount ||
		    out.ooms != rows[i].ooms_after || out.has_exit != rows[i].has_exit ||
		    out.min_free_mib != rows[i].min_free_after ||
		    strcmp(out.reason, rows[i].reason))
			fail_msg("%s: state %s uncount %d ooms %d has_exit %d min_free %lld '%s'",
			         rows[i].what, job_state_name(out.state), out.uncount, out.ooms,
			         out.has_exit, (long long)out.min_free_mib, out.reason);
	}
}

/* Tail plans: which free GPUs get a task now. */
static void test_tail_plan(void **state)
{
	static const struct {
		const char *what;
		size_t ng, q;
		unsigned char state[4];
		int64_t avail[4], task[4];
		unsigned char used[4];
		size_t count;
	} rows[] = {
	    {"a slow GPU waits for the last task (a fast one ends sooner)",
	     2,
	     1,
	     {1, 2},
	     {0, 100},
	     {1000, 100},
	     {0, 0},
	     0},
	    {"two tasks: the fast busy one takes one, the slow free one still loses",
	     2,
	     2,
	     {1, 2},
	     {0, 100},
	     {1000, 100},
	     {0, 0},
	     0},
	    {"enough tasks left: the slow GPU works too",
	     2,
	     12,
	     {1, 2},
	     {0, 100},
	     {1000, 100},
	     {1, 0},
	     1},
	    {"two free equal GPUs, one task: the first takes it",
	     2,
	     1,
	     {1, 1},
	     {0, 0},
	     {100, 100},
	     {1, 0},
	     1},
	    {"two free equal GPUs, two tasks: both", 2, 2, {1, 1}, {0, 0}, {100, 100}, {1, 1}, 2},
	    {"an unknown GPU is not planned (the caller lets it work)",
	     3,
	     1,
	     {1, 1, 2},
	     {0, 0, 50},
	     {-1, 300, 100},
	     {0, 0, 0},
	     0},
	    {"an unavailable GPU is never used", 2, 3, {0, 1}, {0, 0}, {10, 500}, {0, 1}, 1},
	    {"nothing queued", 2, 0, {1, 1}, {0, 0}, {10, 10}, {0, 0}, 0},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		int64_t avail[4];
		unsigned char used[4] = {9, 9, 9, 9};
		size_t n;

		memcpy(avail, rows[i].avail, sizeof avail);
		n = outcome_tail_plan(rows[i].ng, rows[i].state, avail, rows[i].task, rows[i].q,
		                      used);
		if (n != rows[i].count || memcmp(used, rows[i].used, rows[i].ng))
			fail_msg("%s: %zu used (%d %d %d)", rows[i].what, n, used[0], used[1],
			         used[2]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_classify),  cmocka_unit_test(test_next),
	    cmocka_unit_test(test_reason),    cmocka_unit_test(test_decide),
	    cmocka_unit_test(test_tail_plan),
	};

	return cmocka_run_group_tests_name("outcome", tests, NULL, NULL);
}
