/*
 * registry.c - leases shared by every process and user of the machine: the
 * state directory and its safety checks, reading live leases and waiters,
 * and the atomic choose-and-lease step with first-come-first-served waiting.
 * See registry.h for the directory's layout and the locking protocol.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "broker.h"
#include "caps.h"
#include "context.h"
#include "lease.h"
#include "parse.h"
#include "pick.h"
#include "proctree.h"
#include "policy.h"
#include "registry.h"
#include "snapshot.h"
#include "text.h"
#include "util.h"

#define LEASE_PREFIX "lease."
#define WAIT_PREFIX "wait."
#define RESV_PREFIX "resv."
#define TMP_PREFIX ".tmp."
#define MAX_FILE_BYTES 65536
/* A temporary file is locked right after its creation; one this old with no
 * lock is debris of a crash between open and flock. */
#define TMP_STALE_MS 60000
/* How often an eligible waiter re-reads NVML for changes made outside
 * gpuman (a process that exits frees memory without any lease event). */
#define RECHECK_MS 1000

/* ---- the directory ------------------------------------------------------ */

static enum gm_err check_dir(const char *dir, struct stat *out, char *err, size_t len)
{
	struct stat st;

	if (lstat(dir, &st) < 0)
		return gm_fail(GM_ERR_STATE, err, len, "state directory '%s': %s", dir,
		               strerror(errno));
	if (S_ISLNK(st.st_mode))
		return gm_fail(
		    GM_ERR_STATE, err, len,
		    "state directory '%s' is a symbolic link; refusing it (another user "
		    "could redirect everyone's leases); point GPUMAN_STATE_DIR at a real "
		    "directory",
		    dir);
	if (!S_ISDIR(st.st_mode))
		return gm_fail(GM_ERR_STATE, err, len, "state directory '%s' is not a directory",
		               dir);
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		struct passwd *pw = getpwuid(st.st_uid);

		return gm_fail(GM_ERR_STATE, err, len,
		               "state directory '%s' is owned by user '%s', who could remove "
		               "everyone's leases; for a registry shared by all users an admin "
		               "should run 'install -d -m 1777 /run/gpuman' (see "
		               "contrib/gpuman.tmpfiles.conf), or set GPUMAN_STATE_DIR to a "
		               "directory owned by root or by you",
		               dir, pw ? pw->pw_name : "?");
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
		return gm_fail(GM_ERR_STATE, err, len,
		               "state directory '%s' is writable by others without the sticky bit, "
		               "so anyone could remove your leases; fix it with 'chmod +t %s'",
		               dir, dir);
	*out = st;
	return GM_OK;
}

/* Shared by every user, so world-writable and sticky: each user may add
 * files but only remove their own. */
static enum gm_err make_shared_dir(const char *dir, char *err, size_t len)
{
	if (mkdir(dir, 01777) == 0) {
		if (chmod(dir, 01777) < 0) /* mkdir obeys the umask */
			return gm_fail(GM_ERR_STATE, err, len, "state directory '%s': chmod: %s",
			               dir, strerror(errno));
	} else if (errno != EEXIST) {
		return gm_fail(GM_ERR_STATE, err, len,
		               "cannot create state directory '%s': %s (set GPUMAN_STATE_DIR)", dir,
		               strerror(errno));
	}
	return GM_OK;
}

enum gm_err registry_open(struct registry **out, char *err, size_t len)
{
	const char *env = getenv("GPUMAN_STATE_DIR");
	struct registry *reg;
	struct stat st, fst;
	enum gm_err rc;
	char sock[PATH_MAX];

	*out = NULL;
	reg = calloc(1, sizeof *reg);
	if (!reg)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	reg->lock_fd = -1;
	reg->held_fd = -1;
	if (broker_wanted(sock, sizeof sock)) {
		char *slash = strrchr(sock, '/');

		reg->broker = strdup(sock);
		if (!reg->broker) {
			rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
			goto failed;
		}
		/* dir: the socket's, which exists, for callers that watch the
		 * registry for changes (the engine): they then look again on
		 * their own timer, as nothing is written there. */
		if (slash && slash != sock)
			*slash = '\0';
		str_copy(reg->dir, sizeof reg->dir, slash && slash != sock ? sock : "/");
		*out = reg;
		return GM_OK;
	}
	if (env && *env)
		snprintf(reg->dir, sizeof reg->dir, "%s", env);
	else if (stat("/run/gpuman", &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(reg->dir, sizeof reg->dir, "/run/gpuman");
	else
		snprintf(reg->dir, sizeof reg->dir, "/tmp/gpuman");
	rc = make_shared_dir(reg->dir, err, len);
	if (rc == GM_OK)
		rc = check_dir(reg->dir, &st, err, len);
	if (rc != GM_OK)
		goto failed;
	/*
	 * The lock is the directory itself: nobody but its owner (root, or
	 * this user) can rename or replace it, unlike a file in it, which its
	 * creator could rename away so that later callers lock another inode.
	 * Read-only, like every flock here: it needs no write access.
	 */
	reg->lock_fd = open(reg->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (reg->lock_fd < 0 || fstat(reg->lock_fd, &fst) < 0) {
		rc = gm_fail(GM_ERR_STATE, err, len, "cannot open state directory '%s': %s",
		             reg->dir, strerror(errno));
		goto failed;
	}
	if (fst.st_dev != st.st_dev || fst.st_ino != st.st_ino) {
		rc = gm_fail(GM_ERR_STATE, err, len,
		             "state directory '%s' was replaced while it was opened; try again",
		             reg->dir);
		goto failed;
	}
	rc = config_load(&reg->cfg, 0, err, len);
	if (rc != GM_OK)
		goto failed;
	*out = reg;
	return GM_OK;
failed:
	registry_close(reg);
	return rc;
}

void registry_close(struct registry *reg)
{
	if (!reg)
		return;
	if (reg->held_fd >= 0 && reg->held_fd != reg->lock_fd)
		close(reg->held_fd);
	if (reg->lock_fd >= 0)
		close(reg->lock_fd);
	config_release(&reg->cfg);
	free(reg->broker);
	broker_place_free(reg->place);
	free(reg);
}

/* ---- reading leases and tickets ---------------------------------------- */

/*
 * Open a lease or ticket and tell whether its holder lives: the holder keeps
 * an exclusive flock, so our shared try-lock fails exactly while it lives.
 * Returns 1 (alive, *text malloc'd, *st filled), 0 (dead or gone; removed
 * where permitted) or -1 (out of memory).
 */
static int read_live_file(int dirfd, const char *name, char **text, struct stat *st)
{
	ssize_t n, got = 0;
	char *buf;
	int fd, rc = 0;

	*text = NULL;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode))
		goto done;
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		unlinkat(dirfd, name, 0); /* EPERM for others' files: leave them */
		goto done;
	}
	buf = malloc(MAX_FILE_BYTES + 1);
	if (!buf) {
		rc = -1;
		goto done;
	}
	while (got < MAX_FILE_BYTES && (n = read(fd, buf + got, MAX_FILE_BYTES - got)) > 0)
		got += n;
	buf[got] = '\0';
	*text = buf;
	rc = 1;
done:
	close(fd);
	return rc;
}

/* Names of the few users whose leases a reader meets, remembered: every
 * read of the registry names each lease's owner, and getpwuid_r reads
 * /etc/passwd each time (a dispatcher reads the registry per task). */
static void user_name(unsigned uid, char *out, size_t len)
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

/* ---- who may be believed ------------------------------------------------ */

/*
 * The pid namespace we live in (the inode of /proc/self/ns/pid), written in
 * every lease and ticket: a pid of another namespace (a container sharing
 * the state directory) cannot be looked up here, only trusted.
 */
static json_int_t own_pidns(void)
{
	static json_int_t ns = -1;
	struct stat st;

	if (ns < 0)
		ns = stat("/proc/self/ns/pid", &st) == 0 ? (json_int_t)st.st_ino : 0;
	return ns;
}

enum holder {
	HOLDER_GONE,    /* no such process, a zombie, or one of another user */
	HOLDER_UNKNOWN, /* cannot be looked up here: trust the lock alone */
	HOLDER_RUNNING,
	HOLDER_STOPPED, /* Ctrl-Z or a debugger: alive, but makes no progress */
};

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
	int64_t at_ms;
} holder_cache[256];

/*
 * What the kernel says of process pid, which must belong to uid.  A file's
 * lock proves only that somebody holds it (anyone who can read a file can
 * flock it); that its writer still lives is proved by the process itself.
 */
static enum holder holder_state(int pid, unsigned uid, json_int_t pidns)
{
	char path[64], buf[512], *p;
	struct stat st;
	ssize_t n;
	int fd, state = 0, slot = pid & 255;
	int64_t now;

