/*
 * test_nvml.c - the NVML backend against the NVML simulator.
 *
 * Each test writes its own small scenario with known numbers and loads its own
 * copy of the simulator library (tmp/N/libnvidia-ml.so.1): nvml.c keeps one
 * initialised library per path for the life of the process, and the simulator
 * reads its scenario at nvmlInit, so a fresh path is a fresh simulated
 * machine.  The build directory comes from $GM_BUILD (default "build").
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "nvml.h"
#include "snapshot_types.h"

static char tmp_dir[PATH_MAX];
static char sim_lib[PATH_MAX + 64]; /* build/sim/libnvidia-ml.so.1 */
static char old_lib[PATH_MAX + 64]; /* build/sim/r390/libnvidia-ml.so.1 */
static unsigned machines;

/* ---- helpers ----------------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

static void copy_file(const char *from, const char *to)
{
	char buf[65536];
	ssize_t n;
	int in, out;

	in = open(from, O_RDONLY);
	assert_true(in >= 0);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	assert_true(out >= 0);
	while ((n = read(in, buf, sizeof buf)) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	close(in);
	assert_int_equal(close(out), 0);
}

/*
 * A new simulated machine: the scenario in a private directory, its own
 * state directory and its own copy of the library (lib: sim_lib or old_lib).
 * Returns nvml_open's answer; *nv is the loaded library on GM_OK.
 */
