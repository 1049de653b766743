/*
 * test_slurm.c - what gpuman reads from Slurm's answers: a job's GPUs by
 * type, GPUs per node of a --gres request, and why Slurm ended a step.
 * A mistake here runs too many tasks at once on a type, or blames the task
 * for a node that died.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "slurm.h"

static void test_job_gres_typed(void **state)
{
	struct slurm_alloc a = SLURM_ALLOC_INIT;

	(void)state;
	slurm_parse_gres("gpu:a100:4,gpu:t4:4", &a);
	assert_int_equal(a.gpus, 8);
	assert_int_equal(a.type_count, 2);
	assert_string_equal(a.types[0].name, "a100");
	assert_int_equal(a.types[0].count, 4);
	assert_string_equal(a.types[1].name, "t4");
	assert_int_equal(a.types[1].count, 4);
}

static void test_job_gres_untyped_and_others(void **state)
{
	struct slurm_alloc a = SLURM_ALLOC_INIT;

	(void)state;
	slurm_parse_gres("gpu:8", &a);
	assert_int_equal(a.gpus, 8);
	assert_int_equal(a.type_count, 1);
	assert_string_equal(a.types[0].name, "");
	/* other GRES and index details are not GPUs */
	slurm_parse_gres("shard:4,gpu:t4:2(IDX:2-3),nic:1", &a);
	assert_int_equal(a.gpus, 2);
	assert_int_equal(a.type_count, 1);
	assert_string_equal(a.types[0].name, "t4");
	slurm_parse_gres("(null)", &a);
	assert_int_equal(a.gpus, 0);
	assert_int_equal(a.type_count, 0);
	slurm_parse_gres("gpu:a100:x", &a);
	assert_int_equal(a.gpus, 0);
}

static void test_gres_per_node(void **state)
{
	(void)state;
	assert_int_equal(slurm_gres_per_node("gpu:4"), 4);
	assert_int_equal(slurm_gres_per_node("gpu:a100:2,gpu:t4:2"), 4);
	assert_int_equal(slurm_gres_per_node("gpu"), 1);
	assert_int_equal(slurm_gres_per_node("gpu:a100:3,nic:1"), 3);
}

/* A sweep without size options: as many of the idle GPUs as it can use,
 * on the fewest nodes, a multiple of the GPUs per task on each. */
static void test_spread(void **state)
{
	const struct slurm_node_free two[] = {{"n1", 4, 4, "gpu:4"}, {"n2", 4, 4, "gpu:4"}};
	const struct slurm_node_free uneven[] = {
	    {"n2", 4, 4, "gpu:4"}, {"n1", 3, 4, "gpu:4"}, {"n3", 1, 4, "gpu:4"}};
	unsigned k, each;

	(void)state;
	assert_int_equal(slurm_spread(two, 2, 24, 1, &k, &each), 0);
	assert_int_equal(k, 2);
	assert_int_equal(each, 4);
	assert_int_equal(slurm_spread(two, 2, 3, 1, &k, &each), 0); /* 3 tasks */
	assert_int_equal(k, 1);
	assert_int_equal(each, 3);
	assert_int_equal(slurm_spread(uneven, 3, 24, 1, &k, &each), 0); /* 2x3 > 1x4, 3x1 */
	assert_int_equal(k, 2);
	assert_int_equal(each, 3);
	assert_int_equal(slurm_spread(uneven, 3, 24, 2, &k, &each), 0); /* 2 GPUs a task */
	assert_int_equal(k, 1);
	assert_int_equal(each, 4);
	assert_int_equal(slurm_spread(uneven + 2, 1, 24, 2, &k, &each), -1); /* none fits */
	assert_int_equal(slurm_spread(NULL, 0, 24, 1, &k, &each), -1);
}

static void test_step_causes(void **state)
{
	char why[128];
	int requeue;

	(void)state;
	slurm_step_cause("slurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED AT "
	                 "2026-11-25T18:18:47 DUE TO TIME LIMIT ***\nsrun: error: n1: task 0: "
	                 "Terminated\n",
	                 why, sizeof why, &requeue);
	assert_string_equal(why, "killed by Slurm: time limit");
	assert_false(requeue); /* it would hit the limit again */
	slurm_step_cause("*** JOB 7 ON n2 CANCELLED AT 2026-11-25T10:00:00 DUE TO NODE FAILURE ***",
	                 why, sizeof why, &requeue);
	assert_string_equal(why, "killed by Slurm: node failure");
	assert_true(requeue); /* not the task's fault */
	slurm_step_cause(
	    "*** STEP 9.3 ON n1 CANCELLED AT 2026-11-25T10:00:00 DUE TO PREEMPTION ***", why,
	    sizeof why, &requeue);
	assert_string_equal(why, "killed by Slurm: preempted");
	assert_true(requeue);
	slurm_step_cause("*** STEP 9.3 ON n1 CANCELLED AT 2026-11-25T10:00:00 ***", why, sizeof why,
	                 &requeue);
	assert_string_equal(why, "cancelled in Slurm (scancel)");
	assert_false(requeue);
	/* the task's own words are not Slurm's */
	slurm_step_cause(
	    "Traceback: ValueError\nsrun: error: n1: task 0: Exited with exit code 1\n", why,
	    sizeof why, &requeue);
	assert_string_equal(why, "");
	assert_false(requeue);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_job_gres_typed),
	    cmocka_unit_test(test_job_gres_untyped_and_others),
	    cmocka_unit_test(test_gres_per_node),
	    cmocka_unit_test(test_spread),
	    cmocka_unit_test(test_step_causes),
	};

	return cmocka_run_group_tests_name("slurm", tests, NULL, NULL);
}
