/*
 * simload.c - gpuman-simload, a stand-in for a GPU training job on the
 * simulated machine ($GPUMAN_SIM).
 *
 * It sees the GPUs a CUDA program would see (CUDA_VISIBLE_DEVICES, read in
 * CUDA's fastest-first order or with CUDA_DEVICE_ORDER=PCI_BUS_ID in NVML's),
 * waits --init-delay (CUDA's start-up, the window in which naive GPU pickers
 * collide), then "allocates" its memory on every visible GPU - failing as
 * CUDA does when one lacks it - and so shows up in the simulator's process
 * lists, memory and utilization until it finishes S / speed seconds later.
 *
 * Exit status: where CUDA would fail, the cudaError_t number - 2 out of
 * memory, 3 driver initialisation failed (the scenario's init_error), 46
 * device busy or unavailable (exclusive or prohibited compute mode), 100 no
 * device; 1 for usage and scenario errors; 128+N when ended by signal N;
 * otherwise --exit N (default 0).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h> /* isfinite: a macro, no libm */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "scenario.h"
#include "simstate.h"

#define EXIT_FAILED 1
#define EXIT_CUDA_OOM 2     /* cudaErrorMemoryAllocation */
#define EXIT_CUDA_INIT 3    /* cudaErrorInitializationError */
#define EXIT_CUDA_BUSY 46   /* cudaErrorDevicesUnavailable */
#define EXIT_CUDA_NODEV 100 /* cudaErrorNoDevice */
#define MAX_SECONDS 1e8

static const char usage[] =
    "usage: gpuman-simload --mem SIZE --util PERCENT --seconds S [--init-delay S]\n"
    "                      [--record FILE] [--exit N]\n"
    "\n"
    "A stand-in for a GPU job on the machine that the NVML simulator's scenario\n"
    "($GPUMAN_SIM) describes.  It uses the GPUs CUDA would give it\n"
    "(CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER; a first entry MIG-<uuid>: that\n"
    "MIG slice), waits for CUDA to start, takes SIZE of memory and PERCENT of\n"
    "utilization on each, and runs S seconds divided by the speed of its\n"
    "slowest GPU.\n"
    "\n"
    "  --mem SIZE        memory per GPU: MiB, or a number with K, M, G or T (binary)\n"
    "  --util PERCENT    utilization it adds to each GPU, 0-100\n"
    "  --seconds S       work, in seconds on a GPU of speed 1.0 (fractions allowed)\n"
    "  --init-delay S    CUDA start-up time before the memory is taken (default 0)\n"
    "  --record FILE     append \"start|end PID UUID REALTIME_NS\" per GPU\n"
    "  --exit N          exit status when the work is done (default 0)\n"
    "  --help            show this help\n"
    "\n"
    "Live state: $GPUMAN_SIM_STATE (default: a private directory under $TMPDIR).\n"
    "Exit status: 0 (or --exit N) done, 1 usage or scenario error, 2 CUDA out of\n"
    "memory, 3 CUDA initialisation failed, 46 GPU busy (compute mode), 100 no\n"
    "CUDA device, 128+N ended by signal N.\n";

struct options {
	uint64_t mem_mib;
	unsigned util_pct;
	double seconds;
	double init_delay;
	const char *record;
	int exit_code;
	int has_mem, has_util, has_seconds;
};

/* A running job: what it holds and where it reports. */
struct job {
	struct scenario *sc; /* its timeline moves on */
	/* in CUDA device order: GPUs, or the one MIG slice CUDA enumerates */
	const struct scenario_gpu *visible[SCENARIO_MAX_GPUS];
	size_t count;
	int record_fd; /* -1 without --record */
};

static long long clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* SIZE: bare number = MiB, else K/M/G/T with optional "iB"/"B"; rounded up. */
static int simload_mem_size(const char *s, uint64_t *mib)
{
	static const struct {
		const char *unit;
		double mib;
	} units[] = {{"", 1},         {"k", 1.0 / 1024}, {"kb", 1.0 / 1024}, {"kib", 1.0 / 1024},
	             {"m", 1},        {"mb", 1},         {"mib", 1},         {"g", 1024},
	             {"gb", 1024},    {"gib", 1024},     {"t", 1048576},     {"tb", 1048576},
	             {"tib", 1048576}};
	char *end;
	double x;
	size_t i;

	if (!((*s >= '0' && *s <= '9') || *s == '.'))
		return -1;
	x = strtod(s, &end);
	for (i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcasecmp(end, units[i].unit))
			continue;
		x *= units[i].mib;
		if (!isfinite(x) || x > (double)(1ull << 40))
			return -1;
		*mib = (uint64_t)x + ((double)(uint64_t)x < x); /* round up */
		return 0;
	}
	return -1;
}

