/*
 * nvml_procs.c - one GPU's processes (compute, graphics and MPS lists,
 * merged by pid) and its MIG slices with their own processes, appended to the
 * snapshot.  NVML's process entries are parsed from raw bytes: their
 * layout changed between driver versions.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nvml.h"
#include "nvml_abi.h"
#include "snapshot.h"
#include "util.h"

/* ---- processes --------------------------------------------------------- */

/* One process of one list, merged over its GPU instances. */
struct raw_proc {
	unsigned pid;
	unsigned gi, ci; /* MIG instance; 0xFFFFFFFF when MIG is off */
	int has_mem;
	unsigned long long used; /* bytes */
};

static int raw_cmp(const void *a, const void *b)
{
	const struct raw_proc *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->gi != y->gi)
		return x->gi < y->gi ? -1 : 1;
	if (x->ci != y->ci)
		return x->ci < y->ci ? -1 : 1;
	return 0;
}

static int proc_cmp(const void *a, const void *b)
{
	const struct gm_proc *x = a, *y = b;

	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/*
 * Read one process list (enum proc_list) of a GPU by NVML's protocol:
 * ask for the count with an empty buffer (SUCCESS means none), then fill a
 * buffer with slack, again while processes keep appearing.  On ANSWER_OK,
 * *out (caller frees) holds *count entries sorted by pid, one per pid: a
 * process on several MIG instances has their memory summed.  Returns an enum
 * answer, or -1 when out of memory.
 */
static int read_procs(struct gpu_query *q, enum proc_list list, struct raw_proc **out,
                      size_t *count)
{
	static const char *const what[] = {
	    [PROC_COMPUTE] = "compute processes",
	    [PROC_GRAPHICS] = "graphics processes",
	    [PROC_MPS] = "MPS processes",
	};
	static const enum nvml_op ops[] = {
	    [PROC_COMPUTE] = OP_PROCS_COMPUTE,
	    [PROC_GRAPHICS] = OP_PROCS_GRAPHICS,
	    [PROC_MPS] = OP_PROCS_MPS,
	};
	enum nvml_op op = ops[list];
	struct nvml *nv = q->nv;
	struct raw_proc *raw = NULL, *r;
	unsigned char *buf = NULL, *e;
	unsigned n = 0, cap = 0, i, v;
	size_t stride, k = 0;
	int rc, ret, tries;

	*out = NULL;
	*count = 0;
	/* The newest version that exists (FUNCTION_NOT_FOUND: an older one). */
	rc = NVML_ERROR_FUNCTION_NOT_FOUND;
	for (v = level_get(nv, op); v < 2; v++) {
		if (!nv->procs[list][v])
			continue;
		n = 0;
		rc = nv->procs[list][v](q->dev, &n, NULL);
		if (rc != NVML_ERROR_FUNCTION_NOT_FOUND)
			break;
		level_raise(nv, op, v + 1);
	}
	stride = v == 0 ? PROC_V2_SIZE : PROC_V1_SIZE;
	for (tries = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && tries < PROC_TRIES; tries++) {
		if (n > PROC_MAX)
			break;
		cap = n + PROC_SLACK;
		free(buf);
		buf = calloc(cap, PROC_ALLOC_SIZE);
		if (!buf) {
			ret = -1;
			goto out;
		}
		n = cap;
		rc = nv->procs[list][v](q->dev, &n, buf);
	}
	if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
		snapshot_add_note(q->snap,
		                  "GPU %u: %s: NVML kept asking for more room (%u "
		                  "entries); list not read",
		                  q->gpu->index, what[list], n);
		ret = ANSWER_NONE;
		goto out;
	}
	ret = nvml_answer(q, what[list], rc);
	if (ret != ANSWER_OK || !buf)
		goto out; /* SUCCESS on the first call: no processes */
	if (n > cap)
		n = cap; /* never read past what we allocated */
	if (n == 0)
		goto out;

	raw = calloc(n, sizeof *raw);
	if (!raw) {
		ret = -1;
		goto out;
	}
	for (i = 0; i < n; i++) {
		r = &raw[i];
		e = buf + (size_t)i * stride;
		memcpy(&r->pid, e, sizeof r->pid);
		memcpy(&r->used, e + 8, sizeof r->used);
		r->gi = r->ci = UINT_MAX;
		if (stride == PROC_V2_SIZE) {
			memcpy(&r->gi, e + 16, sizeof r->gi);
			memcpy(&r->ci, e + 20, sizeof r->ci);
		}
		r->has_mem = r->used != ULLONG_MAX;
	}
	qsort(raw, n, sizeof *raw, raw_cmp);
	/* Fold each pid into one entry.  An identical (pid, instance) twice is a
	 * repeat and counts once; other instances of the pid add their memory. */
	for (i = 0; i < n; i++) {
		if (k > 0 && raw[k - 1].pid == raw[i].pid) {
			r = &raw[k - 1];
			if (raw_cmp(r, &raw[i]) != 0 && r->has_mem && raw[i].has_mem)
				r->used += raw[i].used;
			else if (!r->has_mem && raw[i].has_mem) {
				r->has_mem = 1;
				r->used = raw[i].used;
			}
			r->gi = raw[i].gi;
			r->ci = raw[i].ci;
			continue;
		}
		raw[k++] = raw[i];
	}
	*out = raw;
	*count = k;
	raw = NULL;
out:
	free(raw);
	free(buf);
	return ret;
}

