/*
 * waste.c - the waste finder (waste.h): per process and per lease, GPUs that
 * are held and not used.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parse.h"
#include "text.h"
#include "util.h"
#include "waste.h"

#define BIT(i) ((uint64_t)1 << ((i)&63))

static int add_item(struct waste_report *rep, size_t *cap, const struct waste_item *it)
{
	struct waste_item *grown;

	if (rep->count == *cap) {
		*cap = *cap ? *cap * 2 : 8;
		grown = realloc(rep->items, *cap * sizeof *grown);
		if (!grown)
			return -1;
		rep->items = grown;
	}
	rep->items[rep->count++] = *it;
	return 0;
}

static void item_from_proc(struct waste_item *it, enum waste_kind kind, const struct gm_proc *p,
                           long lease)
{
	memset(it, 0, sizeof *it);
	it->kind = kind;
	it->pid = p->pid;
	it->has_user = p->has_user;
	snprintf(it->user, sizeof it->user, "%s", p->has_user ? p->user : "");
	snprintf(it->command, sizeof it->command, "%s", p->command);
	it->lease = lease;
	it->on_lease = -1;
}

/* Whose lease, other than own, covers one of the GPUs in mask; -1 none. */
static long lease_on(const struct registry_view *view, uint64_t mask, long own)
{
	for (size_t i = 0; i < view->lease_count; i++) {
		if ((long)i == own)
			continue;
		for (size_t g = 0; g < view->leases[i].gpu_count; g++)
			if (mask & BIT(view->leases[i].indices[g]))
				return (long)i;
	}
	return -1;
}

/* Whether lease l holds slice m: an entry naming it, or its whole GPU (a
 * reservation of a GPU in MIG mode). */
static int holds_slice(const struct lease_info *l, const struct gm_mig *m)
{
	for (size_t g = 0; g < l->gpu_count; g++)
		if (l->indices[g] == m->gpu &&
		    (!l->migs || !l->migs[g][0] || !strcmp(l->migs[g], m->uuid)))
			return 1;
	return 0;
}

/* Whose lease holds slice m; -1 none. */
static long lease_on_slice(const struct registry_view *view, const struct gm_mig *m)
{
	for (size_t i = 0; i < view->lease_count; i++)
		if (holds_slice(&view->leases[i], m))
			return (long)i;
	return -1;
}

/* The slice a process runs in, NULL on a whole GPU (or where the driver
 * does not say which slice). */
static const struct gm_mig *slice_of(const struct gm_snapshot *snap, const struct gm_proc *p)
{
	const struct gm_mig *m = snap->mig_count ? gm_proc_mig(snap, p) : NULL;

	return m && m->uuid[0] ? m : NULL;
}

/* The lease each process runs under, for waste: proc_lease, except that a
 * process in a slice its lease does not hold is in no lease there. */
static long *lease_per_proc(const struct gm_snapshot *snap, const struct registry_view *view,
                            const long *proc_lease)
{
	long *out = calloc(snap->proc_count + 1, sizeof *out);

	for (size_t k = 0; out && k < snap->proc_count; k++) {
		const struct gm_mig *m = slice_of(snap, &snap->procs[k]);

		out[k] = proc_lease ? proc_lease[k] : -1;
		if (out[k] >= 0 && m && !holds_slice(&view->leases[out[k]], m))
			out[k] = -1;
	}
	return out;
}

/* A process in a slice outside every lease of its own: one item per slice,
 * naming whose lease holds the slice. */
static int add_unleased_slice(const struct gm_snapshot *snap, const struct registry_view *view,
                              const long *proc_lease, size_t k, struct waste_report *rep,
                              size_t *cap)
{
	const struct gm_proc *q = &snap->procs[k];
	const struct gm_mig *m = slice_of(snap, q);
	struct waste_item it;

	item_from_proc(&it, WASTE_UNLEASED, q, proc_lease ? proc_lease[k] : -1);
	it.gpus = BIT(q->gpu);
	it.held_mib = q->has_mem ? q->used_mib : 0;
	snprintf(it.mig_uuid, sizeof it.mig_uuid, "%s", m->uuid);
	it.on_lease = lease_on_slice(view, m);
	return add_item(rep, cap, &it);
}

/* One pass per distinct pid: where it holds memory idle, where it computes,
 * and whether it is outside every lease. */
