/*
 * test_api.c - the public API as a program outside the tree sees it: this
 * file includes gpuman.h only, so the snapshot is read through the
 * accessors alone, on a two-GPU machine of the NVML simulator.
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

static char dir[] = "/tmp/gm-test-api.XXXXXX";

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

static struct gm_snapshot *take(struct gm_context **ctx)
{
	struct gm_snapshot *snap = NULL;
	char err[GM_ERRBUF_SIZE] = "";

	assert_int_equal(gm_open(ctx, err, sizeof err), GM_OK);
	assert_int_equal(gm_snapshot_take(*ctx, &snap, err, sizeof err), GM_OK);
	return snap;
}

static void test_version_macros_match_the_library(void **state)
{
	char text[32];

	(void)state;
	assert_int_equal(GM_VERSION,
	                 GM_VERSION_MAJOR << 16 | GM_VERSION_MINOR << 8 | GM_VERSION_PATCH);
	snprintf(text, sizeof text, "%d.%d.%d", GM_VERSION_MAJOR, GM_VERSION_MINOR,
	         GM_VERSION_PATCH);
	assert_string_equal(GM_VERSION_STRING, text);
	assert_string_equal(gm_version(), GM_VERSION_STRING);
	assert_int_equal(gm_version_number(), GM_VERSION);
	assert_true(GM_VERSION >= 0x000200); /* the accessors came with 0.2.0 */
}

static void test_snapshot_read_through_accessors(void **state)
{
	struct gm_context *ctx;
	struct gm_snapshot *snap = take(&ctx);
	const struct gm_gpu *small, *big;
	const struct gm_proc *proc;
	int64_t v = -7;
	uint64_t mib = 0;
	unsigned uid = 12345;

	(void)state;
	assert_string_equal(gm_snapshot_driver_version(snap), "580.95.05");
	assert_int_equal(gm_snapshot_cuda_driver_version(snap), 13000);
	assert_true(llabs(gm_snapshot_taken_ms(snap) - (int64_t)time(NULL) * 1000) < 60000);

	assert_int_equal(gm_snapshot_gpu_count(snap), 2);
	small = gm_snapshot_gpu(snap, 0);
	big = gm_snapshot_gpu(snap, 1);
	assert_non_null(small);
	assert_non_null(big);
	assert_null(gm_snapshot_gpu(snap, 2));
	assert_int_equal(gm_gpu_index(big), 1);
	assert_int_equal(gm_gpu_state(big), GM_GPU_OK);
	assert_string_equal(gm_gpu_name(big), "big");
	assert_string_equal(gm_gpu_uuid(big), "GPU-22222222-aaaa-bbbb-cccc-000000000002");
	assert_ptr_equal(gm_snapshot_find(snap, "GPU-2222"), big);
	assert_ptr_equal(gm_snapshot_find(snap, "0"), small);

	/* Memory used counts the driver's own and the processes'. */
	assert_int_equal(gm_gpu_value(small, GM_GPU_MEM_TOTAL_MIB, &v), 1);
	assert_int_equal(v, 11264);
	assert_int_equal(gm_gpu_value(small, GM_GPU_MEM_USED_MIB, &v), 1);
	assert_int_equal(v, 1500);
	assert_int_equal(gm_gpu_value(small, GM_GPU_MEM_FREE_MIB, &v), 1);
	assert_int_equal(v, 11264 - 1500);
	assert_int_equal(gm_gpu_value(small, GM_GPU_POWER_MW, &v), 1);
	assert_int_equal(v, 55000);
	assert_true(gm_gpu_valid(small) & GM_HAS_POWER);
	/* Not in the scenario: not reported, and *out is left alone. */
	v = -7;
	assert_false(gm_gpu_valid(small) & GM_HAS_TEMPERATURE);
	assert_int_equal(gm_gpu_value(small, GM_GPU_TEMPERATURE_C, &v), 0);
	assert_int_equal(v, -7);
	/* A value this library does not know (a newer program's). */
	assert_int_equal(gm_gpu_value(small, (enum gm_gpu_value)999, &v), 0);
	assert_int_equal(v, -7);

	assert_int_equal(gm_snapshot_proc_count(snap), 1);
	assert_null(gm_snapshot_proc(snap, 1));
	proc = gm_snapshot_proc(snap, 0);
	assert_int_equal(gm_proc_pid(proc), 4242);
	assert_int_equal(gm_proc_gpu(proc), 0);
	assert_int_equal(gm_proc_used_mib(proc, &mib), 1);
	assert_int_equal(mib, 500);
	/* pid 4242 is the simulator's, not a process of this machine */
	if (!gm_proc_uid(proc, &uid))
		assert_int_equal(uid, 12345);
	assert_non_null(gm_proc_user(proc));
	assert_non_null(gm_proc_command(proc));
	assert_null(gm_snapshot_note(snap, gm_snapshot_note_count(snap)));

	gm_snapshot_free(snap);
	gm_close(ctx);
}

