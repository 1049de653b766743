/*
 * proctree.h - the machine's process tree from /proc, to tell which GPU
 * processes belong to a job (the job's pid and its descendants).
 */
#ifndef GM_PROCTREE_H
#define GM_PROCTREE_H

#include <stddef.h>

struct proctree {
	size_t count;
	struct proctree_entry {
		int pid, ppid;
	} * entries; /* sorted by pid */
};
#define PROCTREE_INIT                                                                              \
	{                                                                                          \
		0, NULL                                                                            \
	}

/* /proc/PID/stat read into buf (len bytes): the fields after the command
 * name, from the state (field 3) on, space-separated; NULL if it cannot be
 * read (gone, or not ours to read).  The one parser of that line, whose
 * command name may hold anything, ')' and spaces too. */
const char *proctree_stat(int pid, char *buf, size_t len);
/* The parent of pid, from /proc/PID/stat; -1 if it cannot be read (gone,
 * or not ours to read).  Needs nothing else of the library: the runner
 * links it alone. */
int proctree_parent(int pid);
/* Read every process's parent; an unreadable /proc gives an empty tree.
 * Returns 0, -1 on out-of-memory. */
int proctree_read(struct proctree *tree);
void proctree_release(struct proctree *tree);
/* Is pid root itself or one of its descendants? */
int proctree_within(const struct proctree *tree, int root, int pid);

#endif
