/*
 * fence.c - a job's devices are its lease: the cgroup of one lease with a
 * device filter that refuses the GPU nodes it does not hold (fence.h).
 * Two mechanisms behind one ops table, chosen once: cgroup v2, where the
 * filter is a BPF_PROG_TYPE_CGROUP_DEVICE program of a few instructions
 * (fence_rule.c builds it) loaded with bpf(2) (no BPF toolchain, as
 * systemd, runc and Slurm do) and attached with BPF_F_ALLOW_MULTI so that
 * programs others attached above keep working (fence_bpf.c); and the v1
 * devices controller, whose devices.deny takes the same list.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "fence.h"
#include "util.h"

/* ---- cgroupfs ------------------------------------------------------------- */

/* A lease's id starts with its grant's time; a login session's with
 * "session-". */
static int lease_id(const char *id)
{
	return *id >= '0' && *id <= '9';
}

void fence_path(const struct fence *f, const char *id, char *out, size_t len)
{
	char scope[PATH_MAX];

	if (f->scopes && lease_id(id)) {
		fence_scope_dir(f, id, scope, sizeof scope);
		snprintf(out, len, "%.4000s/job", scope);
		return;
	}
	snprintf(out, len, "%s/%s", f->root, id);
}

/* Lease ids are the broker's ("<ms>-<pid>-<hex>"); nothing else names a
 * directory of ours. */
static int id_ok(const char *id)
{
	return *id && *id != '.' &&
	       strspn(id, "0123456789abcdefghijklmnopqrstuvwxyz-") == strlen(id) && strlen(id) < 64;
}

static int write_file(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	size_t len = strlen(text);
	ssize_t n;
	int fd, saved;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = write(fd, text, len);
	saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)len ? 0 : -1;
}

static long read_pids(const char *dir, int *out, size_t cap)
{
	char path[PATH_MAX];
	long n = 0;
	FILE *f;
	int pid;

	snprintf(path, sizeof path, "%s/cgroup.procs", dir);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fscanf(f, "%d", &pid) == 1) {
		if ((size_t)n < cap)
			out[n] = pid;
		n++;
	}
	fclose(f);
	return n;
}

static void sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&t, NULL);
}

/*
 * GPUMAN_FENCE_MOVE_DELAY_MS shows the kernel's slow moves where they are
 * not (a test's machine): a move waits first, and it holds the cgroup lock
 * while it waits, as the kernel's does (cgroup_mutex, through its grace
 * period); a filter's change and a cgroup's end wait for that lock.  With
 * ":shared", a move within the delay of the last one's end does not wait:
 * the kernel's rcu_sync stays in its "grace period passed" state that long
 * (measured: 0.06 ms 3 ms after another move, 5.9 ms 30 ms after).
 */
static pthread_mutex_t cgroup_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t last_move_ms; /* under cgroup_lock */

static void lock_as_kernel(const struct fence *f)
{
	if (f->move_delay_ms > 0)
		pthread_mutex_lock(&cgroup_lock);
}

static void unlock_as_kernel(const struct fence *f)
{
	if (f->move_delay_ms > 0)
		pthread_mutex_unlock(&cgroup_lock);
}

/* A move: pid into dir, after the delay, under the lock (see above). */
static int move_pid(const struct fence *f, const char *dir, const char *pid)
{
	int rc;

	lock_as_kernel(f);
	if (f->move_delay_ms > 0 &&
	    !(f->move_delay_shared && monotonic_ms() - last_move_ms < f->move_delay_ms))
		sleep_ms(f->move_delay_ms);
	rc = write_file(dir, "cgroup.procs", pid);
	last_move_ms = monotonic_ms();
	unlock_as_kernel(f);
	return rc;
}

