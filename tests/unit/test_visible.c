/*
 * test_visible.c - CUDA_VISIBLE_DEVICES as CUDA reads it.  A mistake here
 * sends a job to a GPU it was not given (a Slurm allocation, another user's
 * card), so each test pins down one rule CUDA follows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "visible.h"
#include "unit.h"

/* A mixed workstation: NVML index 0 is an old slow card, 1 the fast one,
 * 2 in between, 3 reports no speed.  CUDA's default order is 1, 2, 0, 3. */
#define UUID0 "GPU-8f3a1c2e-0000-0000-0000-000000000000"
#define UUID1 "GPU-8f3b77aa-0000-0000-0000-000000000001"
#define UUID2 "GPU-c0ffee00-0000-0000-0000-000000000002"
#define UUID3 "GPU-d00d0000-0000-0000-0000-000000000003"

static int setup_mixed(void **state)
{
	struct gm_snapshot *snap = malloc(sizeof *snap);

	assert_non_null(snap);
	fake_snapshot_init(snap);
	fake_gpu(snap, 0, UUID0, 11264, 11000, 0, 50000, 250000, 3584ull * 1582);
	fake_gpu(snap, 1, UUID1, 81920, 80000, 0, 60000, 700000, 16896ull * 1980);
	fake_gpu(snap, 2, UUID2, 24576, 24000, 0, 40000, 350000, 10496ull * 1695);
	fake_gpu(snap, 3, UUID3, 16384, 16000, 0, 30000, 200000, 2560ull * 1500);
	*state = snap;
	return 0;
}

static int teardown_snap(void **state)
{
	fake_snapshot_release(*state);
	free(*state);
	return 0;
}

static void test_unset_means_all_visible(void **state)
{
	struct visible vis = VISIBLE_INIT;

	(void)state;
	assert_int_equal(visible_parse(NULL, &vis), 0);
	assert_false(vis.set);
	assert_int_equal(vis.count, 0);
	assert_false(vis.truncated);
	visible_release(&vis);
}

static void test_empty_means_no_gpu(void **state)
{
	struct visible vis = VISIBLE_INIT;

	(void)state;
	assert_int_equal(visible_parse("", &vis), 0);
	assert_true(vis.set);
	assert_int_equal(vis.count, 0);
	assert_false(vis.truncated);
	visible_release(&vis);

	assert_int_equal(visible_parse("  ", &vis), 0);
	assert_true(vis.set);
	assert_int_equal(vis.count, 0);
	visible_release(&vis);
}

static void test_indices_and_uuids_trimmed(void **state)
{
	struct visible vis = VISIBLE_INIT;

	(void)state;
	assert_int_equal(visible_parse(" 2 ,0, GPU-8f3a , MIG-4d5e6f70-aaaa", &vis), 0);
	assert_true(vis.set);
	assert_false(vis.truncated);
	assert_int_equal(vis.count, 4);
	assert_string_equal(vis.entries[0], "2");
	assert_string_equal(vis.entries[1], "0");
	assert_string_equal(vis.entries[2], "GPU-8f3a");
	assert_string_equal(vis.entries[3], "MIG-4d5e6f70-aaaa");
	visible_release(&vis);
	assert_null(vis.entries);
	assert_int_equal(vis.count, 0);
}

static void test_negative_entry_truncates(void **state)
{
	struct visible vis = VISIBLE_INIT;

	(void)state;
	/* the example from CUDA's documentation: 0,2,-1,1 exposes 0 and 2 */
	assert_int_equal(visible_parse("0,2,-1,1", &vis), 0);
	assert_int_equal(vis.count, 2);
	assert_true(vis.truncated);
	assert_string_equal(vis.entries[0], "0");
	assert_string_equal(vis.entries[1], "2");
	visible_release(&vis);
}

