/*
 * snapshot.c - every GPU and its processes at one instant.  The NVML backend
 * fills the devices and the raw process list; this file adds what /proc
 * shows of each process (owner and command line), orders everything, and
 * gives the snapshot its stable JSON form.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "broker_snapshot.h"
#include "broker_wire.h"
#include "context.h"
#include "gpu_fields.h"
#include "parse.h"
#include "proctree.h"
#include "snapshot.h"
#include "util.h"
#include "visible.h"

/* Owner and command line of a process.  In a container without the host's
 * PID namespace the driver's PIDs may not exist here: leave them unknown. */
static void proc_fill_from_procfs(struct gm_proc *proc, unsigned *last_uid, char *last_user)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof path, "/proc/%u", proc->pid);
	if (stat(path, &st) < 0)
		return;
	proc->has_user = 1;
	proc->uid = st.st_uid;
	if (*last_uid != st.st_uid) {
		struct passwd pw, *res = NULL;
		char buf[1024];

		if (getpwuid_r(st.st_uid, &pw, buf, sizeof buf, &res) == 0 && res)
			snprintf(last_user, 33, "%s", pw.pw_name);
		else
			snprintf(last_user, 33, "%u", (unsigned)st.st_uid);
		*last_uid = st.st_uid;
	}
	snprintf(proc->user, sizeof proc->user, "%s", last_user);

	proctree_command((int)proc->pid, proc->command, sizeof proc->command);
}

static int gpu_cmp(const void *a, const void *b)
{
	const struct gm_gpu *x = a, *y = b;

	return (x->index > y->index) - (x->index < y->index);
}

static int proc_cmp(const void *a, const void *b)
{
	const struct gm_proc *x = a, *y = b;

	if (x->gpu != y->gpu)
		return (x->gpu > y->gpu) - (x->gpu < y->gpu);
	return (x->pid > y->pid) - (x->pid < y->pid);
}

GM_API enum gm_err gm_snapshot_take(struct gm_context *ctx, struct gm_snapshot **out, char *errbuf,
                                    size_t errlen)
{
	return snapshot_take(ctx, 0, 1, out, errbuf, errlen);
}

enum gm_err snapshot_take(struct gm_context *ctx, unsigned proc_util_window_ms, int clocks,
                          struct gm_snapshot **out, char *errbuf, size_t errlen)
{
	return snapshot_take_aged(ctx, proc_util_window_ms, clocks, BROKER_SNAPSHOT_MAX_AGE_MS, out,
	                          errbuf, errlen);
}

/*
 * The broker's reading, where one runs.  A broker that does not answer
 * leaves the views working: the GPUs are read here (leases, which only it
 * knows, are another matter: their transport says so).
 */
static enum gm_err snapshot_from_broker(struct gm_context *ctx, long max_age_ms,
                                        struct gm_snapshot **out, char *errbuf, size_t errlen)
{
	char why[GM_ERRBUF_SIZE];
	enum gm_err err =
	    broker_snapshot(ctx->broker, max_age_ms, ctx->want_view, out, why, sizeof why);

	if (err != GM_ERR_STATE) {
		if (err != GM_OK)
			gm_fail(err, errbuf, errlen, "%s", why);
		return err;
	}
	err = context_load_nvml(ctx, errbuf, errlen);
	if (err != GM_OK)
		return err;
	ctx->broker[0] = '\0';
	return GM_ERR_STATE; /* read here instead */
}

enum gm_err snapshot_take_aged(struct gm_context *ctx, unsigned proc_util_window_ms, int clocks,
                               long max_age_ms, struct gm_snapshot **out, char *errbuf,
                               size_t errlen)
{
	struct gm_snapshot *snap;
	enum gm_err err;
	unsigned last_uid = (unsigned)-1;
	char last_user[33] = "";

	*out = NULL;
	if (!ctx->nvml && ctx->broker[0]) {
		err = snapshot_from_broker(ctx, max_age_ms, out, errbuf, errlen);
		if (err != GM_ERR_STATE)
			return err;
	}
	snap = calloc(1, sizeof *snap);
	if (!snap)
		return gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory");
	snap->taken_ms = now_ms();
	snap->nvml_init_ms = nvml_init_ms(ctx->nvml);
	err = nvml_snapshot(ctx->nvml, snap, errbuf, errlen);
	if (err != GM_OK) {
		gm_snapshot_free(snap);
		return err;
	}
	/* qsort's array may not be NULL, even when empty */
	if (snap->gpu_count)
		qsort(snap->gpus, snap->gpu_count, sizeof *snap->gpus, gpu_cmp);
	if (snap->proc_count)
		qsort(snap->procs, snap->proc_count, sizeof *snap->procs, proc_cmp);
	if (proc_util_window_ms)
		nvml_proc_util(ctx->nvml, snap, proc_util_window_ms);
	if (clocks)
		nvml_clocks(ctx->nvml, snap);
	for (size_t i = 0; i < snap->proc_count; i++)
		proc_fill_from_procfs(&snap->procs[i], &last_uid, last_user);
	*out = snap;
	return GM_OK;
}

