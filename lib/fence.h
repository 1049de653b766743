/*
 * fence.h - placement the kernel enforces: a job's cgroup whose device
 * filter refuses the device nodes of every GPU (and MIG slice) its lease
 * does not hold, and changes nothing else, as Slurm's ConstrainDevices.
 * For the lease broker, which runs as root (broker/fence.c); the
 * client side is broker_fence() in broker.h.
 *
 * Calling sequence: fence_choose() once picks the mechanism the machine
 * has (cgroup v2 with a BPF_PROG_TYPE_CGROUP_DEVICE program, the v1
 * devices controller, or none, with the reason) and hands back its ops
 * table; per lease, fence_machine_read() learns the machine's GPU and MIG
 * capability minors, fence_rule_build() the devices to refuse, then
 * ops->create(), ops->enter() for each process placed, and ops->end()
 * when the lease ends, which kills whatever is left in the cgroup and
 * removes it.  Every call returns 0, or -1 with a message in err.
 *
 * The rule and the BPF program are pure functions of their inputs (unit
 * tested; fence_rule.c); the rest writes to cgroupfs and calls bpf(2)
 * (fence.c, and fence_scope.c for systemd's scopes).
 */
#ifndef GM_FENCE_H
#define GM_FENCE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

struct gm_snapshot;
struct bpf_insn;

/* The NVIDIA driver's character major: /dev/nvidiaN is 195:N, nvidiactl
 * 195:255, nvidia-modeset 195:254. */
#define FENCE_NVIDIA_MAJOR 195
#define FENCE_NVIDIA_LAST_GPU_MINOR 253
/* How long ending a lease may wait for its killed processes to be gone. */
#define FENCE_END_PATIENCE_MS 2000

/* One device node a rule refuses: type 'c' or 'b'. */
struct fence_dev {
	char type;
	unsigned major, minor;
};

/* A MIG capability node: /dev/nvidia-caps/nvidia-capN, N = minor, for a
 * GPU instance (ci < 0) or a compute instance of the GPU of minor gpu. */
struct fence_cap {
	unsigned gpu, gi;
	int ci;
	unsigned minor;
};

/* What the machine has: the minors of its GPUs (NVML's and the nodes in
 * the device directory) and its MIG capabilities.  Owned arrays. */
struct fence_machine {
	size_t gpu_count;
	unsigned *gpu_minors;
	unsigned caps_major; /* 0: no nvidia-caps in /proc/devices */
	size_t cap_count;
	struct fence_cap *caps;
};
#define FENCE_MACHINE_INIT                                                                         \
	{                                                                                          \
		0, NULL, 0, 0, NULL                                                                \
	}

/* What one lease holds: whole GPUs by minor, and MIG slices. */
struct fence_slice {
	unsigned gpu_minor, gi, ci;
};
struct fence_grant {
	size_t gpu_count;
	const unsigned *gpu_minors;
	size_t slice_count;
	const struct fence_slice *slices;
};

/* The devices to refuse.  Owned array. */
struct fence_rule {
	size_t count;
	struct fence_dev *devs;
};
#define FENCE_RULE_INIT                                                                            \
	{                                                                                          \
		0, NULL                                                                            \
	}

/*
 * Read the machine: the minor of each GPU of snap (those NVML gives one),
 * every character node 195:N (N <= 253) named nvidia<digits> in dev_dir,
 * the nvidia-caps major from <proc_dir>/devices and the MIG capability
 * minors from <proc_dir>/driver/nvidia-caps/mig-minors -- or, where
 * last (an earlier reading, or NULL) saw the same major, last's.  Files
 * that do not exist are a machine without them.  0, or -1 out of memory.
 */
int fence_machine_read(struct fence_machine *m, const struct gm_snapshot *snap, const char *dev_dir,
                       const char *proc_dir, const struct fence_machine *last);
/* Parse mig-minors text ("gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13",
 * "config 1", ...) into m->caps.  0, or -1 out of memory. */
int fence_caps_parse(struct fence_machine *m, const char *text);
void fence_machine_release(struct fence_machine *m);

/*
 * The devices a job of grant g must not open: every GPU minor of m that g
 * does not hold, and every MIG capability of a GPU instance or compute
 * instance that is not g's (a whole GPU's lease holds all its slices'
 * capabilities).  Nothing else: nvidiactl, nvidia-uvm, the config and
 * monitor capabilities and every other device stay as they were.  Sorted,
 * without duplicates.  0, or -1 out of memory.
 */
int fence_rule_build(struct fence_rule *r, const struct fence_machine *m,
                     const struct fence_grant *g);
void fence_rule_release(struct fence_rule *r);
/* Does r refuse d? */
int fence_rule_refuses(const struct fence_rule *r, const struct fence_dev *d);

/*
 * The BPF_PROG_TYPE_CGROUP_DEVICE program for r: 0 (refuse) for each of
 * r's devices, 1 (allow) for everything else.  Writes at most cap
 * instructions to out (out may be NULL with cap 0) and returns how many
 * the program has.
 */
size_t fence_bpf_program(const struct fence_rule *r, struct bpf_insn *out, size_t cap);

/* fence_bpf.c, for cgroup v2: r's program attached to the cgroup dir (a
 * program loaded for an earlier cgroup of the same rule is reused); or in
 * place of the programs dir had.  0, or -1 with err. */
int fence_bpf_attach(const char *dir, const struct fence_rule *r, char *err, size_t len);
int fence_bpf_replace(const char *dir, const struct fence_rule *r, char *err, size_t len);

