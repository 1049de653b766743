/*
 * fence_rule.c - what a lease's job may open (fence.h): the machine's GPU
 * and MIG capability nodes, read from /dev and /proc; the rule, the nodes
 * a lease does not hold; and the same rule as a BPF_PROG_TYPE_CGROUP_DEVICE
 * program.  No cgroup is touched here (fence.c does that), so the unit
 * tests check each rule and program as plain data.
 */
#include <dirent.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "fence.h"
#include "snapshot_types.h"
#include "util.h"

/* ---- the machine ---------------------------------------------------------- */

static int has_minor(const struct fence_machine *m, unsigned minor)
{
	for (size_t i = 0; i < m->gpu_count; i++)
		if (m->gpu_minors[i] == minor)
			return 1;
	return 0;
}

static int add_minor(struct fence_machine *m, unsigned minor)
{
	unsigned *grown;

	if (has_minor(m, minor))
		return 0;
	grown = realloc(m->gpu_minors, (m->gpu_count + 1) * sizeof *grown);
	if (!grown)
		return -1;
	m->gpu_minors = grown;
	m->gpu_minors[m->gpu_count++] = minor;
	return 0;
}

int fence_caps_parse(struct fence_machine *m, const char *text)
{
	size_t room = m->cap_count;

	for (const char *line = text; line && *line;) {
		struct fence_cap cap = {0, 0, -1, 0};
		unsigned gpu, gi, ci, minor;
		int n = 0;

		if (sscanf(line, "gpu%u/gi%u/ci%u/access %u%n", &gpu, &gi, &ci, &minor, &n) == 4 &&
		    n > 0) {
			cap.gpu = gpu, cap.gi = gi, cap.ci = (int)ci, cap.minor = minor;
		} else if (sscanf(line, "gpu%u/gi%u/access %u%n", &gpu, &gi, &minor, &n) == 3 &&
		           n > 0) {
			cap.gpu = gpu, cap.gi = gi, cap.minor = minor;
		} else {
			n = 0; /* config, monitor and lines we do not know: not ours */
		}
		if (n > 0) {
			if (m->cap_count == room) {
				/* doubling: an H200's table has 4,320 lines */
				size_t more = room ? room * 2 : 64;
				struct fence_cap *grown = realloc(m->caps, more * sizeof *grown);

				if (!grown)
					return -1;
				m->caps = grown;
				room = more;
			}
			m->caps[m->cap_count++] = cap;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return 0;
}

int fence_machine_read(struct fence_machine *m, const struct gm_snapshot *snap, const char *dev_dir,
                       const char *proc_dir, const struct fence_machine *last)
{
	char path[PATH_MAX];
	char *text;
	DIR *dir;

	for (size_t i = 0; snap && i < snap->gpu_count; i++)
		if (snap->gpus[i].minor >= 0 && add_minor(m, (unsigned)snap->gpus[i].minor) < 0)
			return -1;
	dir = opendir(dev_dir);
	for (struct dirent *e; dir && (e = readdir(dir));) {
		struct stat st;
		const char *p = e->d_name + 6;

		if (strncmp(e->d_name, "nvidia", 6) || !*p || strspn(p, "0123456789") != strlen(p))
			continue;
		snprintf(path, sizeof path, "%s/%s", dev_dir, e->d_name);
		if (stat(path, &st) == 0 && S_ISCHR(st.st_mode) &&
		    major(st.st_rdev) == FENCE_NVIDIA_MAJOR &&
		    minor(st.st_rdev) <= FENCE_NVIDIA_LAST_GPU_MINOR &&
		    add_minor(m, minor(st.st_rdev)) < 0) {
			closedir(dir);
			return -1;
		}
	}
	if (dir)
		closedir(dir);
	snprintf(path, sizeof path, "%s/devices", proc_dir);
	text = read_text_file(path);
	/* "Character devices:" then "NNN name" lines, then "Block devices:" */
	for (const char *line = text; line && *line && strncmp(line, "Block", 5);) {
		unsigned major_;
		char name[64];

		if (sscanf(line, "%u %63s", &major_, name) == 2 && !strcmp(name, "nvidia-caps"))
			m->caps_major = major_;
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	free(text);
	if (!m->caps_major)
		return 0;
	/* The driver writes the table once, when it loads (every GPU it could
	 * have; reading it took 7.5 ms on an H200, the broker's loop stalled
	 * meanwhile): the last reading serves while the major is the same. */
	if (last && last->caps_major == m->caps_major && last->cap_count) {
		m->caps = malloc(last->cap_count * sizeof *m->caps);
		if (!m->caps)
			return -1;
		memcpy(m->caps, last->caps, last->cap_count * sizeof *m->caps);
		m->cap_count = last->cap_count;
		return 0;
	}
	snprintf(path, sizeof path, "%s/driver/nvidia-caps/mig-minors", proc_dir);
	text = read_text_file(path);
	if (text && fence_caps_parse(m, text) < 0) {
		free(text);
		return -1;
	}
	free(text);
	return 0;
}

void fence_machine_release(struct fence_machine *m)
{
	free(m->gpu_minors);
	free(m->caps);
	*m = (struct fence_machine)FENCE_MACHINE_INIT;
}

/* ---- the rule ------------------------------------------------------------- */

static int holds_gpu(const struct fence_grant *g, unsigned minor)
{
	for (size_t i = 0; i < g->gpu_count; i++)
		if (g->gpu_minors[i] == minor)
			return 1;
	return 0;
}

/* A slice's GPU node must open too: CUDA reaches a MIG device through it. */
static int holds_node(const struct fence_grant *g, unsigned minor)
{
	if (holds_gpu(g, minor))
		return 1;
	for (size_t i = 0; i < g->slice_count; i++)
		if (g->slices[i].gpu_minor == minor)
			return 1;
	return 0;
}

static int holds_cap(const struct fence_grant *g, const struct fence_cap *c)
{
	if (holds_gpu(g, c->gpu))
		return 1;
	for (size_t i = 0; i < g->slice_count; i++) {
		const struct fence_slice *s = &g->slices[i];

		/* its GPU instance, and its compute instance in it */
		if (s->gpu_minor == c->gpu && s->gi == c->gi &&
		    (c->ci < 0 || (unsigned)c->ci == s->ci))
			return 1;
	}
	return 0;
}

static int dev_cmp(const void *a, const void *b)
{
	const struct fence_dev *x = a, *y = b;

	if (x->type != y->type)
		return x->type < y->type ? -1 : 1;
	if (x->major != y->major)
		return x->major < y->major ? -1 : 1;
	return x->minor < y->minor ? -1 : x->minor > y->minor;
}

int fence_rule_build(struct fence_rule *r, const struct fence_machine *m,
                     const struct fence_grant *g)
{
	size_t n = 0;

	r->count = 0;
	free(r->devs);
	r->devs = calloc(m->gpu_count + m->cap_count + 1, sizeof *r->devs);
	if (!r->devs)
		return -1;
	for (size_t i = 0; i < m->gpu_count; i++)
		if (!holds_node(g, m->gpu_minors[i]))
			r->devs[n++] =
			    (struct fence_dev){'c', FENCE_NVIDIA_MAJOR, m->gpu_minors[i]};
	/* The driver lists capabilities for every GPU it could have (about
	 * 4,000 on an H200 with one GPU): those of GPUs this machine lacks
	 * open nothing without their GPU's node, and only lengthen the rule. */
	for (size_t i = 0; m->caps_major && i < m->cap_count; i++)
		if (has_minor(m, m->caps[i].gpu) && !holds_cap(g, &m->caps[i]))
			r->devs[n++] = (struct fence_dev){'c', m->caps_major, m->caps[i].minor};
	qsort(r->devs, n, sizeof *r->devs, dev_cmp);
	for (size_t i = 0; i < n; i++)
		if (!r->count || dev_cmp(&r->devs[r->count - 1], &r->devs[i]))
			r->devs[r->count++] = r->devs[i];
	return 0;
}

void fence_rule_release(struct fence_rule *r)
{
	free(r->devs);
	*r = (struct fence_rule)FENCE_RULE_INIT;
}

int fence_rule_refuses(const struct fence_rule *r, const struct fence_dev *d)
{
	return r->count && bsearch(d, r->devs, r->count, sizeof *d, dev_cmp) != NULL;
}

/* ---- the BPF program ------------------------------------------------------ */

static struct bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm)
{
	struct bpf_insn i;

	memset(&i, 0, sizeof i);
	i.code = code;
	i.dst_reg = dst & 0xf;
	i.src_reg = src & 0xf;
	i.off = off;
	i.imm = imm;
	return i;
}

size_t fence_bpf_program(const struct fence_rule *r, struct bpf_insn *out, size_t cap)
{
	size_t n = 0;

#define EMIT(i)                                                                                    \
	do {                                                                                       \
		struct bpf_insn i_ = (i);                                                          \
		if (n < cap)                                                                       \
			out[n] = i_;                                                               \
		n++;                                                                               \
	} while (0)
	/* r1 is struct bpf_cgroup_dev_ctx: r2 = the node's type (the low
	 * half of access_type), r3 its major, r4 its minor. */
	EMIT(insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, 0, 0));
	EMIT(insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff));
	EMIT(insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_3, BPF_REG_1, 4, 0));
	EMIT(insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_4, BPF_REG_1, 8, 0));
	/* One test per run of consecutive minors (r is sorted): the kernel's
	 * verifier takes time by the instruction, and a machine's refused
	 * capabilities come in long runs. */
	for (size_t i = 0, j; i < r->count; i = j + 1) {
		const struct fence_dev *d = &r->devs[i];
		int32_t type = d->type == 'b' ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR;
		unsigned last = d->minor;

		for (j = i; j + 1 < r->count && r->devs[j + 1].type == d->type &&
		            r->devs[j + 1].major == d->major && r->devs[j + 1].minor == last + 1;
		     j++)
			last++;
		/* These devices: refuse (return 0); else on to the next. */
		EMIT(insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, last > d->minor ? 5 : 4, type));
		EMIT(insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_3, 0, last > d->minor ? 4 : 3,
		          (int32_t)d->major));
		if (last > d->minor) {
			EMIT(insn(BPF_JMP | BPF_JLT | BPF_K, BPF_REG_4, 0, 3, (int32_t)d->minor));
			EMIT(insn(BPF_JMP | BPF_JGT | BPF_K, BPF_REG_4, 0, 2, (int32_t)last));
		} else {
			EMIT(insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_4, 0, 2, (int32_t)d->minor));
		}
		EMIT(insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0));
		EMIT(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
	}
	/* Everything else as it was. */
	EMIT(insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1));
	EMIT(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
#undef EMIT
	return n;
}
