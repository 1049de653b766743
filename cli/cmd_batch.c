/*
 * cmd_batch.c - `gpuman batch [SELECT] [RESERVE] [BATCH] FILE|-`: run each
 * line of FILE as a task on GPUs as they free up, then say what ran where,
 * for how long and what it used.
 *
 * The tasks go into a job store in the log directory, and this process is
 * their dispatcher (the engine, engine.h): the store is what --resume reads,
 * and what a killed batch leaves for the next one.  What the Slurm batch
 * shares with it is in batch.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include "batch.h"
#include "cli.h"
#include "engine.h"
#include "jobs.h"
#include "gpuman-internal.h"
#include "safedir.h"
#include "select_help.h"

static void tally(const struct job *jobs, size_t n, const struct gm_snapshot *snap,
                  struct gpu_tally **out, size_t *count)
{
	struct gpu_tally *t = calloc(snap ? snap->gpu_count + 1 : 1, sizeof *t);
	size_t nt = 0;

	*out = t;
	*count = 0;
	if (!t || !snap)
		return;
	for (size_t k = 0; k < snap->gpu_count; k++) {
		t[nt].index = snap->gpus[k].index;
		str_copy(t[nt].name, sizeof t[nt].name, snap->gpus[k].name);
		str_copy(t[nt].uuid, sizeof t[nt].uuid, snap->gpus[k].uuid);
		nt++;
	}
	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];

		if (j->state != JOB_DONE || !j->gpus)
			continue;
		for (const char *p = j->gpus; *p;) {
			unsigned g = (unsigned)strtoul(p, NULL, 10);

			for (size_t k = 0; k < nt; k++)
				if (t[k].index == g) {
					t[k].tasks++;
					t[k].busy_ms += j->end_ms - j->start_ms;
				}
			p += strcspn(p, ",");
			p += *p == ',';
		}
	}
	*count = nt;
}

static int dry_run(struct cli *cli, const struct task *t, size_t n, const struct batch_opts *o,
                   const char *dir)
{
	char req[256], *json = engine_request_json(cli->req, cli->no_framework_env);

	snprintf(req, sizeof req, "%s", json ? json : "?");
	free(json);
	for (size_t i = 0; i < n; i++) {
		char *out = protocol_substitute(t[i].line, NULL, NULL, t[i].n);

		if (!out)
			return cli_error(cli, EXIT_FAIL, "out of memory");
		printf("%5lld  %s\n", (long long)t[i].n, out);
		free(out);
	}
	char most[32];

	if (o->jobs)
		snprintf(most, sizeof most, "%u", (unsigned)o->jobs);
	printf("%zu task%s; each asks %s; at most %s running; %u retr%s; logs in %s\n", n,
	       n == 1 ? "" : "s", req, o->jobs ? most : "as many as GPUs allow", o->retries,
	       o->retries == 1 ? "y" : "ies", dir);
	return EXIT_OK;
}

static int batch_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_OPTIONS, CLI_SELECT_OPTIONS, CLI_RESERVE_OPTIONS, BATCH_OPTIONS, {0}};
	struct batch_opts o = {0};
	struct task *tasks = NULL;
	size_t ntasks = 0, skipped = 0, njobs = 0, nt = 0;
	struct job *jobs = NULL;
	struct gpu_tally *t = NULL;
	struct jobstore *st = NULL;
	struct gm_context *ctx = NULL;
	struct registry *reg = NULL;
	struct gm_snapshot *snap = NULL;
	struct engine_config cfg;
	struct batch_bar prog = {0};
	enum engine_result res = ENGINE_ERROR;
	char dir[PATH_MAX], path[PATH_MAX + 64], runs[PATH_MAX + 64], err[GM_ERRBUF_SIZE];
	const char *file;
	int status, lock_fd = -1, dir_fd = -1;
	int64_t started, ended;
	FILE *f;

	if (batch_wants_slurm(argc, argv))
		return batch_slurm_exec(cli, &cmd_batch, argc, argv);
	status = cli_parse(cli, &cmd_batch, argc, argv, CLI_SELECT_SHORT "j:", longopts,
	                   batch_option, &o);
	if (status != CLI_CONTINUE)
		return status;
	if (optind + 1 != argc)
		return cli_usage(cli,
		                 optind >= argc ? "which task file? (gpuman batch FILE, or - for "
		                                  "stdin)"
		                                : "one task file only ('%s' is extra)",
		                 optind < argc ? argv[optind + 1] : "");
	if (cli->fallback_cpu)
		return cli_usage(cli, "--fallback cpu does not apply to batch");
	file = argv[optind];
	f = strcmp(file, "-") ? fopen(file, "r") : stdin;
	if (!f)
		return cli_usage(cli, "cannot read '%s': %s", file, strerror(errno));
	status = read_tasks(f, file, &tasks, &ntasks, err, sizeof err);
	if (f != stdin)
		fclose(f);
	if (status == -2) {
		status = cli_usage(cli, "%s", err);
		goto done;
	}
	if (status < 0) {
		status = cli_error(cli, EXIT_FAIL, "cannot read '%s': %s", file, strerror(errno));
		goto done;
	}
	if (o.log_dir) {
		snprintf(path, sizeof path, "%s", o.log_dir);
	} else {
		char copy[PATH_MAX];

		snprintf(copy, sizeof copy, "%s", file);
		snprintf(path, sizeof path, "gpuman-logs/%s",
		         strcmp(file, "-") ? basename(copy) : "stdin");
	}
	if (o.dry_run) {
		status = dry_run(cli, tasks, ntasks, &o, path);
		goto done;
	}
	if (!ntasks) {
		cli_error(cli, 0, "'%s' has no tasks (one command per line; # starts a comment)",
		          file);
		status = EXIT_OK;
		goto done;
	}
	/* Before any directory is made: a request that no GPU of this machine
	 * can ever meet ends here, as run's does, rather than wait for ever. */
	if (gm_open(&ctx, err, sizeof err) != GM_OK ||
	    registry_open(&reg, err, sizeof err) != GM_OK) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	status = cli_never_fits(cli, ctx, NULL, "no task was run");
	if (status != EXIT_OK)
		goto done;
	status = batch_open_dir(cli, path, o.log_dir ? 1 : 2, dir, sizeof dir, runs, sizeof runs,
	                        &dir_fd, &lock_fd, &st);
	if (status != EXIT_OK)
		goto done;
	status = prepare_store(cli, st, tasks, ntasks, &o, dir, dir_fd, &skipped);
	if (status != EXIT_OK)
		goto done;
	if (skipped)
		fprintf(stderr, "gpuman batch: --resume: %zu of %zu tasks already succeeded\n",
		        skipped, ntasks);

	prog.tty = isatty(STDERR_FILENO);
	prog.on = prog.tty || o.progress;
	prog.total = ntasks;
	prog.done0 = skipped;
	memset(&cfg, 0, sizeof cfg);
	cfg.store = st;
	cfg.run_dir = runs;
	cfg.log_dir = dir;
	cfg.ctx = ctx;
	cfg.reg = reg;
	cfg.batch = 1;
	cfg.request = cli->req;
	cfg.no_framework_env = cli->no_framework_env;
	cfg.max_running = o.jobs;
	cfg.requeue_dead = o.resume;
	cfg.dispatcher_lock_fd = -1;
	cfg.progress = batch_progress;
	cfg.progress_data = &prog;
	cfg.blocked = batch_blocked;
	cfg.blocked_data = &prog;
	started = now_ms();
	res = engine_run(&cfg, err, sizeof err);
	ended = now_ms();
	batch_progress_end(&prog, st, ended - started);
	if (res == ENGINE_ERROR)
		cli_error(cli, 0, "%s", err);

	if (jobstore_list(st, -1, 0, 0, &jobs, &njobs, err, sizeof err) != GM_OK) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	if (snapshot_take(ctx, 0, 0, &snap, err, sizeof err) != GM_OK)
		snap = NULL;
	cli_note_mig_gpus(cli, "batch", snap);
	tally(jobs, njobs, snap, &t, &nt);
	snprintf(path, sizeof path, "%s/summary.json", dir);
	if (write_summary(path, strcmp(file, "-") ? file : "-", dir, jobs, njobs, t, nt, started,
	                  ended) < 0)
		cli_error(cli, 0, "warning: cannot write '%s'", path);
	if (cli->json) {
		json_t *sum = json_load_file(path, 0, NULL);

		if (sum)
			cli_print_json(sum);
	} else {
		print_summary(cli, jobs, njobs, t, nt);
	}
	{
		size_t c[JOB_STATE_COUNT] = {0};

		for (size_t i = 0; i < njobs; i++)
			c[jobs[i].state]++;
		FILE *out = cli->json ? stderr : stdout;

		fprintf(out, "%s%zu task%s: %zu done", cli->json ? "gpuman batch: " : "\n", njobs,
		        njobs == 1 ? "" : "s", c[JOB_DONE]);
		if (c[JOB_FAILED])
			fprintf(out, ", %s%zu failed%s", c_red(cli), c[JOB_FAILED], c_reset(cli));
		if (c[JOB_INTERRUPTED])
			fprintf(out, ", %zu interrupted", c[JOB_INTERRUPTED]);
		if (c[JOB_QUEUED] + c[JOB_RUNNING])
			fprintf(out, ", %zu not run", c[JOB_QUEUED] + c[JOB_RUNNING]);
		if (skipped)
			fprintf(out, " (%zu from an earlier run)", skipped);
		fmt_duration(path, sizeof path, ended - started);
		fprintf(out, ", in %s; logs and summary.json in %s\n", path, dir);
		status = c[JOB_DONE] == njobs ? EXIT_OK : EXIT_FAIL;
	}
	if (res == ENGINE_INTERRUPTED)
		status = 128 + SIGINT;
	else if (res == ENGINE_ERROR)
		status = EXIT_FAIL;