static enum gm_err machine(const char *scenario, const char *lib, struct nvml **nv, char *err,
                           size_t errlen)
{
	char dir[PATH_MAX + 32], path[PATH_MAX + 64];

	snprintf(dir, sizeof dir, "%s/%u", tmp_dir, ++machines);
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(path, sizeof path, "%s/scenario.json", dir);
	write_file(path, scenario);
	assert_int_equal(setenv("GPUMAN_SIM", path, 1), 0);
	snprintf(path, sizeof path, "%s/state", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(setenv("GPUMAN_SIM_STATE", path, 1), 0);
	snprintf(path, sizeof path, "%s/libnvidia-ml.so.1", dir);
	copy_file(lib, path);
	err[0] = '\0';
	return nvml_open(path, nv, err, errlen);
}

static struct nvml *machine_ok(const char *scenario, const char *lib)
{
	char err[GM_ERRBUF_SIZE];
	struct nvml *nv = NULL;
	enum gm_err e;

	e = machine(scenario, lib, &nv, err, sizeof err);
	if (e != GM_OK)
		fail_msg("nvml_open: %d: %s", (int)e, err);
	assert_non_null(nv);
	return nv;
}

static void take(struct nvml *nv, struct gm_snapshot *snap)
{
	char err[GM_ERRBUF_SIZE] = "";
	enum gm_err e;

	memset(snap, 0, sizeof *snap);
	e = nvml_snapshot(nv, snap, err, sizeof err);
	if (e != GM_OK)
		fail_msg("nvml_snapshot: %d: %s", (int)e, err);
}

static void release(struct gm_snapshot *snap)
{
	size_t i;

	for (i = 0; i < snap->note_count; i++)
		free(snap->notes[i]);
	free(snap->notes);
	free(snap->gpus);
	free(snap->procs);
	for (i = 0; i < snap->mig_count; i++)
		free(snap->migs[i].pids);
	free(snap->migs);
	memset(snap, 0, sizeof *snap);
}

static int has_note(const struct gm_snapshot *snap, const char *text)
{
	size_t i;

	for (i = 0; i < snap->note_count; i++)
		if (strstr(snap->notes[i], text))
			return 1;
	return 0;
}

static const struct gm_proc *find_proc(const struct gm_snapshot *snap, unsigned gpu, unsigned pid)
{
	size_t i;

	for (i = 0; i < snap->proc_count; i++)
		if (snap->procs[i].gpu == gpu && snap->procs[i].pid == pid)
			return &snap->procs[i];
	return NULL;
}

static size_t procs_on(const struct gm_snapshot *snap, unsigned gpu)
{
	size_t i, n = 0;

	for (i = 0; i < snap->proc_count; i++)
		n += snap->procs[i].gpu == gpu;
	return n;
}

/* ---- the reference machine ------------------------------------------- */

/* Three GPUs with known numbers.  Used memory is memory_used_mib plus the
 * processes' used_mib; utilization is utilization_gpu plus theirs, capped. */
#define LAB_GPUS                                                                                   \
	"\"gpus\": ["                                                                              \
	"{ \"name\": \"NVIDIA GeForce GTX 1080 Ti\","                                              \
	"  \"uuid\": \"GPU-11111111-2222-3333-4444-555555555555\","                                \
	"  \"pci_bus_id\": \"00000000:02:00.0\","                                                  \
	"  \"memory_total_mib\": 11264, \"memory_used_mib\": 100,"                                 \
	"  \"utilization_gpu\": 10, \"power_draw_w\": 55, \"power_limit_w\": 250,"                 \
	"  \"temperature_c\": 38, \"compute_capability\": \"6.1\", \"speed\": 1.0,"                \
	"  \"processes\": ["                                                                       \
	"    { \"pid\": 1001, \"used_mib\": 2000, \"utilization\": 20 },"                          \
	"    { \"pid\": 1002, \"used_mib\": 500, \"utilization\": 5,"                              \
	"      \"type\": \"graphics\" } ] },"                                                      \
	"{ \"name\": \"NVIDIA TITAN RTX\","                                                        \
	"  \"uuid\": \"GPU-66666666-7777-8888-9999-000000000000\","                                \
	"  \"pci_bus_id\": \"00000000:03:00.0\","                                                  \
	"  \"memory_total_mib\": 24576, \"memory_used_mib\": 0,"                                   \
	"  \"utilization_gpu\": 0, \"power_draw_w\": 20, \"power_limit_w\": 280,"                  \
	"  \"temperature_c\": 30, \"compute_capability\": \"7.5\", \"speed\": 1.5,"                \
	"  \"processes\": ["                                                                       \
	"    { \"pid\": 2001, \"used_mib\": 1000, \"utilization\": 0,"                             \
	"      \"type\": \"both\" } ] },"                                                          \
	"{ \"name\": \"NVIDIA A100-SXM4-80GB\","                                                   \
	"  \"pci_bus_id\": \"00000000:81:00.0\","                                                  \
	"  \"memory_total_mib\": 81920, \"memory_used_mib\": 1024,"                                \
	"  \"utilization_gpu\": 95, \"power_draw_w\": 300, \"power_limit_w\": 400,"                \
	"  \"temperature_c\": 60, \"compute_capability\": \"8.0\", \"speed\": 3.0,"                \
	"  \"processes\": ["                                                                       \
	"    { \"pid\": 3001, \"used_mib\": 4096, \"utilization\": 50 },"                          \
	"    { \"pid\": 1001, \"used_mib\": 100, \"utilization\": 0 } ] }"                         \
	"]"

#define LAB_SCENARIO                                                                               \
	"{ \"driver_version\": \"580.95.05\", \"cuda_driver_version\": 13000," LAB_GPUS "}"

/* Every _v2/_v3 name: the machine of an older driver that answers
 * FUNCTION_NOT_FOUND to each of them. */
#define OLD_SYMBOLS                                                                                \
	"\"missing_symbols\": [ \"nvmlInit_v2\", \"nvmlDeviceGetCount_v2\","                       \
	"\"nvmlDeviceGetHandleByIndex_v2\", \"nvmlDeviceGetPciInfo_v3\","                          \
	"\"nvmlDeviceGetPciInfo_v2\", \"nvmlDeviceGetMemoryInfo_v2\","                             \
	"\"nvmlDeviceGetComputeRunningProcesses_v2\","                                             \
	"\"nvmlDeviceGetGraphicsRunningProcesses_v2\","                                            \
	"\"nvmlSystemGetCudaDriverVersion_v2\" ],"

static const unsigned all_bits = GM_HAS_MEMORY | GM_HAS_UTIL | GM_HAS_POWER | GM_HAS_POWER_LIMIT |
                                 GM_HAS_TEMPERATURE | GM_HAS_CC | GM_HAS_PROCESSES | GM_HAS_PCI;

static void check_gpu(const struct gm_gpu *g, unsigned index, const char *name, const char *pci,
                      uint64_t total, uint64_t used, unsigned util, unsigned power_mw,
                      unsigned limit_mw, unsigned temp, int major, int minor)
{
	assert_int_equal(g->index, index);
	assert_int_equal(g->state, GM_GPU_OK);
	assert_string_equal(g->note, "");
	assert_string_equal(g->name, name);
	assert_string_equal(g->pci_bus_id, pci);
	assert_int_equal(g->valid & all_bits, all_bits);
	assert_int_equal(g->mem_total_mib, total);
	assert_int_equal(g->mem_used_mib, used);
	assert_int_equal(g->mem_free_mib, total - used);
	assert_int_equal(g->util_gpu_pct, util);
	assert_int_equal(g->power_mw, power_mw);
	assert_int_equal(g->power_limit_mw, limit_mw);
	assert_int_equal(g->temperature_c, temp);
	assert_int_equal(g->cc_major, major);
	assert_int_equal(g->cc_minor, minor);
}

static void check_proc(const struct gm_snapshot *snap, unsigned gpu, unsigned pid,
                       uint64_t used_mib, unsigned kind)
{
	const struct gm_proc *p = find_proc(snap, gpu, pid);

	if (!p)
		fail_msg("no process %u on GPU %u", pid, gpu);
	assert_true(p->has_mem);
	assert_int_equal(p->used_mib, used_mib);
	assert_int_equal(p->kind, kind);
	/* snapshot.c fills these from /proc, not NVML */
	assert_false(p->has_user);
	assert_string_equal(p->command, "");
}

/* What any NVML client should read from LAB_GPUS, by whatever symbols. */
static void check_lab_driver(const struct gm_snapshot *snap, const char *driver, int cuda)
{
	const struct gm_gpu *g = snap->gpus;
	size_t i;

	assert_string_equal(snap->driver_version, driver);
	assert_int_equal(snap->cuda_driver_version, cuda);
	assert_int_equal(snap->gpu_count, 3);
	check_gpu(&g[0], 0, "NVIDIA GeForce GTX 1080 Ti", "00000000:02:00.0", 11264,
	          100 + 2000 + 500, 35, 55000, 250000, 38, 6, 1);
	assert_string_equal(g[0].uuid, "GPU-11111111-2222-3333-4444-555555555555");
	check_gpu(&g[1], 1, "NVIDIA TITAN RTX", "00000000:03:00.0", 24576, 1000, 0, 20000, 280000,
	          30, 7, 5);
	assert_string_equal(g[1].uuid, "GPU-66666666-7777-8888-9999-000000000000");
	check_gpu(&g[2], 2, "NVIDIA A100-SXM4-80GB", "00000000:81:00.0", 81920, 1024 + 4096 + 100,
	          100, 300000, 400000, 60, 8, 0);
	/* no uuid in the scenario: a stable one of the simulator's */
	assert_memory_equal(g[2].uuid, "GPU-", 4);
	assert_string_not_equal(g[2].uuid, g[0].uuid);

	/* A process in both lists is one process; the same pid on two GPUs is
	 * two entries. Sorted by GPU, then pid. */
	assert_int_equal(snap->proc_count, 5);
	check_proc(snap, 0, 1001, 2000, GM_PROC_COMPUTE);
	check_proc(snap, 0, 1002, 500, GM_PROC_GRAPHICS);
	check_proc(snap, 1, 2001, 1000, GM_PROC_COMPUTE | GM_PROC_GRAPHICS);
	check_proc(snap, 2, 1001, 100, GM_PROC_COMPUTE);
	check_proc(snap, 2, 3001, 4096, GM_PROC_COMPUTE);
	for (i = 1; i < snap->proc_count; i++) {
		const struct gm_proc *a = &snap->procs[i - 1], *b = &snap->procs[i];
		assert_true(a->gpu < b->gpu || (a->gpu == b->gpu && a->pid < b->pid));
	}
	/* CUDA's fastest-first rank, where the machine reports it, follows speed */
	if ((g[0].valid & g[1].valid & g[2].valid) & GM_HAS_CUDA_RANK) {
		assert_true(g[0].cuda_rank < g[1].cuda_rank);
		assert_true(g[1].cuda_rank < g[2].cuda_rank);
	}
}

static void check_lab(const struct gm_snapshot *snap)
{
	check_lab_driver(snap, "580.95.05", 13000);
}

/* ---- tests ------------------------------------------------------------- */

static void test_values(void **state)
{
	struct gm_snapshot snap;
	struct nvml *nv;

	(void)state;
	nv = machine_ok(LAB_SCENARIO, sim_lib);
	take(nv, &snap);
	check_lab(&snap);
	assert_int_equal(snap.note_count, 0);
	release(&snap);
	/* A second snapshot through the same handle reads the same machine. */
	take(nv, &snap);
	check_lab(&snap);
	release(&snap);
	nvml_close(nv);
}

static void test_v1_fallbacks(void **state)
{
	struct gm_snapshot snap;
	struct nvml *nv;
	int round;

	(void)state;
	nv = machine_ok(
	    "{ \"driver_version\": \"580.95.05\", \"cuda_driver_version\": 13000," OLD_SYMBOLS
	        LAB_GPUS "}",
	    sim_lib);
	/* Twice: the second snapshot goes straight to the remembered fallbacks. */
	for (round = 0; round < 2; round++) {
		take(nv, &snap);
		check_lab(&snap);
		release(&snap);
	}
	nvml_close(nv);
}

static void test_old_library(void **state)
{
	struct gm_snapshot snap;
	struct nvml *nv;

	(void)state;
	if (access(old_lib, R_OK) != 0) {
		print_message("# %s not built; skipping\n", old_lib);
		skip();
	}
	/* The R390 library: no _v3/_v2 process lists, memory _v2, PCI _v3 or
	 * CUDA version _v2 at all (dlsym finds none), and no core count. */
	nv = machine_ok("{ \"driver_version\": \"390.157\", \"cuda_driver_version\": 9010," LAB_GPUS
	                "}",
	                old_lib);
	take(nv, &snap);
	check_lab_driver(&snap, "390.157", 9010);
	for (size_t i = 0; i < snap.gpu_count; i++)
		assert_false(snap.gpus[i].valid & GM_HAS_CUDA_RANK);
	release(&snap);
	nvml_close(nv);
}

static void test_unsupported(void **state)
{
	struct gm_snapshot snap;
	const struct gm_gpu *g;
	const struct gm_proc *p;
	struct nvml *nv;

	(void)state;
	nv = machine_ok("{ \"gpus\": [ { \"name\": \"NVIDIA GeForce RTX 3050 Laptop GPU\","
	                "  \"memory_total_mib\": 4096, \"memory_used_mib\": 96,"
	                "  \"utilization_gpu\": null, \"power_draw_w\": null,"
	                "  \"power_limit_w\": null, \"temperature_c\": null,"
	                "  \"compute_capability\": \"8.6\","
	                "  \"processes\": [ { \"pid\": 4242, \"used_mib\": null } ] } ] }",
	                sim_lib);
	take(nv, &snap);
	assert_int_equal(snap.gpu_count, 1);
	g = &snap.gpus[0];
	assert_int_equal(g->state, GM_GPU_OK);
	/* "not supported" is a clear bit, never a zero passed off as a value */
	assert_false(g->valid & GM_HAS_UTIL);
	assert_false(g->valid & GM_HAS_POWER);
	assert_false(g->valid & GM_HAS_POWER_LIMIT);
	assert_false(g->valid & GM_HAS_TEMPERATURE);
	assert_true(g->valid & GM_HAS_MEMORY);
	assert_true(g->valid & GM_HAS_CC);
	assert_true(g->valid & GM_HAS_PROCESSES);
	assert_int_equal(g->mem_total_mib, 4096);
	assert_int_equal(g->cc_major, 8);
	assert_int_equal(g->cc_minor, 6);
	/* absent uuid and bus id: stable ones of the simulator's */
	assert_memory_equal(g->uuid, "GPU-", 4);
	assert_true(g->valid & GM_HAS_PCI);
	assert_int_equal(strlen(g->pci_bus_id), 16);
	assert_int_equal(snap.proc_count, 1);
	p = &snap.procs[0];
	assert_int_equal(p->pid, 4242);
	assert_int_equal(p->gpu, 0);
	assert_false(p->has_mem);
	assert_int_equal(p->used_mib, 0);
	assert_int_equal(p->kind, GM_PROC_COMPUTE);
	/* not supported is not worth a note */
	assert_int_equal(snap.note_count, 0);
	release(&snap);
	nvml_close(nv);
}

/* Clocks: now from nvmlDeviceGetClockInfo, max from
 * nvmlDeviceGetMaxClockInfo, each domain on its own bit. */
static void test_clocks(void **state)
{
	const unsigned all = GM_HAS_CLOCK_SM | GM_HAS_CLOCK_MEM | GM_HAS_CLOCK_GRAPHICS |
	                     GM_HAS_MAX_CLOCK_SM | GM_HAS_MAX_CLOCK_MEM | GM_HAS_MAX_CLOCK_GRAPHICS;
	struct gm_snapshot snap;
	const struct gm_gpu *g;
	struct nvml *nv;

	(void)state;
	nv = machine_ok("{ \"gpus\": ["
	                "{ \"name\": \"NVIDIA RTX A6000\", \"memory_total_mib\": 49140,"
	                "  \"clock_sm_mhz\": 1410, \"clock_memory_mhz\": 8001,"
	                "  \"clock_graphics_mhz\": 1395, \"max_sm_clock_mhz\": 2100,"
	                "  \"max_clock_memory_mhz\": 8001 },"
	                "{ \"name\": \"NVIDIA T4\", \"memory_total_mib\": 15360,"
	                "  \"clock_sm_mhz\": 300, \"clock_memory_mhz\": null,"
	                "  \"max_sm_clock_mhz\": null } ] }",
	                sim_lib);
	take(nv, &snap);
	assert_int_equal(snap.gpu_count, 2);
	/* A snapshot as pick and leases take it reads no clock but the max SM
	 * one CUDA's order needs. */
	assert_int_equal(snap.gpus[0].valid & all, GM_HAS_MAX_CLOCK_SM);
	assert_int_equal(snap.gpus[1].valid & all, 0);
	nvml_clocks(nv, &snap);
	g = &snap.gpus[0];
	assert_int_equal(g->valid & all, all);
	assert_int_equal(g->clock_mhz[GM_CLOCK_SM], 1410);
	assert_int_equal(g->clock_mhz[GM_CLOCK_MEM], 8001);
	assert_int_equal(g->clock_mhz[GM_CLOCK_GRAPHICS], 1395);
	assert_int_equal(g->clock_max_mhz[GM_CLOCK_SM], 2100);
	assert_int_equal(g->clock_max_mhz[GM_CLOCK_MEM], 8001);
	assert_int_equal(g->clock_max_mhz[GM_CLOCK_GRAPHICS], 2100);
	/* The second reports its SM clock only: the rest are not 0, they are
	 * not there. */
	g = &snap.gpus[1];
	assert_int_equal(g->valid & all, GM_HAS_CLOCK_SM);
	assert_int_equal(g->clock_mhz[GM_CLOCK_SM], 300);
	assert_int_equal(snap.note_count, 0);
	release(&snap);
	nvml_close(nv);
}

#define SMALL_GPU(name, extra)                                                                     \
	"{ \"name\": \"" name "\", \"memory_total_mib\": 8192, "                                   \
	"\"memory_used_mib\": 1000, \"utilization_gpu\": 7, "                                      \
	"\"processes\": [ { \"pid\": 77, \"used_mib\": 50 } ]" extra " }"

static void test_gpu_lost(void **state)
{
	struct gm_snapshot snap;
	const struct gm_gpu *g;
	struct nvml *nv;
	size_t i;

	(void)state;
	nv = machine_ok("{ \"gpus\": [" SMALL_GPU("a", "") "," SMALL_GPU("b", "") "," SMALL_GPU(
	                    "c", ", \"fail\": \"gpu_is_lost\"") "," SMALL_GPU("d", "") "] }",
	                sim_lib);
	take(nv, &snap);
	/* The lost GPU stays in view, so that people see why it is not used. */
	assert_int_equal(snap.gpu_count, 4);
	for (i = 0; i < 4; i++) {
		g = &snap.gpus[i];
		assert_int_equal(g->index, i);
		if (i == 2) {
			assert_int_equal(g->state, GM_GPU_LOST);
			assert_non_null(strstr(g->note, "fallen off the bus"));
			assert_false(g->valid & (GM_HAS_MEMORY | GM_HAS_UTIL | GM_HAS_PROCESSES));
			assert_int_equal(procs_on(&snap, 2), 0);
			continue;
		}
		/* the others still work */
		assert_int_equal(g->state, GM_GPU_OK);
		assert_true(g->valid & GM_HAS_MEMORY);
		assert_int_equal(g->mem_used_mib, 1050);
		assert_int_equal(g->mem_free_mib, 8192 - 1050);
		assert_int_equal(g->util_gpu_pct, 7);
		assert_non_null(find_proc(&snap, (unsigned)i, 77));
	}
	assert_int_equal(snap.proc_count, 3);
	release(&snap);
	nvml_close(nv);
}

static void test_no_permission(void **state)
{
	struct gm_snapshot snap;
	struct nvml *nv;

	(void)state;
	nv = machine_ok("{ \"gpus\": [" SMALL_GPU("a", "") "," SMALL_GPU(
	                    "b", ", \"fail\": \"no_permission\"") "," SMALL_GPU("c", "") "] }",
	                sim_lib);
	take(nv, &snap);
	/* skipped, with a note; the others keep their NVML index */
	assert_int_equal(snap.gpu_count, 2);
	assert_int_equal(snap.gpus[0].index, 0);
	assert_string_equal(snap.gpus[0].name, "a");
	assert_int_equal(snap.gpus[1].index, 2);
	assert_string_equal(snap.gpus[1].name, "c");
	assert_int_equal(snap.gpus[1].state, GM_GPU_OK);
	assert_int_equal(snap.gpus[1].mem_used_mib, 1050);
	assert_true(has_note(&snap, "GPU 1: no permission"));
	assert_int_equal(snap.proc_count, 2);
	assert_non_null(find_proc(&snap, 2, 77));
	assert_null(find_proc(&snap, 1, 77));
	release(&snap);
	nvml_close(nv);
}

static void test_no_gpu(void **state)
{
	struct gm_snapshot snap;
	struct nvml *nv;

	(void)state;
	nv = machine_ok("{ \"driver_version\": \"580.95.05\", \"gpus\": [] }", sim_lib);
	take(nv, &snap);
	assert_int_equal(snap.gpu_count, 0);
	assert_int_equal(snap.proc_count, 0);
	assert_string_equal(snap.driver_version, "580.95.05");
	release(&snap);
	nvml_close(nv);
}

static void test_init_error(void **state)
{
	char err[GM_ERRBUF_SIZE];
	struct nvml *nv = (struct nvml *)&nv;
	enum gm_err e;

	(void)state;
	e = machine("{ \"init_error\": \"driver_not_loaded\", \"gpus\": [] }", sim_lib, &nv, err,
	            sizeof err);
	assert_int_equal(e, GM_ERR_NVML);
	assert_null(nv);
	if (!strstr(err, "nvmlInit") || !strstr(err, "driver is not loaded"))
		fail_msg("unexpected message: %s", err);
}

static void test_bad_key(void **state)
{
	char err[GM_ERRBUF_SIZE];
	struct nvml *nv;
	enum gm_err e;

	(void)state;
	e = machine("{ \"gpus\": [ { \"name\": \"x\", \"memroy_total_mib\": 8192 } ] }", sim_lib,
	            &nv, err, sizeof err);
	/* The simulator's own words name the culprit. */
	assert_int_equal(e, GM_ERR_SCENARIO);
	if (!strstr(err, "memroy_total_mib"))
		fail_msg("message does not name the key: %s", err);
}

static void test_bad_path(void **state)
{
	static const char path[] = "/nonexistent/gpuman-test/libnvidia-ml.so.1";
	char err[GM_ERRBUF_SIZE] = "";
	struct nvml *nv;
	enum gm_err e;

	(void)state;
	e = nvml_open(path, &nv, err, sizeof err);
	assert_int_equal(e, GM_ERR_NVML_LOAD);
	assert_null(nv);
	if (!strstr(err, path))
		fail_msg("message does not name the path: %s", err);
}

static void test_not_nvml(void **state)
{
	char err[GM_ERRBUF_SIZE] = "";
	struct nvml *nv;
	enum gm_err e;

	(void)state;
	/* A library that loads but is no NVML. */
	e = nvml_open("libm.so.6", &nv, err, sizeof err);
	assert_int_equal(e, GM_ERR_NVML_LOAD);
	assert_null(nv);
	if (!strstr(err, "libm.so.6") || !strstr(err, "nvmlInit"))
		fail_msg("unexpected message: %s", err);
}

static void test_cache(void **state)
{
	char err[GM_ERRBUF_SIZE], path[PATH_MAX + 64];
	struct gm_snapshot snap;
	struct nvml *a, *b, *c;

	(void)state;
	a = machine_ok("{ \"gpus\": [" SMALL_GPU("a", "") "] }", sim_lib);
	snprintf(path, sizeof path, "%s/%u/libnvidia-ml.so.1", tmp_dir, machines);
	/* The same path again: the same, already initialised library. */
	assert_int_equal(nvml_open(path, &b, err, sizeof err), GM_OK);
	assert_ptr_equal(a, b);
	nvml_close(b);
	nvml_close(a);
	/* Closing keeps NVML initialised for the next open. */
	assert_int_equal(nvml_open(path, &c, err, sizeof err), GM_OK);
	assert_ptr_equal(a, c);
	take(c, &snap);
	assert_int_equal(snap.gpu_count, 1);
	assert_string_equal(snap.gpus[0].name, "a");
	release(&snap);
	nvml_close(c);
	nvml_close(NULL);
}

/*
 * A process that takes its memory between the memory reading and the
 * process lists (each a call of its own, answered afresh) is listed with
 * memory the reading still called free.  The snapshot counts it as used:
 * placement counts a share whose job shows its memory as used, not as
 * pending, so the torn reading would count it nowhere and overbook.  The
 * process lists cost 0.4 s each here (the latency profile); the entry appears
 * 0.2 s into the first of them, well after the memory reading.
 */
/* The entry of a process of ours holding 6144 MiB on the device of
 * arg, published delay_ms from now as simload does (a .tmp renamed). */
struct torn {
	char dir[PATH_MAX + 32];
	const char *uuid;
	unsigned delay_ms;
};

static void *publish_later(void *arg)
{
	const struct torn *t = arg;
	char tmp[PATH_MAX + 64], live[PATH_MAX + 64], stat[1024], *p;
	unsigned long long start = 0;
	FILE *f;

	usleep(t->delay_ms * 1000);
	f = fopen("/proc/self/stat", "r");
	if (!f || !fgets(stat, sizeof stat, f))
		abort();
	fclose(f);
	p = strrchr(stat, ')');
	/* the 22nd field, the start time, is the 20th after the command */
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &start) != 1)
		abort();
	snprintf(tmp, sizeof tmp, "%s/%d-%llu.tmp", t->dir, (int)getpid(), start);
	snprintf(live, sizeof live, "%s/%d-%llu.live", t->dir, (int)getpid(), start);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%s 6144 40\n", t->uuid) < 0 || fclose(f) != 0 ||
	    rename(tmp, live) != 0)
		abort();
	return NULL;
}

