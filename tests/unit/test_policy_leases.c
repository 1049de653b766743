/*
 * test_policy_leases.c - the policy against the leases already granted:
 * exclusive leases and shares, what is never possible and what is not
 * possible now (so waiting helps), and MIG slices.  Orderings and filters
 * are in test_policy.c; the fixture in policy_trial.h.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "policy_trial.h"

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

/* On the trial's snapshot: its own GPUs go first (released, not leaked). */
static void eight_gpus(struct gm_snapshot *snap)
{
	unsigned i;

	fake_snapshot_release(snap);
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
	    TRIAL(test_exclusive_lease_blocks_shares),
	    TRIAL(test_share_blocks_exclusive),
	    TRIAL(test_shares_pack_until_effective_free_runs_out),
	    TRIAL(test_pending_counts_in_ordering_and_min_free),
	    TRIAL(test_memory_not_reported),
	    TRIAL(test_held_for_earlier_waiter),
	    TRIAL(test_lost_and_failed_gpus_never_chosen),
	    TRIAL(test_more_gpus_than_the_machine_has_is_never),
	    TRIAL(test_all_leased_is_not_now),
	    TRIAL(test_more_memory_than_any_gpu_has_is_never),
	    TRIAL(test_no_gpus_at_all),
	    cmocka_unit_test(test_candidate_is_what_waiting_could_get),
	    cmocka_unit_test(test_policy_names),
	    TRIAL(test_mig_gpu_never_handed_out_whole),
	    TRIAL(test_mig_request_gets_a_free_slice_of_its_profile),
	    TRIAL(test_mig_leased_slice_is_not_now_with_its_holder),
	    TRIAL(test_mig_unknown_profile_is_never_and_lists_what_exists),
	    TRIAL(test_mig_slices_outside_inherited_allocation),
	};

	return cmocka_run_group_tests_name("policy_leases", tests, NULL, NULL);
}
