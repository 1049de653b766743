/*
 * fence.c - the broker's kernel fence (issue 21): each job started
 * under a lease is placed, before its first instruction, in a cgroup of
 * its own whose device filter refuses every GPU node its lease does not
 * hold (lib/fence.h), and when the lease ends whatever is left in that
 * cgroup is killed before the GPUs go to anybody else.
 *
 * The client starts the job stopped (waiting on a pipe) and asks, on the
 * lease's own connection, {"op":"fence","pid":N}; the broker checks that N
 * is a process of the connection's user (the kernel's word: SO_PEERCRED,
 * then /proc, with a pidfd held across the check so that a reused pid is
 * caught), moves it and answers {"op":"fenced"}; only then does the job
 * exec.  "keep":true names the lease's supervisor (a batch task's runner,
 * a library caller itself), which lives in the cgroup with its job but is
 * moved back where it came from, alive, when the lease ends.
 *
 * The mechanism is chosen once at start-up (fence_choose); without one
 * the answer says so ("enforced":false and why) and the job runs as
 * before, and status shows that placement is advisory, and why.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"

static struct fence fence;
/* GPUMAN_FENCE_TRACE=1: one line of the log for each placement, with the
 * time of each of its steps (bench/waiters.sh WAITERS_FENCE_TRACE=1 sums
 * them up).  Where a move waits a grace period only a machine of that
 * kind shows where a job's start goes; this says it there in one run. */
static int trace;

/* Supervisors to move back out of a lease's cgroup when it ends. */
struct keeper {
	char id[64];
	int pid;
	uint64_t start;
	char origin[PATH_MAX];
	struct keeper *next;
};
static struct keeper *keepers;

/* A lease's end whose keepers go home on the worker (end_run): they are
 * supervisors still, on record and spared, until they are home. */
struct end_job {
	struct work w;
	char id[64];            /* the lease's */
	struct keeper *keepers; /* to move home, then freed */
	struct conn *c;         /* its release, answered once they are home */
	json_t *answer;
	int rc;
	char err[300];
	struct end_job *next;
};
static struct end_job *ending;

/* A grant whose job waits placed, its filter changed on the worker
 * (daemon_fence_granted). */
struct grant_job {
	struct work w; /* its key: the lease's id */
	struct conn *c;
	json_t *answer; /* the grant, sent when done */
	char user[33];
	int pid, rc;
	struct fence_rule rule, all;
	char err[300];
	uint64_t queued_us, began_us, ended_us;
	struct grant_job *next;
};
static struct grant_job *granting;

/* The keeper of pid (of that start, or any with start 0): one of a live
 * lease, or one on its way home. */
static const struct keeper *keeper_of(int pid, uint64_t start)
{
	for (const struct keeper *k = keepers; k; k = k->next)
		if (k->pid == pid && (!start || k->start == start))
			return k;
	for (const struct end_job *e = ending; e; e = e->next)
		for (const struct keeper *k = e->keepers; k; k = k->next)
			if (k->pid == pid && (!start || k->start == start))
				return k;
	return NULL;
}

/*
 * The fence's record, beside the state file (<state>.fence, root's, in
 * the state directory): the leases whose cgroups this broker made and the
 * keepers it moved, with where they came from.  A broker after it (a
 * restart, a crash) reads it back: the keepers of restored leases go home
 * at their end as they would have, and the cgroups of leases that ended
 * meanwhile are ended now (keepers home first), never left running with
 * their filter.  Only the cgroups named here: another broker's, on the
 * same hierarchy, are not ours to end.  Not synced: nothing it names
 * outlives the machine.
 */
struct fenced {
	char id[64];
	struct fenced *next;
};
static struct fenced *fenced_ids;

static void keepers_json(json_t *out, const struct keeper *k)
{
	for (; k; k = k->next) {
		json_t *o = json_object();

		json_object_set_new(o, "id", json_string(k->id));
		json_object_set_new(o, "pid", json_integer(k->pid));
		json_object_set_new(o, "start", json_integer((json_int_t)k->start));
		json_object_set_new(o, "origin", json_string(k->origin));
		json_array_append_new(out, o);
	}
}

static void record_write(const struct daemon *d)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], *text;
	json_t *doc = json_object(), *ids = json_array(), *ks = json_array();
	int fd, ok = 0;
	size_t n;

	for (const struct fenced *f = fenced_ids; f; f = f->next)
		json_array_append_new(ids, json_string(f->id));
	keepers_json(ks, keepers);
	for (const struct end_job *e = ending; e; e = e->next)
		keepers_json(ks, e->keepers);
	json_object_set_new(doc, "cgroups", ids);
	json_object_set_new(doc, "keepers", ks);
	snprintf(path, sizeof path, "%s.fence", d->state_path);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST && unlink(tmp) == 0) /* left by a crash */
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	/* One write: json_dumpfd() writes each token on its own, some 20
	 * system calls each time a job's cgroup is made or ended. */
	text = json_dumps(doc, JSON_COMPACT);
	n = text ? strlen(text) : 0;
	if (fd >= 0 && text && write(fd, text, n) == (ssize_t)n && close(fd) == 0) {
		fd = -1;
		ok = rename(tmp, path) == 0;
	}
	free(text);
	if (!ok)
		daemon_say("cannot write '%s': %s (a broker after me would not know the jobs' "
		           "cgroups)",
		           path, strerror(errno));
	if (fd >= 0)
		close(fd);
	json_decref(doc);
}

static int fenced_has(const char *id)
{
	for (const struct fenced *f = fenced_ids; f; f = f->next)
		if (!strcmp(f->id, id))
			return 1;
	return 0;
}

static void fenced_add(const char *id)
{
	struct fenced *f;

	if (fenced_has(id) || !(f = calloc(1, sizeof *f)))
		return;
	str_copy(f->id, sizeof f->id, id);
	f->next = fenced_ids;
	fenced_ids = f;
}

