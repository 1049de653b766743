/*
 * runtime.c - `runtime N CMD [ARG...]`: run a command N times (stdout to
 * /dev/null) and print the median and 90th percentile wall time of one whole
 * process, in microseconds: "median_us p90_us".  A benchmark helper with no
 * dependencies, so that whole-process costs compare fairly.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[1]) : 0, failed = 0;
	double *us;

	if (n <= 0) {
		fprintf(stderr, "usage: runtime N CMD [ARG...]\n");
		return 2;
	}
	us = calloc((size_t)n, sizeof *us);
	for (int i = 0; i < n; i++) {
		struct timespec a, b;
		int status;
		pid_t pid;

		clock_gettime(CLOCK_MONOTONIC, &a);
		pid = fork();
		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY);

			dup2(null, 1);
			execvp(argv[2], argv + 2);
			_exit(127);
		}
		waitpid(pid, &status, 0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
		us[i] = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
	}
	qsort(us, (size_t)n, sizeof *us, cmp);
	printf("%.0f %.0f\n", us[n / 2], us[n * 9 / 10]);
	if (failed)
		fprintf(stderr, "runtime: '%s' failed at least once\n", argv[2]);
	return failed;
}
