/*
 * test_record.c - the one JSON codec of a request, a usable set, a lease
 * and a waiter (lib/record.c): what the broker's wire, the registry's
 * lease files and tickets and the job store all write and read back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "gpuman.h"
#include "policy.h"
#include "record.h"
#include "lease_view.h"
#include "unit.h"

static struct gm_request *parse_opts(const char *const *kv)
{
	struct gm_request *req = gm_request_new();
	char err[256];

	assert_non_null(req);
	for (size_t i = 0; kv[i]; i += 2)
		if (gm_request_set(req, kv[i], kv[i + 1], err, sizeof err) != GM_OK)
			fail_msg("%s", err);
	return req;
}

static void test_a_request_round_trips(void **state)
{
	static const char *const kv[] = {"n",    "2",     "by",       "util",   "min-free", "50%",
	                                 "only", "0,1,2", "exclude",  "GPU-ab", "mem",      "8G",
	                                 "idle", "",      "max-util", "30",     NULL};
	struct gm_request *req = parse_opts(kv), *back;
	json_t *o = record_request_json(req);
	char err[256], *a, *b;

	(void)state;
	back = record_request_parse(o, NULL, err, sizeof err);
	assert_non_null(back);
	a = gm_request_text(req);
	b = gm_request_text(back);
	assert_string_equal(a, b);
	assert_int_equal(back->count, 2);
	free(a);
	free(b);
	json_decref(o);
	gm_request_free(req);
	gm_request_free(back);
}

static void test_what_the_command_line_refuses_is_refused(void **state)
{
	char err[256];
	json_t *o = json_pack("{s:s}", "n", "0");
	struct gm_request *req;

	(void)state;
	assert_null(record_request_parse(o, NULL, err, sizeof err));
	assert_non_null(strstr(err, "-n '0'"));
	json_decref(o);
	o = json_pack("{s:s, s:b}", "n", "1", "wait", 1);
	assert_null(record_request_parse(o, NULL, err, sizeof err));
	assert_string_equal(err, "malformed request");
	json_decref(o);
	o = json_pack("{s:s, s:s}", "n", "1", "no-framework-env", "");
	assert_null(record_request_parse(o, NULL, err, sizeof err));
	req = record_request_parse(o, (const char *const[]){"no-framework-env", NULL}, err,
	                           sizeof err);
	assert_non_null(req);
	gm_request_free(req);
	json_decref(o);
}

static void test_a_usable_set_round_trips_by_uuid(void **state)
{
	struct gm_snapshot snap;
	unsigned char usable[3] = {1, 0, 2}, *back;
	json_t *o;

	(void)state;
	fake_snapshot_init(&snap);
	for (unsigned i = 0; i < 3; i++)
		fake_gpu(&snap, i, NULL, 16000, 16000, 0, 1, 1, i);
	o = record_usable_json(usable, &snap);
	assert_int_equal(json_object_size(o), 2);
	back = record_usable_from(o, &snap);
	assert_memory_equal(back, usable, 3);
	free(back);
	assert_null(record_usable_from(NULL, &snap));
	json_decref(o);
	fake_snapshot_release(&snap);
}

static void test_a_lease_round_trips(void **state)
{
	char uuids[2][96] = {"GPU-a", "GPU-b"}, migs[2][96] = {"", "MIG-x"};
	unsigned indices[2] = {0, 3};
	struct lease_info li = {.id = "1-2-3",
	                        .uid = 1000,
	                        .user = "alice",
	                        .pid = 42,
	                        .job_pid = 43,
	                        .command = "train.py",
	                        .start_ms = 5,
	                        .exclusive = 1,
	                        .gpu_count = 2,
	                        .uuids = uuids,
	                        .indices = indices,
	                        .migs = migs,
	                        .reservation = 1,
	                        .expires_ms = 99},
	                  back;
	json_t *o = record_lease_json(&li);

	(void)state;
	assert_true(json_is_null(json_object_get(o, "share_mib")));
	assert_true(json_is_null(
	    json_object_get(json_array_get(json_object_get(o, "gpus"), 0), "mig_uuid")));
	assert_int_equal(record_lease_parse(o, &back), 0);
	assert_string_equal(back.id, "1-2-3");
	assert_int_equal(back.uid, 1000);
	assert_string_equal(back.user, "alice");
	assert_int_equal(back.job_pid, 43);
	assert_string_equal(back.command, "train.py");
	assert_true(back.exclusive);
	assert_int_equal(back.gpu_count, 2);
	assert_int_equal(back.indices[1], 3);
	assert_string_equal(back.uuids[1], "GPU-b");
	assert_string_equal(back.migs[0], "");
	assert_string_equal(back.migs[1], "MIG-x");
	assert_true(back.reservation);
	assert_int_equal(back.expires_ms, 99);
	record_lease_release(&back);
	json_decref(o);
	li.exclusive = 0;
	li.share_mib = 8192;
	li.reservation = 0;
	o = record_lease_json(&li);
	assert_int_equal(json_integer_value(json_object_get(o, "share_mib")), 8192);
	assert_true(json_is_null(json_object_get(o, "expires_ms")));
	json_decref(o);
}

static void test_a_waiter_round_trips(void **state)
{
	static const char *const kv[] = {"n", "2", "mem", "8G", "only", "0,1", NULL};
	char cand[2][96] = {"GPU-a", "GPU-b"};
	struct waiter_info wi = {.name = "wait.00000000000000000001.x",
	                         .uid = 1001,
	                         .user = "bob",
	                         .pid = 77,
	                         .command = "train.py --big",
	                         .since_ms = 123,
	                         .summary = "2 GPUs, 8 GiB share",
	                         .limit = "max_gpus: asks 2 GPUs, the limit is 1",
	                         .cand_count = 2,
	                         .cand = cand,
	                         .within = "r-1"},
	                   back;
	json_t *o;
	char *a, *b;

	(void)state;
	wi.req = parse_opts(kv);
	wi.usable = json_pack("{s:i, s:i}", "GPU-a", 1, "GPU-b", 0);
	o = record_waiter_json(&wi);
	assert_non_null(o);
	assert_int_equal(record_waiter_parse(o, &back), 0);
	assert_string_equal(back.name, wi.name);
	assert_int_equal(back.uid, 1001);
	assert_string_equal(back.user, "bob");
	assert_int_equal(back.pid, 77);
	assert_string_equal(back.command, "train.py --big");
	assert_int_equal(back.since_ms, 123);
	assert_string_equal(back.summary, wi.summary);
	assert_string_equal(back.limit, wi.limit);
	assert_int_equal(back.cand_count, 2);
	assert_string_equal(back.cand[1], "GPU-b");
	assert_string_equal(back.within, "r-1");
	assert_true(json_equal(back.usable, wi.usable));
	assert_null(back.usable_migs);
	assert_non_null(back.req);
	a = gm_request_text(wi.req);
	b = gm_request_text(back.req);
	assert_string_equal(a, b);
	free(a);
	free(b);
	record_waiter_release(&back);
	json_decref(o);
	json_decref(wi.usable);
	gm_request_free(wi.req);
}

/* What places a waiter is its request, never its summary for people; a
 * waiter of the broker's view has none (the broker places its line). */