	if (pid <= 0)
		return HOLDER_GONE;
	if (pidns != own_pidns() || !own_pidns())
		return HOLDER_UNKNOWN;
	/* kill() sees through hidepid; ESRCH is final, EPERM means alive. */
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return HOLDER_GONE;
	now = monotonic_ms();
	if (holder_cache[slot].pid == pid && holder_cache[slot].uid == uid &&
	    now - holder_cache[slot].at_ms < HOLDER_CACHE_MS)
		return HOLDER_RUNNING;
	/* The owner of /proc/PID is the process's effective uid (root for one
	 * that is not dumpable: then its status says).  stat() is cheap, and
	 * every read of the registry looks at every holder. */
	snprintf(path, sizeof path, "/proc/%d", pid);
	if (stat(path, &st) < 0)
		return errno == ENOENT && kill(pid, 0) < 0 && errno == ESRCH ? HOLDER_GONE
		                                                             : HOLDER_UNKNOWN;
	if (st.st_uid != uid && !(st.st_uid == 0 && uid_in_status(pid, uid)))
		return HOLDER_GONE;
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return HOLDER_UNKNOWN;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return HOLDER_GONE;
	buf[n] = '\0';
	/* "pid (comm) S ...": the command may hold anything, ')' too */
	if ((p = strrchr(buf, ')')) && p[1] == ' ')
		state = p[2];
	if (!state || state == 'Z' || state == 'X' || state == 'x')
		return HOLDER_GONE;
	if (state == 'T' || state == 't')
		return HOLDER_STOPPED;
	holder_cache[slot].pid = pid;
	holder_cache[slot].uid = uid;
	holder_cache[slot].at_ms = now;
	return HOLDER_RUNNING;
}

/* The uid a file claims must be its owner's: nobody writes in another's
 * name, and a file without one (an older gpuman's) is its owner's too. */
static int uid_matches(json_t *o, const struct stat *st)
{
	json_t *u = json_object_get(o, "uid");

	return !u || (json_is_integer(u) && json_integer_value(u) == (json_int_t)st->st_uid);
}

static json_int_t file_pidns(json_t *o)
{
	json_t *ns = json_object_get(o, "pidns");

	return ns ? json_integer_value(ns) : own_pidns();
}

/*
 * A ticket names the instant it was queued; one whose name claims a time
 * well before the file existed (its ctime, which nobody can set back) is
 * trying to jump the line.
 */
#define TICKET_SKEW_NS (30LL * 1000000000LL)

static int ticket_time_honest(const char *name, const struct stat *st)
{
	long long claimed;
	int64_t ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;

	if (sscanf(name, WAIT_PREFIX "%20lld.", &claimed) != 1)
		return 0;
	return claimed >= ctime_ns - TICKET_SKEW_NS;
}

static const char *jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

/* resv: read from a resv.<id> file, which alone may claim to be a reservation. */
static int parse_lease(const char *text, const struct stat *st, struct lease_info *li, int resv)
{
	json_t *o = json_loads(text, 0, NULL), *gpus, *g;
	size_t i;

	if (!o)
		return -1;
	memset(li, 0, sizeof *li);
	li->pid = (int)json_integer_value(json_object_get(o, "pid"));
	li->job_pid = (int)json_integer_value(json_object_get(o, "job_pid"));
	li->reservation = json_is_true(json_object_get(o, "reservation"));
	li->expires_ms = json_integer_value(json_object_get(o, "expires_ms"));
	/* Alive while its holder or its job lives (the job keeps the lease's
	 * descriptor when gpuman run is killed), never on the lock alone: a
	 * dead lease that someone else flocks is revived for nobody.  A
	 * reservation lives by its file alone (parse_reservation). */
	if (!uid_matches(o, st) || li->reservation != resv ||
	    (resv && !json_object_get(o, "uid")) ||
	    (!li->reservation && holder_state(li->pid, st->st_uid, file_pidns(o)) == HOLDER_GONE &&
	     holder_state(li->job_pid, st->st_uid, file_pidns(o)) == HOLDER_GONE)) {
		json_decref(o);
		return 1;
	}
	snprintf(li->id, sizeof li->id, "%s", jstr(o, "id"));
	li->uid = st->st_uid;
	user_name(st->st_uid, li->user, sizeof li->user);
	snprintf(li->command, sizeof li->command, "%s", jstr(o, "command"));
	li->start_ms = json_integer_value(json_object_get(o, "start_ms"));
	li->exclusive = !strcmp(jstr(o, "kind"), "exclusive");
	li->share_mib = (uint64_t)json_integer_value(json_object_get(o, "share_mib"));
	gpus = json_object_get(o, "gpus");
	li->gpu_count = json_array_size(gpus);
	li->uuids = calloc(li->gpu_count + 1, sizeof *li->uuids);
	li->indices = calloc(li->gpu_count + 1, sizeof *li->indices);
	li->migs = calloc(li->gpu_count + 1, sizeof *li->migs);
	if (!li->uuids || !li->indices || !li->migs) {
		json_decref(o);
		return -1;
	}
	json_array_foreach(gpus, i, g)
	{
		snprintf(li->uuids[i], sizeof li->uuids[i], "%s", jstr(g, "uuid"));
		li->indices[i] = (unsigned)json_integer_value(json_object_get(g, "index"));
		snprintf(li->migs[i], sizeof li->migs[i], "%s", jstr(g, "mig_uuid"));
	}
	json_decref(o);
	return 0;
}

/*
 * A reservation (resv.<id>): no process holds it, so it is believed on the
 * file alone -- its owner's, not writable by others, naming its owner's uid
 * and, in its id, its own name (a hard link under another name is not it)
 * -- until it expires.  With an admin's max_reserve, a file
 * its owner edits by hand counts no longer than that after the edit.
 * Returns 0 (live), 1 (expired or untrusted), -1 (out of memory).
 */
static int parse_reservation(const struct registry *reg, int dirfd, const char *name,
                             struct lease_info *li)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), rc;
	int64_t now = now_ms(), limit, ctime_ms;
	char buf[8192], from[96];
	struct stat st;
	ssize_t n;

	if (fd < 0)
		return 1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & (S_IWGRP | S_IWOTH)) ||
	    (n = read(fd, buf, sizeof buf - 1)) <= 0) {
		close(fd);
		return 1;
	}
	close(fd);
	buf[n] = '\0';
	rc = parse_lease(buf, &st, li, 1);
	if (rc != 0)
		return rc;
	limit = config_max_reserve_ms(&reg->cfg, li->uid, from, sizeof from);
	ctime_ms = (int64_t)st.st_ctim.tv_sec * 1000 + st.st_ctim.tv_nsec / 1000000;
	if (!li->reservation || strcmp(li->id, name + strlen(RESV_PREFIX)) ||
	    li->expires_ms <= now || (limit && ctime_ms + limit <= now)) {
		if (li->reservation && li->expires_ms <= now)
			unlinkat(dirfd, name, 0); /* EPERM for others': left to them */
		free(li->uuids);
		free(li->indices);
		free(li->migs);
		return 1;
	}
	return 0;
}

static int parse_waiter(const char *name, const char *text, const struct stat *st,
                        struct waiter_info *wi)
{
	json_t *o = json_loads(text, 0, NULL), *cand, *c;
	enum holder h;
	size_t i;

	if (!o)
		return -1;
	memset(wi, 0, sizeof *wi);
	wi->pid = (int)json_integer_value(json_object_get(o, "pid"));
	/* A stopped waiter would hold its GPUs back from everyone behind it
	 * while taking none: it keeps its place, and counts again once it runs. */
	h = holder_state(wi->pid, st->st_uid, file_pidns(o));
	if (!uid_matches(o, st) || h == HOLDER_GONE || h == HOLDER_STOPPED ||
	    !ticket_time_honest(name, st)) {
		json_decref(o);
		return 1;
	}
	str_copy(wi->name, sizeof wi->name, name);
	wi->uid = st->st_uid;
	user_name(st->st_uid, wi->user, sizeof wi->user);
	snprintf(wi->command, sizeof wi->command, "%s", jstr(o, "command"));
	snprintf(wi->summary, sizeof wi->summary, "%s", jstr(o, "summary"));
	wi->since_ms = json_integer_value(json_object_get(o, "since_ms"));
	cand = json_object_get(o, "candidates");
	wi->cand_count = json_array_size(cand);
	wi->cand = calloc(wi->cand_count + 1, sizeof *wi->cand);
	if (!wi->cand) {
		json_decref(o);
		return -1;
	}
	json_array_foreach(cand, i, c) snprintf(wi->cand[i], sizeof wi->cand[i], "%s",
	                                        json_string_value(c) ? json_string_value(c) : "");
	json_decref(o);
	return 0;
}

static int over_cap(const struct registry *reg, const struct registry_view *view, unsigned uid,
                    unsigned count, char *why, size_t len);

static int waiter_cmp(const void *a, const void *b)
{
	return strcmp(((const struct waiter_info *)a)->name, ((const struct waiter_info *)b)->name);
}

static int starts_with(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* Remove a crashed creator's temporary file, never a fresh one. */
static void clean_tmp(int dirfd, const char *name)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (int64_t)st.st_mtime * 1000 + TMP_STALE_MS < now_ms())
		unlinkat(dirfd, name, 0);
}

/*
 * registry_read, skipping the tickets that sort after `upto` (NULL: none):
 * a waiter is held back only by those ahead of it, and leaving the rest
 * unopened halves the work of a read in a long line.
 */
