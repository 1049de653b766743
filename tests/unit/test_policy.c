/*
 * test_policy.c - which GPUs a request gets, and why the others were left
 * out.  Each test is a machine a user could have (a fake snapshot plus the
 * leases already granted) and asserts what `gpuman pick` would answer:
 * the GPUs, their order, whether waiting could help, and the reason shown
 * for a GPU that was passed over.  This file: orderings and filters;
 * test_policy_leases.c: leases, shares, never or not now, MIG slices.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "policy_trial.h"

/* ---- orderings -------------------------------------------------------- */

static void test_memory_most_free_first_ties_by_index(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {1, 3, 0, 2};

	fake_gpu_mem(&t->snap, 0, 24576, 8000);
	fake_gpu_mem(&t->snap, 1, 24576, 20000);
	fake_gpu_mem(&t->snap, 2, 24576, 4000);
	fake_gpu_mem(&t->snap, 3, 81920, 20000); /* same free as 1: index 1 wins */
	t->in = input(&t->snap);
	t->req.count = 4;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 4);
	policy_result_release(&t->res);
}

static void test_memory_rate_and_memory_differ(void **state)
{
	struct trial *t = *state;
	static const unsigned by_rate[] = {2, 0, 1, 3};
	static const unsigned by_mem[] = {1, 2, 3, 0};

	fake_gpu_mem(&t->snap, 0, 8192, 4096);   /* 50 % free */
	fake_gpu_mem(&t->snap, 1, 81920, 40960); /* 50 % free, most MiB */
	fake_gpu_mem(&t->snap, 2, 16384, 12288); /* 75 % free */
	fake_gpu_mem(&t->snap, 3, 24576, 6144);  /* 25 % free */
	t->in = input(&t->snap);
	t->req.count = 4;
	t->req.by = GM_BY_MEMORY_RATE;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, by_rate, 4);
	policy_result_release(&t->res);

	t->req.by = GM_BY_MEMORY;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, by_mem, 4);
	policy_result_release(&t->res);
}

static void test_power_lowest_draw_ratio_missing_last(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {2, 0, 5, 1, 3, 4};

	fake_gpu(&t->snap, 0, NULL, 24576, 20000, 0, 100000, 250000, 1);   /* 0.4 */
	fake_gpu(&t->snap, 1, NULL, 24576, 20000, 0, 350000, 700000, 1);   /* 0.5 */
	fake_gpu(&t->snap, 2, NULL, 24576, 1000, 0, 50000, 250000, 1);     /* 0.2 */
	fake_gpu(&t->snap, 3, NULL, 24576, 24000, 0, 10000, FAKE_NONE, 1); /* laptop: no limit */
	fake_gpu(&t->snap, 4, NULL, 24576, 24000, 0, FAKE_NONE, 250000, 1);
	fake_gpu(&t->snap, 5, NULL, 24576, 20000, 0, 200000, 500000, 1); /* 0.4, ties with 0 */
	t->in = input(&t->snap);
	t->req.count = 6;
	t->req.by = GM_BY_POWER;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 6);
	policy_result_release(&t->res);
}

static void test_util_lowest_first_missing_last(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {2, 0, 3, 4, 1};

	fake_gpu(&t->snap, 0, NULL, 24576, 1000, 30, 1, 2, 1);
	fake_gpu(&t->snap, 1, NULL, 24576, 24000, FAKE_NONE, 1, 2, 1); /* MIG: no reading */
	fake_gpu(&t->snap, 2, NULL, 24576, 1000, 5, 1, 2, 1);
	fake_gpu(&t->snap, 3, NULL, 24576, 24000, 30, 1, 2, 1);
	fake_gpu(&t->snap, 4, NULL, 24576, 24000, 90, 1, 2, 1);
	t->in = input(&t->snap);
	t->req.count = 5;
	t->req.by = GM_BY_UTIL;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 5);
	policy_result_release(&t->res);
}

static void test_index_ignores_load(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {0, 1, 2};

	fake_gpu(&t->snap, 0, NULL, 24576, 100, 99, 300000, 350000, 1);
	fake_gpu(&t->snap, 1, NULL, 24576, 24000, 0, 30000, 350000, 1);
	fake_gpu(&t->snap, 2, NULL, 24576, 12000, 50, 30000, 350000, 1);
	t->in = input(&t->snap);
	t->req.count = 3;
	t->req.by = GM_BY_INDEX;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 3);
	policy_result_release(&t->res);
}

static void test_n3_takes_the_three_best(void **state)
{
	struct trial *t = *state;
	static const long long free_mib[8] = {1000, 7000, 3000, 9000, 2000, 8000, 500, 6000};
	static const unsigned want[] = {3, 5, 1};
	unsigned i;

	for (i = 0; i < 8; i++)
		fake_gpu_mem(&t->snap, i, 11264, free_mib[i]);
	t->in = input(&t->snap);
	t->req.count = 3;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 3);
	/* eligible GPUs that were simply not needed carry no reason */
	for (i = 0; i < 8; i++)
		assert_string_equal(t->res.why[i], "");
	policy_result_release(&t->res);
	assert_null(t->res.chosen);
	assert_null(t->res.why);
}