/* A snapshot of scenario taken while the entry for uuid appears, delay_ms
 * after it starts. */
static void take_torn(const char *scenario, const char *uuid, unsigned delay_ms, struct nvml **nv,
                      struct gm_snapshot *snap)
{
	struct torn t = {.uuid = uuid, .delay_ms = delay_ms};
	pthread_t thread;

	*nv = machine_ok(scenario, sim_lib);
	snprintf(t.dir, sizeof t.dir, "%s/%u/state", tmp_dir, machines);
	assert_int_equal(pthread_create(&thread, NULL, publish_later, &t), 0);
	take(*nv, snap);
	assert_int_equal(pthread_join(thread, NULL), 0);
}

#define TORN_LATENCY "\"latency\": { \"processes_ms\": 400 }"

static void test_torn_reading(void **state)
{
	struct gm_snapshot snap;
	const struct gm_proc *p;
	struct nvml *nv;

	(void)state;
	take_torn("{ " TORN_LATENCY ", \"gpus\": [ { \"name\": \"t\", \"uuid\": "
	          "\"GPU-70000000-0000-0000-0000-000000000000\", \"memory_total_mib\": 16000 } ] }",
	          "GPU-70000000-0000-0000-0000-000000000000", 200, &nv, &snap);
	assert_int_equal(snap.gpu_count, 1);
	p = find_proc(&snap, 0, (unsigned)getpid());
	assert_non_null(p);
	assert_int_equal(p->used_mib, 6144);
	assert_int_equal(snap.gpus[0].mem_used_mib, 6144);
	assert_int_equal(snap.gpus[0].mem_free_mib, 16000 - 6144);
	release(&snap);
	nvml_close(nv);
}