static enum gm_err read_upto(struct registry *reg, struct registry_view *view, const char *upto,
                             char *err, size_t len)
{
	DIR *d;
	struct dirent *de;
	enum gm_err rc = GM_OK;

	if (reg->broker)
		return broker_read(reg->broker, view, err, len);
	*view = (struct registry_view)REGISTRY_VIEW_INIT;
	d = opendir(reg->dir);
	if (!d)
		return gm_fail(GM_ERR_STATE, err, len, "cannot read state directory '%s': %s",
		               reg->dir, strerror(errno));
	while ((de = readdir(d))) {
		int is_lease = starts_with(de->d_name, LEASE_PREFIX);
		int is_wait = starts_with(de->d_name, WAIT_PREFIX);
		int is_resv = starts_with(de->d_name, RESV_PREFIX);
		struct stat st;
		char *text;
		int live;

		if (starts_with(de->d_name, TMP_PREFIX))
			clean_tmp(dirfd(d), de->d_name);
		if (is_resv) {
			struct lease_info *l =
			    realloc(view->leases, (view->lease_count + 1) * sizeof *l);

			if (!l) {
				rc = GM_ERR_NOMEM;
				break;
			}
			view->leases = l;
			live = parse_reservation(reg, dirfd(d), de->d_name, &l[view->lease_count]);
			if (live < 0) {
				rc = GM_ERR_NOMEM;
				break;
			}
			view->lease_count += live == 0;
			continue;
		}
		if ((!is_lease && !is_wait) || (is_wait && upto && strcmp(de->d_name, upto) > 0))
			continue;
		live = read_live_file(dirfd(d), de->d_name, &text, &st);
		if (live < 0) {
			rc = GM_ERR_NOMEM;
			break;
		}
		if (!live)
			continue;
		if (is_lease) {
			struct lease_info *l =
			    realloc(view->leases, (view->lease_count + 1) * sizeof *l);

			if (l) {
				view->leases = l;
				if (parse_lease(text, &st, &l[view->lease_count], 0) ==
				    0) /* 1: untrusted */
					view->lease_count++;
			}
		} else {
			struct waiter_info *w =
			    realloc(view->waiters, (view->waiter_count + 1) * sizeof *w);

			if (w) {
				view->waiters = w;
				if (parse_waiter(de->d_name, text, &st, &w[view->waiter_count]) ==
				    0)
					view->waiter_count++;
			}
		}
		free(text);
	}
	closedir(d);
	if (view->waiter_count > 1)
		qsort(view->waiters, view->waiter_count, sizeof *view->waiters, waiter_cmp);
	for (size_t i = 0; i < view->waiter_count; i++) {
		struct waiter_info *wi = &view->waiters[i];
		unsigned count = (unsigned)strtoul(wi->summary, NULL, 10);

		over_cap(reg, view, wi->uid, count ? count : 1, wi->limit, sizeof wi->limit);
	}
	if (rc != GM_OK) {
		registry_view_release(view);
		return gm_fail(rc, err, len, "out of memory");
	}
	return GM_OK;
}

enum gm_err registry_read(struct registry *reg, struct registry_view *view, char *err, size_t len)
{
	return read_upto(reg, view, NULL, err, len);
}

void registry_view_release(struct registry_view *view)
{
	for (size_t i = 0; i < view->lease_count; i++) {
		free(view->leases[i].uuids);
		free(view->leases[i].indices);
		free(view->leases[i].migs);
	}
	for (size_t i = 0; i < view->waiter_count; i++)
		free(view->waiters[i].cand);
	free(view->leases);
	free(view->waiters);
	*view = (struct registry_view)REGISTRY_VIEW_INIT;
}

/* ---- memory a share has not allocated yet ------------------------------ */

/* MiB that the job's own processes (job_pid and descendants) hold on GPU
 * index, per NVML. */
static uint64_t job_used_mib(const struct gm_snapshot *snap, const struct proctree *tree,
                             int job_pid, unsigned index)
{
	uint64_t used = 0;

	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];

		if (p->gpu == index && p->has_mem && job_pid > 0 &&
		    proctree_within(tree, job_pid, (int)p->pid))
			used += p->used_mib;
	}
	return used;
}

/* ---- caps: the admin's limits (caps.h) ---------------------------------- */

/* GPUs that uid's live leases hold. */
static unsigned held_by(const struct registry_view *view, unsigned uid)
{
	unsigned held = 0;

	for (size_t i = 0; i < view->lease_count; i++)
		if (view->leases[i].uid == uid)
			held += (unsigned)view->leases[i].gpu_count;
	return held;
}

/* Would count more GPUs take uid beyond its cap?  caps_over(). */
static int over_cap(const struct registry *reg, const struct registry_view *view, unsigned uid,
                    unsigned count, char *why, size_t len)
{
	return caps_over(&reg->cfg, uid, held_by(view, uid), count, why, len);
}

/* A waiter that its own user's cap keeps waiting holds nothing back from
 * the users behind it: first come, first served within what each may have. */
static int waiter_capped(const struct registry *reg, const struct registry_view *view,
                         const struct waiter_info *wi)
{
	unsigned count = (unsigned)strtoul(wi->summary, NULL, 10);

	return over_cap(reg, view, wi->uid, count ? count : 1, NULL, 0) != 0;
}

/* ---- one attempt: read everything, ask the policy ---------------------- */

/*
 * Inside one's own reservation (GPUMAN_RESERVATION, as gpuman reserve
 * prints it), its GPUs are the caller's to use: the reservation neither
 * occupies them nor counts against the caller's cap.  Leases taken inside
 * it still do, so two runs there never share a GPU unasked.
 */
static void drop_within(struct registry_view *view)
{
	const char *id = getenv("GPUMAN_RESERVATION");

	for (size_t i = 0; id && *id && i < view->lease_count; i++) {
		struct lease_info *li = &view->leases[i];

		if (!li->reservation || li->uid != (unsigned)geteuid() || strcmp(li->id, id))
			continue;
		free(li->uuids);
		free(li->indices);
		free(li->migs);
		*li = view->leases[--view->lease_count];
		return;
	}
}

struct attempt {
	struct registry_view view;
	struct gm_snapshot *snap; /* owned unless given by the caller */
	int snap_given;
	struct pick_env env;
	struct policy_lease *leases;
	size_t lease_count;
	char (*holders)[80];
	const char **held_for;
	char (*held_text)[160];
	const char **barred;
	char (*barred_text)[160];
	struct policy_result res;
	struct policy_input in;
};

static void attempt_release(struct attempt *a)
{
	registry_view_release(&a->view);
	if (!a->snap_given)
		gm_snapshot_free(a->snap);
	pick_env_release(&a->env);
	free(a->leases);
	free(a->holders);
	free((void *)a->held_for);
	free(a->held_text);
	free((void *)a->barred);
	free(a->barred_text);
	policy_result_release(&a->res);
	memset(a, 0, sizeof *a);
}

static const char *waiter_summary(const struct gm_request *req, char *buf, size_t len)
{
	char size[32];

	if (req->mig[0])
		snprintf(buf, len, "1 MIG slice %s", req->mig);
	else if (req->share)
		snprintf(buf, len, "%u GPU%s, %s share", req->count, req->count == 1 ? "" : "s",
		         size_format(&req->mem, size, sizeof size));
	else
		snprintf(buf, len, "%u GPU%s exclusive", req->count, req->count == 1 ? "" : "s");
	return buf;
}

/*
 * Read leases, waiters and (unless given) NVML, and run the policy.  Waiters
 * whose ticket sorts before `mine` (all of them when mine is NULL: a request
 * that does not wait queues behind everyone) hold their candidate GPUs back.
 */
