/*
 * test_proctree.c - the process tree from /proc: a parent read through a
 * command name that mimics the stat line, the tree's descendants, a
 * command line, and the answer for a process that is gone.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "proctree.h"

/* A child whose command name is "x) R 1 (y" (parsing from the first ')'
 * would read state R and parent 1), stopped once it has taken the name. */
static pid_t tricky_child(void)
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		/* dies with the test, even one that fails before killing it */
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		prctl(PR_SET_NAME, "x) R 1 (y", 0, 0, 0);
		raise(SIGSTOP);
		_exit(0);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, WUNTRACED), pid);
	assert_true(WIFSTOPPED(status));
	return pid;
}

static void test_parent_through_tricky_name(void **s)
{
	pid_t child = tricky_child();

	(void)s;
	assert_int_equal(proctree_parent((int)getpid()), (int)getppid());
	assert_int_equal(proctree_parent((int)child), (int)getpid());
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	assert_int_equal(proctree_parent((int)child), -1); /* reaped: gone */
}

static void test_tree_within(void **s)
{
	pid_t child = tricky_child();
	struct proctree tree;

	(void)s;
	assert_int_equal(proctree_read(&tree), 0);
	assert_true(tree.count > 1);
	assert_true(proctree_within(&tree, (int)getpid(), (int)child));
	assert_true(proctree_within(&tree, (int)getpid(), (int)getpid()));
	assert_false(proctree_within(&tree, (int)child, (int)getpid()));
	proctree_release(&tree);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* Has pid's /proc/PID/cmdline any bytes yet? */
static int cmdline_ready(pid_t pid)
{
	char path[64], c;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, &c, 1);
	close(fd);
	return n > 0;
}

/* A child that has exec'd: this program again, as "holder" "two words"
 * "a<newline>b", which waits to be killed (main).  Not sleep: it takes
 * every argument for a time and exits at once on "two words". */
static pid_t exec_child(void)
{
	int fds[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		close(fds[0]);
		fcntl(fds[1], F_SETFD, FD_CLOEXEC); /* closed by the exec */
		execl("/proc/self/exe", "holder", "two words", "a\nb", (char *)NULL);
		_exit(127);
	}
	assert_true(pid > 0);
	close(fds[1]);
	assert_int_equal(read(fds[0], &c, 1), 0); /* EOF: it is exec'ing */
	close(fds[0]);
	/* The kernel closes the pipe before it lays out the new program's
	 * arguments: until then /proc/PID/cmdline is empty (CI once read it
	 * there).  Wait for them, 2 s at most. */
	for (int i = 0; i < 200 && !cmdline_ready(pid); i++)
		usleep(10000);
	return pid;
}

static void test_command(void **s)
{
	char out[64], small[9];
	pid_t child;

	(void)s;
	child = exec_child();
	assert_int_equal(proctree_command((int)child, out, sizeof out), 20);
	assert_string_equal(out, "holder two words a b");
	/* cut to its room, still terminated */
	assert_int_equal(proctree_command((int)child, small, sizeof small), 8);
	assert_string_equal(small, "holder t");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	assert_int_equal(proctree_command((int)child, out, sizeof out), -1); /* gone */
	assert_string_equal(out, "");
	/* 0: this process */
	assert_true(proctree_command(0, out, sizeof out) > 0);
	assert_non_null(strstr(out, "proctree"));
}

/* Alive, a zombie, reaped, or another process under the pid. */
static void test_exiting(void **s)
{
	unsigned long long me = proctree_start(getpid()), start;
	int fds[2];
	char c;
	pid_t child;

	(void)s;
	assert_int_equal(proctree_exiting(getpid(), me), 0);
	assert_int_equal(proctree_exiting(getpid(), me + 1), 1); /* not this one */
	assert_int_equal(pipe(fds), 0);
	child = fork();
	if (child == 0) {
		close(fds[0]);
		_exit(0); /* the pipe closes as it exits */
	}
	close(fds[1]);
	start = proctree_start((int)child);
	assert_int_equal(read(fds[0], &c, 1), 0); /* it is on its way out */
	close(fds[0]);
	assert_int_equal(proctree_exiting((int)child, start), 1);
	waitpid(child, NULL, 0);
	assert_int_equal(proctree_exiting((int)child, start), 1); /* gone */
}

int main(int argc, char **argv)
{
	/* exec_child's holder: wait for the SIGKILL */
	if (argc == 3 && !strcmp(argv[1], "two words")) {
		for (;;)
			pause();
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parent_through_tricky_name),
	    cmocka_unit_test(test_tree_within),
	    cmocka_unit_test(test_command),
	    cmocka_unit_test(test_exiting),
	};

	return cmocka_run_group_tests_name("proctree", tests, NULL, NULL);
}
