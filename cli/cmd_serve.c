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
    "usage: gpuman serve [--listen ADDRESS:PORT] [--interval SECONDS] [--sim FILE]\n"
    "                    [--max-connections N] [--timeout SECONDS]\n"
    "\n"
    "A small read-only HTTP server: one NVML snapshot per interval, shared by\n"
    "every request.\n"
    "  /                 the machine at a glance: GPUs, processes, leases, the\n"
    "                    line and the last hour (refreshes itself)\n"
    "  /metrics          Prometheus metrics (dcgm-exporter's names for the GPU ones:\n"
    "                    memory, utilization, power, temperature, clocks); leases,\n"
    "                    the line, the queue of the user serve runs as, waste\n"
    "  /api/v1/status    the status --json document\n"
    "  /api/v1/history   the last hour of utilization, memory and power per GPU\n"
    "Command lines show only the program's name, never its arguments.\n"
    "\n"
    "  --listen ADDRESS:PORT  where to listen (default 127.0.0.1:9400, this\n"
    "                         machine only); 0.0.0.0:9400 or [::]:9400 exposes\n"
    "                         it to the network; port 0 picks a free one\n"
    "  --interval SECONDS     time between snapshots (default 5)\n"
    "  --max-connections N    connections at once, all clients together\n"
    "                         (default 1024); each holds at most 16 KiB of request\n"
    "  --timeout SECONDS      an idle connection is closed after this (default 10)\n"
    "  --sim FILE             use the NVML simulator with this scenario\n"
    "\n"
    "Runs until SIGINT, SIGTERM or SIGHUP; exit status 0 then, 1 if it cannot\n"
    "start (no driver, address in use), 2 on a usage error.\n",
    serve_exec,
};
