/*
 * place.c - the broker's placement (main.c): the admin's
 * limits, a fresh snapshot, and serving its line of waiters by the rules
 * of lib/line.c, which the daemonless registry applies too.
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
#include "cmdline.h"
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

/* Reservations whose time is up end; returns the next expiry (wall clock
 * ms), or -1 for none. */
int64_t daemon_expire(struct daemon *d)
{
	int64_t now = now_ms(), next = -1;

	for (struct blease *l = d->leases, *n; l; l = n) {
		n = l->next;
		if (!l->rec.reservation)
			continue;
		if (l->rec.expires_ms <= now) {
			daemon_say("reservation %s of %s expired", l->rec.id, l->rec.user);
			daemon_lease_end(d, l);
		} else if (next < 0 || l->rec.expires_ms < next) {
			next = l->rec.expires_ms;
		}
	}
	return next;
}

/* ---- placement ------------------------------------------------------------ */

/* The i-th GPU (or slice) the rules chose. */
static const struct gm_mig *grant_mig(const struct gm_snapshot *snap,
                                      const struct policy_result *res, size_t i)
{
	return res->mig ? &snap->migs[res->chosen[i]] : NULL;
}

static const struct gm_gpu *grant_gpu(const struct gm_snapshot *snap,
                                      const struct policy_result *res, size_t i)
{
	const struct gm_mig *mig = grant_mig(snap, res, i);

	return mig ? &snap->gpus[snapshot_position(snap, mig->gpu)] : &snap->gpus[res->chosen[i]];
}

void daemon_grant(struct daemon *d, struct conn *c, const struct gm_snapshot *snap,
                  const struct policy_result *res)
{
	struct blease *l = calloc(1, sizeof *l);
	json_t *m, *gpus;
	int placed;

	if (l) {
		l->rec.indices = calloc(res->count + 1, sizeof *l->rec.indices);
		l->rec.uuids = calloc(res->count + 1, sizeof *l->rec.uuids);
		l->rec.migs = calloc(res->count + 1, sizeof *l->rec.migs);
	}
	if (!l || !l->rec.indices || !l->rec.uuids || !l->rec.migs) {
		if (l)
			daemon_lease_free(l);
		daemon_line_remove(d, c);
		daemon_refuse(d, c, GM_ERR_NOMEM, "the lease broker is out of memory", NULL);
		return;
	}
	l->kind = EV_PIDFD;
	l->pidfd = -1;
	if (c->pre_id[0]) {
		/* Its job waits in a cgroup of this name (fence.c). */
		str_copy(l->rec.id, sizeof l->rec.id, c->pre_id);
		l->preplaced = 1;
	} else {
		snprintf(l->rec.id, sizeof l->rec.id, "%lld-%d-", (long long)now_ms(), c->w.pid);
		daemon_random_hex(l->rec.id + strlen(l->rec.id), 4);
	}
	daemon_random_hex(l->token, 16);
	l->rec.uid = c->w.uid;
	str_copy(l->rec.user, sizeof l->rec.user, daemon_user_cached(d, c->w.uid));
	l->rec.pid = c->w.pid;
	/* Read as it joined the line: the process that asked, even if its pid
	 * names another by now. */
	l->rec.pid_start = c->w.pid_start ? c->w.pid_start : proctree_start(c->w.pid);
	str_copy(l->rec.command, sizeof l->rec.command, c->w.command);
	l->rec.start_ms = now_ms();
	l->rec.exclusive = !c->w.req->share;
	l->rec.gpu_count = res->count;
	for (size_t i = 0; i < res->count; i++) {
		/* A slice: the lease names its GPU, exclusive, and the slice,
		 * as the registry's lease files do. */
		const struct gm_mig *mig = grant_mig(snap, res, i);
		const struct gm_gpu *g = grant_gpu(snap, res, i);
		uint64_t share = c->w.req->share ? size_mib(&c->w.req->mem, g->mem_total_mib) : 0;

		l->rec.indices[i] = g->index;
		str_copy(l->rec.uuids[i], sizeof l->rec.uuids[i], g->uuid);
		if (mig)
			str_copy(l->rec.migs[i], sizeof l->rec.migs[i], mig->uuid);
		/* One number for the lease: the smallest GPU's share. */
		if (c->w.req->share && (!l->rec.share_mib || share < l->rec.share_mib))
			l->rec.share_mib = share;
	}
	daemon_line_remove(d, c);
	c->state = CONN_LEASED;
	c->lease = l;
	l->conn = c;
	if (c->reserve_ms > 0) {
		l->rec.reservation = 1;
		l->rec.expires_ms = l->rec.start_ms + c->reserve_ms;
	}
	daemon_lease_add(d, l);
	/* The holder is told the lease's one record (record.h), with the
	 * token that proves it and each GPU's memory (a share's fraction). */
	m = daemon_lease_json(l, 0) ?: json_object();
	json_object_set_new(m, "op", json_string("granted"));
	json_object_set_new(m, "token", json_string(l->token));
	gpus = json_object_get(m, "gpus");
	for (size_t i = 0; i < json_array_size(gpus); i++)
		json_object_set_new(
		    json_array_get(gpus, i), "total_mib",
		    json_integer((json_int_t)grant_gpu(snap, res, i)->mem_total_mib));
	/* On record before the caller hears of it: a broker killed right
	 * after still knows the lease when it starts again. */
	daemon_persist(d);
	if (l->rec.reservation) {
		/* Nobody holds it: the connection ends, the reservation lasts. */
		c->lease = NULL;
		l->conn = NULL;
		daemon_fence_answer(d, c, m); /* once her sessions may open it */
		return;
	}
	/* Its job waits placed: told once the lease's filter is in. */
	placed = daemon_fence_granted(d, c, l, m);
	c->pre_id[0] = '\0'; /* the lease's now: it ends with the lease */
	if (!placed && conn_send(d, c, m) < 0)
		conn_close(d, c); /* ends the lease */
}

