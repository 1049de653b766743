/*
 * cmd_status.c - `gpuman status`: every GPU and who is on it, at a glance;
 * as a table (status_table.c), JSON or CSV (status_csv.c), once or again
 * every interval.
 */
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "gpuman-internal.h"
#include "select.h"
#include "status.h"

/* Whether a lease is shown: its user's, on a GPU shown. */
static int lease_shown(const struct cli_select *sel, const struct cli_look *look,
                       const struct lease_info *l)
{
	if (!cli_select_user_name(sel, 1, l->user))
		return 0;
	for (size_t k = 0; k < l->gpu_count; k++)
		for (size_t i = 0; i < look->snap->gpu_count; i++)
			if (look->snap->gpus[i].index == l->indices[k] &&
			    cli_select_gpu_shown(sel, look, &look->snap->gpus[i]))
				return 1;
	return 0;
}

/* The counts of users -u selects: arr is more's JSON, entry i more[i]. */
static void users_only_selected(json_t *arr, const struct cli_select *sel,
                                const struct view_more *more, size_t count)
{
	for (size_t i = json_array_size(arr); i-- > 0;)
		if (i < count && !cli_select_user_name(sel, 1, more[i].user))
			json_array_remove(arr, i);
}

/* The JSON of what the table shows under -i and -u (and, inside a Slurm
 * job, the GPUs of its allocation): the arrays are built in the order of
 * the snapshot, the view and the report, so position i is entry i. */
static void json_only_selected(json_t *o, const struct cli_select *sel, const struct cli_look *look,
                               const struct waste_report *waste)
{
	const struct gm_snapshot *snap = look->snap;
	json_t *arr;
	size_t i;

	arr = json_object_get(o, "gpus");
	for (i = json_array_size(arr); i-- > 0;)
		if (i < snap->gpu_count && !cli_select_gpu_shown(sel, look, &snap->gpus[i]))
			json_array_remove(arr, i);
	arr = json_object_get(o, "processes");
	for (i = json_array_size(arr); i-- > 0;)
		if (i < snap->proc_count && !cli_select_proc(sel, &snap->procs[i]))
			json_array_remove(arr, i);
	arr = json_object_get(o, "leases");
	for (i = json_array_size(arr); i-- > 0;)
		if (i < look->view->lease_count && !lease_shown(sel, look, &look->view->leases[i]))
			json_array_remove(arr, i);
	arr = json_object_get(o, "waiters");
	for (i = json_array_size(arr); i-- > 0;)
		if (i < look->view->waiter_count &&
		    !cli_select_user_name(sel, 1, look->view->waiters[i].user))
			json_array_remove(arr, i);
	/* A long line's tail, counted per user (the broker lists its head). */
	users_only_selected(json_object_get(o, "waiters_more"), sel, look->view->more_waiters,
	                    look->view->more_waiter_count);
	users_only_selected(json_object_get(o, "leases_more"), sel, look->view->more_leases,
	                    look->view->more_lease_count);
	arr = json_object_get(o, "waste");
	for (i = json_array_size(arr); i-- > 0;)
		if (i < waste->count && !status_waste_shown(sel, &waste->items[i]))
			json_array_remove(arr, i);
	if (getenv("SLURM_JOB_ID") && sel->gpus)
		json_object_set_new(o, "slurm_job", json_string(getenv("SLURM_JOB_ID")));
}

/* One look at the machine, printed as asked.  Returns an exit status. */
static int status_once(struct cli *cli, struct cli_select *sel, const size_t *idx, size_t ncols,
                       int watching)
{
	struct waste_opts wopts = WASTE_OPTS_INIT;
	struct waste_report waste = WASTE_REPORT_INIT;
	struct cli_look look;
	int rc;

	rc = cli_look_take(cli, &look);
	if (rc != CLI_CONTINUE)
		return rc;
	rc = cli_select_resolve(cli, sel, look.snap);
	if (rc != EXIT_OK)
		goto done;
	if (cli_waste(cli, &look, &wopts, &waste) < 0) {
		rc = EXIT_FAIL;
		goto done;
	}
	if (cli->json) {
		json_t *o = listing_status_json(look.snap, look.view);

		json_object_set_new(o, "waste",
		                    listing_waste_json(look.snap, look.view, &wopts, &waste));
		json_only_selected(o, sel, &look, &waste);
		json_object_set_new(o, "placement",
		                    json_pack("{s:b,s:s}", "enforced",
		                              look.view->placement_enforced,
		                              look.view->placement_enforced ? "mechanism" : "why",
		                              look.view->placement));
		rc = cli_print_json(o);
	} else if (sel->csv) {
		status_print_csv(sel, &look, idx, ncols);
	} else {
		if (watching) {
			char when[64];
			time_t t = (time_t)(look.snap->taken_ms / 1000);

			strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
			printf("%s---- %s (every %.1fs; Ctrl-C stops) ----%s\n", c_dim(cli), when,
			       sel->watch_ms / 1000.0, c_reset(cli));
		}
		status_print_table(cli, sel, &look, &wopts, &waste);
	}
	fflush(stdout);
done:
	waste_report_release(&waste);
	cli_look_release(&look);
	return rc;
}

