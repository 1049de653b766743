/*
 * nvml_gpu.c - one GPU's fields read from NVML into the snapshot (identity,
 * memory, utilization, power, clocks, modes), the snapshot of every GPU,
 * and the slower per-process utilization and clock readings.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nvml.h"
#include "nvml_abi.h"
#include "snapshot.h"
#include "util.h"

/* ---- one GPU ----------------------------------------------------------- */

/* Canonical "00000000:02:00.0" from a bus id string in either NVML form
 * ("0000:02:00.0" legacy, or the 8-digit domain); 0 if s is not one. */
static int pci_canonical(const char *s, char *out, size_t len)
{
	unsigned domain, bus, device, function;
	int end = 0;

	if (sscanf(s, "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &end) != 4 ||
	    s[end] != '\0')
		return 0;
	snprintf(out, len, "%08X:%02X:%02X.%X", domain, bus & 0xff, device & 0xff, function & 0x7);
	return 1;
}

static void pci_bus_id(struct nvml_pci *pci, char *out, size_t len)
{
	nvml_terminate(pci->bus_id, sizeof pci->bus_id);
	nvml_terminate(pci->bus_id_legacy, sizeof pci->bus_id_legacy);
	if (pci_canonical(pci->bus_id, out, len) || pci_canonical(pci->bus_id_legacy, out, len))
		return;
	snprintf(out, len, "%08X:%02X:%02X.0", pci->domain, pci->bus & 0xff, pci->device & 0xff);
}

static enum answer query_memory(struct gpu_query *q)
{
	struct gm_gpu *gpu = q->gpu;
	enum answer a;

	a = nvml_answer(q, "memory",
	                nvml_read_memory(q->nv, q->dev, &gpu->mem_total_mib, &gpu->mem_free_mib,
	                                 &gpu->mem_used_mib));
	if (a == ANSWER_OK)
		gpu->valid |= GM_HAS_MEMORY;
	return a;
}

/* The clocks of enum gm_clock, by NVML's number. */
static const struct {
	int type;
	unsigned has, has_max;
	const char *what, *what_max;
} clocks[GM_CLOCK_COUNT] = {
    [GM_CLOCK_SM] = {NVML_CLOCK_SM, GM_HAS_CLOCK_SM, GM_HAS_MAX_CLOCK_SM, "SM clock",
                     "max SM clock"},
    [GM_CLOCK_MEM] = {NVML_CLOCK_MEM, GM_HAS_CLOCK_MEM, GM_HAS_MAX_CLOCK_MEM, "memory clock",
                      "max memory clock"},
    [GM_CLOCK_GRAPHICS] = {NVML_CLOCK_GRAPHICS, GM_HAS_CLOCK_GRAPHICS, GM_HAS_MAX_CLOCK_GRAPHICS,
                           "graphics clock", "max graphics clock"},
};

/* The fields of one GPU, in one pass; stops at the first GPU_IS_LOST. */
enum answer nvml_query_fields(struct gpu_query *q)
{
	struct nvml *nv = q->nv;
	struct gm_gpu *gpu = q->gpu;
	struct nvml_utilization util;
	struct nvml_pci pci;
	unsigned u1, u2;
	int i1, i2, rc;
	enum answer a;

#define ASK(what, call)                                                                            \
	do {                                                                                       \
		rc = (call);                                                                       \
		a = nvml_answer(q, (what), rc);                                                    \
		if (a == ANSWER_LOST)                                                              \
			return a;                                                                  \
	} while (0)

	if (nv->name) {
		ASK("name", nv->name(q->dev, gpu->name, sizeof gpu->name));
		nvml_terminate(gpu->name, sizeof gpu->name);
		if (a != ANSWER_OK)
			gpu->name[0] = '\0';
	}
	if (nv->uuid) {
		ASK("uuid", nv->uuid(q->dev, gpu->uuid, sizeof gpu->uuid));
		nvml_terminate(gpu->uuid, sizeof gpu->uuid);
		if (a != ANSWER_OK)
			gpu->uuid[0] = '\0';
	}
	memset(&pci, 0, sizeof pci);
	CALL_VERSIONED(rc, nv, OP_PCI, nv->pci, q->dev, &pci);
	ASK("pci info", rc);
	if (a == ANSWER_OK) {
		pci_bus_id(&pci, gpu->pci_bus_id, sizeof gpu->pci_bus_id);
		gpu->valid |= GM_HAS_PCI;
	}
	if (query_memory(q) == ANSWER_LOST)
		return ANSWER_LOST;
	if (nv->utilization) {
		memset(&util, 0, sizeof util);
		ASK("utilization", nv->utilization(q->dev, &util));
		if (a == ANSWER_OK) {
			gpu->util_gpu_pct = util.gpu;
			gpu->util_mem_pct = util.memory;
			gpu->valid |= GM_HAS_UTIL;
		}
	}
	if (nv->power) {
		ASK("power", nv->power(q->dev, &u1));
		if (a == ANSWER_OK) {
			gpu->power_mw = u1;
			gpu->valid |= GM_HAS_POWER;
		}
	}
	if (nv->power_limit) {
		ASK("power limit", nv->power_limit(q->dev, &u1));
		if (a == ANSWER_OK) {
			gpu->power_limit_mw = u1;
			gpu->valid |= GM_HAS_POWER_LIMIT;
		}
	}
	if (nv->temperature) {
		ASK("temperature", nv->temperature(q->dev, NVML_TEMPERATURE_GPU, &u1));
		if (a == ANSWER_OK) {
			gpu->temperature_c = u1;
			gpu->valid |= GM_HAS_TEMPERATURE;
		}
	}
	if (nv->cc) {
		ASK("compute capability", nv->cc(q->dev, &i1, &i2));
		if (a == ANSWER_OK) {
			gpu->cc_major = i1;
			gpu->cc_minor = i2;
			gpu->valid |= GM_HAS_CC;
		}
	}
	if (nv->compute_mode) {
		ASK("compute mode", nv->compute_mode(q->dev, &i1));
		if (a == ANSWER_OK) {
			gpu->compute_mode = i1;
			gpu->valid |= GM_HAS_COMPUTE_MODE;
		}
	}
	if (nv->persistence) {
		ASK("persistence mode", nv->persistence(q->dev, &i1));
		if (a == ANSWER_OK) {
			gpu->persistence_mode = i1 ? 1 : 0;
			gpu->valid |= GM_HAS_PERSISTENCE;
		}
	}
	/* Its device node, for the broker's fence (lib/fence.h); no note
	 * when a driver does not say. */
	if (nv->minor && nv->minor(q->dev, &u1) == NVML_SUCCESS && u1 <= 0xfffff) {
		gpu->minor = (int)u1;
		gpu->valid |= GM_HAS_MINOR;
	}
	if (nv->mig_mode) {
		ASK("MIG mode", nv->mig_mode(q->dev, &u1, &u2));
		if (a == ANSWER_OK) {
			gpu->mig_mode = u1 ? 1 : 0;
			gpu->valid |= GM_HAS_MIG;
		}
	}
	/* CUDA's FASTEST_FIRST order ranks by cores x max SM clock: both or
	 * nothing.  (The other clocks are nvml_clocks()'s.) */
	if (nv->cores && nv->max_clock) {
		ASK("core count", nv->cores(q->dev, &u1));
		if (a == ANSWER_OK) {
			ASK("max SM clock", nv->max_clock(q->dev, NVML_CLOCK_SM, &u2));
			if (a == ANSWER_OK) {
				gpu->cuda_rank = (uint64_t)u1 * u2;
				gpu->clock_max_mhz[GM_CLOCK_SM] = u2;
				gpu->valid |= GM_HAS_CUDA_RANK | GM_HAS_MAX_CLOCK_SM;
			}
		}
	}
	/* The table's readings that are one call each (gpu_fields.h). */
	for (size_t i = 0; i < gpu_field_count; i++) {
		if (!nv->reading[i])
			continue;
		ASK(gpu_fields[i].label, nv->reading[i](q->dev, &u1));
		if (a == ANSWER_OK) {
			gpu_field_set(gpu, &gpu_fields[i], u1);
			gpu->valid |= gpu_fields[i].need;
		}
	}
#undef ASK
	return ANSWER_OK;
}

/* ---- the snapshot ------------------------------------------------------ */

static void mark_lost(struct gm_gpu *gpu, struct nvml *nv)
{
	/* What was read before the loss describes a GPU that is gone: keep its
	 * identity, drop its measurements. */
	gpu->state = GM_GPU_LOST;
	gpu->valid &= GM_HAS_PCI;
	nvml_err_text(nv, NVML_ERROR_GPU_IS_LOST, gpu->note, sizeof gpu->note);
}

enum gm_err nvml_snapshot(struct nvml *nv, struct gm_snapshot *snap, char *errbuf, size_t errlen)
{
	struct proc_sink sink = {snap, 0, 0};
	struct gpu_query q;
	struct gm_gpu *gpu;
	enum gm_err err = GM_OK;
	unsigned count = 0, i;
	char text[160];
	size_t first;
	nvml_dev dev;
	int rc, a, cuda;

	if (nv->driver_version) {
		rc = nv->driver_version(snap->driver_version, sizeof snap->driver_version);
		nvml_terminate(snap->driver_version, sizeof snap->driver_version);
		if (rc != NVML_SUCCESS)
			snap->driver_version[0] = '\0';
	}
	CALL_VERSIONED(rc, nv, OP_CUDA_VERSION, nv->cuda_version, &cuda);
	if (rc == NVML_SUCCESS)
		snap->cuda_driver_version = cuda;

	CALL_VERSIONED(rc, nv, OP_COUNT, nv->count, &count);
	if (rc != NVML_SUCCESS) {
		nvml_err_text(nv, rc, text, sizeof text);
		err = gm_fail(GM_ERR_NVML, errbuf, errlen, "nvmlDeviceGetCount: %s", text);
		goto out;
	}
	if (count > GPU_MAX) {
		snapshot_add_note(snap, "NVML reports %u GPUs; only the first %d are shown", count,
		                  GPU_MAX);
		count = GPU_MAX;
	}
	if (count == 0)
		goto out;
	snap->gpus = calloc(count, sizeof *snap->gpus);
	if (!snap->gpus) {
		err = gm_fail(GM_ERR_NOMEM, errbuf, errlen, "out of memory reading %u GPUs", count);
		goto out;
	}

	for (i = 0; i < count; i++) {
		gpu = &snap->gpus[snap->gpu_count];
		memset(gpu, 0, sizeof *gpu);
		gpu->index = i;
		gpu->minor = -1;
		dev = NULL;
		CALL_VERSIONED(rc, nv, OP_HANDLE, nv->handle, i, &dev);
		if (rc == NVML_ERROR_NO_PERMISSION) {
			/* Not ours to use (a container, a cgroup): leave it out, but
			 * keep the others' NVML numbering. */
			snapshot_add_note(snap, "GPU %u: no permission to query it (%s); skipped",
			                  i, nvml_err_name(rc));
			continue;
		}
		snap->gpu_count++;
		if (rc == NVML_ERROR_GPU_IS_LOST) {
			mark_lost(gpu, nv);
			continue;
		}
		if (rc != NVML_SUCCESS) {
			nvml_err_text(nv, rc, text, sizeof text);
			gpu->state = GM_GPU_ERROR;
			snprintf(gpu->note, sizeof gpu->note, "cannot get a handle: %.130s", text);
			continue;
		}

		q.nv = nv;
		q.snap = snap;
		q.gpu = gpu;
		q.dev = dev;
		first = snap->proc_count;
		a = nvml_query_fields(&q);
		if (a != ANSWER_LOST)
			a = nvml_query_procs(&q, &sink);
		if (a != ANSWER_LOST && a != -1)
			a = nvml_query_migs(&q, &sink, first);
		if (a == -1) {
			err = gm_fail(GM_ERR_NOMEM, errbuf, errlen,
			              "out of memory reading the processes of GPU %u", i);
			goto out;
		}
		if (a == ANSWER_LOST) {
			mark_lost(gpu, nv);
			snap->proc_count = first;
		}
	}
out:
	return err;
}

/* ---- per-process utilization ------------------------------------------ */

/* One GPU's samples since since_us into *buf (grown as NVML asks); NOT_FOUND
 * (nobody did work in the window) is no samples.  Returns NVML's answer. */
static int read_proc_samples(struct nvml *nv, nvml_dev dev, unsigned long long since_us,
                             struct nvml_proc_sample **buf, unsigned *count)
{
	struct nvml_proc_sample *grown;
	unsigned n = 0, cap = 0;
	int rc, tries;

	rc = nv->proc_util(dev, NULL, &n, since_us);
	for (tries = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && tries < PROC_TRIES; tries++) {
		if (n > PROC_MAX)
			break;
		cap = n + PROC_SLACK;
		grown = realloc(*buf, cap * sizeof **buf);
		if (!grown)
			return NVML_ERROR_MEMORY;
		*buf = grown;
		memset(*buf, 0, cap * sizeof **buf);
		n = cap;
		rc = nv->proc_util(dev, *buf, &n, since_us);
	}
	if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && !cap)) {
		n = 0;
		rc = NVML_SUCCESS;
	}
	*count = rc == NVML_SUCCESS ? (n < cap ? n : cap) : 0;
	return rc;
}