static void tell_queued(struct daemon *d, struct conn *c, size_t position, const char *why)
{
	json_t *m = json_object();

	c->told = 1;
	json_object_set_new(m, "op", json_string("queued"));
	json_object_set_new(m, "position", json_integer((json_int_t)position));
	json_object_set_new(m, "why", json_string(why ? why : ""));
	json_object_set_new(m, "place", json_string(c->place));
	/* Its job may be placed while it waits (fence.c) */
	if (daemon_fence_can_preplace() && !c->pre_id[0] && c->reserve_ms <= 0)
		json_object_set_new(m, "preplace", json_true());
	if (conn_send(d, c, m) < 0)
		conn_close(d, c);
}

/* max_gpu_hours: the ledger's figure, which only the broker keeps. */
static int64_t gpu_ms_used(void *data, unsigned uid)
{
	return daemon_hours_used(data, uid);
}

/* The broker's leases as the rules (line.h) read them. */
static struct line_lease *line_leases(const struct daemon *d, size_t *count, int *shares)
{
	struct line_lease *ll = calloc(d->lease_count + 1, sizeof *ll);
	size_t n = 0;

	*shares = 0;
	for (const struct blease *l = d->leases; ll && l; l = l->next) {
		ll[n++] = line_lease_of(&l->rec);
		*shares |= !l->rec.exclusive;
	}
	*count = n;
	return ll;
}

void daemon_candidates(struct daemon *d, struct conn *c, const struct gm_snapshot *snap)
{
	size_t lease_count = 0;
	int shares;
	struct line_lease *ll = line_leases(d, &lease_count, &shares);
	unsigned char *u = record_usable_from(c->w.usable, snap);
	unsigned char *mu = record_usable_migs_from(c->w.usable_migs, snap);
	unsigned char *cand = calloc(snap->gpu_count + 1, 1);
	struct line_waiter w = line_waiter_of(&c->w, u, mu, c->wait, 0);
	struct line_input in = {.snap = snap,
	                        .cfg = &d->cfg,
	                        .now_ms = now_ms(),
	                        .leases = ll,
	                        .lease_count = lease_count,
	                        .waiters = &w,
	                        .waiter_count = 1};

	free(c->w.cand);
	c->w.cand_count = 0;
	c->w.cand = calloc(snap->gpu_count + 1, sizeof *c->w.cand);
	if (ll && cand && c->w.cand && line_candidates(&in, 0, cand) == 0)
		for (size_t pos = 0; pos < snap->gpu_count; pos++)
			if (cand[pos])
				str_copy(c->w.cand[c->w.cand_count++], sizeof c->w.cand[0],
				         snap->gpus[pos].uuid);
	free(ll);
	free(u);
	free(mu);
	free(cand);
}

