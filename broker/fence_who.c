/*
 * fence_who.c - whom the broker's fence places and what it refuses them:
 * a pid checked against the asking user (its uids, its pid namespace),
 * and the rule of a lease, or of a user's login sessions, on the GPUs as
 * last read (lib/fence_rule.c builds it).  No cgroup is touched here.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"

/* A "Uid:" line: all four uids the one sought (*data; set to 1 if so). */
static int uids_line(const char *line, void *data)
{
	unsigned *want = data, r, e, s, f;

	if (sscanf(line, "Uid: %u %u %u %u", &r, &e, &s, &f) != 4)
		return 0;
	want[1] = r == want[0] && e == want[0] && s == want[0] && f == want[0];
	return 1;
}

/* Are all of pid's uids (real, effective, saved, file system) uid?  A
 * set-uid program the user started is not theirs to fence. */
int daemon_proc_all_uids(int pid, unsigned uid)
{
	unsigned want[2] = {uid, 0};

	return daemon_proc_status(pid, uids_line, want) == 0 && want[1];
}

/* A process's parent and its pid in its own (innermost) pid namespace. */
struct ns_ids {
	int ppid, ns_pid;
};

static int ns_line(const char *line, void *data)
{
	struct ns_ids *ids = data;

	if (!strncmp(line, "PPid:", 5)) {
		ids->ppid = atoi(line + 5);
	} else if (!strncmp(line, "NSpid:", 6)) {
		const char *last = strrchr(line, '\t');

		ids->ns_pid = atoi(last ? last : line + 6);
	}
	return 0;
}

/* 0, or -1 when pid is gone. */
static int proc_ns_ids(int pid, int *ppid, int *ns_pid)
{
	struct ns_ids ids = {0, 0};

	if (daemon_proc_status(pid, ns_line, &ids) < 0)
		return -1;
	*ppid = ids.ppid;
	*ns_pid = ids.ns_pid;
	return 0;
}

/*
 * The pid, as the broker numbers it, of the process that the client (the
 * peer, whose pid the kernel gave) names pid: the same number where both
 * share a pid namespace; inside a container's, the peer itself or one of
 * its children whose pid there is that number (a job waits as the child of
 * its supervisor).  0 when no such process is found: a pid from another
 * namespace must never name a process of the broker's that happens to
 * bear the number.
 */
int daemon_pid_here(int peer, int pid)
{
	struct stat mine, theirs;
	char path[64];
	int ppid, ns_pid, found = 0;
	DIR *dir;

	snprintf(path, sizeof path, "/proc/%d/ns/pid", peer);
	if (stat("/proc/self/ns/pid", &mine) < 0 || stat(path, &theirs) < 0 ||
	    (mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev))
		return pid;
	if (proc_ns_ids(peer, &ppid, &ns_pid) == 0 && ns_pid == pid)
		return peer;
	dir = opendir("/proc");
	for (struct dirent *e; dir && !found && (e = readdir(dir));) {
		int q = atoi(e->d_name);

		if (q > 0 && proc_ns_ids(q, &ppid, &ns_pid) == 0 && ppid == peer && ns_pid == pid)
			found = q;
	}
	if (dir)
		closedir(dir);
	return found;
}

/* Add what l holds to g (arrays with room for every GPU of every lease). */
static int grant_add(const struct gm_snapshot *snap, const struct blease *l, struct fence_grant *g,
                     unsigned *minors, struct fence_slice *slices, char *why, size_t len)
{
	for (size_t i = 0; i < l->rec.gpu_count; i++) {
		long pos = snapshot_position(snap, l->rec.indices[i]);
		const struct gm_gpu *gpu = pos >= 0 ? &snap->gpus[pos] : NULL;
		size_t k;

		if (!gpu || gpu->minor < 0) {
			snprintf(why, len,
			         "GPU %u's device node is unknown (NVML gives no minor number)",
			         l->rec.indices[i]);
			return -1;
		}
		if (!l->rec.migs[i][0]) {
			minors[g->gpu_count++] = (unsigned)gpu->minor;
			continue;
		}
		for (k = 0; k < snap->mig_count && strcmp(snap->migs[k].uuid, l->rec.migs[i]); k++)
			;
		if (k == snap->mig_count) {
			snprintf(why, len, "MIG slice %s is gone", l->rec.migs[i]);
			return -1;
		}
		slices[g->slice_count++] =
		    (struct fence_slice){(unsigned)gpu->minor, snap->migs[k].gpu_instance_id,
		                         snap->migs[k].compute_instance_id};
	}
	return 0;
}