static void test_garbage_entry_truncates(void **state)
{
	struct visible vis = VISIBLE_INIT;

	(void)state;
	assert_int_equal(visible_parse("1,abc,0", &vis), 0);
	assert_int_equal(vis.count, 1);
	assert_true(vis.truncated);
	visible_release(&vis);

	assert_int_equal(visible_parse("0,,1", &vis), 0);
	assert_int_equal(vis.count, 1);
	assert_true(vis.truncated);
	visible_release(&vis);

	/* CUDA's prefixes are upper case */
	assert_int_equal(visible_parse("gpu-8f3a,0", &vis), 0);
	assert_int_equal(vis.count, 0);
	assert_true(vis.truncated);
	visible_release(&vis);

	assert_int_equal(visible_parse("+1", &vis), 0);
	assert_int_equal(vis.count, 0);
	assert_true(vis.truncated);
	visible_release(&vis);
}

static void test_duplicate_entry_truncates(void **state)
{
	struct visible vis = VISIBLE_INIT;

	(void)state;
	assert_int_equal(visible_parse("0,1,0,2", &vis), 0);
	assert_int_equal(vis.count, 2);
	assert_true(vis.truncated);
	visible_release(&vis);

	assert_int_equal(visible_parse("1,01", &vis), 0);
	assert_int_equal(vis.count, 1);
	assert_true(vis.truncated);
	visible_release(&vis);

	assert_int_equal(visible_parse("GPU-8f3a,GPU-8f3a", &vis), 0);
	assert_int_equal(vis.count, 1);
	visible_release(&vis);
}

static void test_cuda_order_fastest_first(void **state)
{
	struct gm_snapshot *snap = *state;
	size_t order[8];

	assert_int_equal(visible_cuda_order(snap, 0, order), 4);
	assert_int_equal(order[0], 1);
	assert_int_equal(order[1], 2);
	assert_int_equal(order[2], 0);
	assert_int_equal(order[3], 3); /* the slowest */
}

static void test_cuda_order_pci_bus_id(void **state)
{
	struct gm_snapshot *snap = *state;
	size_t order[8];

	assert_int_equal(visible_cuda_order(snap, 1, order), 4);
	assert_int_equal(order[0], 0);
	assert_int_equal(order[1], 1);
	assert_int_equal(order[2], 2);
	assert_int_equal(order[3], 3);
}

static void test_cuda_order_equal_speed_by_index(void **state)
{
	struct gm_snapshot snap;
	size_t order[8];

	(void)state;
	fake_snapshot_init(&snap);
	fake_gpu(&snap, 0, NULL, 16384, 16000, 0, 0, 0, 100);
	fake_gpu(&snap, 1, NULL, 16384, 16000, 0, 0, 0, 500);
	fake_gpu(&snap, 2, NULL, 16384, 16000, 0, 0, 0, 100);
	fake_gpu(&snap, 3, NULL, 16384, 16000, 0, 0, 0, 500);
	assert_int_equal(visible_cuda_order(&snap, 0, order), 4);
	assert_int_equal(order[0], 1);
	assert_int_equal(order[1], 3);
	assert_int_equal(order[2], 0);
	assert_int_equal(order[3], 2);
	fake_snapshot_release(&snap);
}

static void test_lost_gpu_not_enumerated(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	size_t order[8];
	long entry_gpu[4];

	fake_gpu_lost(&snap->gpus[1]); /* the fast one falls off the bus */
	assert_int_equal(visible_cuda_order(snap, 0, order), 3);
	assert_int_equal(order[0], 2);
	assert_int_equal(order[1], 0);
	assert_int_equal(order[2], 3);
	assert_int_equal(visible_cuda_order(snap, 1, order), 3);
	assert_int_equal(order[0], 0);
	assert_int_equal(order[1], 2);

	/* CUDA device 0 is now the next fastest; the lost GPU's UUID names
	 * nothing CUDA can open */
	assert_int_equal(visible_parse("0," UUID1, &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 1);
	assert_int_equal(entry_gpu[0], 2);
	assert_int_equal(entry_gpu[1], -1);
	visible_release(&vis);
}

static void test_index_means_cuda_order(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];

	/* Without CUDA_DEVICE_ORDER=PCI_BUS_ID, "0" is the fastest GPU, which
	 * nvidia-smi calls GPU 1. */
	assert_int_equal(visible_parse("0", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 1);
	assert_int_equal(entry_gpu[0], 1);
	assert_int_equal(visible_resolve(&vis, snap, 1, entry_gpu), 1);
	assert_int_equal(entry_gpu[0], 0);
	visible_release(&vis);

	assert_int_equal(visible_parse("2,0", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 2);
	assert_int_equal(entry_gpu[0], 0);
	assert_int_equal(entry_gpu[1], 1);
	visible_release(&vis);
}

static void test_uuid_full_and_prefix(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];

	assert_int_equal(visible_parse(UUID0 ",GPU-c0f", &vis), 0);
	/* UUIDs mean the same GPU whatever the device order */
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 2);
	assert_int_equal(entry_gpu[0], 0);
	assert_int_equal(entry_gpu[1], 2);
	assert_int_equal(visible_resolve(&vis, snap, 1, entry_gpu), 2);
	assert_int_equal(entry_gpu[0], 0);
	assert_int_equal(entry_gpu[1], 2);
	visible_release(&vis);
}

