/*
 * cmd_status.c - `gpuman status`: every GPU and who is on it, at a glance.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "registry.h"
#include "snapshot.h"
#include "waste.h"

/* Findings shown at the end of status; `gpuman waste` shows them all. */
#define STATUS_WASTE_LINES 5

/* " [leased: alice]", " [shares: alice 8G, bob 4G]" */
static void print_leases(const struct cli *cli, const struct registry_view *view,
			 const struct gm_gpu *g)
{
	int n = 0;
	char size[16], user[CLI_SAFE_SIZE];

	for (size_t i = 0; i < view->lease_count; i++) {
		const struct lease_info *l = &view->leases[i];

		for (size_t k = 0; k < l->gpu_count; k++) {
			if (strcmp(l->uuids[k], g->uuid))
				continue;
			if (l->exclusive)
				printf("%s %s[leased: %s]", n ? "," : "", c_yellow(cli),
				       cli_safe(user, l->user));
			else
				printf("%s %s[share: %s %s]", n ? "," : "", c_yellow(cli),
				       cli_safe(user, l->user),
				       fmt_mib(size, sizeof size, l->share_mib));
			printf("%s", c_reset(cli));
			n++;
		}
	}
}

static void print_gpu_row(const struct cli *cli, const struct gm_snapshot *snap,
			  const struct registry_view *view, const struct gm_gpu *g)
{
	char a[16], b[16], user[CLI_SAFE_SIZE];
	int printed = 0;

	printf("%3u  %-26.26s ", g->index, g->name[0] ? g->name : "?");
	if (g->state != GM_GPU_OK) {
		printf("%s%s: %s%s\n", c_red(cli), g->state == GM_GPU_LOST ? "lost" : "error",
		       g->note, c_reset(cli));
		return;
	}
	if (g->valid & GM_HAS_TEMPERATURE)
		printf("%4uC ", g->temperature_c);
	else
		printf("%5s ", "-");
	if (g->valid & GM_HAS_UTIL)
		printf("%s%4u%%%s ",
		       g->util_gpu_pct >= 80 ? c_red(cli) : g->util_gpu_pct >= 30 ? c_yellow(cli)
									   : c_green(cli),
		       g->util_gpu_pct, c_reset(cli));
	else
		printf("%5s ", "-");
	if (g->valid & GM_HAS_MEMORY)
		printf(" %6s / %-6s %3u%% ", fmt_mib(a, sizeof a, g->mem_used_mib),
		       fmt_mib(b, sizeof b, g->mem_total_mib),
		       g->mem_total_mib ? (unsigned)(g->mem_used_mib * 100 / g->mem_total_mib) : 0);
	else
		printf(" %-19s ", "      - / -");
	if ((g->valid & GM_HAS_POWER) && (g->valid & GM_HAS_POWER_LIMIT))
		printf("%4u / %-4uW ", g->power_mw / 1000, g->power_limit_mw / 1000);
	else if (g->valid & GM_HAS_POWER)
		printf("%4u / -   W ", g->power_mw / 1000);
	else
		printf("%12s ", "-");
	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];

		if (p->gpu != g->index)
			continue;
		printf("%s%s %u", printed ? ", " : " ", p->has_user ? cli_safe(user, p->user) : "pid",
		       p->pid);
		if (p->has_mem)
			printf(" %s", fmt_mib(a, sizeof a, p->used_mib));
		printed = 1;
	}
	if (!printed)
		printf(" %s-%s", c_dim(cli), c_reset(cli));
	print_leases(cli, view, g);
	putchar('\n');
}

/* The hogs and idle leases, then one line for the processes outside gpuman. */
static void print_waste(const struct cli *cli, const struct cli_look *look,
			const struct waste_opts *wopts, const struct waste_report *waste)
{
	char what[CLI_SAFE_SIZE];
	size_t shown = 0, unleased = 0;

	for (size_t i = 0; i < waste->count; i++) {
		const struct waste_item *it = &waste->items[i];

		if (it->kind == WASTE_UNLEASED) {
			unleased++;
			continue;
		}
		if (shown == 0)
			printf("%swaste (gpuman waste for advice):%s\n", c_bold(cli), c_reset(cli));
		if (++shown > STATUS_WASTE_LINES)
			continue;
		printf("  %s%-10s%s %s\n", c_yellow(cli), waste_kind_name(it->kind), c_reset(cli),
		       waste_what(look->snap, look->view, wopts, it, what, sizeof what));
	}
	if (shown > STATUS_WASTE_LINES)
		printf("  ... and %zu more\n", shown - STATUS_WASTE_LINES);
	if (unleased && !shown)
		printf("%swaste (gpuman waste for advice):%s\n", c_bold(cli), c_reset(cli));
	if (unleased)
		printf("  %s%-10s%s %zu process%s on GPUs outside gpuman\n", c_yellow(cli),
		       "unleased", c_reset(cli), unleased, unleased == 1 ? "" : "es");
}

