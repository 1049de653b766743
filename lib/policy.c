/*
 * policy.c - which GPUs a request gets: a pure function of a snapshot, the
 * leases already granted and the request.  Every GPU is judged on its own,
 * and each one left out gets one line saying why, because "no GPU available"
 * alone sends people back to nvidia-smi.  The outcome also says whether
 * waiting could ever help (NOT_NOW) or not (NEVER), so that --wait does not
 * wait forever for a GPU this machine does not have.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "policy.h"
#include "util.h"

static const char *const policy_names[] = {
    [GM_BY_MEMORY] = "memory", [GM_BY_MEMORY_RATE] = "memory-rate",
    [GM_BY_POWER] = "power",   [GM_BY_UTIL] = "util",
    [GM_BY_INDEX] = "index",
};

int policy_from_name(const char *name)
{
	size_t i;

	for (i = 0; name && i < ARRAY_SIZE(policy_names); i++)
		if (strcmp(name, policy_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *policy_name(enum gm_policy by)
{
	if ((unsigned)by < ARRAY_SIZE(policy_names))
		return policy_names[by];
	return "unknown";
}

/* What the granted leases amount to on one GPU. */
struct gpu_leases {
	const struct policy_lease *exclusive; /* an exclusive lease, if any */
	const struct policy_lease *first;     /* any lease, for its holder */
	size_t shares;                        /* memory shares */
	uint64_t pending_mib;                 /* share memory not allocated yet */
};

static void leases_on(const struct policy_input *in, const struct gm_gpu *gpu,
                      struct gpu_leases *gl)
{
	const struct policy_lease *l;
	size_t i;

	memset(gl, 0, sizeof *gl);
	if (!gpu->uuid[0])
		return;
	for (i = 0; i < in->lease_count; i++) {
		l = &in->leases[i];
		/* a lease of one MIG slice is the slice's, not the GPU's */
		if (!l->uuid || strcmp(l->uuid, gpu->uuid) != 0 || (l->mig && l->mig[0]))
			continue;
		if (!gl->first)
			gl->first = l;
		if (l->exclusive) {
			if (!gl->exclusive)
				gl->exclusive = l;
		} else {
			gl->shares++;
			gl->pending_mib += l->pending_mib;
		}
	}
}

uint64_t policy_effective_free_mib(const struct policy_input *in, size_t pos)
{
	const struct gm_gpu *gpu = &in->snap->gpus[pos];
	struct gpu_leases gl;

	if (!(gpu->valid & GM_HAS_MEMORY))
		return 0;
	leases_on(in, gpu, &gl);
	return gpu->mem_free_mib > gl.pending_mib ? gpu->mem_free_mib - gl.pending_mib : 0;
}

/* The first process of the snapshot on this GPU, and how many there are. */
static const struct gm_proc *procs_on(const struct gm_snapshot *snap, const struct gm_gpu *gpu,
                                      size_t *count)
{
	const struct gm_proc *first = NULL;
	size_t i;

	*count = 0;
	for (i = 0; i < snap->proc_count; i++) {
		if (snap->procs[i].gpu != gpu->index)
			continue;
		if (!first)
			first = &snap->procs[i];
		(*count)++;
	}
	return first;
}

static const char *holder_of(const struct policy_lease *l)
{
	return l->holder && l->holder[0] ? l->holder : "another job";
}

#define WHY_LEN sizeof(((struct policy_result *)0)->why[0])

static void say(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(char *why, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, WHY_LEN, fmt, ap);
	va_end(ap);
}

/* --only and --exclude.  An --only that names no GPU here at all (a
 * mistyped index or UUID prefix) says so, rather than leave every GPU
 * "not in --only". */
static int listed_out(const struct policy_input *in, const struct gm_request *req,
                      const struct gm_gpu *gpu, char *why)
{
	if (req->only.count && !gpu_list_matches(&req->only, gpu->index, gpu->uuid)) {
		size_t i = 0;

		while (
		    i < in->snap->gpu_count &&
		    !gpu_list_matches(&req->only, in->snap->gpus[i].index, in->snap->gpus[i].uuid))
			i++;
		if (i < in->snap->gpu_count)
			say(why, "not in --only");
		else
			say(why, "not in --only, which names no GPU of this machine (gpuman status "
			         "lists their indices and UUIDs)");
		return 1;
	}
	if (gpu_list_matches(&req->exclude, gpu->index, gpu->uuid)) {
		say(why, "excluded by --exclude");
		return 1;
	}
	return 0;
}