/* Sort the GPU's processes (from first on) by pid again after a merge
 * appended some. */
static void sort_procs(struct gm_snapshot *snap, size_t first)
{
	if (snap->proc_count - first > 1)
		qsort(snap->procs + first, snap->proc_count - first, sizeof *snap->procs, proc_cmp);
}

/*
 * Merge a list into the GPU's processes, which start at first and are sorted
 * by pid up to sorted_end.  A process in several lists (compute and graphics,
 * or compute and MPS) is one process using one amount of memory: the kinds
 * add up, the memory does not.  mps marks the MPS list's processes.  -1 when
 * out of memory.
 */
static int merge_procs(struct proc_sink *sink, unsigned gpu, size_t first, size_t sorted_end,
                       const struct raw_proc *raw, size_t n, unsigned kind, int mps)
{
	struct gm_snapshot *snap = sink->snap;
	struct gm_proc key, *p, *procs;
	size_t i, cap;
	uint64_t mib;

	for (i = 0; i < n; i++) {
		mib = raw[i].has_mem ? raw[i].used / MIB : 0;
		key.pid = raw[i].pid;
		p = sorted_end > first ? bsearch(&key, snap->procs + first, sorted_end - first,
		                                 sizeof key, proc_cmp)
		                       : NULL;
		if (p) {
			p->kind |= kind;
			p->mps |= mps;
			if (raw[i].has_mem && (!p->has_mem || mib > p->used_mib)) {
				p->has_mem = 1;
				p->used_mib = mib;
			}
			continue;
		}
		if (snap->proc_count == sink->cap) {
			cap = sink->cap ? sink->cap * 2 : 32;
			procs = realloc(snap->procs, cap * sizeof *procs);
			if (!procs)
				return -1;
			snap->procs = procs;
			sink->cap = cap;
		}
		p = &snap->procs[snap->proc_count++];
		memset(p, 0, sizeof *p);
		p->pid = raw[i].pid;
		p->gpu = gpu;
		p->has_mem = raw[i].has_mem;
		p->used_mib = mib;
		p->kind = kind;
		p->mps = mps;
	}
	return 0;
}

/*
 * A driver answers each call afresh, and the memory reading comes before the
 * process lists: a process that takes its memory between the two calls is
 * listed with it, yet the reading has it free.  Placement counts a lease's
 * memory as used, not pending, once its job's process shows it, so such a
 * torn reading would count it nowhere and let a third share onto a GPU with
 * room for two.  What the listed processes hold is used, whatever the
 * earlier reading said.
 */
static void settle_memory(uint64_t *used, uint64_t *free_mib, uint64_t held)
{
	uint64_t more;

	if (held <= *used)
		return;
	more = held - *used;
	*used = held;
	*free_mib = *free_mib > more ? *free_mib - more : 0;
}

/* The process lists of one GPU: MPS clients compute through the MPS
 * server, so they are compute processes too.  A driver without the MPS
 * list (an older one) costs no call.  Returns an enum answer, or -1 (no
 * memory). */
