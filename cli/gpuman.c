/*
 * gpuman.c - main(): global options, then one subcommand from the table.
 * Adding a command means one new cmd_*.c and one row below.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "gpuman-internal.h"

/* complete, slurm-sample and pam-session have no summary: not listed in --help */
static const struct cmd_entry *const commands[] = {
    &cmd_status,   &cmd_info,         &cmd_ps,          &cmd_pick,  &cmd_run,    &cmd_reserve,
    &cmd_release,  &cmd_waste,        &cmd_top,         &cmd_batch, &cmd_submit, &cmd_queue,
    &cmd_cancel,   &cmd_logs,         &cmd_wait,        &cmd_serve, &cmd_daemon, &cmd_dispatcher,
    &cmd_complete, &cmd_slurm_sample, &cmd_pam_session,
};

const struct cmd_entry *const *cli_commands(size_t *count)
{
	*count = sizeof commands / sizeof commands[0];
	return commands;
}

/* "'stauts' is not a command (did you mean 'status'?)", for the command
 * line and for `gpuman help WORD`. */
static int not_a_command(struct cli *cli, const char *word)
{
	struct spell near = SPELL_INIT(word);
	const char *best;

	for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
		spell_offer(&near, commands[k]->name);
	best = spell_best(&near);
	if (best)
		return cli_error(cli, EXIT_USAGE,
		                 "'%s' is not a command (did you mean '%s'? see 'gpuman --help')",
		                 word, best);
	return cli_error(cli, EXIT_USAGE, "'%s' is not a command (see 'gpuman --help')", word);
}

static void usage(FILE *out)
{
	fprintf(out, "usage: gpuman [--sim FILE] [--json] COMMAND [OPTIONS] [ARGS]\n"
	             "\n"
	             "Find the freest NVIDIA GPUs, reserve them race-free, run jobs on them.\n"
	             "\n"
	             "commands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (commands[i]->summary)
			fprintf(out, "  %-8s %s\n", commands[i]->name, commands[i]->summary);
	fprintf(out,
	        "\n"
	        "global options:\n"
	        "  --sim FILE   use the NVML simulator with this scenario instead of the driver\n"
	        "  --json       machine-readable output\n"
	        "  --version    print the version\n"
	        "  --help       this text; 'gpuman COMMAND --help' for a command\n"
	        "\n"
	        "exit status: 0 ok, 1 failure, 2 usage error, 75 the request cannot be met now;\n"
	        "'run' exits with its command's status; 'waste' exits 3 when it finds waste.\n");
}

/* Is --json among argv[from..] before any "--"?  For errors found before
 * the command parses its own options, so they too come out as JSON. */
static int wants_json(int argc, char **argv, int from)
{
	for (int i = from; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json"))
			return 1;
	return 0;
}

static const char *command_name = "gpuman";

static void tell_broker_wait(const char *path, int error, int64_t patience_ms)
{
	fprintf(stderr,
	        "%s: the lease broker at '%s' does not answer (%s); waiting up to %lld s for it "
	        "to come back\n",
	        command_name, path, strerror(error), (long long)(patience_ms / 1000));
}

int main(int argc, char **argv)
{
	struct cli cli = {0};
	const struct cmd_entry *cmd = NULL;
	const char *nc = getenv("NO_COLOR");
	const char *term = getenv("TERM");
	int i, rc;

	cli.color = isatty(STDOUT_FILENO) && !(nc && *nc) && !(term && !strcmp(term, "dumb"));
	/* Global options before the command: --sim FILE, --json, --help, --version. */
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--version")) {
			printf("gpuman %s\n", gm_version());
			return EXIT_OK;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return EXIT_OK;
		} else if (!strcmp(argv[i], "--json")) {
			cli.json = 1;
		} else if (!strcmp(argv[i], "--sim") || !strncmp(argv[i], "--sim=", 6)) {
			const char *file = argv[i][5] == '=' ? argv[i] + 6 : argv[++i];

			if (!file)
				return cli_error(&cli, EXIT_USAGE, "--sim needs a scenario file");
			char path[PATH_MAX];

			if (!realpath(file, path)) {
				cli.json |= wants_json(argc, argv, i);
				return cli_error(&cli, EXIT_USAGE, "--sim '%s': %s", file,
				                 strerror(errno));
			}
			/* Absolute, so that jobs started elsewhere see the same machine. */
			setenv("GPUMAN_SIM", path, 1);
			unsetenv("GPUMAN_NVML");
		} else {
			cli.json |= wants_json(argc, argv, i);
			return cli_error(
			    &cli, EXIT_USAGE,
			    "unknown option '%s' (see 'gpuman --help'; a command's own "
			    "options go after it)",
			    argv[i]);
		}
	}
	if (i == argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[i], "help")) {
		if (i + 1 < argc)
			for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
				if (!strcmp(commands[k]->name, argv[i + 1])) {
					fputs(commands[k]->usage, stdout);
					return EXIT_OK;
				}
		if (i + 1 < argc) {
			cli.cmd = "help";
			cli.json |= wants_json(argc, argv, i);
			return not_a_command(&cli, argv[i + 1]);
		}
		usage(stdout);
		return EXIT_OK;
	}
	for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
		if (!strcmp(commands[k]->name, argv[i]))
			cmd = commands[k];
	if (!cmd) {
		cli.json |= wants_json(argc, argv, i);
		return not_a_command(&cli, argv[i]);
	}
	if (getenv("GPUMAN_SIM") && access(getenv("GPUMAN_SIM"), R_OK) < 0) {
		cli.json |= wants_json(argc, argv, i);
		return cli_error(&cli, EXIT_USAGE,
		                 "scenario '%s' (GPUMAN_SIM or --sim) cannot be read",
		                 getenv("GPUMAN_SIM"));
	}
	cli.cmd = cmd->name;
	static char name[64];
	snprintf(name, sizeof name, "gpuman %s", cmd->name);
	command_name = name;
	broker_waiting_hook = tell_broker_wait;
	cli.req = gm_request_new();
	if (!cli.req) {
		fprintf(stderr, "gpuman: out of memory\n");
		return EXIT_FAIL;
	}
	rc = cmd->exec(&cli, argc - i, argv + i);
	gm_request_free(cli.req);
	return rc;
}