static volatile sig_atomic_t stop_watching;

static void on_stop(int sig)
{
	(void)sig;
	stop_watching = 1;
}

/* status --watch: the same view again every interval, as plain text, until
 * interrupted; what `top` shows when it has no terminal. */
int cli_status_watch(struct cli *cli, struct cli_select *sel, const size_t *idx, size_t ncols)
{
	struct sigaction sa;
	struct timespec ts;
	int rc;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	/* Reads and locks resume after the signal; the sleep is cut short
	 * (nanosleep is never restarted), so Ctrl-C ends the watch at once. */
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	for (;;) {
		rc = status_once(cli, sel, idx, ncols, 1);
		if (rc != EXIT_OK || stop_watching || ferror(stdout))
			break;
		putchar('\n');
		ts.tv_sec = sel->watch_ms / 1000;
		ts.tv_nsec = (long)(sel->watch_ms % 1000) * 1000000L;
		/* A signal ends the sleep early (no SA_RESTART). */
		nanosleep(&ts, NULL);
		if (stop_watching)
			break;
	}
	return stop_watching && rc == EXIT_OK ? EXIT_OK : rc;
}

enum { OPT_QUERY_GPU = OPT_CMD_BASE, OPT_LOOP };

/* status's options beyond the selection: nvidia-smi's --query-gpu and
 * -l/--loop (its --watch). */
struct status_opts {
	struct cli_select sel;
	const char *query;
};

static int status_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct status_opts *o = data;

	if (opt == OPT_QUERY_GPU) {
		o->query = arg;
		return CLI_CONTINUE;
	}
	if (opt == 'l' || opt == OPT_LOOP)
		opt = OPT_SELECT_WATCH;
	return cli_select_option(cli, &o->sel, opt, arg);
}

static int status_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_OPTIONS,
	    CLI_SELECT_LONGOPTS,
	    CLI_WATCH_LONGOPT,
	    {"query-gpu", required_argument, NULL, OPT_QUERY_GPU},
	    {"loop", required_argument, NULL, OPT_LOOP},
	    {0}};
	struct status_opts o = {CLI_SELECT_INIT, NULL};
	struct cli_select sel;
	size_t idx[STATUS_COLUMNS_MAX];
	char columns[1024];
	int rc, ncols = 0;

	rc = cli_parse(cli, &cmd_status, argc, argv, CLI_SELECT_SHORTOPTS "l:", longopts,
	               status_option, &o);
	if (rc != CLI_CONTINUE)
		return rc;
	sel = o.sel;
	status_columns_init();
	if (o.query) {
		/* nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]:
		 * status's CSV columns under nvidia-smi's names and form */
		if (sel.columns)
			return cli_usage(cli, "--query-gpu picks the columns: give --format csv, "
			                      "not csv=COLUMNS");
		if (cli->json)
			return cli_usage(cli, "--query-gpu is CSV: --json has every field already");
		if ((rc = status_smi_columns(cli, o.query, columns, sizeof columns)) != EXIT_OK)
			return rc;
		sel.csv = sel.smi = 1;
		sel.columns = columns;
	}
	/* The table shows no clocks; JSON and CSV have them. */
	cli->clocks = cli->json || sel.csv;
	/* --watch SEC as well as --watch=SEC, like nvidia-smi -l SEC */
	if (sel.watch && sel.watch_arg_missing && optind == argc - 1 &&
	    strspn(argv[optind], "0123456789.") == strlen(argv[optind])) {
		rc = cli_select_option(cli, &sel, OPT_SELECT_WATCH, argv[optind++]);
		if (rc != CLI_CONTINUE)
			return rc;
	}
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	if (sel.csv) {
		size_t n;
		const struct csv_column *cols = status_columns(&n);

		if ((ncols = csv_choose(cli, cols, n, &sel, idx)) < 0)
			return EXIT_USAGE;
	}
	if (sel.watch)
		return cli_status_watch(cli, &sel, idx, (size_t)ncols);
	return status_once(cli, &sel, idx, (size_t)ncols, 0);
}

