/*
 * line.c - the leasing rules, once, for the broker and the daemonless
 * registry alike (see line.h for the rules and their order).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "caps.h"
#include "lease_view.h"
#include "line.h"
#include "parse.h"
#include "pick.h"
#include "snapshot.h"

#define HOLDER_LEN 80
#define HELD_LEN 160

const char *line_summary(const struct gm_request *req, char *buf, size_t len)
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

struct line_lease line_lease_of(const struct lease_info *li)
{
	return (struct line_lease){li->id,
	                           li->uid,
	                           li->user,
	                           li->pid,
	                           li->job_pid,
	                           li->reservation,
	                           li->expires_ms,
	                           li->exclusive,
	                           li->share_mib,
	                           li->gpu_count,
	                           (const char(*)[96])li->uuids,
	                           (const char(*)[96])li->migs};
}

struct line_waiter line_waiter_of(const struct waiter_info *wi, const unsigned char *usable,
                                  const unsigned char *mig_usable, int wait, int ask)
{
	return (struct line_waiter){wi->uid,    wi->user,   wi->pid, wi->req, usable,
	                            mig_usable, wi->within, wait,    ask};
}

void line_holder(const struct line_lease *l, int64_t now_ms, char *buf, size_t len)
{
	if (l->reservation)
		snprintf(buf, len, "%s (reservation, %llds left)", l->user,
		         (long long)((l->expires_ms - now_ms) / 1000));
	else
		snprintf(buf, len, "%s (pid %d)", l->user, l->job_pid > 0 ? l->job_pid : l->pid);
}

void line_held_text(const struct line_waiter *w, char *buf, size_t len)
{
	char summary[128];

	snprintf(buf, len, "queued for an earlier request: %.32s's %.64s (pid %d)", w->user,
	         line_summary(w->req, summary, sizeof summary), w->pid);
}

/* What one pass knows: the leases as the policy sees them, GPU by GPU,
 * with the grants of this pass added as it goes. */
struct pass {
	const struct line_input *in;
	size_t ngpu;
	struct policy_lease *pl;
	size_t *owner; /* per pl: its lease (< lease_count) or grant (>= lease_count) */
	unsigned *owner_uid;
	size_t count, cap;
	char (*holders)[HOLDER_LEN];  /* per lease, then per waiter */
	struct policy_lease *scratch; /* pl less one reservation */
	const char **held_for;
	char (*held_text)[HELD_LEN];
	size_t held;
	char first_held[128]; /* the first waiter that holds GPUs back */
	char saturated[256];  /* why those behind wait, once every GPU is held */
	const char **barred;
	char (*barred_text)[HELD_LEN];
	unsigned char *usable, *mig_usable; /* confined to a reservation */
};

static int pass_grow(struct pass *p, size_t more)
{
	struct policy_lease *pl;
	size_t *owner, cap;
	unsigned *uid;

	if (p->count + more <= p->cap)
		return 0;
	cap = (p->count + more) * 2 + 8;
	pl = realloc(p->pl, cap * sizeof *pl);
	if (pl)
		p->pl = pl;
	owner = realloc(p->owner, cap * sizeof *owner);
	if (owner)
		p->owner = owner;
	uid = realloc(p->owner_uid, cap * sizeof *uid);
	if (uid)
		p->owner_uid = uid;
	pl = realloc(p->scratch, cap * sizeof *pl);
	if (pl)
		p->scratch = pl;
	if (!p->pl || !owner || !uid || !pl)
		return -1;
	p->cap = cap;
	return 0;
}

/* MiB that the processes of job hold on the GPU of uuid. */
static uint64_t job_used_mib(const struct line_input *in, const char *uuid, int job)
{
	const struct gm_gpu *gpu = gm_snapshot_find(in->snap, uuid);
	uint64_t used = 0;

	for (size_t k = 0; gpu && in->tree && job > 0 && k < in->snap->proc_count; k++) {
		const struct gm_proc *pr = &in->snap->procs[k];

		if (pr->gpu == gpu->index && pr->has_mem &&
		    proctree_within(in->tree, job, (int)pr->pid))
			used += pr->used_mib;
	}
	return used;
}