long snapshot_position(const struct gm_snapshot *snap, unsigned index)
{
	for (size_t i = 0; i < snap->gpu_count; i++)
		if (snap->gpus[i].index == index)
			return (long)i;
	return -1;
}

GM_API const struct gm_gpu *gm_snapshot_find(const struct gm_snapshot *snap, const char *spec)
{
	const struct gm_gpu *found = NULL;

	if (!snap || !spec || !*spec)
		return NULL;
	for (size_t i = 0; i < snap->gpu_count; i++) {
		if (!gpu_spec_matches(spec, snap->gpus[i].index, snap->gpus[i].uuid))
			continue;
		if (found)
			return NULL; /* ambiguous prefix */
		found = &snap->gpus[i];
	}
	return found;
}

const char *gpu_state_name(enum gm_gpu_state state)
{
	switch (state) {
	case GM_GPU_OK:
		return "ok";
	case GM_GPU_LOST:
		return "lost";
	case GM_GPU_NO_PERMISSION:
		return "no_permission";
	case GM_GPU_ERROR:
		return "error";
	}
	return "error";
}

const char *compute_mode_name(int mode)
{
	switch (mode) {
	case GM_COMPUTE_DEFAULT:
		return "default";
	case GM_COMPUTE_EXCLUSIVE_THREAD:
		return "exclusive_thread";
	case GM_COMPUTE_PROHIBITED:
		return "prohibited";
	case GM_COMPUTE_EXCLUSIVE_PROCESS:
		return "exclusive_process";
	}
	return "unknown";
}

/* JSON strings must be UTF-8; a command line need not be.  Keep what is
 * valid and show other bytes as '?'. */
json_t *json_text(const char *s)
{
	json_t *j = json_string(s);
	char *copy;

	if (j)
		return j;
	copy = strdup(s);
	if (!copy)
		return json_null();
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_string(copy);
	free(copy);
	return j ? j : json_null();
}

/* A field the GPU did not report is null in JSON, never 0 (the field
 * table's readings, in snapshot_gpu_json). */

long snapshot_cuda_index(const struct gm_snapshot *snap, size_t pos, int pci_order)
{
	size_t *order = malloc((snap->gpu_count + 1) * sizeof *order), n;
	long found = -1;

	if (!order)
		return -1;
	n = visible_cuda_order(snap, pci_order, order);
	for (size_t i = 0; i < n; i++)
		if (order[i] == pos)
			found = (long)i;
	free(order);
	return found;
}

json_t *snapshot_mig_json(const struct gm_mig *m)
{
	json_t *o = json_object(), *pids = json_array();
	int mem = !!(m->valid & GM_MIG_HAS_MEMORY), inst = !!(m->valid & GM_MIG_HAS_INSTANCE);

	json_object_set_new(o, "uuid", m->uuid[0] ? json_string(m->uuid) : json_null());
	json_object_set_new(o, "gpu", json_integer(m->gpu));
	json_object_set_new(o, "name", m->name[0] ? json_text(m->name) : json_null());
	json_object_set_new(o, "profile", m->profile[0] ? json_text(m->profile) : json_null());
	json_object_set_new(o, "memory_total_mib",
	                    mem ? json_integer((json_int_t)m->mem_total_mib) : json_null());
	json_object_set_new(o, "memory_used_mib",
	                    mem ? json_integer((json_int_t)m->mem_used_mib) : json_null());
	json_object_set_new(o, "memory_free_mib",
	                    mem ? json_integer((json_int_t)m->mem_free_mib) : json_null());
	json_object_set_new(o, "gpu_instance_id",
	                    inst ? json_integer(m->gpu_instance_id) : json_null());
	json_object_set_new(o, "compute_instance_id",
	                    inst ? json_integer(m->compute_instance_id) : json_null());
	for (size_t k = 0; k < m->pid_count; k++)
		json_array_append_new(pids, json_integer(m->pids[k]));
	json_object_set_new(o, "pids", (m->valid & GM_MIG_HAS_PROCESSES) ? pids : json_null());
	if (!(m->valid & GM_MIG_HAS_PROCESSES))
		json_decref(pids);
	return o;
}

