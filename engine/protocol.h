/*
 * protocol.h - what a job's supervisors share: the engine (engine/), its
 * runner (runner/gpuman-runner.c) and `gpuman run`.  The one header of the
 * engine module that the runner and `run` include; the functions are in
 * engine/childenv.c and engine/jobtree.c, which need nothing but libc, so
 * that the static runner links them from libgmengine.a alone.
 *
 * The job's environment, as an owned list: set in the parent, handed whole
 * to the child at exec, so that nothing is ever set in gpuman's own
 * environment (git's child_process.env).
 */
#ifndef GM_PROTOCOL_H
#define GM_PROTOCOL_H

#include <stddef.h>
#include <sys/types.h>

struct child_env {
	char **vars;    /* "NAME=VALUE", NULL-terminated; owned */
	size_t count;
};
#define CHILD_ENV_INIT { NULL, 0 }

/* Start from a copy of environ.  Returns 0, -1 out of memory. */
int child_env_init(struct child_env *env);
/* Start from a block of NUL-separated NAME=VALUE strings (len bytes). */
int child_env_init_block(struct child_env *env, const char *block, size_t len);
/* Set NAME=VALUE; an existing NAME is replaced only if overwrite.
 * Returns 0, -1 out of memory. */
int child_env_set(struct child_env *env, const char *name, const char *value, int overwrite);
void child_env_release(struct child_env *env);

/* Tell frameworks that grab every GPU's memory to stay within a memory
 * share of this fraction of the GPU; values already set win. */
int child_env_framework(struct child_env *env, double fraction);

/*
 * A job dies whole: every process it started, not only the one
 * gpuman started, ends before its lease is released and its end recorded.
 *
 * The supervisor of a job (`gpuman run`, gpuman-runner) makes itself a
 * child subreaper, so that whatever the job leaves behind (a background
 * child, a double-forked daemon) becomes its child when its parent ends;
 * when the job's own process has ended it kills its remaining children, and
 * theirs as they are handed to it, until none is left.  The engine that
 * starts runners is a subreaper too: if a runner is killed (SIGKILL, the
 * OOM killer), the job's processes come to the engine, which kills them
 * before it records the job.
 */

/* Become a child subreaper.  Returns 0, -1 with errno. */
int jobtree_subreaper(void);

/*
 * SIGKILL every child of the caller except the nkeep pids in keep, and
 * every process handed to it meanwhile, until it has no other child; each
 * is reaped here (waitpid on its own pid, so a caller's waitpid(-1) loop
 * never sees them).  Returns how many were killed.
 */
unsigned jobtree_kill_children(const pid_t *keep, size_t nkeep);

/*
 * SIGKILL every process of ours but the caller that holds an open
 * descriptor of the file fd refers to (a job's run file, which all its
 * processes inherit) - for processes that no subreaper of ours received,
 * because their supervisor and its engine both died.  Returns how many
 * were signalled.
 */
unsigned jobtree_kill_holders(int fd);

/* Does process pid hold an open descriptor of the file fd refers to? */
int jobtree_holds(pid_t pid, int fd);

#endif
