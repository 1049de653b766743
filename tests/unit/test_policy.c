/*
 * test_policy.c - which GPUs a request gets, and why the others were left
 * out.  Each test is a machine a user could have (a fake snapshot plus the
 * leases already granted) and asserts what `gpuman pick` would answer:
 * the GPUs, their order, whether waiting could help, and the reason shown
 * for a GPU that was passed over.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "policy.h"
#include "unit.h"

static struct gm_request request(void)
{
	struct gm_request req;

	memset(&req, 0, sizeof req);
	req.count = 1;
	req.by = GM_BY_MEMORY;
	req.wait_ms = -1;
	return req;
}

static void set_size(struct gm_size *size, const char *text)
{
	char err[128];

	if (parse_size(text, size, err, sizeof err) != 0)
		fail_msg("bad size '%s' in a test: %s", text, err);
}

static void set_list(struct gpu_list *list, const char *text)
{
	char err[128];

	if (gpu_list_parse(text, list, err, sizeof err) != 0)
		fail_msg("bad list '%s' in a test: %s", text, err);
}

static void release_request(struct gm_request *req)
{
	gpu_list_release(&req->only);
	gpu_list_release(&req->exclude);
}

/* The input for a snapshot with no leases, every GPU usable. */
static struct policy_input input(const struct gm_snapshot *snap)
{
	struct policy_input in;

	memset(&in, 0, sizeof in);
	in.snap = snap;
	return in;
}

/*
 * What almost every test works on: an empty fake snapshot, a request of one
 * GPU by memory and an empty result, made fresh before the test and
 * released after it, pass or fail.
 */
struct trial {
	struct gm_snapshot snap;
	struct policy_input in;
	struct gm_request req;
	struct policy_result res;
};

static int trial_setup(void **state)
{
	struct trial *t = calloc(1, sizeof *t);

	if (!t)
		return -1;
	fake_snapshot_init(&t->snap);
	t->in = input(&t->snap);
	t->req = request();
	t->res = (struct policy_result)POLICY_RESULT_INIT;
	*state = t;
	return 0;
}

static int trial_teardown(void **state)
{
	struct trial *t = *state;

	policy_result_release(&t->res);
	release_request(&t->req);
	fake_snapshot_release(&t->snap);
	free(t);
	return 0;
}

static struct policy_lease lease(const struct gm_snapshot *snap, unsigned index, int exclusive,
                                 uint64_t share_mib, uint64_t pending_mib, const char *holder)
{
	struct policy_lease l;
	size_t i;

	memset(&l, 0, sizeof l);
	for (i = 0; i < snap->gpu_count; i++)
		if (snap->gpus[i].index == index)
			l.uuid = snap->gpus[i].uuid;
	assert_non_null(l.uuid);
	l.exclusive = exclusive;
	l.share_mib = share_mib;
	l.pending_mib = pending_mib;
	l.holder = holder;
	return l;
}

static void choose(const struct policy_input *in, const struct gm_request *req,
                   struct policy_result *res)
{
	assert_int_equal(policy_choose(in, req, res), 0);
	assert_int_equal(res->gpu_count, in->snap->gpu_count);
	assert_non_null(res->why);
}

/* The chosen NVML indices, in order, must be exactly want[0..n). */
static void assert_chosen(const struct gm_snapshot *snap, const struct policy_result *res,
                          const unsigned *want, size_t n)
{
	size_t i;

	assert_int_equal(res->outcome, POLICY_OK);
	assert_int_equal(res->count, n);
	for (i = 0; i < n; i++)
		if (snap->gpus[res->chosen[i]].index != want[i])
			fail_msg("choice %zu is GPU %u, expected GPU %u", i,
			         snap->gpus[res->chosen[i]].index, want[i]);
}

/* The reason given for the GPU at pos must mention each of the facts. */
static void assert_why(const struct policy_result *res, size_t pos, const char *fact1,
                       const char *fact2)
{
	if (!strstr(res->why[pos], fact1))
		fail_msg("why[%zu] = '%s' does not mention '%s'", pos, res->why[pos], fact1);
	if (fact2 && !strstr(res->why[pos], fact2))
		fail_msg("why[%zu] = '%s' does not mention '%s'", pos, res->why[pos], fact2);
}

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

/* ---- exclusive leases and shares -------------------------------------- */

