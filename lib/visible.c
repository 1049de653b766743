/*
 * visible.c - CUDA_VISIBLE_DEVICES read the way CUDA reads it, and CUDA's
 * device numbering reproduced from a snapshot, so that gpuman knows which
 * physical GPU each inherited entry means.  Getting this wrong sends a job to
 * the wrong card, so the rules follow CUDA rather than what would be
 * friendlier: the first invalid or repeated entry silently ends the list, an
 * index counts in CUDA's fastest-first order, and UUID prefixes are compared
 * case-sensitively.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "visible.h"
#include "snapshot_types.h"

static int all_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return 0;
	return 1;
}

/* The value of a string of digits; 0 if it does not fit in a size_t (then
 * *ok is 0). */
static size_t digits_value(const char *s, int *ok)
{
	size_t v = 0;

	*ok = 1;
	for (; *s; s++) {
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (size_t)(*s - '0'), &v)) {
			*ok = 0;
			return 0;
		}
	}
	return v;
}

static int valid_entry(const char *e)
{
	return all_digits(e) || strncmp(e, "GPU-", 4) == 0 || strncmp(e, "MIG-", 4) == 0;
}

/* Do two entries name the same device by spelling ("1" and "01" do)? */
static int same_entry(const char *a, const char *b)
{
	int ok_a, ok_b;
	size_t va, vb;

	if (all_digits(a) && all_digits(b)) {
		va = digits_value(a, &ok_a);
		vb = digits_value(b, &ok_b);
		return ok_a && ok_b ? va == vb : strcmp(a, b) == 0;
	}
	return strcmp(a, b) == 0;
}

void visible_release(struct visible *vis)
{
	size_t i;

	for (i = 0; i < vis->count; i++)
		free(vis->entries[i]);
	free(vis->entries);
	vis->entries = NULL;
	vis->count = 0;
	vis->set = 0;
	vis->truncated = 0;
}

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int visible_parse(const char *value, struct visible *out)
{
	struct visible vis = VISIBLE_INIT;
	const char *item, *end;
	size_t n = 1, len, i;
	char *entry;

	*out = vis;
	if (!value)
		return 0;
	vis.set = 1;
	for (item = value; is_blank(*item); item++)
		;
	if (!*item) {
		*out = vis; /* set but empty: no GPU at all */
		return 0;
	}
	for (end = value; *end; end++)
		n += *end == ',';
	vis.entries = calloc(n, sizeof *vis.entries);
	if (!vis.entries)
		return -1;

	for (item = value;; item = end + 1) {
		end = strchr(item, ',');
		if (!end)
			end = item + strlen(item);
		while (item < end && is_blank(*item))
			item++;
		len = (size_t)(end - item);
		while (len && is_blank(item[len - 1]))
			len--;
		entry = strndup(item, len);
		if (!entry) {
			visible_release(&vis);
			return -1;
		}
		if (!valid_entry(entry)) {
			vis.truncated = 1;
		} else {
			for (i = 0; i < vis.count; i++)
				if (same_entry(vis.entries[i], entry))
					vis.truncated = 1;
		}
		if (vis.truncated) {
			free(entry);
			break;
		}
		vis.entries[vis.count++] = entry;
		if (!*end)
			break;
	}
	*out = vis;
	return 0;
}

/*
 * Does GPU a come before GPU b in CUDA's enumeration?  Fastest first (GPUs
 * whose speed is unknown after the others), ties by NVML index, which is
 * PCI bus order, CUDA's own tie-break; PCI_BUS_ID order is the index alone.
 */
static int cuda_before(const struct gm_snapshot *snap, int pci_order, size_t a, size_t b)
{
	const struct gm_gpu *ga = &snap->gpus[a], *gb = &snap->gpus[b];
	int ra = !!(ga->valid & GM_HAS_CUDA_RANK), rb = !!(gb->valid & GM_HAS_CUDA_RANK);

	if (!pci_order) {
		if (ra != rb)
			return ra;
		if (ra && ga->cuda_rank != gb->cuda_rank)
			return ga->cuda_rank > gb->cuda_rank;
	}
	if (ga->index != gb->index)
		return ga->index < gb->index;
	return a < b;
}

int visible_order_known(const struct gm_snapshot *snap)
{
	const struct gm_gpu *first = NULL;
	int ranked = 1, one_model = 1;

	for (size_t i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *g = &snap->gpus[i];

		if (g->state == GM_GPU_LOST)
			continue; /* CUDA does not enumerate it */
		if (!(g->valid & GM_HAS_CUDA_RANK))
			ranked = 0;
		if (first && (!g->name[0] || strcmp(g->name, first->name)))
			one_model = 0;
		if (!first)
			first = g;
	}
	return ranked || (one_model && (!first || first->name[0]));
}