/*
 * The machine's GPU nodes (lib/fence.h), read once a reading, on the loop:
 * read for each placement, /dev and /proc/devices were a tenth of the
 * broker's work a job.  Nodes come and go with the driver and its GPUs,
 * which a new reading sees, and placement takes a new reading when its
 * last is SNAPSHOT_REUSE_MS old.  The MIG capability table, fixed while
 * the driver is loaded, is carried over from the last reading.
 */
static struct fence_machine machine = FENCE_MACHINE_INIT;
static const struct gm_snapshot *machine_snap;
static int64_t machine_taken;

const struct fence_machine *daemon_fence_machine(const struct gm_snapshot *snap)
{
	const char *dev = getenv("GPUMAN_DEV_DIR"), *proc = getenv("GPUMAN_PROC_DIR");

	struct fence_machine now = FENCE_MACHINE_INIT;

	if (snap == machine_snap && snap->taken_ms == machine_taken)
		return &machine;
	machine_snap = NULL;
	if (fence_machine_read(&now, snap, dev && *dev ? dev : "/dev",
	                       proc && *proc ? proc : "/proc", &machine) < 0) {
		fence_machine_release(&now);
		return NULL;
	}
	fence_machine_release(&machine);
	machine = now;
	machine_snap = snap;
	machine_taken = snap->taken_ms;
	return &machine;
}

/* The devices to refuse, on this machine now: to the job of lease one, or
 * (one NULL) to the login sessions of uid, which may open the GPUs of its
 * live leases and reservations but skip's.  all (if not NULL): every
 * device such a rule could name. */
int daemon_fence_rule(struct daemon *d, const struct blease *one, unsigned uid,
                      const struct blease *skip, struct fence_rule *r, struct fence_rule *all,
                      char *why, size_t len)
{
	/* Minors and slices do not change between readings: the last one
	 * serves, and a caller's (serve_line's) stays valid. */
	struct gm_snapshot *snap = d->snap ? d->snap : daemon_snapshot(d, 0);
	const struct fence_machine *m = NULL;
	size_t cap = 1;
	unsigned *minors;
	struct fence_slice *slices;
	struct fence_grant g = {0, NULL, 0, NULL}, none = {0, NULL, 0, NULL};
	int rc = -1;

	for (const struct blease *l = d->leases; l; l = l->next)
		cap += l->rec.gpu_count;
	minors = calloc(cap, sizeof *minors);
	slices = calloc(cap, sizeof *slices);
	g.gpu_minors = minors;
	g.slices = slices;
	if (!snap || !minors || !slices) {
		snprintf(why, len, "the lease broker cannot read the GPUs");
		goto done;
	}
	if (one && grant_add(snap, one, &g, minors, slices, why, len) < 0)
		goto done;
	for (const struct blease *l = d->leases; !one && l; l = l->next)
		if (l != skip && !l->ended && l->rec.uid == uid &&
		    grant_add(snap, l, &g, minors, slices, why, len) < 0)
			goto done;
	if (!(m = daemon_fence_machine(snap)) || fence_rule_build(r, m, &g) < 0 ||
	    (all && fence_rule_build(all, m, &none) < 0)) {
		snprintf(why, len, "out of memory");
		goto done;
	}
	rc = 0;
done:
	free(minors);
	free(slices);
	return rc;
}