static enum gm_err attempt_run(struct registry *reg, struct gm_context *ctx,
                               const struct gm_snapshot *given, const struct gm_request *req,
                               const char *mine, struct attempt *a, char *err, size_t len)
{
	struct proctree tree = PROCTREE_INIT;
	size_t ngpu;
	enum gm_err rc;
	int need_tree = 0;

	memset(a, 0, sizeof *a);
	rc = read_upto(reg, &a->view, mine, err, len);
	if (rc != GM_OK)
		return rc;
	drop_within(&a->view);
	if (given) {
		a->snap = (struct gm_snapshot *)given;
		a->snap_given = 1;
	} else {
		rc = snapshot_take(ctx, 0, 0, &a->snap, err, len); /* no clocks: placing is hot */
		if (rc != GM_OK)
			return rc;
	}
	ngpu = a->snap->gpu_count;
	if (pick_env_init(&a->env, a->snap) < 0)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	for (size_t i = 0; i < a->view.lease_count; i++) {
		a->lease_count += a->view.leases[i].gpu_count;
		need_tree |= !a->view.leases[i].exclusive;
	}
	a->leases = calloc(a->lease_count + 1, sizeof *a->leases);
	a->holders = calloc(a->view.lease_count + 1, sizeof *a->holders);
	a->held_for = calloc(ngpu + 1, sizeof *a->held_for);
	a->held_text = calloc(ngpu + 1, sizeof *a->held_text);
	a->barred = calloc(ngpu + 1, sizeof *a->barred);
	a->barred_text = calloc(ngpu + 1, sizeof *a->barred_text);
	if (!a->leases || !a->holders || !a->held_for || !a->held_text || !a->barred ||
	    !a->barred_text)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	if (need_tree && proctree_read(&tree) < 0)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	a->lease_count = 0;
	for (size_t i = 0; i < a->view.lease_count; i++) {
		const struct lease_info *li = &a->view.leases[i];

		if (li->reservation)
			snprintf(a->holders[i], sizeof a->holders[i],
			         "%s (reservation, %llds left)", li->user,
			         (long long)((li->expires_ms - now_ms()) / 1000));
		else
			snprintf(a->holders[i], sizeof a->holders[i], "%s (pid %d)", li->user,
			         li->job_pid > 0 ? li->job_pid : li->pid);
		for (size_t g = 0; g < li->gpu_count; g++) {
			struct policy_lease *pl = &a->leases[a->lease_count++];
			const struct gm_gpu *gpu = gm_snapshot_find(a->snap, li->uuids[g]);
			uint64_t used = 0;

			pl->uuid = li->uuids[g];
			pl->mig = li->migs[g];
			pl->exclusive = li->exclusive;
			pl->share_mib = li->share_mib;
			pl->holder = a->holders[i];
			if (!li->exclusive && gpu)
				used = job_used_mib(a->snap, &tree, li->job_pid, gpu->index);
			pl->pending_mib = pl->share_mib > used ? pl->share_mib - used : 0;
		}
	}
	proctree_release(&tree);
	for (size_t w = 0; w < a->view.waiter_count; w++) {
		const struct waiter_info *wi = &a->view.waiters[w];

		if (mine && strcmp(wi->name, mine) >= 0)
			break;
		if (waiter_capped(reg, &a->view, wi))
			continue;
		for (size_t c = 0; c < wi->cand_count; c++) {
			const struct gm_gpu *gpu = gm_snapshot_find(a->snap, wi->cand[c]);
			size_t pos;

			if (!gpu)
				continue;
			pos = (size_t)(gpu - a->snap->gpus);
			if (a->held_for[pos])
				continue;
			if (snprintf(a->held_text[pos], sizeof a->held_text[pos],
			             "queued for an earlier request: %s's %s (pid %d)", wi->user,
			             wi->summary, wi->pid) >= (int)sizeof a->held_text[pos])
				a->held_text[pos][sizeof a->held_text[pos] - 1] = '\0';
			a->held_for[pos] = a->held_text[pos];
		}
	}
	a->in.snap = a->snap;
	a->in.leases = a->leases;
	a->in.lease_count = a->lease_count;
	a->in.usable = a->env.usable;
	a->in.held_for = a->held_for;
	a->in.mig_usable = a->env.mig_usable;
	if (caps_barred(&reg->cfg, (unsigned)geteuid(), a->snap, a->barred, a->barred_text))
		a->in.barred = a->barred;
	if (policy_choose(&a->in, req, &a->res) < 0)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	if (a->res.outcome != POLICY_NEVER) {
		char why[sizeof a->res.why[0]];
		int over =
		    over_cap(reg, &a->view, (unsigned)geteuid(), req->count, why, sizeof why);

		/* The cap is why on every GPU that would otherwise do. */
		if (over) {
			a->res.outcome = over == 2 ? POLICY_NEVER : POLICY_NOT_NOW;
			a->res.count = 0;
			for (size_t g = 0; g < a->res.gpu_count; g++)
				if (!a->res.why[g][0] || over == 2)
					snprintf(a->res.why[g], sizeof a->res.why[g], "%s", why);
		}
	}
	return GM_OK;
}

/* ---- publishing files --------------------------------------------------- */

static void random_id(char *buf, size_t len)
{
	unsigned r = 0;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd < 0 || read(fd, &r, sizeof r) != (ssize_t)sizeof r)
		r = (unsigned)(now_ms() ^ ((int64_t)getpid() << 16));
	if (fd >= 0)
		close(fd);
	snprintf(buf, len, "%lld-%d-%08x", (long long)now_ms(), (int)getpid(), r);
}

/* Create name under a temporary name, lock it, write text, rename it into
 * place.  Returns the locked descriptor, or -1 with errno. */
static int publish_locked_file(const char *dir, const char *name, const char *text,
                               int (*before_rename)(void *data, int fd), void *data)
{
	char tmp[PATH_MAX], final[PATH_MAX];
	size_t len = strlen(text), off = 0;
	int fd, saved;

	snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "%s", dir, name);
	snprintf(final, sizeof final, "%s/%s", dir, name);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	/* Readable by every user whatever the umask (the queue's dispatcher
	 * runs under 077): a lease others cannot open they would take for
	 * dead, and give its GPUs away. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 || fchmod(fd, 0644) < 0)
		goto failed;
	if (before_rename && before_rename(data, fd) < 0)
		goto failed;
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			goto failed;
		}
		off += (size_t)n;
	}
	if (rename(tmp, final) < 0)
		goto failed;
	return fd;
failed:
	saved = errno;
	unlink(tmp);
	close(fd);
	errno = saved;
	return -1;
}

static char *self_command(void)
{
	char buf[256];
	ssize_t n;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return strdup("?");
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return strdup("?");
	while (n > 0 && buf[n - 1] == '\0')
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[n] = '\0';
	return strdup(buf);
}

static enum gm_err write_ticket(struct registry *reg, struct attempt *a,
                                const struct gm_request *req, const struct acquire_opts *opts,
                                char *name, size_t name_len, int *fd_out, char *err, size_t len)
{
	json_t *o = json_object(), *cand = json_array();
	char summary[128], id[64], *text, *cmd = NULL;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	random_id(id, sizeof id);
	/* Zero-padded nanoseconds: names sort in arrival order. */
	snprintf(name, name_len, WAIT_PREFIX "%020lld.%s",
	         (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, id);
	for (size_t pos = 0; pos < a->snap->gpu_count; pos++)
		if (policy_candidate(&a->in, req, pos))
			json_array_append_new(cand, json_string(a->snap->gpus[pos].uuid));
	if (!opts || !opts->command)
		cmd = self_command();
	json_object_set_new(o, "uid", json_integer((json_int_t)geteuid()));
	json_object_set_new(o, "pid", json_integer(getpid()));
	json_object_set_new(o, "pidns", json_integer(own_pidns()));
	json_object_set_new(o, "command",
	                    json_string(opts && opts->command ? opts->command : (cmd ? cmd : "?")));
	json_object_set_new(o, "since_ms", json_integer(now_ms()));
	json_object_set_new(o, "summary",
	                    json_string(waiter_summary(req, summary, sizeof summary)));
	json_object_set_new(o, "candidates", cand);
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	free(cmd);
	if (!text)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	*fd_out = publish_locked_file(reg->dir, name, text, NULL, NULL);
	free(text);
	if (*fd_out < 0)
		return gm_fail(GM_ERR_STATE, err, len, "cannot queue in '%s': %s", reg->dir,
		               strerror(errno));
	return GM_OK;
}

static void lease_free_fields(struct gm_lease *l)
{
	free(l->indices);
	free(l->uuids);
	free(l->cuda_visible);
	free(l->indices_text);
	free(l->broker);
	free(l);
}

struct spawn_call {
	const struct acquire_opts *opts;
	struct gm_lease *lease;
	pid_t job_pid;
	char *err;
	size_t len;
	json_t *doc;
};

/* Under the registry lock and before the lease file is visible, start the
 * job so that the lease names it from the first instant. */
static int lease_before_rename(void *data, int fd)
{
	struct spawn_call *sc = data;
	char *text;

	sc->lease->fd = fd;
	if (sc->opts && sc->opts->spawn &&
	    sc->opts->spawn(sc->opts->spawn_data, sc->lease, &sc->job_pid, sc->err, sc->len) < 0) {
		errno = ECHILD;
		return -1;
	}
	json_object_set_new(sc->doc, "job_pid", json_integer(sc->job_pid));
	text = json_dumps(sc->doc, JSON_COMPACT);
	if (!text) {
		errno = ENOMEM;
		return -1;
	}
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		free(text);
		return -1;
	}
	free(text);
	return 0;
}

static enum gm_err publish_lease(struct registry *reg, struct attempt *a,
                                 const struct gm_request *req, const struct acquire_opts *opts,
                                 struct gm_lease **out, char *err, size_t len)
{
	struct gm_lease *l = calloc(1, sizeof *l);
	json_t *doc = json_object(), *gpus = json_array();
	struct spawn_call sc = {opts, l, getpid(), err, len, doc};
	size_t n = a->res.count, ilen = 1, mig_used = 0, mig_gpus = 0;
	char mig_list[64] = "";
	uint64_t min_total = 0;
	char name[128], *cmd = NULL;
	enum gm_err rc = GM_ERR_NOMEM;
	int fd;