static int pass_leases(struct pass *p)
{
	const struct line_input *in = p->in;

	for (size_t i = 0; i < in->lease_count; i++) {
		const struct line_lease *l = &in->leases[i];
		int job = l->job_pid > 0 ? l->job_pid : l->pid;

		line_holder(l, in->now_ms, p->holders[i], sizeof p->holders[i]);
		if (pass_grow(p, l->gpu_count) < 0)
			return -1;
		for (size_t g = 0; g < l->gpu_count; g++) {
			struct policy_lease *x = &p->pl[p->count];
			uint64_t used = l->exclusive ? 0 : job_used_mib(in, l->uuids[g], job);

			x->uuid = l->uuids[g];
			x->mig = l->migs && l->migs[g][0] ? l->migs[g] : NULL;
			x->exclusive = l->exclusive;
			x->share_mib = l->share_mib;
			/* What the job's own processes already hold counts as used
			 * memory in the snapshot, not as pending. */
			x->pending_mib = x->share_mib > used ? x->share_mib - used : 0;
			x->holder = p->holders[i];
			p->owner[p->count] = i;
			p->owner_uid[p->count++] = l->uid;
		}
	}
	return 0;
}

/* A grant of this pass: its GPUs are leased for everyone behind it. */
static int pass_grant(struct pass *p, size_t w, const struct policy_result *res)
{
	const struct line_input *in = p->in;
	const struct line_waiter *wt = &in->waiters[w];
	const struct gm_request *req = wt->req;
	char(*holder)[HOLDER_LEN] = &p->holders[in->lease_count + w];

	/* Granted in this pass: the broker's lease from now on, the
	 * registry's as soon as the waiter's own process takes it. */
	snprintf(*holder, sizeof *holder, "%s (pid %d, served first in line)", wt->user, wt->pid);
	if (pass_grow(p, res->count) < 0)
		return -1;
	for (size_t i = 0; i < res->count; i++) {
		const struct gm_mig *m = res->mig ? &in->snap->migs[res->chosen[i]] : NULL;
		const struct gm_gpu *g = m ? &in->snap->gpus[snapshot_position(in->snap, m->gpu)]
		                           : &in->snap->gpus[res->chosen[i]];
		struct policy_lease *x = &p->pl[p->count];

		x->uuid = g->uuid;
		x->mig = m ? m->uuid : NULL;
		x->exclusive = !req->share;
		x->share_mib = req->share ? size_mib(&req->mem, g->mem_total_mib) : 0;
		x->pending_mib = x->share_mib;
		x->holder = *holder;
		p->owner[p->count] = in->lease_count + w;
		p->owner_uid[p->count++] = wt->uid;
	}
	return 0;
}

/* The waiter's own live reservation that it asks inside of, or NULL. */
static const struct line_lease *within_of(const struct line_input *in, const struct line_waiter *w,
                                          size_t *index)
{
	for (size_t i = 0; w->within && w->within[0] && i < in->lease_count; i++) {
		const struct line_lease *l = &in->leases[i];

		if (l->reservation && l->uid == w->uid && l->id && !strcmp(l->id, w->within) &&
		    l->expires_ms > in->now_ms) {
			*index = i;
			return l;
		}
	}
	return NULL;
}

/* GPUs that uid holds: its leases, its reservations, and this pass's
 * grants (a GPU-slot each, whatever the lease takes of it). */
static unsigned held_by(const struct pass *p, unsigned uid)
{
	unsigned n = 0;

	for (size_t k = 0; k < p->count; k++)
		n += p->owner_uid[k] == uid;
	return n;
}

/*
 * Confine w to its reservation r: every GPU r does not touch is barred
 * with r's name, and of the GPUs it touches only r's own slices (or all
 * slices of a GPU r holds whole) are usable.
 */
static void confine(struct pass *p, const struct line_waiter *w, const struct line_lease *r,
                    struct policy_input *pin)
{
	const struct gm_snapshot *snap = p->in->snap;

	for (size_t pos = 0; pos < p->ngpu; pos++)
		p->usable[pos] = 0;
	for (size_t i = 0; i < snap->mig_count; i++)
		p->mig_usable[i] = 0;
	for (size_t g = 0; g < r->gpu_count; g++) {
		const struct gm_gpu *gpu = gm_snapshot_find(snap, r->uuids[g]);
		const char *slice = r->migs && r->migs[g][0] ? r->migs[g] : NULL;
		size_t pos;

		if (!gpu)
			continue;
		pos = (size_t)(gpu - snap->gpus);
		p->usable[pos] = w->usable ? w->usable[pos] : 1;
		for (size_t i = 0; i < snap->mig_count; i++) {
			const struct gm_mig *m = &snap->migs[i];

			if (m->gpu != gpu->index || (slice && strcmp(m->uuid, slice)))
				continue;
			p->mig_usable[i] =
			    w->mig_usable ? w->mig_usable[i] : (unsigned char)(p->usable[pos] == 1);
		}
	}
	for (size_t pos = 0; pos < p->ngpu; pos++) {
		if (p->usable[pos] || p->barred[pos])
			continue;
		snprintf(
		    p->barred_text[pos], sizeof p->barred_text[pos],
		    "outside reservation %s, inside which it asks (a reservation only narrows)",
		    r->id);
		p->barred[pos] = p->barred_text[pos];
	}
	pin->usable = p->usable;
	pin->mig_usable = p->mig_usable;
	pin->barred = p->barred;
}

