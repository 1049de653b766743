/*
 * test_protocol.c - what the engine, its runner and `gpuman run` share
 * (engine/protocol.c): the result line both ways, run-file paths, the go
 * byte and what may come before it, exit statuses, out-of-memory messages, a task line's
 * placeholders and the job's environment.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "protocol.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static void test_result_round_trip(void **state)
{
	static const struct protocol_result rows[] = {
	    {1, 1, 1700000000000LL, 1700000000123LL, 0, 0, PROTOCOL_STOP_NONE},
	    {42, 3, 5, 6, 137, 1, PROTOCOL_STOP_CANCELLED},
	    {9007199254740993LL, 2147483647, 0, 0, -1, 0, PROTOCOL_STOP_ABORTED},
	    {7, 1, 10, 20, 130, 0, PROTOCOL_STOP_INTERRUPTED},
	    {8, 1, 10, 20, 143, 0, PROTOCOL_STOP_TIMEOUT},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		char line[PROTOCOL_RESULT_ROOM + 1];
		struct protocol_result back;
		int n = protocol_result_format(&rows[i], line, sizeof line);

		assert_true(n > 0 && n <= PROTOCOL_RESULT_ROOM);
		assert_int_equal(line[n - 1], '\n');
		assert_int_equal(protocol_result_parse(line, &back), 0);
		assert_true(back.job == rows[i].job && back.attempt == rows[i].attempt &&
		            back.start_ms == rows[i].start_ms && back.end_ms == rows[i].end_ms &&
		            back.status == rows[i].status && back.oom == rows[i].oom &&
		            back.stop == rows[i].stop);
	}
}

static void test_result_rejects(void **state)
{
	static const char *const bad[] = {
	    "",
	    "\0\0\0\0", /* the room before a result */
	    "gpuman-run 1 job=1 attempt=1 start_ms=1 end_ms=2 status=0 oom=0 stop=none",
	    "gpuman-run 2 job=1 attempt=1 start_ms=1 end_ms=2 status=0 oom=0 stop=none\n",
	    "gpuman-run 1 job=1 attempt=1 start_ms=1 end_ms=2 status=0\n",
	    "job=1 attempt=1 start_ms=1 end_ms=2 status=0 oom=0 stop=none\n",
	};
	struct protocol_result r;

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(bad); i++)
		if (protocol_result_parse(bad[i], &r) == 0)
			fail_msg("accepted '%s'", bad[i]);
	/* an unknown stop name reads as none (a newer runner's) */
	assert_int_equal(protocol_result_parse("gpuman-run 1 job=1 attempt=1 start_ms=1 end_ms=2 "
	                                       "status=0 oom=0 stop=later\n",
	                                       &r),
	                 0);
	assert_int_equal(r.stop, PROTOCOL_STOP_NONE);
	assert_string_equal(protocol_stop_name(PROTOCOL_STOP_CANCELLED), "cancelled");
	assert_string_equal(protocol_stop_name((enum protocol_stop)99), "none");
	assert_string_equal(protocol_stop_name(PROTOCOL_STOP_TIMEOUT), "timeout");
}

static void test_format_limit(void **state)
{
	static const struct {
		long long secs;
		const char *text;
	} rows[] = {{0, "0s"},          {1, "1s"},        {90, "1m30s"},
	            {3600, "1h"},       {5400, "1h30m"},  {86400, "1d"},
	            {88205, "1d30m5s"}, {3599, "59m59s"}, {86399, "23h59m59s"}};
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		protocol_format_limit(rows[i].secs, buf, sizeof buf);
		assert_string_equal(buf, rows[i].text);
	}
}

static void test_run_path_and_go(void **state)
{
	char path[64];
	int fds[2];

	(void)state;
	protocol_run_path("/q/runs", 12, path, sizeof path);
	assert_string_equal(path, "/q/runs/slot-12.run");
	assert_int_equal(pipe(fds), 0);
	assert_int_equal(protocol_give_go(fds[1]), 0);
	assert_int_equal(protocol_await_go(fds[0]), 0);
	close(fds[1]); /* end of file: do not run */
	assert_int_equal(protocol_await_go(fds[0]), -1);
	close(fds[0]);
	assert_int_equal(pipe(fds), 0);
	assert_int_equal(write(fds[1], "x", 1), 1); /* anything else: do not run */
	assert_int_equal(protocol_await_go(fds[0]), -1);
	close(fds[0]);
	close(fds[1]);
}

