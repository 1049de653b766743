/*
 * cmd_daemon.c - `gpuman daemon`: becomes gpuman-broker (broker/main.c), the
 * lease broker, which lives next to this program.  A root server is a
 * program of its own, in its own folder beside its protocol (lib/broker_wire.h),
 * not a subcommand's file among the others.
 */
#include "cli.h"

static int daemon_exec(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	return cli_exec_sibling(cli, &cmd_daemon, "gpuman-broker", argv);
}

const struct cmd_entry cmd_daemon = {
    "daemon",
    "the lease broker for a machine shared by several users (run by root)",
    cmdline_daemon_usage,
    daemon_exec,
    cmdline_daemon_no_json,
};
