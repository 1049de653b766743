/*
 * test_registry.c - leases through the public API on the NVML simulator:
 * a lease dies with its holder, a second request is refused while the GPU
 * is held, and gm_cancel() (from a signal handler) ends a wait at once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "gpuman.h"
#include "sim_machine.h"

static char dir[] = "/tmp/gm-test-registry.XXXXXX";
static struct gm_context *cancel_ctx;

static int setup(void **state)
{
	(void)state;
	return sim_machine_setup(
	    dir, "{ \"gpus\": [ { \"name\": \"only\", \"memory_total_mib\": 8000 } ] }\n");
}

static enum gm_err try_acquire(struct gm_context *ctx, const char *wait, struct gm_lease **lease)
{
	struct gm_request *req = gm_request_new();
	char err[GM_ERRBUF_SIZE];
	enum gm_err rc;

	if (wait)
		assert_int_equal(gm_request_set(req, "wait", wait, err, sizeof err), GM_OK);
	rc = gm_acquire(ctx, req, lease, err, sizeof err);
	gm_request_free(req);
	return rc;
}

/* A child takes the only GPU and holds it until killed; returns its pid. */
static pid_t hold_in_child(void)
{
	int p[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		struct gm_context *ctx;
		struct gm_lease *lease;
		char err[GM_ERRBUF_SIZE];

		if (gm_open(&ctx, err, sizeof err) != GM_OK ||
		    try_acquire(ctx, NULL, &lease) != GM_OK)
			_exit(1);
		if (write(p[1], "h", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	close(p[1]);
	return pid;
}

static void test_lease_dies_with_its_holder(void **state)
{
	struct gm_context *ctx;
	struct gm_lease *lease = NULL;
	char err[GM_ERRBUF_SIZE];
	pid_t holder;

	(void)state;
	assert_int_equal(gm_open(&ctx, err, sizeof err), GM_OK);
	holder = hold_in_child();
	assert_int_equal(try_acquire(ctx, NULL, &lease), GM_ERR_UNAVAILABLE);
	assert_null(lease);
	kill(holder, SIGKILL);
	waitpid(holder, NULL, 0);
	/* no stale lease: the kernel dropped the holder's lock */
	assert_int_equal(try_acquire(ctx, NULL, &lease), GM_OK);
	assert_int_equal(gm_lease_gpu_count(lease), 1);
	assert_int_equal(gm_lease_gpu_index(lease, 0), 0);
	assert_true(strncmp(gm_lease_cuda_visible(lease), "GPU-", 4) == 0);
	gm_lease_release(lease);
	gm_close(ctx);
}

static void on_alarm(int sig)
{
	(void)sig;
	gm_cancel(cancel_ctx);
}

static void test_cancel_ends_a_wait(void **state)
{
	struct gm_lease *lease = NULL;
	char err[GM_ERRBUF_SIZE];
	struct timespec a, b;
	pid_t holder;

	(void)state;
	assert_int_equal(gm_open(&cancel_ctx, err, sizeof err), GM_OK);
	holder = hold_in_child();
	signal(SIGALRM, on_alarm);
	alarm(1);
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(try_acquire(cancel_ctx, "", &lease), GM_ERR_INTERRUPTED);
	clock_gettime(CLOCK_MONOTONIC, &b);
	/* cancelled after ~1 s, not left waiting forever */
	assert_true(b.tv_sec - a.tv_sec < 5);
	assert_null(lease);
	/* the cancel was consumed: the next wait waits (and times out) */
	assert_int_equal(try_acquire(cancel_ctx, "0.2s", &lease), GM_ERR_TIMEOUT);
	kill(holder, SIGKILL);
	waitpid(holder, NULL, 0);
	assert_int_equal(try_acquire(cancel_ctx, "5s", &lease), GM_OK);
	gm_lease_release(lease);
	gm_close(cancel_ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lease_dies_with_its_holder),
	    cmocka_unit_test(test_cancel_ends_a_wait),
	};

	return cmocka_run_group_tests_name("registry", tests, setup, NULL);
}
