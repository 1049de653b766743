/*
 * waste.c - the waste finder (waste.h): per process and per lease, GPUs that
 * are held and not used.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parse.h"
#include "text.h"
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

/* One pass per distinct pid: where it holds memory idle, where it computes,
 * and whether it is outside every lease. */
static int find_procs(const struct gm_snapshot *snap, const struct registry_view *view,
                      const long *proc_lease, struct waste_report *rep, size_t *cap)
{
	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];
		struct waste_item hog, out;
		long lease = proc_lease ? proc_lease[i] : -1;
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
			if (proc_lease && proc_lease[k] >= 0)
				hog.lease = proc_lease[k];
			else {
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

static int find_leases(const struct gm_snapshot *snap, const struct registry_view *view,
                       const long *proc_lease, const struct waste_opts *opts,
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
				used = snap->procs[k].gpu == l->indices[g] && proc_lease &&
				       (proc_lease[k] == (long)i ||
				        /* a reservation is used by its user's leases in it */
				        (l->reservation && proc_lease[k] >= 0 &&
				         view->leases[proc_lease[k]].uid == l->uid));
			if (!used)
				it.idle_gpus |= BIT(l->indices[g]);
		}
		if (!young && it.idle_gpus && add_item(rep, cap, &it) < 0)
			return -1;
		if (l->over_limit_ms) {
			it.kind = WASTE_OVER_LIMIT;
			it.idle_gpus = 0;
			for (size_t g = 0; g < l->gpu_count; g++)
				it.idle_gpus |= BIT(l->indices[g]);
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
	return (x->pid > y->pid) - (x->pid < y->pid);
}

int waste_find(const struct gm_snapshot *snap, const struct registry_view *view,
               const long *proc_lease, const struct waste_opts *opts, struct waste_report *out)
{
	size_t cap = 0;
	int rc;

	*out = (struct waste_report)WASTE_REPORT_INIT;
	rc = find_procs(snap, view, proc_lease, out, &cap);
	if (rc == 0)
		rc = find_leases(snap, view, proc_lease, opts, out, &cap);
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

static const char *age_text(char *buf, size_t len, int64_t ms)
{
	int64_t s = ms / 1000;

	if (s < 60)
		snprintf(buf, len, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(buf, len, "%lldm", (long long)(s / 60));
	else
		snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600),
		         (long long)(s % 3600 / 60));
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

	(void)snap;
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
		         who, gpus_text(a, sizeof a, it->idle_gpus),
		         age_text(age, sizeof age, it->age_ms),
		         popcount64(it->idle_gpus) > 1 ? "them" : "it");
		break;
	case WASTE_OVER_LIMIT:
		duration_text(b, sizeof b, view->leases[it->lease].over_limit_ms);
		snprintf(buf, len,
		         "lease %s of %s has held %s for %s, over its limit (max_lease %s of %s)",
		         text_printable(id, sizeof id, view->leases[it->lease].id), who,
		         gpus_text(a, sizeof a, it->idle_gpus),
		         age_text(age, sizeof age, it->age_ms), b,
		         view->leases[it->lease].limit_from);
		break;
	case WASTE_UNLEASED:
		if (it->on_lease >= 0)
			snprintf(
			    buf, len, "%s runs on %s outside gpuman, on a GPU leased to %s", who,
			    gpus_text(a, sizeof a, it->gpus),
			    text_printable(user, sizeof user, view->leases[it->on_lease].user));
		else
			snprintf(buf, len, "%s runs on %s outside gpuman (no lease)", who,
			         gpus_text(a, sizeof a, it->gpus));
		break;
	}
	return buf;
}

char *waste_advice(const struct gm_snapshot *snap, const struct registry_view *view,
                   const struct waste_item *it, char *buf, size_t len)
{
	char list[256], uuid[16] = "", id[80];
	const struct lease_info *l;

	switch (it->kind) {
	case WASTE_HOG:
		if (it->busy_gpus && popcount64(it->busy_gpus) == 1) {
			for (size_t i = 0; i < snap->gpu_count; i++)
				if (it->busy_gpus & BIT(snap->gpus[i].index))
					snprintf(uuid, sizeof uuid, "%.12s", snap->gpus[i].uuid);
		}
		if (it->busy_gpus && uuid[0])
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
		snprintf(buf, len,
		         "start GPU work with gpuman run or submit, so that gpuman places "
		         "nobody else's job beside it");
		break;
	}
	return buf;
}
