/*
 * test_access.c - every public accessor against the field it stands for,
 * on fake snapshots: each gm_gpu_value reports exactly when its validity
 * bit is set, and a GPU that fell off the bus reports nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "unit.h"

/* Each value, the bit that says it was read, and a distinct reading. */
static const struct {
	enum gm_gpu_value what;
	unsigned bit;
	int64_t want;
} values[] = {
    {GM_GPU_MEM_TOTAL_MIB, GM_HAS_MEMORY, 24576},
    {GM_GPU_MEM_FREE_MIB, GM_HAS_MEMORY, 20000},
    {GM_GPU_MEM_USED_MIB, GM_HAS_MEMORY, 4576},
    {GM_GPU_UTIL_GPU_PCT, GM_HAS_UTIL, 30},
    {GM_GPU_UTIL_MEM_PCT, GM_HAS_UTIL, 15},
    {GM_GPU_POWER_MW, GM_HAS_POWER, 61000},
    {GM_GPU_POWER_LIMIT_MW, GM_HAS_POWER_LIMIT, 280000},
    {GM_GPU_TEMPERATURE_C, GM_HAS_TEMPERATURE, 40},
    {GM_GPU_CC_MAJOR, GM_HAS_CC, 8},
    {GM_GPU_CC_MINOR, GM_HAS_CC, 6},
    {GM_GPU_COMPUTE_MODE, GM_HAS_COMPUTE_MODE, GM_COMPUTE_EXCLUSIVE_PROCESS},
    {GM_GPU_MIG_MODE, GM_HAS_MIG, 1},
    {GM_GPU_CUDA_RANK, GM_HAS_CUDA_RANK, 123456789012LL},
    {GM_GPU_CLOCK_SM_MHZ, GM_HAS_CLOCK_SM, 1410},
    {GM_GPU_CLOCK_MEM_MHZ, GM_HAS_CLOCK_MEM, 9501},
    {GM_GPU_CLOCK_GRAPHICS_MHZ, GM_HAS_CLOCK_GRAPHICS, 1395},
    {GM_GPU_MAX_CLOCK_SM_MHZ, GM_HAS_MAX_CLOCK_SM, 1980},
    {GM_GPU_MAX_CLOCK_MEM_MHZ, GM_HAS_MAX_CLOCK_MEM, 9751},
    {GM_GPU_MAX_CLOCK_GRAPHICS_MHZ, GM_HAS_MAX_CLOCK_GRAPHICS, 1965},
    {GM_GPU_PERSISTENCE_MODE, GM_HAS_PERSISTENCE, 1},
};

static struct gm_gpu *one_gpu(struct gm_snapshot *snap)
{
	struct gm_gpu *g = fake_gpu(snap, 3, "GPU-8f3a0000-1111-2222-3333-444455556666", 24576,
	                            20000, 30, 61000, 280000, 123456789012LL);

	g->compute_mode = GM_COMPUTE_EXCLUSIVE_PROCESS;
	g->mig_mode = 1;
	g->persistence_mode = 1;
	g->clock_mhz[GM_CLOCK_SM] = 1410;
	g->clock_mhz[GM_CLOCK_MEM] = 9501;
	g->clock_mhz[GM_CLOCK_GRAPHICS] = 1395;
	g->clock_max_mhz[GM_CLOCK_SM] = 1980;
	g->clock_max_mhz[GM_CLOCK_MEM] = 9751;
	g->clock_max_mhz[GM_CLOCK_GRAPHICS] = 1965;
	g->valid |= GM_HAS_CLOCK_SM | GM_HAS_CLOCK_MEM | GM_HAS_CLOCK_GRAPHICS |
	            GM_HAS_MAX_CLOCK_SM | GM_HAS_MAX_CLOCK_MEM | GM_HAS_MAX_CLOCK_GRAPHICS |
	            GM_HAS_PERSISTENCE;
	return g;
}

