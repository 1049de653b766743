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
/* The same from a /proc/PID/stat kept open: it reads that process's, even
 * once the pid is given to another (then the read fails: NULL). */
const char *proctree_stat_fd(int fd, char *buf, size_t len);
/* The start time of pid (clock ticks since boot, field 22 of
 * /proc/PID/stat): with the pid it names one process, even after the pid
 * is reused.  0 if it cannot be read. */
unsigned long long proctree_start(int pid);
/* The start time in stat_fields, what proctree_stat returned. */
unsigned long long proctree_start_of(const char *stat_fields);
/* Is the process pid (started at start) on its way out: exiting (the
 * kernel's PF_EXITING, field 9), a zombie, or gone?  A process that closed
 * its last descriptor of a socket by exiting is, by the time the other end
 * hears of it. */
int proctree_exiting(int pid, unsigned long long start);
/* The parent of pid, from /proc/PID/stat; -1 if it cannot be read (gone,
 * or not ours to read).  Needs nothing else of the library: the runner
 * links it alone. */
int proctree_parent(int pid);
/* The command line of pid (0: this process), its arguments joined by
 * spaces (a newline in one becomes a space too), into out of len bytes;
 * the bytes kept, or -1 when it cannot be read (gone, or not ours): out is
 * then "".  The one reader of /proc/PID/cmdline. */
int proctree_command(int pid, char *out, size_t len);
/* Read every process's parent; an unreadable /proc gives an empty tree.
 * Returns 0, -1 on out-of-memory. */
int proctree_read(struct proctree *tree);
void proctree_release(struct proctree *tree);
/* Is pid root itself or one of its descendants? */
int proctree_within(const struct proctree *tree, int root, int pid);

#endif