/* Forget id; was it there? */
static int fenced_drop(const char *id)
{
	for (struct fenced **pp = &fenced_ids; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->id, id)) {
			struct fenced *f = *pp;

			*pp = f->next;
			free(f);
			return 1;
		}
	return 0;
}

void daemon_fence_init(void)
{
	const char *t = getenv("GPUMAN_FENCE_TRACE");

	trace = t && !strcmp(t, "1");
	fence_choose(&fence);
	if (fence.ops && fence.scopes)
		daemon_say("placement enforced by the kernel: %s, each job in a systemd scope "
		           "of %s under '%s'",
		           fence.ops->name, fence.slice, fence.scope_root);
	else if (fence.ops)
		daemon_say("placement enforced by the kernel: %s, jobs' cgroups under '%s'%s%s",
		           fence.ops->name, fence.root, fence.scope_why[0] ? "; " : "",
		           fence.scope_why);
	else
		daemon_say("placement not enforced (advisory): %s", fence.why);
	if (fence.ops && fence.slow_moves)
		daemon_say(
		    "each job's start waits a kernel RCU grace period (moving it into its "
		    "cgroup; several ms) unless it waited in the line, where it moved as it "
		    "waited: '%s' is mounted without favordynmods, which avoids that for the "
		    "whole machine (gpuman-trust(7))",
		    fence.mount);
}

void daemon_fence_view(json_t *view)
{
	json_t *o = json_object();

	json_object_set_new(o, "enforced", json_boolean(fence.ops != NULL));
	if (fence.ops)
		json_object_set_new(o, "mechanism", json_string(fence.ops->name));
	else
		json_object_set_new(o, "why", json_string(fence.why));
	if (fence.ops && fence.scopes)
		json_object_set_new(o, "slice", json_string(fence.slice));
	json_object_set_new(view, "placement", o);
}

/* Are all of pid's uids (real, effective, saved, file system) uid?  A
 * set-uid program the user started is not theirs to fence. */
static int proc_all_uids(int pid, unsigned uid)
{
	char path[64], line[256];
	unsigned r, e, s, f;
	int ok = 0;
	FILE *file;

	snprintf(path, sizeof path, "/proc/%d/status", pid);
	file = fopen(path, "re");
	if (!file)
		return 0;
	while (fgets(line, sizeof line, file))
		if (sscanf(line, "Uid: %u %u %u %u", &r, &e, &s, &f) == 4) {
			ok = r == uid && e == uid && s == uid && f == uid;
			break;
		}
	fclose(file);
	return ok;
}

/* A process's parent and its pid in its own (innermost) pid namespace, from
 * /proc/PID/status.  0, or -1 when it is gone. */
static int proc_ns_ids(int pid, int *ppid, int *ns_pid)
{
	char path[64], line[256];
	FILE *file;

	snprintf(path, sizeof path, "/proc/%d/status", pid);
	file = fopen(path, "re");
	if (!file)
		return -1;
	*ppid = *ns_pid = 0;
	while (fgets(line, sizeof line, file)) {
		if (!strncmp(line, "PPid:", 5))
			*ppid = atoi(line + 5);
		else if (!strncmp(line, "NSpid:", 6)) {
			char *last = strrchr(line, '\t');

			*ns_pid = atoi(last ? last : line + 6);
		}
	}
	fclose(file);
	return 0;
}

/*
 * The pid, as the broker numbers it, of the process that the client (the
 * peer, whose pid the kernel gave) names pid: the same number where both
 * share a pid namespace; inside a container's, the peer itself or one of
 * its children whose pid there is that number (a job waits as the child of
 * its supervisor).  0 when no such process is found: a pid from another
 * namespace must never name a process of the broker's that happens to
 * bear the number.
 */
static int pid_here(int peer, int pid)
{
	struct stat mine, theirs;
	char path[64];
	int ppid, ns_pid, found = 0;
	DIR *dir;

	snprintf(path, sizeof path, "/proc/%d/ns/pid", peer);
	if (stat("/proc/self/ns/pid", &mine) < 0 || stat(path, &theirs) < 0 ||
	    (mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev))
		return pid;
	if (proc_ns_ids(peer, &ppid, &ns_pid) == 0 && ns_pid == pid)
		return peer;
	dir = opendir("/proc");
	for (struct dirent *e; dir && !found && (e = readdir(dir));) {
		int q = atoi(e->d_name);

		if (q > 0 && proc_ns_ids(q, &ppid, &ns_pid) == 0 && ppid == peer && ns_pid == pid)
			found = q;
	}
	if (dir)
		closedir(dir);
	return found;
}

/* Add what l holds to g (arrays with room for every GPU of every lease). */
static int grant_add(const struct gm_snapshot *snap, const struct blease *l, struct fence_grant *g,
                     unsigned *minors, struct fence_slice *slices, char *why, size_t len)
{
	for (size_t i = 0; i < l->n; i++) {
		long pos = snapshot_position(snap, l->indices[i]);
		const struct gm_gpu *gpu = pos >= 0 ? &snap->gpus[pos] : NULL;
		size_t k;

		if (!gpu || gpu->minor < 0) {
			snprintf(why, len,
			         "GPU %u's device node is unknown (NVML gives no minor number)",
			         l->indices[i]);
			return -1;
		}
		if (!l->migs[i][0]) {
			minors[g->gpu_count++] = (unsigned)gpu->minor;
			continue;
		}
		for (k = 0; k < snap->mig_count && strcmp(snap->migs[k].uuid, l->migs[i]); k++)
			;
		if (k == snap->mig_count) {
			snprintf(why, len, "MIG slice %s is gone", l->migs[i]);
			return -1;
		}
		slices[g->slice_count++] =
		    (struct fence_slice){(unsigned)gpu->minor, snap->migs[k].gpu_instance_id,
		                         snap->migs[k].compute_instance_id};
	}
	return 0;
}