static void test_exclusive_lease_blocks_shares(void **state)
{
	struct trial *t = *state;
	struct policy_lease leases[1];
	static const unsigned want[] = {1};

	fake_gpu_mem(&t->snap, 0, 81920, 81000); /* leased, but its job not started */
	fake_gpu_mem(&t->snap, 1, 24576, 20000);
	leases[0] = lease(&t->snap, 0, 1, 0, 0, "alice (pid 4242)");
	t->in = input(&t->snap);
	t->in.leases = leases;
	t->in.lease_count = 1;
	t->req.share = 1;
	set_size(&t->req.mem, "1G");
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "leased exclusively by alice (pid 4242)", NULL);
	policy_result_release(&t->res);

	/* and exclusive requests too */
	t->req.share = 0;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "leased exclusively by alice (pid 4242)", NULL);
	policy_result_release(&t->res);
}

static void test_share_blocks_exclusive(void **state)
{
	struct trial *t = *state;
	struct policy_lease leases[3];

	fake_gpu_mem(&t->snap, 0, 81920, 60000);
	fake_gpu_mem(&t->snap, 1, 81920, 70000);
	leases[0] = lease(&t->snap, 0, 0, 8192, 0, "bob (pid 1)");
	leases[1] = lease(&t->snap, 0, 0, 8192, 0, "bob (pid 2)");
	leases[2] = lease(&t->snap, 1, 0, 4096, 0, "dan (pid 3)");
	t->in = input(&t->snap);
	t->in.leases = leases;
	t->in.lease_count = 3;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_why(&t->res, 0, "has 2 memory shares (--exclusive needs none)", NULL);
	assert_why(&t->res, 1, "has 1 memory share ", NULL);
	policy_result_release(&t->res);
}

static void test_shares_pack_until_effective_free_runs_out(void **state)
{
	struct trial *t = *state;
	struct policy_lease leases[2];
	static const unsigned want[] = {0};

	fake_gpu_mem(&t->snap, 0, 24576, 24000);
	t->in = input(&t->snap);
	t->in.leases = leases;
	t->req.share = 1;
	set_size(&t->req.mem, "8G");

	/* first share */
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	policy_result_release(&t->res);

	/* second: the first job has not allocated yet, NVML still says 24000 */
	leases[0] = lease(&t->snap, 0, 0, 8192, 8192, "erin (pid 10)");
	t->in.lease_count = 1;
	assert_int_equal(policy_effective_free_mib(&t->in, 0), 24000 - 8192);
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	policy_result_release(&t->res);

	/* third: 24000 - 2 * 8192 = 7616 MiB left for a job asking 8 GiB */
	leases[1] = lease(&t->snap, 0, 0, 8192, 8192, "erin (pid 11)");
	t->in.lease_count = 2;
	assert_int_equal(policy_effective_free_mib(&t->in, 0), 7616);
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_why(&t->res, 0, "only 7616 MiB free after pending shares", "--mem asks 8 GiB");
	policy_result_release(&t->res);

	/* once the jobs hold their memory, nothing is pending: NVML's number */
	t->snap.gpus[0].mem_free_mib = 24000 - 2 * 8192;
	leases[0].pending_mib = leases[1].pending_mib = 0;
	assert_int_equal(policy_effective_free_mib(&t->in, 0), 7616);
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_why(&t->res, 0, "only 7616 MiB free", NULL);
	assert_null(strstr(t->res.why[0], "pending"));
	policy_result_release(&t->res);
}

static void test_pending_counts_in_ordering_and_min_free(void **state)
{
	struct trial *t = *state;
	struct policy_lease leases[1];
	static const unsigned want[] = {1, 0};

	fake_gpu_mem(&t->snap, 0, 24576, 20000);
	fake_gpu_mem(&t->snap, 1, 24576, 10000);
	leases[0] = lease(&t->snap, 0, 0, 15000, 15000, "fay (pid 5)"); /* 5000 left */
	t->in = input(&t->snap);
	t->in.leases = leases;
	t->in.lease_count = 1;
	t->req.share = 1;
	set_size(&t->req.mem, "1G");
	t->req.count = 2;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 2);
	policy_result_release(&t->res);

	t->req.count = 1;
	t->req.has_min_free = 1;
	set_size(&t->req.min_free, "6G");
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "only 5000 MiB free after pending shares", "--min-free asks 6 GiB");
	policy_result_release(&t->res);
}

static void test_memory_not_reported(void **state)
{
	struct trial *t = *state;
	static const unsigned want_excl[] = {1, 0};

	fake_gpu(&t->snap, 0, NULL, FAKE_NONE, FAKE_NONE, 0, 1, 2, 1); /* container, no rights */
	fake_gpu_mem(&t->snap, 1, 24576, 100);
	t->in = input(&t->snap);
	/* exclusive use needs no memory reading; it just sorts last */
	t->req.count = 2;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want_excl, 2);
	policy_result_release(&t->res);

	t->req.share = 1;
	set_size(&t->req.mem, "1G");
	t->req.count = 1;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW); /* GPU 1 may free up */
	assert_why(&t->res, 0, "memory not reported", NULL);
	policy_result_release(&t->res);

	t->req.share = 0;
	t->req.has_min_free = 1;
	set_size(&t->req.min_free, "1G");
	choose(&t->in, &t->req, &t->res);
	assert_why(&t->res, 0, "memory not reported", NULL);
	policy_result_release(&t->res);
}

