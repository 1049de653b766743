/*
 * native_gpu.c - how a native code (C, C++, or Fortran through a C shim)
 * gets a GPU from gpuman: lease one, make it the only GPU that CUDA can see,
 * hand device 0 to the kernels, release.
 *
 *   native_gpu [--mem SIZE] [--wait[=DURATION]] [--hold SECONDS]
 *
 * --mem shares a GPU (SIZE counted against its free memory) instead of
 * taking it whole; --wait queues for one, first come, first served (forever,
 * or DURATION such as 90s or 15m); --hold keeps the lease SECONDS after the
 * kernel, standing in for a long run.
 *
 * Exit status: 0 done; 2 usage; 75 no GPU can be had now (or within
 * --wait); 1 anything else (no driver, unusable state directory, failed
 * kernel).  Built by `make` as build/examples/native_gpu.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gpuman.h"

#define EXIT_USAGE 2
#define EXIT_UNAVAILABLE 75 /* EX_TEMPFAIL, as gpuman's own commands */

static const char usage_text[] =
    "usage: native_gpu [--mem SIZE] [--wait[=DURATION]] [--hold SECONDS]\n";

/*
 * Stands in for the code's real entry point.  A CUDA code would call
 * cudaSetDevice(device) and launch its kernels; the UUID is for its log, so
 * that a run can be traced to a physical card.
 */
static int run_kernel(int device, const char *uuid)
{
	printf("kernel: running on CUDA device %d, %s\n", device, uuid);
	return fflush(stdout) == 0 ? 0 : -1;
}

/* gm_acquire's detail ends in a newline when it lists GPUs; print it as one
 * message either way. */
static const char *chomp(char *s)
{
	size_t len = strlen(s);

	while (len && s[len - 1] == '\n')
		s[--len] = '\0';
	return s;
}

static int parse_seconds(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > 86400UL * 365)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {{"mem", required_argument, NULL, 'm'},
	                                         {"wait", optional_argument, NULL, 'w'},
	                                         {"hold", required_argument, NULL, 'H'},
	                                         {"help", no_argument, NULL, 'h'},
	                                         {0}};
	struct gm_context *ctx = NULL;
	struct gm_request *req;
	struct gm_lease *lease = NULL;
	/* gm_acquire's detail has a line per GPU: GM_ERRBUF_SIZE would cut it
	 * short on a machine with eight. */
	char err[GM_ERRBUF_SIZE * 16];
	unsigned hold_s = 0;
	enum gm_err rc = GM_OK;
	int status = EXIT_FAILURE, opt;

	req = gm_request_new();
	if (!req) {
		fprintf(stderr, "native_gpu: out of memory\n");
		return EXIT_FAILURE;
	}
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'm':
			rc = gm_request_set(req, "mem", optarg, err, sizeof err);
			break;
		case 'w':
			/* No DURATION (optarg NULL) means wait as long as it takes. */
			rc = gm_request_set(req, "wait", optarg, err, sizeof err);
			break;
		case 'H':
			if (parse_seconds(optarg, &hold_s) < 0) {
				fprintf(stderr,
				        "native_gpu: --hold '%s': not a number of seconds\n",
				        optarg);
				status = EXIT_USAGE;
				goto done;
			}
			break;
		case 'h':
			fputs(usage_text, stdout);
			status = EXIT_SUCCESS;
			goto done;
		default:
			fputs(usage_text, stderr);
			status = EXIT_USAGE;
			goto done;
		}
		if (rc != GM_OK) {
			fprintf(stderr, "native_gpu: %s\n", err);
			status = EXIT_USAGE;
			goto done;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "native_gpu: unexpected argument '%s'\n%s", argv[optind],
		        usage_text);
		status = EXIT_USAGE;
		goto done;
	}

	rc = gm_open(&ctx, err, sizeof err);
	if (rc != GM_OK) {
		fprintf(stderr, "native_gpu: %s%s\n", err,
		        rc == GM_ERR_NVML_LOAD ? " (is the NVIDIA driver installed?)" : "");
		goto done;
	}
	rc = gm_acquire(ctx, req, &lease, err, sizeof err);
	switch (rc) {
	case GM_OK:
		break;
	case GM_ERR_UNAVAILABLE:
	case GM_ERR_TIMEOUT:
	case GM_ERR_NEVER:
		fprintf(stderr, "native_gpu: %s\n%s", chomp(err),
		        rc == GM_ERR_UNAVAILABLE ? "native_gpu: add --wait to queue for a GPU\n"
		                                 : "");
		status = EXIT_UNAVAILABLE;
		goto done;
	default:
		fprintf(stderr, "native_gpu: %s\n", chomp(err));
		goto done;
	}

	/*
	 * CUDA reads CUDA_VISIBLE_DEVICES once, when the first CUDA call of the
	 * process initialises it, and from then on numbers only the GPUs listed
	 * there, from 0, in the list's order.  So set it here, before any CUDA
	 * call (libraries that touch CUDA in their constructors included), and
	 * the leased GPU is device 0.  Set later, it would be ignored and device
	 * numbers would count every GPU in CUDA's fastest-first order, which is
	 * not nvidia-smi's.  The value is full UUIDs (or, under a scheduler's
	 * allocation, its own entries), which no device order can misread.
	 * setenv copies the strings, so they outlive the lease.
	 */
	if (setenv("CUDA_VISIBLE_DEVICES", gm_lease_cuda_visible(lease), 1) < 0 ||
	    setenv("GPUMAN_GPUS", gm_lease_indices(lease), 1) < 0 ||
	    setenv("GPUMAN_LEASE", gm_lease_id(lease), 1) < 0) {
		perror("native_gpu: setenv");
		goto done;
	}
	printf("native_gpu: leased GPU %u (%s) as lease %s\n", gm_lease_gpu_index(lease, 0),
	       gm_lease_gpu_uuid(lease, 0), gm_lease_id(lease));
	if (run_kernel(0, gm_lease_gpu_uuid(lease, 0)) < 0) {
		fprintf(stderr, "native_gpu: the kernel failed\n");
		goto done;
	}
	/* sleep() returns early when a handled signal arrives; finish the time. */
	while (hold_s)
		hold_s = sleep(hold_s);
	status = EXIT_SUCCESS;
done:
	gm_lease_release(lease);
	gm_request_free(req);
	gm_close(ctx);
	return status;
}