static void test_ambiguous_or_unknown_uuid_cuts(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];

	/* GPU-8f3 starts both UUID0 and UUID1 */
	assert_int_equal(visible_parse("2,GPU-8f3,0", &vis), 0);
	assert_int_equal(vis.count, 3);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 1);
	assert_int_equal(entry_gpu[0], 0);
	assert_int_equal(entry_gpu[1], -1);
	assert_int_equal(entry_gpu[2], -1); /* after the cut, even if valid */
	visible_release(&vis);

	assert_int_equal(visible_parse("GPU-8f3b", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 1);
	assert_int_equal(entry_gpu[0], 1);
	visible_release(&vis);

	assert_int_equal(visible_parse("GPU-ffff,1", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 0);
	assert_int_equal(entry_gpu[0], -1);
	assert_int_equal(entry_gpu[1], -1);
	visible_release(&vis);

	/* the hex digits are compared as CUDA compares them: exactly */
	assert_int_equal(visible_parse("GPU-C0FFEE", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 0);
	visible_release(&vis);

	assert_int_equal(visible_parse("GPU-", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 0);
	visible_release(&vis);
}

static void test_out_of_range_index_cuts(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];

	assert_int_equal(visible_parse("3,4,0", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 1);
	assert_int_equal(entry_gpu[0], 3);
	assert_int_equal(entry_gpu[1], -1);
	assert_int_equal(entry_gpu[2], -1);
	visible_release(&vis);

	assert_int_equal(visible_parse("99999999999999999999999", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 0);
	visible_release(&vis);
}

static void test_mig_entries_not_resolved_yet(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];

	assert_int_equal(visible_parse("MIG-4d5e6f70-aaaa-bbbb,0", &vis), 0);
	assert_int_equal(vis.count, 2);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 0);
	assert_int_equal(entry_gpu[0], -1);
	visible_release(&vis);
}

static void test_same_gpu_twice_cuts(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];

	/* CUDA device 0 is UUID1: naming it again by UUID is a repeat */
	assert_int_equal(visible_parse("0,GPU-8f3b,2", &vis), 0);
	assert_int_equal(vis.count, 3);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 1);
	assert_int_equal(entry_gpu[0], 1);
	assert_int_equal(entry_gpu[1], -1);
	visible_release(&vis);
}

static void test_empty_value_resolves_nothing(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[1] = {7};

	assert_int_equal(visible_parse("", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 0);
	assert_int_equal(entry_gpu[0], 7); /* nothing written */
	visible_release(&vis);
}

/* Slurm without a device cgroup: both lists hold the node-global indices. */
static void test_slurm_global_indices(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];

	assert_int_equal(visible_parse("2,3", &vis), 0);
	assert_int_equal(visible_resolve_slurm(&vis, "2,3", snap, entry_gpu), 2);
	assert_int_equal(entry_gpu[0], 2);
	assert_int_equal(entry_gpu[1], 3);
	visible_release(&vis);
}

