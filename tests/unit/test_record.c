/*
 * test_record.c - the one JSON codec of a request and a usable set
 * (lib/record.c): what the broker's wire, the registry's tickets and the
 * job store all write and read back.
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
#include "registry.h"
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_request_round_trips),
	    cmocka_unit_test(test_what_the_command_line_refuses_is_refused),
	    cmocka_unit_test(test_a_usable_set_round_trips_by_uuid),
	    cmocka_unit_test(test_a_lease_round_trips),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
