/*
 * test_simabi.c - the NVML simulator's ABI against NVML's documented
 * layouts: every struct the simulator writes is checked at the size and
 * offsets NVIDIA documents (written down here independently of sim/), in a
 * buffer of exactly that size followed by canary bytes that must come back
 * untouched.  A client built against the real nvml.h allocates exactly the
 * documented size, so one byte too many is memory corruption in someone
 * else's program.
 *
 * The simulator is loaded from $GM_BUILD/sim (default "build") with the lab
 * scenario, examples/lab-8gpu.json; run from the source tree.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#define CANARY_LEN 64
#define CANARY_BYTE 0xA5
#define MIB 1048576ull

/* NVML's documented sizes and offsets (LP64). */
enum {
	PCI_V2_SIZE =
	    52, /* busId[16], domain, bus, device, pciDeviceId, pciSubSystemId, reserved[4] */
	PCI_V3_SIZE =
	    68, /* busIdLegacy[16], domain, bus, device, pciDeviceId, pciSubSystemId, busId[32] */
	PCI_DOMAIN_OFF = 16,
	PCI_BUS_OFF = 20,
	PCI_DEVICE_OFF = 24,
	PCI_DEVICE_ID_OFF = 28,
	PCI_SUBSYS_OFF = 32,
	PCI_V3_BUSID_OFF = 36,
	MEMORY_V1_SIZE = 24, /* total, free, used */
	MEMORY_V2_SIZE = 40, /* version, (pad), total, reserved, free, used */
	MEMORY_V2_VERSION = 0x02000028,
	UTIL_SIZE = 8,     /* gpu, memory */
	PROC_V1_SIZE = 16, /* pid, (pad), usedGpuMemory */
	PROC_V2_SIZE = 24, /* pid, (pad), usedGpuMemory, gpuInstanceId, computeInstanceId */
	NAME_LEN = 96
};

static void *lib;
typedef int (*fn_void)(void);

static void *sym(const char *name)
{
	void *p = dlsym(lib, name);

	if (!p)
		fail_msg("the simulator does not export %s", name);
	return p;
}

/* A zone of size bytes followed by the canary; the version word, if any,
 * goes first as NVML's versioned structs expect. */
static unsigned char *zone(size_t size, unsigned version)
{
	unsigned char *b = malloc(size + CANARY_LEN);

	assert_non_null(b);
	memset(b, CANARY_BYTE, size + CANARY_LEN);
	if (version)
		memcpy(b, &version, sizeof version);
	return b;
}

static void canary_intact(const unsigned char *b, size_t size, const char *what)
{
	for (size_t i = 0; i < CANARY_LEN; i++)
		if (b[size + i] != CANARY_BYTE)
			fail_msg("%s wrote byte %zu past its documented %zu-byte struct", what, i,
			         size);
}

static unsigned u32_at(const unsigned char *b, size_t off)
{
	unsigned v;

	memcpy(&v, b + off, sizeof v);
	return v;
}

static unsigned long long u64_at(const unsigned char *b, size_t off)
{
	unsigned long long v;

	memcpy(&v, b + off, sizeof v);
	return v;
}

static void *device(unsigned index)
{
	int (*by_index)(unsigned, void **) =
	    (int (*)(unsigned, void **))sym("nvmlDeviceGetHandleByIndex_v2");
	void *dev = NULL;

	assert_int_equal(by_index(index, &dev), 0);
	return dev;
}

static int setup(void **state)
{
	const char *build = getenv("GM_BUILD");
	char path[PATH_MAX];

	(void)state;
	snprintf(path, sizeof path, "%s/sim/libnvidia-ml.so.1", build && *build ? build : "build");
	setenv("GPUMAN_SIM", "examples/lab-8gpu.json", 1);
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
		return -1;
	}
	return ((fn_void)sym("nvmlInit_v2"))();
}

static int teardown(void **state)
{
	(void)state;
	((fn_void)sym("nvmlShutdown"))();
	dlclose(lib);
	return 0;
}

/* ---- pci info ---------------------------------------------------------- */