/* A socket: the go, then strings before a go, to a reader alive or gone. */
static void test_strings_and_go_on_a_socket(void **state)
{
	char a[] = "--lease-id=1-2-ab", b[] = "", c[] = "--gpus=0,3";
	char *const sent[] = {a, b, c, NULL}, *const none[] = {NULL};
	char **got;
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(protocol_send_strings(sv[1], sent), 0);
	assert_int_equal(protocol_send_strings(sv[1], none), 0);
	assert_int_equal(protocol_give_go(sv[1]), 0);
	got = protocol_receive_strings(sv[0]);
	assert_non_null(got);
	assert_string_equal(got[0], "--lease-id=1-2-ab");
	assert_string_equal(got[1], "");
	assert_string_equal(got[2], "--gpus=0,3");
	assert_null(got[3]);
	free(got[0]);
	free(got);
	got = protocol_receive_strings(sv[0]);
	assert_non_null(got);
	assert_null(got[0]);
	free(got[0]);
	free(got);
	/* exactly their bytes were read: the go follows */
	assert_int_equal(protocol_await_go(sv[0]), 0);
	/* a count past its bytes, then a cut-off list: refused */
	{
		uint32_t head[2] = {3, 2};

		assert_int_equal(write(sv[1], head, sizeof head), (ssize_t)sizeof head);
		assert_null(protocol_receive_strings(sv[0]));
		head[0] = 1;
		head[1] = 10;
		assert_int_equal(write(sv[1], head, sizeof head), (ssize_t)sizeof head);
		assert_int_equal(write(sv[1], "abc", 3), 3);
		close(sv[1]);
		assert_null(protocol_receive_strings(sv[0]));
	}
	close(sv[0]);
	/* the reader died: a failure, not SIGPIPE (this test would die) */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	close(sv[0]);
	assert_int_equal(protocol_give_go(sv[1]), -1);
	assert_int_equal(protocol_send_strings(sv[1], sent), -1);
	close(sv[1]);
}

static void test_exit_status(void **state)
{
	static const struct {
		int wait_status, status;
		const char *text;
	} rows[] = {
	    {0, 0, "exit status 0"},
	    {3 << 8, 3, "exit status 3"},
	    {127 << 8, 127, "exit status 127 (command not found?)"},
	    {9, 137, "killed by signal 9 (Killed)"},
	    {15, 143, "killed by signal 15 (Terminated)"},
	    {255 << 8, 255, "exit status 255"},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		char buf[64];
		int st = protocol_exit_status(rows[i].wait_status);

		assert_int_equal(st, rows[i].status);
		protocol_describe_status(st, buf, sizeof buf);
		assert_string_equal(buf, rows[i].text);
	}
}

static void test_says_oom(void **state)
{
	static const struct {
		const char *text;
		int oom;
	} rows[] = {
	    {"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", 1},
	    {"RuntimeError: CUDA error: out of memory", 1},
	    {"CUDA_ERROR_OUT_OF_MEMORY", 1},
	    {"cuda_error_out_of_memory", 1},
	    {"cudaErrorMemoryAllocation: out of memory", 1},
	    {"RESOURCE_EXHAUSTED: Out Of Memory while trying to allocate", 1},
	    {"Segmentation fault", 0},
	    {"memory usage: 3 GiB of 24 GiB", 0},
	    {"", 0},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(rows); i++)
		if (protocol_says_oom(rows[i].text) != rows[i].oom)
			fail_msg("'%s': not %d", rows[i].text, rows[i].oom);
}

static void test_substitute(void **state)
{
	static const struct {
		const char *line, *gpus, *uuids, *out;
	} rows[] = {
	    {"train --gpu {gpu} --shot {task}", "1,7", "GPU-a,GPU-b", "train --gpu 1,7 --shot 12"},
	    {"x {uuid}{uuid} {task}{task}", "0", "GPU-a", "x GPU-aGPU-a 1212"},
	    {"as read before it runs: {gpu} {uuid} {task}", NULL, NULL,
	     "as read before it runs: {gpu} {uuid} 12"},
	    {"a step fills in {gpu} itself", NULL, NULL, "a step fills in {gpu} itself"},
	    {"{gp} {task {TASK} {}", "3", "U", "{gp} {task {TASK} {}"},
	    {"", "3", "U", ""},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		char *out = protocol_substitute(rows[i].line, rows[i].gpus, rows[i].uuids, 12);

		assert_non_null(out);
		assert_string_equal(out, rows[i].out);
		free(out);
	}
}

static const char *var(const struct child_env *env, const char *name)
{
	size_t l = strlen(name);

	for (size_t i = 0; i < env->count; i++)
		if (!strncmp(env->vars[i], name, l) && env->vars[i][l] == '=')
			return env->vars[i] + l + 1;
	return NULL;
}

