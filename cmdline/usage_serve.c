/*
 * usage_serve.c - the usage of `gpuman serve` (cmdline.h), written once for
 * gpuman's command table (cli/cmd_serve.c) and gpuman-serve's --help.
 */
#include "cmdline.h"

const char cmdline_serve_no_json[] =
    "its /api/v1/status serves the status JSON over HTTP; 'gpuman status --json' "
    "prints it";

const char cmdline_serve_usage[] =
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
    "start (no driver, address in use), 2 on a usage error.\n";