const struct cmd_entry cmd_status = {
    "status",
    "GPUs, their utilization, memory, power and processes",
    "usage: gpuman status [-i GPU[,GPU]] [-u USER[,USER]] [--format csv[=COLUMNS]]\n"
    "                     [--watch[=SEC]] [--json] [--sim FILE]\n"
    "       gpuman status --query-gpu=FIELDS --format=csv[,noheader][,nounits]\n"
    "                     [-l SEC]\n"
    "\n"
    "One line per GPU: NVML index, name, temperature, utilization, memory used and\n"
    "total, power draw and limit, the processes on it (user, pid, memory) and its\n"
    "gpuman leases ([reserved: USER, TIME left] for a gpuman reserve; 'over its\n"
    "limit' for a lease held longer than the admin's max_lease); then the\n"
    "requests waiting for GPUs, in the order they will be served (one that the\n"
    "admin's max_gpus keeps waiting says so), the reservations with their ids,\n"
    "and the waste that 'gpuman waste' explains.\n"
    "Inside a Slurm job only the GPUs of its allocation are shown.\n"
    "A field the GPU does not report shows as '-' (null in --json, empty in CSV).\n"
    "On a terminal, or with COLUMNS set, the table fits the width without cutting\n"
    "anything (processes continue on lines of their own; narrow terminals get\n"
    "name, readings and processes on separate lines); in a pipe each GPU is one\n"
    "line.\n"
    "\n"
    "  -i, --id GPU[,GPU]     only these GPUs: NVML indices, ranges (0-3) or UUID\n"
    "                         prefixes\n"
    "  -u, --user USER[,USER] only GPUs where these users have a process or lease,\n"
    "                         and only their processes, leases and waste\n"
    "  --format csv[=COLUMNS] one CSV line per GPU with a header; COLUMNS from index,\n"
    "                         uuid, name, temperature_c, util_pct, memory_used_mib,\n"
    "                         memory_total_mib, memory_free_mib, power_w,\n"
    "                         power_limit_w, processes, leased_by, mig_devices\n"
    "                         (PROFILE:MIG-UUID of each slice), clock_sm_mhz,\n"
    "                         clock_memory_mhz, clock_graphics_mhz,\n"
    "                         max_clock_sm_mhz, max_clock_memory_mhz,\n"
    "                         max_clock_graphics_mhz, pci_bus_id, util_memory_pct,\n"
    "                         fan_speed_pct;\n"
    "                         csv,noheader: no header line (nvidia-smi's word)\n"
    "  --query-gpu=FIELDS     nvidia-smi's spelling of --format csv=COLUMNS, in its\n"
    "                         form: its names (index, uuid, name, temperature.gpu,\n"
    "                         utilization.gpu, memory.used, memory.total,\n"
    "                         memory.free, power.draw, power.limit, pci.bus_id,\n"
    "                         clocks.sm, clocks.mem, clocks.gr, clocks.max.sm,\n"
    "                         clocks.max.mem, clocks.max.gr, utilization.memory,\n"
    "                         fan.speed), 'memory.used [MiB]'\n"
    "                         headers, '12 MiB' values (none with nounits), ', '\n"
    "                         between fields, [N/A] where unreported; a field gpuman\n"
    "                         does not read is refused, naming it\n"
    "  --watch[=SEC]          print it again every SEC seconds (default 2) until\n"
    "                         interrupted, as plain text (gpuman top is the live\n"
    "                         view)\n"
    "  -l, --loop=SEC         nvidia-smi's spelling of --watch=SEC\n"
    "  --json                 the snapshot as JSON (schema in gpuman-status(1))\n"
    "  --sim FILE             use the NVML simulator with this scenario\n"
    "-i and -u are nvidia-smi's -i (which GPUs) and gpuman's users, not gpustat's\n"
    "(its -i is an interval: here --watch or -l; its -u shows user names, which\n"
    "status always does).\n",
    status_exec,
    NULL,
};