/* "pid 28329" or "pids 28329, 28330, ..." for the processes on a GPU. */
static void say_pids(char *buf, size_t len, const struct gm_snapshot *snap,
                     const struct gm_gpu *gpu)
{
	size_t i, shown = 0, n, used = 0;

	procs_on(snap, gpu, &n);
	used += (size_t)snprintf(buf, len, n == 1 ? "pid" : "pids");
	for (i = 0; i < snap->proc_count && used < len; i++) {
		if (snap->procs[i].gpu != gpu->index)
			continue;
		if (shown == 3) {
			snprintf(buf + used, len - used, ", ...");
			break;
		}
		used += (size_t)snprintf(buf + used, len - used, "%s %u", shown ? "," : "",
		                         snap->procs[i].pid);
		shown++;
	}
}

/* "8 GiB" or "50% = 5632 MiB" for the size a request asks on this GPU. */
static char *ask_format(const struct gm_size *size, uint64_t total_mib, char *buf, size_t len)
{
	char tmp[32];

	if (size->is_pct)
		snprintf(buf, len, "%s = %llu MiB", size_format(size, tmp, sizeof tmp),
		         (unsigned long long)size_mib(size, total_mib));
	else
		size_format(size, buf, len);
	return buf;
}

/* "1g.10gb|3g.40gb": the distinct profiles of a GPU's slices; 0 if none. */
static size_t mig_profiles(const struct gm_snapshot *snap, unsigned index, char *buf, size_t len)
{
	size_t used = 0, n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < snap->mig_count; i++) {
		const struct gm_mig *m = &snap->migs[i];
		int seen = 0;

		if (m->gpu != index || !m->profile[0])
			continue;
		for (size_t k = 0; k < i && !seen; k++)
			seen = snap->migs[k].gpu == index &&
			       !strcmp(snap->migs[k].profile, m->profile);
		if (seen || used + strlen(m->profile) + 2 > len)
			continue;
		used += (size_t)snprintf(buf + used, len - used, "%s%s", n ? "|" : "", m->profile);
		n++;
	}
	return n;
}

static int mig_static_reason(const struct policy_input *in, const struct gm_request *req,
                             size_t pos, char *why);

/*
 * Static reasons: the GPU can never serve this request, however long one
 * waits.  Returns 1 and writes why when one applies.
 */
static int static_reason(const struct policy_input *in, const struct gm_request *req, size_t pos,
                         char *why)
{
	const struct gm_gpu *gpu = &in->snap->gpus[pos];
	char ask[64], profiles[64];

	switch (gpu->state) {
	case GM_GPU_OK:
		break;
	case GM_GPU_LOST:
		say(why, "lost: %s", gpu->note[0] ? gpu->note : "GPU has fallen off the bus");
		return 1;
	case GM_GPU_NO_PERMISSION:
		say(why, "no permission: %s", gpu->note[0] ? gpu->note : "NVML refused access");
		return 1;
	default:
		say(why, "error: %s", gpu->note[0] ? gpu->note : "NVML answered an error");
		return 1;
	}
	if (in->barred && in->barred[pos]) {
		say(why, "%s", in->barred[pos]);
		return 1;
	}
	if (req->mig[0])
		return mig_static_reason(in, req, pos, why);
	if (in->usable && in->usable[pos] == 2) {
		say(why,
		    "CUDA_VISIBLE_DEVICES index: this driver hides CUDA's fastest-first "
		    "order (no core count before R510); use UUIDs or CUDA_DEVICE_ORDER=PCI_BUS_ID");
		return 1;
	}
	if (in->usable && !in->usable[pos]) {
		say(why, "outside CUDA_VISIBLE_DEVICES");
		return 1;
	}
	if (listed_out(in, req, gpu, why))
		return 1;
	if ((gpu->valid & GM_HAS_COMPUTE_MODE) && gpu->compute_mode == GM_COMPUTE_PROHIBITED) {
		say(why, "compute mode is prohibited");
		return 1;
	}
	/* A GPU split into slices has no whole to give: CUDA sees only its
	 * slices. */
	if ((gpu->valid & GM_HAS_MIG) && gpu->mig_mode == 1) {
		say(why, "in MIG mode: never handed out whole (ask for a slice with --mig%s%s)",
		    mig_profiles(in->snap, gpu->index, profiles, sizeof profiles) ? " " : "",
		    profiles);
		return 1;
	}
	if ((req->share || req->has_min_free) && !(gpu->valid & GM_HAS_MEMORY)) {
		say(why, "memory not reported (%s needs it)", req->share ? "--mem" : "--min-free");
		return 1;
	}
	if (req->share && gpu->mem_total_mib < size_mib(&req->mem, gpu->mem_total_mib)) {
		say(why, "only %llu MiB in total, --mem asks %s",
		    (unsigned long long)gpu->mem_total_mib,
		    ask_format(&req->mem, gpu->mem_total_mib, ask, sizeof ask));
		return 1;
	}
	if (req->has_min_free &&
	    gpu->mem_total_mib < size_mib(&req->min_free, gpu->mem_total_mib)) {
		say(why, "only %llu MiB in total, --min-free asks %s",
		    (unsigned long long)gpu->mem_total_mib,
		    ask_format(&req->min_free, gpu->mem_total_mib, ask, sizeof ask));
		return 1;
	}
	if (req->has_max_util && !(gpu->valid & GM_HAS_UTIL)) {
		say(why, "utilization not reported (--max-util needs it)");
		return 1;
	}
	if (req->idle && !(gpu->valid & GM_HAS_PROCESSES)) {
		say(why, "process list not readable (--idle needs it)");
		return 1;
	}
	return 0;
}

