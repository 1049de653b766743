/*
 * daemon_place.c - the broker's placement (cmd_daemon.c): the admin's
 * limits, a fresh snapshot, and serving its line of waiters first come,
 * first served with lib/policy.c, as the daemonless registry does.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cli.h"
#include "daemon.h"

/* ---- the admin's limits ------------------------------------------------- */

/* Read gpuman.conf again if it changed since (or was never read).  A file
 * that no longer parses keeps the limits read before it.  0, or -1 when
 * there are none to go by. */
int daemon_config_fresh(struct daemon *d)
{
	const char *env = getenv("GPUMAN_CONFIG");
	struct config cfg;
	struct stat st;
	char err[GM_ERRBUF_SIZE];
	int exists = stat(env && *env ? env : CONFIG_SYSTEM_PATH, &st) == 0;

	if (d->cfg_read && exists && st.st_mtim.tv_sec == d->cfg_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == d->cfg_mtim.tv_nsec)
		return 0;
	if (d->cfg_read && !exists && !d->cfg_mtim.tv_sec && !d->cfg_mtim.tv_nsec)
		return 0;
	if (config_load(&cfg, 0, err, sizeof err) != GM_OK) {
		daemon_say("%s (%s)", err,
		           d->cfg_read ? "keeping the limits read before" : "no limits");
		return d->cfg_read ? 0 : -1;
	}
	if (d->cfg_read)
		config_release(&d->cfg);
	d->cfg = cfg;
	d->cfg_read = 1;
	d->gen++; /* the view shows limits */
	d->cfg_mtim = exists ? st.st_mtim : (struct timespec){0, 0};
	return 0;
}

/* GPUs that uid's leases and reservations hold (counted as they change). */
unsigned daemon_held_by(struct daemon *d, unsigned uid)
{
	struct user_slot *u = daemon_user(d, uid);

	return u ? u->gpus : 0;
}

/* The reservation c asks inside of, if it is its user's and lives. */
static const struct blease *within_of(const struct daemon *d, const struct conn *c)
{
	for (const struct blease *l = d->leases; c->within[0] && l; l = l->next)
		if (l->reservation && l->uid == c->uid && !strcmp(l->id, c->within))
			return l;
	return NULL;
}

/* Reservations whose time is up end; returns the next expiry (wall clock
 * ms), or -1 for none. */
int64_t daemon_expire(struct daemon *d)
{
	int64_t now = now_ms(), next = -1;

	for (struct blease *l = d->leases, *n; l; l = n) {
		n = l->next;
		if (!l->reservation)
			continue;
		if (l->expires_ms <= now) {
			daemon_say("reservation %s of %s expired", l->id, l->user);
			daemon_lease_end(d, l);
		} else if (next < 0 || l->expires_ms < next) {
			next = l->expires_ms;
		}
	}
	return next;
}

/* ---- placement ------------------------------------------------------------ */

struct gm_snapshot *daemon_snapshot(struct daemon *d, int fresh)
{
	int64_t now = monotonic_ms();
	struct gm_snapshot *snap;
	char err[GM_ERRBUF_SIZE];

	if (d->snap && !fresh && now - d->snap_at < SNAPSHOT_REUSE_MS)
		return d->snap;
	if (gm_snapshot_take(d->ctx, &snap, err, sizeof err) != GM_OK) {
		daemon_say("cannot read the GPUs: %s", err);
		return d->snap; /* the last one, if any */
	}
	gm_snapshot_free(d->snap);
	d->snap = snap;
	d->snap_at = now;
	return snap;
}

/* The leases as the policy sees them, GPU by GPU (as registry.c's
 * attempt_run does for lease files). */
struct placed {
	struct policy_lease *pl;
	char (*holders)[80];
	size_t count;
};

