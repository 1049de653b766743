/*
 * simstate.c - the live-process directory shared by gpuman-simload and the
 * NVML simulator (see simstate.h for the layout and the calling sequence).
 *
 * Readers take no lock: entries appear by rename() and vanish by unlink(),
 * both atomic, and an entry's name carries its process's start time, so
 * unlinking the entry of a dead process can never remove the entry of a new
 * process that reused the pid.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include "simstate.h"

#define ENTRY_MAX_BYTES 16384

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

/* Open dir without following a final symlink; a default directory (under a
 * world-writable /tmp) must be ours and closed to others, or anybody could
 * feed us fake processes.  Returns NULL with errno set. */
static DIR *open_dir(const char *dir, int is_default, char *err, size_t errlen)
{
	struct stat sb = {0};
	DIR *dirp;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (is_default ? O_NOFOLLOW : 0));

	if (fd < 0) {
		set_err(err, errlen, "cannot open the simulator's state directory '%s': %s", dir,
		        strerror(errno));
		return NULL;
	}
	if (is_default && (fstat(fd, &sb) < 0 || sb.st_uid != getuid() || (sb.st_mode & 077))) {
		set_err(err, errlen,
		        "the simulator's state directory '%s' is not private to you (owner uid "
		        "%u, mode %03o): remove it or set GPUMAN_SIM_STATE",
		        dir, (unsigned)sb.st_uid, (unsigned)sb.st_mode & 0777);
		close(fd);
		errno = EPERM;
		return NULL;
	}
	dirp = fdopendir(fd);
	if (!dirp) {
		set_err(err, errlen, "cannot read the simulator's state directory '%s': %s", dir,
		        strerror(errno));
		close(fd);
	}
	return dirp;
}

static int is_default_dir(void)
{
	const char *env = getenv("GPUMAN_SIM_STATE");

	return !env || !*env;
}

int simstate_open(struct simstate *st, const char *scenario_realpath, int create, char *err,
                  size_t errlen)
{
	const char *env = getenv("GPUMAN_SIM_STATE"), *tmp = getenv("TMPDIR");
	int n;

	if (!is_default_dir())
		n = snprintf(st->dir, sizeof st->dir, "%s", env);
	else
		n = snprintf(st->dir, sizeof st->dir, "%s/gpuman-sim-%u-%016" PRIx64,
		             tmp && *tmp ? tmp : "/tmp", (unsigned)getuid(),
		             fnv1a(scenario_realpath));
	if (n < 0 || (size_t)n >= sizeof st->dir) {
		set_err(err, errlen, "the simulator's state directory path is too long");
		return -1;
	}
	if (create && mkdir(st->dir, 0700) < 0 && errno != EEXIST) {
		set_err(err, errlen, "cannot create the simulator's state directory '%s': %s",
		        st->dir, strerror(errno));
		return -1;
	}
	st->dirp = open_dir(st->dir, is_default_dir(), err, errlen);
	if (!st->dirp && (create || errno != ENOENT))
		return -1;
	if (err && errlen)
		err[0] = '\0';
	return 0;
}

void simstate_close(struct simstate *st)
{
	simstate_unlock(st);
	if (st->dirp)
		closedir(st->dirp);
	st->dirp = NULL;
}