static int parse_number(const char *s, double max, double *out)
{
	char *end;

	if (!((*s >= '0' && *s <= '9') || *s == '.'))
		return -1;
	*out = strtod(s, &end);
	return *end || !isfinite(*out) || *out > max ? -1 : 0;
}

/* Returns 0 to run, 1 after --help, -1 on a usage error (reported). */
static int parse_args(int argc, char **argv, struct options *opt)
{
	static const struct option longopts[] = {
	    {"mem", required_argument, NULL, 'm'},     {"util", required_argument, NULL, 'u'},
	    {"seconds", required_argument, NULL, 's'}, {"init-delay", required_argument, NULL, 'i'},
	    {"record", required_argument, NULL, 'r'},  {"exit", required_argument, NULL, 'e'},
	    {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
	double x;
	int c, i;

	memset(opt, 0, sizeof *opt);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (simload_mem_size(optarg, &opt->mem_mib) < 0)
				goto bad_value;
			opt->has_mem = 1;
			break;
		case 'u':
			if (parse_number(optarg, 100, &x) < 0 || x != (unsigned)x)
				goto bad_value;
			opt->util_pct = (unsigned)x;
			opt->has_util = 1;
			break;
		case 's':
			if (parse_number(optarg, MAX_SECONDS, &opt->seconds) < 0)
				goto bad_value;
			opt->has_seconds = 1;
			break;
		case 'i':
			if (parse_number(optarg, MAX_SECONDS, &opt->init_delay) < 0)
				goto bad_value;
			break;
		case 'r':
			opt->record = optarg;
			break;
		case 'e':
			if (parse_number(optarg, 255, &x) < 0 || x != (int)x)
				goto bad_value;
			opt->exit_code = (int)x;
			break;
		case 'h':
			fputs(usage, stdout);
			return 1;
		case ':':
			fprintf(stderr, "simload: %s needs a value (see --help)\n",
			        argv[optind - 1]);
			return -1;
		default:
			fprintf(stderr, "simload: unknown option '%s' (see --help)\n",
			        argv[optind - 1]);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "simload: unexpected argument '%s' (see --help)\n", argv[optind]);
		return -1;
	}
	if (!opt->has_mem || !opt->has_util || !opt->has_seconds) {
		fprintf(stderr, "simload: %s is required (see --help)\n",
		        !opt->has_mem    ? "--mem"
		        : !opt->has_util ? "--util"
		                         : "--seconds");
		return -1;
	}
	return 0;

bad_value:
	for (i = 0; longopts[i].val != c; i++)
		;
	fprintf(stderr, "simload: --%s '%s': %s\n", longopts[i].name, optarg,
	        c == 'm'   ? "not a size (use MiB, or a number with K, M, G or T)"
	        : c == 'u' ? "not a whole percentage from 0 to 100"
	        : c == 'e' ? "not an exit status from 0 to 255"
	                   : "not a number of seconds");
	return -1;
}

/*
 * The devices CUDA shows: GPUs by CUDA_VISIBLE_DEVICES and the device
 * order, or, when its first entry names a MIG slice ("MIG-" and the
 * slice's full UUID), that one slice: CUDA enumerates one MIG device per
 * process.
 */
static size_t visible_devices(const struct scenario *sc, const char *value, int pci_order,
                              const struct scenario_gpu **out)
{
	size_t pos[SCENARIO_MAX_GPUS], n, i;
	char entry[SCENARIO_NAME_SIZE];

	if (value) {
		value += strspn(value, " \t");
		n = strcspn(value, ", \t");
		if (!strncmp(value, "MIG-", 4) && n < sizeof entry) {
			memcpy(entry, value, n);
			entry[n] = '\0';
			out[0] = scenario_find_mig(sc, entry);
			return out[0] ? 1 : 0;
		}
	}
	n = scenario_cuda_visible(sc, value, pci_order, pos);
	for (i = 0; i < n; i++)
		out[i] = &sc->gpus[pos[i]];
	return n;
}

