/*
 * cmd_batch_slurm.c - `gpuman batch --slurm [SLURM-OPTIONS] FILE`: the task
 * file of `gpuman batch`, run across the nodes of a Slurm allocation.
 *
 * One allocation (made here with salloc --no-shell, or the one gpuman runs
 * in), and each task an `srun --exact` step in it, started when a GPU of
 * the allocation is free: measured on the test cluster, a step starts in
 * 0.05-0.1 s while each wave of a job array waits for a scheduler cycle
 * (1 s tuned, 3 s by default), and gpuman, the parent of every srun, knows
 * each task's end at once without polling the controller.  The task file,
 * placeholders, log directory, task store (--resume) and summary are those
 * of the local batch (batch.h), and the tasks run through the same engine
 * (engine.h): its Slurm placement (engine/slurm.c) starts the steps and
 * judges their ends.  Here: the Slurm options, the allocation, and the
 * summary's nodes.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "batch.h"
#include "jobs.h"
#include "gpuman-internal.h"
#include "protocol.h"
#include "submit_slurm.h"

enum {
	OPT_SLURM = OPT_BATCH_END + 1,
	OPT_PARTITION,
	OPT_ACCOUNT,
	OPT_TIME,
	OPT_CONSTRAINT,
	OPT_QOS,
	OPT_GRES,
	OPT_NODES,
	OPT_SALLOC_ARG,
	OPT_SRUN_ARG,
	OPT_TASK_TIME
};

#define MAX_ARGS 48

struct slurm_opts {
	struct batch_opts b;
	char *alloc[MAX_ARGS]; /* salloc options: -N, -p, ... (owned) */
	size_t nalloc;
	char *step[MAX_ARGS]; /* extra srun options (owned) */
	size_t nstep;
	const char *gres; /* --gres per node, for --ntasks-per-node */
	const char *partition;
	int nodes_given;
};

static int add_arg(struct cli *cli, char **list, size_t *n, const char *fmt, const char *arg)
{
	char buf[1024];

	if (*n >= MAX_ARGS - 1)
		return cli_usage(cli, "too many Slurm options");
	snprintf(buf, sizeof buf, fmt, arg);
	if (!(list[(*n)++] = strdup(buf)))
		return cli_error(cli, EXIT_FAIL, "out of memory");
	return CLI_CONTINUE;
}

static int slurm_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct slurm_opts *o = data;
	int rc = batch_option(cli, opt, arg, &o->b);

	if (rc != -1)
		return rc;
	switch (opt) {
	case OPT_SLURM:
		return CLI_CONTINUE;
	case 'N':
	case OPT_NODES:
		o->nodes_given = 1;
		return add_arg(cli, o->alloc, &o->nalloc, "--nodes=%s", arg);
	case 'p':
	case OPT_PARTITION:
		o->partition = arg;
		return add_arg(cli, o->alloc, &o->nalloc, "--partition=%s", arg);
	case 'A':
	case OPT_ACCOUNT:
		return add_arg(cli, o->alloc, &o->nalloc, "--account=%s", arg);
	case 't':
	case OPT_TIME:
		return add_arg(cli, o->alloc, &o->nalloc, "--time=%s", arg);
	case 'C':
	case OPT_CONSTRAINT:
		return add_arg(cli, o->alloc, &o->nalloc, "--constraint=%s", arg);
	case OPT_QOS:
		return add_arg(cli, o->alloc, &o->nalloc, "--qos=%s", arg);
	case OPT_GRES:
		if (strncmp(arg, "gpu", 3))
			return cli_usage(cli,
			                 "--gres '%s': gpuman asks for GPUs (gpu:N or "
			                 "gpu:TYPE:N per node, several joined by commas)",
			                 arg);
		o->gres = arg;
		return add_arg(cli, o->alloc, &o->nalloc, "--gres=%s", arg);
	case OPT_SALLOC_ARG:
		return add_arg(cli, o->alloc, &o->nalloc, "%s", arg);
	case OPT_SRUN_ARG:
		return add_arg(cli, o->step, &o->nstep, "%s", arg);
	case OPT_TASK_TIME:
		return add_arg(cli, o->step, &o->nstep, "--time=%s", arg);
	}
	return -1;
}