	if (!l)
		goto failed;
	l->fd = -1;
	l->gpu_count = n;
	l->indices = calloc(n + 1, sizeof *l->indices);
	l->uuids = calloc(n + 1, sizeof *l->uuids);
	l->indices_text = calloc(n + 1, 12);
	l->cuda_visible = a->res.mig ? strdup(a->snap->migs[a->res.chosen[0]].uuid)
	                             : pick_env_cuda_visible(&a->env, a->snap, a->res.chosen, n);
	if (!l->indices || !l->uuids || !l->indices_text || !l->cuda_visible)
		goto failed;
	random_id(l->id, sizeof l->id);
	l->exclusive = !req->share;
	for (size_t i = 0; i < n; i++) {
		const struct gm_mig *m = a->res.mig ? &a->snap->migs[a->res.chosen[i]] : NULL;
		const struct gm_gpu *g = m ? &a->snap->gpus[snapshot_position(a->snap, m->gpu)]
		                           : &a->snap->gpus[a->res.chosen[i]];
		uint64_t share = req->share ? size_mib(&req->mem, g->mem_total_mib) : 0;
		json_t *jg = json_object();

		l->indices[i] = g->index;
		/* a slice's holder knows it by the slice's UUID, as CUDA does */
		snprintf(l->uuids[i], sizeof l->uuids[i], "%s", m ? m->uuid : g->uuid);
		ilen += (size_t)sprintf(l->indices_text + ilen - 1, "%s%u", i ? "," : "", g->index);
		/* A percentage share is the same size on every GPU of the lease:
		 * the smallest GPU's, so the record is one number. */
		if (req->share && (!l->share_mib || share < l->share_mib))
			l->share_mib = share;
		if (!min_total || g->mem_total_mib < min_total)
			min_total = g->mem_total_mib;
		json_object_set_new(jg, "index", json_integer(g->index));
		json_object_set_new(jg, "uuid", json_string(g->uuid));
		if (m)
			json_object_set_new(jg, "mig_uuid", json_string(m->uuid));
		json_array_append_new(gpus, jg);
	}
	l->mem_fraction = req->share && min_total ? (double)l->share_mib / (double)min_total : 0.0;
	/* Say why a GPU that looks idle was passed over. */
	for (size_t i = 0; i < a->snap->gpu_count && !req->mig[0]; i++) {
		const struct gm_gpu *g = &a->snap->gpus[i];

		if (!(g->valid & GM_HAS_MIG) || g->mig_mode != 1 ||
		    mig_used + 12 >= sizeof mig_list)
			continue;
		mig_used += (size_t)snprintf(mig_list + mig_used, sizeof mig_list - mig_used,
		                             "%s%u", mig_gpus ? "," : "", g->index);
		mig_gpus++;
		snprintf(l->note, sizeof l->note,
		         "GPU%s %s %s in MIG mode: never handed out whole (ask for a slice with "
		         "--mig PROFILE)",
		         mig_gpus > 1 ? "s" : "", mig_list, mig_gpus > 1 ? "are" : "is");
	}
	if (!opts || !opts->command)
		cmd = self_command();
	json_object_set_new(doc, "id", json_string(l->id));
	json_object_set_new(doc, "uid", json_integer((json_int_t)geteuid()));
	json_object_set_new(doc, "pid", json_integer(getpid()));
	json_object_set_new(doc, "pidns", json_integer(own_pidns()));
	json_object_set_new(doc, "command",
	                    json_string(opts && opts->command ? opts->command : (cmd ? cmd : "?")));
	json_object_set_new(doc, "start_ms", json_integer(now_ms()));
	json_object_set_new(doc, "kind", json_string(req->share ? "share" : "exclusive"));
	json_object_set_new(doc, "share_mib", json_integer((json_int_t)l->share_mib));
	json_object_set_new(doc, "gpus", gpus);
	if (opts && opts->reserve_ms > 0) {
		json_object_set_new(doc, "reservation", json_true());
		json_object_set_new(doc, "expires_ms", json_integer(now_ms() + opts->reserve_ms));
	}
	snprintf(name, sizeof name, "%s%s",
	         opts && opts->reserve_ms > 0 ? RESV_PREFIX : LEASE_PREFIX, l->id);
	if (snprintf(l->path, sizeof l->path, "%s/%s", reg->dir, name) >= (int)sizeof l->path) {
		rc = gm_fail(GM_ERR_STATE, err, len, "state directory path '%s' is too long",
		             reg->dir);
		goto failed;
	}
	err[0] = '\0';
	fd = publish_locked_file(reg->dir, name, "", lease_before_rename, &sc);
	if (fd < 0) {
		rc = err[0] ? GM_ERR_IO
		            : gm_fail(GM_ERR_STATE, err, len, "cannot write a lease in '%s': %s",
		                      reg->dir, strerror(errno));
		goto failed;
	}
	l->fd = fd;
	json_decref(doc);
	free(cmd);
	*out = l;
	return GM_OK;
failed:
	json_decref(doc);
	free(cmd);
	if (l)
		lease_free_fields(l);
	if (rc == GM_ERR_NOMEM)
		gm_fail(rc, err, len, "out of memory");
	return rc;
}

/* ---- waiting ------------------------------------------------------------ */

/*
 * What a waiter knows of the waiters ahead of it.  Tickets are immutable and
 * later arrivals sort after us, so the set only shrinks: read once, then
 * drop names as inotify reports their last close or removal.
 */
struct ahead {
	size_t count;
	char (*names)[128];
	uint64_t *blocks;  /* bit i: that waiter may take my candidate i */
	size_t mine_count; /* my candidates (at most 64 tracked) */
};

static void ahead_release(struct ahead *ah)
{
	free(ah->names);
	free(ah->blocks);
	memset(ah, 0, sizeof *ah);
}

static void ahead_build(struct ahead *ah, const struct registry *reg,
                        const struct registry_view *view, const char *mine)
{
	const struct waiter_info *me = NULL;

	ahead_release(ah);
	for (size_t w = 0; w < view->waiter_count; w++)
		if (!strcmp(view->waiters[w].name, mine))
			me = &view->waiters[w];
	ah->names = calloc(view->waiter_count + 1, sizeof *ah->names);
	ah->blocks = calloc(view->waiter_count + 1, sizeof *ah->blocks);
	if (!ah->names || !ah->blocks || !me)
		return;
	ah->mine_count = me->cand_count < 64 ? me->cand_count : 64;
	for (size_t w = 0; w < view->waiter_count; w++) {
		const struct waiter_info *wi = &view->waiters[w];
		uint64_t mask = 0;

		if (strcmp(wi->name, mine) >= 0)
			break;
		/* Capped now, it blocks nothing; when its user's lease ends, that
		 * close wakes us and the attempt sees it again. */
		for (size_t i = 0; i < ah->mine_count && !waiter_capped(reg, view, wi); i++)
			for (size_t c = 0; c < wi->cand_count; c++)
				if (!strcmp(me->cand[i], wi->cand[c]))
					mask |= 1ull << i;
		snprintf(ah->names[ah->count], sizeof ah->names[0], "%s", wi->name);
		ah->blocks[ah->count++] = mask;
	}
}

static void ahead_forget(struct ahead *ah, const char *name)
{
	for (size_t i = 0; i < ah->count; i++)
		if (!strcmp(ah->names[i], name)) {
			ah->count--;
			memmove(ah->names[i], ah->names[i + 1],
			        (ah->count - i) * sizeof ah->names[0]);
			memmove(&ah->blocks[i], &ah->blocks[i + 1],
			        (ah->count - i) * sizeof ah->blocks[0]);
			return;
		}
}

/* Could an attempt now give us anything, or do earlier waiters hold every
 * GPU we could use? */
static int ahead_leaves_room(const struct ahead *ah)
{
	uint64_t all = ah->mine_count >= 64 ? ~0ull : (1ull << ah->mine_count) - 1, held = 0;

	if (!ah->blocks)
		return 1;
	for (size_t i = 0; i < ah->count; i++)
		held |= ah->blocks[i];
	return (held & all) != all || ah->mine_count == 0;
}

/* A waiter between attempts. */
struct waiting {
	int cancel_fd; /* readable once gm_cancel() was called; -1: none */
	struct registry *reg;
	const char *mine; /* our ticket's name */
	struct ahead ah;
	int ifd;        /* inotify on the registry; -1 until we have room */
	int no_inotify; /* the per-user inotify limit is reached: poll */
};

/* Asked to stop: a flag set by a signal handler, or gm_cancel(). */
static int cancelled(const struct waiting *w, const struct acquire_opts *opts)
{
	struct pollfd pfd = {w->cancel_fd, POLLIN, 0};

	if (opts && opts->interrupted && *opts->interrupted)
		return 1;
	return w->cancel_fd >= 0 && poll(&pfd, 1, 0) > 0;
}

/* Without inotify (the kernel allows 128 instances per user), a waiter with
 * room re-checks this often. */
#define POLL_FALLBACK_MS 50

static void ahead_refresh(struct waiting *w)
{
	struct registry_view view;

	if (read_upto(w->reg, &view, w->mine, NULL, 0) == GM_OK) {
		ahead_build(&w->ah, w->reg, &view, w->mine);
		registry_view_release(&view);
	}
}