/* ---- the mechanisms ------------------------------------------------------ */

struct fence;

struct fence_ops {
	const char *name; /* "cgroup v2 device program" */
	/* The cgroup of lease id, refusing r's devices; one that exists is
	 * kept as it is (a broker restarted). */
	int (*create)(const struct fence *f, const char *id, const struct fence_rule *r, char *err,
	              size_t len);
	/* Move pid (its whole process) into the cgroup of lease id. */
	int (*enter)(const struct fence *f, const char *id, int pid, char *err, size_t len);
	/* The cgroup pid is in now (a directory of the hierarchy). */
	int (*where)(const struct fence *f, int pid, char *out, size_t len);
	/* Move pid into the cgroup at path (what where() said). */
	int (*move_to)(const struct fence *f, const char *path, int pid);
	/* Kill every process in the cgroup of lease id and remove it.  0 once
	 * it is gone (or never was), -1 while something is still in it. */
	int (*end)(const struct fence *f, const char *id, char *err, size_t len);
	/* The processes in the cgroup of lease id (in a scope, the scope's
	 * own too): up to cap pids into out, how many there are returned (-1:
	 * no such cgroup). */
	long (*pids)(const struct fence *f, const char *id, int *out, size_t cap);
	/* The cgroup id (made if need be) refuses r's devices from now on, and
	 * of all's (every device a rule on this machine could name) no other. */
	int (*update)(const struct fence *f, const char *id, const struct fence_rule *r,
	              const struct fence_rule *all, char *err, size_t len);
};

struct fence {
	const struct fence_ops *ops; /* NULL: placement is not enforced */
	char mount[1024];            /* the hierarchy's mount point */
	char root[1040];             /* <mount>/gpuman (GPUMAN_FENCE_CGROUP): the jobs' cgroups */
	char why[256];               /* when ops is NULL: why not, for people */
	/* Each move of a job into its cgroup waits for an RCU grace period
	 * (several ms): the hierarchy is mounted without favordynmods, which
	 * the kernel offers (gpuman-trust(7)). */
	int slow_moves;
	/* The hierarchy is mounted favordynmods: a move waits no grace period. */
	int fast_moves;
	/* GPUMAN_FENCE_MOVE_DELAY_MS: each move waits that much longer, on
	 * the thread that makes it -- a kernel whose moves wait a grace period
	 * (up to 26 ms measured), shown where they do not, for the tests.
	 * "N:shared" (move_delay_shared): only a move that comes N ms or more
	 * after the last one ended waits, as the kernel's moves share a grace
	 * period (rcu_sync): the benchmarks' model of such a kernel. */
	long move_delay_ms;
	int move_delay_shared;
	/* Where systemd is PID 1 (fence_scope.c): each lease's cgroup is
	 * <scope_root>/<unit_prefix>-<id>.scope/job, in a transient scope
	 * of slice; 0 with scope_why when systemd runs but cannot be asked. */
	int scopes;
	char slice[80];        /* "gpuman.slice" (GPUMAN_FENCE_CGROUP + ".slice") */
	char unit_prefix[72];  /* "gpuman" */
	char scope_root[1600]; /* <mount>/gpuman.slice */
	char scope_why[200];
};

/*
 * Choose the mechanism once (GPUMAN_FENCE: auto, the default; v2; v1;
 * off).  auto takes cgroup v2 where a cgroup2 hierarchy is mounted and a
 * device program loads, else the v1 devices controller.  Without one (not
 * root, nothing mounted, no permission, as in a container without cgroup
 * delegation) f->ops is NULL and f->why says why, for status.  Cgroups of
 * ended leases that a broker before this one left empty are removed.
 */
void fence_choose(struct fence *f);

/* The cgroup directory of lease id under f (in scope mode the cgroup
 * "job" inside its scope; a login session's is a folder under root). */
void fence_path(const struct fence *f, const char *id, char *out, size_t len);

/* ---- systemd's transient scopes (fence_scope.c) --------------------------- */

/* Does systemd manage this machine's cgroups (/run/systemd/system is a
 * directory, as sd_booted() checks), or does GPUMAN_SYSTEMD_BUS name a bus
 * where its manager answers (a test's stand-in)? */
int fence_systemd_wanted(void);
/* Load libsystemd's sd-bus (libsystemd.so.0) once.  0, or -1 with err. */
int fence_systemd_load(char *err, size_t len);
/* The folder of slice ("a-b.slice" -> "a.slice/a-b.slice"), relative to
 * the hierarchy's root.  0, or -1 when slice is no valid slice name. */
int fence_slice_path(const char *slice, char *out, size_t len);
/* The scope unit of lease id ("gpuman-<id>.scope") and its cgroup. */
void fence_scope_unit(const struct fence *f, const char *id, char *out, size_t len);
void fence_scope_dir(const struct fence *f, const char *id, char *out, size_t len);
/*
 * Ask systemd for lease id's transient scope (StartTransientUnit: Slice,
 * Delegate=yes, Description, PIDs = pid) and wait until pid is in it, at
 * most 5 s.  A scope that exists already (a broker before this one made
 * it) is taken as it is.  Then ops->create() makes the cgroup "job" in it
 * with the device filter, and ops->enter() moves pid there.  0, or -1
 * with err (no libsystemd, systemd refused or did not answer).
 */
int fence_scope_start(const struct fence *f, const char *id, int pid, const char *description,
                      char *err, size_t len);

#endif