static void test_json_is_freed_with_gm_free(void **state)
{
	struct gm_context *ctx;
	struct gm_snapshot *snap = take(&ctx);
	char *json = gm_snapshot_json(snap);

	(void)state;
	assert_non_null(json);
	assert_non_null(strstr(json, "\"580.95.05\""));
	gm_free(json);
	gm_free(NULL);
	gm_snapshot_free(snap);
	gm_close(ctx);
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

/* Set every option of a request's text, split at blanks, on a new request. */
static struct gm_request *from_text(const char *text)
{
	struct gm_request *req = gm_request_new();
	char err[GM_ERRBUF_SIZE] = "", *copy = strdup(text), *save = NULL;

	for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
		char *key = tok + (tok[1] == '-' ? 2 : 1), *eq = strchr(key, '=');
		const char *value = NULL;

		if (eq) {
			*eq = '\0';
			value = eq + 1;
		} else if (strcmp(key, "idle") && strcmp(key, "wait")) {
			value = strtok_r(NULL, " ", &save);
		}
		if (gm_request_set(req, key, value, err, sizeof err) != GM_OK)
			fail_msg("'%s' of '%s': %s", key, text, err);
	}
	free(copy);
	return req;
}

static void test_request_text_reads_back_as_the_same_request(void **state)
{
	static const struct {
		const char *opts[20];
		const char *text;
	} cases[] = {
	    {{NULL}, ""},
	    {{"n", "2", "by", "util", NULL}, "-n 2 --by util"},
	    {{"min-free", "8192", "max-util", "50%", NULL}, "--min-free 8G --max-util 50"},
	    {{"mem", "1.5G", "only", "0,GPU-8f3", "exclude", "3", NULL},
	     "--only 0,GPU-8f3 --exclude 3 --mem 1536M"},
	    {{"mem", "50%", "idle", NULL, "wait", "1h30m", NULL}, "--mem 50% --idle --wait=1h30m"},
	    {{"mem", "1T", "wait", NULL, NULL}, "--mem 1T --wait"},
	    {{"wait", "2.5", NULL}, "--wait=2500ms"},
	    {{"wait", "0", NULL}, "--wait=0ms"},
	    {{"mem", "8G", "exclusive", NULL, "wait", "90", NULL}, "--wait=1m30s"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct gm_request *req = request(cases[i].opts), *back, *dup;
		char *text = gm_request_text(req), *again, *dup_text;

		assert_non_null(text);
		assert_string_equal(text, cases[i].text);
		back = from_text(text);
		again = gm_request_text(back);
		assert_string_equal(again, text);
		dup = gm_request_dup(req);
		gm_request_free(req); /* the copy owns its own lists */
		dup_text = gm_request_text(dup);
		assert_string_equal(dup_text, cases[i].text);
		gm_free(text);
		gm_free(again);
		gm_free(dup_text);
		gm_request_free(back);
		gm_request_free(dup);
	}
}

static void test_leases_json_lists_a_live_lease(void **state)
{
	static const char *const two[] = {"n", "2", NULL};
	struct gm_context *ctx;
	struct gm_request *req = request(two);
	struct gm_lease *lease = NULL;
	char err[GM_ERRBUF_SIZE] = "", *json = NULL, want[128];

	(void)state;
	assert_int_equal(gm_open(&ctx, err, sizeof err), GM_OK);
	assert_int_equal(gm_leases_json(&json, err, sizeof err), GM_OK);
	assert_string_equal(json, "{\"leases\":[],\"waiters\":[]}");
	gm_free(json);
	assert_int_equal(gm_acquire(ctx, req, &lease, err, sizeof err), GM_OK);
	assert_int_equal(gm_leases_json(&json, err, sizeof err), GM_OK);
	snprintf(want, sizeof want, "\"id\":\"%s\"", gm_lease_id(lease));
	assert_non_null(strstr(json, want));
	snprintf(want, sizeof want, "\"pid\":%d", (int)getpid());
	assert_non_null(strstr(json, want));
	assert_non_null(strstr(json, "\"uuid\":\"GPU-11111111-aaaa-bbbb-cccc-000000000001\""));
	gm_free(json);
	gm_lease_release(lease);
	assert_int_equal(gm_leases_json(&json, err, sizeof err), GM_OK);
	assert_string_equal(json, "{\"leases\":[],\"waiters\":[]}");
	gm_free(json);
	gm_request_free(req);
	gm_close(ctx);
}

struct waiter {
	struct gm_context *ctx;
	struct gm_request *req;
	enum gm_err rc;
};

static void *wait_in_thread(void *arg)
{
	struct waiter *w = arg;
	struct gm_lease *lease = NULL;
	char err[GM_ERRBUF_SIZE];

	w->rc = gm_acquire(w->ctx, w->req, &lease, err, sizeof err);
	gm_lease_release(lease);
	return NULL;
}

/* Tickets (wait.*) in the state directory: requests in line. */
static int tickets(void)
{
	char path[256];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof path, "%s/state", dir);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += !strncmp(de->d_name, "wait.", 5);
	closedir(d);
	return n;
}

