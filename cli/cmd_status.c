/*
 * cmd_status.c - `gpuman status`: every GPU and who is on it, at a glance.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "registry.h"
#include "snapshot.h"

/* " [leased: alice]", " [shares: alice 8G, bob 4G]" */
static void print_leases(const struct cli *cli, const struct registry_view *view,
			 const struct gm_gpu *g)
{
	int n = 0;
	char size[16];

	for (size_t i = 0; i < view->lease_count; i++) {
		const struct lease_info *l = &view->leases[i];

		for (size_t k = 0; k < l->gpu_count; k++) {
			if (strcmp(l->uuids[k], g->uuid))
				continue;
			if (l->exclusive)
				printf("%s %s[leased: %s]", n ? "," : "", c_yellow(cli), l->user);
			else
				printf("%s %s[share: %s %s]", n ? "," : "", c_yellow(cli), l->user,
				       fmt_mib(size, sizeof size, l->share_mib));
			printf("%s", c_reset(cli));
			n++;
		}
	}
}

static void print_gpu_row(const struct cli *cli, const struct gm_snapshot *snap,
			  const struct registry_view *view, const struct gm_gpu *g)
{
	char a[16], b[16];
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
		printf("%s%s %u", printed ? ", " : " ", p->has_user ? p->user : "pid", p->pid);
		if (p->has_mem)
			printf(" %s", fmt_mib(a, sizeof a, p->used_mib));
		printed = 1;
	}
	if (!printed)
		printf(" %s-%s", c_dim(cli), c_reset(cli));
	print_leases(cli, view, g);
	putchar('\n');
}

static int status_exec(struct cli *cli, int argc, char **argv)
{
	struct cli_look look;
	const struct gm_snapshot *snap;
	const struct registry_view *view;
	const char *sim;
	char age[32];
	int rc;

	rc = cli_look(cli, &cmd_status, argc, argv, &look);
	if (rc != CLI_CONTINUE)
		return rc;
	rc = EXIT_OK;
	snap = look.snap;
	view = look.view;
	if (cli->json) {
		rc = cli_print_json(cli_status_json(snap, view));
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
		printf("%3zu. %s, %s, pid %d, for %s: %.60s\n", i + 1, w->user, w->summary, w->pid,
		       fmt_age(age, sizeof age, w->since_ms), w->command);
	}
	for (size_t i = 0; i < snap->note_count; i++)
		printf("%snote: %s%s\n", c_dim(cli), snap->notes[i], c_reset(cli));
done:
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
	"served.\n"
	"A field the GPU does not report shows as '-' (null in --json).\n"
	"\n"
	"  --json       the snapshot as JSON (schema in the README)\n"
	"  --sim FILE   use the NVML simulator with this scenario\n",
	status_exec,
};