static int placed_build(struct placed *p, const struct daemon *d, const struct gm_snapshot *snap,
                        const struct blease *skip)
{
	struct proctree tree = PROCTREE_INIT;
	size_t total = 0, i = 0;
	int need_tree = 0;

	free(p->pl);
	free(p->holders);
	memset(p, 0, sizeof *p);
	for (const struct blease *l = d->leases; l; l = l->next) {
		total += l->n;
		need_tree |= !l->exclusive;
	}
	p->pl = calloc(total + 1, sizeof *p->pl);
	p->holders = calloc(d->lease_count + 1, sizeof *p->holders);
	if (!p->pl || !p->holders || (need_tree && proctree_read(&tree) < 0))
		return -1;
	for (const struct blease *l = d->leases; l; l = l->next, i++) {
		int job = l->job_pid ? l->job_pid : l->pid;

		if (l == skip)
			continue;
		if (l->reservation)
			snprintf(p->holders[i], sizeof p->holders[i],
			         "%s (reservation, %llds left)", l->user,
			         (long long)((l->expires_ms - now_ms()) / 1000));
		else
			snprintf(p->holders[i], sizeof p->holders[i], "%s (pid %d)", l->user, job);
		for (size_t g = 0; g < l->n; g++) {
			struct policy_lease *x = &p->pl[p->count++];
			const struct gm_gpu *gpu = gm_snapshot_find(snap, l->uuids[g]);
			uint64_t used = 0;

			x->uuid = l->uuids[g];
			x->mig = l->migs[g][0] ? l->migs[g] : NULL;
			x->exclusive = l->exclusive;
			x->share_mib = l->share_mib;
			x->holder = p->holders[i];
			/* What the job's own processes already hold counts as
			 * used memory in the snapshot, not as pending. */
			for (size_t k = 0; !l->exclusive && gpu && k < snap->proc_count; k++) {
				const struct gm_proc *pr = &snap->procs[k];

				if (pr->gpu == gpu->index && pr->has_mem &&
				    proctree_within(&tree, job, (int)pr->pid))
					used += pr->used_mib;
			}
			x->pending_mib = x->share_mib > used ? x->share_mib - used : 0;
		}
	}
	proctree_release(&tree);
	return 0;
}

/* Per snapshot position, what c's inherited allocation lets it use. */
unsigned char *daemon_usable_for(const struct conn *c, const struct gm_snapshot *snap)
{
	unsigned char *u;

	if (!c->usable)
		return NULL;
	u = calloc(snap->gpu_count + 1, 1);
	for (size_t i = 0; u && i < snap->gpu_count; i++)
		u[i] = (unsigned char)json_integer_value(
		    json_object_get(c->usable, snap->gpus[i].uuid));
	return u;
}

/* Per slice (snap->migs), the same. */
unsigned char *daemon_mig_usable_for(const struct conn *c, const struct gm_snapshot *snap)
{
	unsigned char *u;

	if (!c->usable_migs)
		return NULL;
	u = calloc(snap->mig_count + 1, 1);
	for (size_t i = 0; u && i < snap->mig_count; i++)
		u[i] = (unsigned char)json_integer_value(
		    json_object_get(c->usable_migs, snap->migs[i].uuid));
	return u;
}

