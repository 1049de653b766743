/*
 * cmd_ps.c - `gpuman ps`: the processes on every GPU.
 */
#include <jansson.h>
#include <string.h>
#include "cli.h"
#include "proctree.h"
#include "registry.h"
#include "snapshot.h"

/* The lease whose job this process belongs to (the job or a descendant). */
static const struct lease_info *lease_of(const struct registry_view *view,
					 const struct proctree *tree, const struct gm_proc *p)
{
	for (size_t i = 0; i < view->lease_count; i++)
		if (proctree_within(tree, view->leases[i].job_pid, (int)p->pid))
			return &view->leases[i];
	return NULL;
}

static int ps_exec(struct cli *cli, int argc, char **argv)
{
	struct cli_look look;
	const struct gm_snapshot *snap;
	const struct registry_view *view;
	struct proctree tree = PROCTREE_INIT;
	char mem[16], user[CLI_SAFE_SIZE], id[CLI_SAFE_SIZE], cmd[CLI_SAFE_SIZE];
	int rc;

	rc = cli_look(cli, &cmd_ps, argc, argv, &look);
	if (rc != CLI_CONTINUE)
		return rc;
	rc = EXIT_OK;
	snap = look.snap;
	view = look.view;
	if (view->lease_count)
		proctree_read(&tree);
	if (cli->json) {
		json_t *arr = json_array();

		for (size_t i = 0; i < snap->proc_count; i++) {
			const struct lease_info *l = lease_of(view, &tree, &snap->procs[i]);
			json_t *o = snapshot_proc_json(snap, &snap->procs[i]);

			json_object_set_new(o, "lease", l ? json_string(l->id) : json_null());
			json_array_append_new(arr, o);
		}
		rc = cli_print_json(arr);
		goto done;
	}
	printf("%s%3s %8s  %-12s %8s  %-4s %-26s  %s%s\n", c_bold(cli), "GPU", "PID", "USER",
	       "MEMORY", "TYPE", "LEASE", "COMMAND", c_reset(cli));
	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];
		const struct lease_info *l = lease_of(view, &tree, p);

		printf("%3u %8u  %-12.12s %8s  %-4s %-26.26s  %s\n", p->gpu, p->pid,
		       p->has_user ? cli_safe(user, p->user) : "?",
		       p->has_mem ? fmt_mib(mem, sizeof mem, p->used_mib) : "-",
		       p->kind == (GM_PROC_COMPUTE | GM_PROC_GRAPHICS) ? "C+G"
		       : p->kind == GM_PROC_GRAPHICS			  ? "G"
									  : "C",
		       l ? cli_safe(id, l->id) : "-", p->command[0] ? cli_safe(cmd, p->command) : "?");
	}
	if (!snap->proc_count)
		printf("%sno processes on any GPU%s\n", c_dim(cli), c_reset(cli));
done:
	proctree_release(&tree);
	cli_look_release(&look);
	return rc;
}

const struct cmd_entry cmd_ps = {
	"ps", "processes on the GPUs: gpu, pid, user, memory, command",
	"usage: gpuman ps [--json] [--sim FILE]\n"
	"\n"
	"Every process NVML reports on any GPU: its GPU (NVML index), pid, user,\n"
	"memory, type (C compute, G graphics), the gpuman lease it runs under and its\n"
	"command line.  User and command\n"
	"show '?' where /proc does not show the process (e.g. from a container).\n"
	"\n"
	"  --json       a JSON array of processes\n"
	"  --sim FILE   use the NVML simulator with this scenario\n",
	ps_exec,
};
