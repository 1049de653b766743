/*
 * httpload.c - a small HTTP/1.1 load generator for bench/serve.sh: C
 * connections, each on its own thread with keep-alive, N GET requests of
 * one path in all.  Prints "REQ_PER_S MEDIAN_US P99_US FAILED".
 *
 *   httpload HOST PORT PATH CONNECTIONS REQUESTS
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct worker {
	pthread_t tid;
	struct sockaddr_in addr;
	const char *path;
	int count;
	double *lat_us;
	int failed;
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int dial(const struct sockaddr_in *addr)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, (const struct sockaddr *)addr, sizeof *addr) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* One request on fd: 0 when a whole 200 answer came back. */
static int one(int fd, const char *req, size_t req_len)
{
	static __thread char buf[1 << 20];
	size_t have = 0, want = 0;
	char *end;

	if (write(fd, req, req_len) != (ssize_t)req_len)
		return -1;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);

		if (n <= 0)
			return -1;
		have += (size_t)n;
		buf[have] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if (end && !want) {
			char *cl = strcasestr(buf, "Content-Length:");

			if (!cl || strncmp(buf, "HTTP/1.1 200", 12))
				return -1;
			want = (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10);
		}
		if (want && have >= want)
			return 0;
		if (have >= sizeof buf - 1)
			return -1;
	}
}

static void *run(void *arg)
{
	struct worker *w = arg;
	char req[512];
	int len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: bench\r\n\r\n", w->path);
	int fd = dial(&w->addr);

	for (int i = 0; i < w->count; i++) {
		double t0 = now_us();

		if (fd < 0 || one(fd, req, (size_t)len) < 0) {
			w->failed++;
			if (fd >= 0)
				close(fd);
			fd = dial(&w->addr);
			w->lat_us[i] = -1;
			continue;
		}
		w->lat_us[i] = now_us() - t0;
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct worker *w;
	double *all, t0, secs;
	int conns, total, per, n = 0, failed = 0;

	if (argc != 6) {
		fprintf(stderr, "usage: httpload HOST PORT PATH CONNECTIONS REQUESTS\n");
		return 2;
	}
	conns = atoi(argv[4]);
	total = atoi(argv[5]);
	if (conns < 1 || total < conns) {
		fprintf(stderr, "httpload: CONNECTIONS >= 1 and REQUESTS >= CONNECTIONS\n");
		return 2;
	}
	per = total / conns;
	w = calloc((size_t)conns, sizeof *w);
	all = calloc((size_t)(per * conns), sizeof *all);
	if (!w || !all)
		return 1;
	t0 = now_us();
	for (int i = 0; i < conns; i++) {
		w[i].addr.sin_family = AF_INET;
		w[i].addr.sin_port = htons((unsigned short)atoi(argv[2]));
		inet_pton(AF_INET, argv[1], &w[i].addr.sin_addr);
		w[i].path = argv[3];
		w[i].count = per;
		w[i].lat_us = all + (size_t)i * per;
		pthread_create(&w[i].tid, NULL, run, &w[i]);
	}
	for (int i = 0; i < conns; i++) {
		pthread_join(w[i].tid, NULL);
		failed += w[i].failed;
	}
	secs = (now_us() - t0) / 1e6;
	for (int i = 0; i < per * conns; i++)
		if (all[i] >= 0)
			all[n++] = all[i];
	qsort(all, (size_t)n, sizeof *all, cmp);
	printf("%.0f %.0f %.0f %d\n", (per * conns - failed) / secs, n ? all[n / 2] : -1.0,
	       n ? all[n * 99 / 100] : -1.0, failed);
	return failed ? 1 : 0;
}