static void test_every_value_reads_its_own_field(void **state)
{
	struct gm_snapshot snap;
	const struct gm_gpu *g;

	(void)state;
	fake_snapshot_init(&snap);
	one_gpu(&snap);
	g = gm_snapshot_gpu(&snap, 0);
	assert_int_equal(gm_gpu_valid(g), snap.gpus[0].valid);
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		int64_t v = -1;

		assert_int_equal(gm_gpu_value(g, values[i].what, &v), 1);
		if (v != values[i].want)
			fail_msg("value %d: %lld, want %lld", (int)values[i].what, (long long)v,
			         (long long)values[i].want);
	}
	assert_int_equal(gm_gpu_index(g), 3);
	assert_string_equal(gm_gpu_uuid(g), "GPU-8f3a0000-1111-2222-3333-444455556666");
	assert_string_equal(gm_gpu_name(g), "Fake GPU 3");
	assert_string_equal(gm_gpu_pci_bus_id(g), "00000000:04:00.0");
	assert_int_equal(gm_gpu_state(g), GM_GPU_OK);
	assert_string_equal(gm_gpu_note(g), "");
	fake_snapshot_release(&snap);
}

static void test_a_value_without_its_bit_is_not_reported(void **state)
{
	struct gm_snapshot snap;

	(void)state;
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		struct gm_gpu *g;
		int64_t v = -1;

		fake_snapshot_init(&snap);
		g = one_gpu(&snap);
		g->valid &= ~values[i].bit;
		assert_int_equal(gm_gpu_value(g, values[i].what, &v), 0);
		assert_int_equal(v, -1);
		/* the others are unaffected */
		for (size_t j = 0; j < sizeof values / sizeof values[0]; j++)
			if (values[j].bit != values[i].bit)
				assert_int_equal(gm_gpu_value(g, values[j].what, &v), 1);
		fake_snapshot_release(&snap);
	}
}

static void test_a_lost_gpu_reports_nothing_but_why(void **state)
{
	struct gm_snapshot snap;
	struct gm_gpu *g;
	int64_t v = -1;

	(void)state;
	fake_snapshot_init(&snap);
	g = one_gpu(&snap);
	fake_gpu_lost(g);
	assert_int_equal(gm_gpu_state(g), GM_GPU_LOST);
	assert_string_equal(gm_gpu_note(g), "GPU has fallen off the bus");
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
		assert_int_equal(gm_gpu_value(g, values[i].what, &v), 0);
	assert_int_equal(v, -1);
	fake_snapshot_release(&snap);
}

static void test_processes_and_counts(void **state)
{
	struct gm_snapshot snap;
	const struct gm_proc *p;
	uint64_t mib = 7;
	unsigned uid = 7;

	(void)state;
	fake_snapshot_init(&snap);
	fake_gpu_mem(&snap, 0, 8000, 8000);
	fake_gpu_mem(&snap, 1, 8000, 8000);
	fake_proc(&snap, 1, 500, 1024);
	fake_proc(&snap, 0, 900, -1); /* memory not reported */
	snap.procs[1].has_user = 0;
	assert_int_equal(gm_snapshot_gpu_count(&snap), 2);
	assert_int_equal(gm_snapshot_proc_count(&snap), 2);
	p = gm_snapshot_proc(&snap, 0); /* sorted by GPU */
	assert_int_equal(gm_proc_pid(p), 900);
	assert_int_equal(gm_proc_gpu(p), 0);
	assert_int_equal(gm_proc_used_mib(p, &mib), 0);
	assert_int_equal(mib, 7);
	assert_int_equal(gm_proc_uid(p, &uid), 1);
	assert_int_equal(uid, 1000);
	assert_string_equal(gm_proc_user(p), "alice");
	p = gm_snapshot_proc(&snap, 1);
	assert_int_equal(gm_proc_kind(p), GM_PROC_COMPUTE);
	assert_int_equal(gm_proc_used_mib(p, &mib), 1);
	assert_int_equal(mib, 1024);
	uid = 7;
	assert_int_equal(gm_proc_uid(p, &uid), 0);
	assert_int_equal(uid, 7);
	assert_null(gm_snapshot_proc(&snap, 2));
	assert_null(gm_snapshot_gpu(&snap, 2));
	assert_int_equal(gm_snapshot_note_count(&snap), 0);
	assert_null(gm_snapshot_note(&snap, 0));
	fake_snapshot_release(&snap);
}

