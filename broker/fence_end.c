/*
 * fence_end.c - what outlives a placement of the broker's fence (fence.c):
 * a lease's keepers (its supervisors, moved home alive at its end), the
 * record of the cgroups made (for a broker after this one, which reads it
 * back with daemon_fence_restore), and a lease's end itself: what is left
 * in its cgroup killed before its GPUs go to anybody else, on the loop;
 * its keepers home and the cgroup removed after, on the worker.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"
#include "fence_keep.h"

static struct keeper *keepers; /* of live leases */

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

const struct keeper *fence_keeper_of(int pid, uint64_t start)
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

void fence_keeper_add(struct keeper *k)
{
	k->next = keepers;
	keepers = k;
}

void fence_record_add(const struct daemon *d, const char *id)
{
	fenced_add(id);
	record_write(d);
}

void fence_record_drop(const struct daemon *d, const char *id)
{
	if (fenced_drop(id))
		record_write(d);
}

void fence_end_forget(struct conn *c)
{
	for (struct end_job *e = ending; e; e = e->next)
		if (e->c == c) {
			e->c = NULL;
			json_decref(e->answer);
			e->answer = NULL;
		}
}

/* Is pid a supervisor of a lease (home at the end, not ended)? */
static int is_keeper(int pid)
{
	return fence_keeper_of(pid, 0) != NULL;
}

/* Does a live lease of l's user other than l (a reservation she works in,
 * another share) hold GPU index too? */