/*
 * Earlier waiters hold every GPU we could use: sleep until the nearest of
 * them leaves (served or dead), by blocking on its ticket's lock -- in a
 * small child, so that the wait can time out and be interrupted.  The child
 * dies with us.  No polling and no inotify instance per queued request.
 */
static void wait_behind(struct waiting *w, int64_t deadline, const struct acquire_opts *opts)
{
	char path[PATH_MAX + 130];
	const char *blocker = NULL;
	int64_t now = monotonic_ms(), until = now + RECHECK_MS;
	pid_t parent = getpid(), pid;
	int fd, p[2];

	for (size_t i = w->ah.count; i-- > 0;)
		if (w->ah.blocks[i]) {
			blocker = w->ah.names[i];
			break;
		}
	if (!blocker)
		return;
	snprintf(path, sizeof path, "%s/%s", w->reg->dir, blocker);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return; /* already gone */
	if (pipe2(p, O_CLOEXEC) < 0) {
		close(fd);
		return;
	}
	pid = fork();
	if (pid == 0) {
		/* Only system calls here: the parent may be multi-threaded. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == parent)
			flock(fd, LOCK_SH);
		_exit(0);
	}
	close(p[1]);
	close(fd);
	if (deadline >= 0 && deadline < until)
		until = deadline;
	while (pid > 0 && now < until && !cancelled(w, opts)) {
		struct pollfd pfd[2] = {{p[0], POLLIN, 0}, {w->cancel_fd, POLLIN, 0}};
		int n = poll(pfd, w->cancel_fd >= 0 ? 2 : 1, (int)(until - now));

		if ((n > 0 && pfd[0].revents) || (n < 0 && errno != EINTR))
			break;
		now = monotonic_ms();
	}
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	close(p[0]);
}

/*
 * Sleep until something that may let us in happens: a lease closed or
 * removed (release or holder death), an earlier waiter gone, or -- for a
 * waiter with room -- RECHECK_MS passed (NVML changes outside gpuman).
 * Returns GM_OK to try again, GM_ERR_TIMEOUT, GM_ERR_INTERRUPTED or
 * GM_ERR_IO.
 */
static enum gm_err wait_for_change(struct waiting *w, int64_t deadline,
                                   const struct acquire_opts *opts)
{
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	int64_t recheck_at = monotonic_ms() + RECHECK_MS;

	for (;;) {
		int64_t now = monotonic_ms(), until;
		struct pollfd pfd[2] = {{w->ifd, POLLIN, 0}, {w->cancel_fd, POLLIN, 0}};
		int wake = 0, n;
		ssize_t got;

		if (cancelled(w, opts))
			return GM_ERR_INTERRUPTED;
		if (deadline >= 0 && now >= deadline)
			return GM_ERR_TIMEOUT;
		if (!ahead_leaves_room(&w->ah)) {
			wait_behind(w, deadline, opts);
			ahead_refresh(w);
			continue;
		}
		if (w->ifd < 0 && !w->no_inotify) {
			/* Watch first, then try: no release can slip between. */
			w->ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
			if (w->ifd >= 0 && inotify_add_watch(w->ifd, w->reg->dir,
			                                     IN_CLOSE_WRITE | IN_DELETE) < 0) {
				close(w->ifd);
				w->ifd = -1;
			}
			w->no_inotify = w->ifd < 0;
			return GM_OK;
		}
		if (w->ifd < 0) {
			/* No inotify to be had: look again shortly. */
			n = poll(&pfd[1], 1, POLL_FALLBACK_MS);
			return cancelled(w, opts) ? GM_ERR_INTERRUPTED : GM_OK;
		}
		until = recheck_at;
		if (deadline >= 0 && deadline < until)
			until = deadline;
		if (now >= until)
			return GM_OK;
		/* Slot 0 is ignored when negative, as poll() does with fds. */
		n = poll(pfd, 2, (int)(until - now));
		if (n < 0 && errno != EINTR)
			return GM_ERR_IO;
		if (n <= 0 || !pfd[0].revents)
			continue;
		got = read(w->ifd, buf, sizeof buf);
		for (char *p = buf; got > 0 && p < buf + got;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			if (ev->mask & IN_Q_OVERFLOW) {
				ahead_refresh(w);
				wake = 1;
			} else if (ev->len && (starts_with(ev->name, LEASE_PREFIX) ||
			                       starts_with(ev->name, RESV_PREFIX))) {
				wake = 1;
			} else if (ev->len && starts_with(ev->name, WAIT_PREFIX) &&
			           strcmp(ev->name, w->mine) < 0) {
				ahead_forget(&w->ah, ev->name);
				wake = 1;
			}
			p += sizeof *ev + ev->len;
		}
		if (wake && ahead_leaves_room(&w->ah))
			return GM_OK;
	}
}

/* ---- the registry lock -------------------------------------------------- */

/*
 * Anyone who can open the state directory can flock it, so a holder may be
 * hostile or hung.  A waiter waits in the kernel's queue for as long as the
 * holder gets on with it -- slow is not stuck: 200 launches at once on a
 * loaded machine wait seconds behind each other -- and gives up only on a
 * holder that provably is not getting on: stopped, ended (its descriptor
 * living on in another process), asleep without using the CPU, or holding
 * it far longer than any gpuman does.  Whoever keeps it waiting for
 * seconds is named.
 */
#define LOCK_QUIET_MS 1000  /* the usual wait: nothing to look at yet */
#define LOCK_CHECK_MS 500   /* then, how often a waiter looks at the holder */
#define LOCK_REPORT_MS 2000 /* one holder this long: name it */
#define LOCK_STUCK_MS 5000  /* stopped, or ended, this long: stuck */
#define LOCK_IDLE_MS 10000  /* asleep without CPU time this long: stuck */
/* gpuman holds the lock to read a few files and NVML and to fork: a
 * fraction of a second.  One holder this long is stuck however busy. */
#define LOCK_HOLD_MAX_MS 60000

/*
 * A thread blocked in flock(2) on its own open of the directory: the
 * kernel, not a timer, does the waiting, and the waiter stays free to
 * watch the holder, the deadline and cancellation.  If the waiter gives up
 * first, the thread drops the lock the moment it gets it.
 */
enum { LOCKER_WAITING, LOCKER_GOT, LOCKER_FAILED, LOCKER_ABANDONED };

struct locker {
	int fd;    /* its own open file description of the directory */
	int efd;   /* eventfd, readable once the thread is done */
	int state; /* LOCKER_*, atomic */
	int err;   /* errno of a failed flock */
	int refs;  /* atomic: the thread and the waiter */
};

static void locker_unref(struct locker *lk)
{
	if (__atomic_sub_fetch(&lk->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		if (lk->efd >= 0)
			close(lk->efd);
		free(lk);
	}
}

static void *locker_main(void *arg)
{
	struct locker *lk = arg;
	int expected = LOCKER_WAITING, got, rc;
	uint64_t one = 1;

	while ((rc = flock(lk->fd, LOCK_EX)) < 0 && errno == EINTR)
		;
	lk->err = rc < 0 ? errno : 0;
	got =
	    __atomic_compare_exchange_n(&lk->state, &expected, rc < 0 ? LOCKER_FAILED : LOCKER_GOT,
	                                0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	if (got) {
		if (write(lk->efd, &one, sizeof one) < 0)
			lk->err = errno;
	} else {
		close(lk->fd); /* abandoned: the lock goes with the descriptor */
	}
	locker_unref(lk);
	return NULL;
}

/* The pid that took an flock on the inode (dev, ino), from /proc/locks;
 * 0 if none is shown. */
static int lock_holder_pid(dev_t dev, ino_t ino)
{
	FILE *f = fopen("/proc/locks", "re");
	char line[256];
	int pid = 0;

	if (!f)
		return 0;
	while (!pid && fgets(line, sizeof line, f)) {
		char kind[16];
		unsigned maj, min;
		unsigned long long i;
		int p;

		if (strstr(line, "->")) /* a waiter, not a holder */
			continue;
		if (sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%llu", kind, &p, &maj, &min, &i) ==
		        5 &&
		    !strcmp(kind, "FLOCK") && i == (unsigned long long)ino && maj == major(dev) &&
		    min == minor(dev))
			pid = p;
	}
	fclose(f);
	return pid;
}

/* What we know of the holder that keeps us waiting. */
struct lock_holder {
	int pid;                /* 0: none seen */
	char who[320];          /* "pid N (user U: COMMAND)" */
	int64_t since_ms;       /* seen holding since (monotonic) */
	int64_t active_ms;      /* last seen using the CPU */
	int64_t stopped_ms;     /* stopped or ended since; 0: not */
	unsigned long long cpu; /* utime + stime, clock ticks */
	int reported;
};

/* Read state and CPU time of pid: 0, or -1 if it is gone. */
static int proc_stat(int pid, char *state, unsigned long long *cpu)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command may hold anything, ')' too */
	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", state, &ut,
	                 &st) != 3)
		return -1;
	*cpu = ut + st;
	return 0;
}

static void holder_describe(struct lock_holder *h)
{
	char path[64], cmd[256] = "?", raw[256], user[33] = "?", buf[2048], *p;
	unsigned uid;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/status", h->pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		if ((p = strstr(buf, "\nUid:\t")) && sscanf(p + 6, "%u", &uid) == 1)
			user_name(uid, user, sizeof user);
	}
	snprintf(path, sizeof path, "/proc/%d/cmdline", h->pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, raw, sizeof raw - 1);
		close(fd);
		while (n > 0 && raw[n - 1] == '\0')
			n--;
		for (ssize_t i = 0; i < n; i++)
			if (raw[i] == '\0')
				raw[i] = ' ';
		raw[n > 0 ? n : 0] = '\0';
		if (n > 0)
			text_printable(cmd, sizeof cmd, raw);
	}
	snprintf(h->who, sizeof h->who, "pid %d (user %s: %s)", h->pid, user, cmd);
}

