/*
 * registry_holder.c - who holds a registry file: its owner's name, and
 * whether the process it names still runs as that owner, in our pid
 * namespace (registry_read.c believes a file only then).
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "proctree.h"
#include "util.h"
#include "registry_impl.h"

/* Names of the few users whose leases a reader meets, remembered: every
 * read of the registry names each lease's owner, and getpwuid_r reads
 * /etc/passwd each time (a dispatcher reads the registry per task). */
void registry_user_name(unsigned uid, char *out, size_t len)
{
	static _Thread_local struct {
		unsigned uid;
		int set;
		char name[33];
	} cache[4];
	static _Thread_local unsigned next;
	struct passwd pw, *res = NULL;
	char buf[1024];

	for (size_t i = 0; i < ARRAY_SIZE(cache); i++)
		if (cache[i].set && cache[i].uid == uid) {
			snprintf(out, len, "%s", cache[i].name);
			return;
		}
	if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
		snprintf(out, len, "%s", pw.pw_name);
	else
		snprintf(out, len, "%u", uid);
	cache[next].uid = uid;
	cache[next].set = 1;
	str_copy(cache[next].name, sizeof cache[next].name, out);
	next = (next + 1) % ARRAY_SIZE(cache);
}

/*
 * The pid namespace we live in (the inode of /proc/self/ns/pid), written in
 * every lease and ticket: a pid of another namespace (a container sharing
 * the state directory) cannot be looked up here, only trusted.
 */
json_int_t registry_own_pidns(void)
{
	static json_int_t ns = -1;
	struct stat st;

	if (ns < 0)
		ns = stat("/proc/self/ns/pid", &st) == 0 ? (json_int_t)st.st_ino : 0;
	return ns;
}

/* Whether pid's real or effective uid is uid, as its status says. */
static int uid_in_status(int pid, unsigned uid)
{
	char path[64], buf[2048], *p;
	unsigned ruid, euid;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/status", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return (p = strstr(buf, "\nUid:\t")) && sscanf(p + 6, "%u %u", &ruid, &euid) == 2 &&
	       (ruid == uid || euid == uid);
}

/*
 * Holders found running, remembered for a second: a waiter reads every
 * ticket ahead of it at each attempt, and /proc/PID/stat is most of the
 * cost.  A death is still seen at once (kill), a stop or a zombie within
 * HOLDER_CACHE_MS.
 */
#define HOLDER_CACHE_MS 1000

static _Thread_local struct {
	int pid;
	unsigned uid;
	unsigned long long start;
	int64_t at_ms;
} holder_cache[256];

/*
 * What the kernel says of process pid, which must belong to uid and, when
 * start is not 0, have started then (proctree_start): a pid the kernel gave
 * again to another process of the same user is not the holder.  A file's
 * lock proves only that somebody holds it (anyone who can read a file can
 * flock it); that its writer still lives is proved by the process itself.
 */
enum registry_holder registry_holder_state(int pid, unsigned uid, unsigned long long start,
                                           json_int_t pidns)
{
	char path[64], buf[512];
	const char *p;
	struct stat st;
	int state = 0, slot = pid & 255;
	int64_t now;

	if (pid <= 0)
		return REGISTRY_HOLDER_GONE;
	if (pidns != registry_own_pidns() || !registry_own_pidns())
		return REGISTRY_HOLDER_UNKNOWN;
	/* kill() sees through hidepid; ESRCH is final, EPERM means alive. */
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return REGISTRY_HOLDER_GONE;
	now = monotonic_ms();
	if (holder_cache[slot].pid == pid && holder_cache[slot].uid == uid &&
	    (!start || holder_cache[slot].start == start) &&
	    now - holder_cache[slot].at_ms < HOLDER_CACHE_MS)
		return REGISTRY_HOLDER_RUNNING;
	/* The owner of /proc/PID is the process's effective uid (root for one
	 * that is not dumpable: then its status says).  stat() is cheap, and
	 * every read of the registry looks at every holder. */
	snprintf(path, sizeof path, "/proc/%d", pid);
	if (stat(path, &st) < 0)
		return errno == ENOENT && kill(pid, 0) < 0 && errno == ESRCH
		           ? REGISTRY_HOLDER_GONE
		           : REGISTRY_HOLDER_UNKNOWN;
	if (st.st_uid != uid && !(st.st_uid == 0 && uid_in_status(pid, uid)))
		return REGISTRY_HOLDER_GONE;
	p = proctree_stat(pid, buf, sizeof buf);
	if (!p)
		return kill(pid, 0) < 0 && errno == ESRCH ? REGISTRY_HOLDER_GONE
		                                          : REGISTRY_HOLDER_UNKNOWN;
	state = p[0];
	if (!state || state == 'Z' || state == 'X' || state == 'x' ||
	    (start && proctree_start_of(p) != start))
		return REGISTRY_HOLDER_GONE;
	if (state == 'T' || state == 't')
		return REGISTRY_HOLDER_STOPPED;
	holder_cache[slot].pid = pid;
	holder_cache[slot].uid = uid;
	holder_cache[slot].start = start;
	holder_cache[slot].at_ms = now;
	return REGISTRY_HOLDER_RUNNING;
}

/* Is the holder of a ticket (pid of user uid, in our pid namespace) still
 * running -- neither gone nor stopped? */
int registry_holder_runs(int pid, unsigned uid)
{
	enum registry_holder h = registry_holder_state(pid, uid, 0, registry_own_pidns());

	return h != REGISTRY_HOLDER_GONE && h != REGISTRY_HOLDER_STOPPED;
}