static void test_job_env(void **state)
{
	static const char block[] =
	    "PATH=/bin\0CUDA_VISIBLE_DEVICES=0,1\0XLA_CLIENT_MEM_FRACTION=0.9\0";
	struct child_env env = CHILD_ENV_INIT;
	struct protocol_job job = {
	    "GPU-aaaa,GPU-bbbb", "2,5", "lease-1", "GPUMAN_TASK", 17, 1, 0.25, 0};
	struct protocol_job cpu = {.cuda_visible = "", .gpus = ""};

	(void)state;
	assert_int_equal(child_env_init_block(&env, block, sizeof block - 1), 0);
	assert_int_equal(protocol_job_env(&env, &job), 0);
	assert_string_equal(var(&env, "CUDA_VISIBLE_DEVICES"), "GPU-aaaa,GPU-bbbb");
	assert_string_equal(var(&env, "GPUMAN_GPUS"), "2,5");
	assert_string_equal(var(&env, "GPUMAN_LEASE"), "lease-1");
	assert_string_equal(var(&env, "GPUMAN_TASK"), "17");
	assert_null(var(&env, "GPUMAN_JOB"));
	assert_string_equal(var(&env, "TF_FORCE_GPU_ALLOW_GROWTH"), "true");
	/* the user's own setting wins */
	assert_string_equal(var(&env, "XLA_CLIENT_MEM_FRACTION"), "0.9");
	assert_string_equal(var(&env, "XLA_PYTHON_CLIENT_MEM_FRACTION"), "0.250");
	child_env_release(&env);

	/* exclusive, or --no-framework-env: no framework variables */
	assert_int_equal(child_env_init_block(&env, block, sizeof block - 1), 0);
	job.no_framework_env = 1;
	assert_int_equal(protocol_job_env(&env, &job), 0);
	assert_null(var(&env, "TF_FORCE_GPU_ALLOW_GROWTH"));
	child_env_release(&env);

	/* on the CPU: no GPU, no lease */
	assert_int_equal(child_env_init_block(&env, block, sizeof block - 1), 0);
	assert_int_equal(protocol_job_env(&env, &cpu), 0);
	assert_string_equal(var(&env, "CUDA_VISIBLE_DEVICES"), "");
	assert_string_equal(var(&env, "GPUMAN_GPUS"), "");
	assert_null(var(&env, "GPUMAN_LEASE"));
	child_env_release(&env);
}

/* A line for /bin/sh -c, checked when given: what the shell would choke
 * on or run as garbage is refused; what the shell itself uses is not. */
static void test_check_line(void **state)
{
	const char *const none[] = {NULL}, *const array[] = {"task", NULL};
	const char *const *all = protocol_placeholders;
	char err[256];

	(void)state;
#define OK(line, known)                                                                            \
	assert_int_equal(protocol_check_line(line, strlen(line), known, err, sizeof err), 0)
#define BAD(line, known, says)                                                                     \
	do {                                                                                       \
		assert_int_equal(protocol_check_line(line, strlen(line), known, err, sizeof err),  \
		                 -1);                                                              \
		assert_non_null(strstr(err, says));                                                \
	} while (0)
	OK("echo {gpu} {uuid} {task}", all);
	OK("awk '{print $1}' f; echo ${HOME} \"${gpus}\"; find . -exec rm {} \\;", all);
	OK("echo 'it''s' \"a \\\" b\" `date`", none);
	BAD("echo 'open", all, "single quote opened at column 6");
	BAD("echo \"open", all, "double quote opened at column 6");
	BAD("echo `date", all, "backquote");
	BAD("echo a\\", all, "backslash ends the line");
	BAD("echo {gpus}", all, "unknown placeholder '{gpus}' (did you mean '{gpu}'?)");
	BAD("echo '{Task}'", all, "'{Task}' (did you mean '{task}'?)");
	BAD("echo {GPU}", all, "did you mean '{gpu}'?");
	BAD("echo {gpu}", array, "'{gpu}' is not filled in here");
	OK("echo {task}", array);
	BAD("echo {task}", none, "'{task}' is not filled in here");
	BAD("echo \x01", all, "control byte 0x01 at column 6");
	assert_int_equal(protocol_check_line("a\0b", 3, all, err, sizeof err), -1);
	assert_non_null(strstr(err, "NUL byte at column 2"));
#undef OK
#undef BAD
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_result_round_trip),
	    cmocka_unit_test(test_result_rejects),
	    cmocka_unit_test(test_format_limit),
	    cmocka_unit_test(test_run_path_and_go),
	    cmocka_unit_test(test_exit_status),
	    cmocka_unit_test(test_says_oom),
	    cmocka_unit_test(test_substitute),
	    cmocka_unit_test(test_job_env),
	    cmocka_unit_test(test_check_line),
	    cmocka_unit_test(test_strings_and_go_on_a_socket),
	};

	return cmocka_run_group_tests_name("protocol", tests, NULL, NULL);
}