done:
	free(t);
	gm_snapshot_free(snap);
	jobstore_free_list(jobs, njobs);
	jobstore_close(st);
	registry_close(reg);
	gm_close(ctx);
	tasks_free(tasks, ntasks);
	if (lock_fd >= 0)
		close(lock_fd);
	if (dir_fd >= 0)
		close(dir_fd);
	return status;
}

const struct cmd_entry cmd_batch = {
    "batch",
    "run the lines of a file as tasks on GPUs as they free up",
    "usage: gpuman batch [SELECT] [RESERVE] [BATCH] FILE|-\n"
    "\n"
    "Each non-empty line of FILE (- reads stdin) that does not start with # is a\n"
    "task: a command line, run as /bin/sh -c would run it (a plain one without\n"
    "starting a shell).  A line that cannot run as written (a quote left open,\n"
    "{gpus} or {Task} for a placeholder, NUL or control bytes) is refused before\n"
    "any task runs, naming the file and line.\n"
    "\n"
    "Tasks start in file order as soon as GPUs that fit are free: GPUs are\n"
    "leased as 'gpuman run' leases them, so other users and their jobs\n"
    "are respected, and a fast GPU simply takes more tasks than a slow one.  Near\n"
    "the end, a slow GPU is left idle when a faster one, by the durations measured\n"
    "so far, will finish the task sooner.\n"
    "\n"
    "In a line, {gpu} becomes the task's GPUs (NVML indices, comma separated),\n"
    "{uuid} their UUIDs, {task} the task's number (1 for the first task).  Each\n"
    "task also gets CUDA_VISIBLE_DEVICES, GPUMAN_GPUS, GPUMAN_LEASE and GPUMAN_TASK.\n"
    "\n"
    "A task that fails with a CUDA out-of-memory error is requeued (up to 3 times)\n"
    "for a GPU with more free memory than the one it ran out of, and that GPU\n"
    "gets no further task of the batch until it has more free memory than then.\n"
    "\n"
    "batch:\n"
    "  -j, --jobs N       at most N tasks at once (default: as many as GPUs allow)\n"
    "  --retries N        run a failed task again, up to N times (default 0)\n"
    "  --log-dir DIR      task-N.log (stdout and stderr), summary.json and the\n"
    "                     task store (default gpuman-logs/<FILE's name or stdin>);\n"
    "                     private (0700, logs 0600), refused if another user owns\n"
    "                     or can write it or a directory on the way; the logs of\n"
    "                     tasks that run again are kept in DIR/run-<time>/\n"
    "  --resume           run only the tasks that have not succeeded yet (same\n"
    "                     number, same line) in an earlier run with this log dir\n"
    "  --dry-run          print the tasks and what they ask; run nothing\n"
    "  --progress         the progress line even when stderr is not a terminal\n"
    "  --json             the summary as JSON (as summary.json) instead of the table\n"
    "\n" SELECT_HELP "\n"
    "reserve (per task):\n"
    "  --exclusive        nobody else is placed on the GPU (default)\n"
    "  --mem SIZE         share the GPU: SIZE counts against its free memory\n"
    "  --idle             only GPUs with no process at all\n"
    "  --no-framework-env with --mem: no framework memory variables\n"
    "Tasks always wait for their GPUs; --wait is accepted and changes nothing.\n"
    "\n"
    "On a terminal a progress line shows done, running, failed and queued tasks\n"
    "and an ETA.  At the end, a summary: per task its state, GPUs, duration, peak\n"
    "GPU memory and mean GPU utilization (sampled once a second from NVML; '-' for\n"
    "tasks shorter than a sample), then per GPU the tasks it ran and its busy time.\n"
    "Ctrl-C stops launching and sends SIGTERM to the running tasks, which are\n"
    "recorded as interrupted; a second Ctrl-C kills them.  A task ends whole:\n"
    "whatever it left running is killed before it is recorded.\n"
    "\n"
    "Exit status: 0 every task succeeded, 1 some did not, 2 usage, 75 no GPU of\n"
    "this machine can ever meet the request (before any log directory is made),\n"
    "130 Ctrl-C.\n"
    "\n"
    "Slurm (see gpuman-batch(1)): --slurm runs the tasks as srun steps in a Slurm\n"
    "allocation, which gpuman makes with salloc (-N N, -p PARTITION, -A ACCOUNT,\n"
    "-t TIME, -C CONSTRAINT, --qos Q, --gres gpu[:TYPE]:N per node, --salloc-arg\n"
    "ARG) or, inside one (salloc's shell, an sbatch script), uses; plain batch\n"
    "inside a multi-node allocation does the same.  Without -N or --gres, the\n"
    "allocation is the partition's idle GPUs, up to one per task, on the nodes\n"
    "that have them (said on stderr; one GPU, waited for, when none is idle).\n"
    "--srun-arg ARG and\n"
    "--task-time T go to every step.  A task out of memory is requeued for\n"
    "another GPU type of the allocation; one killed by a node failure or\n"
    "preemption runs again.\n"
    "\n"
    "examples:\n"
    "  gpuman batch sweep.txt\n"
    "  gpuman batch -n 2 --min-free 20G --retries 1 sweep.txt\n"
    "  seq 100 | sed 's/.*/python shot.py --shot & --gpu {gpu}/' | gpuman batch -\n"
    "  gpuman batch --slurm -N 4 --gres=gpu:a100:2,gpu:t4:2 -t 2:00:00 sweep.txt\n",
    batch_exec,
    NULL,
};
