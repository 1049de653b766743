/*
 * cmd_ps.c - `gpuman ps`: the processes on every GPU.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "cli.h"
#include "gpuman-internal.h"
#include "select.h"

static const struct csv_column ps_columns[] = {
    {"gpu", "NVML index"},
    {"pid", ""},
    {"user", ""},
    {"memory_mib", "MiB"},
    {"util_pct", "percent, over the last 10 s"},
    {"type", "C, G, C+G, M+C (MPS client) or M+C+G"},
    {"lease", "gpuman lease id"},
    {"command", "command line"},
    {"mig", "MIG slice UUID"},
};
#define PS_COLUMNS (sizeof ps_columns / sizeof ps_columns[0])

/* nvidia-smi's marks: M+C is a client of an MPS server. */
static const char *kind_name(const struct gm_proc *p)
{
	if (p->mps)
		return p->kind & GM_PROC_GRAPHICS ? "M+C+G" : "M+C";
	return p->kind == (GM_PROC_COMPUTE | GM_PROC_GRAPHICS) ? "C+G"
	       : p->kind == GM_PROC_GRAPHICS                   ? "G"
	                                                       : "C";
}

static void print_csv(const struct cli_look *look, const struct cli_select *sel, const long *leases,
                      const size_t *idx, size_t n)
{
	const struct gm_snapshot *snap = look->snap;
	const struct gm_mig *mig;
	char num[32];

	csv_header(sel, ps_columns, idx, n);
	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];

		if (!cli_select_proc(sel, p))
			continue;
		for (size_t c = 0; c < n; c++) {
			const char *v = NULL;

			switch (idx[c]) {
			case 0:
				snprintf(num, sizeof num, "%u", p->gpu);
				v = num;
				break;
			case 1:
				snprintf(num, sizeof num, "%u", p->pid);
				v = num;
				break;
			case 2:
				v = p->has_user ? p->user : NULL;
				break;
			case 3:
				snprintf(num, sizeof num, "%llu", (unsigned long long)p->used_mib);
				v = p->has_mem ? num : NULL;
				break;
			case 4:
				snprintf(num, sizeof num, "%u", p->util_pct);
				v = p->has_util ? num : NULL;
				break;
			case 5:
				v = kind_name(p);
				break;
			case 6:
				v = leases[i] >= 0 ? look->view->leases[leases[i]].id : NULL;
				break;
			case 7:
				v = p->command[0] ? p->command : NULL;
				break;
			case 8:
				mig = gm_proc_mig(snap, p);
				v = mig && mig->uuid[0] ? mig->uuid : NULL;
				break;
			}
			csv_field(c == 0, v);
		}
		putchar('\n');
	}
}

/* Room for the command on a terminal; long lines wrap badly in a table. */
static int command_width(void)
{
	struct winsize ws;

	if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 80)
		return ws.ws_col - 79;
	return isatty(STDOUT_FILENO) ? 20 : 1000;
}

static int ps_option(struct cli *cli, int opt, const char *arg, void *data)
{
	return cli_select_option(cli, data, opt, arg);
}