static void test_a_waiter_is_placed_by_its_request_not_its_summary(void **state)
{
	json_t *o =
	    json_pack("{s:i, s:i, s:s, s:s, s:[s], s:{s:s}}", "uid", 1000, "pid", 5, "command", "x",
	              "summary", "2 GPUs exclusive", "candidates", "GPU-a", "request", "n", "3");
	struct waiter_info back;

	(void)state;
	assert_int_equal(record_waiter_parse(o, &back), 0);
	assert_int_equal(back.req->count, 3);
	assert_string_equal(back.summary, "2 GPUs exclusive");
	record_waiter_release(&back);
	json_object_del(o, "request");
	assert_int_equal(record_waiter_parse(o, &back), 0);
	assert_null(back.req);
	assert_int_equal(back.cand_count, 1);
	record_waiter_release(&back);
	json_object_set_new(o, "request", json_pack("{s:s}", "n", "lots"));
	assert_int_equal(record_waiter_parse(o, &back), 1);
	assert_null(back.req);
	record_waiter_release(&back);
	json_decref(o);
}

static void test_a_waiter_leaves_out_what_it_has_not(void **state)
{
	struct waiter_info wi = {
	    .uid = 1000, .pid = 5, .command = "x", .summary = "1 GPU exclusive"};
	json_t *o = record_waiter_json(&wi);

	(void)state;
	assert_non_null(o);
	assert_null(json_object_get(o, "name"));
	assert_null(json_object_get(o, "user"));
	assert_null(json_object_get(o, "limit"));
	assert_null(json_object_get(o, "within"));
	assert_null(json_object_get(o, "request"));
	assert_null(json_object_get(o, "usable"));
	assert_int_equal(json_array_size(json_object_get(o, "candidates")), 0);
	json_decref(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_request_round_trips),
	    cmocka_unit_test(test_what_the_command_line_refuses_is_refused),
	    cmocka_unit_test(test_a_usable_set_round_trips_by_uuid),
	    cmocka_unit_test(test_a_lease_round_trips),
	    cmocka_unit_test(test_a_waiter_round_trips),
	    cmocka_unit_test(test_a_waiter_is_placed_by_its_request_not_its_summary),
	    cmocka_unit_test(test_a_waiter_leaves_out_what_it_has_not),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