static int cg_enter(const struct fence *f, const char *id, int pid, char *err, size_t len)
{
	char dir[PATH_MAX], text[24];

	if (!id_ok(id))
		return gm_fail(GM_ERR_INVALID, err, len, "'%s' is no lease id", id), -1;
	fence_path(f, id, dir, sizeof dir);
	snprintf(text, sizeof text, "%d", pid);
	if (move_pid(f, dir, text) < 0)
		return gm_fail(GM_ERR_IO, err, len, "cannot move pid %d into '%s': %s", pid, dir,
		               strerror(errno)),
		       -1;
	/* In a scope: what pid forked while systemd had it in the scope
	 * itself (a running library caller can) follows it into the filter. */
	if (f->scopes && lease_id(id)) {
		char scope[PATH_MAX];
		int pids[256];
		long n;

		fence_scope_dir(f, id, scope, sizeof scope);
		for (int round = 0; round < 8 && (n = read_pids(scope, pids, 256)) > 0; round++)
			for (long i = 0; i < n && i < 256; i++) {
				snprintf(text, sizeof text, "%d", pids[i]);
				write_file(dir, "cgroup.procs", text);
			}
	}
	return 0;
}

static int cg_move_to(const struct fence *f, const char *path, int pid)
{
	char text[24];

	snprintf(text, sizeof text, "%d", pid);
	return move_pid(f, path, text);
}

/* In a scope, its own processes too: forked while systemd had the job in
 * the scope itself, before it was moved into "job", they are the job's. */
static long cg_pids(const struct fence *f, const char *id, int *out, size_t cap)
{
	char dir[PATH_MAX];
	long n, m;

	if (!id_ok(id))
		return -1;
	fence_path(f, id, dir, sizeof dir);
	n = read_pids(dir, out, cap);
	if (!f->scopes || !lease_id(id) || n < 0 || (size_t)n >= cap)
		return n;
	fence_scope_dir(f, id, dir, sizeof dir);
	m = read_pids(dir, out + n, cap - (size_t)n);
	return m > 0 ? n + m : n;
}

/* /proc/PID/cgroup's line of the hierarchy: "0::/path" for v2, or
 * "N:devices:/path" (the controller among others) for v1. */
static int cg_where(const struct fence *f, int pid, int v2, char *out, size_t len)
{
	char path[64], line[PATH_MAX];
	int found = -1;
	FILE *file;

	snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
	file = fopen(path, "re");
	if (!file)
		return -1;
	while (found < 0 && fgets(line, sizeof line, file)) {
		char *ctl = strchr(line, ':'), *rest = ctl ? strchr(ctl + 1, ':') : NULL;

		if (!rest)
			continue;
		*rest++ = '\0';
		*ctl++ = '\0';
		rest[strcspn(rest, "\n")] = '\0';
		if (v2 ? !strncmp(line, "0", 2) && !*ctl
		       : (!strcmp(ctl, "devices") || strstr(ctl, "devices,") ||
		          (strlen(ctl) > 8 && !strcmp(ctl + strlen(ctl) - 8, ",devices")))) {
			snprintf(out, len, "%s%s", f->mount, strcmp(rest, "/") ? rest : "");
			found = 0;
		}
	}
	fclose(file);
	return found;
}

static int v2_where(const struct fence *f, int pid, char *out, size_t len)
{
	return cg_where(f, pid, 1, out, len);
}

static int v1_where(const struct fence *f, int pid, char *out, size_t len)
{
	return cg_where(f, pid, 0, out, len);
}

/* Kill what is in dir until nothing is (v1 has no cgroup.kill; a process
 * forked meanwhile shows up in the next reading), then remove it. */
static int cg_end_locked(const struct fence *f, const char *id, int v2, char *err, size_t len)
{
	char dir[PATH_MAX], scope[PATH_MAX] = "";
	int64_t give_up = monotonic_ms() + FENCE_END_PATIENCE_MS;
	struct stat st;

	if (!id_ok(id))
		return 0;
	fence_path(f, id, dir, sizeof dir);
	if (stat(dir, &st) < 0)
		return 0; /* never placed anything */
	if (v2)
		write_file(dir, "cgroup.kill", "1");
	if (f->scopes && lease_id(id))
		fence_scope_dir(f, id, scope, sizeof scope);
	for (long wait = 0;; wait = wait ? wait * 2 : 1) {
		int pids[256];
		long n = read_pids(dir, pids, 256);

		if (n < 0)
			break;
		for (long i = 0; i < n && i < 256; i++)
			kill(pids[i], SIGKILL);
		/* A scope's own processes (systemd's to stop, once empty) are
		 * the job's too. */
		if (scope[0]) {
			long m = read_pids(scope, pids, 256);

			for (long i = 0; i < m && i < 256; i++)
				kill(pids[i], SIGKILL);
			n += m > 0 ? m : 0;
		}
		if (n == 0 && rmdir(dir) == 0)
			return 0;
		if (monotonic_ms() >= give_up) {
			gm_fail(
			    GM_ERR_IO, err, len,
			    "'%s' still holds %ld process%s after SIGKILL (stuck in the kernel?)",
			    dir, n, n == 1 ? "" : "es");
			return -1;
		}
		sleep_ms(wait > 20 ? 20 : wait);
	}
	if (rmdir(dir) == 0 || errno == ENOENT)
		return 0;
	gm_fail(GM_ERR_IO, err, len, "cannot remove '%s': %s", dir, strerror(errno));
	return -1;
}