/* ---- filters ---------------------------------------------------------- */

static void test_min_free_mib(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {1};

	fake_gpu_mem(&t->snap, 0, 24576, 3120);
	fake_gpu_mem(&t->snap, 1, 24576, 8192); /* exactly enough */
	t->in = input(&t->snap);
	t->req.has_min_free = 1;
	set_size(&t->req.min_free, "8G");
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "only 3120 MiB free", "--min-free asks 8 GiB");
	policy_result_release(&t->res);

	/* the only GPU with enough is busy: wait */
	t->snap.gpus[1].mem_free_mib = 8191;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_int_equal(t->res.count, 0);
	assert_why(&t->res, 1, "only 8191 MiB free", NULL);
	policy_result_release(&t->res);
}

static void test_min_free_percent_of_each_gpu(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {1};

	fake_gpu_mem(&t->snap, 0, 24576, 10000); /* needs 12288 */
	fake_gpu_mem(&t->snap, 1, 11264, 6000);  /* needs 5632 */
	t->in = input(&t->snap);
	t->req.has_min_free = 1;
	set_size(&t->req.min_free, "50%");
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "only 10000 MiB free", "--min-free asks 50% = 12288 MiB");
	policy_result_release(&t->res);
}

static void test_max_util(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {2};

	fake_gpu(&t->snap, 0, NULL, 24576, 24000, 87, 1, 2, 1);
	fake_gpu(&t->snap, 1, NULL, 24576, 24000, FAKE_NONE, 1, 2, 1);
	fake_gpu(&t->snap, 2, NULL, 24576, 1000, 50, 1, 2, 1); /* at the limit: fine */
	t->in = input(&t->snap);
	t->req.has_max_util = 1;
	t->req.max_util = 50;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "utilization 87% > --max-util 50%", NULL);
	assert_why(&t->res, 1, "utilization not reported", NULL);
	policy_result_release(&t->res);

	/* busy now: waiting helps; no reading at all: it never will */
	t->snap.gpus[2].util_gpu_pct = 51;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	policy_result_release(&t->res);
	set_list(&t->req.only, "1");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	policy_result_release(&t->res);
	release_request(&t->req);
}

static void test_only_indices_and_uuid_prefix(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {3, 1};

	fake_gpu(&t->snap, 0, "GPU-11aa0000-0000", 24576, 24000, 0, 1, 2, 1);
	fake_gpu(&t->snap, 1, "GPU-22bb0000-0000", 24576, 10000, 0, 1, 2, 1);
	fake_gpu(&t->snap, 2, "GPU-33cc0000-0000", 24576, 24000, 0, 1, 2, 1);
	fake_gpu(&t->snap, 3, "GPU-44dd0000-0000", 24576, 20000, 0, 1, 2, 1);
	t->in = input(&t->snap);
	t->req.count = 2;
	set_list(&t->req.only, "1,gpu-44DD");
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 2);
	assert_why(&t->res, 0, "not in --only", NULL);
	assert_why(&t->res, 2, "not in --only", NULL);
	policy_result_release(&t->res);

	/* three from a list of two can never be */
	t->req.count = 3;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	policy_result_release(&t->res);
	release_request(&t->req);

	/* a list that names no GPU here says so */
	t->req.count = 1;
	set_list(&t->req.only, "12,GPU-99");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_why(&t->res, 0, "not in --only, which names no GPU of this machine", NULL);
	assert_why(&t->res, 3, "not in --only, which names no GPU of this machine", NULL);
	policy_result_release(&t->res);
	release_request(&t->req);
}

static void test_exclude_indices_and_uuid_prefix(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {1};

	fake_gpu(&t->snap, 0, "GPU-11aa0000-0000", 24576, 24000, 0, 1, 2, 1);
	fake_gpu(&t->snap, 1, "GPU-22bb0000-0000", 24576, 10000, 0, 1, 2, 1);
	fake_gpu(&t->snap, 2, "GPU-33cc0000-0000", 24576, 23000, 0, 1, 2, 1);
	t->in = input(&t->snap);
	set_list(&t->req.exclude, "0,33cc"); /* a UUID prefix without "GPU-" */
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "excluded by --exclude", NULL);
	assert_why(&t->res, 2, "excluded by --exclude", NULL);
	assert_string_equal(t->res.why[1], "");
	policy_result_release(&t->res);
	release_request(&t->req);
}

