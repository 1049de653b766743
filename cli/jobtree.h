/*
 * jobtree.h - a job dies whole: every process it started, not only the one
 * gpuman started, ends before its lease is released and its end recorded.
 *
 * The supervisor of a job (`gpuman run`, gpuman-runner) makes itself a
 * child subreaper, so that whatever the job leaves behind (a background
 * child, a double-forked daemon) becomes its child when its parent ends;
 * when the job's own process has ended it kills its remaining children, and
 * theirs as they are handed to it, until none is left.  The engine that
 * starts runners is a subreaper too: if a runner is killed (SIGKILL, the
 * OOM killer), the job's processes come to the engine, which kills them
 * before it records the job.  Shared by the gpuman command and the static
 * runner.
 */
#ifndef GM_JOBTREE_H
#define GM_JOBTREE_H

#include <sys/types.h>

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