/* With ConstrainDevices Slurm renumbers CUDA_VISIBLE_DEVICES from 0; read
 * as CUDA would on a machine whose NVML still shows every GPU, "0" would be
 * the fastest GPU (1), which the job was not given. */
static void test_slurm_cgroup_renumbered(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];

	assert_int_equal(visible_parse("0", &vis), 0);
	assert_int_equal(visible_resolve_slurm(&vis, "2", snap, entry_gpu), 1);
	assert_int_equal(entry_gpu[0], 2);
	visible_release(&vis);

	assert_int_equal(visible_parse("0,1", &vis), 0);
	assert_int_equal(visible_resolve_slurm(&vis, "3,0", snap, entry_gpu), 2);
	assert_int_equal(entry_gpu[0], 3);
	assert_int_equal(entry_gpu[1], 0);
	visible_release(&vis);
}

/* When the list does not fit, CUDA's reading stands: (size_t)-1. */
static void test_slurm_list_not_applicable(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	long entry_gpu[4];
	const size_t no = (size_t)-1;

	assert_int_equal(visible_parse("0,1", &vis), 0);
	assert_true(visible_resolve_slurm(&vis, NULL, snap, entry_gpu) == no);
	assert_true(visible_resolve_slurm(&vis, "", snap, entry_gpu) == no);
	/* the user narrowed CUDA_VISIBLE_DEVICES inside the job */
	assert_true(visible_resolve_slurm(&vis, "1,2,3", snap, entry_gpu) == no);
	assert_true(visible_resolve_slurm(&vis, "1", snap, entry_gpu) == no);
	assert_true(visible_resolve_slurm(&vis, "1,x", snap, entry_gpu) == no);
	assert_true(visible_resolve_slurm(&vis, "1,", snap, entry_gpu) == no);
	assert_true(visible_resolve_slurm(&vis, "0-1", snap, entry_gpu) == no);
	assert_true(visible_resolve_slurm(&vis, "2,2", snap, entry_gpu) == no);
	/* NVML shows no GPU 7: it renumbered what the cgroup lets it open */
	assert_true(visible_resolve_slurm(&vis, "1,7", snap, entry_gpu) == no);
	visible_release(&vis);

	assert_int_equal(visible_parse(UUID0, &vis), 0);
	assert_true(visible_resolve_slurm(&vis, "2", snap, entry_gpu) == no);
	visible_release(&vis);

	assert_int_equal(visible_parse("", &vis), 0);
	assert_true(visible_resolve_slurm(&vis, "2", snap, entry_gpu) == no);
	visible_release(&vis);

	/* a lost GPU is no GPU of the job */
	fake_gpu_lost(&snap->gpus[2]);
	assert_int_equal(visible_parse("0", &vis), 0);
	assert_true(visible_resolve_slurm(&vis, "2", snap, entry_gpu) == no);
	visible_release(&vis);
}

/* A driver before R510 reports no core count: for mixed models CUDA's
 * fastest-first order is unknown, and gpuman never guesses it. */