/* Per node and GPU: the tasks it ran and its busy time. */
static void node_table(struct cli *cli, const struct job *jobs, size_t n, json_t *out)
{
	struct row {
		char where[160];
		size_t tasks;
		int64_t busy_ms;
	} *rows = calloc(n + 1, sizeof *rows);
	size_t nr = 0;
	char dur[32], where[160];

	if (!rows)
		return;
	for (size_t i = 0; i < n; i++) {
		size_t k;

		if (jobs[i].state != JOB_DONE || !jobs[i].gpus)
			continue;
		job_where(&jobs[i], where, sizeof where);
		for (k = 0; k < nr && strcmp(rows[k].where, where); k++)
			;
		if (k == nr)
			snprintf(rows[nr++].where, sizeof rows[0].where, "%s", where);
		rows[k].tasks++;
		rows[k].busy_ms += jobs[i].end_ms - jobs[i].start_ms;
	}
	if (!out && nr)
		printf("\n%s%-16s %6s %9s%s\n", c_bold(cli), "NODE:GPU", "TASKS", "BUSY",
		       c_reset(cli));
	for (size_t k = 0; k < nr; k++) {
		if (out) {
			json_t *g = json_object();
			char *colon = strrchr(rows[k].where, ':');

			json_object_set_new(
			    g, "node",
			    json_stringn(rows[k].where, colon ? (size_t)(colon - rows[k].where)
			                                      : strlen(rows[k].where)));
			json_object_set_new(g, "gpus", json_string(colon ? colon + 1 : ""));
			json_object_set_new(g, "tasks", json_integer((json_int_t)rows[k].tasks));
			json_object_set_new(g, "busy_ms", json_integer(rows[k].busy_ms));
			json_array_append_new(out, g);
		} else {
			printf("%-16s %6zu %9s\n", rows[k].where, rows[k].tasks,
			       fmt_duration(dur, sizeof dur, rows[k].busy_ms));
		}
	}
	free(rows);
}

/* Tasks of a store written before nodes had their column ("n1:2,3" in
 * gpus): their "node" and "gpus" from that. */
static void task_nodes(json_t *tasks, const struct job *jobs, size_t n)
{
	for (size_t i = 0; i < n && i < json_array_size(tasks); i++) {
		json_t *t = json_array_get(tasks, i), *gpus;
		const char *w = jobs[i].gpus, *colon = w ? strrchr(w, ':') : NULL;

		if (jobs[i].node || !colon)
			continue;
		gpus = json_array();
		json_object_set_new(t, "node", json_stringn(w, (size_t)(colon - w)));
		for (const char *p = colon + 1; *p && *p != '-';) {
			json_t *g = json_object();

			json_object_set_new(g, "index", json_integer(strtol(p, NULL, 10)));
			json_array_append_new(gpus, g);
			p += strcspn(p, ",");
			p += *p == ',';
		}
		json_object_set_new(t, "gpus", gpus);
	}
}

/* Inside an allocation (salloc's shell, an sbatch script) but not in a
 * step of it, on several nodes or none of them: the tasks go to Slurm. */
int batch_in_allocation(void)
{
	const char *job = getenv("SLURM_JOB_ID"), *nodes = getenv("SLURM_JOB_NUM_NODES");
	const char *off = getenv("GPUMAN_SLURM");

	if (!job || !*job || getenv("SLURM_STEP_ID") || (off && !strcmp(off, "0")))
		return 0;
	return (nodes && strtoul(nodes, NULL, 10) > 1) || !getenv("SLURMD_NODENAME");
}

int batch_wants_slurm(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--slurm"))
			return 1;
	return batch_in_allocation();
}

static int usage_checks(struct cli *cli, const struct task *t, size_t n)
{
	int rc = slurm_request_check(cli, 1); /* -n: GPUs per task */

	for (size_t i = 0; rc == CLI_CONTINUE && i < n; i++)
		if (strstr(t[i].line, "{uuid}"))
			rc = cli_usage(cli,
			               "task %lld uses {uuid}, which Slurm does not tell a "
			               "step; use {gpu} (the GPUs' indices on their node)",
			               (long long)t[i].n);
	return rc;
}