int policy_candidate(const struct policy_input *in, const struct gm_request *req, size_t pos)
{
	char why[WHY_LEN];

	return pos < in->snap->gpu_count && !static_reason(in, req, pos, why);
}

/* Reasons that may pass with time: processes, leases, free memory, load.
 * Returns 1 and writes why when one applies. */
static int current_reason(const struct policy_input *in, const struct gm_request *req, size_t pos,
                          char *why)
{
	const struct gm_snapshot *snap = in->snap;
	const struct gm_gpu *gpu = &snap->gpus[pos];
	const struct gm_proc *proc;
	struct gpu_leases gl;
	size_t nprocs;
	uint64_t free_mib;
	char ask[64], pids[96];
	int exclusive_mode;
	const char *mode;

	proc = procs_on(snap, gpu, &nprocs);
	leases_on(in, gpu, &gl);
	exclusive_mode = (gpu->valid & GM_HAS_COMPUTE_MODE) &&
	                 (gpu->compute_mode == GM_COMPUTE_EXCLUSIVE_PROCESS ||
	                  gpu->compute_mode == GM_COMPUTE_EXCLUSIVE_THREAD);
	mode = gpu->compute_mode == GM_COMPUTE_EXCLUSIVE_THREAD ? "exclusive-thread"
	                                                        : "exclusive-process";

	/* Only one process may use such a GPU: a second job would fail. */
	if (exclusive_mode && proc) {
		say(why, "%s compute mode and already running pid %u", mode, proc->pid);
		return 1;
	}
	if (gl.exclusive) {
		say(why, "leased exclusively by %s", holder_of(gl.exclusive));
		return 1;
	}
	if (!req->share && gl.shares) {
		say(why, "has %zu memory share%s (--exclusive needs none)", gl.shares,
		    gl.shares == 1 ? "" : "s");
		return 1;
	}
	if (exclusive_mode && gl.first) {
		/* its job has not started yet, but will take the GPU */
		say(why, "%s compute mode and leased by %s", mode, holder_of(gl.first));
		return 1;
	}
	if (req->idle && proc) {
		say_pids(pids, sizeof pids, snap, gpu);
		say(why, "has processes (--idle): %s", pids);
		return 1;
	}
	if (req->idle && gl.first) {
		say(why, "leased by %s (--idle)", holder_of(gl.first));
		return 1;
	}
	free_mib = policy_effective_free_mib(in, pos);
	if (req->has_min_free && free_mib < size_mib(&req->min_free, gpu->mem_total_mib)) {
		say(why, "only %llu MiB free%s, --min-free asks %s", (unsigned long long)free_mib,
		    gl.pending_mib ? " after pending shares" : "",
		    ask_format(&req->min_free, gpu->mem_total_mib, ask, sizeof ask));
		return 1;
	}
	if (req->has_max_util && gpu->util_gpu_pct > req->max_util) {
		say(why, "utilization %u%% > --max-util %u%%", gpu->util_gpu_pct, req->max_util);
		return 1;
	}
	if (req->share && free_mib < size_mib(&req->mem, gpu->mem_total_mib)) {
		say(why, "only %llu MiB free%s, --mem asks %s", (unsigned long long)free_mib,
		    gl.pending_mib ? " after pending shares" : "",
		    ask_format(&req->mem, gpu->mem_total_mib, ask, sizeof ask));
		return 1;
	}
	if (in->held_for && in->held_for[pos]) {
		if (in->held_for[pos][0])
			say(why, "held for an earlier waiter: %s", in->held_for[pos]);
		else
			say(why, "held for an earlier waiter");
		return 1;
	}
	return 0;
}