static int find_procs(const struct gm_snapshot *snap, const struct registry_view *view,
                      const long *proc_lease, const long *in_lease, struct waste_report *rep,
                      size_t *cap)
{
	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];
		struct waste_item hog, out;
		long lease = in_lease[i];
		int seen = 0;

		for (size_t k = 0; k < i && !seen; k++)
			seen = snap->procs[k].pid == p->pid;
		if (seen)
			continue;
		item_from_proc(&hog, WASTE_HOG, p, lease);
		item_from_proc(&out, WASTE_UNLEASED, p, -1);
		for (size_t k = i; k < snap->proc_count; k++) {
			const struct gm_proc *q = &snap->procs[k];

			/* A display server's memory is not waste. */
			if (q->pid != p->pid || !(q->kind & GM_PROC_COMPUTE))
				continue;
			if (in_lease[k] >= 0)
				hog.lease = in_lease[k];
			else if (slice_of(snap, q)) {
				if (add_unleased_slice(snap, view, proc_lease, k, rep, cap) < 0)
					return -1;
			} else {
				out.gpus |= BIT(q->gpu);
				out.held_mib += q->has_mem ? q->used_mib : 0;
			}
			if (!q->has_util)
				continue;
			if (q->util_pct > 0) {
				hog.busy_gpus |= BIT(q->gpu);
			} else if (!q->has_mem || q->used_mib > 0) {
				hog.idle_gpus |= BIT(q->gpu);
				hog.held_mib += q->has_mem ? q->used_mib : 0;
			}
		}
		if (hog.idle_gpus && add_item(rep, cap, &hog) < 0)
			return -1;
		if (out.gpus) {
			out.on_lease = lease_on(view, out.gpus, -1);
			if (add_item(rep, cap, &out) < 0)
				return -1;
		}
	}
	return 0;
}

/* Whether process k uses entry g of lease i: it runs under the lease (for
 * a reservation, under a lease of its user) on that GPU, and in that slice
 * where the entry is a slice. */
static int uses(const struct gm_snapshot *snap, const struct registry_view *view,
                const long *in_lease, size_t i, size_t g, size_t k)
{
	const struct lease_info *l = &view->leases[i];
	const struct gm_mig *m;

	if (snap->procs[k].gpu != l->indices[g] || in_lease[k] < 0)
		return 0;
	/* a reservation is used by its user's leases in it */
	if (in_lease[k] != (long)i && !(l->reservation && view->leases[in_lease[k]].uid == l->uid))
		return 0;
	m = slice_of(snap, &snap->procs[k]);
	return !m || !l->migs || !l->migs[g][0] || !strcmp(l->migs[g], m->uuid);
}

static int find_leases(const struct gm_snapshot *snap, const struct registry_view *view,
                       const long *in_lease, const struct waste_opts *opts,
                       struct waste_report *rep, size_t *cap)
{
	for (size_t i = 0; i < view->lease_count; i++) {
		const struct lease_info *l = &view->leases[i];
		struct waste_item it;
		int young = opts->now_ms - l->start_ms < opts->lease_grace_ms;

		if (young && !l->over_limit_ms)
			continue;
		memset(&it, 0, sizeof it);
		it.kind = WASTE_IDLE_LEASE;
		it.pid = (unsigned)l->pid;
		it.has_user = 1;
		snprintf(it.user, sizeof it.user, "%s", l->user);
		snprintf(it.command, sizeof it.command, "%s", l->command);
		it.lease = (long)i;
		it.on_lease = -1;
		it.age_ms = opts->now_ms - l->start_ms;
		for (size_t g = 0; g < l->gpu_count; g++) {
			int used = 0;

			for (size_t k = 0; k < snap->proc_count && !used; k++)
				used = uses(snap, view, in_lease, i, g, k);
			if (used)
				continue;
			it.idle_gpus |= BIT(l->indices[g]);
			if (l->migs && l->migs[g][0] && !it.mig_uuid[0])
				snprintf(it.mig_uuid, sizeof it.mig_uuid, "%s", l->migs[g]);
		}
		if (!young && it.idle_gpus && add_item(rep, cap, &it) < 0)
			return -1;
		if (l->over_limit_ms) {
			it.kind = WASTE_OVER_LIMIT;
			it.idle_gpus = 0;
			it.mig_uuid[0] = '\0';
			for (size_t g = 0; g < l->gpu_count; g++) {
				it.idle_gpus |= BIT(l->indices[g]);
				if (l->migs && l->migs[g][0] && !it.mig_uuid[0])
					snprintf(it.mig_uuid, sizeof it.mig_uuid, "%s", l->migs[g]);
			}
			if (add_item(rep, cap, &it) < 0)
				return -1;
		}
	}
	return 0;
}

