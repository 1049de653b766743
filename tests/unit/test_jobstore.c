/*
 * test_jobstore.c - the job store that batch and the queue share: what the
 * engine's exactly-once rests on is that a stale writer (an earlier
 * attempt's result, a claim that lost a race) changes nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "jobstore.h"

struct fixture {
	char dir[64];
	char path[128];
	struct jobstore *st;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	char err[GM_ERRBUF_SIZE];

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "/tmp/gm-jobstore-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof f->path, "%s/jobs.db", f->dir);
	assert_int_equal(jobstore_open(&f->st, f->path, err, sizeof err), GM_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[160];

	jobstore_close(f->st);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static int64_t add(struct jobstore *st, int64_t id, const char *command)
{
	struct job j = JOB_INIT;
	char err[GM_ERRBUF_SIZE];

	j.id = id;
	j.command = (char *)command;
	j.submit_ms = 1000;
	j.env = (char *)"A=1\0B=two";
	j.env_len = 9;
	assert_int_equal(jobstore_insert(st, &j, err, sizeof err), GM_OK);
	return j.id;
}

static void test_insert_get_roundtrip_private_file(void **state)
{
	struct fixture *f = *state;
	struct job j;
	struct stat sb;
	char err[GM_ERRBUF_SIZE];
	int64_t id = add(f->st, 0, "python train.py");

	assert_int_equal(id, 1);
	assert_int_equal(jobstore_get(f->st, id, 1, &j, err, sizeof err), GM_OK);
	assert_string_equal(j.command, "python train.py");
	assert_int_equal(j.state, JOB_QUEUED);
	assert_int_equal(j.env_len, 9);
	assert_memory_equal(j.env, "A=1\0B=two", 9);
	assert_int_equal(j.placed_free_mib, -1);
	assert_int_equal(j.run_slot, -1);
	assert_false(j.has_exit);
	assert_false(j.has_peak);
	job_release(&j);
	assert_int_equal(jobstore_get(f->st, 42, 0, &j, err, sizeof err), GM_ERR_NOT_FOUND);
	assert_int_equal(stat(f->path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
}

static void test_batch_ids_are_task_numbers_queue_ids_never_reused(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];

	assert_int_equal(add(f->st, 7, "task seven"), 7);
	assert_int_equal(add(f->st, 0, "next"), 8);
	assert_int_equal(jobstore_delete(f->st, 8, err, sizeof err), GM_OK);
	assert_int_equal(add(f->st, 0, "after a delete"), 9);
}

static void test_update_only_from_the_expected_state_and_attempt(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	struct job j, claim;
	int changed = -1;
	int64_t id = add(f->st, 0, "job");

	assert_int_equal(jobstore_get(f->st, id, 0, &j, err, sizeof err), GM_OK);
	claim = j;
	claim.state = JOB_RUNNING;
	claim.attempts = 1;
	claim.gpus = (char *)"3";
	claim.run_slot = 2;
	assert_int_equal(jobstore_update(f->st, &claim, JOB_QUEUED, 0, &changed, err, sizeof err),
	                 GM_OK);
	assert_int_equal(changed, 1);
	/* a second claim of the same job (a dispatcher that lost a race) */
	assert_int_equal(jobstore_update(f->st, &claim, JOB_QUEUED, 0, &changed, err, sizeof err),
	                 GM_OK);
	assert_int_equal(changed, 0);
	/* the result of another attempt changes nothing */
	claim.state = JOB_DONE;
	assert_int_equal(jobstore_update(f->st, &claim, JOB_RUNNING, 2, &changed, err, sizeof err),
	                 GM_OK);
	assert_int_equal(changed, 0);
	claim.has_exit = 1;
	claim.exit_status = 0;
	claim.has_peak = 1;
	claim.peak_mem_mib = 2048;
	claim.util_samples = 2;
	claim.util_sum = 170.0;
	assert_int_equal(jobstore_update(f->st, &claim, JOB_RUNNING, 1, &changed, err, sizeof err),
	                 GM_OK);
	assert_int_equal(changed, 1);
	job_release(&j);
	assert_int_equal(jobstore_get(f->st, id, 0, &j, err, sizeof err), GM_OK);
	assert_int_equal(j.state, JOB_DONE);
	assert_string_equal(j.gpus, "3");
	assert_int_equal(j.run_slot, 2);
	assert_true(j.has_exit);
	assert_int_equal(j.peak_mem_mib, 2048);
	assert_int_equal(j.util_samples, 2);
	job_release(&j);
}

