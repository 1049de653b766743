/*
 * test_proctree.c - the process tree from /proc: a parent read through a
 * command name that mimics the stat line, the tree's descendants, and the
 * answer for a process that is gone.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parent_through_tricky_name),
	    cmocka_unit_test(test_tree_within),
	};

	return cmocka_run_group_tests_name("proctree", tests, NULL, NULL);
}
