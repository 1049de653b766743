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
	assert_int_equal(jobstore_update(f->st, &claim, JOB_QUEUED, 0, &changed, err, sizeof err), GM_OK);
	assert_int_equal(changed, 1);
	/* a second claim of the same job (a dispatcher that lost a race) */
	assert_int_equal(jobstore_update(f->st, &claim, JOB_QUEUED, 0, &changed, err, sizeof err), GM_OK);
	assert_int_equal(changed, 0);
	/* the result of another attempt changes nothing */
	claim.state = JOB_DONE;
	assert_int_equal(jobstore_update(f->st, &claim, JOB_RUNNING, 2, &changed, err, sizeof err), GM_OK);
	assert_int_equal(changed, 0);
	claim.has_exit = 1;
	claim.exit_status = 0;
	claim.has_peak = 1;
	claim.peak_mem_mib = 2048;
	claim.util_samples = 2;
	claim.util_sum = 170.0;
	assert_int_equal(jobstore_update(f->st, &claim, JOB_RUNNING, 1, &changed, err, sizeof err), GM_OK);
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
	assert_int_equal(jobstore_update(f->st, &j, JOB_QUEUED, 0, &changed, err, sizeof err), GM_OK);
	jobstore_rollback(f->st);
	assert_int_equal(jobstore_counts(f->st, counts, err, sizeof err), GM_OK);
	assert_int_equal(counts[JOB_QUEUED], 5);
	assert_int_equal(jobstore_begin(f->st, err, sizeof err), GM_OK);
	assert_int_equal(jobstore_update(f->st, &j, JOB_QUEUED, 0, &changed, err, sizeof err), GM_OK);
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
		cmocka_unit_test_setup_teardown(test_insert_get_roundtrip_private_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_ids_are_task_numbers_queue_ids_never_reused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_update_only_from_the_expected_state_and_attempt,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_lists_counts_and_transactions, setup, teardown),
		cmocka_unit_test(test_state_names),
		cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, setup, teardown),
	};

	return cmocka_run_group_tests_name("jobstore", tests, NULL, NULL);
}