static void check_pci_old(const char *fn)
{
	int (*get)(void *, void *) = (int (*)(void *, void *))sym(fn);
	unsigned char *b = zone(PCI_V2_SIZE, 0);

	/* GPU 1 of the lab is at 00000000:21:00.0. */
	assert_int_equal(get(device(1), b), 0);
	canary_intact(b, PCI_V2_SIZE, fn);
	assert_string_equal((const char *)b, "0000:21:00.0");
	assert_int_equal(u32_at(b, PCI_DOMAIN_OFF), 0);
	assert_int_equal(u32_at(b, PCI_BUS_OFF), 0x21);
	assert_int_equal(u32_at(b, PCI_DEVICE_OFF), 0);
	assert_int_equal(u32_at(b, PCI_DEVICE_ID_OFF) & 0xffff, 0x10de);
	assert_int_equal(u32_at(b, PCI_SUBSYS_OFF) & 0xffff, 0x10de);
	for (size_t off = 36; off < PCI_V2_SIZE; off += 4)
		assert_int_equal(u32_at(b, off), 0); /* reserved */
	free(b);
}

static void pci_v1_is_52_bytes(void **state)
{
	(void)state;
	check_pci_old("nvmlDeviceGetPciInfo");
}

static void pci_v2_is_52_bytes(void **state)
{
	(void)state;
	check_pci_old("nvmlDeviceGetPciInfo_v2");
}

static void pci_v3_is_68_bytes(void **state)
{
	int (*get)(void *, void *) = (int (*)(void *, void *))sym("nvmlDeviceGetPciInfo_v3");
	unsigned char *b = zone(PCI_V3_SIZE, 0);

	(void)state;
	assert_int_equal(get(device(1), b), 0);
	canary_intact(b, PCI_V3_SIZE, "nvmlDeviceGetPciInfo_v3");
	assert_string_equal((const char *)b, "0000:21:00.0");
	assert_string_equal((const char *)b + PCI_V3_BUSID_OFF, "00000000:21:00.0");
	assert_int_equal(u32_at(b, PCI_BUS_OFF), 0x21);
	free(b);
}

/* ---- memory, utilization, strings -------------------------------------- */

static void memory_layouts(void **state)
{
	int (*v1)(void *, void *) = (int (*)(void *, void *))sym("nvmlDeviceGetMemoryInfo");
	int (*v2)(void *, void *) = (int (*)(void *, void *))sym("nvmlDeviceGetMemoryInfo_v2");
	unsigned char *a = zone(MEMORY_V1_SIZE, 0), *b = zone(MEMORY_V2_SIZE, MEMORY_V2_VERSION);
	unsigned long long total, reserved, free_b, used;

	(void)state;
	assert_int_equal(v1(device(0), a), 0);
	canary_intact(a, MEMORY_V1_SIZE, "nvmlDeviceGetMemoryInfo");
	assert_int_equal(u64_at(a, 0), 11264 * MIB);
	assert_int_equal(u64_at(a, 8) + u64_at(a, 16), 11264 * MIB);

	assert_int_equal(v2(device(0), b), 0);
	canary_intact(b, MEMORY_V2_SIZE, "nvmlDeviceGetMemoryInfo_v2");
	total = u64_at(b, 8);
	reserved = u64_at(b, 16);
	free_b = u64_at(b, 24);
	used = u64_at(b, 32);
	assert_int_equal(total, 11264 * MIB);
	/* v2's used excludes reserved; v1's includes it. */
	assert_int_equal(reserved + free_b + used, total);
	assert_int_equal(used + reserved, u64_at(a, 16));

	/* A bare 2 instead of the version word: FUNCTION_NOT_FOUND, untouched. */
	memset(b, CANARY_BYTE, MEMORY_V2_SIZE + CANARY_LEN);
	memcpy(b, &(unsigned){2}, sizeof(unsigned));
	assert_int_equal(v2(device(0), b), 13);
	canary_intact(b, 4, "nvmlDeviceGetMemoryInfo_v2 with a bad version");
	free(a);
	free(b);
}

