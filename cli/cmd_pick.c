/*
 * cmd_pick.c - `gpuman pick`: print the GPUs a request would get now.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "gpuman-internal.h"
#include "select_help.h"

static int pick_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS,
	                                         CLI_SELECT_OPTIONS,
	                                         {"exclusive", no_argument, NULL, OPT_EXCLUSIVE},
	                                         {"mem", required_argument, NULL, OPT_MEM},
	                                         {"idle", no_argument, NULL, OPT_IDLE},
	                                         {"format", required_argument, NULL, OPT_FORMAT},
	                                         {0}};
	struct gm_context *ctx = NULL;
	struct gm_snapshot *snap = NULL;
	struct pick_env env = PICK_ENV_INIT;
	unsigned *idx = NULL;
	size_t *pos = NULL, n = 0;
	char *explain = NULL, *cuda = NULL, why[512] = "";
	enum gm_err err;
	long mig_pos = -1;
	int rc;

	cli->format = "index";
	rc = cli_parse(cli, &cmd_pick, argc, argv, CLI_SELECT_SHORT, longopts, NULL, NULL);
	if (rc != CLI_CONTINUE)
		return rc;
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	cli->leases = 1; /* the rules need them next */
	rc = cli_snapshot(cli, &ctx, &snap);
	if (rc != EXIT_OK)
		return rc;
	err = registry_pick(ctx, snap, cli->req, &idx, &n, &mig_pos, &explain, why, sizeof why);
	if (err == GM_ERR_UNAVAILABLE || err == GM_ERR_NEVER) {
		rc = cli_error(cli, EXIT_UNAVAILABLE, "%s:\n%s",
		               err == GM_ERR_NEVER
		                   ? "no GPU of this machine can ever meet the request"
		                   : "no GPU meets the request now",
		               snap->gpu_count ? cli_explained(explain) : "(no NVIDIA GPU found)");
		goto done;
	} else if (err != GM_OK) {
		rc = cli_error(cli, EXIT_FAIL, "%s", *why ? why : gm_strerror(err));
		goto done;
	}
	cli_note_mig_gpus(cli, "pick", snap);
	pos = calloc(n ? n : 1, sizeof *pos);
	if (!pos || pick_env_init(&env, snap) < 0) {
		rc = cli_error(cli, EXIT_FAIL, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < n; i++)
		pos[i] = (size_t)snapshot_position(snap, idx[i]);
	cuda = mig_pos >= 0 ? strdup(snap->migs[mig_pos].uuid)
	                    : pick_env_cuda_visible(&env, snap, pos, n);
	if (cli->json) {
		json_t *o = json_object(), *gpus = json_array();

		for (size_t i = 0; i < n; i++) {
			json_t *g = json_object();

			json_object_set_new(g, "index", json_integer(idx[i]));
			json_object_set_new(g, "uuid", json_string(snap->gpus[pos[i]].uuid));
			json_object_set_new(g, "name", json_text(snap->gpus[pos[i]].name));
			json_array_append_new(gpus, g);
		}
		json_object_set_new(o, "gpus", gpus);
		json_object_set_new(o, "mig_device",
		                    mig_pos >= 0 ? snapshot_mig_json(&snap->migs[mig_pos])
		                                 : json_null());
		json_object_set_new(o, "cuda_visible_devices", json_string(cuda ? cuda : ""));
		rc = cli_print_json(o);
		goto done;
	}
	if (!strcmp(cli->format, "cuda") || mig_pos >= 0) {
		/* a slice has no index: its UUID is the one name CUDA takes */
		printf("%s\n", cuda ? cuda : "");
	} else {
		for (size_t i = 0; i < n; i++) {
			if (!strcmp(cli->format, "uuid"))
				printf("%s%s", i ? "," : "", snap->gpus[pos[i]].uuid);
			else
				printf("%s%u", i ? "," : "", idx[i]);
		}
		putchar('\n');
	}
done:
	free(cuda);
	free(pos);
	free(idx);
	free(explain);
	pick_env_release(&env);
	gm_snapshot_free(snap);
	gm_close(ctx);
	return rc;
}

const struct cmd_entry cmd_pick = {
    "pick",
    "print the GPUs a request would get now",
    "usage: gpuman pick [SELECT] [--mem SIZE | --exclusive] [--idle]\n"
    "                   [--format index|uuid|cuda] [--json] [--sim FILE]\n"
    "\n"
    "Print the chosen GPUs, comma separated, best first.  Nothing is reserved:\n"
    "to run a job on them without racing other launches, use 'gpuman run'.\n"
    "\n"
    "  --format index     NVML indices (PCI bus order, as nvidia-smi): 0,3 (default)\n"
    "  --format uuid      full UUIDs\n"
    "  --format cuda      the value to put in CUDA_VISIBLE_DEVICES (CUDA's own order\n"
    "                     differs from NVML's: never give it bare NVML indices unless\n"
    "                     CUDA_DEVICE_ORDER=PCI_BUS_ID)\n"
    "With --mig the slice's MIG-<uuid> is printed whatever the format.\n"
    "  --json             the chosen GPUs and the CUDA_VISIBLE_DEVICES value\n"
    "\n" SELECT_HELP "\n"
    "When no GPU fits, exit 75 and say, per GPU, which condition excluded it.\n",
    pick_exec,
    NULL,
};
