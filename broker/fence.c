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
 *
 * Here: the placements, at a grant and (a waiter's job) before it.
 * fence_who.c checks the pid and makes the rule; fence_end.c keeps the
 * keepers and the record, and ends a lease's cgroup.
 */
#include <jansson.h>
#include <limits.h>
#include <poll.h>
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
#include "fence_keep.h"

static struct fence fence;
/* GPUMAN_FENCE_TRACE=1: one line of the log for each placement, with the
 * time of each of its steps (bench/waiters.sh WAITERS_FENCE_TRACE=1 sums
 * them up).  Where a move waits a grace period only a machine of that
 * kind shows where a job's start goes; this says it there in one run. */
static int trace;

/* A grant whose job waits placed, its filter changed on the worker
 * (daemon_fence_granted). */
struct grant_job {
	struct work w; /* its key: the lease's id */
	struct conn *c;
	json_t *answer; /* the grant, sent when done */
	char user[33];
	int pid, rc;
	struct keeper *k; /* its job's, a supervisor: the lease's keeper once in */
	struct fence_rule rule, all;
	char err[300];
	uint64_t queued_us, began_us, ended_us;
	struct grant_job *next;
};
static struct grant_job *granting;

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
		if (l->ended || strcmp(l->rec.id, id))
			continue;
		if (l->rec.reservation
		        ? l->rec.uid == c->w.uid || c->w.uid == 0
		        : l->rec.uid == c->w.uid && l->rec.pid == c->w.pid && !l->rec.job_pid &&
		              l->rec.pid_start && proctree_start(c->w.pid) == l->rec.pid_start)
			return l;
	}
	return NULL;
}