/* The same within a MIG slice: its memory and its process lists are
 * calls of their own too.  The slice is read after its GPU's three
 * process lists (1.2 s): its memory at 1.2 s, its first list at 1.6 s. */
static void test_torn_reading_mig(void **state)
{
	struct gm_snapshot snap;
	struct nvml *nv;

	(void)state;
	take_torn("{ " TORN_LATENCY ", \"gpus\": [ { \"name\": \"m\", \"uuid\": "
	          "\"GPU-71000000-0000-0000-0000-000000000000\", \"memory_total_mib\": 40000, "
	          "\"mig_mode\": 1, \"mig_devices\": [ { \"profile\": \"3g.20gb\", \"uuid\": "
	          "\"MIG-71000000-0000-0000-0000-000000000001\", \"memory_total_mib\": 20000, "
	          "\"gpu_instance_id\": 1, \"compute_instance_id\": 0 } ] } ] }",
	          "MIG-71000000-0000-0000-0000-000000000001", 1400, &nv, &snap);
	assert_int_equal(snap.mig_count, 1);
	assert_true(snap.migs[0].valid & GM_MIG_HAS_MEMORY);
	assert_int_equal(snap.migs[0].pid_count, 1);
	assert_int_equal(snap.migs[0].mem_used_mib, 6144);
	assert_int_equal(snap.migs[0].mem_free_mib, 20000 - 6144);
	release(&snap);
	nvml_close(nv);
}