static int cg_end(const struct fence *f, const char *id, int v2, char *err, size_t len)
{
	int rc;

	lock_as_kernel(f);
	rc = cg_end_locked(f, id, v2, err, len);
	unlock_as_kernel(f);
	return rc;
}

static int v2_end(const struct fence *f, const char *id, char *err, size_t len)
{
	return cg_end(f, id, 1, err, len);
}

static int v1_end(const struct fence *f, const char *id, char *err, size_t len)
{
	return cg_end(f, id, 0, err, len);
}

/* mkdir the lease's cgroup: 1 made, 0 there already, -1 error. */
static int make_dir(const struct fence *f, const char *id, char *dir, size_t dlen, char *err,
                    size_t len)
{
	if (!id_ok(id)) {
		gm_fail(GM_ERR_INVALID, err, len, "'%s' is no lease id", id);
		return -1;
	}
	fence_path(f, id, dir, dlen);
	if (mkdir(dir, 0755) == 0)
		return 1;
	if (errno == EEXIST)
		return 0;
	gm_fail(GM_ERR_IO, err, len, "cannot create the cgroup '%s': %s", dir, strerror(errno));
	return -1;
}

/* ---- v2: a BPF device program (fence_bpf.c) -------------------------------- */

static int v2_create_locked(const struct fence *f, const char *id, const struct fence_rule *r,
                            char *err, size_t len)
{
	char dir[PATH_MAX];
	int made = make_dir(f, id, dir, sizeof dir, err, len), rc;

	if (made <= 0)
		return made;
	/* The attachment holds the program: it outlives a restart of the
	 * broker. */
	rc = fence_bpf_attach(dir, r, err, len);
	if (rc < 0)
		rmdir(dir);
	return rc;
}

/* A new rule for a cgroup that lives on (a login session's, when its
 * user's leases change). */
static int v2_update_locked(const struct fence *f, const char *id, const struct fence_rule *r,
                            const struct fence_rule *all, char *err, size_t len)
{
	char dir[PATH_MAX];

	(void)all;
	if (make_dir(f, id, dir, sizeof dir, err, len) < 0)
		return -1;
	return fence_bpf_replace(dir, r, err, len);
}

/* ---- v1: the devices controller ------------------------------------------ */

static int v1_create_locked(const struct fence *f, const char *id, const struct fence_rule *r,
                            char *err, size_t len)
{
	char dir[PATH_MAX], text[64];
	int made = make_dir(f, id, dir, sizeof dir, err, len);

	if (made <= 0)
		return made;
	/* It starts as its parent, allowing all; each line an exception. */
	for (size_t i = 0; i < r->count; i++) {
		snprintf(text, sizeof text, "%c %u:%u rwm", r->devs[i].type, r->devs[i].major,
		         r->devs[i].minor);
		if (write_file(dir, "devices.deny", text) < 0) {
			gm_fail(GM_ERR_IO, err, len, "cannot write '%s' to '%s/devices.deny': %s",
			        text, dir, strerror(errno));
			rmdir(dir);
			return -1;
		}
	}
	return 0;
}

/* Each device a rule could name allowed or refused as r says: an allow
 * removes just that exception, so nothing opens that should not. */