void daemon_grant(struct daemon *d, struct conn *c, const struct gm_snapshot *snap,
                  const struct policy_result *res)
{
	struct blease *l = calloc(1, sizeof *l);
	json_t *m, *gpus;

	if (l) {
		l->indices = calloc(res->count + 1, sizeof *l->indices);
		l->uuids = calloc(res->count + 1, sizeof *l->uuids);
		l->migs = calloc(res->count + 1, sizeof *l->migs);
	}
	if (!l || !l->indices || !l->uuids || !l->migs) {
		if (l)
			daemon_lease_free(l);
		daemon_line_remove(d, c);
		daemon_refuse(d, c, GM_ERR_NOMEM, "the lease broker is out of memory", NULL);
		return;
	}
	l->kind = EV_PIDFD;
	l->pidfd = -1;
	snprintf(l->id, sizeof l->id, "%lld-%d-", (long long)now_ms(), c->pid);
	daemon_random_hex(l->id + strlen(l->id), 4);
	daemon_random_hex(l->token, 16);
	l->uid = c->uid;
	str_copy(l->user, sizeof l->user, daemon_user_cached(d, c->uid));
	l->pid = c->pid;
	l->pid_start = daemon_proc_start(c->pid);
	str_copy(l->command, sizeof l->command, c->command);
	l->start_ms = now_ms();
	l->exclusive = !c->req->share;
	l->n = res->count;
	m = json_object();
	gpus = json_array();
	for (size_t i = 0; i < res->count; i++) {
		/* A slice: the lease names its GPU, exclusive, and the slice,
		 * as the registry's lease files do. */
		const struct gm_mig *mig = res->mig ? &snap->migs[res->chosen[i]] : NULL;
		const struct gm_gpu *g = mig ? &snap->gpus[snapshot_position(snap, mig->gpu)]
		                             : &snap->gpus[res->chosen[i]];
		uint64_t share = c->req->share ? size_mib(&c->req->mem, g->mem_total_mib) : 0;
		json_t *jg = json_object();

		l->indices[i] = g->index;
		str_copy(l->uuids[i], sizeof l->uuids[i], g->uuid);
		if (mig) {
			str_copy(l->migs[i], sizeof l->migs[i], mig->uuid);
			json_object_set_new(jg, "mig_uuid", json_string(mig->uuid));
		}
		/* One number for the lease: the smallest GPU's share. */
		if (c->req->share && (!l->share_mib || share < l->share_mib))
			l->share_mib = share;
		json_object_set_new(jg, "index", json_integer(g->index));
		json_object_set_new(jg, "uuid", json_string(g->uuid));
		json_object_set_new(jg, "total_mib", json_integer((json_int_t)g->mem_total_mib));
		json_array_append_new(gpus, jg);
	}
	daemon_line_remove(d, c);
	c->state = CONN_LEASED;
	c->lease = l;
	l->conn = c;
	if (c->reserve_ms > 0) {
		l->reservation = 1;
		l->expires_ms = l->start_ms + c->reserve_ms;
	}
	daemon_lease_add(d, l);
	json_object_set_new(m, "op", json_string("granted"));
	json_object_set_new(m, "id", json_string(l->id));
	json_object_set_new(m, "token", json_string(l->token));
	json_object_set_new(m, "share_mib", json_integer((json_int_t)l->share_mib));
	json_object_set_new(m, "gpus", gpus);
	/* On record before the caller hears of it: a broker killed right
	 * after still knows the lease when it starts again. */
	daemon_persist(d);
	if (l->reservation) {
		/* Nobody holds it: the connection ends, the reservation lasts. */
		c->lease = NULL;
		l->conn = NULL;
		conn_finish(d, c, m);
		return;
	}
	if (conn_send(d, c, m) < 0)
		conn_close(d, c); /* ends the lease */
}

static void tell_queued(struct daemon *d, struct conn *c, size_t position, const char *why)
{
	json_t *m = json_object();

	c->told = 1;
	json_object_set_new(m, "op", json_string("queued"));
	json_object_set_new(m, "position", json_integer((json_int_t)position));
	json_object_set_new(m, "why", json_string(why ? why : ""));
	if (conn_send(d, c, m) < 0)
		conn_close(d, c);
}

/*
 * Serve the line, first come first served: each waiter in arrival order is
 * placed if the policy finds it GPUs among those no earlier waiter could
 * use; one that does not fit holds back its candidate GPUs from everybody
 * behind it.  Once every GPU is held back, nobody further back can be
 * placed, so the walk stops there: a pass costs the few waiters at the
 * head, not the length of the line.
 */