/* ---- setup ------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int group_setup(void **state)
{
	const char *build = getenv("GM_BUILD");
	char dir[PATH_MAX];

	(void)state;
	if (!build || !*build)
		build = "build";
	if (!realpath(build, dir)) {
		fprintf(stderr, "test_nvml: build directory '%s': %s\n", build, strerror(errno));
		return -1;
	}
	snprintf(sim_lib, sizeof sim_lib, "%s/sim/libnvidia-ml.so.1", dir);
	snprintf(old_lib, sizeof old_lib, "%s/sim/r390/libnvidia-ml.so.1", dir);
	if (access(sim_lib, R_OK) != 0) {
		fprintf(stderr, "test_nvml: '%s' not built (make %s)\n", sim_lib, sim_lib);
		return -1;
	}
	snprintf(tmp_dir, sizeof tmp_dir, "%s/gpuman-test-nvml-XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmp_dir)) {
		fprintf(stderr, "test_nvml: mkdtemp: %s\n", strerror(errno));
		return -1;
	}
	unsetenv("GPUMAN_NVML");
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (tmp_dir[0])
		nftw(tmp_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_values),
	    cmocka_unit_test(test_v1_fallbacks),
	    cmocka_unit_test(test_old_library),
	    cmocka_unit_test(test_unsupported),
	    cmocka_unit_test(test_clocks),
	    cmocka_unit_test(test_gpu_lost),
	    cmocka_unit_test(test_no_permission),
	    cmocka_unit_test(test_no_gpu),
	    cmocka_unit_test(test_init_error),
	    cmocka_unit_test(test_bad_key),
	    cmocka_unit_test(test_bad_path),
	    cmocka_unit_test(test_not_nvml),
	    cmocka_unit_test(test_cache),
	    cmocka_unit_test(test_torn_reading),
	    cmocka_unit_test(test_torn_reading_mig),
	};

	return cmocka_run_group_tests_name("nvml", tests, group_setup, group_teardown);
}
