/*
 * cudaload.cu - gpuman-cudaload, the real-GPU twin of gpuman-simload: the
 * same options, output and --record lines, so the end-to-end checks that
 * run on the simulator run on a real GPU too (tests/real-gpu/check.sh).
 * Built only where nvcc exists (make cudaload).
 *
 * It uses every device CUDA gives it (CUDA_VISIBLE_DEVICES), waits
 * --init-delay, takes SIZE of memory on each (exit 2, as simload, when
 * cudaMalloc fails), keeps each GPU busy about PERCENT of the time for S
 * seconds with a spinning kernel, and appends "start|end PID UUID NS"
 * per device to --record.  Exit: --exit N when done, 1 usage, 2 out of
 * memory, 100 no device, 3 other CUDA errors.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEV 64

static long long now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Spin for about ns nanoseconds of GPU time (one block is enough to show
 * as utilization; the clock rate converts cycles to time). */
__global__ void spin(long long cycles)
{
	long long start = clock64();

	while (clock64() - start < cycles)
		;
}

/* "8192" MiB, or a number with K, M, G or T (binary); -1 on error. */
static long long parse_mib(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v < 0)
		return -1;
	switch (*end) {
	case '\0': return (long long)v;
	case 'K': case 'k': v /= 1024; break;
	case 'M': case 'm': break;
	case 'G': case 'g': v *= 1024; break;
	case 'T': case 't': v *= 1024 * 1024; break;
	default: return -1;
	}
	return (long long)(v + 0.999);
}

static void uuid_text(const cudaDeviceProp *p, char *out, size_t len)
{
	const unsigned char *u = (const unsigned char *)p->uuid.bytes;

	snprintf(out, len,
	         "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
	         u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
	         u[13], u[14], u[15]);
}

static void record(int fd, const char *what, int n, char uuids[][64])
{
	char line[160];

	for (int i = 0; fd >= 0 && i < n; i++) {
		int len = snprintf(line, sizeof line, "%s %d %s %lld\n", what, (int)getpid(), uuids[i],
		                   now_ns(CLOCK_REALTIME));
		if (write(fd, line, (size_t)len) != len)
			fprintf(stderr, "cudaload: cannot write the record: %s\n", strerror(errno));
	}
}

int main(int argc, char **argv)
{
	long long mib = -1;
	double util = -1, seconds = -1, init_delay = 0;
	int exit_code = 0, fd = -1, n = 0;
	const char *rec = NULL;
	char uuids[MAX_DEV][64];
	void *mem[MAX_DEV] = {0};
	long long rate_khz[MAX_DEV];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help")) {
			printf("usage: gpuman-cudaload --mem SIZE --util PERCENT --seconds S "
			       "[--init-delay S] [--record FILE] [--exit N]\n");
			return 0;
		}
		if (!v) {
			fprintf(stderr, "cudaload: %s needs a value (see --help)\n", a);
			return 1;
		}
		if (!strcmp(a, "--mem"))
			mib = parse_mib(v);
		else if (!strcmp(a, "--util"))
			util = atof(v);
		else if (!strcmp(a, "--seconds"))
			seconds = atof(v);
		else if (!strcmp(a, "--init-delay"))
			init_delay = atof(v);
		else if (!strcmp(a, "--record"))
			rec = v;
		else if (!strcmp(a, "--exit"))
			exit_code = atoi(v);
		else {
			fprintf(stderr, "cudaload: unknown option '%s' (see --help)\n", a);
			return 1;
		}
		i++;
	}
	if (mib < 0 || util < 0 || util > 100 || seconds < 0) {
		fprintf(stderr, "cudaload: --mem, --util (0-100) and --seconds are required\n");
		return 1;
	}
	if (rec && (fd = open(rec, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
		fprintf(stderr, "cudaload: --record '%s': %s\n", rec, strerror(errno));
		return 1;
	}
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		fprintf(stderr, "cudaload: CUDA error: no CUDA-capable device is detected\n");
		return 100;
	}
	if (n > MAX_DEV)
		n = MAX_DEV;
	usleep((useconds_t)(init_delay * 1e6));
	for (int d = 0; d < n; d++) {
		cudaDeviceProp p;
		size_t free_b = 0, total_b = 0;

		cudaSetDevice(d);
		cudaGetDeviceProperties(&p, d);
		uuid_text(&p, uuids[d], sizeof uuids[d]);
		int khz = 0;

		cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, d);
		rate_khz[d] = khz > 0 ? khz : 1500000; /* kHz; a guess only for the spin length */
		cudaMemGetInfo(&free_b, &total_b);
		if (mib > 0 && cudaMalloc(&mem[d], (size_t)mib << 20) != cudaSuccess) {
			fprintf(stderr, "cudaload: CUDA error: out of memory (tried to allocate %lld MiB "
			        "on GPU %s, %zu MiB free)\n", mib, uuids[d], free_b >> 20);
			return 2;
		}
		if (mem[d])
			cudaMemset(mem[d], 0, (size_t)mib << 20); /* really touch it */
		printf("cudaload: pid %d on %s (cuda device %d): %lld MiB, %.0f%%\n", (int)getpid(),
		       uuids[d], d, mib, util);
	}
	fflush(stdout);
	record(fd, "start", n, uuids);
	/* Duty cycle in 100 ms periods: spin util% of each, rest idle. */
	long long end = now_ns(CLOCK_MONOTONIC) + (long long)(seconds * 1e9);
	while (now_ns(CLOCK_MONOTONIC) < end) {
		long long busy_ns = (long long)(util * 1e6); /* of 100 ms */

		for (int d = 0; d < n && busy_ns > 0; d++) {
			cudaSetDevice(d);
			spin<<<1, 1>>>(busy_ns / 1000 * rate_khz[d] / 1000);
		}
		for (int d = 0; d < n; d++) {
			cudaSetDevice(d);
			if (cudaDeviceSynchronize() != cudaSuccess) {
				fprintf(stderr, "cudaload: CUDA error: %s\n",
				        cudaGetErrorString(cudaGetLastError()));
				return 3;
			}
		}
		if (util < 100)
			usleep((useconds_t)((100 - util) * 1000));
	}
	record(fd, "end", n, uuids);
	for (int d = 0; d < n; d++)
		cudaFree(mem[d]);
	return exit_code;
}
