/*
 * cmd_serve.c - `gpuman serve`: becomes gpuman-serve (serve/main.c), which
 * lives next to this program.  The server is a program of its own so that
 * only it loads libmicrohttpd and the TLS libraries behind it.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

static int serve_exec(struct cli *cli, int argc, char **argv)
{
	static char name[] = "gpuman-serve";
	char self[PATH_MAX], path[PATH_MAX + 16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash;

	(void)argc;
	/* gpuman --json serve: the --json never reaches gpuman-serve's argv */
	if (cli_json_check(cli, &cmd_serve) != CLI_CONTINUE)
		return EXIT_USAGE;
	if (n < 0)
		return cli_error(cli, EXIT_FAIL, "cannot find my own program: %s", strerror(errno));
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(path, sizeof path, "%s/gpuman-serve", self);
	argv[0] = name;
	execv(path, argv);
	return cli_error(cli, EXIT_FAIL, "cannot run '%s': %s (it is installed next to gpuman)",
	                 path, strerror(errno));
}

const struct cmd_entry cmd_serve = {
    "serve",
    "serve Prometheus metrics, the status JSON and a live page over HTTP",
    cmdline_serve_usage,
    serve_exec,
    cmdline_serve_no_json,
};