static void utilization_and_strings(void **state)
{
	int (*util)(void *, void *) = (int (*)(void *, void *))sym("nvmlDeviceGetUtilizationRates");
	int (*name)(void *, char *, unsigned) =
	    (int (*)(void *, char *, unsigned))sym("nvmlDeviceGetName");
	int (*uuid)(void *, char *, unsigned) =
	    (int (*)(void *, char *, unsigned))sym("nvmlDeviceGetUUID");
	int (*drv)(char *, unsigned) = (int (*)(char *, unsigned))sym("nvmlSystemGetDriverVersion");
	unsigned char *u = zone(UTIL_SIZE, 0), *n = zone(NAME_LEN, 0);

	(void)state;
	assert_int_equal(util(device(0), u), 0);
	canary_intact(u, UTIL_SIZE, "nvmlDeviceGetUtilizationRates");
	assert_int_equal(u32_at(u, 0), 97);
	assert_int_equal(name(device(0), (char *)n, NAME_LEN), 0);
	canary_intact(n, NAME_LEN, "nvmlDeviceGetName");
	assert_int_equal(uuid(device(0), (char *)n, NAME_LEN), 0);
	canary_intact(n, NAME_LEN, "nvmlDeviceGetUUID");
	/* A buffer one byte too short: INSUFFICIENT_SIZE and nothing written. */
	memset(n, CANARY_BYTE, NAME_LEN + CANARY_LEN);
	assert_int_equal(drv((char *)n, 9), 7);
	canary_intact(n, 0, "nvmlSystemGetDriverVersion with a short buffer");
	assert_int_equal(drv((char *)n, 10), 0);
	assert_string_equal((const char *)n, "580.95.05");
	canary_intact(n, 10, "nvmlSystemGetDriverVersion");
	free(u);
	free(n);
}

/* ---- process lists ----------------------------------------------------- */

static void check_procs(const char *fn, size_t entry)
{
	int (*get)(void *, unsigned *, void *) = (int (*)(void *, unsigned *, void *))sym(fn);
	unsigned count = 0;
	unsigned char *b;

	/* GPU 0 of the lab: two compute processes. */
	assert_int_equal(get(device(0), &count, NULL), 7);
	assert_int_equal(count, 2);
	b = zone(2 * entry, 0);
	assert_int_equal(get(device(0), &count, b), 0);
	assert_int_equal(count, 2);
	canary_intact(b, 2 * entry, fn);
	assert_int_equal(u32_at(b, 0), 2028329);
	assert_int_equal(u64_at(b, 8), 10625 * MIB);
	assert_int_equal(u32_at(b, entry), 3141592);
	if (entry == PROC_V2_SIZE) {
		assert_int_equal(u32_at(b, 16), 0xFFFFFFFFu); /* no MIG */
		assert_int_equal(u32_at(b, 20), 0xFFFFFFFFu);
	}
	/* One entry of room for two: the count, nothing written. */
	count = 1;
	memset(b, CANARY_BYTE, 2 * entry + CANARY_LEN);
	assert_int_equal(get(device(0), &count, b), 7);
	assert_int_equal(count, 2);
	canary_intact(b, 0, fn);
	free(b);
}

static void process_lists(void **state)
{
	(void)state;
	check_procs("nvmlDeviceGetComputeRunningProcesses", PROC_V1_SIZE);
	check_procs("nvmlDeviceGetComputeRunningProcesses_v2", PROC_V2_SIZE);
	check_procs("nvmlDeviceGetComputeRunningProcesses_v3", PROC_V2_SIZE);
}

/* ---- every function of NVML's list, and the readings -------------------- */

/* sim/nvml-functions.txt lists every function NVML 13.3's nvml.h declares:
 * a program linked against the real library must find each one. */
static void every_function_resolves(void **state)
{
	FILE *f = fopen("sim/nvml-functions.txt", "r");
	char line[128];
	unsigned n = 0, missing = 0;

	(void)state;
	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!line[0] || line[0] == '#')
			continue;
		n++;
		if (!dlsym(lib, line)) {
			fprintf(stderr, "# not exported: %s\n", line);
			missing++;
		}
	}
	fclose(f);
	assert_true(n >= 400);
	assert_int_equal(missing, 0);
}

