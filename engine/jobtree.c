/*
 * jobtree.c - end a job's whole process tree (see protocol.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "proctree.h"
#include "protocol.h"

int jobtree_subreaper(void)
{
	return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

static int kept(pid_t pid, const pid_t *keep, size_t nkeep)
{
	for (size_t i = 0; i < nkeep; i++)
		if (keep[i] == pid)
			return 1;
	return 0;
}

/* Kill the children listed in one /proc/.../children file (space
 * separated); what does not fit the buffer is found in the next round. */
static unsigned kill_listed(const char *path, const pid_t *keep, size_t nkeep, pid_t *killed,
                            size_t cap, size_t *n)
{
	static char buf[65536];
	unsigned count = 0;
	size_t len = 0;
	ssize_t got;
	char *p = buf, *end;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	while (len < sizeof buf - 1 && (got = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
		len += (size_t)got;
	close(fd);
	buf[len] = '\0';
	if (len == sizeof buf - 1 && (end = strrchr(buf, ' '))) /* the last pid may be cut */
		*end = '\0';
	for (long v = strtol(p, &end, 10); end != p; v = strtol(p, &end, 10)) {
		p = end;
		if (v <= 0 || kept((pid_t)v, keep, nkeep) || *n >= cap)
			continue;
		kill((pid_t)v, SIGKILL);
		killed[(*n)++] = (pid_t)v;
		count++;
	}
	return count;
}

/* Children by /proc/PID/stat (kernels without the children files). */
static unsigned kill_by_stat(const pid_t *keep, size_t nkeep, pid_t *killed, size_t cap, size_t *n)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	unsigned count = 0;
	pid_t self = getpid();

	if (!d)
		return 0;
	while ((de = readdir(d)) && *n < cap) {
		char *rp;
		long pid = strtol(de->d_name, &rp, 10);

		if (*rp || pid <= 0 || proctree_parent((int)pid) != (int)self ||
		    kept((pid_t)pid, keep, nkeep))
			continue;
		kill((pid_t)pid, SIGKILL);
		killed[(*n)++] = (pid_t)pid;
		count++;
	}
	closedir(d);
	return count;
}

unsigned jobtree_kill_children(const pid_t *keep, size_t nkeep)
{
	enum { CAP = 1024 };
	pid_t killed[CAP];
	unsigned total = 0;
	char path[300];
	int have_children_file;

	snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
	have_children_file = access(path, R_OK) == 0;
	for (;;) {
		size_t n = 0;
		unsigned found = 0;

		if (have_children_file) {
			/* Orphans are handed to any thread of the subreaper. */
			DIR *d = opendir("/proc/self/task");
			struct dirent *de;

			while (d && (de = readdir(d)))
				if (de->d_name[0] != '.') {
					snprintf(path, sizeof path, "/proc/self/task/%s/children",
					         de->d_name);
					found += kill_listed(path, keep, nkeep, killed, CAP, &n);
				}
			if (d)
				closedir(d);
		} else {
			found = kill_by_stat(keep, nkeep, killed, CAP, &n);
		}
		if (!found)
			break;
		/* A killed child's own children are ours once it is gone: reap
		 * it, then look again. */
		for (size_t i = 0; i < n; i++)
			while (waitpid(killed[i], NULL, __WALL) < 0 && errno == EINTR)
				;
		total += found;
	}
	return total;
}

int jobtree_holds(pid_t pid, int fd)
{
	struct stat want, st;
	char dir[64], path[64 + 256 + 1];
	struct dirent *de;
	DIR *d;
	int holds = 0;

	if (fstat(fd, &want) < 0)
		return 0;
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	while (d && !holds && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		holds =
		    stat(path, &st) == 0 && st.st_dev == want.st_dev && st.st_ino == want.st_ino;
	}
	if (d)
		closedir(d);
	return holds;
}

unsigned jobtree_kill_holders(int fd)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	unsigned count = 0;
	pid_t self = getpid();
	uid_t me = geteuid();

	while (d && (de = readdir(d))) {
		char *end, path[64];
		long pid = strtol(de->d_name, &end, 10);
		struct stat st;

		if (*end || pid <= 0 || pid == self)
			continue;
		snprintf(path, sizeof path, "/proc/%ld", pid);
		/* Only our own processes: their descriptors are all we may read. */
		if (stat(path, &st) < 0 || (me != 0 && st.st_uid != me))
			continue;
		if (jobtree_holds((pid_t)pid, fd) && kill((pid_t)pid, SIGKILL) == 0)
			count++;
	}
	if (d)
		closedir(d);
	return count;
}