static int item_cmp(const void *a, const void *b)
{
	const struct waste_item *x = a, *y = b;
	int c;

	if (x->has_user != y->has_user)
		return y->has_user - x->has_user;
	c = strcmp(x->user, y->user);
	if (c)
		return c;
	if (x->kind != y->kind)
		return (int)x->kind - (int)y->kind;
	if (x->pid != y->pid)
		return (x->pid > y->pid) - (x->pid < y->pid);
	/* one process's slices, in GPU order */
	if (x->gpus != y->gpus)
		return (x->gpus > y->gpus) - (x->gpus < y->gpus);
	return strcmp(x->mig_uuid, y->mig_uuid);
}

int waste_find(const struct gm_snapshot *snap, const struct registry_view *view,
               const long *proc_lease, const struct waste_opts *opts, struct waste_report *out)
{
	size_t cap = 0;
	long *in_lease = lease_per_proc(snap, view, proc_lease);
	int rc = in_lease ? 0 : -1;

	*out = (struct waste_report)WASTE_REPORT_INIT;
	if (rc == 0)
		rc = find_procs(snap, view, proc_lease, in_lease, out, &cap);
	if (rc == 0)
		rc = find_leases(snap, view, in_lease, opts, out, &cap);
	free(in_lease);
	if (rc < 0) {
		waste_report_release(out);
		return -1;
	}
	if (out->count > 1)
		qsort(out->items, out->count, sizeof *out->items, item_cmp);
	return 0;
}

void waste_report_release(struct waste_report *rep)
{
	free(rep->items);
	*rep = (struct waste_report)WASTE_REPORT_INIT;
}

const char *waste_kind_name(enum waste_kind kind)
{
	switch (kind) {
	case WASTE_HOG:
		return "hog";
	case WASTE_IDLE_LEASE:
		return "idle-lease";
	case WASTE_UNLEASED:
		return "unleased";
	case WASTE_OVER_LIMIT:
		return "over-limit";
	}
	return "waste";
}

char *waste_gpu_list(uint64_t mask, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < 64 && o < len; i++)
		if (mask & BIT(i))
			o += (size_t)snprintf(buf + o, len - o, "%s%u", o ? "," : "", i);
	return buf;
}

static int popcount64(uint64_t m)
{
	int n = 0;

	for (; m; m &= m - 1)
		n++;
	return n;
}

static const char *size_text(char *buf, size_t len, uint64_t mib)
{
	if (mib < 1024)
		snprintf(buf, len, "%lluM", (unsigned long long)mib);
	else
		snprintf(buf, len, "%.1fG", mib / 1024.0);
	return buf;
}

/* "GPU 3" / "GPUs 1,3" */
static const char *gpus_text(char *buf, size_t len, uint64_t mask)
{
	char list[256];

	snprintf(buf, len, "GPU%s %s", popcount64(mask) > 1 ? "s" : "",
	         waste_gpu_list(mask, list, sizeof list));
	return buf;
}

/* The slice of this UUID in the snapshot; NULL if it is gone. */
static const struct gm_mig *slice_named(const struct gm_snapshot *snap, const char *uuid)
{
	for (size_t i = 0; snap && uuid[0] && i < snap->mig_count; i++)
		if (!strcmp(snap->migs[i].uuid, uuid))
			return &snap->migs[i];
	return NULL;
}

char *waste_where(const struct gm_snapshot *snap, const struct waste_item *it, uint64_t mask,
                  char *buf, size_t len)
{
	const struct gm_mig *m = slice_named(snap, it->mig_uuid);
	char list[256], uuid[96];

	if (!it->mig_uuid[0] || popcount64(mask) != 1)
		return (char *)gpus_text(buf, len, mask);
	/* as status shows a slice: profile and the UUID's first 12 */
	text_printable(uuid, 13, it->mig_uuid);
	snprintf(buf, len, "slice %s%s%s of GPU %s", m && m->profile[0] ? m->profile : "",
	         m && m->profile[0] ? " " : "", uuid, waste_gpu_list(mask, list, sizeof list));
	return buf;
}