/* A getter of one unsigned: exactly 4 bytes written. */
static unsigned get_u32(const char *fn, unsigned gpu, int sel, int with_sel)
{
	unsigned char *b = zone(sizeof(unsigned), 0);
	unsigned v;
	int rc;

	if (with_sel)
		rc = ((int (*)(void *, int, void *))sym(fn))(device(gpu), sel, b);
	else
		rc = ((int (*)(void *, void *))sym(fn))(device(gpu), b);
	if (rc != 0)
		fail_msg("%s on GPU %u answered %d", fn, gpu, rc);
	canary_intact(b, sizeof(unsigned), fn);
	v = u32_at(b, 0);
	free(b);
	return v;
}

static void monitoring_readings(void **state)
{
	unsigned char *a = zone(4, 0), *b = zone(4, 0);
	int (*enc)(void *, void *, void *) =
	    (int (*)(void *, void *, void *))sym("nvmlDeviceGetDecoderUtilization");
	int (*lim)(void *, void *, void *) =
	    (int (*)(void *, void *, void *))sym("nvmlDeviceGetPowerManagementLimitConstraints");

	(void)state;
	/* GPU 3 of the lab, an RTX 3090 at work; GPU 2, an idle TITAN RTX. */
	assert_int_equal(get_u32("nvmlDeviceGetMaxPcieLinkGeneration", 3, 0, 0), 4);
	assert_int_equal(get_u32("nvmlDeviceGetMaxPcieLinkWidth", 3, 0, 0), 16);
	assert_int_equal(get_u32("nvmlDeviceGetCurrPcieLinkGeneration", 3, 0, 0), 4);
	assert_int_equal(get_u32("nvmlDeviceGetCurrPcieLinkGeneration", 2, 0, 0), 1);
	assert_int_equal(get_u32("nvmlDeviceGetCurrPcieLinkWidth", 3, 0, 0), 16);
	assert_int_equal(get_u32("nvmlDeviceGetPcieThroughput", 3, 0, 1), 41000);
	assert_int_equal(get_u32("nvmlDeviceGetPcieThroughput", 3, 1, 1), 187000);
	assert_int_equal(get_u32("nvmlDeviceGetTemperatureThreshold", 3, 0, 1), 98);
	assert_int_equal(get_u32("nvmlDeviceGetTemperatureThreshold", 3, 1, 1), 95);
	assert_int_equal(get_u32("nvmlDeviceGetClockInfo", 3, 2, 1), 9751);
	assert_int_equal(get_u32("nvmlDeviceGetMaxClockInfo", 3, 1, 1), 1695);
	assert_int_equal(get_u32("nvmlDeviceGetMaxClockInfo", 3, 2, 1), 9751);
	assert_int_equal(get_u32("nvmlDeviceGetFanSpeed", 3, 0, 0), 56);
	assert_int_equal(get_u32("nvmlDeviceGetPowerManagementLimit", 3, 0, 0), 350000);
	assert_int_equal(get_u32("nvmlDeviceGetPowerManagementDefaultLimit", 3, 0, 0), 350000);
	assert_int_equal(get_u32("nvmlDeviceGetPerformanceState", 2, 0, 0), 8);

	assert_int_equal(enc(device(3), a, b), 0);
	canary_intact(a, 4, "nvmlDeviceGetDecoderUtilization (utilization)");
	canary_intact(b, 4, "nvmlDeviceGetDecoderUtilization (sampling period)");
	assert_int_equal(u32_at(a, 0), 12);
	assert_true(u32_at(b, 0) > 0);
	assert_int_equal(lim(device(3), a, b), 0);
	assert_int_equal(u32_at(a, 0), 100000);
	assert_int_equal(u32_at(b, 0), 400000);
	canary_intact(b, 4, "nvmlDeviceGetPowerManagementLimitConstraints");
	free(a);
	free(b);
}