const struct fence *daemon_fence_mechanism(void)
{
	return &fence;
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
		if (!l->ended && !l->conn && !strcmp(l->rec.id, j->w.key)) {
			daemon_lease_watch(d, l, j->pidfd);
			j->pidfd = -1; /* the lease's now */
			l->rec.job_pid = j->pid;
			l->rec.job_start = j->start;
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

void fence_placing_ended(const char *id)
{
	for (struct place_job *j = placing; j; j = j->next)
		if (!strcmp(j->w.key, id))
			j->lease_ended = 1;
}

/* Supervisor pid (of that start), to be moved into lease id's cgroup, and
 * home again at its end: from where it is now.  NULL out of memory. */
static struct keeper *keeper_new(const char *id, int pid, uint64_t start)
{
	struct keeper *k = calloc(1, sizeof *k);
	/* Already a supervisor in another lease's cgroup (or on its way home
	 * from one): back home, not there, at the end. */
	const struct keeper *o = fence_keeper_of(pid, start);

	if (!k)
		return NULL;
	str_copy(k->id, sizeof k->id, id);
	k->pid = pid;
	k->start = start;
	if (fence.ops->where(&fence, pid, k->origin, sizeof k->origin) < 0)
		str_copy(k->origin, sizeof k->origin, fence.mount);
	if (o)
		str_copy(k->origin, sizeof k->origin, o->origin);
	return k;
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
			fence_keeper_add(j->k);
			j->k = NULL;
		} else if (j->adopt) {
			adopt_job(d, j);
		}
	}
	if (j->made) {
		/* On record, with its keeper, for a broker after this one. */
		fence_record_add(d, w->key);
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
	fence_end_forget(c);
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
	j->update = l->preplaced ||
	            (fence_path(&fence, l->rec.id, path, sizeof path), stat(path, &st) == 0);
	/* A client in a container names the pid as its namespace numbers it. */
	j->asked = pid;
	j->pid = pid = daemon_pid_here(c->w.pid, pid);
	/* Held from the check to the move: the pid cannot be reused by
	 * another process meanwhile without our seeing that it ended. */
	j->pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	j->start = proctree_start(pid);
	if (j->pidfd < 0 || !j->start || (c->w.uid != 0 && !daemon_proc_all_uids(pid, c->w.uid))) {
		snprintf(why, sizeof why, "pid %d is not a process of yours", j->asked);
		goto refused;
	}
	if (daemon_fence_rule(d, l, 0, NULL, &j->rule, j->update ? &j->all : NULL, j->err,
	                      sizeof j->err) < 0) {
		/* Nothing to enforce it with: the job runs as without a fence,
		 * and says so. */
		daemon_fenced(d, c, 0, j->err);
		goto free;
	}
	j->adopt = !c->lease && !l->rec.reservation && !keep;
	if (keep)
		j->k = keeper_new(l->rec.id, pid, j->start);
	str_copy(j->w.key, sizeof j->w.key, l->rec.id);
	str_copy(j->user, sizeof j->user, l->rec.user);
	describe(j, l->rec.command[0] ? l->rec.command : "a reservation");
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
		fence_record_add(d, w->key);
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
	    !(snap = d->snap ? d->snap : daemon_snapshot(d, 0)) ||
	    !(m = daemon_fence_machine(snap)) || !(j = calloc(1, sizeof *j)))
		return;
	j->rule = (struct fence_rule)FENCE_RULE_INIT;
	j->all = (struct fence_rule)FENCE_RULE_INIT;
	j->asked = pid;
	j->pid = pid = daemon_pid_here(c->w.pid, pid);
	j->pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	j->start = proctree_start(pid);
	if (j->pidfd < 0 || !j->start || (c->w.uid != 0 && !daemon_proc_all_uids(pid, c->w.uid)) ||
	    fence_rule_build(&j->rule, m, &none) < 0) {
		place_job_free(j);
		return;
	}
	snprintf(c->pre_id, sizeof c->pre_id, "%lld-%d-", (long long)now_ms(), c->w.pid);
	daemon_random_hex(c->pre_id + strlen(c->pre_id), 4);
	c->pre_pid = pid;
	c->pre_start = j->start;
	/* A supervisor (the queue's runner): home again, alive, at the end of
	 * the lease it is granted; from where it is before this move. */
	free(c->pre_keep);
	c->pre_keep = json_is_true(json_object_get(msg, "keep"))
	                  ? keeper_new(c->pre_id, pid, j->start)
	                  : NULL;
	str_copy(j->w.key, sizeof j->w.key, c->pre_id);
	str_copy(j->user, sizeof j->user, c->w.user);
	describe(j, c->w.command);
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
	if (!w->cancelled && g->rc == 0 && g->k) {
		/* Its keeper from now on (on record for a broker after this). */
		fence_keeper_add(g->k);
		g->k = NULL;
		fence_record_add(d, w->key);
	}
	free(g->k);
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

	struct keeper *k = c->pre_keep;

	c->pre_keep = NULL;
	if (!l->preplaced || !c->pre_placed || strcmp(c->pre_id, l->rec.id) ||
	    proctree_start(c->pre_pid) != c->pre_start || !(g = calloc(1, sizeof *g))) {
		free(k);
		return 0;
	}
	g->k = k;
	g->rule = (struct fence_rule)FENCE_RULE_INIT;
	g->all = (struct fence_rule)FENCE_RULE_INIT;
	if (daemon_fence_rule(d, l, 0, NULL, &g->rule, &g->all, g->err, sizeof g->err) < 0) {
		daemon_say("cannot give %s's waiting job (pid %d) its lease's GPUs: %s",
		           l->rec.user, c->pre_pid, g->err);
		fence_rule_release(&g->rule);
		fence_rule_release(&g->all);
		free(g->k);
		free(g);
		return 0;
	}
	str_copy(g->w.key, sizeof g->w.key, l->rec.id);
	str_copy(g->user, sizeof g->user, l->rec.user);
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
	fence_record_drop(d, w->key);
	free(u);
}

void daemon_fence_unplace(struct daemon *d, struct conn *c)
{
	struct unplace_job *u;

	free(c->pre_keep);
	c->pre_keep = NULL;
	if (!c->pre_id[0] || !fence.ops || !(u = calloc(1, sizeof *u)))
		return;
	str_copy(u->w.key, sizeof u->w.key, c->pre_id);
	u->w.run = unplace_run;
	u->w.done = unplace_done;
	u->w.early = 1;
	daemon_work_submit(d, &u->w);
	c->pre_id[0] = '\0';
}