/* "pid 3141592 (alice, python train.py)" with the text escaped. */
static const char *who_text(char *buf, size_t len, const struct waste_item *it)
{
	char user[80], cmd[96];

	text_printable(user, sizeof user, it->has_user ? it->user : "user unknown");
	text_printable(cmd, sizeof cmd, it->command);
	if (cmd[0])
		snprintf(buf, len, "pid %u (%s, %s)", it->pid, user, cmd);
	else
		snprintf(buf, len, "pid %u (%s)", it->pid, user);
	return buf;
}

char *waste_what(const struct gm_snapshot *snap, const struct registry_view *view,
                 const struct waste_opts *opts, const struct waste_item *it, char *buf, size_t len)
{
	char who[256], a[300], b[300], size[16], age[32], id[80], user[80];

	who_text(who, sizeof who, it);
	switch (it->kind) {
	case WASTE_HOG:
		if (it->busy_gpus)
			snprintf(buf, len, "%s holds %s on %s but computes only on %s", who,
			         size_text(size, sizeof size, it->held_mib),
			         gpus_text(a, sizeof a, it->idle_gpus),
			         waste_gpu_list(it->busy_gpus, b, sizeof b));
		else
			snprintf(buf, len, "%s holds %s on %s and computed nothing in the last %us",
			         who, size_text(size, sizeof size, it->held_mib),
			         gpus_text(a, sizeof a, it->idle_gpus), opts->window_s);
		break;
	case WASTE_IDLE_LEASE:
		text_printable(id, sizeof id, view->leases[it->lease].id);
		if (view->leases[it->lease].reservation) {
			snprintf(buf, len,
			         "reservation %s of %s has held %s for %s with nothing of theirs "
			         "running on %s",
			         id, text_printable(user, sizeof user, it->user),
			         gpus_text(a, sizeof a, it->idle_gpus),
			         age_text(age, sizeof age, it->age_ms),
			         popcount64(it->idle_gpus) > 1 ? "them" : "it");
			break;
		}
		snprintf(buf, len,
		         "lease %s of %s has held %s for %s with none of its processes on %s", id,
		         who, waste_where(snap, it, it->idle_gpus, a, sizeof a),
		         age_text(age, sizeof age, it->age_ms),
		         popcount64(it->idle_gpus) > 1 ? "them" : "it");
		break;
	case WASTE_OVER_LIMIT:
		duration_text(b, sizeof b, view->leases[it->lease].over_limit_ms);
		snprintf(buf, len,
		         "lease %s of %s has held %s for %s, over its limit (max_lease %s of %s)",
		         text_printable(id, sizeof id, view->leases[it->lease].id), who,
		         waste_where(snap, it, it->idle_gpus, a, sizeof a),
		         age_text(age, sizeof age, it->age_ms), b,
		         view->leases[it->lease].limit_from);
		break;
	case WASTE_UNLEASED:
		waste_where(snap, it, it->gpus, a, sizeof a);
		/* a job of a lease of one slice that runs in another */
		if (it->lease >= 0)
			snprintf(b, sizeof b, "outside its lease %s",
			         text_printable(id, sizeof id, view->leases[it->lease].id));
		else
			snprintf(b, sizeof b, "outside gpuman");
		if (it->on_lease >= 0)
			snprintf(
			    buf, len, "%s runs on %s %s, on a %s leased to %s", who, a, b,
			    it->mig_uuid[0] ? "slice" : "GPU",
			    text_printable(user, sizeof user, view->leases[it->on_lease].user));
		else
			snprintf(buf, len, "%s runs on %s %s (%s)", who, a, b,
			         it->lease >= 0 ? "no lease holds the slice" : "no lease");
		break;
	}
	return buf;
}

/* The slice of lease l ("MIG-..."), "" for whole GPUs. */
static const char *lease_slice(const struct lease_info *l)
{
	for (size_t g = 0; l->migs && g < l->gpu_count; g++)
		if (l->migs[g][0])
			return l->migs[g];
	return "";
}

/* A hog busy on one slice: that slice ("MIG-..."), else NULL. */
static const struct gm_mig *busy_slice(const struct gm_snapshot *snap, const struct waste_item *it)
{
	for (size_t k = 0; popcount64(it->busy_gpus) == 1 && k < snap->proc_count; k++)
		if (snap->procs[k].pid == it->pid && (it->busy_gpus & BIT(snap->procs[k].gpu)))
			return slice_of(snap, &snap->procs[k]);
	return NULL;
}