/*
 * Serve the line with the rules (line.h), first come first served: the
 * waiters it grants are granted, those it finds can never fit or that do
 * not wait are refused with its reason, the rest are told their place
 * (once) and wait.
 */
void daemon_serve_line(struct daemon *d, int fresh)
{
	struct proctree tree = PROCTREE_INIT;
	struct line_input in = {0};
	struct line_lease *ll = NULL;
	struct line_waiter *lw = NULL;
	struct line_decision *out = NULL;
	struct conn **conns = NULL;
	unsigned char **usable = NULL;
	size_t n = 0, lease_count = 0;
	int shares = 0;

	d->dirty = 0;
	if (!d->line_head)
		return;
	in.snap = daemon_snapshot(d, fresh);
	if (!in.snap)
		return;
	daemon_config_fresh(d);
	ll = line_leases(d, &lease_count, &shares);
	lw = calloc(d->line_len + 1, sizeof *lw);
	out = calloc(d->line_len + 1, sizeof *out);
	conns = calloc(d->line_len + 1, sizeof *conns);
	usable = calloc(2 * d->line_len + 2, sizeof *usable);
	if (!ll || !lw || !out || !conns || !usable || (shares && proctree_read(&tree) < 0))
		goto done;
	for (struct conn *c = d->line_head; c && n < d->line_len; c = c->lnext, n++) {
		conns[n] = c;
		usable[2 * n] = record_usable_from(c->w.usable, in.snap);
		usable[2 * n + 1] = record_usable_migs_from(c->w.usable_migs, in.snap);
		lw[n] = line_waiter_of(&c->w, usable[2 * n], usable[2 * n + 1], c->wait, !c->told);
	}
	in.cfg = &d->cfg;
	in.now_ms = now_ms();
	in.tree = shares ? &tree : NULL;
	in.leases = ll;
	in.lease_count = lease_count;
	in.waiters = lw;
	in.waiter_count = n;
	in.gpu_ms_used = gpu_ms_used;
	in.gpu_ms_data = d;
	if (line_decide(&in, out) < 0)
		goto done;
	for (size_t i = 0; i < n; i++) {
		struct conn *c = conns[i];
		const struct line_decision *dec = &out[i];
		char *why;

		if (c->ghost)
			continue; /* held for its waiter: never granted, never told */
		if (strncmp(c->w.limit, dec->capped ? dec->why : "", sizeof c->w.limit - 1)) {
			str_copy(c->w.limit, sizeof c->w.limit, dec->capped ? dec->why : "");
			d->gen++; /* the view shows it: not the one built before */
		}
		if (dec->verdict == LINE_GRANT) {
			daemon_grant(d, c, in.snap, &dec->res);
			continue;
		}
		if (dec->verdict == LINE_WAIT && c->wait && c->told)
			continue;
		why = line_explain(in.snap, dec, c->w.req->count);
		if (dec->verdict == LINE_NEVER || !c->wait)
			daemon_refuse(
			    d, c, dec->verdict == LINE_NEVER ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE,
			    dec->verdict == LINE_NEVER
			        ? "no GPU of this machine can ever meet the request"
			        : "no GPU meets the request now",
			    why);
		else
			tell_queued(d, c, dec->position, why);
		free(why);
	}
done:
	if (out)
		line_decisions_release(out, n);
	for (size_t i = 0; usable && i < 2 * n; i++)
		free(usable[i]);
	proctree_release(&tree);
	free(ll);
	free(lw);
	free(out);
	free(conns);
	free(usable);
}