void daemon_serve_line(struct daemon *d, int fresh)
{
	struct gm_snapshot *snap;
	struct placed placed = {0}, mine = {0};
	const char **held_for = NULL, **barred = NULL;
	char(*held_text)[160] = NULL, (*barred_text)[160] = NULL;
	size_t position = 0, held = 0;
	uint64_t held_mask = 0;
	struct conn *c, *next;
	int skipped = 0;

	d->dirty = 0;
	if (!d->line_head)
		return;
	snap = daemon_snapshot(d, fresh);
	if (!snap)
		return;
	daemon_config_fresh(d);
	held_for = calloc(snap->gpu_count + 1, sizeof *held_for);
	held_text = calloc(snap->gpu_count + 1, sizeof *held_text);
	barred = calloc(snap->gpu_count + 1, sizeof *barred);
	barred_text = calloc(snap->gpu_count + 1, sizeof *barred_text);
	if (!held_for || !held_text || !barred || !barred_text ||
	    placed_build(&placed, d, snap, NULL) < 0)
		goto done;
	for (c = d->line_head; c; c = next) {
		struct policy_result res = POLICY_RESULT_INIT;
		struct policy_input in = {.snap = snap,
		                          .leases = placed.pl,
		                          .lease_count = placed.count,
		                          .held_for = held_for};
		const struct blease *within;
		unsigned char *usable, *mig_usable = NULL;
		char *why, limit[200];
		int over;

		next = c->lnext;
		position++;
		/* Told it waits, and every GPU it could use is held back for an
		 * earlier request: nothing to do, at the cost of a test. */
		if (c->told && c->wait && c->cand_mask && c->cand_gpus == snap->gpu_count &&
		    !(c->cand_mask & ~held_mask))
			continue;
		/* Over its cap, it is not served and holds nothing back: first
		 * come, first served within what each user may have. */
		within = within_of(d, c);
		over = caps_over(&d->cfg, c->uid,
		                 daemon_held_by(d, c->uid) - (within ? (unsigned)within->n : 0),
		                 c->req->count, limit, sizeof limit);
		if (!over && !within)
			over = daemon_hours_over(d, c->uid, limit, sizeof limit);
		if (over == 2 || (over && !c->wait)) {
			daemon_refuse(d, c, over == 2 ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE,
			              over == 2 ? "no GPU of this machine can ever meet the request"
			                        : "no GPU meets the request now",
			              limit);
			position--;
			continue;
		}
		if (over) {
			if (!c->told)
				tell_queued(d, c, position, limit);
			continue;
		}
		usable = daemon_usable_for(c, snap);
		mig_usable = daemon_mig_usable_for(c, snap);
		in.usable = usable;
		if (caps_barred(&d->cfg, c->uid, snap, barred, barred_text))
			in.barred = barred;
		/* Inside its own reservation: those GPUs are not taken from it. */
		if (within && placed_build(&mine, d, snap, within) == 0) {
			in.leases = mine.pl;
			in.lease_count = mine.count;
		}
		in.mig_usable = mig_usable;
		if (held == snap->gpu_count) {
			/* Everything is held for earlier requests. */
			if (!c->wait)
				daemon_refuse(
				    d, c, GM_ERR_UNAVAILABLE, "no GPU meets the request now",
				    "every GPU it could use is held for earlier requests in line");
			else if (!c->told)
				tell_queued(d, c, position,
				            "every GPU it could use is held for "
				            "earlier requests in line");
			free(usable);
			free(mig_usable);
			if (!skipped) {
				/* Nobody further back can be placed: the pass stops
				 * here, but for the requests that arrived since the
				 * last (a suffix of the line: each is told it waits,
				 * or refused), so that it costs the head and the
				 * newcomers, not the line. */
				struct conn *t, *first = NULL;
				size_t k = 0;

				skipped = 1;
				for (t = d->line_tail;
				     t && t != c && !t->told && t->state == CONN_WAITING;
				     t = t->lprev, k++)
					first = t;
				next = first;
				position = d->line_len >= k ? d->line_len - k : position;
			}
			continue;
		}
		if (policy_choose(&in, c->req, &res) < 0) {
			free(usable);
			free(mig_usable);
			break;
		}
		if (res.outcome == POLICY_OK) {
			daemon_grant(d, c, snap, &res);
			position--;
			if (placed_build(&placed, d, snap, NULL) < 0) {
				policy_result_release(&res);
				free(usable);
				free(mig_usable);
				break;
			}
			in.leases = placed.pl;
			in.lease_count = placed.count;
		} else if (res.outcome == POLICY_NEVER || !c->wait) {
			why = pick_explain(snap, &res, c->req->count);
			daemon_refuse(
			    d, c, res.outcome == POLICY_NEVER ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE,
			    res.outcome == POLICY_NEVER
			        ? "no GPU of this machine can ever meet the request"
			        : "no GPU meets the request now",
			    why);
			free(why);
		} else {
			if (!c->told) {
				why = pick_explain(snap, &res, c->req->count);
				tell_queued(d, c, position, why);
				free(why);
			}
			for (size_t pos = 0; pos < snap->gpu_count; pos++) {
				if (held_for[pos] || !policy_candidate(&in, c->req, pos))
					continue;
				snprintf(held_text[pos], sizeof held_text[pos],
				         "queued for an earlier request: %.32s's %.64s (pid %d)",
				         daemon_user_cached(d, c->uid), c->summary, c->pid);
				held_for[pos] = held_text[pos];
				held++;
				if (pos < 64)
					held_mask |= 1ull << pos;
			}
		}
		policy_result_release(&res);
		free(usable);
		free(mig_usable);
	}
done:
	free(placed.pl);
	free(placed.holders);
	free(mine.pl);
	free(mine.holders);
	free(held_for);
	free(held_text);
	free((void *)barred);
	free(barred_text);
}
