/*
 * cmd_serve.c - `gpuman serve`: becomes gpuman-serve (serve/main.c), which
 * lives next to this program.  The server is a program of its own so that
 * only it loads libmicrohttpd and the TLS libraries behind it.
 */
#include "cli.h"

static int serve_exec(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	return cli_exec_sibling(cli, &cmd_serve, "gpuman-serve", argv);
}

const struct cmd_entry cmd_serve = {
    "serve",
    "serve Prometheus metrics, the status JSON and a live page over HTTP",
    cmdline_serve_usage,
    serve_exec,
    cmdline_serve_no_json,
};