/*
 * Look at the holder of the lock on (dev, ino) now.  Returns NULL while it
 * may be getting on, or why it is stuck.
 */
static const char *holder_check(struct lock_holder *h, dev_t dev, ino_t ino, int64_t now)
{
	unsigned long long cpu = 0;
	char state = '?';
	int pid = lock_holder_pid(dev, ino), gone;

	if (pid <= 0)
		return NULL; /* released meanwhile, or not shown to us */
	gone = proc_stat(pid, &state, &cpu) < 0 || state == 'Z' || state == 'X';
	if (pid != h->pid) {
		memset(h, 0, sizeof *h);
		h->pid = pid;
		h->since_ms = h->active_ms = now;
		h->cpu = cpu;
		holder_describe(h);
	}
	if (cpu != h->cpu || state == 'R' || state == 'D')
		h->active_ms = now;
	h->cpu = cpu;
	if (gone || state == 'T' || state == 't') {
		if (!h->stopped_ms)
			h->stopped_ms = now;
	} else {
		h->stopped_ms = 0;
	}
	if (h->stopped_ms && now - h->stopped_ms >= LOCK_STUCK_MS)
		return gone ? "has ended, and another process holds the lock through its descriptor"
		            : "is stopped";
	if (now - h->active_ms >= LOCK_IDLE_MS)
		return "sleeps without using the CPU";
	if (now - h->since_ms >= LOCK_HOLD_MAX_MS)
		return "has held it for a minute";
	return NULL;
}

static void registry_unlock(struct registry *reg)
{
	if (reg->held_fd < 0)
		return;
	flock(reg->held_fd, LOCK_UN);
	if (reg->held_fd != reg->lock_fd)
		close(reg->held_fd);
	reg->held_fd = -1;
}

/* Wait for the registry lock without a thread (none could be made). */
static enum gm_err lock_blocking(struct registry *reg, const struct waiting *w,
                                 const struct acquire_opts *opts, char *err, size_t len)
{
	while (flock(reg->lock_fd, LOCK_EX) < 0) {
		if (errno != EINTR)
			return gm_fail(GM_ERR_STATE, err, len, "cannot lock the registry '%s': %s",
			               reg->dir, strerror(errno));
		if (cancelled(w, opts))
			return gm_fail(GM_ERR_INTERRUPTED, err, len, "interrupted");
	}
	reg->held_fd = reg->lock_fd;
	return GM_OK;
}

/*
 * Take the registry lock: at once when it is free, else by queueing in the
 * kernel until it is, until deadline (monotonic ms, -1: none), until
 * cancelled, or until its holder is stuck.  GM_OK (reg->held_fd holds it),
 * GM_ERR_TIMEOUT (deadline or a stuck holder, named in err),
 * GM_ERR_INTERRUPTED, GM_ERR_STATE, GM_ERR_NOMEM.
 */