static int v1_update_locked(const struct fence *f, const char *id, const struct fence_rule *r,
                            const struct fence_rule *all, char *err, size_t len)
{
	char dir[PATH_MAX], text[64];

	if (make_dir(f, id, dir, sizeof dir, err, len) < 0)
		return -1;
	for (size_t i = 0; i < all->count; i++) {
		const struct fence_dev *d = &all->devs[i];
		int deny = fence_rule_refuses(r, d);

		snprintf(text, sizeof text, "%c %u:%u rwm", d->type, d->major, d->minor);
		if (write_file(dir, deny ? "devices.deny" : "devices.allow", text) < 0) {
			gm_fail(GM_ERR_IO, err, len, "cannot write '%s' to '%s': %s", text, dir,
			        strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* The cgroup lock's holders among the operations (see move_pid). */
static int v2_create(const struct fence *f, const char *id, const struct fence_rule *r, char *err,
                     size_t len)
{
	int rc;

	lock_as_kernel(f);
	rc = v2_create_locked(f, id, r, err, len);
	unlock_as_kernel(f);
	return rc;
}

static int v1_create(const struct fence *f, const char *id, const struct fence_rule *r, char *err,
                     size_t len)
{
	int rc;

	lock_as_kernel(f);
	rc = v1_create_locked(f, id, r, err, len);
	unlock_as_kernel(f);
	return rc;
}

static int v2_update(const struct fence *f, const char *id, const struct fence_rule *r,
                     const struct fence_rule *all, char *err, size_t len)
{
	int rc;

	lock_as_kernel(f);
	rc = v2_update_locked(f, id, r, all, err, len);
	unlock_as_kernel(f);
	return rc;
}

static int v1_update(const struct fence *f, const char *id, const struct fence_rule *r,
                     const struct fence_rule *all, char *err, size_t len)
{
	int rc;

	lock_as_kernel(f);
	rc = v1_update_locked(f, id, r, all, err, len);
	unlock_as_kernel(f);
	return rc;
}

static const struct fence_ops fence_v2 = {
    "cgroup v2 device program",
    v2_create,
    cg_enter,
    v2_where,
    cg_move_to,
    v2_end,
    cg_pids,
    v2_update,
};

static const struct fence_ops fence_v1 = {
    "cgroup v1 devices controller",
    v1_create,
    cg_enter,
    v1_where,
    cg_move_to,
    v1_end,
    cg_pids,
    v1_update,
};

/* ---- choosing ------------------------------------------------------------- */

/* Does the kernel offer the favordynmods mount option (Linux 6.1+)? */
static int kernel_has_favordynmods(void)
{
	char *text = read_text_file("/sys/kernel/cgroup/features");
	int has = text && strstr(text, "favordynmods");

	free(text);
	return has;
}

/* The mount point of the cgroup2 hierarchy (v2) or of the v1 hierarchy
 * with the devices controller; *slow: whether each move into a cgroup
 * there waits an RCU grace period (mounted without favordynmods where
 * the kernel has it). */
static int find_mount(int v2, char *out, size_t len, int *slow, int *fast)
{
	char dev[256], dir[PATH_MAX], type[64], opts[1024];
	FILE *f = fopen("/proc/self/mounts", "re");
	int found = -1;

	if (!f)
		return -1;
	while (found < 0 &&
	       fscanf(f, "%255s %4095s %63s %1023s %*d %*d", dev, dir, type, opts) == 4) {
		int devices = 0, favor = 0;

		for (char *o = strtok(opts, ","); o; o = strtok(NULL, ",")) {
			devices |= !strcmp(o, "devices");
			favor |= !strcmp(o, "favordynmods");
		}
		if (v2 ? !strcmp(type, "cgroup2") : !strcmp(type, "cgroup") && devices) {
			str_copy(out, len, dir);
			*slow = !favor && kernel_has_favordynmods();
			*fast = favor;
			found = 0;
		}
	}
	fclose(f);
	return found;
}

/* The folder of the jobs' cgroups under the hierarchy: GPUMAN_FENCE_CGROUP
 * (one plain name), else "gpuman".  Two brokers on one machine (the test
 * suites run side by side) must not sweep each other's cgroups. */
static const char *cgroup_name(void)
{
	const char *name = getenv("GPUMAN_FENCE_CGROUP");

	if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
	    strlen(name) > 64)
		return "gpuman";
	return name;
}

/* Can the mechanism work here?  A probe cgroup with an empty rule. */
static int probe(struct fence *f, const struct fence_ops *ops, int v2, char *err, size_t len)
{
	struct fence_rule none = FENCE_RULE_INIT;
	char id[64];

	if (find_mount(v2, f->mount, sizeof f->mount, &f->slow_moves, &f->fast_moves) < 0) {
		gm_fail(GM_ERR_STATE, err, len,
		        v2 ? "no cgroup v2 hierarchy is mounted"
		           : "no cgroup v1 hierarchy with the devices controller is mounted");
		return -1;
	}
	snprintf(f->root, sizeof f->root, "%s/%s", f->mount, cgroup_name());
	if (mkdir(f->root, 0755) < 0 && errno != EEXIST) {
		gm_fail(GM_ERR_STATE, err, len,
		        "cannot create '%s': %s (a container without cgroup delegation?)", f->root,
		        strerror(errno));
		return -1;
	}
	snprintf(id, sizeof id, "0-%d-0", (int)getpid()); /* no lease's id */
	if (ops->create(f, id, &none, err, len) < 0)
		return -1;
	ops->end(f, id, NULL, 0);
	f->ops = ops;
	return 0;
}

/* Ended leases' cgroups a broker before us could not remove (rmdir
 * removes only empty ones: a restored lease's job keeps its own). */
static void sweep(const struct fence *f)
{
	DIR *dir = opendir(f->root);
	char path[PATH_MAX];

	for (struct dirent *e; dir && (e = readdir(dir));)
		if (id_ok(e->d_name)) {
			snprintf(path, sizeof path, "%s/%s", f->root, e->d_name);
			rmdir(path);
		}
	if (dir)
		closedir(dir);
}

/* Where systemd manages the cgroups, each lease's is a scope it makes:
 * its slice and units named after our folder. */
static void choose_scopes(struct fence *f)
{
	char err[160] = "", rel[512];
	const char *name = cgroup_name();

	if (!fence_systemd_wanted())
		return;
	snprintf(f->slice, sizeof f->slice, "%s.slice", name);
	if (fence_slice_path(f->slice, rel, sizeof rel) < 0) {
		name = "gpuman";
		snprintf(f->slice, sizeof f->slice, "%s.slice", name);
		fence_slice_path(f->slice, rel, sizeof rel);
	}
	str_copy(f->unit_prefix, sizeof f->unit_prefix, name);
	snprintf(f->scope_root, sizeof f->scope_root, "%s/%s", f->mount, rel);
	if (fence_systemd_load(err, sizeof err) < 0) {
		snprintf(f->scope_why, sizeof f->scope_why,
		         "systemd runs, but %.80s: jobs' cgroups are folders under '%.60s'", err,
		         f->root);
		return;
	}
	f->scopes = 1;
}

void fence_choose(struct fence *f)
{
	const char *want = getenv("GPUMAN_FENCE");
	char e2[120] = "", e1[120] = ""; /* both fit f->why */

	memset(f, 0, sizeof *f);
	if (!want || !*want)
		want = "auto";
	if (strcmp(want, "auto") && strcmp(want, "v2") && strcmp(want, "v1")) {
		snprintf(f->why, sizeof f->why, "turned off (GPUMAN_FENCE=%.32s)", want);
		return;
	}
	if (geteuid() != 0) {
		str_copy(f->why, sizeof f->why, "the lease broker does not run as root");
		return;
	}
	if ((strcmp(want, "v1") && probe(f, &fence_v2, 1, e2, sizeof e2) == 0) ||
	    (strcmp(want, "v2") && probe(f, &fence_v1, 0, e1, sizeof e1) == 0)) {
		const char *delay = getenv("GPUMAN_FENCE_MOVE_DELAY_MS");

		sweep(f);
		choose_scopes(f);
		if (delay && *delay) {
			char *end = NULL;

			f->move_delay_ms = strtol(delay, &end, 10);
			f->move_delay_shared = end && !strcmp(end, ":shared");
			/* as on such a kernel: a waiting job is placed as it waits */
			if (f->move_delay_ms > 0)
				f->fast_moves = 0;
		}
		return;
	}
	f->ops = NULL;
	snprintf(f->why, sizeof f->why, "%s%s%s", e2, e2[0] && e1[0] ? "; " : "", e1);
}
