/*
 * cmd_info.c - `gpuman info [GPU...]`: every attribute of each GPU.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "gpuman-internal.h"

#define ROW(label, ...) (printf("  %-22s", label), printf(__VA_ARGS__), putchar('\n'))
#define NA "not supported"

/* "1503 MHz (max 1582 MHz)", or what of it the GPU reports. */
static void print_clock(const char *label, const struct gm_gpu *g, enum gm_gpu_value now,
                        enum gm_gpu_value max)
{
	int64_t v, m;
	int has_v = gm_gpu_value(g, now, &v), has_m = gm_gpu_value(g, max, &m);

	if (has_v && has_m)
		ROW(label, "%lld MHz (max %lld MHz)", (long long)v, (long long)m);
	else if (has_v)
		ROW(label, "%lld MHz (max not supported)", (long long)v);
	else if (has_m)
		ROW(label, "not supported (max %lld MHz)", (long long)m);
	else
		ROW(label, NA);
}

/* "231.4 W", "83 C": a reading of the GPU field table that has a label,
 * in its unit as people read it. */
static void print_reading(const struct gm_gpu *g, const struct gpu_field *f)
{
	const char *unit = f->shown_unit[0] ? " " : "";
	int64_t v;

	if (!gpu_field_named(f->label))
		return;
	if (!gm_gpu_value(g, f->id, &v))
		ROW(f->label, NA);
	else if (f->scale > 1)
		ROW(f->label, "%.1f%s%s", (double)v / f->scale, unit, f->shown_unit);
	else
		ROW(f->label, "%lld%s%s", (long long)v, unit, f->shown_unit);
}

/* On the public accessors alone (gpuman.h), as any program could print it;
 * only the names of states and modes, the readings' labels and units (the
 * GPU field table) and CUDA's numbering are the CLI's. */
static void print_gpu(const struct cli *cli, const struct gm_snapshot *snap, size_t pos)
{
	const struct gm_gpu *g = gm_snapshot_gpu(snap, pos);
	const char *name = gm_gpu_name(g), *note = gm_gpu_note(g), *uuid = gm_gpu_uuid(g);
	long fastest = snapshot_cuda_index(snap, pos, 0), pci = snapshot_cuda_index(snap, pos, 1);
	int64_t v, w, x;
	size_t nproc = 0;

	printf("%sGPU %u: %s%s\n", c_bold(cli), gm_gpu_index(g), name[0] ? name : "?",
	       c_reset(cli));
	ROW("state", "%s%s%s", gpu_state_name(gm_gpu_state(g)), note[0] ? ": " : "", note);
	ROW("uuid", "%s", uuid[0] ? uuid : "unknown");
	ROW("pci bus id", "%s", (gm_gpu_valid(g) & GM_HAS_PCI) ? gm_gpu_pci_bus_id(g) : "unknown");
	if (fastest >= 0)
		ROW("cuda index", "%ld (default order), %ld (CUDA_DEVICE_ORDER=PCI_BUS_ID)",
		    fastest, pci);
	else if (pci >= 0)
		ROW("cuda index",
		    "unknown in the default order (the driver does not reveal it), "
		    "%ld (CUDA_DEVICE_ORDER=PCI_BUS_ID)",
		    pci);
	if (gm_gpu_value(g, GM_GPU_MEM_TOTAL_MIB, &v) && gm_gpu_value(g, GM_GPU_MEM_USED_MIB, &w) &&
	    gm_gpu_value(g, GM_GPU_MEM_FREE_MIB, &x)) {
		ROW("memory total", "%lld MiB", (long long)v);
		ROW("memory used", "%lld MiB", (long long)w);
		ROW("memory free", "%lld MiB", (long long)x);
	} else {
		ROW("memory", NA);
	}
	if (gm_gpu_value(g, GM_GPU_UTIL_GPU_PCT, &v) && gm_gpu_value(g, GM_GPU_UTIL_MEM_PCT, &w)) {
		ROW("utilization gpu", "%lld %%", (long long)v);
		ROW("utilization memory", "%lld %%", (long long)w);
	} else {
		ROW("utilization", NA);
	}
	/* The readings with a line of their own (power, temperature, fan; the
	 * GPU field table's labels), in the table's order. */
	for (size_t i = 0; i < gpu_field_count; i++)
		print_reading(g, &gpu_fields[i]);
	print_clock("clock sm", g, GM_GPU_CLOCK_SM_MHZ, GM_GPU_MAX_CLOCK_SM_MHZ);
	print_clock("clock memory", g, GM_GPU_CLOCK_MEM_MHZ, GM_GPU_MAX_CLOCK_MEM_MHZ);
	print_clock("clock graphics", g, GM_GPU_CLOCK_GRAPHICS_MHZ, GM_GPU_MAX_CLOCK_GRAPHICS_MHZ);
	if (gm_gpu_value(g, GM_GPU_CC_MAJOR, &v) && gm_gpu_value(g, GM_GPU_CC_MINOR, &w))
		ROW("compute capability", "%lld.%lld", (long long)v, (long long)w);
	else
		ROW("compute capability", NA);
	ROW("compute mode", "%s",
	    gm_gpu_value(g, GM_GPU_COMPUTE_MODE, &v) ? compute_mode_name((int)v) : NA);
	ROW("mig mode", "%s",
	    gm_gpu_value(g, GM_GPU_MIG_MODE, &v) ? (v == 1 ? "enabled" : "disabled") : NA);
	for (size_t i = 0; i < gm_snapshot_proc_count(snap); i++)
		nproc += gm_proc_gpu(gm_snapshot_proc(snap, i)) == gm_gpu_index(g);
	ROW("processes", "%zu", nproc);
	for (size_t i = 0; i < gm_snapshot_mig_count(snap); i++) {
		const struct gm_mig *m = gm_snapshot_mig(snap, i);
		char mem[64] = NA, inst[48] = "";
		size_t pids = 0;

		if (gm_mig_gpu(m) != gm_gpu_index(g))
			continue;
		if (gm_mig_value(m, GM_MIG_MEM_USED_MIB, &v) &&
		    gm_mig_value(m, GM_MIG_MEM_TOTAL_MIB, &w))
			snprintf(mem, sizeof mem, "%lld / %lld MiB", (long long)v, (long long)w);
		if (gm_mig_value(m, GM_MIG_GPU_INSTANCE_ID, &v) &&
		    gm_mig_value(m, GM_MIG_COMPUTE_INSTANCE_ID, &w))
			snprintf(inst, sizeof inst, ", instance %lld/%lld", (long long)v,
			         (long long)w);
		for (size_t k = 0; k < gm_snapshot_proc_count(snap); k++)
			pids += gm_proc_mig(snap, gm_snapshot_proc(snap, k)) == m;
		ROW("mig slice", "%s %s: %s%s, %zu process%s",
		    gm_mig_profile(m)[0] ? gm_mig_profile(m) : "?",
		    gm_mig_uuid(m)[0] ? gm_mig_uuid(m) : "?", mem, inst, pids,
		    pids == 1 ? "" : "es");
	}
}