/* Sort keys of one eligible GPU. */
struct candidate {
	size_t pos;
	unsigned index;
	int has_mem, has_power, has_util;
	uint64_t free_mib, total_mib;
	unsigned power_mw, limit_mw, util;
};

/* Negative when a is better than b under policy by; every tie goes to the
 * lower NVML index. */
static int cmp_candidates_by(enum gm_policy by, const struct candidate *a,
                             const struct candidate *b)
{
	double ra, rb;
	uint64_t la, lb;

	switch (by) {
	case GM_BY_MEMORY:
		if (a->has_mem != b->has_mem)
			return b->has_mem - a->has_mem;
		if (a->free_mib != b->free_mib)
			return a->free_mib > b->free_mib ? -1 : 1;
		break;
	case GM_BY_MEMORY_RATE:
		if (a->has_mem != b->has_mem)
			return b->has_mem - a->has_mem;
		ra = a->total_mib ? (double)a->free_mib / (double)a->total_mib : 0;
		rb = b->total_mib ? (double)b->free_mib / (double)b->total_mib : 0;
		if (ra != rb)
			return ra > rb ? -1 : 1;
		break;
	case GM_BY_POWER:
		if (a->has_power != b->has_power)
			return b->has_power - a->has_power;
		if (a->has_power) {
			/* draw/limit compared exactly: a.mw * b.limit vs b.mw * a.limit */
			la = (uint64_t)a->power_mw * b->limit_mw;
			lb = (uint64_t)b->power_mw * a->limit_mw;
			if (la != lb)
				return la < lb ? -1 : 1;
		}
		break;
	case GM_BY_UTIL:
		if (a->has_util != b->has_util)
			return b->has_util - a->has_util;
		if (a->has_util && a->util != b->util)
			return a->util < b->util ? -1 : 1;
		break;
	case GM_BY_INDEX:
		break;
	}
	if (a->index != b->index)
		return a->index < b->index ? -1 : 1;
	return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* qsort has no context argument in C11; the candidates are few, so an
 * insertion sort with the policy passed along keeps this reentrant. */
static void sort_candidates(struct candidate *c, size_t n, enum gm_policy by)
{
	struct candidate tmp;
	size_t i, j;

	for (i = 1; i < n; i++) {
		tmp = c[i];
		for (j = i; j > 0 && cmp_candidates_by(by, &tmp, &c[j - 1]) < 0; j--)
			c[j] = c[j - 1];
		c[j] = tmp;
	}
}

/* ---- MIG slices ---------------------------------------------------------- */

static int mig_wanted(const struct gm_request *req, const struct gm_mig *m)
{
	return !strcmp(req->mig, "any") || !strcmp(req->mig, m->profile);
}

/* The slice at snapshot position mi, of the GPU at pos, may be handed out
 * under the inherited CUDA_VISIBLE_DEVICES. */
static int mig_usable(const struct policy_input *in, size_t pos, size_t mi)
{
	if (in->mig_usable)
		return in->mig_usable[mi];
	return !in->usable || in->usable[pos] == 1;
}

/* The static reasons of a --mig request: the GPU is not split, or has no
 * slice of the profile that the request could use. */
static int mig_static_reason(const struct policy_input *in, const struct gm_request *req,
                             size_t pos, char *why)
{
	const struct gm_snapshot *snap = in->snap;
	const struct gm_gpu *gpu = &snap->gpus[pos];
	size_t matches = 0, usable = 0, big_enough = 0;
	char profiles[64], ask[64];

	if (listed_out(in, req, gpu, why))
		return 1;
	if (!(gpu->valid & GM_HAS_MIG) || gpu->mig_mode != 1) {
		say(why, "not in MIG mode (--mig asks for a slice of a GPU in MIG mode)");
		return 1;
	}
	for (size_t i = 0; i < snap->mig_count; i++) {
		const struct gm_mig *m = &snap->migs[i];

		if (m->gpu != gpu->index || !mig_wanted(req, m))
			continue;
		matches++;
		if (!mig_usable(in, pos, i))
			continue;
		usable++;
		big_enough += !req->has_min_free ||
		              ((m->valid & GM_MIG_HAS_MEMORY) &&
		               m->mem_total_mib >= size_mib(&req->min_free, m->mem_total_mib));
	}
	if (!matches) {
		if (mig_profiles(snap, gpu->index, profiles, sizeof profiles))
			say(why, "no %s slice (it has %s)", req->mig, profiles);
		else
			say(why, "no MIG slices (create them with nvidia-smi mig -cgi ... -C)");
		return 1;
	}
	if (!usable) {
		say(why, "its %s slices are outside CUDA_VISIBLE_DEVICES", req->mig);
		return 1;
	}
	if (!big_enough) {
		say(why, "no %s slice has --min-free %s in total", req->mig,
		    ask_format(&req->min_free, gpu->mem_total_mib, ask, sizeof ask));
		return 1;
	}
	return 0;
}

/* Append "; text" (or "text" first) to why, cut at its room. */
static void say_more(char *why, const char *text)
{
	size_t used = strlen(why), len = strlen(text);

	if (used && used + 3 < WHY_LEN) {
		memcpy(why + used, "; ", 2);
		used += 2;
	}
	if (len > WHY_LEN - 1 - used)
		len = WHY_LEN - 1 - used;
	memcpy(why + used, text, len);
	why[used + len] = '\0';
}

/*
 * The slices of the GPU at pos that a --mig request could get now, appended
 * to cand[*n].  Returns 1 with why set when there are none: who holds each
 * one.
 */
static int mig_current(const struct policy_input *in, const struct gm_request *req, size_t pos,
                       struct candidate *cand, size_t *n, char *why)
{
	const struct gm_snapshot *snap = in->snap;
	const struct gm_gpu *gpu = &snap->gpus[pos];
	struct gpu_leases gl;
	char one[WHY_LEN], pids[96];
	size_t found = 0;

	leases_on(in, gpu, &gl);
	if (gl.exclusive) {
		/* a lease of the whole GPU, by a gpuman before MIG slices */
		say(why, "leased whole by %s", holder_of(gl.exclusive));
		return 1;
	}
	if (in->held_for && in->held_for[pos]) {
		say(why, "held for an earlier waiter%s%s", in->held_for[pos][0] ? ": " : "",
		    in->held_for[pos]);
		return 1;
	}
	why[0] = '\0';
	for (size_t i = 0; i < snap->mig_count; i++) {
		const struct gm_mig *m = &snap->migs[i];
		const struct policy_lease *held = NULL;

		if (m->gpu != gpu->index || !mig_wanted(req, m) || !mig_usable(in, pos, i))
			continue;
		for (size_t l = 0; l < in->lease_count && !held; l++)
			if (in->leases[l].mig && !strcmp(in->leases[l].mig, m->uuid))
				held = &in->leases[l];
		if (held) {
			snprintf(one, sizeof one, "%s %.12s leased by %s", m->profile, m->uuid,
			         holder_of(held));
			say_more(why, one);
			continue;
		}
		if (m->pid_count) {
			size_t used = (size_t)snprintf(pids, sizeof pids, "pid%s",
			                               m->pid_count > 1 ? "s" : "");

			for (size_t k = 0; k < m->pid_count && k < 3 && used < sizeof pids; k++)
				used += (size_t)snprintf(pids + used, sizeof pids - used, "%s %u",
				                         k ? "," : "", m->pids[k]);
			snprintf(one, sizeof one, "%s %.12s running %s%s", m->profile, m->uuid,
			         pids, m->pid_count > 3 ? ", ..." : "");
			say_more(why, one);
			continue;
		}
		if (req->has_min_free &&
		    (!(m->valid & GM_MIG_HAS_MEMORY) ||
		     m->mem_free_mib < size_mib(&req->min_free, m->mem_total_mib))) {
			snprintf(one, sizeof one, "%s %.12s has only %llu MiB free", m->profile,
			         m->uuid, (unsigned long long)m->mem_free_mib);
			say_more(why, one);
			continue;
		}
		cand[*n].pos = i;
		cand[*n].index = gpu->index;
		cand[*n].has_mem = !!(m->valid & GM_MIG_HAS_MEMORY);
		cand[*n].free_mib = m->mem_free_mib;
		cand[*n].total_mib = m->mem_total_mib;
		cand[*n].has_power = (gpu->valid & GM_HAS_POWER) &&
		                     (gpu->valid & GM_HAS_POWER_LIMIT) && gpu->power_limit_mw;
		cand[*n].power_mw = gpu->power_mw;
		cand[*n].limit_mw = gpu->power_limit_mw;
		cand[*n].has_util = 0; /* not reported in MIG mode */
		(*n)++;
		found++;
	}
	if (found) {
		why[0] = '\0';
		return 0;
	}
	return 1;
}

/* policy_choose for a --mig request: one slice, chosen[] into snap->migs. */
static int choose_slice(const struct policy_input *in, const struct gm_request *req,
                        struct policy_result *out)
{
	const struct gm_snapshot *snap = in->snap;
	struct candidate *cand = calloc(snap->mig_count + 1, sizeof *cand);
	size_t eligible = 0, possible = 0;

	if (!cand)
		return -1;
	out->mig = 1;
	for (size_t pos = 0; pos < snap->gpu_count; pos++) {
		if (static_reason(in, req, pos, out->why[pos]))
			continue;
		possible++;
		mig_current(in, req, pos, cand, &eligible, out->why[pos]);
	}
	sort_candidates(cand, eligible, req->by);
	if (eligible) {
		out->outcome = POLICY_OK;
		out->count = 1;
		out->chosen[0] = cand[0].pos;
	} else {
		out->outcome = possible ? POLICY_NOT_NOW : POLICY_NEVER;
	}
	free(cand);
	return 0;
}

/*
 * out is overwritten (release an earlier result first).  A request zeroed
 * rather than made by gm_request_new() asks for one GPU, not for none.
 */
int policy_choose(const struct policy_input *in, const struct gm_request *req,
                  struct policy_result *out)
{
	const struct gm_snapshot *snap = in->snap;
	const struct gm_gpu *gpu;
	struct candidate *cand = NULL;
	size_t pos, n = snap->gpu_count, eligible = 0, possible = 0, i;
	unsigned want = req->count ? req->count : 1;
	int rc = -1;

	memset(out, 0, sizeof *out);
	out->gpu_count = n;
	/* one spare element so that zero GPUs still allocate */
	out->why = calloc(n + 1, sizeof *out->why);
	out->chosen = calloc(n + 1, sizeof *out->chosen);
	cand = calloc(n + 1, sizeof *cand);
	if (!out->why || !out->chosen || !cand)
		goto done;
	if (req->mig[0]) {
		rc = choose_slice(in, req, out);
		goto done;
	}

	for (pos = 0; pos < n; pos++) {
		gpu = &snap->gpus[pos];
		if (static_reason(in, req, pos, out->why[pos]))
			continue;
		possible++;
		if (current_reason(in, req, pos, out->why[pos]))
			continue;
		cand[eligible].pos = pos;
		cand[eligible].index = gpu->index;
		cand[eligible].has_mem = !!(gpu->valid & GM_HAS_MEMORY);
		cand[eligible].free_mib = policy_effective_free_mib(in, pos);
		cand[eligible].total_mib = gpu->mem_total_mib;
		cand[eligible].has_power = (gpu->valid & GM_HAS_POWER) &&
		                           (gpu->valid & GM_HAS_POWER_LIMIT) && gpu->power_limit_mw;
		cand[eligible].power_mw = gpu->power_mw;
		cand[eligible].limit_mw = gpu->power_limit_mw;
		cand[eligible].has_util = !!(gpu->valid & GM_HAS_UTIL);
		cand[eligible].util = gpu->util_gpu_pct;
		eligible++;
	}
	sort_candidates(cand, eligible, req->by);

	if (eligible >= want) {
		out->outcome = POLICY_OK;
		out->count = want;
		for (i = 0; i < want; i++)
			out->chosen[i] = cand[i].pos;
	} else {
		out->outcome = possible >= want ? POLICY_NOT_NOW : POLICY_NEVER;
		out->count = 0;
	}
	rc = 0;
done:
	free(cand);
	if (rc)
		policy_result_release(out);
	return rc;
}

void policy_result_release(struct policy_result *res)
{
	free(res->chosen);
	free(res->why);
	res->chosen = NULL;
	res->why = NULL;
	res->count = 0;
	res->mig = 0;
	res->gpu_count = 0;
	res->outcome = POLICY_OK;
}