static void pass_release(struct pass *p)
{
	free(p->pl);
	free(p->owner);
	free(p->owner_uid);
	free(p->holders);
	free(p->scratch);
	free((void *)p->held_for);
	free(p->held_text);
	free((void *)p->barred);
	free(p->barred_text);
	free(p->usable);
	free(p->mig_usable);
}

/* max_gpus, then max_gpu_hours: 0 within them; 1 not now; 2 never. */
static int over_limits(const struct pass *p, const struct line_waiter *w,
                       const struct line_lease *r, struct line_decision *d)
{
	const struct line_input *in = p->in;
	unsigned held = held_by(p, w->uid);
	char from[96];
	int64_t cap_ms, used;
	int over;

	/* Inside its reservation, the reservation's GPUs are what it uses:
	 * they are not counted twice. */
	if (r)
		held -= held >= r->gpu_count ? (unsigned)r->gpu_count : held;
	over = caps_over(in->cfg, w->uid, held, w->req->count, d->why, sizeof d->why);
	if (over || !in->gpu_ms_used)
		return over;
	cap_ms = config_max_gpu_ms(in->cfg, w->uid, from, sizeof from);
	if (!cap_ms)
		return 0;
	used = in->gpu_ms_used(in->gpu_ms_data, w->uid);
	if (used < cap_ms)
		return 0;
	if (snprintf(d->why, sizeof d->why,
	             "daily GPU-hours used up: %.4g of %.4g h (max_gpu_hours, %s in %s); resets "
	             "at 00:00",
	             (double)used / 3600000.0, (double)cap_ms / 3600000.0, from,
	             in->cfg->system_path) >= (int)sizeof d->why)
		d->why[sizeof d->why - 1] = '\0'; /* cut: a long config path */
	return 1;
}

/* d waits behind a line that holds back every GPU, named by the first of
 * them: whom it waits behind.  The same words for everyone behind,
 * written once. */
static void behind_full_line(struct pass *p, const struct line_waiter *wt, struct line_decision *d,
                             size_t *waiting)
{
	d->verdict = LINE_WAIT;
	if (!p->saturated[0])
		snprintf(
		    p->saturated, sizeof p->saturated,
		    "every GPU it could use is held for earlier requests in line, the first %s",
		    p->first_held);
	memcpy(d->why, p->saturated, sizeof d->why);
	if (wt->wait)
		d->position = ++*waiting;
}