int nvml_query_procs(struct gpu_query *q, struct proc_sink *sink)
{
	static const unsigned kinds[] = {
	    [PROC_COMPUTE] = GM_PROC_COMPUTE,
	    [PROC_GRAPHICS] = GM_PROC_GRAPHICS,
	    [PROC_MPS] = GM_PROC_COMPUTE,
	};
	struct gm_snapshot *snap = sink->snap;
	size_t first = snap->proc_count, n;
	struct raw_proc *raw;
	enum proc_list list;
	int a;

	for (list = 0; list < PROC_LISTS; list++) {
		a = read_procs(q, list, &raw, &n);
		if (a == ANSWER_OK) {
			if (merge_procs(sink, q->gpu->index, first, snap->proc_count, raw, n,
			                kinds[list], list == PROC_MPS) < 0)
				a = -1;
			else if (list == PROC_COMPUTE)
				q->gpu->valid |= GM_HAS_PROCESSES;
		}
		free(raw);
		if (a == -1 || a == ANSWER_LOST)
			return a;
		sort_procs(snap, first); /* the next merge searches them */
	}
	if (q->gpu->valid & GM_HAS_MEMORY) {
		uint64_t held = 0;

		for (size_t k = first; k < snap->proc_count; k++)
			if (snap->procs[k].has_mem)
				held += snap->procs[k].used_mib;
		settle_memory(&q->gpu->mem_used_mib, &q->gpu->mem_free_mib, held);
	}
	return ANSWER_OK;
}

/* ---- MIG slices -------------------------------------------------------- */

/* "1g.10gb" from a slice's name ("NVIDIA A100-SXM4-80GB MIG 1g.10gb"): the
 * name is where NVML states a MIG device's profile. */
static void mig_profile(const char *name, char *out, size_t len)
{
	const char *p = strstr(name, " MIG ");

	out[0] = '\0';
	if (p)
		snprintf(out, len, "%s", p + 5);
}

static int mig_cmp(const void *a, const void *b)
{
	const struct gm_mig *x = a, *y = b;

	if (x->gpu != y->gpu)
		return x->gpu < y->gpu ? -1 : 1;
	if (x->gpu_instance_id != y->gpu_instance_id)
		return x->gpu_instance_id < y->gpu_instance_id ? -1 : 1;
	if (x->compute_instance_id != y->compute_instance_id)
		return x->compute_instance_id < y->compute_instance_id ? -1 : 1;
	return strcmp(x->uuid, y->uuid);
}

static int pid_cmp(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

	return x < y ? -1 : x > y;
}

/* Whether pid is in a raw list: a slice's MPS client that is also in its
 * compute list holds one amount of memory. */
static int listed(const struct raw_proc *raw, size_t n, unsigned pid)
{
	for (size_t i = 0; i < n; i++)
		if (raw[i].pid == pid)
			return 1;
	return 0;
}

static void drop_migs(struct gm_snapshot *snap, size_t from)
{
	while (snap->mig_count > from)
		free(snap->migs[--snap->mig_count].pids);
}

static struct gm_mig *new_mig(struct proc_sink *sink)
{
	struct gm_snapshot *snap = sink->snap;
	struct gm_mig *migs, *m;
	size_t cap;

	if (snap->mig_count == sink->mig_cap) {
		cap = sink->mig_cap ? sink->mig_cap * 2 : 8;
		migs = realloc(snap->migs, cap * sizeof *migs);
		if (!migs)
			return NULL;
		snap->migs = migs;
		sink->mig_cap = cap;
	}
	m = &snap->migs[snap->mig_count++];
	memset(m, 0, sizeof *m);
	return m;
}

/* One slice's fields and processes; its processes join the GPU's list
 * (from first on), where NVML shows them only to privileged callers.
 * Returns an enum answer, or -1 (no memory). */