static int held_otherwise(const struct daemon *d, const struct blease *l, unsigned index)
{
	for (const struct blease *o = d->leases; o; o = o->next)
		for (size_t g = 0;
		     o != l && !o->ended && o->rec.uid == l->rec.uid && g < o->rec.gpu_count; g++)
			if (o->rec.indices[g] == index)
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

		for (size_t g = 0; g < l->rec.gpu_count && !held; g++)
			held = l->rec.indices[g] == p->gpu;
		if (!held || !p->has_user || p->uid != l->rec.uid || p->uid == 0 ||
		    (int)p->pid <= 1 || is_keeper((int)p->pid) || held_otherwise(d, l, p->gpu) ||
		    !daemon_proc_all_uids((int)p->pid, l->rec.uid))
			continue;
		daemon_say("lease %s of %s ended: pid %u still used GPU %u from outside it; killed",
		           l->rec.id, l->rec.user, p->pid, p->gpu);
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
	const struct fence *f = daemon_fence_mechanism();
	char path[PATH_MAX], here[PATH_MAX];
	uint64_t start = pid > 1 ? proctree_start(pid) : 0;

	(void)d;
	if (!f->ops || !start)
		return;
	fence_path(f, l->rec.id, path, sizeof path);
	if (f->ops->where(f, pid, here, sizeof here) < 0 || strcmp(here, path))
		return;
	/* Only where a keeper came from: never out of a login session's fence
	 * (a reserved shell's own release ends with it, as its shell does).
	 * It becomes a keeper of the lease itself: spared at the end that
	 * follows, and moved home on the worker with the others (a move on
	 * the loop would keep everybody waiting a grace period). */
	for (const struct keeper *k = keepers; k; k = k->next)
		if (!strcmp(k->id, l->rec.id)) {
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
	const struct fence *f = daemon_fence_mechanism();
	size_t n = strlen(f->root);
	const char *rest = path + n;

	if (f->scopes && !strncmp(path, f->scope_root, strlen(f->scope_root)))
		return 1;
	return !strncmp(path, f->root, n) && rest[0] == '/' && rest[1] >= '0' && rest[1] <= '9';
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
 * favordynmods it waits a grace period holding the kernel's cgroup lock.
 * Not a keeper on its way out (a runner releases its lease by exiting):
 * the kernel moves no exiting process, but the move would wait as long,
 * and the next grant's filter behind it. */
static void send_home(const char *id, const struct keeper *k)
{
	const struct fence *f = daemon_fence_mechanism();
	char path[PATH_MAX], here[PATH_MAX];

	fence_path(f, id, path, sizeof path);
	for (; k; k = k->next)
		if (!proctree_exiting(k->pid, k->start) &&
		    f->ops->where(f, k->pid, here, sizeof here) == 0 && !strcmp(here, path) &&
		    f->ops->move_to(f, k->origin, k->pid) < 0) {
			/* Home was another lease's cgroup, ended meanwhile: the
			 * keeper was its process, and ends as its job did.  It
			 * never goes out of every fence that way. */
			if (lease_cgroup(k->origin))
				kill(k->pid, SIGKILL);
			else
				f->ops->move_to(f, f->mount, k->pid);
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
	const struct fence *f = daemon_fence_mechanism();
	int64_t give_up = monotonic_ms() + FENCE_END_PATIENCE_MS;

	for (long wait = 0;; wait = wait ? wait * 2 : 1) {
		int pids[256];
		long n = f->ops->pids(f, id, pids, 256), left = n > 256 ? n - 256 : 0;
		struct timespec t = {0, (wait > 20 ? 20 : wait) * 1000000L};

		for (long i = 0; i < n && i < 256; i++)
			if (!in_keepers(ks, pids[i])) {
				kill(pids[i], SIGKILL);
				left++;
			}
		if (left <= 0 || monotonic_ms() >= give_up)
			return;
		nanosleep(&t, NULL);
	}
}

/* On the worker: the keepers home, then the cgroup killed and removed. */
static void end_run(struct work *w)
{
	const struct fence *f = daemon_fence_mechanism();
	struct end_job *e = (struct end_job *)w;

	send_home(e->id, e->keepers);
	e->rc = f->ops->end(f, e->id, e->err, sizeof e->err);
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
		if (!strcmp(e->id, l->rec.id) && e->keepers && !e->c) {
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
	const struct fence *f = daemon_fence_mechanism();
	struct end_job *e;
	char err[300];

	if (!f->ops)
		return;
	/* Its placements in flight first: none may come after the end. */
	fence_placing_ended(l->rec.id);
	daemon_work_settle(d, l->rec.id);
	if (!l->rec.reservation)
		end_strays(d, l);
	if ((e = calloc(1, sizeof *e))) {
		str_copy(e->id, sizeof e->id, l->rec.id);
		e->keepers = take_keepers(l->rec.id);
		kill_all_but(l->rec.id, e->keepers);
		/* Not the lease's id as the key: nothing settles it. */
		snprintf(e->w.key, sizeof e->w.key, "end %.58s", l->rec.id);
		e->w.run = end_run;
		e->w.done = end_done;
		e->next = ending;
		ending = e;
		daemon_work_submit(d, &e->w);
	} else {
		struct keeper *ks = take_keepers(l->rec.id);
		int had = ks != NULL;

		send_home(l->rec.id, ks);
		free_keepers(ks);
		if (f->ops->end(f, l->rec.id, err, sizeof err) < 0)
			daemon_say("lease %s of %s: %s", l->rec.id, l->rec.user, err);
		if (fenced_drop(l->rec.id) || had)
			record_write(d);
	}
	daemon_fence_sessions(d, l->rec.uid, l);
}

static const struct blease *live_lease(const struct daemon *d, const char *id)
{
	for (const struct blease *l = d->leases; l; l = l->next)
		if (!l->ended && !strcmp(l->rec.id, id))
			return l;
	return NULL;
}

void daemon_fence_restore(struct daemon *d)
{
	const struct fence *f = daemon_fence_mechanism();
	char path[PATH_MAX], err[300];
	json_t *doc, *v;
	size_t i, kept = 0, ended = 0;
	struct keeper *ks;

	if (!f->ops)
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
		if (!id || !origin || strncmp(origin, f->mount, strlen(f->mount)) ||
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
		if (f->ops->end(f, id, err, sizeof err) < 0)
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