static void test_held_for_earlier_waiter(void **state)
{
	struct trial *t = *state;
	const char *held[2] = {"bob's job 17 (waiting since 10:02)", NULL};
	static const unsigned want[] = {1};

	fake_gpu_mem(&t->snap, 0, 81920, 81000);
	fake_gpu_mem(&t->snap, 1, 24576, 20000);
	t->in = input(&t->snap);
	t->in.held_for = held;
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "held for an earlier waiter", "bob's job 17");
	policy_result_release(&t->res);

	t->req.count = 2;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	policy_result_release(&t->res);
}

static void test_lost_and_failed_gpus_never_chosen(void **state)
{
	struct trial *t = *state;
	struct gm_gpu *g;
	static const unsigned want[] = {2};

	fake_gpu_lost(fake_gpu_mem(&t->snap, 0, 81920, 81000));
	g = fake_gpu_mem(&t->snap, 1, 81920, 81000);
	g->state = GM_GPU_ERROR;
	snprintf(g->note, sizeof g->note, "unknown error reading temperature");
	fake_gpu_mem(&t->snap, 2, 11264, 100);
	t->in = input(&t->snap);
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 0, "lost", "fallen off the bus");
	assert_why(&t->res, 1, "unknown error reading temperature", NULL);
	policy_result_release(&t->res);

	t->req.count = 2;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	policy_result_release(&t->res);
}

/* ---- never or not now ------------------------------------------------- */

static void eight_gpus(struct gm_snapshot *snap)
{
	unsigned i;

	fake_snapshot_init(snap);
	for (i = 0; i < 8; i++)
		fake_gpu_mem(snap, i, 24576, 24000 - i);
}

static void test_more_gpus_than_the_machine_has_is_never(void **state)
{
	struct trial *t = *state;

	eight_gpus(&t->snap);
	t->in = input(&t->snap);
	t->req.count = 9;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_int_equal(t->res.count, 0);
	policy_result_release(&t->res);

	t->req.count = 8;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_OK);
	assert_int_equal(t->res.count, 8);
	policy_result_release(&t->res);
}

static void test_all_leased_is_not_now(void **state)
{
	struct trial *t = *state;
	struct policy_lease leases[8];
	unsigned i;

	eight_gpus(&t->snap);
	for (i = 0; i < 8; i++)
		leases[i] = lease(&t->snap, i, 1, 0, 0, "alice (pid 4242)");
	t->in = input(&t->snap);
	t->in.leases = leases;
	t->in.lease_count = 8;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_int_equal(t->res.count, 0);
	for (i = 0; i < 8; i++)
		assert_why(&t->res, i, "leased exclusively by alice (pid 4242)", NULL);
	policy_result_release(&t->res);
}

static void test_more_memory_than_any_gpu_has_is_never(void **state)
{
	struct trial *t = *state;

	eight_gpus(&t->snap);
	t->in = input(&t->snap);
	t->req.share = 1;
	set_size(&t->req.mem, "100G");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_why(&t->res, 0, "24576 MiB in total", "--mem asks 100 GiB");
	policy_result_release(&t->res);

	t->req.share = 0;
	t->req.has_min_free = 1;
	set_size(&t->req.min_free, "25G");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_why(&t->res, 7, "24576 MiB in total", "--min-free asks 25 GiB");
	policy_result_release(&t->res);

	/* 24 GiB fits in total: when the GPUs empty out it will do */
	set_size(&t->req.min_free, "24G");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	policy_result_release(&t->res);
}

static void test_no_gpus_at_all(void **state)
{
	struct trial *t = *state;

	t->in = input(&t->snap);
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_int_equal(t->res.count, 0);
	policy_result_release(&t->res);
}