static int info_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS, {0}};
	struct gm_context *ctx = NULL;
	struct gm_snapshot *snap = NULL;
	size_t *chosen = NULL, nchosen = 0;
	int rc;

	rc = cli_parse(cli, &cmd_info, argc, argv, "", longopts, NULL, NULL);
	if (rc != CLI_CONTINUE)
		return rc;
	cli->clocks = 1;
	rc = cli_snapshot(cli, &ctx, &snap);
	if (rc != EXIT_OK)
		return rc;
	chosen = calloc(snap->gpu_count + (size_t)argc, sizeof *chosen);
	if (!chosen) {
		rc = cli_error(cli, EXIT_FAIL, "out of memory");
		goto done;
	}
	if (optind == argc)
		for (size_t i = 0; i < snap->gpu_count; i++)
			chosen[nchosen++] = i;
	for (int a = optind; a < argc; a++) {
		const struct gm_gpu *g = gm_snapshot_find(snap, argv[a]);

		if (!g) {
			rc = cli_usage(
			    cli, "'%s' names no GPU (use an index 0-%zu or a unique UUID prefix)",
			    argv[a], snap->gpu_count ? snap->gpu_count - 1 : 0);
			goto done;
		}
		chosen[nchosen++] = (size_t)(g - snap->gpus);
	}
	if (cli->json) {
		json_t *arr = json_array();

		for (size_t i = 0; i < nchosen; i++) {
			json_t *o = snapshot_gpu_json(snap, chosen[i]);
			json_t *procs = json_array();

			for (size_t p = 0; p < snap->proc_count; p++)
				if (snap->procs[p].gpu == snap->gpus[chosen[i]].index)
					json_array_append_new(
					    procs, snapshot_proc_json(snap, &snap->procs[p]));
			json_object_set_new(o, "processes", procs);
			json_array_append_new(arr, o);
		}
		rc = cli_print_json(arr);
		goto done;
	}
	if (!snap->gpu_count)
		printf("no NVIDIA GPU found\n");
	for (size_t i = 0; i < nchosen; i++) {
		if (i)
			putchar('\n');
		print_gpu(cli, snap, chosen[i]);
	}
done:
	free(chosen);
	gm_snapshot_free(snap);
	gm_close(ctx);
	return rc;
}

const struct cmd_entry cmd_info = {
    "info",
    "every attribute of each GPU",
    "usage: gpuman info [GPU...] [--json] [--sim FILE]\n"
    "\n"
    "Every attribute of the named GPUs (all if none): UUID, PCI bus id, memory,\n"
    "utilization, power, temperature, fan speed, SM, memory and graphics clocks\n"
    "(now and max, MHz), compute capability, compute and MIG mode (and each MIG\n"
    "slice: profile, UUID for CUDA_VISIBLE_DEVICES, memory), and where CUDA\n"
    "numbers it (its default order is fastest-first, not NVML's).\n"
    "GPU: an NVML index (3) or a unique UUID prefix (GPU-b120, b120).\n"
    "\n"
    "  --json       a JSON array, one object per GPU\n"
    "  --sim FILE   use the NVML simulator with this scenario\n",
    info_exec,
    NULL,
};