int simstate_start_time(unsigned pid, unsigned long long *start)
{
	char path[32], buf[1024], *p, *end;
	ssize_t n;
	int fd, field, ret = -1;

	snprintf(path, sizeof path, "/proc/%u/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* The command name (field 2) may hold blanks and parentheses: the fields
	 * we need come after its last ')'.  A zombie has finished its work. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
		goto done;
	p += 2;
	for (field = 3; field < 22 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (!p)
		goto done;
	errno = 0;
	*start = strtoull(p, &end, 10);
	if (end != p && !errno)
		ret = 0;
done:
	return ret;
}

/* Append the lines of one entry file to live. */
static int read_entry(struct simstate *st, const char *name, unsigned pid,
                      struct simstate_live *live)
{
	char buf[ENTRY_MAX_BYTES], *line, *next;
	struct simstate_use use;
	ssize_t n;
	int fd = openat(dirfd(st->dirp), name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return 0; /* it finished since readdir */
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	for (line = buf; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		memset(&use, 0, sizeof use);
		use.pid = pid;
		if (sscanf(line, "%95s %" SCNu64 " %u", use.uuid, &use.used_mib,
		           &use.utilization) != 3)
			continue;
		if (live->count == live->alloc) {
			size_t alloc = live->alloc ? live->alloc * 2 : 16;
			struct simstate_use *uses = realloc(live->uses, alloc * sizeof *uses);

			if (!uses)
				return -1;
			live->uses = uses;
			live->alloc = alloc;
		}
		live->uses[live->count++] = use;
	}
	return 0;
}

int simstate_read(struct simstate *st, struct simstate_live *live)
{
	struct dirent *de;
	unsigned long long start, now_start;
	unsigned pid;
	char ext[8];
	int n;

	live->count = 0;
	if (!st->dirp && st->dir[0])
		st->dirp = open_dir(st->dir, is_default_dir(), NULL, 0);
	if (!st->dirp)
		return 0;
	/* rewinddir makes the next readdir read the directory afresh. */
	rewinddir(st->dirp);
	while ((de = readdir(st->dirp))) {
		n = -1;
		if (sscanf(de->d_name, "%u-%llu.%7[a-z]%n", &pid, &start, ext, &n) != 3 ||
		    de->d_name[n] || (strcmp(ext, "live") && strcmp(ext, "tmp")))
			continue;
		if (simstate_start_time(pid, &now_start) < 0 || now_start != start) {
			unlinkat(dirfd(st->dirp), de->d_name, 0); /* best effort */
			continue;
		}
		if (!strcmp(ext, "live") && read_entry(st, de->d_name, pid, live) < 0) {
			live->count = 0;
			return -1;
		}
	}
	return 0;
}

void simstate_live_release(struct simstate_live *live)
{
	free(live->uses);
	live->uses = NULL;
	live->count = live->alloc = 0;
}

int simstate_lock(struct simstate *st, char *err, size_t errlen)
{
	int fd = -1, ret = -1;

	if (st->lock_fd >= 0)
		return 0;
	if (!st->dirp) {
		set_err(err, errlen, "cannot lock '%s': no state directory", st->dir);
		goto done;
	}
	/* Read-only is enough for flock, and lets the other users of a shared
	 * GPUMAN_SIM_STATE lock the file that the first one created. */
	fd = openat(dirfd(st->dirp), "lock", O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		set_err(err, errlen, "cannot open '%s/lock': %s", st->dir, strerror(errno));
		goto done;
	}
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			set_err(err, errlen, "cannot lock '%s/lock': %s", st->dir, strerror(errno));
			goto done;
		}
	}
	st->lock_fd = fd;
	fd = -1;
	ret = 0;
done:
	if (fd >= 0)
		close(fd);
	return ret;
}

void simstate_unlock(struct simstate *st)
{
	if (st->lock_fd >= 0)
		close(st->lock_fd); /* closing drops the flock */
	st->lock_fd = -1;
}

int simstate_publish(struct simstate *st, const struct simstate_use *uses, size_t count, char *err,
                     size_t errlen)
{
	char name[sizeof st->entry], tmp[sizeof st->entry], buf[ENTRY_MAX_BYTES];
	unsigned long long start;
	unsigned pid = (unsigned)getpid();
	size_t len = 0, i;
	int fd = -1, ret = -1;
	ssize_t n;

	if (!st->dirp || simstate_start_time(pid, &start) < 0) {
		set_err(err, errlen, "cannot publish in '%s': %s", st->dir,
		        st->dirp ? "cannot read /proc/self/stat" : "no state directory");
		goto done;
	}
	snprintf(name, sizeof name, "%u-%llu.live", pid, start);
	snprintf(tmp, sizeof tmp, "%u-%llu.tmp", pid, start);
	for (i = 0; i < count; i++) {
		int w = snprintf(buf + len, sizeof buf - len, "%s %" PRIu64 " %u\n", uses[i].uuid,
		                 uses[i].used_mib, uses[i].utilization);
		if (w < 0 || (size_t)w >= sizeof buf - len) {
			set_err(err, errlen, "too many GPUs for one entry");
			goto done;
		}
		len += (size_t)w;
	}
	fd = openat(dirfd(st->dirp), tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
	            0644);
	if (fd < 0) {
		set_err(err, errlen, "cannot create '%s/%s': %s", st->dir, tmp, strerror(errno));
		goto done;
	}
	n = write(fd, buf, len);
	if (n < 0 || (size_t)n != len) {
		set_err(err, errlen, "cannot write '%s/%s': %s", st->dir, tmp,
		        n < 0 ? strerror(errno) : "short write");
		goto done;
	}
	if (close(fd) < 0) {
		fd = -1;
		set_err(err, errlen, "cannot write '%s/%s': %s", st->dir, tmp, strerror(errno));
		goto done;
	}
	fd = -1;
	if (renameat(dirfd(st->dirp), tmp, dirfd(st->dirp), name) < 0) {
		set_err(err, errlen, "cannot rename '%s/%s': %s", st->dir, tmp, strerror(errno));
		goto done;
	}
	strcpy(st->entry, name);
	ret = 0;
done:
	if (fd >= 0)
		close(fd);
	if (ret < 0 && st->dirp)
		unlinkat(dirfd(st->dirp), tmp, 0);
	return ret;
}

void simstate_withdraw(struct simstate *st)
{
	if (st->entry[0] && st->dirp)
		unlinkat(dirfd(st->dirp), st->entry, 0);
	st->entry[0] = '\0';
}