static int query_mig(struct gpu_query *mq, struct proc_sink *sink, size_t first, struct gm_mig *m)
{
	struct nvml *nv = mq->nv;
	struct gm_snapshot *snap = sink->snap;
	struct raw_proc *raw[2] = {NULL, NULL}; /* compute, MPS */
	size_t n[2] = {0, 0}, k, i;
	unsigned gi, ci;
	int a, l;

	m->gpu = mq->gpu->index;
	if (nv->name && nv->name(mq->dev, m->name, sizeof m->name) == NVML_SUCCESS) {
		nvml_terminate(m->name, sizeof m->name);
		mig_profile(m->name, m->profile, sizeof m->profile);
	} else
		m->name[0] = '\0';
	if (nv->uuid && nv->uuid(mq->dev, m->uuid, sizeof m->uuid) == NVML_SUCCESS)
		nvml_terminate(m->uuid, sizeof m->uuid);
	else
		m->uuid[0] = '\0';
	a = nvml_answer(
	    mq, "MIG slice memory",
	    nvml_read_memory(nv, mq->dev, &m->mem_total_mib, &m->mem_free_mib, &m->mem_used_mib));
	if (a == ANSWER_LOST)
		return a;
	if (a == ANSWER_OK)
		m->valid |= GM_MIG_HAS_MEMORY;
	if (nv->gpu_instance_id && nv->compute_instance_id &&
	    nv->gpu_instance_id(mq->dev, &gi) == NVML_SUCCESS &&
	    nv->compute_instance_id(mq->dev, &ci) == NVML_SUCCESS) {
		m->gpu_instance_id = gi;
		m->compute_instance_id = ci;
		m->valid |= GM_MIG_HAS_INSTANCE;
	}
	a = read_procs(mq, PROC_COMPUTE, &raw[0], &n[0]);
	if (a != ANSWER_OK)
		return a;
	/* The clients of the slice's MPS server run in it too. */
	a = read_procs(mq, PROC_MPS, &raw[1], &n[1]);
	if (a == ANSWER_LOST || a == -1)
		goto out;
	a = -1;
	m->pids = calloc(n[0] + n[1] + 1, sizeof *m->pids);
	if (!m->pids)
		goto out;
	for (l = 0; l < 2; l++) {
		if (merge_procs(sink, mq->gpu->index, first, snap->proc_count, raw[l], n[l],
		                GM_PROC_COMPUTE, l == 1) < 0)
			goto out;
		sort_procs(snap, first);
		for (k = 0; k < n[l]; k++)
			m->pids[m->pid_count++] = raw[l][k].pid;
	}
	/* Sorted by pid, one each: a pid in both lists is one process. */
	qsort(m->pids, m->pid_count, sizeof *m->pids, pid_cmp);
	for (k = 0, i = 0; i < m->pid_count; i++)
		if (k == 0 || m->pids[k - 1] != m->pids[i])
			m->pids[k++] = m->pids[i];
	m->pid_count = k;
	m->valid |= GM_MIG_HAS_PROCESSES;
	if (m->valid & GM_MIG_HAS_MEMORY) {
		uint64_t held = 0;

		for (l = 0; l < 2; l++)
			for (k = 0; k < n[l]; k++)
				if (raw[l][k].has_mem &&
				    (l == 0 || !listed(raw[0], n[0], raw[1][k].pid)))
					held += raw[l][k].used / MIB;
		settle_memory(&m->mem_used_mib, &m->mem_free_mib, held);
	}
	a = ANSWER_OK;
out:
	free(raw[0]);
	free(raw[1]);
	return a;
}

/* The slices of a GPU in MIG mode (its processes start at first).  NVML
 * numbers slots, not slices: an empty slot answers NOT_FOUND.  Returns an
 * enum answer, or -1 (no memory). */
int nvml_query_migs(struct gpu_query *q, struct proc_sink *sink, size_t first)
{
	struct nvml *nv = q->nv;
	struct gm_snapshot *snap = sink->snap;
	struct gpu_query mq = *q;
	size_t mig_first = snap->mig_count;
	struct gm_mig *m;
	unsigned max = 0, i;
	int rc, a;

	if (!(q->gpu->valid & GM_HAS_MIG) || !q->gpu->mig_mode || !nv->max_migs || !nv->mig_handle)
		return ANSWER_OK;
	a = nvml_answer(q, "MIG device count", nv->max_migs(q->dev, &max));
	for (i = 0; a == ANSWER_OK && i < max && i < MIG_MAX; i++) {
		mq.dev = NULL;
		rc = nv->mig_handle(q->dev, i, &mq.dev);
		if (rc == NVML_ERROR_NOT_FOUND)
			continue;
		if (nvml_answer(q, "MIG device handle", rc) != ANSWER_OK) {
			a = rc == NVML_ERROR_GPU_IS_LOST ? ANSWER_LOST : ANSWER_OK;
			continue;
		}
		m = new_mig(sink);
		a = m ? query_mig(&mq, sink, first, m) : -1;
		if (a == ANSWER_NONE)
			a = ANSWER_OK; /* the slice without its process list */
	}
	if (a == ANSWER_LOST || a == -1) {
		drop_migs(snap, mig_first);
		return a;
	}
	if (snap->mig_count - mig_first > 1)
		qsort(snap->migs + mig_first, snap->mig_count - mig_first, sizeof *snap->migs,
		      mig_cmp);
	return ANSWER_OK;
}