static void test_candidate_is_what_waiting_could_get(void **state)
{
	struct gm_snapshot snap;
	struct policy_input in;
	struct gm_request req = request();
	struct policy_lease leases[1];
	static const unsigned char usable[] = {1, 1, 1, 0};

	(void)state;
	fake_snapshot_init(&snap);
	fake_gpu_lost(fake_gpu_mem(&snap, 0, 81920, 81000));
	fake_gpu_mem(&snap, 1, 81920, 100); /* leased and full, but only for now */
	fake_gpu_mem(&snap, 2, 11264, 11000);
	fake_gpu_mem(&snap, 3, 81920, 81000);
	leases[0] = lease(&snap, 1, 1, 0, 0, "alice (pid 4242)");
	in = input(&snap);
	in.leases = leases;
	in.lease_count = 1;
	in.usable = usable;
	req.share = 1;
	set_size(&req.mem, "16G");
	assert_false(policy_candidate(&in, &req, 0)); /* lost */
	assert_true(policy_candidate(&in, &req, 1));
	assert_false(policy_candidate(&in, &req, 2)); /* 11 GiB in all */
	assert_false(policy_candidate(&in, &req, 3)); /* not ours */
	assert_false(policy_candidate(&in, &req, 4)); /* no such position */
	fake_snapshot_release(&snap);
}

static void test_policy_names(void **state)
{
	static const char *const names[] = {"memory", "memory-rate", "power", "util", "index"};
	int i;

	(void)state;
	for (i = 0; i < 5; i++) {
		assert_int_equal(policy_from_name(names[i]), i);
		assert_string_equal(policy_name((enum gm_policy)i), names[i]);
	}
	assert_int_equal(policy_from_name("fastest"), -1);
	assert_int_equal(policy_from_name("Memory"), -1);
	assert_int_equal(policy_from_name(""), -1);
	assert_int_equal(policy_from_name(NULL), -1);
}

/* ---- MIG slices --------------------------------------------------------- */

/* GPU 0 whole and nearly full; GPU 1 split (and looking idle as a whole). */
static void mig_machine(struct gm_snapshot *snap)
{
	fake_gpu_mem(snap, 0, 24576, 1000);
	fake_gpu_mem(snap, 1, 81920, 60000);
	fake_mig(snap, 1, "3g.40gb", "3a", 40192, 40000, 0);
	fake_mig(snap, 1, "1g.10gb", "1c", 9728, 7000, 4242);
	fake_mig(snap, 1, "1g.10gb", "1d", 9728, 9700, 0);
}

static void test_mig_gpu_never_handed_out_whole(void **state)
{
	struct trial *t = *state;
	static const unsigned want[] = {0};

	mig_machine(&t->snap);
	t->in = input(&t->snap);
	/* by memory GPU 1 would win by far: it is split, so GPU 0 */
	choose(&t->in, &t->req, &t->res);
	assert_chosen(&t->snap, &t->res, want, 1);
	assert_why(&t->res, 1, "in MIG mode: never handed out whole", "--mig 3g.40gb|1g.10gb");
	policy_result_release(&t->res);
	/* nor shared, nor for -n 2: never, not "later" */
	set_size(&t->req.mem, "1G");
	t->req.share = 1;
	t->req.count = 2;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_why(&t->res, 1, "in MIG mode", NULL);
	assert_false(policy_candidate(&t->in, &t->req, 1));
	policy_result_release(&t->res);
}

static void test_mig_request_gets_a_free_slice_of_its_profile(void **state)
{
	struct trial *t = *state;

	mig_machine(&t->snap);
	t->in = input(&t->snap);
	strcpy(t->req.mig, "1g.10gb");
	choose(&t->in, &t->req, &t->res);
	/* 1c runs pid 4242: 1d */
	assert_int_equal(t->res.outcome, POLICY_OK);
	assert_int_equal(t->res.mig, 1);
	assert_int_equal(t->res.count, 1);
	assert_string_equal(t->snap.migs[t->res.chosen[0]].uuid, "MIG-1d");
	assert_why(&t->res, 0, "not in MIG mode", NULL);
	policy_result_release(&t->res);

	/* any profile, by memory: the slice with most free */
	strcpy(t->req.mig, "any");
	choose(&t->in, &t->req, &t->res);
	assert_string_equal(t->snap.migs[t->res.chosen[0]].uuid, "MIG-3a");
	policy_result_release(&t->res);
}

static void test_mig_leased_slice_is_not_now_with_its_holder(void **state)
{
	struct trial *t = *state;
	struct policy_lease l;

	mig_machine(&t->snap);
	l = lease(&t->snap, 1, 1, 0, 0, "alice (pid 77)");
	l.mig = "MIG-1d";
	t->in = input(&t->snap);
	t->in.leases = &l;
	t->in.lease_count = 1;
	strcpy(t->req.mig, "1g.10gb");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_why(&t->res, 1, "1g.10gb MIG-1c running pid 4242",
	           "1g.10gb MIG-1d leased by alice (pid 77)");
	policy_result_release(&t->res);

	/* a slice lease leaves the other slices free: not the whole GPU's */
	strcpy(t->req.mig, "3g.40gb");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_OK);
	assert_string_equal(t->snap.migs[t->res.chosen[0]].uuid, "MIG-3a");
	policy_result_release(&t->res);

	/* a lease of the whole GPU (a gpuman before slices) holds every slice */
	l.mig = NULL;
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_why(&t->res, 1, "leased whole by alice (pid 77)", NULL);
	policy_result_release(&t->res);
}

