/*
 * proctree.c - the machine's process tree from /proc.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "proctree.h"

static int entry_cmp(const void *a, const void *b)
{
	const struct proctree_entry *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

const char *proctree_stat(int pid, char *buf, size_t len)
{
	char path[64];
	const char *p;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	p = proctree_stat_fd(fd, buf, len);
	close(fd);
	return p;
}

const char *proctree_stat_fd(int fd, char *buf, size_t len)
{
	ssize_t got = pread(fd, buf, len - 1, 0);
	char *close_paren;

	if (got <= 0)
		return NULL;
	buf[got] = '\0';
	/* The command name may hold spaces and parentheses: the state and the
	 * fields after it follow the last ')'. */
	close_paren = strrchr(buf, ')');
	return close_paren && close_paren[1] == ' ' ? close_paren + 2 : NULL;
}

unsigned long long proctree_start_of(const char *p)
{
	/* p is at the state, field 3; the start time is field 22 */
	for (int field = 3; p && field < 22; field++)
		if ((p = strchr(p, ' ')))
			p++;
	return p ? strtoull(p, NULL, 10) : 0;
}

unsigned long long proctree_start(int pid)
{
	char buf[1024];

	return proctree_start_of(proctree_stat(pid, buf, sizeof buf));
}

#define PF_EXITING_ 0x00000004u /* include/linux/sched.h's PF_EXITING */

int proctree_exiting(int pid, unsigned long long start)
{
	char buf[1024], state;
	const char *fields = proctree_stat(pid, buf, sizeof buf);
	unsigned flags;

	if (!fields || proctree_start_of(fields) != start ||
	    sscanf(fields, "%c %*d %*d %*d %*d %*d %u", &state, &flags) != 2)
		return 1;
	return state == 'Z' || state == 'X' || (flags & PF_EXITING_);
}

int proctree_parent(int pid)
{
	char buf[512];
	const char *fields = proctree_stat(pid, buf, sizeof buf);
	int ppid;

	if (!fields || sscanf(fields, "%*c %d", &ppid) != 1)
		return -1;
	return ppid;
}

int proctree_command(int pid, char *out, size_t len)
{
	char path[64];
	ssize_t n = -1;
	int fd;

	if (!len)
		return -1;
	if (pid > 0)
		snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
	else
		snprintf(path, sizeof path, "/proc/self/cmdline");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, out, len - 1);
		close(fd);
	}
	if (n < 0) {
		out[0] = '\0';
		return -1;
	}
	/* Arguments are NUL-separated; a trailing NUL ends the last one. */
	while (n > 0 && out[n - 1] == '\0')
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (out[i] == '\0' || out[i] == '\n')
			out[i] = ' ';
	out[n] = '\0';
	return (int)n;
}

int proctree_read(struct proctree *tree)
{
	size_t cap = 0;
	struct dirent *de;
	DIR *d = opendir("/proc");

	*tree = (struct proctree)PROCTREE_INIT;
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		int pid = atoi(de->d_name), ppid;

		if (pid <= 0 || (ppid = proctree_parent(pid)) < 0)
			continue;
		if (tree->count == cap) {
			size_t ncap = cap ? cap * 2 : 256;
			struct proctree_entry *grown = realloc(tree->entries, ncap * sizeof *grown);

			if (!grown) {
				closedir(d);
				proctree_release(tree);
				return -1;
			}
			tree->entries = grown;
			cap = ncap;
		}
		tree->entries[tree->count].pid = pid;
		tree->entries[tree->count].ppid = ppid;
		tree->count++;
	}
	closedir(d);
	if (tree->count)
		qsort(tree->entries, tree->count, sizeof *tree->entries, entry_cmp);
	return 0;
}

void proctree_release(struct proctree *tree)
{
	free(tree->entries);
	*tree = (struct proctree)PROCTREE_INIT;
}

int proctree_within(const struct proctree *tree, int root, int pid)
{
	/* Walk up from pid; the depth bound guards against a torn read. */
	for (int depth = 0; depth < 128 && pid > 0; depth++) {
		struct proctree_entry key = {pid, 0}, *e;

		if (pid == root)
			return 1;
		if (!tree->count)
			return 0;
		e = bsearch(&key, tree->entries, tree->count, sizeof key, entry_cmp);
		if (!e || e->ppid == pid)
			return 0;
		pid = e->ppid;
	}
	return 0;
}
