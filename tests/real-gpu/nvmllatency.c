/*
 * nvmllatency.c - the per-call costs of the real driver, for the
 * simulator's latency profile (a scenario's "latency"): nvmlInit_v2 once,
 * then the median of N calls of each family on GPU 0, printed as the
 * "latency" object to paste into examples/h200-latency.json.  Its own
 * declarations, like lib/nvml.c.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 200

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double t[N];

static double median(void)
{
	qsort(t, N, sizeof t[0], cmp);
	return t[N / 2];
}

int main(void)
{
	void *dl = dlopen("libnvidia-ml.so.1", RTLD_NOW), *dev;
	int (*init)(void), (*handle)(unsigned, void **);
	int (*memory)(void *, unsigned long long *), (*util)(void *, unsigned *);
	int (*procs)(void *, unsigned *, void *), (*temp)(void *, int, unsigned *);
	int (*putil)(void *, void *, unsigned *, unsigned long long);
	/* room for 64 of the largest entry either list has (the driver's
	 * process info is at most 32 bytes, a utilization sample 32), so the
	 * timed call is the one gpuman makes: with a buffer, not a count only */
	static unsigned long long list[64 * 8];
	unsigned long long buf[8];
	unsigned u[2], n;
	double t0, init_ms, mem_ms, util_ms, procs_ms, putil_ms, query_ms;

	if (!dl) {
		fprintf(stderr, "nvmllatency: %s\n", dlerror());
		return 1;
	}
	*(void **)&init = dlsym(dl, "nvmlInit_v2");
	*(void **)&handle = dlsym(dl, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&memory = dlsym(dl, "nvmlDeviceGetMemoryInfo");
	*(void **)&util = dlsym(dl, "nvmlDeviceGetUtilizationRates");
	*(void **)&procs = dlsym(dl, "nvmlDeviceGetComputeRunningProcesses_v3");
	*(void **)&temp = dlsym(dl, "nvmlDeviceGetTemperature");
	*(void **)&putil = dlsym(dl, "nvmlDeviceGetProcessUtilization");
	if (!init || !handle || !memory || !util || !procs || !temp || !putil)
		return 1;
	t0 = now_ms();
	if (init() != 0 || handle(0, &dev) != 0)
		return 1;
	init_ms = now_ms() - t0;
#define TIME(out, call)                                                                            \
	for (int i = 0; i < N; i++) {                                                              \
		t0 = now_ms();                                                                     \
		(void)(call);                                                                      \
		t[i] = now_ms() - t0;                                                              \
	}                                                                                          \
	out = median()
	TIME(mem_ms, memory(dev, buf));
	TIME(util_ms, util(dev, u));
	TIME(procs_ms, (n = 64, procs(dev, &n, list)));
	TIME(putil_ms, (n = 64, putil(dev, list, &n, 0)));
	TIME(query_ms, temp(dev, 0, u));
	printf("\"latency\": { \"init_ms\": %.1f, \"memory_ms\": %.3f, \"utilization_ms\": %.3f, "
	       "\"processes_ms\": %.3f, \"process_utilization_ms\": %.3f, \"query_ms\": %.3f }\n",
	       init_ms, mem_ms, util_ms, procs_ms, putil_ms, query_ms);
	return 0;
}