int line_decide(const struct line_input *in, struct line_decision *out)
{
	struct pass p = {0};
	size_t waiting = 0;
	int rc = -1;

	memset(out, 0, in->waiter_count * sizeof *out);
	p.in = in;
	p.ngpu = in->snap->gpu_count;
	p.holders = calloc(in->lease_count + in->waiter_count + 1, sizeof *p.holders);
	p.held_for = calloc(p.ngpu + 1, sizeof *p.held_for);
	p.held_text = calloc(p.ngpu + 1, sizeof *p.held_text);
	p.barred = calloc(p.ngpu + 1, sizeof *p.barred);
	p.barred_text = calloc(p.ngpu + 1, sizeof *p.barred_text);
	p.usable = calloc(p.ngpu + 1, 1);
	p.mig_usable = calloc(in->snap->mig_count + 1, 1);
	if (!p.holders || !p.held_for || !p.held_text || !p.barred || !p.barred_text || !p.usable ||
	    !p.mig_usable || pass_grow(&p, 1) < 0 || pass_leases(&p) < 0)
		goto done;
	for (size_t w = 0; w < in->waiter_count; w++) {
		const struct line_waiter *wt = &in->waiters[w];
		struct line_decision *d = &out[w];
		struct policy_input pin = {.snap = in->snap,
		                           .leases = p.pl,
		                           .lease_count = p.count,
		                           .usable = wt->usable,
		                           .held_for = p.held_for,
		                           .mig_usable = wt->mig_usable};
		size_t r_index = 0;
		const struct line_lease *r = within_of(in, wt, &r_index);
		int over = over_limits(&p, wt, r, d);

		if (over) {
			/* Its user's own limit: it holds nothing back. */
			d->verdict = over == 2 ? LINE_NEVER : LINE_WAIT;
			d->capped = 1;
			if (d->verdict == LINE_WAIT && wt->wait)
				d->position = ++waiting;
			continue;
		}
		d->why[0] = '\0';
		if (p.ngpu && p.held == p.ngpu && wt->wait && !wt->ask) {
			behind_full_line(&p, wt, d, &waiting);
			continue;
		}
		if (caps_barred(in->cfg, wt->uid, in->snap, p.barred, p.barred_text))
			pin.barred = p.barred;
		if (r) {
			/* The reservation does not occupy its GPUs for the waiter
			 * inside it; leases already inside it still do. */
			size_t n = 0;

			for (size_t k = 0; k < p.count; k++)
				if (p.owner[k] != r_index)
					p.scratch[n++] = p.pl[k];
			pin.leases = p.scratch;
			pin.lease_count = n;
			confine(&p, wt, r, &pin);
		}
		if (policy_choose(&pin, wt->req, &d->res) < 0)
			goto done;
		d->ran = 1;
		if (p.ngpu && p.held == p.ngpu && d->res.outcome != POLICY_NEVER) {
			/* It could be met some day: behind the line, as above. */
			policy_result_release(&d->res);
			d->ran = 0;
			behind_full_line(&p, wt, d, &waiting);
			continue;
		}
		if (d->res.outcome == POLICY_OK) {
			d->verdict = LINE_GRANT;
			if (pass_grant(&p, w, &d->res) < 0)
				goto done;
			continue;
		}
		d->verdict = d->res.outcome == POLICY_NEVER ? LINE_NEVER : LINE_WAIT;
		if (d->verdict == LINE_NEVER || !wt->wait)
			continue;
		d->position = ++waiting;
		for (size_t pos = 0; pos < p.ngpu; pos++) {
			if (p.held_for[pos] || !policy_candidate(&pin, wt->req, pos))
				continue;
			line_held_text(wt, p.held_text[pos], sizeof p.held_text[pos]);
			p.held_for[pos] = p.held_text[pos];
			if (!p.held++) {
				char summary[64];

				snprintf(p.first_held, sizeof p.first_held, "%.32s's %s (pid %d)",
				         wt->user, line_summary(wt->req, summary, sizeof summary),
				         wt->pid);
			}
		}
	}
	rc = 0;
done:
	pass_release(&p);
	return rc;
}

int line_candidates(const struct line_input *in, size_t w, unsigned char *cand)
{
	const struct line_waiter *wt = &in->waiters[w];
	struct pass p = {0};
	struct policy_input pin = {
	    .snap = in->snap, .usable = wt->usable, .mig_usable = wt->mig_usable};
	size_t r_index = 0;
	const struct line_lease *r = within_of(in, wt, &r_index);
	int rc = -1;

	p.in = in;
	p.ngpu = in->snap->gpu_count;
	p.barred = calloc(p.ngpu + 1, sizeof *p.barred);
	p.barred_text = calloc(p.ngpu + 1, sizeof *p.barred_text);
	p.usable = calloc(p.ngpu + 1, 1);
	p.mig_usable = calloc(in->snap->mig_count + 1, 1);
	if (!p.barred || !p.barred_text || !p.usable || !p.mig_usable)
		goto done;
	if (caps_barred(in->cfg, wt->uid, in->snap, p.barred, p.barred_text))
		pin.barred = p.barred;
	if (r)
		confine(&p, wt, r, &pin);
	for (size_t pos = 0; pos < p.ngpu; pos++)
		cand[pos] = (unsigned char)policy_candidate(&pin, wt->req, pos);
	rc = 0;
done:
	pass_release(&p);
	return rc;
}

void line_decisions_release(struct line_decision *out, size_t count)
{
	for (size_t i = 0; out && i < count; i++)
		policy_result_release(&out[i].res);
}

char *line_explain(const struct gm_snapshot *snap, const struct line_decision *d, unsigned wanted)
{
	if (d->ran)
		return pick_explain(snap, &d->res, wanted);
	return strdup(d->why);
}