/* One clock reading into gpu: 0, or -1 when the GPU is lost. */
static int read_clock(struct nvml *nv, nvml_dev dev, struct gm_snapshot *snap, struct gm_gpu *gpu,
                      int c, int max)
{
	fn_dev_sel_uint fn = max ? nv->max_clock : nv->clock;
	char text[160];
	unsigned mhz = 0;
	int rc;

	if (!fn || (max && (gpu->valid & clocks[c].has_max)))
		return 0;
	rc = fn(dev, clocks[c].type, &mhz);
	switch (rc) {
	case NVML_SUCCESS:
		if (max)
			gpu->clock_max_mhz[c] = mhz;
		else
			gpu->clock_mhz[c] = mhz;
		gpu->valid |= max ? clocks[c].has_max : clocks[c].has;
		return 0;
	case NVML_ERROR_GPU_IS_LOST:
		return -1;
	case NVML_ERROR_NOT_SUPPORTED:
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return 0;
	default:
		nvml_err_text(nv, rc, text, sizeof text);
		snapshot_add_note(snap, "GPU %u: %s: %s", gpu->index,
		                  max ? clocks[c].what_max : clocks[c].what, text);
		return 0;
	}
}

void nvml_clocks(struct nvml *nv, struct gm_snapshot *snap)
{
	nvml_dev dev;
	int rc;

	for (size_t i = 0; i < snap->gpu_count; i++) {
		struct gm_gpu *gpu = &snap->gpus[i];

		if (gpu->state != GM_GPU_OK)
			continue;
		dev = NULL;
		CALL_VERSIONED(rc, nv, OP_HANDLE, nv->handle, gpu->index, &dev);
		if (rc != NVML_SUCCESS)
			continue; /* the snapshot itself said why */
		for (int c = 0; c < GM_CLOCK_COUNT; c++)
			if (read_clock(nv, dev, snap, gpu, c, 0) < 0 ||
			    read_clock(nv, dev, snap, gpu, c, 1) < 0)
				break; /* fell off the bus since: the next snapshot says so */
	}
}

