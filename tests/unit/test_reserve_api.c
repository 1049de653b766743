/*
 * test_reserve_api.c - reservations through the public API alone
 * (gm_reserve, gm_release_reservation, gm_reservations_json), on the NVML
 * simulator's two-GPU machine, as a program outside the tree sees them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gpuman.h"
#include "sim_machine.h"

static char dir[] = "/tmp/gm-test-resv.XXXXXX";

static int setup(void **state)
{
	(void)state;
	return two_gpus_setup(dir);
}

static int teardown(void **state)
{
	(void)state;
	return sim_machine_teardown(dir);
}

static struct gm_request *request(const char *const *opts)
{
	struct gm_request *req = gm_request_new();
	char err[GM_ERRBUF_SIZE] = "";

	assert_non_null(req);
	for (; opts && opts[0]; opts += 2) {
		if (gm_request_set(req, opts[0], opts[1], err, sizeof err) != GM_OK)
			fail_msg("%s %s: %s", opts[0], opts[1] ? opts[1] : "(null)", err);
	}
	return req;
}

/* Reserve on a fresh context; the context is not needed afterwards. */
static enum gm_err reserve(const char *const *opts, const char *duration,
                           struct gm_reservation **out, char *err, size_t len)
{
	struct gm_context *ctx;
	struct gm_request *req = request(opts);
	enum gm_err rc;

	assert_int_equal(gm_open(&ctx, err, len), GM_OK);
	rc = gm_reserve(ctx, req, duration, out, err, len);
	gm_request_free(req);
	gm_close(ctx);
	return rc;
}

/* What gm_acquire of n GPUs answers now (a lease it gets is released). */
static enum gm_err acquire(const char *n, unsigned *first)
{
	const char *const opts[] = {"n", n, NULL};
	struct gm_context *ctx;
	struct gm_request *req = request(opts);
	struct gm_lease *lease = NULL;
	char err[GM_ERRBUF_SIZE] = "";
	enum gm_err rc;

	assert_int_equal(gm_open(&ctx, err, sizeof err), GM_OK);
	rc = gm_acquire(ctx, req, &lease, err, sizeof err);
	if (rc == GM_OK && first)
		*first = gm_lease_gpu_index(lease, 0);
	gm_lease_release(lease);
	gm_request_free(req);
	gm_close(ctx);
	return rc;
}

static char *reservations(void)
{
	char err[GM_ERRBUF_SIZE] = "", *json = NULL;

	assert_int_equal(gm_reservations_json(&json, err, sizeof err), GM_OK);
	assert_non_null(json);
	return json;
}

static void test_reservation_holds_gpus_until_released(void **state)
{
	static const char *const one[] = {"n", "1", NULL};
	struct gm_reservation *r = NULL;
	char err[GM_ERRBUF_SIZE] = "", id[64], want[128], *json;
	int64_t before = (int64_t)time(NULL) * 1000;
	unsigned got = 99;

	(void)state;
	assert_int_equal(reserve(one, "1h", &r, err, sizeof err), GM_OK);
	assert_non_null(r);
	/* the freest GPU, by the default policy: the big one, GPU 1 */
	assert_int_equal(gm_reservation_gpu_count(r), 1);
	assert_int_equal(gm_reservation_gpu_index(r, 0), 1);
	assert_string_equal(gm_reservation_gpu_uuid(r, 0),
	                    "GPU-22222222-aaaa-bbbb-cccc-000000000002");
	assert_string_equal(gm_reservation_gpu_uuid(r, 1), "");
	assert_string_equal(gm_reservation_cuda_visible(r),
	                    "GPU-22222222-aaaa-bbbb-cccc-000000000002");
	assert_string_equal(gm_reservation_indices(r), "1");
	assert_in_range(gm_reservation_expires_ms(r), before + 3600000 - 1000,
	                before + 3600000 + 5000);
	snprintf(id, sizeof id, "%s", gm_reservation_id(r));
	assert_true(id[0]);
	/* Freeing this process's copy ends nothing. */
	gm_reservation_free(r);

	json = reservations();
	snprintf(want, sizeof want, "\"id\":\"%s\"", id);
	assert_non_null(strstr(json, want));
	assert_non_null(strstr(json, "\"reservation\":true"));
	assert_non_null(strstr(json, "\"uuid\":\"GPU-22222222-aaaa-bbbb-cccc-000000000002\""));
	gm_free(json);
	/* Held against a second request: only GPU 0 is left, not both. */
	assert_int_equal(acquire("2", NULL), GM_ERR_UNAVAILABLE);
	assert_int_equal(acquire("1", &got), GM_OK);
	assert_int_equal(got, 0);
	/* Inside its owner's reservation, a lease goes on its GPU. */
	setenv("GPUMAN_RESERVATION", id, 1);
	assert_int_equal(acquire("1", &got), GM_OK);
	assert_int_equal(got, 1);
	unsetenv("GPUMAN_RESERVATION");

	assert_int_equal(gm_release_reservation(id, err, sizeof err), GM_OK);
	assert_int_equal(acquire("2", NULL), GM_OK);
	json = reservations();
	assert_string_equal(json, "{\"reservations\":[]}");
	gm_free(json);
	/* released already: the error names the id */
	assert_int_equal(gm_release_reservation(id, err, sizeof err), GM_ERR_INVALID);
	assert_non_null(strstr(err, id));
	assert_int_equal(gm_release_reservation(NULL, err, sizeof err), GM_ERR_INVALID);
}