/*
 * The machine's GPU nodes (lib/fence.h), read once a reading, on the loop:
 * read for each placement, /dev and /proc/devices were a tenth of the
 * broker's work a job.  Nodes come and go with the driver and its GPUs,
 * which a new reading sees, and placement takes a new reading when its
 * last is SNAPSHOT_REUSE_MS old.  The MIG capability table, fixed while
 * the driver is loaded, is carried over from the last reading.
 */
static struct fence_machine machine = FENCE_MACHINE_INIT;
static const struct gm_snapshot *machine_snap;
static int64_t machine_taken;

static const struct fence_machine *machine_of(const struct gm_snapshot *snap)
{
	const char *dev = getenv("GPUMAN_DEV_DIR"), *proc = getenv("GPUMAN_PROC_DIR");

	struct fence_machine now = FENCE_MACHINE_INIT;

	if (snap == machine_snap && snap->taken_ms == machine_taken)
		return &machine;
	machine_snap = NULL;
	if (fence_machine_read(&now, snap, dev && *dev ? dev : "/dev",
	                       proc && *proc ? proc : "/proc", &machine) < 0) {
		fence_machine_release(&now);
		return NULL;
	}
	fence_machine_release(&machine);
	machine = now;
	machine_snap = snap;
	machine_taken = snap->taken_ms;
	return &machine;
}

/* The devices to refuse, on this machine now: to the job of lease one, or
 * (one NULL) to the login sessions of uid, which may open the GPUs of its
 * live leases and reservations but skip's.  all (if not NULL): every
 * device such a rule could name. */
static int rule_for(struct daemon *d, const struct blease *one, unsigned uid,
                    const struct blease *skip, struct fence_rule *r, struct fence_rule *all,
                    char *why, size_t len)
{
	/* Minors and slices do not change between readings: the last one
	 * serves, and a caller's (serve_line's) stays valid. */
	struct gm_snapshot *snap = d->snap ? d->snap : daemon_snapshot(d, 0);
	const struct fence_machine *m = NULL;
	size_t cap = 1;
	unsigned *minors;
	struct fence_slice *slices;
	struct fence_grant g = {0, NULL, 0, NULL}, none = {0, NULL, 0, NULL};
	int rc = -1;

	for (const struct blease *l = d->leases; l; l = l->next)
		cap += l->n;
	minors = calloc(cap, sizeof *minors);
	slices = calloc(cap, sizeof *slices);
	g.gpu_minors = minors;
	g.slices = slices;
	if (!snap || !minors || !slices) {
		snprintf(why, len, "the lease broker cannot read the GPUs");
		goto done;
	}
	if (one && grant_add(snap, one, &g, minors, slices, why, len) < 0)
		goto done;
	for (const struct blease *l = d->leases; !one && l; l = l->next)
		if (l != skip && !l->ended && l->uid == uid &&
		    grant_add(snap, l, &g, minors, slices, why, len) < 0)
			goto done;
	if (!(m = machine_of(snap)) || fence_rule_build(r, m, &g) < 0 ||
	    (all && fence_rule_build(all, m, &none) < 0)) {
		snprintf(why, len, "out of memory");
		goto done;
	}
	rc = 0;
done:
	free(minors);
	free(slices);
	return rc;
}

/* The lease a fence request names: the connection's own, or (on a new
 * connection) by id a reservation of its user's, for a reserved shell, or
 * a lease the asking process itself was granted by the broker before this
 * one: a restart between the grant and the placing of its job (the lease
 * was restored for that process, the connection it came on is gone). */
static struct blease *named_lease(struct daemon *d, struct conn *c, json_t *msg)
{
	const char *id = json_string_value(json_object_get(msg, "id"));

	if (c->lease)
		return c->lease;
	for (struct blease *l = d->leases; id && l; l = l->next) {
		if (l->ended || strcmp(l->id, id))
			continue;
		if (l->reservation ? l->uid == c->uid || c->uid == 0
		                   : l->uid == c->uid && l->pid == c->pid && !l->job_pid &&
		                         l->pid_start && proctree_start(c->pid) == l->pid_start)
			return l;
	}
	return NULL;
}

const struct fence *daemon_fence_mechanism(void)
{
	return &fence;
}

int daemon_fence_rule(struct daemon *d, unsigned uid, const struct blease *skip,
                      struct fence_rule *r, struct fence_rule *all, char *why, size_t len)
{
	return rule_for(d, NULL, uid, skip, r, all, why, len);
}

void daemon_fenced(struct daemon *d, struct conn *c, int enforced, const char *why)
{
	json_t *m = json_object();

	json_object_set_new(m, "op", json_string("fenced"));
	json_object_set_new(m, "enforced", json_boolean(enforced));
	if (enforced)
		json_object_set_new(m, "mechanism", json_string(fence.ops->name));
	else
		json_object_set_new(m, "why", json_string(why));
	if (c->state == CONN_NEW)
		conn_finish(d, c, m); /* a reserved shell's: one answer */
	else if (conn_send(d, c, m) < 0)
		conn_close(d, c);
}

/*
 * A placement in flight: checked on the loop, its cgroup made and the job
 * moved in on the worker thread (worker.c: a move waits for the kernel's
 * RCU grace period), answered back on the loop.
 */
struct place_job {
	struct work w;  /* its key: the lease's id */
	struct conn *c; /* to answer; NULL once it closed */
	int lease_ended;
	char user[33];
	int pid, asked, pidfd;
	uint64_t start;
	struct keeper *k; /* a supervisor to move home at the end, or NULL */
	int adopt;        /* the job of a restored lease: watched once placed */
	int update;       /* its cgroup may be there (a waiter's): the rule replaced */
	struct fence_rule rule, all;
	char description[360]; /* the systemd scope's (fence.scopes) */
	int rc, made;
	char err[300];
	/* for the trace: monotonic microseconds */
	uint64_t queued_us, began_us, made_us, ended_us;
	struct place_job *next;
};
static struct place_job *placing;

static uint64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* "fence trace: KIND pid N at T s: Q ms queued, C ms cgroup and filter,
 * M ms move, A ms until answered" (T: the request's monotonic time). */