static void test_usable_mask_is_cuda_visible_devices(void **state)
{
	struct trial *t = *state;
	static const unsigned char usable[] = {0, 1, 0, 1};
	static const unsigned want[] = {3, 1};

	fake_gpu_mem(&t->snap, 0, 81920, 81000); /* the best GPU, but not ours */
	fake_gpu_mem(&t->snap, 1, 24576, 10000);
	fake_gpu_mem(&t->snap, 2, 81920, 81000);
	fake_gpu_mem(&t->snap, 3, 24576, 20000);
	t->in = input(&t->snap);
	t->in.usable = usable;
	t->req.count = 2;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 2);
	assert_why(&t->res, 0, "outside CUDA_VISIBLE_DEVICES", NULL);
	policy_result_release(&t->res);

	/* the allocation has two GPUs: a third can never come */
	t->req.count = 3;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	policy_result_release(&t->res);
}

static void test_idle_means_no_process_and_no_lease(void **state)
{
	struct trial *t = *state;
	struct policy_lease leases[1];
	static const unsigned want_any[] = {0};
	static const unsigned want_idle[] = {2};

	fake_gpu_mem(&t->snap, 0, 24576, 20000);
	fake_gpu_mem(&t->snap, 1, 24576, 19000);
	fake_gpu_mem(&t->snap, 2, 24576, 8000);
	fake_proc(&t->snap, 0, 28329, 4000);
	leases[0] = lease(&t->snap, 1, 0, 2048, 2048, "bob (pid 77)");
	t->in = input(&t->snap);
	t->in.leases = leases;
	t->in.lease_count = 1;

	/* without --idle a process someone else started does not stop us */
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want_any, 1);
	policy_result_release(&t->res);

	t->req.idle = 1;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want_idle, 1);
	assert_why(&t->res, 0, "has processes (--idle): pid 28329", NULL);
	assert_why(&t->res, 1, "has 1 memory share", NULL);
	policy_result_release(&t->res);

	/* a share that is idle wants no other share next to it either */
	t->req.share = 1;
	set_size(&t->req.mem, "1G");
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want_idle, 1);
	assert_why(&t->res, 1, "leased by bob (pid 77) (--idle)", NULL);
	policy_result_release(&t->res);

	/* several processes are listed */
	fake_proc(&t->snap, 2, 5, 100);
	fake_proc(&t->snap, 2, 6, 100);
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_why(&t->res, 2, "pids 5, 6", NULL);
	policy_result_release(&t->res);
}

static void test_compute_modes(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {2};

	fake_gpu_mem(&t->snap, 0, 81920, 81000)->compute_mode = GM_COMPUTE_PROHIBITED;
	fake_gpu_mem(&t->snap, 1, 81920, 70000)->compute_mode = GM_COMPUTE_EXCLUSIVE_PROCESS;
	fake_gpu_mem(&t->snap, 2, 24576, 20000)->compute_mode = GM_COMPUTE_EXCLUSIVE_PROCESS;
	fake_proc(&t->snap, 1, 123, 10000);
	t->in = input(&t->snap);
	choose(&t->in, &t->req, &t->res);
	/* exclusive-process without a process is as good as any */
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "compute mode is prohibited", NULL);
	assert_why(&t->res, 1, "exclusive-process compute mode and already running pid 123", NULL);
	policy_result_release(&t->res);

	/* even a small share cannot go next to the running process */
	t->req.share = 1;
	set_size(&t->req.mem, "1G");
	t->req.count = 2;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW); /* GPUs 1 and 2 may free up */
	assert_why(&t->res, 1, "already running pid 123", NULL);
	policy_result_release(&t->res);

	t->req.count = 3; /* GPU 0 never will */
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	policy_result_release(&t->res);
}

static void test_exclusive_process_gpu_takes_one_lease(void **state)
{
	struct trial *t = *state;
	struct policy_lease leases[1];

	fake_gpu_mem(&t->snap, 0, 81920, 81000)->compute_mode = GM_COMPUTE_EXCLUSIVE_PROCESS;
	/* a share granted a moment ago: its job has not started yet */
	leases[0] = lease(&t->snap, 0, 0, 4096, 4096, "carol (pid 9)");
	t->in = input(&t->snap);
	t->in.leases = leases;
	t->in.lease_count = 1;
	t->req.share = 1;
	set_size(&t->req.mem, "4G");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_why(&t->res, 0, "exclusive-process compute mode", "carol (pid 9)");
	policy_result_release(&t->res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TRIAL(test_memory_most_free_first_ties_by_index),
	    TRIAL(test_memory_rate_and_memory_differ),
	    TRIAL(test_power_lowest_draw_ratio_missing_last),
	    TRIAL(test_util_lowest_first_missing_last),
	    TRIAL(test_index_ignores_load),
	    TRIAL(test_n3_takes_the_three_best),
	    TRIAL(test_min_free_mib),
	    TRIAL(test_min_free_percent_of_each_gpu),
	    TRIAL(test_max_util),
	    TRIAL(test_only_indices_and_uuid_prefix),
	    TRIAL(test_exclude_indices_and_uuid_prefix),
	    TRIAL(test_usable_mask_is_cuda_visible_devices),
	    TRIAL(test_idle_means_no_process_and_no_lease),
	    TRIAL(test_compute_modes),
	    TRIAL(test_exclusive_process_gpu_takes_one_lease),
	};

	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
