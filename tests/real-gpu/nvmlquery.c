/*
 * nvmlquery.c - the bare C NVML query the real-GPU check times gpuman
 * against: dlopen the driver's library, init, and for every GPU its
 * handle, memory and utilization; print one line per GPU.  Its own
 * declarations, like lib/nvml.c (no nvml.h needed).
 */
#include <dlfcn.h>
#include <stdio.h>

struct mem { unsigned long long total, free, used; };
struct util { unsigned gpu, memory; };

int main(void)
{
	void *dl = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	int (*init)(void), (*count)(unsigned *), (*handle)(unsigned, void **);
	int (*memory)(void *, struct mem *), (*utilization)(void *, struct util *);
	unsigned n = 0;

	if (!dl) {
		fprintf(stderr, "nvmlquery: %s\n", dlerror());
		return 1;
	}
	*(void **)&init = dlsym(dl, "nvmlInit_v2");
	*(void **)&count = dlsym(dl, "nvmlDeviceGetCount_v2");
	*(void **)&handle = dlsym(dl, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&memory = dlsym(dl, "nvmlDeviceGetMemoryInfo");
	*(void **)&utilization = dlsym(dl, "nvmlDeviceGetUtilizationRates");
	if (!init || init() != 0 || count(&n) != 0)
		return 1;
	for (unsigned i = 0; i < n; i++) {
		void *dev;
		struct mem m = {0, 0, 0};
		struct util u = {0, 0};

		if (handle(i, &dev) != 0)
			continue;
		memory(dev, &m);
		utilization(dev, &u);
		printf("%u %llu %u\n", i, m.free >> 20, u.gpu);
	}
	return 0;
}