json_t *snapshot_gpu_json(const struct gm_snapshot *snap, size_t pos)
{
	const struct gm_gpu *gpu = &snap->gpus[pos];
	json_t *o = json_object();
	long fastest = snapshot_cuda_index(snap, pos, 0), pci = snapshot_cuda_index(snap, pos, 1);
	json_t *migs;
	char cc[16];

	json_object_set_new(o, "index", json_integer(gpu->index));
	json_object_set_new(o, "uuid", gpu->uuid[0] ? json_string(gpu->uuid) : json_null());
	json_object_set_new(o, "name", gpu->name[0] ? json_text(gpu->name) : json_null());
	json_object_set_new(o, "pci_bus_id",
	                    (gpu->valid & GM_HAS_PCI) ? json_string(gpu->pci_bus_id) : json_null());
	json_object_set_new(o, "state", json_string(gpu_state_name(gpu->state)));
	json_object_set_new(o, "note", gpu->note[0] ? json_text(gpu->note) : json_null());
	/* The readings of the GPU field table that JSON shows as numbers. */
	for (size_t i = 0; i < gpu_field_count; i++) {
		const struct gpu_field *f = &gpu_fields[i];
		int64_t v;

		if (!gpu_field_named(f->json))
			continue;
		if (!gpu_field_get(gpu, f, &v))
			json_object_set_new(o, f->json, json_null());
		else if (f->scale > 1)
			json_object_set_new(o, f->json, json_real((double)v / f->scale));
		else
			json_object_set_new(o, f->json, json_integer((json_int_t)v));
	}
	snprintf(cc, sizeof cc, "%d.%d", gpu->cc_major, gpu->cc_minor);
	json_object_set_new(o, "compute_capability",
	                    (gpu->valid & GM_HAS_CC) ? json_string(cc) : json_null());
	json_object_set_new(o, "compute_mode",
	                    (gpu->valid & GM_HAS_COMPUTE_MODE)
	                        ? json_string(compute_mode_name(gpu->compute_mode))
	                        : json_null());
	json_object_set_new(o, "mig_mode",
	                    (gpu->valid & GM_HAS_MIG) ? json_boolean(gpu->mig_mode == 1)
	                                              : json_null());
	json_object_set_new(o, "persistence_mode",
	                    (gpu->valid & GM_HAS_PERSISTENCE) ? json_boolean(gpu->persistence_mode)
	                                                      : json_null());
	migs = json_array();
	for (size_t i = 0; i < snap->mig_count; i++)
		if (snap->migs[i].gpu == gpu->index)
			json_array_append_new(migs, snapshot_mig_json(&snap->migs[i]));
	json_object_set_new(o, "mig_devices", migs);
	/* CUDA numbers GPUs fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID. */
	json_object_set_new(o, "cuda_index", fastest >= 0 ? json_integer(fastest) : json_null());
	json_object_set_new(o, "cuda_index_pci_bus_order",
	                    pci >= 0 ? json_integer(pci) : json_null());
	return o;
}