static void test_mig_slices_and_their_processes(void **state)
{
	struct gm_snapshot snap;
	const struct gm_mig *m;
	struct gm_mig *raw;
	int64_t v = -7;

	(void)state;
	fake_snapshot_init(&snap);
	fake_gpu_mem(&snap, 0, 81920, 40000);
	fake_gpu_mem(&snap, 1, 81920, 80000);
	fake_mig(&snap, 0, "3g.40gb", "3a", 40192, 10000, 700);
	raw = fake_mig(&snap, 0, "1g.10gb", "1d", 9728, 9700, 0);
	raw->valid &= ~GM_MIG_HAS_MEMORY;
	fake_proc(&snap, 0, 700, 30000);
	fake_proc(&snap, 0, 800, 100); /* on GPU 0, in no slice we know */
	fake_proc(&snap, 1, 700, 100); /* the same pid on another GPU */

	assert_int_equal(gm_snapshot_mig_count(&snap), 2);
	assert_null(gm_snapshot_mig(&snap, 2));
	m = gm_snapshot_mig(&snap, 0);
	assert_int_equal(gm_mig_gpu(m), 0);
	assert_string_equal(gm_mig_uuid(m), "MIG-3a");
	assert_string_equal(gm_mig_profile(m), "3g.40gb");
	assert_string_equal(gm_mig_name(m), "Test GPU MIG 3g.40gb");
	/* what each slice reported, as bits: the second lost its memory */
	assert_true(gm_mig_valid(m) & GM_MIG_HAS_MEMORY);
	assert_false(gm_mig_valid(m) & GM_MIG_HAS_INSTANCE);
	assert_false(gm_mig_valid(gm_snapshot_mig(&snap, 1)) & GM_MIG_HAS_MEMORY);
	assert_true(gm_mig_value(m, GM_MIG_MEM_FREE_MIB, &v));
	assert_int_equal(v, 10000);
	assert_true(gm_mig_value(m, GM_MIG_MEM_USED_MIB, &v));
	assert_int_equal(v, 30192);
	/* instance ids not reported, nor a value of a newer header */
	v = -7;
	assert_false(gm_mig_value(m, GM_MIG_GPU_INSTANCE_ID, &v));
	assert_false(gm_mig_value(m, (enum gm_mig_value)99, &v));
	assert_int_equal(v, -7);
	/* the second slice reports no memory: 0, never a zero */
	assert_false(gm_mig_value(gm_snapshot_mig(&snap, 1), GM_MIG_MEM_TOTAL_MIB, &v));
	assert_int_equal(v, -7);

	assert_ptr_equal(gm_proc_mig(&snap, gm_snapshot_proc(&snap, 0)), m);
	assert_null(gm_proc_mig(&snap, gm_snapshot_proc(&snap, 1)));
	assert_null(gm_proc_mig(&snap, gm_snapshot_proc(&snap, 2)));
	fake_snapshot_release(&snap);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_value_reads_its_own_field),
	    cmocka_unit_test(test_a_value_without_its_bit_is_not_reported),
	    cmocka_unit_test(test_a_lost_gpu_reports_nothing_but_why),
	    cmocka_unit_test(test_processes_and_counts),
	    cmocka_unit_test(test_mig_slices_and_their_processes),
	};

	return cmocka_run_group_tests_name("access", tests, NULL, NULL);
}