static void test_lists_counts_and_transactions(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	size_t counts[JOB_STATE_COUNT], n;
	struct job *jobs, j;
	int64_t *ids;
	int changed;

	for (int i = 0; i < 5; i++)
		add(f->st, 0, "j");
	assert_int_equal(jobstore_get(f->st, 2, 0, &j, err, sizeof err), GM_OK);
	j.state = JOB_CANCELLED;
	assert_int_equal(jobstore_begin(f->st, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_update(f->st, &j, JOB_QUEUED, 0, &changed, err, sizeof err),
	                 GM_OK);
	jobstore_rollback(f->st);
	assert_int_equal(jobstore_counts(f->st, counts, err, sizeof err), GM_OK);
	assert_int_equal(counts[JOB_QUEUED], 5);
	assert_int_equal(jobstore_begin(f->st, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_update(f->st, &j, JOB_QUEUED, 0, &changed, err, sizeof err),
	                 GM_OK);
	assert_int_equal(jobstore_commit(f->st, err, sizeof err), GM_OK);
	job_release(&j);
	assert_int_equal(jobstore_counts(f->st, counts, err, sizeof err), GM_OK);
	assert_int_equal(counts[JOB_QUEUED], 4);
	assert_int_equal(counts[JOB_CANCELLED], 1);
	assert_int_equal(jobstore_ids(f->st, JOB_QUEUED, &ids, &n, err, sizeof err), GM_OK);
	assert_int_equal(n, 4);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 3);
	free(ids);
	assert_int_equal(jobstore_list(f->st, JOB_QUEUED, 1, 2, &jobs, &n, err, sizeof err), GM_OK);
	assert_int_equal(n, 2);
	assert_int_equal(jobs[0].id, 3);
	assert_int_equal(jobs[1].id, 4);
	jobstore_free_list(jobs, n);
	assert_int_equal(jobstore_list(f->st, -1, 0, 0, &jobs, &n, err, sizeof err), GM_OK);
	assert_int_equal(n, 5);
	jobstore_free_list(jobs, n);
}

/* End job id in state at end_ms. */
static void finish(struct jobstore *st, int64_t id, enum job_state state, int64_t end_ms)
{
	char err[GM_ERRBUF_SIZE];
	struct job j;
	int changed = 0;

	assert_int_equal(jobstore_get(st, id, 0, &j, err, sizeof err), GM_OK);
	j.state = state;
	j.end_ms = end_ms;
	assert_int_equal(jobstore_update(st, &j, JOB_QUEUED, 0, &changed, err, sizeof err), GM_OK);
	assert_int_equal(changed, 1);
	job_release(&j);
}

struct seen {
	int64_t ids[16];
	size_t n;
	int stop_at;
};

static int note(void *data, const struct job *job)
{
	struct seen *s = data;

	s->ids[s->n++] = job->id;
	return (int)s->n == s->stop_at ? 7 : 0;
}

static void test_each_streams_a_set_of_states(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	struct seen s = {{0}, 0, 0};
	int stopped = -1, live = -1;

	for (int i = 0; i < 5; i++)
		add(f->st, 0, "j");
	finish(f->st, 2, JOB_DONE, 5000);
	finish(f->st, 4, JOB_FAILED, 6000);
	assert_int_equal(jobstore_each(f->st, JOB_STATES_LIVE, note, &s, &stopped, err, sizeof err),
	                 GM_OK);
	assert_int_equal(stopped, 0);
	assert_int_equal(s.n, 3);
	assert_int_equal(s.ids[0], 1);
	assert_int_equal(s.ids[1], 3);
	assert_int_equal(s.ids[2], 5);
	s.n = 0;
	assert_int_equal(jobstore_each(f->st, JOB_STATES(JOB_FAILED) | JOB_STATES(JOB_DONE), note,
	                               &s, NULL, err, sizeof err),
	                 GM_OK);
	assert_int_equal(s.n, 2);
	assert_int_equal(s.ids[1], 4);
	s.n = 0;
	s.stop_at = 2;
	assert_int_equal(jobstore_each(f->st, 0, note, &s, &stopped, err, sizeof err), GM_OK);
	assert_int_equal(stopped, 7);
	assert_int_equal(s.n, 2);
	assert_int_equal(jobstore_has_live(f->st, &live, err, sizeof err), GM_OK);
	assert_int_equal(live, 1);
	for (int64_t id = 1; id <= 5; id += 2)
		finish(f->st, id, JOB_CANCELLED, 7000);
	assert_int_equal(jobstore_has_live(f->st, &live, err, sizeof err), GM_OK);
	assert_int_equal(live, 0);
}

static void test_ended_reads_only_final_states_and_names_unknown_ids(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	struct job_end *ended;
	size_t n;
	int64_t ids[] = {3, 1, 2}, bad[] = {1, 99};

	for (int i = 0; i < 3; i++)
		add(f->st, 0, "j");
	finish(f->st, 1, JOB_DONE, 5000);
	finish(f->st, 3, JOB_CANCELLED, 5000);
	assert_int_equal(jobstore_ended(f->st, ids, 3, &ended, &n, err, sizeof err), GM_OK);
	assert_int_equal(n, 2);
	assert_int_equal(ended[0].id, 3);
	assert_int_equal(ended[0].state, JOB_CANCELLED);
	assert_int_equal(ended[1].id, 1);
	assert_int_equal(ended[1].state, JOB_DONE);
	free(ended);
	assert_int_equal(jobstore_ended(f->st, bad, 2, &ended, &n, err, sizeof err),
	                 GM_ERR_NOT_FOUND);
	assert_non_null(strstr(err, "no job 99"));
}

static void seen(void *data, int64_t id, enum job_state state)
{
	int64_t *got = data;

	(void)state;
	got[got[0] + 1] = id;
	got[0]++;
}

/* A waiter's read at each event: the ends recorded since it last looked,
 * whenever they happened.  A dispatcher under load records an end long
 * after it (here: an end_ms of 1970); asked by end time, the waiter missed
 * it until its next full look. */
static void test_ended_since_is_by_when_the_end_was_recorded(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	int64_t got[8] = {0}, before;
	struct timespec ts;

	for (int i = 0; i < 3; i++)
		add(f->st, 0, "j");
	clock_gettime(CLOCK_REALTIME, &ts);
	before = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - 1000;
	finish(f->st, 1, JOB_DONE, 5000);
	finish(f->st, 3, JOB_FAILED, 7000);
	assert_int_equal(jobstore_ended_since(f->st, before, seen, got, err, sizeof err), GM_OK);
	assert_int_equal(got[0], 2);
	assert_true((got[1] == 1 && got[2] == 3) || (got[1] == 3 && got[2] == 1));
	/* recorded before the look: not again */
	got[0] = 0;
	assert_int_equal(jobstore_ended_since(f->st, before + 60000, seen, got, err, sizeof err),
	                 GM_OK);
	assert_int_equal(got[0], 0);
}

static void pruned(void *data, int64_t id, const char *log)
{
	struct seen *s = data;

	(void)log;
	s->ids[s->n++] = id;
}

static void test_prune_deletes_only_jobs_that_ended_before(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	struct seen s = {{0}, 0, 0};
	struct job j;
	size_t n = 0;

	for (int i = 0; i < 4; i++)
		add(f->st, 0, "j");
	finish(f->st, 1, JOB_DONE, 1000);
	finish(f->st, 2, JOB_FAILED, 9000);
	finish(f->st, 3, JOB_CANCELLED, 2000);
	assert_int_equal(jobstore_prune(f->st, 5000, pruned, &s, &n, err, sizeof err), GM_OK);
	assert_int_equal(n, 2);
	assert_int_equal(s.n, 2);
	assert_int_equal(jobstore_get(f->st, 1, 0, &j, err, sizeof err), GM_ERR_NOT_FOUND);
	assert_int_equal(jobstore_get(f->st, 2, 0, &j, err, sizeof err), GM_OK);
	job_release(&j);
	/* everything that ended; the queued job stays */
	assert_int_equal(jobstore_prune(f->st, INT64_MAX, NULL, NULL, &n, err, sizeof err), GM_OK);
	assert_int_equal(n, 1);
	assert_int_equal(jobstore_get(f->st, 4, 0, &j, err, sizeof err), GM_OK);
	assert_int_equal(j.state, JOB_QUEUED);
	job_release(&j);
}

static void test_name_roundtrip(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	struct job j = JOB_INIT;

	j.command = (char *)"train";
	j.name = (char *)"lr3e-4";
	assert_int_equal(jobstore_insert(f->st, &j, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_get(f->st, j.id, 0, &j, err, sizeof err), GM_OK);
	assert_string_equal(j.name, "lr3e-4");
	job_release(&j);
	assert_int_equal(jobstore_get(f->st, add(f->st, 0, "x"), 0, &j, err, sizeof err), GM_OK);
	assert_null(j.name);
	job_release(&j);
}

/* Schema 4: time limit, machine and array task go in with the job; the
 * node is set afterwards; a dispatcher's machine filter sees its own jobs
 * (and those of a store older than machines as the default machine's). */
static void test_schema4_fields_and_machine_filter(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	struct job j = JOB_INIT;
	int64_t *ids = NULL, lab, laptop, old;
	size_t n = 0, waiting = 0;
	int live = 0, changed = 0;

	j.command = (char *)"train";
	j.time_limit_s = 90;
	j.machine = (char *)"GPUMAN_SIM=lab.json";
	j.array_task = 3;
	assert_int_equal(jobstore_insert(f->st, &j, err, sizeof err), GM_OK);
	lab = j.id;
	j = (struct job)JOB_INIT;
	j.command = (char *)"eval";
	j.machine = (char *)"GPUMAN_SIM=laptop.json";
	assert_int_equal(jobstore_insert(f->st, &j, err, sizeof err), GM_OK);
	laptop = j.id;
	old = add(f->st, 0, "from schema 3"); /* machine NULL */
	assert_int_equal(jobstore_set_node(f->st, lab, "n7", err, sizeof err), GM_OK);
	assert_int_equal(jobstore_get(f->st, lab, 0, &j, err, sizeof err), GM_OK);
	assert_int_equal(j.time_limit_s, 90);
	assert_string_equal(j.machine, "GPUMAN_SIM=lab.json");
	assert_string_equal(j.node, "n7");
	assert_int_equal(j.array_task, 3);
	job_release(&j);
	assert_int_equal(jobstore_get(f->st, old, 0, &j, err, sizeof err), GM_OK);
	assert_int_equal(j.time_limit_s, 0);
	assert_null(j.node);
	assert_null(j.machine);
	assert_int_equal(j.array_task, -1);
	job_release(&j);

	assert_int_equal(jobstore_set_machine(f->st, "GPUMAN_SIM=laptop.json", err, sizeof err),
	                 GM_OK);
	assert_int_equal(jobstore_ready_ids(f->st, &ids, &n, &waiting, err, sizeof err), GM_OK);
	assert_int_equal(n, 1);
	assert_int_equal(ids[0], laptop);
	free(ids);
	assert_int_equal(jobstore_set_machine(f->st, "", err, sizeof err), GM_OK);
	assert_int_equal(jobstore_ready_ids(f->st, &ids, &n, &waiting, err, sizeof err), GM_OK);
	assert_int_equal(n, 1);
	assert_int_equal(ids[0], old);
	free(ids);
	assert_int_equal(jobstore_set_machine(f->st, "elsewhere", err, sizeof err), GM_OK);
	assert_int_equal(jobstore_has_live(f->st, &live, err, sizeof err), GM_OK);
	assert_false(live);
	assert_int_equal(jobstore_set_machine(f->st, NULL, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_ready_ids(f->st, &ids, &n, &waiting, err, sizeof err), GM_OK);
	assert_int_equal(n, 3);
	free(ids);

	/* A job that times out cancels the job after it, as a failure does. */
	j = (struct job)JOB_INIT;
	j.command = (char *)"after";
	j.after = (char *)"1";
	assert_int_equal(jobstore_insert(f->st, &j, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_get(f->st, lab, 0, &j, err, sizeof err), GM_OK);
	j.state = JOB_TIMEOUT;
	j.end_ms = 5000;
	assert_int_equal(
	    jobstore_update(f->st, &j, JOB_QUEUED, j.attempts, &changed, err, sizeof err), GM_OK);
	assert_true(changed);
	job_release(&j);
	assert_int_equal(jobstore_get(f->st, 4, 0, &j, err, sizeof err), GM_OK);
	assert_int_equal(j.state, JOB_CANCELLED);
	assert_string_equal(j.reason, "not started: job 1 (--after) timed out");
	job_release(&j);
}

static void insert_on(struct jobstore *st, const char *machine, const char *reason)
{
	struct job j = JOB_INIT;
	char err[GM_ERRBUF_SIZE];

	int changed = 0;

	j.command = (char *)"train";
	j.machine = (char *)machine;
	assert_int_equal(jobstore_insert(st, &j, err, sizeof err), GM_OK);
	if (!reason)
		return;
	j.reason = (char *)reason; /* the engine's, as it said it */
	assert_int_equal(jobstore_update(st, &j, JOB_QUEUED, j.attempts, &changed, err, sizeof err),
	                 GM_OK);
	assert_true(changed);
}

static const char *reason_of(struct jobstore *st, int64_t id, char *buf, size_t len)
{
	char err[GM_ERRBUF_SIZE];
	struct job j;

	assert_int_equal(jobstore_get(st, id, 0, &j, err, sizeof err), GM_OK);
	snprintf(buf, len, "%s", j.reason ? j.reason : "(none)");
	job_release(&j);
	return buf;
}

/* A dispatcher that cannot start says why on its own machine's queued
 * jobs, over no reason or a waiting one, never over a job's own; news only
 * the first time; once it starts, it takes back only what it said. */
static void test_stalled_reason_on_the_machines_queued_jobs(void **state)
{
	struct fixture *f = *state;
	const char *said = "waiting: the dispatcher cannot start: no NVML; its jobs start once "
	                   "that is mended";
	char err[GM_ERRBUF_SIZE], buf[512];
	int news = -1;

	insert_on(f->st, "M=lab", NULL);                           /* 1 */
	insert_on(f->st, "M=lab", "waiting for GPUs: all 8 held"); /* 2 */
	insert_on(f->st, "M=lab", "requeued: CUDA out of memory"); /* 3 */
	insert_on(f->st, "M=laptop", NULL);                        /* 4 */
	insert_on(f->st, "M=lab", NULL);                           /* 5: will run */
	assert_int_equal(jobstore_set_machine(f->st, "M=lab", err, sizeof err), GM_OK);
	{
		struct job j;
		int changed = 0;

		assert_int_equal(jobstore_get(f->st, 5, 0, &j, err, sizeof err), GM_OK);
		j.state = JOB_RUNNING;
		j.start_ms = 2000;
		assert_int_equal(
		    jobstore_update(f->st, &j, JOB_QUEUED, j.attempts, &changed, err, sizeof err),
		    GM_OK);
		assert_true(changed);
		job_release(&j);
	}
	assert_int_equal(jobstore_set_stalled(f->st, "no NVML", &news, err, sizeof err), GM_OK);
	assert_int_equal(news, 1);
	assert_string_equal(reason_of(f->st, 1, buf, sizeof buf), said);
	assert_string_equal(reason_of(f->st, 2, buf, sizeof buf), said);
	assert_string_equal(reason_of(f->st, 3, buf, sizeof buf), "requeued: CUDA out of memory");
	assert_string_equal(reason_of(f->st, 4, buf, sizeof buf), "(none)");
	assert_string_equal(reason_of(f->st, 5, buf, sizeof buf), "(none)");
	/* the next dispatcher, same cause: nothing new to log; a new job
	 * takes the reason all the same */
	insert_on(f->st, "M=lab", NULL); /* 6 */
	assert_int_equal(jobstore_set_stalled(f->st, "no NVML", &news, err, sizeof err), GM_OK);
	assert_int_equal(news, 0);
	assert_string_equal(reason_of(f->st, 6, buf, sizeof buf), said);
	/* another cause is news, and replaces the first */
	assert_int_equal(jobstore_set_stalled(f->st, "no registry", &news, err, sizeof err), GM_OK);
	assert_int_equal(news, 1);
	assert_non_null(strstr(reason_of(f->st, 1, buf, sizeof buf), ": no registry;"));
	/* started: only what it said goes */
	assert_int_equal(jobstore_set_stalled(f->st, NULL, NULL, err, sizeof err), GM_OK);
	assert_string_equal(reason_of(f->st, 1, buf, sizeof buf), "(none)");
	assert_string_equal(reason_of(f->st, 6, buf, sizeof buf), "(none)");
	assert_string_equal(reason_of(f->st, 3, buf, sizeof buf), "requeued: CUDA out of memory");
}

/* --array 1-4%2: at most two tasks of the array run at once; the others
 * wait, counted as waiting, until one ends. */
static void test_array_limit(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	struct job j = JOB_INIT;
	int64_t *ids = NULL;
	size_t n = 0, waiting = 0;
	int changed = 0;

	add(f->st, 0, "before"); /* 1: not in the array */
	for (int t = 1; t <= 4; t++) {
		j = (struct job)JOB_INIT;
		j.command = (char *)"task";
		j.array_task = t;
		j.array_limit = 2;
		assert_int_equal(jobstore_insert(f->st, &j, err, sizeof err), GM_OK);
	}
	assert_int_equal(jobstore_set_array(f->st, 2, 5, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_ready_ids(f->st, &ids, &n, &waiting, err, sizeof err), GM_OK);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 2);
	assert_int_equal(ids[2], 3);
	assert_int_equal(waiting, 2);
	free(ids);
	assert_int_equal(jobstore_get(f->st, 2, 0, &j, err, sizeof err), GM_OK);
	assert_int_equal(j.array_of, 2);
	j.state = JOB_RUNNING;
	assert_int_equal(
	    jobstore_update(f->st, &j, JOB_QUEUED, j.attempts, &changed, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_ready_ids(f->st, &ids, &n, &waiting, err, sizeof err), GM_OK);
	assert_int_equal(n, 2); /* 1 and 3; 4 and 5 wait */
	assert_int_equal(ids[1], 3);
	assert_int_equal(waiting, 2);
	free(ids);
	j.state = JOB_DONE;
	assert_int_equal(
	    jobstore_update(f->st, &j, JOB_RUNNING, j.attempts, &changed, err, sizeof err), GM_OK);
	job_release(&j);
	assert_int_equal(jobstore_ready_ids(f->st, &ids, &n, &waiting, err, sizeof err), GM_OK);
	assert_int_equal(n, 3); /* 1, 3 and 4 */
	assert_int_equal(ids[2], 4);
	assert_int_equal(waiting, 1);
	free(ids);
}

/* submit's "checked lately": the newest job of the same request,
 * environment and machine, of the last 64, submitted since then and not
 * failed; anything else asks for a check. */
static void test_queued_like_is_the_newest_same_job_since_then(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE];
	struct job like = JOB_INIT, other;
	int yes = -1;

	like.command = (char *)"train";
	like.request = (char *)"{\"gpus\":2}";
	like.env = (char *)"A=1\0B=two";
	like.env_len = 9;
	like.machine = (char *)"GPUMAN_SIM=/a.json";
	like.submit_ms = 5000;
	assert_int_equal(jobstore_queued_like(f->st, &like, 0, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 0); /* an empty store */
	assert_int_equal(jobstore_insert(f->st, &like, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_queued_like(f->st, &like, 5000, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 1);
	assert_int_equal(jobstore_queued_like(f->st, &like, 5001, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 0); /* older than the minute */
	other = like;
	other.env_len = 8; /* B=tw */
	assert_int_equal(jobstore_queued_like(f->st, &other, 0, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 0);
	other = like;
	other.request = (char *)"{\"gpus\":3}";
	assert_int_equal(jobstore_queued_like(f->st, &other, 0, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 0);
	other = like;
	other.machine = NULL;
	assert_int_equal(jobstore_queued_like(f->st, &other, 0, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 0);
	/* a newer one that failed (a GPU lost since?) undoes the older */
	like.id = 0;
	assert_int_equal(jobstore_insert(f->st, &like, err, sizeof err), GM_OK);
	finish(f->st, like.id, JOB_FAILED, 6000);
	assert_int_equal(jobstore_queued_like(f->st, &like, 0, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 0);
	like.id = 0;
	assert_int_equal(jobstore_insert(f->st, &like, err, sizeof err), GM_OK);
	finish(f->st, like.id, JOB_DONE, 6000);
	assert_int_equal(jobstore_queued_like(f->st, &like, 0, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 1);
	/* only the last 64 jobs are looked at */
	for (int i = 0; i < 64; i++)
		add(f->st, 0, "other");
	assert_int_equal(jobstore_queued_like(f->st, &like, 0, &yes, err, sizeof err), GM_OK);
	assert_int_equal(yes, 0);
}

static void test_state_names(void **state)
{
	(void)state;
	for (int s = 0; s < JOB_STATE_COUNT; s++)
		assert_int_equal(job_state_parse(job_state_name((enum job_state)s)), s);
	assert_int_equal(job_state_parse("bogus"), -1);
	assert_false(job_state_final(JOB_QUEUED));
	assert_false(job_state_final(JOB_RUNNING));
	assert_true(job_state_final(JOB_DONE));
	assert_true(job_state_final(JOB_INTERRUPTED));
	assert_true(job_state_final(JOB_TIMEOUT));
	assert_string_equal(job_state_name(JOB_TIMEOUT), "timeout");
}

static void test_newer_schema_is_refused(void **state)
{
	struct fixture *f = *state;
	char err[GM_ERRBUF_SIZE], cmd[256];
	struct jobstore *st = NULL;

	snprintf(cmd, sizeof cmd, "sqlite3 '%s' 'PRAGMA user_version = 99' 2>/dev/null", f->path);
	if (system(cmd) != 0)
		skip();
	assert_int_equal(jobstore_open(&st, f->path, err, sizeof err), GM_ERR_STATE);
	assert_non_null(strstr(err, "newer gpuman"));
	assert_null(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_insert_get_roundtrip_private_file, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_batch_ids_are_task_numbers_queue_ids_never_reused,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_update_only_from_the_expected_state_and_attempt,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lists_counts_and_transactions, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_each_streams_a_set_of_states, setup, teardown),
	    cmocka_unit_test_setup_teardown(
	        test_ended_reads_only_final_states_and_names_unknown_ids, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ended_since_is_by_when_the_end_was_recorded, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_prune_deletes_only_jobs_that_ended_before, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_name_roundtrip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_schema4_fields_and_machine_filter, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_stalled_reason_on_the_machines_queued_jobs, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_array_limit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_queued_like_is_the_newest_same_job_since_then,
	                                    setup, teardown),
	    cmocka_unit_test(test_state_names),
	    cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, setup, teardown),
	};

	return cmocka_run_group_tests_name("jobstore", tests, NULL, NULL);
}