json_t *snapshot_proc_json(const struct gm_snapshot *snap, const struct gm_proc *proc)
{
	json_t *o = json_object();
	long pos = snapshot_position(snap, proc->gpu);
	const struct gm_mig *mig = gm_proc_mig(snap, proc);
	const char *kind = proc->kind == (GM_PROC_COMPUTE | GM_PROC_GRAPHICS) ? "compute+graphics"
	                   : proc->kind == GM_PROC_GRAPHICS                   ? "graphics"
	                                                                      : "compute";

	json_object_set_new(o, "pid", json_integer(proc->pid));
	json_object_set_new(o, "gpu", json_integer(proc->gpu));
	json_object_set_new(o, "gpu_uuid",
	                    pos >= 0 && snap->gpus[pos].uuid[0] ? json_string(snap->gpus[pos].uuid)
	                                                        : json_null());
	json_object_set_new(o, "mig_uuid",
	                    mig && mig->uuid[0] ? json_string(mig->uuid) : json_null());
	json_object_set_new(o, "used_mib",
	                    proc->has_mem ? json_integer((json_int_t)proc->used_mib) : json_null());
	json_object_set_new(o, "type", json_string(kind));
	json_object_set_new(o, "mps", json_boolean(proc->mps));
	json_object_set_new(o, "utilization_pct",
	                    proc->has_util ? json_integer(proc->util_pct) : json_null());
	json_object_set_new(o, "user", proc->has_user ? json_string(proc->user) : json_null());
	json_object_set_new(o, "uid", proc->has_user ? json_integer(proc->uid) : json_null());
	json_object_set_new(o, "command",
	                    proc->command[0] ? json_text(proc->command) : json_null());
	return o;
}

json_t *snapshot_json(const struct gm_snapshot *snap)
{
	json_t *o = json_object(), *gpus = json_array(), *procs = json_array(),
	       *notes = json_array();
	char cuda[16];

	json_object_set_new(o, "schema", json_integer(1));
	json_object_set_new(o, "taken_ms", json_integer(snap->taken_ms));
	json_object_set_new(o, "driver_version",
	                    snap->driver_version[0] ? json_string(snap->driver_version)
	                                            : json_null());
	snprintf(cuda, sizeof cuda, "%d.%d", snap->cuda_driver_version / 1000,
	         snap->cuda_driver_version % 1000 / 10);
	json_object_set_new(o, "cuda_driver_version",
	                    snap->cuda_driver_version ? json_string(cuda) : json_null());
	for (size_t i = 0; i < snap->gpu_count; i++)
		json_array_append_new(gpus, snapshot_gpu_json(snap, i));
	for (size_t i = 0; i < snap->proc_count; i++)
		json_array_append_new(procs, snapshot_proc_json(snap, &snap->procs[i]));
	for (size_t i = 0; i < snap->note_count; i++)
		json_array_append_new(notes, json_text(snap->notes[i]));
	json_object_set_new(o, "gpus", gpus);
	json_object_set_new(o, "processes", procs);
	json_object_set_new(o, "notes", notes);
	/* Who read the GPUs, how long ago, and what opening NVML cost it. */
	json_object_set_new(o, "reading", snapshot_reading_json(snap));
	return o;
}

json_t *snapshot_reading_json(const struct gm_snapshot *snap)
{
	json_t *o = json_object();

	json_object_set_new(o, "by", json_string(snap->from_broker ? "broker" : "self"));
	json_object_set_new(o, "age_ms", json_integer(snap->from_broker ? snap->age_ms : 0));
	/* to 0.1 ms: a time, not a float's digits */
	json_object_set_new(o, "nvml_init_ms",
	                    json_real((double)(int64_t)(snap->nvml_init_ms * 10 + 0.5) / 10));
	return o;
}

int snapshot_persistence_note(const struct gm_snapshot *snap, char *buf, size_t len)
{
	char list[256] = "";
	size_t used = 0, off = 0;

	for (size_t i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *g = &snap->gpus[i];

		if (!(g->valid & GM_HAS_PERSISTENCE) || g->persistence_mode)
			continue;
		if (used < sizeof list)
			used += (size_t)snprintf(list + used, sizeof list - used, "%s%u",
			                         off++ ? "," : "", g->index);
	}
	if (!off)
		return 0;
	snprintf(buf, len,
	         "persistence mode is off on GPU%s %s: the driver takes the GPUs down when no "
	         "program holds them open, and whoever opens NVML next waits while it brings "
	         "them up (nvmlInit took %.0f ms %s); start nvidia-persistenced (systemctl enable "
	         "--now nvidia-persistenced) to keep them up",
	         off > 1 ? "s" : "", list, snap->nvml_init_ms,
	         snap->from_broker ? "in the lease broker, which pays it once for everybody"
	                           : "in this command, and every gpuman command pays it again");
	return 1;
}

GM_API char *gm_snapshot_json(const struct gm_snapshot *snap)
{
	json_t *o;
	char *s;

	if (!snap)
		return NULL;
	o = snapshot_json(snap);
	s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(o);
	return s;
}