/* One write() per line, so that concurrent jobs' lines never interleave. */
static void record(const struct job *job, const char *what)
{
	char line[256];
	long long now = clock_ns(CLOCK_REALTIME);
	size_t i;
	int n;

	for (i = 0; job->record_fd >= 0 && i < job->count; i++) {
		n = snprintf(line, sizeof line, "%s %ld %s %lld\n", what, (long)getpid(),
		             job->visible[i]->uuid, now);
		if (write(job->record_fd, line, (size_t)n) != n)
			fprintf(stderr, "simload: cannot write the record: %s\n", strerror(errno));
	}
}

/* Sleep seconds, or until one of sigs (blocked) arrives: returns it, or 0.
 * A signal already pending is taken even when seconds is 0. */
static int sleep_or_signal(const sigset_t *sigs, double seconds)
{
	long long deadline = clock_ns(CLOCK_MONOTONIC) + (long long)(seconds * 1e9), left;
	struct timespec ts;
	int sig;

	for (;;) {
		left = deadline - clock_ns(CLOCK_MONOTONIC);
		if (left < 0)
			left = 0;
		ts.tv_sec = (time_t)(left / 1000000000LL);
		ts.tv_nsec = (long)(left % 1000000000LL);
		sig = sigtimedwait(sigs, NULL, &ts);
		if (sig > 0)
			return sig;
		if (left == 0)
			return 0;
	}
}

/*
 * What CUDA would say about creating a context and allocating mem_mib on
 * this GPU now, given the live processes: 0 when it can, else the exit
 * status after printing CUDA's error.
 */
static int check_gpu(const struct scenario_gpu *gpu, const struct simstate_live *live,
                     uint64_t mem_mib)
{
	uint64_t used = gpu->mem_used_mib + gpu->procs_used_mib, free_mib;
	unsigned user = 0;
	size_t i;

	for (i = 0; i < live->count; i++) {
		if (strcmp(live->uses[i].uuid, gpu->uuid))
			continue;
		used += live->uses[i].used_mib;
		user = live->uses[i].pid;
	}
	for (i = 0; !user && i < gpu->proc_count; i++)
		if (gpu->procs[i].kind & SCENARIO_PROC_COMPUTE)
			user = gpu->procs[i].pid;
	if (gpu->compute_mode == SCENARIO_COMPUTE_PROHIBITED ||
	    (user && (gpu->compute_mode == SCENARIO_COMPUTE_EXCLUSIVE_PROCESS ||
	              gpu->compute_mode == SCENARIO_COMPUTE_EXCLUSIVE_THREAD))) {
		fprintf(stderr,
		        "simload: CUDA error: all CUDA-capable devices are busy or unavailable "
		        "(GPU %s is in %s compute mode",
		        gpu->uuid, scenario_compute_mode_name(gpu->compute_mode));
		if (gpu->compute_mode == SCENARIO_COMPUTE_PROHIBITED)
			fprintf(stderr, ")\n");
		else
			fprintf(stderr, " and pid %u uses it)\n", user);
		return EXIT_CUDA_BUSY;
	}
	/* A GPU that reports no memory cannot be checked: CUDA would know, the
	 * scenario does not say, so the allocation succeeds. */
	if (!(gpu->has & SCENARIO_HAS_MEMORY))
		return 0;
	free_mib = used < gpu->mem_total_mib ? gpu->mem_total_mib - used : 0;
	if (mem_mib > free_mib) {
		fprintf(stderr,
		        "simload: CUDA error: out of memory (tried to allocate %llu MiB on GPU %s, "
		        "%llu MiB free)\n",
		        (unsigned long long)mem_mib, gpu->uuid, (unsigned long long)free_mib);
		return EXIT_CUDA_OOM;
	}
	return 0;
}

/* Under the state lock: check every visible GPU, then publish our entry,
 * so that no other simload can take the memory in between. */
