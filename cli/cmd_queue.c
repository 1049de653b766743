/*
 * cmd_queue.c - `gpuman queue [--all] [--json]`: the user's queued and
 * running jobs (with --all, finished ones too), with where they run and
 * what they used.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "jobs.h"
#include "util.h"

enum { OPT_ALL = OPT_CMD_BASE };

static int queue_option(struct cli *cli, int opt, const char *arg, void *data)
{
	(void)cli;
	(void)arg;
	if (opt != OPT_ALL)
		return -1;
	*(int *)data = 1;
	return CLI_CONTINUE;
}

static void print_table(struct cli *cli, const struct job *jobs, size_t n, int all)
{
	int64_t now = now_ms();
	size_t shown = 0;

	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];
		char dur[32], peak[32], util[16], cmd[CLI_SAFE_SIZE], why[CLI_SAFE_SIZE];
		const char *color = j->state == JOB_FAILED ? c_red(cli)
				    : j->state == JOB_RUNNING ? c_green(cli)
				    : j->state == JOB_DONE ? ""
							  : c_yellow(cli);

		if (!all && job_state_final(j->state))
			continue;
		if (!shown++)
			printf("%s%6s  %-11s %-5s %9s %6s %5s  %s%s\n", c_bold(cli), "ID", "STATE", "GPU",
			       "TIME", "PEAK", "UTIL", "COMMAND", c_reset(cli));
		if (j->state == JOB_QUEUED)
			fmt_duration(dur, sizeof dur, now - j->submit_ms);
		else if (j->state == JOB_RUNNING)
			fmt_duration(dur, sizeof dur, now - j->start_ms);
		else
			fmt_duration(dur, sizeof dur,
				     j->start_ms && j->end_ms ? j->end_ms - j->start_ms : -1);
		printf("%6lld  %s%-11s%s %-5s %9s %6s %5s  %s\n", (long long)j->id, color,
		       job_state_name(j->state), c_reset(cli),
		       j->state == JOB_QUEUED || !j->gpus ? "-" : j->gpus, dur,
		       fmt_peak(peak, sizeof peak, j), fmt_util(util, sizeof util, j),
		       cli_safe(cmd, j->command));
		if (j->reason && (j->state != JOB_DONE || j->ooms))
			printf("%6s  %s%s%s\n", "", c_dim(cli), cli_safe(why, j->reason), c_reset(cli));
	}
	if (!shown)
		printf(all ? "no jobs\n" : "no queued or running jobs (gpuman queue --all shows "
					   "finished ones)\n");
}

static int queue_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_OPTIONS, { "all", no_argument, NULL, OPT_ALL }, { 0 }
	};
	struct queue q;
	struct job *jobs = NULL;
	size_t n = 0;
	char err[GM_ERRBUF_SIZE], log[PATH_MAX + 64];
	int all = 0, status;

	status = cli_parse(cli, &cmd_queue, argc, argv, "a", longopts, queue_option, &all);
	if (status != CLI_CONTINUE)
		return status;
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	if (queue_open(cli, &q) != EXIT_OK)
		return EXIT_FAIL;
	if (jobstore_list(q.store, -1, 0, 0, &jobs, &n, err, sizeof err) != GM_OK) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	if (queue_has_work(&q) && queue_ensure_dispatcher(&q, err, sizeof err) < 0)
		cli_error(cli, 0, "warning: cannot start the dispatcher: %s", err);
	if (cli->json) {
		json_t *arr = json_array();

		for (size_t i = 0; i < n; i++)
			if (all || !job_state_final(jobs[i].state))
				json_array_append_new(
					arr, job_json(&jobs[i],
						      queue_log_path(&q, &jobs[i], log, sizeof log), 0));
		status = cli_print_json(arr);
	} else {
		print_table(cli, jobs, n, all);
		status = EXIT_OK;
	}
done:
	jobstore_free_list(jobs, n);
	queue_close(&q);
	return status;
}

const struct cmd_entry cmd_queue = {
	"queue", "your queued and running jobs",
	"usage: gpuman queue [--all] [--json]\n"
	"\n"
	"List your queued and running jobs: id, state, GPUs (NVML indices), time\n"
	"waiting or running, peak GPU memory and mean utilization of its GPUs\n"
	"(sampled about once a second from NVML, for the job's own processes; '-'\n"
	"when it was never sampled), and the command.\n"
	"\n"
	"  -a, --all   finished jobs too (done, failed, cancelled), with the reason\n"
	"  --json      a JSON array of jobs, oldest first; each has id, state, command,\n"
	"              argv, cwd, gpus ([{index, uuid}]), submit_ms, start_ms, end_ms,\n"
	"              duration_ms, exit_status, reason, attempts, oom_requeues,\n"
	"              peak_mem_mib, mean_util_pct, util_samples, log (null: unknown)\n"
	"\n"
	"Starts the dispatcher if jobs wait and none runs.\n",
	queue_exec,
};