/* nvmlTemperature_v1_t: version, sensorType, temperature; 12 bytes. */
static void temperature_v(void **state)
{
	int (*get)(void *, void *) = (int (*)(void *, void *))sym("nvmlDeviceGetTemperatureV");
	unsigned char *b = zone(12, 0x0100000C);
	int t;

	(void)state;
	memset(b + 4, 0, 4); /* NVML_TEMPERATURE_GPU */
	assert_int_equal(get(device(0), b), 0);
	canary_intact(b, 12, "nvmlDeviceGetTemperatureV");
	memcpy(&t, b + 8, sizeof t);
	assert_int_equal(t, 83);
	memcpy(b, &(unsigned){12}, sizeof(unsigned)); /* no version in the word */
	assert_int_equal(get(device(0), b), 25);
	free(b);
}

/* nvmlBAR1Memory_t (24 bytes) and nvmlProcessUtilizationSample_t (32). */
static void bar1_and_process_samples(void **state)
{
	int (*bar1)(void *, void *) = (int (*)(void *, void *))sym("nvmlDeviceGetBAR1MemoryInfo");
	int (*util)(void *, void *, unsigned *, unsigned long long) = (int (*)(
	    void *, void *, unsigned *, unsigned long long))sym("nvmlDeviceGetProcessUtilization");
	unsigned char *b = zone(24, 0);
	unsigned count = 0;

	(void)state;
	assert_int_equal(bar1(device(0), b), 0);
	canary_intact(b, 24, "nvmlDeviceGetBAR1MemoryInfo");
	assert_int_equal(u64_at(b, 0), 256 * MIB);
	assert_int_equal(u64_at(b, 8), 251 * MIB);
	assert_int_equal(u64_at(b, 16), 5 * MIB);
	free(b);

	/* GPU 0: one process computes (97 %), one holds memory only: no sample */
	assert_int_equal(util(device(0), NULL, &count, 0), 7);
	assert_int_equal(count, 1);
	b = zone(32, 0);
	assert_int_equal(util(device(0), b, &count, 0), 0);
	canary_intact(b, 32, "nvmlDeviceGetProcessUtilization");
	assert_int_equal(u32_at(b, 0), 2028329);
	assert_true(u64_at(b, 8) > 0);       /* timestamp */
	assert_int_equal(u32_at(b, 16), 97); /* smUtil */
	free(b);
	count = 4;
	assert_int_equal(util(device(2), NULL, &count, 0), 6); /* an idle GPU: NOT_FOUND */
}

/* A process's name is its executable; the scenario's imagined pids have
 * none; a short buffer gets a truncated name, never an overrun. */
static void process_names(void **state)
{
	int (*pname)(unsigned, char *, unsigned) =
	    (int (*)(unsigned, char *, unsigned))sym("nvmlSystemGetProcessName");
	unsigned char *b = zone(8, 0);
	char name[256];

	(void)state;
	assert_int_equal(pname((unsigned)getpid(), name, sizeof name), 0);
	assert_non_null(strstr(name, "test_simabi"));
	assert_int_equal(pname((unsigned)getpid(), (char *)b, 8), 0);
	canary_intact(b, 8, "nvmlSystemGetProcessName");
	assert_int_equal(strlen((char *)b), 7);
	free(b);
}

/* Energy grows; affinity masks fill exactly the caller's words; P2P. */
static void energy_affinity_p2p(void **state)
{
	int (*energy)(void *, unsigned long long *) =
	    (int (*)(void *, unsigned long long *))sym("nvmlDeviceGetTotalEnergyConsumption");
	int (*cpus)(void *, unsigned, unsigned long *) =
	    (int (*)(void *, unsigned, unsigned long *))sym("nvmlDeviceGetCpuAffinity");
	int (*p2p)(void *, void *, int, int *) =
	    (int (*)(void *, void *, int, int *))sym("nvmlDeviceGetP2PStatus");
	unsigned long long e1 = 0, e2 = 0;
	unsigned char *b = zone(sizeof(unsigned long), 0);
	int st = -1;

	(void)state;
	assert_int_equal(energy(device(0), &e1), 0);
	usleep(20000);
	assert_int_equal(energy(device(0), &e2), 0);
	assert_true(e2 > e1);
	assert_int_equal(cpus(device(0), 1, (unsigned long *)b), 0);
	canary_intact(b, sizeof(unsigned long), "nvmlDeviceGetCpuAffinity");
	assert_true(b[0] & 1);
	free(b);
	assert_int_equal(p2p(device(0), device(4), 0, &st), 0); /* two GTX 1080 Ti */
	assert_int_equal(st, 0);
	assert_int_equal(p2p(device(0), device(1), 0, &st), 0);
	assert_int_equal(st, 5);
}