static unsigned request_gpus(struct cli *cli)
{
	char *json = engine_request_json(cli->req, cli->no_framework_env);
	json_t *o = json ? json_loads(json, 0, NULL) : NULL;
	unsigned n = 1;

	free(json);
	if (json_is_string(json_object_get(o, "n")))
		n = (unsigned)strtoul(json_string_value(json_object_get(o, "n")), NULL, 10);
	json_decref(o);
	return n ? n : 1;
}

/*
 * A sweep given no size (no -N, no --gres): the partition's idle GPUs, up
 * to one per task, on the nodes that have them (--nodelist), rather than
 * one GPU of one node; said on stderr.  When none is idle, one GPU, which
 * salloc waits for.  Adds the salloc options; CLI_CONTINUE or a status.
 */
static int spread_size(struct cli *cli, struct slurm_opts *o, size_t ntasks, unsigned per_task)
{
	struct slurm_node_free *nodes = calloc(SLURM_MAX_NODES, sizeof *nodes);
	char part[128], list[1024] = "", num[24], err[GM_ERRBUF_SIZE];
	unsigned k = 0, each = 0, want = (unsigned)(ntasks < 65536 ? ntasks : 65536) * per_task;
	size_t count = 0, used = 0;
	int rc = CLI_CONTINUE, typed = 1;

	if (!nodes)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	if (slurm_idle_gpus(o->partition, part, sizeof part, nodes, SLURM_MAX_NODES, &count, err,
	                    sizeof err) < 0) {
		rc = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	if (slurm_spread(nodes, count, want, per_task, &k, &each) < 0) {
		fprintf(stderr,
		        "gpuman batch: no size given, and no GPU of partition %s is idle now: "
		        "asking for one node with %u GPU%s (salloc waits for it)\n",
		        part, per_task, per_task == 1 ? "" : "s");
		snprintf(num, sizeof num, "%u", per_task);
		rc = add_arg(cli, o->alloc, &o->nalloc, "--gres=gpu:%s", num);
		if (rc == CLI_CONTINUE)
			rc = add_arg(cli, o->alloc, &o->nalloc, "--ntasks-per-node=%s", num);
		goto done;
	}
	for (unsigned i = 0; i < k && used < sizeof list; i++)
		used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? "," : "",
		                         nodes[i].name);
	fprintf(stderr,
	        "gpuman batch: no size given: taking idle GPUs of partition %s: %u node%s (%s) x "
	        "%u GPU%s for %zu task%s (-N and --gres say otherwise)\n",
	        part, k, k == 1 ? "" : "s", list, each, each == 1 ? "" : "s", ntasks,
	        ntasks == 1 ? "" : "s");
	snprintf(num, sizeof num, "%u", k);
	rc = add_arg(cli, o->alloc, &o->nalloc, "--nodes=%s", num);
	if (rc == CLI_CONTINUE)
		rc = add_arg(cli, o->alloc, &o->nalloc, "--nodelist=%s", list);
	if (rc == CLI_CONTINUE && !o->partition)
		rc = add_arg(cli, o->alloc, &o->nalloc, "--partition=%s", part);
	snprintf(num, sizeof num, "%u", each);
	/* Whole nodes of one make-up: ask by type (gpu:a100:2,gpu:t4:2), so
	 * that steps are started per type, as with --gres given so (a fast
	 * type takes more tasks; a task out of memory moves to another). */
	for (unsigned i = 0; i < k && typed; i++)
		typed = nodes[i].gpus == nodes[i].total && each == nodes[i].total &&
		        !strcmp(nodes[i].gres, nodes[0].gres) && slurm_typed_request(nodes[i].gres);
	if (rc == CLI_CONTINUE)
		rc = typed ? add_arg(cli, o->alloc, &o->nalloc, "--gres=%s", nodes[0].gres)
		           : add_arg(cli, o->alloc, &o->nalloc, "--gres=gpu:%s", num);
	if (rc == CLI_CONTINUE)
		rc = add_arg(cli, o->alloc, &o->nalloc, "--ntasks-per-node=%s", num);
done:
	free(nodes);
	return rc;
}

