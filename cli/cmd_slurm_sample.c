/*
 * cmd_slurm_sample.c - `gpuman slurm-sample PID FILE` (not listed): run by
 * each Slurm step of `batch --slurm` (engine/slurm.c's wrapper) beside its
 * task, on the task's node.  Every second it reads NVML there as the local
 * engine does (engine/record.c): the GPU memory the processes of PID's tree
 * hold on the step's GPUs (their sum, the peak kept) and the mean
 * utilization of those GPUs while the task has a process on them.  After
 * each sample it replaces FILE with one line "PEAK|- SAMPLES UTIL_SUM",
 * which gpuman reads when the step ends.
 *
 * Why measured here rather than asked of sacct: Slurm reports GPU memory
 * and utilization only with its NVML plugin (gpu/nvml, not in Debian's
 * build) and a database (slurmdbd), gathers every 30 s by default, and
 * gpuman would have to poll the controller for every task; the step can
 * read the same NVML figures the local batch reads, at the same rate.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cli.h"

#define SAMPLE_MS 1000 /* as the local engine's tick (engine/internal.h) */
#define FIRST_MS 200   /* short tasks still get a sample */

struct usage {
	int has_peak;
	long long peak;
	int samples;
	double util_sum;
};

/* The step's GPUs (NVML indices) from its CUDA_VISIBLE_DEVICES and Slurm's
 * list, as pick reads them; 0 when it names none (then: the GPUs the task's
 * processes are on). */
static size_t step_gpus(const struct gm_snapshot *snap, unsigned *gpus, size_t cap)
{
	struct pick_env env;
	size_t n = 0;

	if (pick_env_init(&env, snap) < 0)
		return 0;
	for (size_t i = 0; i < env.usable_entries && n < cap; i++)
		if (env.entry_gpu[i] >= 0 && (size_t)env.entry_gpu[i] < snap->gpu_count)
			gpus[n++] = snap->gpus[env.entry_gpu[i]].index;
	pick_env_release(&env);
	return n;
}

static int listed(const unsigned *gpus, size_t n, unsigned gpu)
{
	for (size_t i = 0; i < n; i++)
		if (gpus[i] == gpu)
			return 1;
	return 0;
}

static void sample(const struct gm_snapshot *snap, int pid, const unsigned *gpus, size_t ngpu,
                   struct usage *u)
{
	struct proctree tree = PROCTREE_INIT;
	unsigned long long mem = 0, util = 0;
	unsigned on[64];
	size_t non = 0, nutil = 0;
	int seen = 0, has_mem = 0;

	if (proctree_read(&tree) < 0)
		return;
	for (size_t p = 0; p < snap->proc_count; p++) {
		const struct gm_proc *pr = &snap->procs[p];

		if ((ngpu && !listed(gpus, ngpu, pr->gpu)) ||
		    !proctree_within(&tree, pid, (int)pr->pid))
			continue;
		seen = 1;
		if (pr->has_mem) {
			has_mem = 1;
			mem += pr->used_mib;
		}
		if (!listed(on, non, pr->gpu) && non < sizeof on / sizeof on[0])
			on[non++] = pr->gpu;
	}
	proctree_release(&tree);
	if (!seen)
		return;
	for (size_t k = 0; k < snap->gpu_count; k++) {
		const struct gm_gpu *g = &snap->gpus[k];

		if (listed(ngpu ? gpus : on, ngpu ? ngpu : non, g->index) &&
		    (g->valid & GM_HAS_UTIL)) {
			util += g->util_gpu_pct;
			nutil++;
		}
	}
	if (has_mem && (!u->has_peak || (long long)mem > u->peak)) {
		u->has_peak = 1;
		u->peak = (long long)mem;
	}
	if (nutil) {
		u->util_sum += (double)util / (double)nutil;
		u->samples++;
	}
}

/* FILE replaced whole (a reader never sees half a line), private. */
static void save(const char *path, const struct usage *u)
{
	char tmp[PATH_MAX + 8], line[96];
	int fd, len;

	if (u->has_peak)
		len =
		    snprintf(line, sizeof line, "%lld %d %.3f\n", u->peak, u->samples, u->util_sum);
	else
		len = snprintf(line, sizeof line, "- %d %.3f\n", u->samples, u->util_sum);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)len) == len && close(fd) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
}

static volatile sig_atomic_t stopped;

static void on_term(int sig)
{
	(void)sig;
	stopped = 1;
}

static int sample_exec(struct cli *cli, int argc, char **argv)
{
	struct sigaction sa;
	struct gm_context *ctx = NULL;
	struct usage u = {0};
	unsigned gpus[64];
	size_t ngpu = 0;
	char err[GM_ERRBUF_SIZE];
	int pid, first = 1;

	if (argc != 3 || (pid = atoi(argv[1])) <= 0)
		return cli_usage(cli, "usage: gpuman slurm-sample PID FILE");
	/* the wrapper's SIGTERM when the task ends: a quiet exit (no
	 * "Terminated" from its shell in the task's log) */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	if (gm_open(&ctx, err, sizeof err) != GM_OK)
		return cli_error(cli, EXIT_FAIL, "%s", err);
	/* until the step's wrapper (pid) ends, or it stops us */
	while (!stopped && (kill(pid, 0) == 0 || errno == EPERM)) {
		long ms = first ? FIRST_MS : SAMPLE_MS;
		struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
		struct gm_snapshot *snap;

		nanosleep(&ts, NULL);
		if (stopped)
			break;
		if (snapshot_take(ctx, 0, 0, &snap, err, sizeof err) != GM_OK)
			continue;
		if (first)
			ngpu = step_gpus(snap, gpus, sizeof gpus / sizeof gpus[0]);
		first = 0;
		sample(snap, pid, gpus, ngpu, &u);
		gm_snapshot_free(snap);
		save(argv[2], &u);
	}
	gm_close(ctx);
	return EXIT_OK;
}

const struct cmd_entry cmd_slurm_sample = {
    "slurm-sample",
    NULL,
    "usage: gpuman slurm-sample PID FILE\n"
    "\n"
    "Run by each Slurm step of 'gpuman batch --slurm' beside its task: samples\n"
    "every second the GPU memory and utilization of PID's processes on the\n"
    "step's GPUs and keeps 'PEAK|- SAMPLES UTIL_SUM' in FILE.\n",
    sample_exec,
    NULL,
};