void nvml_proc_util(struct nvml *nv, struct gm_snapshot *snap, unsigned window_ms)
{
	struct nvml_proc_sample *buf = NULL;
	unsigned long long since_us, sum;
	struct timespec ts;
	unsigned n, hits, s;
	char text[160];
	nvml_dev dev;
	size_t i, k;
	int rc, any;

	if (!snap->proc_count)
		return;
	if (!nv->proc_util) {
		snapshot_add_note(snap, "per-process utilization: this NVML library has no "
		                        "nvmlDeviceGetProcessUtilization");
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	since_us =
	    (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
	since_us -= (unsigned long long)window_ms * 1000ULL;
	for (i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *gpu = &snap->gpus[i];

		any = 0;
		for (k = 0; k < snap->proc_count && !any; k++)
			any = snap->procs[k].gpu == gpu->index;
		if (!any || gpu->state != GM_GPU_OK)
			continue;
		dev = NULL;
		CALL_VERSIONED(rc, nv, OP_HANDLE, nv->handle, gpu->index, &dev);
		if (rc == NVML_SUCCESS)
			rc = read_proc_samples(nv, dev, since_us, &buf, &n);
		if (rc != NVML_SUCCESS) {
			nvml_err_text(nv, rc, text, sizeof text);
			snapshot_add_note(snap, "GPU %u: per-process utilization not available: %s",
			                  gpu->index, text);
			continue;
		}
		for (k = 0; k < snap->proc_count; k++) {
			struct gm_proc *p = &snap->procs[k];

			if (p->gpu != gpu->index)
				continue;
			sum = 0;
			hits = 0;
			for (s = 0; s < n; s++)
				if (buf[s].pid == p->pid) {
					sum += buf[s].sm < 100 ? buf[s].sm : 100;
					hits++;
				}
			p->has_util = 1;
			/* Rounded up: a process that did any work is never shown idle. */
			p->util_pct = hits ? (unsigned)((sum + hits - 1) / hits) : 0;
		}
	}
	free(buf);
}