static int status_exec(struct cli *cli, int argc, char **argv)
{
	struct cli_look look;
	const struct gm_snapshot *snap;
	const struct registry_view *view;
	struct waste_opts wopts = WASTE_OPTS_INIT;
	struct waste_report waste = WASTE_REPORT_INIT;
	const char *sim;
	char age[32], user[CLI_SAFE_SIZE], cmd[CLI_SAFE_SIZE], what[CLI_SAFE_SIZE];
	int rc;

	rc = cli_look(cli, &cmd_status, argc, argv, &look);
	if (rc != CLI_CONTINUE)
		return rc;
	rc = EXIT_OK;
	snap = look.snap;
	view = look.view;
	if (cli_waste(cli, &look, &wopts, &waste) < 0) {
		rc = EXIT_FAIL;
		goto done;
	}
	if (cli->json) {
		json_t *o = cli_status_json(snap, view);

		json_object_set_new(o, "waste", cli_waste_json(&look, &wopts, &waste));
		rc = cli_print_json(o);
		goto done;
	}
	sim = getenv("GPUMAN_SIM");
	if (sim && strrchr(sim, '/'))
		sim = strrchr(sim, '/') + 1;
	printf("%sgpuman%s  %zu GPU%s  driver %s  CUDA %d.%d%s%s%s\n", c_bold(cli), c_reset(cli),
	       snap->gpu_count, snap->gpu_count == 1 ? "" : "s",
	       snap->driver_version[0] ? snap->driver_version : "?",
	       snap->cuda_driver_version / 1000, snap->cuda_driver_version % 1000 / 10,
	       sim ? "  (simulated: " : "", sim ? sim : "", sim ? ")" : "");
	if (snap->gpu_count) {
		printf("%s%3s  %-26s %5s %5s  %-20s %-12s %s%s\n", c_bold(cli), "GPU", "NAME", "TEMP",
		       "UTIL", "MEMORY USED / TOTAL", "POWER", " PROCESSES (user pid memory)",
		       c_reset(cli));
		for (size_t i = 0; i < snap->gpu_count; i++)
			print_gpu_row(cli, snap, view, &snap->gpus[i]);
	} else {
		printf("no NVIDIA GPU found\n");
	}
	for (size_t i = 0; i < view->waiter_count; i++) {
		const struct waiter_info *w = &view->waiters[i];

		if (i == 0)
			printf("%swaiting (served in this order):%s\n", c_bold(cli), c_reset(cli));
		printf("%3zu. %s, %s, pid %d, for %s: %.60s\n", i + 1, cli_safe(user, w->user),
		       cli_safe(what, w->summary), w->pid, fmt_age(age, sizeof age, w->since_ms),
		       cli_safe(cmd, w->command));
	}
	print_waste(cli, &look, &wopts, &waste);
	for (size_t i = 0; i < snap->note_count; i++)
		printf("%snote: %s%s\n", c_dim(cli), cli_safe(what, snap->notes[i]), c_reset(cli));
done:
	waste_report_release(&waste);
	cli_look_release(&look);
	return rc;
}

const struct cmd_entry cmd_status = {
	"status", "GPUs, their utilization, memory, power and processes",
	"usage: gpuman status [--json] [--sim FILE]\n"
	"\n"
	"One line per GPU: NVML index, name, temperature, utilization, memory used and\n"
	"total, power draw and limit, the processes on it (user, pid, memory) and its\n"
	"gpuman leases; then the requests waiting for GPUs, in the order they will be\n"
	"served, and the waste that 'gpuman waste' explains.\n"
	"A field the GPU does not report shows as '-' (null in --json).\n"
	"\n"
	"  --json       the snapshot as JSON (schema in the README)\n"
	"  --sim FILE   use the NVML simulator with this scenario\n",
	status_exec,
};
