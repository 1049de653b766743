/*
 * inproc.c - in-process costs through the public API, on whatever NVML the
 * environment names (the simulator in `make bench`):
 *
 *   inproc snapshot N   median microseconds of one gm_snapshot_take
 *   inproc lease N      median microseconds of gm_acquire + gm_lease_release
 *   inproc wakeup N     wake-up latency: a holder releases (or is killed)
 *                       while another process waits; milliseconds from the
 *                       release to the waiter holding the GPU; prints
 *                       "release_median release_max kill_median kill_max"
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "gpuman.h"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static struct gm_context *open_ctx(void)
{
	struct gm_context *ctx;
	char err[GM_ERRBUF_SIZE];

	if (gm_open(&ctx, err, sizeof err) != GM_OK) {
		fprintf(stderr, "inproc: %s\n", err);
		exit(1);
	}
	return ctx;
}

static struct gm_lease *acquire(struct gm_context *ctx, int wait)
{
	struct gm_request *req = gm_request_new();
	struct gm_lease *lease = NULL;
	char err[GM_ERRBUF_SIZE];

	if (wait)
		gm_request_set(req, "wait", "30s", err, sizeof err);
	if (gm_acquire(ctx, req, &lease, err, sizeof err) != GM_OK) {
		fprintf(stderr, "inproc: %s\n", err);
		exit(1);
	}
	gm_request_free(req);
	return lease;
}

/*
 * One round: a child holds the only GPU while we queue for it.  300 ms later
 * the child releases it -- or a helper kills the child with SIGKILL -- and
 * stamps the time just before, through a pipe.  Returns milliseconds from
 * that stamp to our holding the GPU.
 */
static double wake_once(int kill_it)
{
	int stamp[2], ready[2];
	double event = 0, acquired;
	struct gm_context *ctx;
	struct gm_lease *lease;
	pid_t holder, killer = -1;
	char c;

	if (pipe(stamp) < 0 || pipe(ready) < 0)
		exit(1);
	holder = fork();
	if (holder == 0) {
		struct gm_lease *held = acquire(open_ctx(), 0);

		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		if (kill_it)
			for (;;)
				pause();
		usleep(300000);
		event = now_us();
		gm_lease_release(held);
		_exit(write(stamp[1], &event, sizeof event) == sizeof event ? 0 : 1);
	}
	if (read(ready[0], &c, 1) != 1)
		exit(1);
	if (kill_it) {
		killer = fork();
		if (killer == 0) {
			usleep(300000);
			event = now_us();
			kill(holder, SIGKILL);
			_exit(write(stamp[1], &event, sizeof event) == sizeof event ? 0 : 1);
		}
	}
	ctx = open_ctx();
	lease = acquire(ctx, 1);
	acquired = now_us();
	if (read(stamp[0], &event, sizeof event) != sizeof event)
		exit(1);
	gm_lease_release(lease);
	gm_close(ctx);
	waitpid(holder, NULL, 0);
	if (killer > 0)
		waitpid(killer, NULL, 0);
	close(stamp[0]);
	close(stamp[1]);
	close(ready[0]);
	close(ready[1]);
	return (acquired - event) / 1000.0;
}

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[2]) : 0;
	double *v;

	if (n <= 0) {
		fprintf(stderr, "usage: inproc snapshot|lease|wakeup N\n");
		return 2;
	}
	v = calloc((size_t)n * 2, sizeof *v);
	if (!strcmp(argv[1], "snapshot") || !strcmp(argv[1], "lease")) {
		struct gm_context *ctx = open_ctx();

		for (int i = 0; i < n; i++) {
			double t = now_us();

			if (argv[1][0] == 's') {
				struct gm_snapshot *snap;
				char err[GM_ERRBUF_SIZE];

				if (gm_snapshot_take(ctx, &snap, err, sizeof err) != GM_OK)
					return 1;
				gm_snapshot_free(snap);
			} else {
				gm_lease_release(acquire(ctx, 0));
			}
			v[i] = now_us() - t;
		}
		qsort(v, (size_t)n, sizeof *v, cmp);
		printf("%.1f\n", v[n / 2]);
		gm_close(ctx);
		return 0;
	}
	if (!strcmp(argv[1], "wakeup")) {
		for (int i = 0; i < n; i++) {
			v[i] = wake_once(0);
			v[n + i] = wake_once(1);
		}
		qsort(v, (size_t)n, sizeof *v, cmp);
		qsort(v + n, (size_t)n, sizeof *v, cmp);
		printf("%.2f %.2f %.2f %.2f\n", v[n / 2], v[n - 1], v[n + n / 2], v[2 * n - 1]);
		return 0;
	}
	fprintf(stderr, "usage: inproc snapshot|lease|wakeup N\n");
	return 2;
}
