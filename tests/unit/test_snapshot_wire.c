/*
 * test_snapshot_wire.c - the broker's snapshot wire form is lossless: a
 * snapshot the simulator gives (GPUs with every field, processes with
 * users and commands, MIG slices with their pids, notes) encoded and
 * decoded is the same struct, field by field; and a malformed answer is
 * refused, not half read.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>
#include "unit.h"
#include "sim_machine.h"
#include "snapshot.h"
#include "snapshot_wire.h"

static const char *const MACHINE =
    "{ \"gpus\": ["
    " { \"name\": \"A\", \"memory_total_mib\": 16000, \"memory_used_mib\": 100,"
    "   \"utilization_gpu\": 30, \"power_draw_w\": 61.5, \"power_limit_w\": 280,"
    "   \"temperature_c\": 40, \"compute_capability\": \"8.6\", \"persistence_mode\": 0,"
    "   \"clock_sm_mhz\": 1400, \"clock_memory_mhz\": 9000,"
    "   \"processes\": [ { \"pid\": 4000001, \"used_mib\": 500, \"utilization\": 10 },"
    "                    { \"pid\": 4000002, \"used_mib\": null, \"type\": \"graphics\" } ] },"
    " { \"name\": \"B\", \"memory_total_mib\": 81920, \"mig_mode\": 1, \"compute_capability\": "
    "\"8.0\","
    "   \"mig_devices\": [ { \"profile\": \"3g.40gb\", \"memory_total_mib\": 40192,"
    "      \"processes\": [ { \"pid\": 4000003, \"used_mib\": 1000 } ] } ] },"
    " { \"name\": \"C\", \"memory_total_mib\": 8000, \"power_limit_w\": null, \"fail\": "
    "\"gpu_is_lost\" } ] }";

static void assert_same(const struct gm_snapshot *a, const struct gm_snapshot *b)
{
	assert_string_equal(a->driver_version, b->driver_version);
	assert_int_equal(a->cuda_driver_version, b->cuda_driver_version);
	assert_int_equal(a->taken_ms, b->taken_ms);
	assert_true(a->nvml_init_ms == b->nvml_init_ms);
	assert_int_equal(a->gpu_count, b->gpu_count);
	/* calloc'd on both sides: the whole struct, padding included */
	assert_memory_equal(a->gpus, b->gpus, a->gpu_count * sizeof *a->gpus);
	assert_int_equal(a->proc_count, b->proc_count);
	assert_memory_equal(a->procs, b->procs, a->proc_count * sizeof *a->procs);
	assert_int_equal(a->mig_count, b->mig_count);
	for (size_t i = 0; i < a->mig_count; i++) {
		const struct gm_mig *x = &a->migs[i], *y = &b->migs[i];

		assert_int_equal(x->gpu, y->gpu);
		assert_string_equal(x->uuid, y->uuid);
		assert_string_equal(x->name, y->name);
		assert_string_equal(x->profile, y->profile);
		assert_int_equal(x->valid, y->valid);
		assert_int_equal(x->mem_total_mib, y->mem_total_mib);
		assert_int_equal(x->mem_free_mib, y->mem_free_mib);
		assert_int_equal(x->mem_used_mib, y->mem_used_mib);
		assert_int_equal(x->gpu_instance_id, y->gpu_instance_id);
		assert_int_equal(x->compute_instance_id, y->compute_instance_id);
		assert_int_equal(x->pid_count, y->pid_count);
		assert_memory_equal(x->pids, y->pids, x->pid_count * sizeof *x->pids);
	}
	assert_int_equal(a->note_count, b->note_count);
	for (size_t i = 0; i < a->note_count; i++)
		assert_string_equal(a->notes[i], b->notes[i]);
}

static void test_round_trip_is_lossless(void **state)
{
	char dir[] = "/tmp/gm-wire-XXXXXX", err[GM_ERRBUF_SIZE];
	struct gm_context *ctx = NULL;
	struct gm_snapshot *snap = NULL, *back = NULL;
	json_t *wire;
	char *text;

	(void)state;
	assert_int_equal(sim_machine_setup(dir, MACHINE), 0);
	assert_int_equal(gm_open(&ctx, err, sizeof err), GM_OK);
	assert_int_equal(snapshot_take(ctx, 1000, 1, &snap, err, sizeof err), GM_OK);
	/* the scenario's riches are there to lose */
	assert_int_equal(snap->gpu_count, 3);
	assert_true(snap->proc_count >= 3);
	assert_int_equal(snap->mig_count, 1);
	assert_true(snap->note_count >= 1);
	assert_true(snap->gpus[0].valid & GM_HAS_PERSISTENCE);
	/* through text, as on the socket */
	wire = snapshot_wire_encode(snap);
	text = json_dumps(wire, JSON_COMPACT);
	json_decref(wire);
	wire = json_loads(text, 0, NULL);
	free(text);
	assert_int_equal(snapshot_wire_decode(wire, &back, err, sizeof err), GM_OK);
	json_decref(wire);
	assert_same(snap, back);
	gm_snapshot_free(back);
	gm_snapshot_free(snap);
	gm_close(ctx);
}

static void test_malformed_is_refused(void **state)
{
	struct gm_snapshot *snap = (struct gm_snapshot *)1;
	char err[GM_ERRBUF_SIZE];
	json_t *o = json_pack("{s:[], s:{}}", "gpus", "processes");

	(void)state;
	assert_int_equal(snapshot_wire_decode(o, &snap, err, sizeof err), GM_ERR_STATE);
	assert_null(snap);
	assert_non_null(strstr(err, "malformed snapshot"));
	json_decref(o);
	assert_int_equal(snapshot_wire_decode(NULL, &snap, err, sizeof err), GM_ERR_STATE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip_is_lossless),
	    cmocka_unit_test(test_malformed_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
