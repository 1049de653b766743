/*
 * fence_bpf.c - the kernel's half of the cgroup v2 fence (fence.c): a
 * rule's BPF_PROG_TYPE_CGROUP_DEVICE program loaded with bpf(2), kept for
 * the next cgroup of the same GPUs, and attached to a cgroup, alone or in
 * place of the programs a cgroup had.  fence_rule.c writes the program.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "fence.h"
#include "util.h"

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

/* Load r's program; its descriptor, or -1 with err. */
static int bpf_load(const struct fence_rule *r, char *err, size_t len)
{
	size_t n = fence_bpf_program(r, NULL, 0);
	struct bpf_insn *prog = calloc(n, sizeof *prog);
	char log[512] = "";
	union bpf_attr attr;
	int fd;

	if (!prog) {
		gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		return -1;
	}
	fence_bpf_program(r, prog, n);
	memset(&attr, 0, sizeof attr);
	attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
	attr.insns = (uint64_t)(uintptr_t)prog;
	attr.insn_cnt = (uint32_t)n;
	attr.license = (uint64_t)(uintptr_t) "GPL";
	fd = (int)sys_bpf(BPF_PROG_LOAD, &attr);
	if (fd < 0 && errno != EPERM && errno != ENOSYS) {
		/* Ask again with the verifier's words, for the message. */
		int saved = errno;

		attr.log_buf = (uint64_t)(uintptr_t)log;
		attr.log_size = sizeof log;
		attr.log_level = 1;
		if ((fd = (int)sys_bpf(BPF_PROG_LOAD, &attr)) < 0)
			errno = saved;
	}
	if (fd < 0)
		gm_fail(GM_ERR_IO, err, len, "cannot load a cgroup device program: %s%s%.200s",
		        strerror(errno), log[0] ? ": " : "", log);
	free(prog);
	return fd;
}

/*
 * Programs loaded, by rule, for new cgroups: a job of the same GPUs as an
 * earlier one attaches the same program, as a program may be attached to
 * any number of cgroups.  A load runs the kernel's verifier (about 60 us
 * of the broker's 0.8 ms a job, in a line of hand-offs); a machine has few
 * distinct rules (one a GPU set).  The worker thread makes cgroups, a probe
 * at start-up one: the lock is for the rare two at once.
 */
#define KEPT_PROGRAMS 16
static struct kept_program {
	struct fence_dev *devs; /* NULL: a free slot */
	size_t count;
	int fd;
	uint64_t used; /* the clock below when last used */
} kept[KEPT_PROGRAMS];
static uint64_t kept_clock;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static int same_rule(const struct kept_program *k, const struct fence_rule *r)
{
	if (!k->devs || k->count != r->count)
		return 0;
	for (size_t i = 0; i < r->count; i++)
		if (k->devs[i].type != r->devs[i].type || k->devs[i].major != r->devs[i].major ||
		    k->devs[i].minor != r->devs[i].minor)
			return 0;
	return 1;
}

/* r's program, loaded or kept: a descriptor the caller closes, or -1. */
static int bpf_program(const struct fence_rule *r, char *err, size_t len)
{
	struct kept_program *slot = &kept[0];
	struct fence_dev *devs;
	int fd = -1;

	pthread_mutex_lock(&kept_lock);
	kept_clock++;
	for (size_t i = 0; i < KEPT_PROGRAMS && fd < 0; i++) {
		if (same_rule(&kept[i], r)) {
			kept[i].used = kept_clock;
			fd = fcntl(kept[i].fd, F_DUPFD_CLOEXEC, 0);
		} else if (kept[i].used < slot->used) {
			slot = &kept[i]; /* the least recently used */
		}
	}
	pthread_mutex_unlock(&kept_lock);
	if (fd >= 0)
		return fd;
	fd = bpf_load(r, err, len);
	devs = fd >= 0 ? malloc((r->count + 1) * sizeof *devs) : NULL;
	if (!devs)
		return fd;
	if (r->count) /* a rule that refuses nothing has no devs */
		memcpy(devs, r->devs, r->count * sizeof *devs);
	pthread_mutex_lock(&kept_lock);
	if (slot->devs) {
		free(slot->devs);
		close(slot->fd);
	}
	*slot = (struct kept_program){devs, r->count, fcntl(fd, F_DUPFD_CLOEXEC, 0), kept_clock};
	if (slot->fd < 0) {
		free(devs);
		slot->devs = NULL;
	}
	pthread_mutex_unlock(&kept_lock);
	return fd;
}

static int bpf_attach(const char *dir, int prog, char *err, size_t len)
{
	union bpf_attr attr;
	int cg = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

	if (cg < 0) {
		gm_fail(GM_ERR_IO, err, len, "cannot open '%s': %s", dir, strerror(errno));
		return -1;
	}
	memset(&attr, 0, sizeof attr);
	attr.target_fd = (uint32_t)cg;
	attr.attach_bpf_fd = (uint32_t)prog;
	attr.attach_type = BPF_CGROUP_DEVICE;
	/* Programs attached above (systemd's, a container's) still decide
	 * too: a device passes only if every one of them allows it. */
	attr.attach_flags = BPF_F_ALLOW_MULTI;
	rc = (int)sys_bpf(BPF_PROG_ATTACH, &attr);
	if (rc < 0)
		gm_fail(GM_ERR_IO, err, len, "cannot attach the device program to '%s': %s", dir,
		        strerror(errno));
	close(cg);
	return rc;
}

int fence_bpf_attach(const char *dir, const struct fence_rule *r, char *err, size_t len)
{
	int prog = bpf_program(r, err, len), rc;

	if (prog < 0)
		return -1;
	rc = bpf_attach(dir, prog, err, len);
	close(prog);
	return rc;
}

/* The new program first, then the old ones off, so that nothing opens in
 * between. */
int fence_bpf_replace(const char *dir, const struct fence_rule *r, char *err, size_t len)
{
	uint32_t ids[64], count = 64;
	union bpf_attr attr;
	int cg = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), prog, rc = -1;

	memset(&attr, 0, sizeof attr);
	attr.query.target_fd = (uint32_t)cg;
	attr.query.attach_type = BPF_CGROUP_DEVICE;
	attr.query.prog_ids = (uint64_t)(uintptr_t)ids;
	attr.query.prog_cnt = count;
	if (cg < 0 || sys_bpf(BPF_PROG_QUERY, &attr) < 0)
		attr.query.prog_cnt = 0;
	count = attr.query.prog_cnt;
	prog = bpf_load(r, err, len);
	if (prog >= 0 && bpf_attach(dir, prog, err, len) == 0)
		rc = 0;
	for (uint32_t i = 0; rc == 0 && i < count && i < 64; i++) {
		int old;

		memset(&attr, 0, sizeof attr);
		attr.prog_id = ids[i];
		old = (int)sys_bpf(BPF_PROG_GET_FD_BY_ID, &attr);
		if (old < 0)
			continue;
		memset(&attr, 0, sizeof attr);
		attr.target_fd = (uint32_t)cg;
		attr.attach_bpf_fd = (uint32_t)old;
		attr.attach_type = BPF_CGROUP_DEVICE;
		sys_bpf(BPF_PROG_DETACH, &attr);
		close(old);
	}
	if (prog >= 0)
		close(prog);
	if (cg >= 0)
		close(cg);
	return rc;
}