static int allocate(struct job *job, struct simstate *st, const struct options *opt)
{
	struct simstate_live live = SIMSTATE_LIVE_INIT;
	struct simstate_use uses[SCENARIO_MAX_GPUS];
	char err[SCENARIO_ERR_SIZE];
	size_t i;
	int status = EXIT_FAILED;

	if (simstate_lock(st, err, sizeof err) < 0)
		goto failed;
	if (simstate_read(st, &live) < 0) {
		snprintf(err, sizeof err, "out of memory");
		goto failed;
	}
	/* The GPUs as the scenario's timeline has them now. */
	scenario_apply_time(job->sc, clock_ns(CLOCK_REALTIME) / 1000000);
	for (i = 0; i < job->count; i++) {
		status = check_gpu(job->visible[i], &live, opt->mem_mib);
		if (status)
			goto done;
	}
	for (i = 0; i < job->count; i++) {
		memset(&uses[i], 0, sizeof uses[i]);
		uses[i].pid = (unsigned)getpid();
		snprintf(uses[i].uuid, sizeof uses[i].uuid, "%s", job->visible[i]->uuid);
		uses[i].used_mib = opt->mem_mib;
		uses[i].utilization = opt->util_pct;
	}
	status = EXIT_FAILED;
	if (simstate_publish(st, uses, job->count, err, sizeof err) < 0)
		goto failed;
	status = 0;
	goto done;

failed:
	fprintf(stderr, "simload: %s\n", err);
done:
	simstate_unlock(st);
	simstate_live_release(&live);
	return status;
}

int main(int argc, char **argv)
{
	struct options opt;
	struct job job = {.record_fd = -1};
	struct scenario *sc = NULL;
	struct simstate st = SIMSTATE_INIT;
	char err[SCENARIO_ERR_SIZE];
	const char *path = getenv("GPUMAN_SIM"), *order = getenv("CUDA_DEVICE_ORDER");
	struct sigaction old;
	sigset_t sigs;
	double slowest = 0;
	size_t i;
	int status = EXIT_FAILED, sig;

	switch (parse_args(argc, argv, &opt)) {
	case 1:
		return 0;
	case -1:
		return EXIT_FAILED;
	}
	if (!path || !*path) {
		fprintf(stderr, "simload: GPUMAN_SIM is not set: point it at a scenario file "
		                "(e.g. examples/lab-8gpu.json)\n");
		goto done;
	}
	if (scenario_load(path, &sc, err, sizeof err) < 0) {
		fprintf(stderr, "simload: %s\n", err);
		goto done;
	}
	job.sc = sc;
	if (sc->init_error) {
		fprintf(stderr,
		        "simload: CUDA error: initialization error (the driver answers %s)\n",
		        scenario_error_name(sc->init_error));
		status = EXIT_CUDA_INIT;
		goto done;
	}
	job.count = visible_devices(sc, getenv("CUDA_VISIBLE_DEVICES"),
	                            order && !strcmp(order, "PCI_BUS_ID"), job.visible);
	if (!job.count) {
		fprintf(stderr, "simload: CUDA error: no CUDA-capable device is detected\n");
		status = EXIT_CUDA_NODEV;
		goto done;
	}
	if (opt.record) {
		job.record_fd = open(opt.record, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (job.record_fd < 0) {
			fprintf(stderr, "simload: --record '%s': %s\n", opt.record,
			        strerror(errno));
			goto done;
		}
	}

	/* Termination signals are taken synchronously (sigtimedwait), so that the
	 * entry is always withdrawn and the end recorded.  An inherited "ignore
	 * SIGINT" (a background job of a shell) is respected. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	if (sigaction(SIGINT, NULL, &old) == 0 && old.sa_handler != SIG_IGN)
		sigaddset(&sigs, SIGINT);
	sigprocmask(SIG_BLOCK, &sigs, NULL);

	sig = sleep_or_signal(&sigs, opt.init_delay);
	if (sig) {
		status = 128 + sig;
		goto done;
	}
	if (simstate_open(&st, sc->realpath, 1, err, sizeof err) < 0) {
		fprintf(stderr, "simload: %s\n", err);
		goto done;
	}
	status = allocate(&job, &st, &opt);
	if (status)
		goto done;
	record(&job, "start");
	for (i = 0; i < job.count; i++) {
		const struct scenario_gpu *gpu = job.visible[i];

		printf("simload: pid %ld on %s (cuda device %zu): %llu MiB, %u%%\n", (long)getpid(),
		       gpu->uuid, i, (unsigned long long)opt.mem_mib, opt.util_pct);
		if (!slowest || gpu->speed < slowest)
			slowest = gpu->speed;
	}
	fflush(stdout);

	sig = sleep_or_signal(&sigs, opt.seconds / slowest);
	/* End before withdrawing: whoever takes the memory next must record its
	 * start after our end. */
	record(&job, "end");
	simstate_withdraw(&st);
	status = sig ? 128 + sig : opt.exit_code;

done:
	simstate_close(&st);
	if (job.record_fd >= 0)
		close(job.record_fd);
	scenario_free(sc);
	return status;
}
