/*
 * snapshot_access.c - the public accessors of a snapshot, its GPUs and its
 * processes: the only way programs outside this tree read them, so that
 * their layouts (snapshot_types.h) stay the library's own; and its end,
 * whoever made it (snapshot.c from NVML, snapshot_wire.c from the broker).
 */
#include <stdlib.h>
#include "gpu_fields.h"
#include "snapshot_types.h"

GM_API void gm_snapshot_free(struct gm_snapshot *snap)
{
	if (!snap)
		return;
	for (size_t i = 0; i < snap->note_count; i++)
		free(snap->notes[i]);
	free(snap->notes);
	for (size_t i = 0; i < snap->mig_count; i++)
		free(snap->migs[i].pids);
	free(snap->migs);
	free(snap->gpus);
	free(snap->procs);
	free(snap->view_text);
	free(snap);
}

GM_API const char *gm_snapshot_driver_version(const struct gm_snapshot *snap)
{
	return snap->driver_version;
}

GM_API int gm_snapshot_cuda_driver_version(const struct gm_snapshot *snap)
{
	return snap->cuda_driver_version;
}

GM_API int64_t gm_snapshot_taken_ms(const struct gm_snapshot *snap)
{
	return snap->taken_ms;
}

GM_API size_t gm_snapshot_gpu_count(const struct gm_snapshot *snap)
{
	return snap->gpu_count;
}

GM_API const struct gm_gpu *gm_snapshot_gpu(const struct gm_snapshot *snap, size_t i)
{
	return i < snap->gpu_count ? &snap->gpus[i] : NULL;
}

GM_API size_t gm_snapshot_proc_count(const struct gm_snapshot *snap)
{
	return snap->proc_count;
}

GM_API const struct gm_proc *gm_snapshot_proc(const struct gm_snapshot *snap, size_t i)
{
	return i < snap->proc_count ? &snap->procs[i] : NULL;
}

GM_API size_t gm_snapshot_note_count(const struct gm_snapshot *snap)
{
	return snap->note_count;
}

GM_API const char *gm_snapshot_note(const struct gm_snapshot *snap, size_t i)
{
	return i < snap->note_count ? snap->notes[i] : NULL;
}

GM_API unsigned gm_gpu_index(const struct gm_gpu *gpu)
{
	return gpu->index;
}
GM_API enum gm_gpu_state gm_gpu_state(const struct gm_gpu *gpu)
{
	return gpu->state;
}
GM_API const char *gm_gpu_note(const struct gm_gpu *gpu)
{
	return gpu->note;
}
GM_API const char *gm_gpu_uuid(const struct gm_gpu *gpu)
{
	return gpu->uuid;
}
GM_API const char *gm_gpu_name(const struct gm_gpu *gpu)
{
	return gpu->name;
}
GM_API const char *gm_gpu_pci_bus_id(const struct gm_gpu *gpu)
{
	return gpu->pci_bus_id;
}
GM_API unsigned gm_gpu_valid(const struct gm_gpu *gpu)
{
	return gpu->valid;
}

GM_API int gm_gpu_value(const struct gm_gpu *gpu, enum gm_gpu_value what, int64_t *out)
{
	/* asked by a program built against a newer header: not read */
	if ((unsigned)what >= gpu_field_count)
		return 0;
	return gpu_field_get(gpu, &gpu_fields[what], out);
}

GM_API unsigned gm_proc_pid(const struct gm_proc *proc)
{
	return proc->pid;
}
GM_API unsigned gm_proc_gpu(const struct gm_proc *proc)
{
	return proc->gpu;
}
GM_API unsigned gm_proc_kind(const struct gm_proc *proc)
{
	return proc->kind;
}
GM_API const char *gm_proc_user(const struct gm_proc *proc)
{
	return proc->user;
}
GM_API const char *gm_proc_command(const struct gm_proc *proc)
{
	return proc->command;
}

GM_API int gm_proc_used_mib(const struct gm_proc *proc, uint64_t *out)
{
	if (!proc->has_mem)
		return 0;
	*out = proc->used_mib;
	return 1;
}

GM_API int gm_proc_uid(const struct gm_proc *proc, unsigned *out)
{
	if (!proc->has_user)
		return 0;
	*out = proc->uid;
	return 1;
}

GM_API size_t gm_snapshot_mig_count(const struct gm_snapshot *snap)
{
	return snap->mig_count;
}

GM_API const struct gm_mig *gm_snapshot_mig(const struct gm_snapshot *snap, size_t i)
{
	return i < snap->mig_count ? &snap->migs[i] : NULL;
}

GM_API unsigned gm_mig_gpu(const struct gm_mig *mig)
{
	return mig->gpu;
}
GM_API const char *gm_mig_uuid(const struct gm_mig *mig)
{
	return mig->uuid;
}
GM_API const char *gm_mig_name(const struct gm_mig *mig)
{
	return mig->name;
}
GM_API const char *gm_mig_profile(const struct gm_mig *mig)
{
	return mig->profile;
}
GM_API unsigned gm_mig_valid(const struct gm_mig *mig)
{
	return mig->valid;
}

GM_API int gm_mig_value(const struct gm_mig *mig, enum gm_mig_value what, int64_t *out)
{
	unsigned need;
	int64_t v;

	switch (what) {
	case GM_MIG_MEM_TOTAL_MIB:
		need = GM_MIG_HAS_MEMORY;
		v = (int64_t)mig->mem_total_mib;
		break;
	case GM_MIG_MEM_FREE_MIB:
		need = GM_MIG_HAS_MEMORY;
		v = (int64_t)mig->mem_free_mib;
		break;
	case GM_MIG_MEM_USED_MIB:
		need = GM_MIG_HAS_MEMORY;
		v = (int64_t)mig->mem_used_mib;
		break;
	case GM_MIG_GPU_INSTANCE_ID:
		need = GM_MIG_HAS_INSTANCE;
		v = mig->gpu_instance_id;
		break;
	case GM_MIG_COMPUTE_INSTANCE_ID:
		need = GM_MIG_HAS_INSTANCE;
		v = mig->compute_instance_id;
		break;
	default:
		return 0; /* asked by a program built against a newer header */
	}
	if (!(mig->valid & need))
		return 0;
	*out = v;
	return 1;
}

GM_API const struct gm_mig *gm_proc_mig(const struct gm_snapshot *snap, const struct gm_proc *proc)
{
	for (size_t i = 0; i < snap->mig_count; i++) {
		const struct gm_mig *m = &snap->migs[i];

		if (m->gpu != proc->gpu)
			continue;
		for (size_t k = 0; k < m->pid_count; k++)
			if (m->pids[k] == proc->pid)
				return m;
	}
	return NULL;
}