int batch_slurm_exec(struct cli *cli, const struct cmd_entry *cmd, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_OPTIONS,
	    CLI_SELECT_OPTIONS,
	    CLI_RESERVE_OPTIONS,
	    BATCH_OPTIONS,
	    {"slurm", no_argument, NULL, OPT_SLURM},
	    {"nodes", required_argument, NULL, OPT_NODES},
	    {"partition", required_argument, NULL, OPT_PARTITION},
	    {"account", required_argument, NULL, OPT_ACCOUNT},
	    {"time", required_argument, NULL, OPT_TIME},
	    {"constraint", required_argument, NULL, OPT_CONSTRAINT},
	    {"qos", required_argument, NULL, OPT_QOS},
	    {"gres", required_argument, NULL, OPT_GRES},
	    {"salloc-arg", required_argument, NULL, OPT_SALLOC_ARG},
	    {"srun-arg", required_argument, NULL, OPT_SRUN_ARG},
	    {"task-time", required_argument, NULL, OPT_TASK_TIME},
	    {0}};
	struct slurm_opts o;
	struct slurm_alloc alloc = SLURM_ALLOC_INIT;
	struct engine_slurm sl;
	struct engine_config cfg;
	struct jobstore *st = NULL;
	enum engine_result res = ENGINE_ERROR;
	unsigned per_task;
	struct task *tasks = NULL;
	size_t ntasks = 0, skipped = 0;
	struct batch_bar prog = {0};
	char dir[PATH_MAX], path[PATH_MAX + 64], runs[PATH_MAX + 64], err[GM_ERRBUF_SIZE], tpn[48];
	const char *file;
	sigset_t mask, old;
	int status, lock_fd = -1, dir_fd = -1, have_alloc = 0, adopt, spread;
	int64_t started, ended;
	FILE *f;

	memset(&o, 0, sizeof o);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, &old);
	/* A shell starts background commands with SIGINT ignored, and an
	 * ignored signal never reaches the signalfd: Ctrl-C (kill -INT) must
	 * still stop the batch and cancel what it submitted. */
	signal(SIGINT, SIG_DFL);
	status = cli_parse(cli, cmd, argc, argv, CLI_SELECT_SHORT "j:N:p:A:t:C:", longopts,
	                   slurm_option, &o);
	if (status != CLI_CONTINUE)
		goto done;
	if (optind + 1 != argc) {
		status =
		    cli_usage(cli, "which task file? (gpuman batch --slurm [SLURM-OPTIONS] FILE)");
		goto done;
	}
	if (cli->fallback_cpu) {
		status = cli_usage(cli, "--fallback cpu does not apply to batch");
		goto done;
	}
	file = argv[optind];
	f = strcmp(file, "-") ? fopen(file, "r") : stdin;
	if (!f) {
		status = cli_usage(cli, "cannot read '%s': %s", file, strerror(errno));
		goto done;
	}
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
	if ((status = usage_checks(cli, tasks, ntasks)) != CLI_CONTINUE)
		goto done;
	per_task = request_gpus(cli);
	if (o.b.log_dir) {
		snprintf(path, sizeof path, "%s", o.b.log_dir);
	} else {
		char copy[PATH_MAX];

		snprintf(copy, sizeof copy, "%s", file);
		snprintf(path, sizeof path, "gpuman-logs/%s",
		         strcmp(file, "-") ? basename(copy) : "stdin");
	}
	/* The allocation we run in, unless Slurm options ask for another. */
	adopt = getenv("SLURM_JOB_ID") && o.nalloc == 0;
	/* Our own allocation: as many task slots per node as GPUs, so that
	 * every GPU can run a step at once (one CPU each).  Without -N or
	 * --gres its size is the partition's idle GPUs (spread_size, once
	 * Slurm is known to answer); a dry run shows one GPU. */
	spread = !adopt && !o.gres && !o.nodes_given && !o.b.dry_run;
	if (!o.gres && !spread)
		add_arg(cli, o.alloc, &o.nalloc, "--gres=gpu:%s", "1");
	snprintf(tpn, sizeof tpn, "%u", slurm_gres_per_node(o.gres ? o.gres : "gpu:1"));
	if (!spread)
		add_arg(cli, o.alloc, &o.nalloc, "--ntasks-per-node=%s", tpn);
	o.alloc[o.nalloc] = NULL;
	if (o.b.dry_run) {
		for (size_t i = 0; i < ntasks; i++) {
			char *line = protocol_substitute(tasks[i].line, NULL, NULL, tasks[i].n);

			printf("%5lld  %s\n", (long long)tasks[i].n, line ? line : "?");
			free(line);
		}
		printf("%zu task%s, %u GPU%s each, as srun steps in ", ntasks,
		       ntasks == 1 ? "" : "s", per_task, per_task == 1 ? "" : "s");
		if (batch_in_allocation() || adopt)
			printf("Slurm job %s\n", getenv("SLURM_JOB_ID"));
		else
			for (size_t i = 0; i <= o.nalloc; i++)
				printf(i ? " %s" : "salloc --no-shell%s", i ? o.alloc[i - 1] : "");
		printf("%s; logs in %s\n", o.b.dry_run ? "" : "", path);
		status = EXIT_OK;
		goto done;
	}
	if (!ntasks) {
		cli_error(cli, 0, "'%s' has no tasks (one command per line; # starts a comment)",
		          file);
		status = EXIT_OK;
		goto done;
	}
	if (slurm_preflight(err, sizeof err) < 0) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	if (spread) {
		status = spread_size(cli, &o, ntasks, per_task);
		if (status != CLI_CONTINUE)
			goto done;
		o.alloc[o.nalloc] = NULL;
	}
	/* The local batch's checks: the Slurm tasks' logs and records are
	 * written here (by srun, and by the wrapper on the nodes, as the same
	 * user), so another user must not be able to plant or swap them. */
	status = batch_open_dir(cli, path, o.b.log_dir ? 1 : 2, dir, sizeof dir, runs, sizeof runs,
	                        &dir_fd, &lock_fd, &st);
	if (status != EXIT_OK)
		goto done;
	status = prepare_store(cli, st, tasks, ntasks, &o.b, dir, dir_fd, &skipped);
	if (status != EXIT_OK)
		goto done;
	unlinkat(dir_fd, "summary.json", 0);
	if (skipped)
		fprintf(stderr, "gpuman batch: --resume: %zu of %zu tasks already succeeded\n",
		        skipped, ntasks);

	/* The allocation: the one we run in, unless Slurm options ask for
	 * another; else a new one (salloc waits while it is pending; Ctrl-C
	 * reaches salloc, in our process group, which withdraws it). */
	if (adopt) {
		if (slurm_adopt(getenv("SLURM_JOB_ID"), &alloc, err, sizeof err) < 0) {
			status = cli_error(cli, EXIT_FAIL, "%s", err);
			goto done;
		}
	} else {
		fprintf(stderr, "gpuman batch: asking Slurm for an allocation: salloc --no-shell");
		for (size_t i = 0; i < o.nalloc; i++)
			fprintf(stderr, " %s", o.alloc[i]);
		fputc('\n', stderr);
		if (slurm_allocate((const char *const *)o.alloc, &alloc, err, sizeof err) < 0) {
			sigset_t pend;

			sigpending(&pend);
			status = sigismember(&pend, SIGINT) ? 128 + SIGINT
			                                    : cli_error(cli, EXIT_FAIL, "%s", err);
			if (alloc.job_id[0])
				slurm_release(&alloc);
			goto done;
		}
	}
	have_alloc = 1;
	fprintf(stderr, "gpuman batch: Slurm job %s: %u node%s (%s), %u GPU%s (%s)%s\n",
	        alloc.job_id, alloc.nodes, alloc.nodes == 1 ? "" : "s", alloc.node_list, alloc.gpus,
	        alloc.gpus == 1 ? "" : "s", alloc.gres,
	        alloc.types[0].name[0] ? "" : "; steps take any of them");
	/* The tasks go through the engine, as locally: srun steps for leases. */
	o.step[o.nstep] = NULL;
	memset(&sl, 0, sizeof sl);
	sl.alloc = &alloc;
	sl.step_args = (const char *const *)o.step;
	sl.per_task = per_task;
	prog.tty = isatty(STDERR_FILENO);
	prog.on = prog.tty || o.b.progress;
	prog.total = ntasks;
	prog.done0 = skipped;
	memset(&cfg, 0, sizeof cfg);
	cfg.store = st;
	cfg.run_dir = runs;
	cfg.log_dir = dir;
	cfg.batch = 1;
	cfg.request = cli->req;
	cfg.slurm = &sl;
	cfg.max_running = o.b.jobs;
	cfg.dispatcher_lock_fd = -1;
	cfg.progress = batch_progress;
	cfg.progress_data = &prog;
	started = now_ms();
	res = engine_run(&cfg, err, sizeof err);
	ended = now_ms();
	batch_progress_end(&prog, st, ended - started);
	if (res == ENGINE_ERROR)
		status = cli_error(cli, EXIT_FAIL, "%s", err);
	/* the summary, as the local batch writes it, with nodes for GPUs */
	{
		struct job *jobs = NULL;
		size_t njobs = 0, c[JOB_STATE_COUNT] = {0};
		FILE *out = cli->json ? stderr : stdout;
		json_t *sum;

		if (jobstore_list(st, -1, 0, 0, &jobs, &njobs, err, sizeof err) != GM_OK) {
			status = cli_error(cli, EXIT_FAIL, "%s", err);
			goto done;
		}
		snprintf(path, sizeof path, "%s/summary.json", dir);
		if (write_summary(path, file, dir, jobs, njobs, NULL, 0, started, ended) == 0 &&
		    (sum = json_load_file(path, 0, NULL))) {
			json_t *gpus = json_array(), *sj = json_object();

			node_table(cli, jobs, njobs, gpus);
			json_object_set_new(sum, "gpus", gpus);
			task_nodes(json_object_get(sum, "tasks"), jobs, njobs);
			json_object_set_new(sj, "job_id", json_string(alloc.job_id));
			json_object_set_new(sj, "nodes", json_string(alloc.node_list));
			json_object_set_new(sj, "ended",
			                    sl.ended[0] ? json_string(sl.ended) : json_null());
			json_object_set_new(sum, "slurm", sj);
			json_dump_file(sum, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
			if (cli->json)
				cli_print_json(sum);
			else
				json_decref(sum);
		}
		if (!cli->json) {
			print_summary(cli, jobs, njobs, NULL, 0);
			node_table(cli, jobs, njobs, NULL);
		}
		for (size_t i = 0; i < njobs; i++)
			c[jobs[i].state]++;
		if (sl.ended[0])
			fprintf(out, "%s%s", cli->json ? "gpuman batch: " : "\n", sl.ended);
		fprintf(out, "%s%zu task%s: %zu done", cli->json ? "gpuman batch: " : "\n", njobs,
		        njobs == 1 ? "" : "s", c[JOB_DONE]);
		if (c[JOB_FAILED])
			fprintf(out, ", %s%zu failed%s", c_red(cli), c[JOB_FAILED], c_reset(cli));
		if (c[JOB_INTERRUPTED])
			fprintf(out, ", %zu interrupted", c[JOB_INTERRUPTED]);
		if (c[JOB_QUEUED] + c[JOB_RUNNING])
			fprintf(out, ", %zu not run (--resume runs them)",
			        c[JOB_QUEUED] + c[JOB_RUNNING]);
		if (skipped)
			fprintf(out, " (%zu from an earlier run)", skipped);
		fprintf(out, ", in %s on Slurm job %s; logs and summary.json in %s\n",
		        fmt_duration(path, sizeof path, ended - started), alloc.job_id, dir);
		if (status != EXIT_FAIL)
			status = c[JOB_DONE] == njobs ? EXIT_OK : EXIT_FAIL;
		if (res == ENGINE_INTERRUPTED)
			status = 128 + SIGINT;
		jobstore_free_list(jobs, njobs);
	}
done:
	if (have_alloc)
		slurm_release(&alloc);
	for (size_t i = 0; i < o.nalloc; i++)
		free(o.alloc[i]);
	for (size_t i = 0; i < o.nstep; i++)
		free(o.step[i]);
	jobstore_close(st);
	tasks_free(tasks, ntasks);
	if (lock_fd >= 0)
		close(lock_fd);
	if (dir_fd >= 0)
		close(dir_fd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return status;
}