static void trace_place(const char *kind, const struct place_job *j)
{
	uint64_t now = mono_us();

	if (!trace)
		return;
	if (!j->began_us) { /* cancelled before it ran */
		daemon_say("fence trace: %s pid %d at %.6f s: cancelled after %.3f ms queued", kind,
		           j->pid, j->queued_us / 1e6, (now - j->queued_us) / 1e3);
		return;
	}
	daemon_say("fence trace: %s pid %d at %.6f s: %.3f ms queued, %.3f ms cgroup and filter, "
	           "%.3f ms move, %.3f ms until answered%s",
	           kind, j->pid, j->queued_us / 1e6, (j->began_us - j->queued_us) / 1e3,
	           ((j->made_us ? j->made_us : j->ended_us) - j->began_us) / 1e3,
	           j->made_us ? (j->ended_us - j->made_us) / 1e3 : 0.0, (now - j->ended_us) / 1e3,
	           j->rc < 0 ? " (failed)" : "");
}

/* The systemd scope's description (j's key and user set): one line in
 * systemctl's listing. */
static void describe(struct place_job *j, const char *command)
{
	snprintf(j->description, sizeof j->description, "gpuman lease %s of %s: %.200s", j->w.key,
	         j->user, command);
	for (char *p = j->description; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
}

static void place_run(struct work *w)
{
	struct place_job *j = (struct place_job *)w;

	j->rc = -1;
	j->began_us = mono_us();
	/* systemd's call waits for its job (lib/fence_scope.c): here, not on
	 * the loop, too. */
	if (fence.scopes &&
	    fence_scope_start(&fence, w->key, j->pid, j->description, j->err, sizeof j->err) < 0)
		goto out;
	if ((j->update ? fence.ops->update(&fence, w->key, &j->rule, &j->all, j->err, sizeof j->err)
	               : fence.ops->create(&fence, w->key, &j->rule, j->err, sizeof j->err)) < 0)
		goto out;
	j->made = 1;
	j->made_us = mono_us();
	if (fence.ops->enter(&fence, w->key, j->pid, j->err, sizeof j->err) < 0)
		goto out;
	j->rc = 0;
out:
	j->ended_us = mono_us();
}

/*
 * A restored lease's job, placed on a connection of its own (a restart
 * between the grant and this; named_lease): its "job" message went to the
 * broker before, so it is taken from the placing, and the lease lives as
 * long as the job from now on -- as a lease whose job was told does -- not
 * only as long as its gpuman run.
 */
static void adopt_job(struct daemon *d, struct place_job *j)
{
	for (struct blease *l = d->leases; l; l = l->next)
		if (!l->ended && !l->conn && !strcmp(l->id, j->w.key)) {
			daemon_lease_watch(d, l, j->pidfd);
			j->pidfd = -1; /* the lease's now */
			l->job_pid = j->pid;
			l->job_start = j->start;
			daemon_state_lease(d, l);
			d->gen++;
			return;
		}
}

static void place_job_free(struct place_job *j)
{
	free(j->k);
	fence_rule_release(&j->rule);
	fence_rule_release(&j->all);
	if (j->pidfd >= 0)
		close(j->pidfd);
	free(j);
}

static void placing_drop(struct place_job *j)
{
	for (struct place_job **pp = &placing; *pp; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			return;
		}
}

static void place_done(struct daemon *d, struct work *w)
{
	struct place_job *j = (struct place_job *)w;
	struct conn *c = j->c;
	char why[360] = "";

	placing_drop(j);
	trace_place(j->k ? "grant-keeper" : "grant", j);
	if (w->cancelled) {
		snprintf(why, sizeof why, "the lease ended before pid %d was placed", j->asked);
	} else if (j->rc < 0) {
		daemon_say("cannot fence %s's job (pid %d): %s", j->user, j->pid, j->err);
		snprintf(why, sizeof why, "the lease broker cannot place pid %d: %s", j->asked,
		         j->err);
	} else {
		struct pollfd p = {j->pidfd, POLLIN, 0};

		if (poll(&p, 1, 0) != 0 || proctree_start(j->pid) != j->start) {
			snprintf(why, sizeof why, "pid %d ended while it was placed", j->asked);
		} else if (j->k) {
			/* In its lease's cgroup now: home again when that ends,
			 * even if the lease is ending already. */
			j->k->next = keepers;
			keepers = j->k;
			j->k = NULL;
		} else if (j->adopt) {
			adopt_job(d, j);
		}
	}
	if (j->made) {
		/* On record, with its keeper, for a broker after this one. */
		fenced_add(w->key);
		record_write(d);
	}
	/* A lease that ends has nobody to tell but a reserved shell. */
	if (c && (!j->lease_ended || c->state == CONN_NEW)) {
		if (why[0])
			/* The lease ends with the refusal: its job never runs
			 * unfenced. */
			daemon_refuse(d, c, GM_ERR_STATE, why, NULL);
		else
			daemon_fenced(d, c, 1, NULL);
	}
	place_job_free(j);
}

void daemon_fence_forget(struct conn *c)
{
	for (struct place_job *j = placing; j; j = j->next)
		if (j->c == c)
			j->c = NULL;
	for (struct grant_job *g = granting; g; g = g->next)
		if (g->c == c) {
			g->c = NULL;
			json_decref(g->answer);
			g->answer = NULL;
		}
	for (struct end_job *e = ending; e; e = e->next)
		if (e->c == c) {
			e->c = NULL;
			json_decref(e->answer);
			e->answer = NULL;
		}
	daemon_sessions_forget(c);
}

void daemon_fence_place(struct daemon *d, struct conn *c, json_t *msg)
{
	int pid = (int)json_integer_value(json_object_get(msg, "pid"));
	int keep = json_is_true(json_object_get(msg, "keep"));
	struct blease *l = named_lease(d, c, msg);
	struct place_job *j;
	char why[360] = "", path[PATH_MAX];
	struct stat st;

	if (!l) {
		daemon_refuse(d, c, GM_ERR_INVALID,
		              "no such reservation of yours (it may have expired; gpuman status "
		              "lists the live ones)",
		              NULL);
		return;
	}
	if (!fence.ops) {
		daemon_fenced(d, c, 0, fence.why);
		return;
	}
	if (pid <= 1) {
		daemon_refuse(d, c, GM_ERR_INVALID, "malformed fence request", NULL);
		return;
	}
	j = calloc(1, sizeof *j);
	if (!j) {
		daemon_refuse(d, c, GM_ERR_NOMEM, "the lease broker is out of memory", NULL);
		return;
	}
	j->rule = (struct fence_rule)FENCE_RULE_INIT;
	j->all = (struct fence_rule)FENCE_RULE_INIT;
	/* Its job was to be placed while it waited (and may be): the cgroup
	 * takes the lease's rule in place of the one that refuses all. */
	j->update =
	    l->preplaced || (fence_path(&fence, l->id, path, sizeof path), stat(path, &st) == 0);
	/* A client in a container names the pid as its namespace numbers it. */
	j->asked = pid;
	j->pid = pid = pid_here(c->pid, pid);
	/* Held from the check to the move: the pid cannot be reused by
	 * another process meanwhile without our seeing that it ended. */
	j->pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	j->start = proctree_start(pid);
	if (j->pidfd < 0 || !j->start || (c->uid != 0 && !proc_all_uids(pid, c->uid))) {
		snprintf(why, sizeof why, "pid %d is not a process of yours", j->asked);
		goto refused;
	}
	if (rule_for(d, l, 0, NULL, &j->rule, j->update ? &j->all : NULL, j->err, sizeof j->err) <
	    0) {
		/* Nothing to enforce it with: the job runs as without a fence,
		 * and says so. */
		daemon_fenced(d, c, 0, j->err);
		goto free;
	}
	j->adopt = !c->lease && !l->reservation && !keep;
	if (keep && (j->k = calloc(1, sizeof *j->k))) {
		struct keeper *k = j->k;
		/* Already a supervisor in another lease's cgroup (or on its
		 * way home from one): back home, not there, at the end. */
		const struct keeper *o = keeper_of(pid, j->start);

		str_copy(k->id, sizeof k->id, l->id);
		k->pid = pid;
		k->start = j->start;
		if (fence.ops->where(&fence, pid, k->origin, sizeof k->origin) < 0)
			str_copy(k->origin, sizeof k->origin, fence.mount);
		if (o)
			str_copy(k->origin, sizeof k->origin, o->origin);
	}
	str_copy(j->w.key, sizeof j->w.key, l->id);
	str_copy(j->user, sizeof j->user, l->user);
	describe(j, l->command[0] ? l->command : "a reservation");
	j->w.run = place_run;
	j->w.done = place_done;
	j->c = c;
	j->next = placing;
	placing = j;
	j->queued_us = mono_us();
	daemon_work_submit(d, &j->w);
	return;
refused:
	/* The lease ends with the refusal: its job never runs unfenced. */
	daemon_refuse(d, c, GM_ERR_STATE, why, NULL);
free:
	place_job_free(j);
}

/* ---- a waiter's job, placed before its grant ------------------------------ */

/*
 * gpuman run forks its job as it starts to wait in the line (the job waits
 * for the go) and names it ("preplace"): the job goes into the cgroup of
 * its lease-to-be now, under a rule that refuses every GPU, and its grant
 * only puts the lease's rule in place.  A move into a cgroup waits for a
 * kernel grace period (several ms where the hierarchy is mounted without
 * favordynmods); a new rule does not.  So the grace period is paid in the
 * line, not between one job's end and the next one's start.  The lease
 * takes the cgroup's name as its id (a cgroup v2 folder cannot be renamed;
 * nor can a systemd scope, made now too, where systemd runs).  Not where
 * moves are cheap.  Nothing is answered: a job that is not placed now is
 * placed at its grant.
 */
int daemon_fence_can_preplace(void)
{
	/* Where moves wait no grace period (favordynmods), a placement at
	 * the grant costs less than one made early and changed at the grant;
	 * GPUMAN_FENCE_PREPLACE=yes or no decides instead (for the tests). */
	const char *want = getenv("GPUMAN_FENCE_PREPLACE");

	if (!fence.ops)
		return 0;
	if (want && (!strcmp(want, "yes") || !strcmp(want, "no")))
		return !strcmp(want, "yes");
	return !fence.fast_moves;
}

static void preplace_done(struct daemon *d, struct work *w)
{
	struct place_job *j = (struct place_job *)w;
	struct conn *c = j->c;
	struct pollfd p = {j->pidfd, POLLIN, 0};

	placing_drop(j);
	trace_place("waiter", j);
	if (j->made) {
		/* On record: a broker after this one ends it, unless a lease
		 * of its name lives then. */
		fenced_add(w->key);
		record_write(d);
	}
	if (c && !w->cancelled && j->rc == 0 && poll(&p, 1, 0) == 0 &&
	    proctree_start(j->pid) == j->start)
		c->pre_placed = 1;
	else if (j->rc < 0 && !w->cancelled)
		daemon_say("cannot place %s's waiting job (pid %d) before its grant: %s", j->user,
		           j->pid, j->err);
	place_job_free(j);
}

void daemon_fence_preplace(struct daemon *d, struct conn *c, json_t *msg)
{
	int pid = (int)json_integer_value(json_object_get(msg, "pid"));
	const struct gm_snapshot *snap;
	const struct fence_machine *m;
	struct fence_grant none = {0, NULL, 0, NULL};
	struct place_job *j;

	if (!daemon_fence_can_preplace() || c->pre_id[0] || c->reserve_ms > 0 || pid <= 1 ||
	    !(snap = d->snap ? d->snap : daemon_snapshot(d, 0)) || !(m = machine_of(snap)) ||
	    !(j = calloc(1, sizeof *j)))
		return;
	j->rule = (struct fence_rule)FENCE_RULE_INIT;
	j->all = (struct fence_rule)FENCE_RULE_INIT;
	j->asked = pid;
	j->pid = pid = pid_here(c->pid, pid);
	j->pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	j->start = proctree_start(pid);
	if (j->pidfd < 0 || !j->start || (c->uid != 0 && !proc_all_uids(pid, c->uid)) ||
	    fence_rule_build(&j->rule, m, &none) < 0) {
		place_job_free(j);
		return;
	}
	snprintf(c->pre_id, sizeof c->pre_id, "%lld-%d-", (long long)now_ms(), c->pid);
	daemon_random_hex(c->pre_id + strlen(c->pre_id), 4);
	c->pre_pid = pid;
	c->pre_start = j->start;
	str_copy(j->w.key, sizeof j->w.key, c->pre_id);
	str_copy(j->user, sizeof j->user, c->user);
	describe(j, c->command);
	j->w.run = place_run;
	j->w.done = preplace_done;
	j->w.early = 1;
	j->c = c;
	j->next = placing;
	placing = j;
	j->queued_us = mono_us();
	daemon_work_submit(d, &j->w);
}

/*
 * The grant of c, whose job waits placed: l's rule in place of the one
 * that refused all (no move: no grace period).  On the worker, not the
 * loop: the filter's change takes the kernel's cgroup lock, which a move
 * being made holds for a whole grace period (20.8 ms once, traced on a
 * lent machine), and every other user's grant and answer waited behind it
 * on the loop.  The grant is told, "placed", once it is in.
 */

static void grant_run(struct work *w)
{
	struct grant_job *g = (struct grant_job *)w;

	g->began_us = mono_us();
	g->rc = fence.ops->update(&fence, w->key, &g->rule, &g->all, g->err, sizeof g->err);
	g->ended_us = mono_us();
}

static void grant_done(struct daemon *d, struct work *w)
{
	struct grant_job *g = (struct grant_job *)w;
	struct conn *c = g->c;

	for (struct grant_job **pp = &granting; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	if (trace && !w->cancelled)
		daemon_say("fence trace: granted-placed pid %d at %.6f s: %.3f ms filter, %.3f ms "
		           "queued, on the worker%s",
		           g->pid, g->queued_us / 1e6, (g->ended_us - g->began_us) / 1e3,
		           (g->began_us - g->queued_us) / 1e3, g->rc < 0 ? " (failed)" : "");
	if (!w->cancelled && g->rc < 0)
		daemon_say("cannot give %s's waiting job (pid %d) its lease's GPUs: %s", g->user,
		           g->pid, g->err);
	if (!c) {
		json_decref(g->answer);
	} else {
		/* Not placed (or cancelled: the lease ended, or the broker
		 * stops): the client asks "fence" as it would without, and
		 * hears then what became of its lease. */
		if (!w->cancelled && g->rc == 0)
			json_object_set_new(g->answer, "placed", json_true());
		if (conn_send(d, c, g->answer) < 0)
			conn_close(d, c);
	}
	fence_rule_release(&g->rule);
	fence_rule_release(&g->all);
	free(g);
}

int daemon_fence_granted(struct daemon *d, struct conn *c, const struct blease *l, json_t *answer)
{
	struct grant_job *g;

	if (!l->preplaced || !c->pre_placed || strcmp(c->pre_id, l->id) ||
	    proctree_start(c->pre_pid) != c->pre_start || !(g = calloc(1, sizeof *g)))
		return 0;
	g->rule = (struct fence_rule)FENCE_RULE_INIT;
	g->all = (struct fence_rule)FENCE_RULE_INIT;
	if (rule_for(d, l, 0, NULL, &g->rule, &g->all, g->err, sizeof g->err) < 0) {
		daemon_say("cannot give %s's waiting job (pid %d) its lease's GPUs: %s", l->user,
		           c->pre_pid, g->err);
		fence_rule_release(&g->rule);
		fence_rule_release(&g->all);
		free(g);
		return 0;
	}
	str_copy(g->w.key, sizeof g->w.key, l->id);
	str_copy(g->user, sizeof g->user, l->user);
	g->pid = c->pre_pid;
	g->c = c;
	g->answer = answer;
	g->w.run = grant_run;
	g->w.done = grant_done;
	g->next = granting;
	granting = g;
	g->queued_us = mono_us();
	daemon_work_submit(d, &g->w);
	return 1;
}

/* A waiter that leaves the line (gave up, went away, was refused): its
 * job's cgroup ends, on the worker, after the placing if that still runs. */
struct unplace_job {
	struct work w;
	int rc;
	char err[300];
};

static void unplace_run(struct work *w)
{
	struct unplace_job *u = (struct unplace_job *)w;

	u->rc = fence.ops->end(&fence, w->key, u->err, sizeof u->err);
}

static void unplace_done(struct daemon *d, struct work *w)
{
	struct unplace_job *u = (struct unplace_job *)w;

	if (u->rc < 0)
		daemon_say("the waiting job's cgroup %s: %s", w->key, u->err);
	if (fenced_drop(w->key))
		record_write(d);
	free(u);
}

void daemon_fence_unplace(struct daemon *d, struct conn *c)
{
	struct unplace_job *u;

	if (!c->pre_id[0] || !fence.ops || !(u = calloc(1, sizeof *u)))
		return;
	str_copy(u->w.key, sizeof u->w.key, c->pre_id);
	u->w.run = unplace_run;
	u->w.done = unplace_done;
	u->w.early = 1;
	daemon_work_submit(d, &u->w);
	c->pre_id[0] = '\0';
}

/* Is pid a supervisor of a lease (home at the end, not ended)? */
static int is_keeper(int pid)
{
	return keeper_of(pid, 0) != NULL;
}

/* Does a live lease of l's user other than l (a reservation she works in,
 * another share) hold GPU index too? */
static int held_otherwise(const struct daemon *d, const struct blease *l, unsigned index)
{
	for (const struct blease *o = d->leases; o; o = o->next)
		for (size_t g = 0; o != l && !o->ended && o->uid == l->uid && g < o->n; g++)
			if (o->indices[g] == index)
				return 1;
	return 0;
}

/*
 * The lease's user's processes that NVML lists on its GPUs from outside
 * its cgroup (a descriptor opened before the fence, or passed in over a
 * Unix socket: the filter acts at open) end with it too, as its own job's
 * do; waste names them "unleased" while it lives.  Not while another live
 * lease of the user's holds the GPU (she works in her reservation), nor
 * supervisors going home.
 */
static void end_strays(struct daemon *d, const struct blease *l)
{
	/* The reader's last reading: NVML is never called on the event loop
	 * (snapshot.c), and while anybody waits it is at most
	 * RECHECK_MS old. */
	const struct gm_snapshot *snap = d->snap;

	for (size_t i = 0; snap && i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];
		int held = 0;

		for (size_t g = 0; g < l->n && !held; g++)
			held = l->indices[g] == p->gpu;
		if (!held || !p->has_user || p->uid != l->uid || p->uid == 0 || (int)p->pid <= 1 ||
		    is_keeper((int)p->pid) || held_otherwise(d, l, p->gpu) ||
		    !proc_all_uids((int)p->pid, l->uid))
			continue;
		daemon_say("lease %s of %s ended: pid %u still used GPU %u from outside it; killed",
		           l->id, l->user, p->pid, p->gpu);
		kill((pid_t)p->pid, SIGKILL);
	}
}

static int in_keepers(const struct keeper *k, int pid)
{
	for (; k; k = k->next)
		if (k->pid == pid && proctree_start(pid) == k->start)
			return 1;
	return 0;
}

void daemon_fence_spare(struct daemon *d, const struct blease *l, int pid)
{
	char path[PATH_MAX], here[PATH_MAX];
	uint64_t start = pid > 1 ? proctree_start(pid) : 0;

	(void)d;
	if (!fence.ops || !start)
		return;
	fence_path(&fence, l->id, path, sizeof path);
	if (fence.ops->where(&fence, pid, here, sizeof here) < 0 || strcmp(here, path))
		return;
	/* Only where a keeper came from: never out of a login session's fence
	 * (a reserved shell's own release ends with it, as its shell does).
	 * It becomes a keeper of the lease itself: spared at the end that
	 * follows, and moved home on the worker with the others (a move on
	 * the loop would keep everybody waiting a grace period). */
	for (const struct keeper *k = keepers; k; k = k->next)
		if (!strcmp(k->id, l->id)) {
			struct keeper *me;

			if (in_keepers(keepers, pid) || !(me = calloc(1, sizeof *me)))
				return;
			*me = *k;
			me->pid = pid;
			me->start = start;
			me->next = keepers;
			keepers = me;
			return;
		}
}

/* Is path a lease's cgroup (or in one)? */
static int lease_cgroup(const char *path)
{
	size_t n = strlen(fence.root);
	const char *rest = path + n;

	if (fence.scopes && !strncmp(path, fence.scope_root, strlen(fence.scope_root)))
		return 1;
	return !strncmp(path, fence.root, n) && rest[0] == '/' && rest[1] >= '0' && rest[1] <= '9';
}

/* Lease id's keepers, off the list of live leases' ones. */
static struct keeper *take_keepers(const char *id)
{
	struct keeper *out = NULL, **pp = &keepers;

	while (*pp) {
		struct keeper *k = *pp;

		if (strcmp(k->id, id)) {
			pp = &k->next;
			continue;
		}
		*pp = k->next;
		k->next = out;
		out = k;
	}
	return out;
}

static void free_keepers(struct keeper *k)
{
	while (k) {
		struct keeper *next = k->next;

		free(k);
		k = next;
	}
}

/* Keepers of lease id home, alive (those still ours and still in its
 * cgroup).  Each is a move: where the hierarchy is mounted without
 * favordynmods it waits a grace period holding the kernel's cgroup lock. */
static void send_home(const char *id, const struct keeper *k)
{
	char path[PATH_MAX], here[PATH_MAX];

	fence_path(&fence, id, path, sizeof path);
	for (; k; k = k->next)
		if (proctree_start(k->pid) == k->start &&
		    fence.ops->where(&fence, k->pid, here, sizeof here) == 0 &&
		    !strcmp(here, path) && fence.ops->move_to(&fence, k->origin, k->pid) < 0) {
			/* Home was another lease's cgroup, ended meanwhile: the
			 * keeper was its process, and ends as its job did.  It
			 * never goes out of every fence that way. */
			if (lease_cgroup(k->origin))
				kill(k->pid, SIGKILL);
			else
				fence.ops->move_to(&fence, fence.mount, k->pid);
		}
}

/*
 * Everything in lease id's cgroup but its keepers, killed with signals
 * until only they are left (a process forked meanwhile shows up in the
 * next reading), or patience runs out.  Signals and reading cgroup.procs
 * take no cgroup lock: cgroup.kill and rmdir do, and a move anywhere on the
 * machine can hold that lock for a whole grace period (4-26 ms measured),
 * every other user's grant and answer waiting on the loop behind it.
 */
static void kill_all_but(const char *id, const struct keeper *ks)
{
	uint64_t give_up = mono_us() + 2000000;

	for (long wait = 0;; wait = wait ? wait * 2 : 1) {
		int pids[256];
		long n = fence.ops->pids(&fence, id, pids, 256), left = n > 256 ? n - 256 : 0;
		struct timespec t = {0, (wait > 20 ? 20 : wait) * 1000000L};

		for (long i = 0; i < n && i < 256; i++)
			if (!in_keepers(ks, pids[i])) {
				kill(pids[i], SIGKILL);
				left++;
			}
		if (left <= 0 || mono_us() >= give_up)
			return;
		nanosleep(&t, NULL);
	}
}

/* On the worker: the keepers home, then the cgroup killed and removed. */
static void end_run(struct work *w)
{
	struct end_job *e = (struct end_job *)w;

	send_home(e->id, e->keepers);
	e->rc = fence.ops->end(&fence, e->id, e->err, sizeof e->err);
}

static void end_done(struct daemon *d, struct work *w)
{
	struct end_job *e = (struct end_job *)w;
	int known;

	for (struct end_job **pp = &ending; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	/* Cancelled (the broker stops): the record keeps the cgroup and its
	 * keepers, for the broker after this one to end as at its end. */
	if (w->cancelled) {
		while (e->keepers) {
			struct keeper *k = e->keepers;

			e->keepers = k->next;
			k->next = keepers;
			keepers = k;
		}
	} else {
		if (e->rc < 0)
			daemon_say("lease %s: %s", e->id, e->err);
		known = fenced_drop(e->id);
		if (known || e->keepers)
			record_write(d);
	}
	free_keepers(e->keepers);
	if (e->c)
		daemon_fence_answer(d, e->c, e->answer);
	free(e);
}

/*
 * The release of c's lease l, just ended: answered once its keepers are
 * home (a library caller goes on outside every fence when release()
 * returns), which is now where it had none.
 */
void daemon_fence_released(struct daemon *d, struct conn *c, const struct blease *l, json_t *answer)
{
	for (struct end_job *e = ending; e; e = e->next)
		if (!strcmp(e->id, l->id) && e->keepers && !e->c) {
			e->c = c;
			e->answer = answer;
			return;
		}
	daemon_fence_answer(d, c, answer);
}

/*
 * A lease's end: before its GPUs go to anybody else, nothing of its job is
 * left running -- killed here, on the loop, with signals.  Its keepers
 * home and its cgroup removed come after, on the worker, in order with
 * every placement (a keeper leased again is moved in after it is home).
 * In systemd scopes the same: the scope's cgroup "job" goes, and systemd
 * stops the scope, empty then.
 */
void daemon_fence_end(struct daemon *d, const struct blease *l)
{
	struct end_job *e;
	char err[300];

	if (!fence.ops)
		return;
	/* Its placements in flight first: none may come after the end. */
	for (struct place_job *j = placing; j; j = j->next)
		if (!strcmp(j->w.key, l->id))
			j->lease_ended = 1;
	daemon_work_settle(d, l->id);
	if (!l->reservation)
		end_strays(d, l);
	if ((e = calloc(1, sizeof *e))) {
		str_copy(e->id, sizeof e->id, l->id);
		e->keepers = take_keepers(l->id);
		kill_all_but(l->id, e->keepers);
		/* Not the lease's id as the key: nothing settles it. */
		snprintf(e->w.key, sizeof e->w.key, "end %.58s", l->id);
		e->w.run = end_run;
		e->w.done = end_done;
		e->next = ending;
		ending = e;
		daemon_work_submit(d, &e->w);
	} else {
		struct keeper *ks = take_keepers(l->id);
		int had = ks != NULL;

		send_home(l->id, ks);
		free_keepers(ks);
		if (fence.ops->end(&fence, l->id, err, sizeof err) < 0)
			daemon_say("lease %s of %s: %s", l->id, l->user, err);
		if (fenced_drop(l->id) || had)
			record_write(d);
	}
	daemon_fence_sessions(d, l->uid, l);
}

static const struct blease *live_lease(const struct daemon *d, const char *id)
{
	for (const struct blease *l = d->leases; l; l = l->next)
		if (!l->ended && !strcmp(l->id, id))
			return l;
	return NULL;
}

void daemon_fence_restore(struct daemon *d)
{
	char path[PATH_MAX], err[300];
	json_t *doc, *v;
	size_t i, kept = 0, ended = 0;
	struct keeper *ks;

	if (!fence.ops)
		return;
	snprintf(path, sizeof path, "%s.fence", d->state_path);
	doc = json_load_file(path, 0, NULL);
	if (!doc)
		return;
	json_array_foreach(json_object_get(doc, "keepers"), i, v)
	{
		const char *id = json_string_value(json_object_get(v, "id"));
		const char *origin = json_string_value(json_object_get(v, "origin"));
		struct keeper *k;

		/* Home is in the hierarchy, or nowhere. */
		if (!id || !origin || strncmp(origin, fence.mount, strlen(fence.mount)) ||
		    strstr(origin, "/..") || !(k = calloc(1, sizeof *k)))
			continue;
		str_copy(k->id, sizeof k->id, id);
		k->pid = (int)json_integer_value(json_object_get(v, "pid"));
		k->start = (uint64_t)json_integer_value(json_object_get(v, "start"));
		str_copy(k->origin, sizeof k->origin, origin);
		if (k->pid <= 1 || !k->start || proctree_start(k->pid) != k->start) {
			free(k); /* ended meanwhile: nothing to move */
			continue;
		}
		k->next = keepers;
		keepers = k;
	}
	json_array_foreach(json_object_get(doc, "cgroups"), i, v)
	{
		const char *id = json_string_value(v);

		if (!id)
			continue;
		if (live_lease(d, id)) {
			fenced_add(id);
			continue;
		}
		/* Its lease ended while no broker watched: as at its end. */
		ks = take_keepers(id);
		send_home(id, ks);
		free_keepers(ks);
		if (fence.ops->end(&fence, id, err, sizeof err) < 0)
			daemon_say("lease %s (ended meanwhile): %s", id, err);
		ended++;
	}
	/* Keepers of leases the record did not name (none should be). */
	for (struct keeper **pp = &keepers; *pp;) {
		struct keeper *k = *pp;

		if (fenced_has(k->id)) {
			pp = &k->next;
			kept++;
			continue;
		}
		*pp = k->next;
		free(k);
	}
	json_decref(doc);
	if (kept || ended)
		daemon_say("fence: %zu supervisor%s of restored leases to move home at their end; "
		           "%zu cgroup%s of leases that ended meanwhile ended",
		           kept, kept == 1 ? "" : "s", ended, ended == 1 ? "" : "s");
	record_write(d);
}