/* Machines have a handful of GPUs: an insertion sort, and no allocation. */
size_t visible_cuda_order(const struct gm_snapshot *snap, int pci_order, size_t *order)
{
	size_t i, j, n = 0;

	if (!pci_order && !visible_order_known(snap))
		return 0;

	for (i = 0; i < snap->gpu_count; i++) {
		if (snap->gpus[i].state == GM_GPU_LOST)
			continue; /* CUDA does not enumerate it */
		for (j = n; j > 0 && cuda_before(snap, pci_order, i, order[j - 1]); j--)
			order[j] = order[j - 1];
		order[j] = i;
		n++;
	}
	return n;
}

/* The snapshot position of CUDA device k (counting only what CUDA sees);
 * -1 if there are not that many. */
static long resolve_index(const struct gm_snapshot *snap, int pci_order, size_t k)
{
	size_t i, j, before;

	for (i = 0; i < snap->gpu_count; i++) {
		if (snap->gpus[i].state == GM_GPU_LOST)
			continue;
		before = 0;
		for (j = 0; j < snap->gpu_count; j++)
			if (j != i && snap->gpus[j].state != GM_GPU_LOST &&
			    cuda_before(snap, pci_order, j, i))
				before++;
		if (before == k)
			return (long)i;
	}
	return -1;
}

/* The one GPU CUDA sees whose UUID starts with prefix; -1 if none or
 * several. */
static long resolve_uuid(const struct gm_snapshot *snap, const char *prefix)
{
	size_t i, len = strlen(prefix);
	long found = -1;

	if (len <= 4) /* "GPU-" alone names no particular GPU */
		return -1;
	for (i = 0; i < snap->gpu_count; i++) {
		if (snap->gpus[i].state == GM_GPU_LOST ||
		    strncmp(snap->gpus[i].uuid, prefix, len) != 0)
			continue;
		if (found >= 0)
			return -1;
		found = (long)i;
	}
	return found;
}

size_t visible_resolve(const struct visible *vis, const struct gm_snapshot *snap, int pci_order,
                       long *entry_gpu)
{
	size_t i, j, k, usable = vis->count;
	const char *e;
	int cut = 0, ok, known = pci_order || visible_order_known(snap);
	long pos;

	for (i = 0; i < vis->count; i++) {
		e = vis->entries[i];
		pos = -1;
		if (cut) {
			/* after CUDA's cut: invisible */
		} else if (all_digits(e) && !known) {
			pos = VISIBLE_UNMAPPED; /* never a guess */
		} else if (all_digits(e)) {
			k = digits_value(e, &ok);
			if (ok)
				pos = resolve_index(snap, pci_order, k);
		} else if (strncmp(e, "GPU-", 4) == 0) {
			pos = resolve_uuid(snap, e);
		}
		/* "MIG-..." slices are not snapshot GPUs (yet): -1 */
		for (j = 0; pos >= 0 && j < i; j++)
			if (entry_gpu[j] == pos)
				pos = -1; /* the same GPU twice: CUDA stops here too */
		entry_gpu[i] = pos;
		if (pos < 0 && !cut) {
			cut = 1;
			usable = i;
		}
	}
	return usable;
}

/* "0,2,3" -> 0, 2, 3; -1 unless every entry is a plain non-negative
 * integer (Slurm writes no ranges here). */
static int parse_slurm_list(const char *s, size_t *out, size_t max, size_t *count)
{
	size_t n = 0;
	int ok;

	if (!s || !*s)
		return -1;
	while (*s) {
		char item[24];
		size_t len = strcspn(s, ",");

		if (!len || len >= sizeof item || n == max)
			return -1;
		memcpy(item, s, len);
		item[len] = '\0';
		if (!all_digits(item))
			return -1;
		out[n++] = digits_value(item, &ok);
		if (!ok)
			return -1;
		s += len;
		if (*s == ',' && !*++s)
			return -1;
	}
	*count = n;
	return 0;
}

size_t visible_resolve_slurm(const struct visible *vis, const char *slurm_gpus,
                             const struct gm_snapshot *snap, long *entry_gpu)
{
	size_t *idx, n = 0, i, k, j;
	long pos;

	if (!vis->count || vis->truncated)
		return (size_t)-1;
	for (i = 0; i < vis->count; i++)
		if (!all_digits(vis->entries[i]))
			return (size_t)-1; /* UUIDs need no help */
	idx = malloc(vis->count * sizeof *idx);
	if (!idx)
		return (size_t)-1;
	if (parse_slurm_list(slurm_gpus, idx, vis->count, &n) < 0 || n != vis->count)
		goto no;
	for (i = 0; i < n; i++) {
		pos = -1;
		for (k = 0; k < snap->gpu_count; k++)
			if (snap->gpus[k].index == idx[i] && snap->gpus[k].state != GM_GPU_LOST)
				pos = (long)k;
		for (j = 0; pos >= 0 && j < i; j++)
			if (entry_gpu[j] == pos)
				pos = -1;
		if (pos < 0)
			goto no; /* NVML numbers them otherwise: trust CUDA's reading */
		entry_gpu[i] = pos;
	}
	free(idx);
	return n;
no:
	free(idx);
	return (size_t)-1;
}