static void test_a_plain_lease_is_no_reservation(void **state)
{
	static const char *const one[] = {"n", "1", NULL};
	struct gm_context *ctx;
	struct gm_request *req = request(one);
	struct gm_lease *lease = NULL;
	char err[GM_ERRBUF_SIZE] = "", *json;

	(void)state;
	assert_int_equal(gm_open(&ctx, err, sizeof err), GM_OK);
	assert_int_equal(gm_acquire(ctx, req, &lease, err, sizeof err), GM_OK);
	json = reservations();
	assert_string_equal(json, "{\"reservations\":[]}");
	gm_free(json);
	/* nor can it be released as one */
	assert_int_equal(gm_release_reservation(gm_lease_id(lease), err, sizeof err),
	                 GM_ERR_INVALID);
	gm_lease_release(lease);
	gm_request_free(req);
	gm_close(ctx);
}

static void test_reservation_expires(void **state)
{
	static const char *const two[] = {"n", "2", NULL};
	struct gm_reservation *r = NULL;
	char err[GM_ERRBUF_SIZE] = "", *json;
	struct timespec ts = {0, 700 * 1000000L};

	(void)state;
	assert_int_equal(reserve(two, "500ms", &r, err, sizeof err), GM_OK);
	assert_int_equal(gm_reservation_gpu_count(r), 2);
	assert_int_equal(acquire("1", NULL), GM_ERR_UNAVAILABLE);
	gm_reservation_free(r);
	nanosleep(&ts, NULL);
	assert_int_equal(acquire("2", NULL), GM_OK);
	json = reservations();
	assert_string_equal(json, "{\"reservations\":[]}");
	gm_free(json);
}

static void test_reserve_refuses_bad_duration_and_mig(void **state)
{
	static const char *const one[] = {"n", "1", NULL};
	static const char *const mig[] = {"mig", "any", NULL};
	static const char *const bad[] = {"", "soon", "0", "-5m"};
	struct gm_reservation *r = (struct gm_reservation *)&r;
	char err[GM_ERRBUF_SIZE] = "", *json;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(reserve(one, bad[i], &r, err, sizeof err), GM_ERR_INVALID);
		assert_null(r);
		assert_non_null(strstr(err, "duration"));
		if (bad[i][0])
			assert_non_null(strstr(err, bad[i]));
	}
	assert_int_equal(reserve(one, NULL, &r, err, sizeof err), GM_ERR_INVALID);
	assert_int_equal(reserve(mig, "1h", &r, err, sizeof err), GM_ERR_INVALID);
	assert_non_null(strstr(err, "mig"));
	assert_null(r);
	json = reservations();
	assert_string_equal(json, "{\"reservations\":[]}");
	gm_free(json);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reservation_holds_gpus_until_released),
	    cmocka_unit_test(test_a_plain_lease_is_no_reservation),
	    cmocka_unit_test(test_reservation_expires),
	    cmocka_unit_test(test_reserve_refuses_bad_duration_and_mig),
	};

	return cmocka_run_group_tests_name("reserve_api", tests, setup, teardown);
}