static void test_mig_unknown_profile_is_never_and_lists_what_exists(void **state)
{
	struct trial *t = *state;

	mig_machine(&t->snap);
	t->in = input(&t->snap);
	strcpy(t->req.mig, "2g.20gb");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_why(&t->res, 1, "no 2g.20gb slice (it has 3g.40gb|1g.10gb)", NULL);
	assert_why(&t->res, 0, "not in MIG mode", NULL);
	policy_result_release(&t->res);

	/* --min-free counts against the slice, statically and now */
	strcpy(t->req.mig, "1g.10gb");
	t->req.has_min_free = 1;
	set_size(&t->req.min_free, "12G");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_why(&t->res, 1, "no 1g.10gb slice has --min-free 12 GiB in total", NULL);
	policy_result_release(&t->res);
	set_size(&t->req.min_free, "9700M");
	choose(&t->in, &t->req, &t->res);
	assert_string_equal(t->snap.migs[t->res.chosen[0]].uuid, "MIG-1d");
	policy_result_release(&t->res);
	set_size(&t->req.min_free, "9701M");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NOT_NOW);
	assert_why(&t->res, 1, "MIG-1d has only 9700 MiB free", NULL);
	policy_result_release(&t->res);
}

static void test_mig_slices_outside_inherited_allocation(void **state)
{
	struct trial *t = *state;
	static const unsigned char gpus[] = {1, 0};      /* GPU 1 not in it as a whole */
	static const unsigned char slices[] = {0, 0, 1}; /* but its slice 1d is */

	mig_machine(&t->snap);
	t->in = input(&t->snap);
	t->in.usable = gpus;
	t->in.mig_usable = slices;
	strcpy(t->req.mig, "any");
	choose(&t->in, &t->req, &t->res);
	assert_string_equal(t->snap.migs[t->res.chosen[0]].uuid, "MIG-1d");
	policy_result_release(&t->res);
	strcpy(t->req.mig, "3g.40gb");
	choose(&t->in, &t->req, &t->res);
	assert_int_equal(t->res.outcome, POLICY_NEVER);
	assert_why(&t->res, 1, "3g.40gb slices are outside CUDA_VISIBLE_DEVICES", NULL);
	policy_result_release(&t->res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_memory_most_free_first_ties_by_index, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_memory_rate_and_memory_differ, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_power_lowest_draw_ratio_missing_last, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_util_lowest_first_missing_last, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_index_ignores_load, trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_n3_takes_the_three_best, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_min_free_mib, trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_min_free_percent_of_each_gpu, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_max_util, trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_only_indices_and_uuid_prefix, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_exclude_indices_and_uuid_prefix, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_usable_mask_is_cuda_visible_devices, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_idle_means_no_process_and_no_lease, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_compute_modes, trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_exclusive_process_gpu_takes_one_lease, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_exclusive_lease_blocks_shares, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_share_blocks_exclusive, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_shares_pack_until_effective_free_runs_out,
	                                    trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_pending_counts_in_ordering_and_min_free,
	                                    trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_memory_not_reported, trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_held_for_earlier_waiter, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_lost_and_failed_gpus_never_chosen, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_more_gpus_than_the_machine_has_is_never,
	                                    trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_all_leased_is_not_now, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_more_memory_than_any_gpu_has_is_never, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_no_gpus_at_all, trial_setup, trial_teardown),
	    cmocka_unit_test(test_candidate_is_what_waiting_could_get),
	    cmocka_unit_test(test_policy_names),
	    cmocka_unit_test_setup_teardown(test_mig_gpu_never_handed_out_whole, trial_setup,
	                                    trial_teardown),
	    cmocka_unit_test_setup_teardown(test_mig_request_gets_a_free_slice_of_its_profile,
	                                    trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_mig_leased_slice_is_not_now_with_its_holder,
	                                    trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_mig_unknown_profile_is_never_and_lists_what_exists,
	                                    trial_setup, trial_teardown),
	    cmocka_unit_test_setup_teardown(test_mig_slices_outside_inherited_allocation,
	                                    trial_setup, trial_teardown),
	};

	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