/* What the Python binding does on Ctrl-C: cancel from another thread.  The
 * wait must end and leave no ticket to block later requests, every time. */
static void test_cancel_from_another_thread_leaves_no_ticket(void **state)
{
	static const char *const two[] = {"n", "2", "wait", NULL, NULL};
	struct gm_context *holder;
	struct gm_request *one = request(NULL);
	struct gm_lease *held;
	struct waiter w = {NULL, request(two), GM_OK};
	char err[GM_ERRBUF_SIZE] = "";

	(void)state;
	assert_int_equal(gm_open(&holder, err, sizeof err), GM_OK);
	assert_int_equal(gm_acquire(holder, one, &held, err, sizeof err), GM_OK);
	assert_int_equal(gm_open(&w.ctx, err, sizeof err), GM_OK);
	for (int i = 0; i < 20; i++) {
		pthread_t t;

		assert_int_equal(pthread_create(&t, NULL, wait_in_thread, &w), 0);
		while (tickets() == 0)
			usleep(1000);
		gm_cancel(w.ctx);
		assert_int_equal(pthread_join(t, NULL), 0);
		assert_int_equal(w.rc, GM_ERR_INTERRUPTED);
		assert_int_equal(tickets(), 0);
	}
	/* the cancel was consumed: a later request is served normally */
	gm_lease_release(held);
	w.rc = GM_ERR_IO;
	wait_in_thread(&w);
	assert_int_equal(w.rc, GM_OK);
	gm_request_free(w.req);
	gm_request_free(one);
	gm_close(w.ctx);
	gm_close(holder);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_version_macros_match_the_library),
	    cmocka_unit_test(test_snapshot_read_through_accessors),
	    cmocka_unit_test(test_json_is_freed_with_gm_free),
	    cmocka_unit_test(test_request_text_reads_back_as_the_same_request),
	    cmocka_unit_test(test_leases_json_lists_a_live_lease),
	    cmocka_unit_test(test_cancel_from_another_thread_leaves_no_ticket),
	};

	return cmocka_run_group_tests_name("api", tests, setup, teardown);
}