static void test_unknown_order_is_never_guessed(void **state)
{
	struct gm_snapshot *snap = *state;
	struct visible vis = VISIBLE_INIT;
	size_t order[8];
	long entry_gpu[4];

	for (size_t i = 0; i < snap->gpu_count; i++)
		snap->gpus[i].valid &= ~GM_HAS_CUDA_RANK;
	assert_false(visible_order_known(snap));
	assert_int_equal(visible_cuda_order(snap, 0, order), 0);
	assert_int_equal(visible_cuda_order(snap, 1, order), 4);

	assert_int_equal(visible_parse("0,1", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 0);
	assert_int_equal(entry_gpu[0], VISIBLE_UNMAPPED);
	/* With CUDA_DEVICE_ORDER=PCI_BUS_ID the indices are certain. */
	assert_int_equal(visible_resolve(&vis, snap, 1, entry_gpu), 2);
	assert_int_equal(entry_gpu[0], 0);
	assert_int_equal(entry_gpu[1], 1);
	visible_release(&vis);

	/* UUIDs are certain whatever the order; an index after them is not. */
	assert_int_equal(visible_parse(UUID2 "," UUID0 ",1", &vis), 0);
	assert_int_equal(visible_resolve(&vis, snap, 0, entry_gpu), 2);
	assert_int_equal(entry_gpu[0], 2);
	assert_int_equal(entry_gpu[1], 0);
	assert_int_equal(entry_gpu[2], VISIBLE_UNMAPPED);
	visible_release(&vis);

	/* One GPU whose rank is missing is enough to make the order unknown. */
	snap->gpus[0].valid |= GM_HAS_CUDA_RANK;
	snap->gpus[1].valid |= GM_HAS_CUDA_RANK;
	snap->gpus[2].valid |= GM_HAS_CUDA_RANK;
	assert_false(visible_order_known(snap));
	/* ... unless that GPU is lost: CUDA does not enumerate it. */
	fake_gpu_lost(&snap->gpus[3]);
	assert_true(visible_order_known(snap));
}

/* GPUs of one model tie, and CUDA breaks ties by PCI bus id: the order is
 * NVML's even without core counts. */
static void test_one_model_order_is_pci_order(void **state)
{
	struct gm_snapshot snap;
	struct visible vis = VISIBLE_INIT;
	size_t order[8];
	long entry_gpu[4];

	(void)state;
	fake_snapshot_init(&snap);
	for (unsigned i = 0; i < 3; i++)
		snprintf(fake_gpu(&snap, i, NULL, 16384, 16000, 0, 0, 0, FAKE_NONE)->name,
		         sizeof snap.gpus[0].name, "NVIDIA A100-SXM4-40GB");
	assert_true(visible_order_known(&snap));
	assert_int_equal(visible_cuda_order(&snap, 0, order), 3);
	assert_int_equal(order[0], 0);
	assert_int_equal(order[2], 2);
	assert_int_equal(visible_parse("2,0", &vis), 0);
	assert_int_equal(visible_resolve(&vis, &snap, 0, entry_gpu), 2);
	assert_int_equal(entry_gpu[0], 2);
	assert_int_equal(entry_gpu[1], 0);
	visible_release(&vis);
	fake_snapshot_release(&snap);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_unset_means_all_visible),
	    cmocka_unit_test(test_empty_means_no_gpu),
	    cmocka_unit_test(test_indices_and_uuids_trimmed),
	    cmocka_unit_test(test_negative_entry_truncates),
	    cmocka_unit_test(test_garbage_entry_truncates),
	    cmocka_unit_test(test_duplicate_entry_truncates),
	    cmocka_unit_test_setup_teardown(test_cuda_order_fastest_first, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test_setup_teardown(test_cuda_order_pci_bus_id, setup_mixed, teardown_snap),
	    cmocka_unit_test(test_cuda_order_equal_speed_by_index),
	    cmocka_unit_test_setup_teardown(test_lost_gpu_not_enumerated, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test_setup_teardown(test_index_means_cuda_order, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test_setup_teardown(test_uuid_full_and_prefix, setup_mixed, teardown_snap),
	    cmocka_unit_test_setup_teardown(test_ambiguous_or_unknown_uuid_cuts, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test_setup_teardown(test_out_of_range_index_cuts, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test_setup_teardown(test_mig_entries_not_resolved_yet, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test_setup_teardown(test_same_gpu_twice_cuts, setup_mixed, teardown_snap),
	    cmocka_unit_test_setup_teardown(test_unknown_order_is_never_guessed, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test(test_one_model_order_is_pci_order),
	    cmocka_unit_test_setup_teardown(test_empty_value_resolves_nothing, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test_setup_teardown(test_slurm_global_indices, setup_mixed, teardown_snap),
	    cmocka_unit_test_setup_teardown(test_slurm_cgroup_renumbered, setup_mixed,
	                                    teardown_snap),
	    cmocka_unit_test_setup_teardown(test_slurm_list_not_applicable, setup_mixed,
	                                    teardown_snap),
	};

	return cmocka_run_group_tests_name("visible", tests, NULL, NULL);
}