static int ps_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option own[] = {CLI_SELECT_LONGOPTS, {0}};
	struct cli_select sel = CLI_SELECT_INIT;
	struct cli_look look;
	const struct gm_snapshot *snap;
	const struct registry_view *view;
	size_t idx[PS_COLUMNS], shown = 0;
	long *leases = NULL;
	char mem[16], util[8], user[CLI_SAFE_SIZE], id[CLI_SAFE_SIZE], cmd[CLI_SAFE_SIZE];
	int rc, ncols = 0, width;

	rc = cli_look_with(cli, &cmd_ps, argc, argv, CLI_SELECT_SHORTOPTS, own, ps_option, &sel,
	                   &look);
	if (rc != CLI_CONTINUE)
		return rc;
	snap = look.snap;
	view = look.view;
	rc = cli_select_resolve(cli, &sel, snap);
	if (rc != EXIT_OK)
		goto done;
	if (sel.csv && (ncols = csv_choose(cli, ps_columns, PS_COLUMNS, &sel, idx)) < 0) {
		rc = EXIT_USAGE;
		goto done;
	}
	leases = listing_proc_leases(look.snap, look.view);
	if (!leases) {
		rc = cli_error(cli, EXIT_FAIL, "out of memory");
		goto done;
	}
	if (cli->json) {
		json_t *arr = json_array();

		for (size_t i = 0; i < snap->proc_count; i++) {
			const struct gm_proc *p = &snap->procs[i];
			json_t *o;

			if (!cli_select_proc(&sel, p))
				continue;
			o = snapshot_proc_json(snap, p);
			json_object_set_new(o, "lease",
			                    leases[i] >= 0 ? json_text(view->leases[leases[i]].id)
			                                   : json_null());
			json_array_append_new(arr, o);
		}
		rc = cli_print_json(arr);
		goto done;
	}
	if (sel.csv) {
		print_csv(&look, &sel, leases, idx, (size_t)ncols);
		goto done;
	}
	width = command_width();
	/* A machine with MIG slices gets a column saying which slice. */
	printf("%s%3s %s%8s  %-12s %8s %5s  %-4s %-26s  %s%s\n", c_bold(cli), "GPU",
	       snap->mig_count ? "MIG      " : "", "PID", "USER", "MEMORY", "UTIL", "TYPE", "LEASE",
	       "COMMAND", c_reset(cli));
	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];
		const struct lease_info *l = leases[i] >= 0 ? &view->leases[leases[i]] : NULL;

		if (!cli_select_proc(&sel, p))
			continue;
		shown++;
		if (p->has_util)
			snprintf(util, sizeof util, "%u%%", p->util_pct);
		printf("%3u ", p->gpu);
		if (snap->mig_count) {
			const struct gm_mig *m = gm_proc_mig(snap, p);

			printf("%-8.8s ", m && m->profile[0] ? m->profile : "-");
		}
		printf("%8u  %-12.12s %8s %5s  %-4s %-26.26s  %.*s\n", p->pid,
		       p->has_user ? cli_safe(user, p->user) : "?",
		       p->has_mem ? fmt_mib(mem, sizeof mem, p->used_mib) : "-",
		       p->has_util ? util : "-", kind_name(p), l ? cli_safe(id, l->id) : "-", width,
		       p->command[0] ? cli_safe(cmd, p->command) : "?");
	}
	if (!shown)
		printf("%sno processes on %s%s\n", c_dim(cli),
		       sel.gpus || sel.user_count ? "the selected GPUs of the selected users"
		                                  : "any GPU",
		       c_reset(cli));
done:
	free(leases);
	cli_look_release(&look);
	return rc;
}

const struct cmd_entry cmd_ps = {
    "ps",
    "processes on the GPUs: gpu, pid, user, memory, utilization, command",
    "usage: gpuman ps [-i GPU[,GPU]] [-u USER[,USER]] [--format csv[=COLUMNS]]\n"
    "                 [--json] [--sim FILE]\n"
    "\n"
    "Every process NVML reports on any GPU: its GPU (NVML index), pid, user,\n"
    "memory, utilization (its own, averaged over the last 10 s; '-' where the\n"
    "GPU does not report it), type (C compute, G graphics, M+C a client of an\n"
    "MPS server), the gpuman lease it runs under and its command line; on a\n"
    "machine with MIG slices, the slice (profile) each process runs in.  User\n"
    "and command show '?' where /proc does not show the process (e.g. from a\n"
    "container).  On a terminal the command is cut to its width.\n"
    "\n"
    "  -i, --id GPU[,GPU]     only these GPUs: NVML indices, ranges (0-3) or UUID\n"
    "                         prefixes\n"
    "  -u, --user USER[,USER] only these users' processes (names or uids)\n"
    "  --format csv[=COLUMNS] CSV with a header line; COLUMNS from gpu, pid,\n"
    "                         user, memory_mib, util_pct, type, lease, command,\n"
    "                         mig (the MIG slice's UUID)\n"
    "  --json                 a JSON array of processes\n"
    "  --sim FILE             use the NVML simulator with this scenario\n",
    ps_exec,
    NULL,
};