static enum gm_err registry_lock(struct registry *reg, int64_t deadline, const struct waiting *w,
                                 const struct acquire_opts *opts, char *err, size_t len)
{
	struct lock_holder h;
	struct locker *lk;
	struct stat st, lst;
	pthread_attr_t attr;
	pthread_t thread;
	sigset_t all, old;
	const char *stuck = NULL;
	int64_t start = monotonic_ms();
	enum gm_err rc = GM_OK;
	int perr, expected = LOCKER_WAITING;

	if (flock(reg->lock_fd, LOCK_EX | LOCK_NB) == 0) {
		reg->held_fd = reg->lock_fd;
		return GM_OK;
	}
	if (errno != EWOULDBLOCK && errno != EINTR)
		return gm_fail(GM_ERR_STATE, err, len, "cannot lock the registry '%s': %s",
		               reg->dir, strerror(errno));
	memset(&h, 0, sizeof h);
	lk = calloc(1, sizeof *lk);
	if (!lk)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	lk->refs = 2;
	lk->state = LOCKER_WAITING;
	lk->fd = open(reg->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	lk->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (lk->fd < 0 || lk->efd < 0 || fstat(reg->lock_fd, &st) < 0 || fstat(lk->fd, &lst) < 0 ||
	    st.st_dev != lst.st_dev || st.st_ino != lst.st_ino)
		goto no_thread;
	/* The thread takes no signal: the caller's handlers run here and
	 * interrupt our poll. */
	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	perr = pthread_create(&thread, &attr, locker_main, lk);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (perr)
		goto no_thread;
	for (;;) {
		struct pollfd pfd[2] = {{lk->efd, POLLIN, 0}, {w->cancel_fd, POLLIN, 0}};
		int64_t now = monotonic_ms(), until = now + LOCK_CHECK_MS;

		if (now - start < LOCK_QUIET_MS)
			until = start + LOCK_QUIET_MS;
		if (deadline >= 0 && deadline < until)
			until = deadline;
		poll(pfd, w->cancel_fd >= 0 ? 2 : 1, until > now ? (int)(until - now) : 0);
		if (__atomic_load_n(&lk->state, __ATOMIC_ACQUIRE) != LOCKER_WAITING)
			break;
		now = monotonic_ms();
		if (cancelled(w, opts)) {
			rc = gm_fail(GM_ERR_INTERRUPTED, err, len, "interrupted");
			break;
		}
		if (now - start >= LOCK_QUIET_MS)
			stuck = holder_check(&h, st.st_dev, st.st_ino, now);
		if (stuck) {
			rc =
			    gm_fail(GM_ERR_TIMEOUT, err, len,
			            "the registry lock ('%s') is held by %s, which %s; not waiting "
			            "for it (every gpuman of every user waits on it: ask its owner "
			            "or an admin to end it)",
			            reg->dir, h.who, stuck);
			break;
		}
		if (deadline >= 0 && now >= deadline) {
			rc = gm_fail(
			    GM_ERR_TIMEOUT, err, len,
			    "no GPU met the request within the wait: the registry lock ('%s') "
			    "was held by %s",
			    reg->dir, h.pid ? h.who : "another process");
			break;
		}
		if (h.pid && !h.reported && now - h.since_ms >= LOCK_REPORT_MS) {
			char msg[PATH_MAX + sizeof h.who + 64];

			h.reported = 1;
			snprintf(msg, sizeof msg, "the registry lock ('%s') is held by %s",
			         reg->dir, h.who);
			if (opts && opts->on_lock_wait)
				opts->on_lock_wait(opts->on_wait_data, msg);
		}
	}
	if (rc != GM_OK && __atomic_compare_exchange_n(&lk->state, &expected, LOCKER_ABANDONED, 0,
	                                               __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		locker_unref(lk); /* the thread closes its descriptor */
		return rc;
	}
	/* The thread is done: got it (even as we were giving up), or failed. */
	if (__atomic_load_n(&lk->state, __ATOMIC_ACQUIRE) == LOCKER_FAILED) {
		rc = gm_fail(GM_ERR_STATE, err, len, "cannot lock the registry '%s': %s", reg->dir,
		             strerror(lk->err));
		close(lk->fd);
	} else if (rc == GM_ERR_INTERRUPTED) {
		close(lk->fd);
	} else {
		reg->held_fd = lk->fd;
		rc = GM_OK;
	}
	locker_unref(lk);
	return rc;
no_thread:
	if (lk->fd >= 0)
		close(lk->fd);
	if (lk->efd >= 0)
		close(lk->efd);
	free(lk);
	return lock_blocking(reg, w, opts, err, len);
}

enum gm_err registry_acquire(struct registry *reg, struct gm_context *ctx,
                             const struct gm_request *req, const struct acquire_opts *opts,
                             struct gm_lease **out, char **explain, char *err, size_t len)
{
	struct attempt a;
	char ticket[128] = "";
	struct waiting w = {ctx->cancel_fd, reg, ticket, {0}, -1, 0};
	int ticket_fd = -1, locked = 0;
	int64_t deadline = req->has_wait && req->wait_ms >= 0 ? monotonic_ms() + req->wait_ms : -1;
	enum gm_err rc;

	if (reg->broker)
		return broker_acquire(reg->broker, &reg->place, ctx, req, opts, out, explain, err,
		                      len);
	*out = NULL;
	if (explain)
		*explain = NULL;
	if (opts && opts->reserve_ms > 0 &&
	    caps_reserve_ok(&reg->cfg, (unsigned)geteuid(), opts->reserve_ms, err, len) < 0)
		return GM_ERR_INVALID;
	memset(&a, 0, sizeof a);
	for (;;) {
		rc = registry_lock(reg, deadline, &w, opts, err, len);
		if (rc != GM_OK)
			goto done;
		locked = 1;
		attempt_release(&a);
		rc = attempt_run(reg, ctx, opts && !ticket[0] ? opts->snapshot : NULL, req,
		                 ticket[0] ? ticket : NULL, &a, err, len);
		if (rc != GM_OK)
			goto done;
		if (a.res.outcome == POLICY_OK) {
			rc = publish_lease(reg, &a, req, opts, out, err, len);
			goto done;
		}
		if (a.res.outcome == POLICY_NEVER || !req->has_wait) {
			rc = a.res.outcome == POLICY_NEVER ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE;
			gm_fail(rc, err, len, "%s",
			        rc == GM_ERR_NEVER
			            ? "no GPU of this machine can ever meet the request"
			            : "no GPU meets the request now");
			if (explain)
				*explain = pick_explain(a.snap, &a.res, req->count);
			goto done;
		}
		if (!ticket[0]) {
			/* Queue: the ticket's name fixes our place in line. */
			rc = write_ticket(reg, &a, req, opts, ticket, sizeof ticket, &ticket_fd,
			                  err, len);
			if (rc != GM_OK)
				goto done;
			ahead_refresh(&w);
			registry_unlock(reg);
			locked = 0;
			if (opts && opts->on_wait) {
				char *why = pick_explain(a.snap, &a.res, req->count);

				opts->on_wait(opts->on_wait_data, why ? why : "");
				free(why);
			}
		} else {
			registry_unlock(reg);
			locked = 0;
		}
		rc = wait_for_change(&w, deadline, opts);
		if (rc == GM_ERR_TIMEOUT) {
			gm_fail(rc, err, len, "no GPU met the request within the wait");
			if (explain)
				*explain = pick_explain(a.snap, &a.res, req->count);
			goto done;
		}
		if (rc == GM_ERR_INTERRUPTED) {
			gm_fail(rc, err, len, "interrupted while waiting");
			goto done;
		}
		if (rc != GM_OK) {
			gm_fail(rc, err, len, "waiting failed: %s", strerror(errno));
			goto done;
		}
	}
done:
	if (ticket_fd >= 0) {
		char path[PATH_MAX + 130];

		snprintf(path, sizeof path, "%s/%s", reg->dir, ticket);
		unlink(path);
		close(ticket_fd);
	}
	if (locked)
		registry_unlock(reg);
	if (w.ifd >= 0)
		close(w.ifd);
	ahead_release(&w.ah);
	attempt_release(&a);
	return rc;
}

enum gm_err registry_release(struct registry *reg, const char *id, char *err, size_t len)
{
	char name[128], user[33];
	struct stat st;
	int dfd;

	if (reg->broker)
		return broker_release_id(reg->broker, id, err, len);
	if (!*id || strchr(id, '/') || strlen(id) > 64)
		return gm_fail(GM_ERR_INVALID, err, len, "'%s' is not a reservation id", id);
	snprintf(name, sizeof name, RESV_PREFIX "%s", id);
	dfd = reg->lock_fd;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return gm_fail(GM_ERR_INVALID, err, len,
		               "no reservation '%s' (it may have expired; gpuman status lists "
		               "the live ones)",
		               id);
	user_name(st.st_uid, user, sizeof user);
	/* The sticky directory refuses others anyway; say so plainly first. */
	if (st.st_uid != geteuid() && geteuid() != 0)
		return gm_fail(GM_ERR_INVALID, err, len,
		               "reservation '%s' is %s's: only they (or root) can release it", id,
		               user);
	if (unlinkat(dfd, name, 0) < 0)
		return gm_fail(GM_ERR_STATE, err, len, "cannot release reservation '%s': %s", id,
		               strerror(errno));
	return GM_OK;
}

int registry_wake_fd(const struct registry *reg)
{
	return reg->place ? broker_place_fd(reg->place) : -1;
}

/* ---- the public lease API ----------------------------------------------- */

GM_API enum gm_err gm_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                           const struct gm_request *req, unsigned **indices, size_t *count,
                           char **explain)
{
	return registry_pick(ctx, snap, req, indices, count, NULL, explain);
}

enum gm_err registry_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                          const struct gm_request *req, unsigned **indices, size_t *count,
                          long *mig_pos, char **explain)
{
	struct registry *reg = NULL;
	struct attempt a;
	enum gm_err rc;

	*indices = NULL;
	*count = 0;
	if (explain)
		*explain = NULL;
	memset(&a, 0, sizeof a);
	rc = registry_open(&reg, NULL, 0);
	if (rc == GM_OK) {
		rc = attempt_run(reg, ctx, snap, req, NULL, &a, NULL, 0);
	} else {
		/* No usable registry (say, an unsafe state directory): choose
		 * from NVML alone rather than not at all; run will refuse. */
		a.snap = (struct gm_snapshot *)snap;
		a.snap_given = 1;
		if (pick_env_init(&a.env, snap) < 0)
			rc = GM_ERR_NOMEM;
		else {
			a.in.snap = snap;
			a.in.usable = a.env.usable;
			a.in.mig_usable = a.env.mig_usable;
			rc = policy_choose(&a.in, req, &a.res) < 0 ? GM_ERR_NOMEM : GM_OK;
		}
	}
	if (rc != GM_OK)
		goto done;
	if (explain && !(*explain = pick_explain(snap, &a.res, req->count))) {
		rc = GM_ERR_NOMEM;
		goto done;
	}
	if (a.res.outcome != POLICY_OK) {
		rc = a.res.outcome == POLICY_NEVER ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE;
		goto done;
	}
	*indices = malloc((a.res.count + 1) * sizeof **indices);
	if (!*indices) {
		rc = GM_ERR_NOMEM;
		goto done;
	}
	for (size_t i = 0; i < a.res.count; i++)
		(*indices)[i] =
		    a.res.mig ? snap->migs[a.res.chosen[i]].gpu : snap->gpus[a.res.chosen[i]].index;
	*count = a.res.count;
	if (mig_pos)
		*mig_pos = a.res.mig && a.res.count ? (long)a.res.chosen[0] : -1;
done:
	attempt_release(&a);
	registry_close(reg);
	return rc;
}

GM_API enum gm_err gm_acquire(struct gm_context *ctx, const struct gm_request *req,
                              struct gm_lease **out, char *errbuf, size_t errlen)
{
	struct registry *reg;
	char *explain = NULL;
	enum gm_err rc;

	*out = NULL;
	if (!ctx || !req)
		return gm_fail(GM_ERR_INVALID, errbuf, errlen, "no context or request");
	rc = registry_open(&reg, errbuf, errlen);
	if (rc != GM_OK)
		return rc;
	rc = registry_acquire(reg, ctx, req, NULL, out, &explain, errbuf, errlen);
	if (rc == GM_ERR_INTERRUPTED) {
		uint64_t count;

		/* consumed: the next gm_acquire waits again */
		if (read(ctx->cancel_fd, &count, sizeof count) < 0)
			count = 0;
	}
	if (explain && *explain && errbuf && errlen) {
		size_t used = strlen(errbuf);

		snprintf(errbuf + used, errlen - used, ":\n%s", explain);
	}
	free(explain);
	registry_close(reg);
	return rc;
}

GM_API void gm_cancel(struct gm_context *ctx)
{
	uint64_t one = 1;

	/* write(2) is async-signal-safe: callable from a handler. */
	if (ctx && ctx->cancel_fd >= 0 && write(ctx->cancel_fd, &one, sizeof one) < 0)
		return;
}

GM_API void gm_lease_release(struct gm_lease *lease)
{
	if (!lease)
		return;
	if (lease->broker) {
		broker_release(lease);
		if (lease->fd >= 0)
			close(lease->fd);
	} else if (lease->fd >= 0) {
		/* Remove first: a waiter woken by the close must not find it. */
		unlink(lease->path);
		close(lease->fd);
	}
	lease_free_fields(lease);
}

void lease_detach(struct gm_lease *lease)
{
	if (!lease)
		return;
	if (lease->fd >= 0)
		close(lease->fd);
	lease_free_fields(lease);
}

GM_API const char *gm_lease_id(const struct gm_lease *l)
{
	return l->id;
}
GM_API size_t gm_lease_gpu_count(const struct gm_lease *l)
{
	return l->gpu_count;
}
GM_API unsigned gm_lease_gpu_index(const struct gm_lease *l, size_t i)
{
	return i < l->gpu_count ? l->indices[i] : 0;
}
GM_API const char *gm_lease_gpu_uuid(const struct gm_lease *l, size_t i)
{
	return i < l->gpu_count ? l->uuids[i] : "";
}
GM_API const char *gm_lease_cuda_visible(const struct gm_lease *l)
{
	return l->cuda_visible;
}
GM_API const char *gm_lease_indices(const struct gm_lease *l)
{
	return l->indices_text;
}
GM_API double gm_lease_mem_fraction(const struct gm_lease *l)
{
	return l->mem_fraction;
}
GM_API int gm_lease_fd(const struct gm_lease *l)
{
	return l->fd;
}