char *waste_advice(const struct gm_snapshot *snap, const struct registry_view *view,
                   const struct waste_item *it, char *buf, size_t len)
{
	char list[256], uuid[16] = "", id[80], slice[96];
	const struct lease_info *l;
	const struct gm_mig *m;

	switch (it->kind) {
	case WASTE_HOG:
		if (it->busy_gpus && popcount64(it->busy_gpus) == 1) {
			for (size_t i = 0; i < snap->gpu_count; i++)
				if (it->busy_gpus & BIT(snap->gpus[i].index))
					snprintf(uuid, sizeof uuid, "%.12s", snap->gpus[i].uuid);
		}
		if ((m = busy_slice(snap, it)) != NULL)
			snprintf(buf, len,
			         "give it only the slice it uses: gpuman run --mig %s -- CMD, or "
			         "CUDA_VISIBLE_DEVICES=%s; with TensorFlow also set allow_growth "
			         "(set_memory_growth)",
			         m->profile[0] ? m->profile : "any",
			         text_printable(slice, sizeof slice, m->uuid));
		else if (it->busy_gpus && uuid[0])
			snprintf(buf, len,
			         "give it only the GPU it uses: gpuman run --only %s -- CMD, or "
			         "CUDA_VISIBLE_DEVICES=%s; with TensorFlow also set allow_growth "
			         "(set_memory_growth)",
			         waste_gpu_list(it->busy_gpus, list, sizeof list), uuid);
		else if (it->busy_gpus)
			snprintf(buf, len,
			         "give it only the GPUs it uses: gpuman run --only %s -- CMD; with "
			         "TensorFlow also set allow_growth (set_memory_growth)",
			         waste_gpu_list(it->busy_gpus, list, sizeof list));
		else
			snprintf(
			    buf, len,
			    "if it is idle (a notebook kernel, a finished run), end it (kill %u) "
			    "or free its GPU memory; if it is still loading data, look again soon",
			    it->pid);
		break;
	case WASTE_IDLE_LEASE:
		l = &view->leases[it->lease];
		if (l->reservation)
			snprintf(buf, len,
			         "use the GPUs or give them back before the reservation ends: "
			         "gpuman release %s",
			         text_printable(id, sizeof id, l->id));
		else if (it->mig_uuid[0])
			snprintf(
			    buf, len,
			    "use the slice (its job runs with CUDA_VISIBLE_DEVICES=%s) or give "
			    "it back: end the holder if its work is done (kill %d)",
			    text_printable(slice, sizeof slice, it->mig_uuid), l->pid);
		else if (popcount64(it->idle_gpus) < (int)l->gpu_count)
			snprintf(buf, len,
			         "ask for fewer GPUs next time (-n); end it if its work is done "
			         "(kill %d)",
			         l->pid);
		else
			snprintf(buf, len,
			         "use the GPUs or give them back: end the holder if its work is "
			         "done (kill %d)",
			         l->pid);
		break;
	case WASTE_OVER_LIMIT:
		snprintf(buf, len,
		         "the admin's limit is past: end it (kill %u; only its user or root "
		         "can), and run long work with gpuman run or submit, which end it at "
		         "the limit",
		         it->pid);
		break;
	case WASTE_UNLEASED:
		m = slice_named(snap, it->mig_uuid);
		if (it->lease >= 0 && lease_slice(&view->leases[it->lease])[0])
			snprintf(
			    buf, len,
			    "run it in the slice its lease holds: leave CUDA_VISIBLE_DEVICES=%s "
			    "as gpuman run sets it",
			    text_printable(slice, sizeof slice,
			                   lease_slice(&view->leases[it->lease])));
		else if (it->mig_uuid[0])
			snprintf(
			    buf, len,
			    "start GPU work with gpuman run --mig %s or submit --mig %s, so that "
			    "gpuman places nobody else's job in its slice",
			    m && m->profile[0] ? m->profile : "any",
			    m && m->profile[0] ? m->profile : "any");
		else
			snprintf(buf, len,
			         "start GPU work with gpuman run or submit, so that gpuman places "
			         "nobody else's job beside it");
		break;
	}
	return buf;
}