/* MPS clients are in the MPS list only; 24-byte entries. */
static void mps_list(void **state)
{
	int (*mps)(void *, unsigned *, void *) =
	    (int (*)(void *, unsigned *, void *))sym("nvmlDeviceGetMPSComputeRunningProcesses_v3");
	int (*compute)(void *, unsigned *, void *) =
	    (int (*)(void *, unsigned *, void *))sym("nvmlDeviceGetComputeRunningProcesses_v3");
	unsigned char *b = zone(2 * 24, 0);
	unsigned count = 2;

	(void)state;
	assert_int_equal(((fn_void)sym("nvmlShutdown"))(), 0);
	setenv("GPUMAN_SIM", "tests/fixtures/reserved-handle.json", 1);
	assert_int_equal(((fn_void)sym("nvmlInit_v2"))(), 0);
	assert_int_equal(mps(device(0), &count, b), 0);
	assert_int_equal(count, 1);
	canary_intact(b, 48, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
	assert_int_equal(u32_at(b, 0), 2700101);
	assert_int_equal(u64_at(b, 8), 1024 * MIB);
	count = 2;
	assert_int_equal(compute(device(0), &count, b), 0);
	assert_int_equal(count, 1);
	assert_int_equal(u32_at(b, 0), 2700100);
	free(b);
	assert_int_equal(((fn_void)sym("nvmlShutdown"))(), 0);
	setenv("GPUMAN_SIM", "examples/lab-8gpu.json", 1);
	assert_int_equal(((fn_void)sym("nvmlInit_v2"))(), 0);
}

/* A function the simulator does not model answers NOT_SUPPORTED and leaves
 * every byte it was given alone. */
static void unmodelled_functions_touch_nothing(void **state)
{
	unsigned char *b = zone(0, 0);
	int (*am)(void *, void *) = (int (*)(void *, void *))sym("nvmlDeviceGetAddressingMode");
	int (*ecc)(void *, void *, void *) =
	    (int (*)(void *, void *, void *))sym("nvmlDeviceGetEccMode");

	(void)state;
	assert_int_equal(am(device(0), b), 3);
	assert_int_equal(ecc(device(0), b, b), 3);
	canary_intact(b, 0, "an unmodelled function");
	free(b);
}

static void handle_by_pci_bus_id(void **state)
{
	int (*by_bus)(const char *, void **) =
	    (int (*)(const char *, void **))sym("nvmlDeviceGetHandleByPciBusId_v2");
	void *dev = NULL;

	(void)state;
	assert_int_equal(by_bus("00000000:21:00.0", &dev), 0);
	assert_ptr_equal(dev, device(1));
	assert_int_equal(by_bus("0000:21:00.0", &dev), 0);
	assert_ptr_equal(dev, device(1));
	assert_int_equal(by_bus("0000:99:00.0", &dev), 6);
	assert_int_equal(by_bus("not a bus id", &dev), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(pci_v1_is_52_bytes),
	    cmocka_unit_test(pci_v2_is_52_bytes),
	    cmocka_unit_test(pci_v3_is_68_bytes),
	    cmocka_unit_test(memory_layouts),
	    cmocka_unit_test(utilization_and_strings),
	    cmocka_unit_test(process_lists),
	    cmocka_unit_test(every_function_resolves),
	    cmocka_unit_test(monitoring_readings),
	    cmocka_unit_test(unmodelled_functions_touch_nothing),
	    cmocka_unit_test(handle_by_pci_bus_id),
	    cmocka_unit_test(temperature_v),
	    cmocka_unit_test(bar1_and_process_samples),
	    cmocka_unit_test(mps_list),
	    cmocka_unit_test(process_names),
	    cmocka_unit_test(energy_affinity_p2p),
	};

	return cmocka_run_group_tests_name("simabi", tests, setup, teardown);
}
