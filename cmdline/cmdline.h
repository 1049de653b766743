/*
 * cmdline.h - what gpuman's commands and gpuman-serve (the program that
 * `gpuman serve` becomes) share of the command line: the command entry,
 * the common options (SELECT, RESERVE, --json, --sim, --help) and their
 * parsing, exit codes, messages in one form ("gpuman CMD: ..."; with
 * --json also one JSON object on stdout), and the first snapshot with its
 * hint when there is no driver.  A folder of its own because both
 * programs print with it: lib/ never prints, and neither program may
 * reach into the other's folder.
 */
#ifndef GM_CMDLINE_H
#define GM_CMDLINE_H

#include <getopt.h>
#include <stdio.h>
#include "gpuman.h"
#include "gpuman-internal.h"

/* Exit statuses (gpuman(1), EXIT STATUS). */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,
	EXIT_USAGE = 2,
	EXIT_UNAVAILABLE = 75 /* EX_TEMPFAIL: cannot be met now */
};

struct cli {
	const char *cmd; /* "pick", for messages */
	int json;
	int color;                /* stdout is a terminal and NO_COLOR unset */
	struct gm_request *req;   /* SELECT and RESERVE options */
	int fallback_cpu;         /* --fallback cpu */
	int no_framework_env;     /* --no-framework-env */
	const char *format;       /* --format, for pick */
	int proc_util;            /* snapshots read per-process utilization */
	int clocks;               /* and clocks (status, info, top, serve) */
	int leases;               /* and the leases, read next (status, pick) */
	int by_given, wait_given; /* --by, --wait given: [defaults] do not apply */
};

struct cmd_entry {
	const char *name;
	const char *summary; /* one line for `gpuman --help` */
	const char *usage;   /* full text for `gpuman NAME --help` */
	int (*exec)(struct cli *cli, int argc, char **argv);
	/* A command with no JSON output of its own (a server, a live view):
	 * what to use instead, said when --json is given, which is refused
	 * rather than ignored.  NULL: the command takes --json. */
	const char *no_json;
};

/* The usage of `gpuman serve`: gpuman's command table shows it (help,
 * completion, the man page) and gpuman-serve prints it for --help
 * (usage_serve.c). */
extern const char cmdline_serve_usage[];
/* Its no_json: what serves the JSON instead. */
extern const char cmdline_serve_no_json[];
/* The same for `gpuman daemon` and gpuman-broker (usage_daemon.c). */
extern const char cmdline_daemon_usage[];
extern const char cmdline_daemon_no_json[];

/* --json given to a command without JSON output (cmd->no_json): refused
 * with exit 2 and what to use instead; CLI_CONTINUE otherwise.  cli_parse
 * checks it; main() too, for a --json before the command. */
int cli_json_check(struct cli *cli, const struct cmd_entry *cmd);

/*
 * Long options every command accepts, and the SELECT/RESERVE group.  A
 * command builds its getopt table from these and hands every option it does
 * not handle itself to cli_common_option().
 */
enum {
	OPT_JSON = 1000,
	OPT_SIM,
	OPT_HELP,
	OPT_BY,
	OPT_MIN_FREE,
	OPT_MAX_UTIL,
	OPT_ONLY,
	OPT_EXCLUDE,
	OPT_EXCLUSIVE,
	OPT_MEM,
	OPT_IDLE,
	OPT_WAIT,
	OPT_FALLBACK,
	OPT_FORMAT,
	OPT_NO_FRAMEWORK_ENV,
	OPT_MIG,
	OPT_CMD_BASE = 1100
};
#define CLI_COMMON_OPTIONS                                                                         \
	{"json", no_argument, NULL, OPT_JSON}, {"sim", required_argument, NULL, OPT_SIM},          \
	{                                                                                          \
		"help", no_argument, NULL, OPT_HELP                                                \
	}
#define CLI_SELECT_OPTIONS                                                                         \
	{"by", required_argument, NULL, OPT_BY},                                                   \
	    {"min-free", required_argument, NULL, OPT_MIN_FREE},                                   \
	    {"max-util", required_argument, NULL, OPT_MAX_UTIL},                                   \
	    {"only", required_argument, NULL, OPT_ONLY},                                           \
	    {"exclude", required_argument, NULL, OPT_EXCLUDE},                                     \
	{                                                                                          \
		"mig", required_argument, NULL, OPT_MIG                                            \
	}
#define CLI_RESERVE_OPTIONS                                                                        \
	{"exclusive", no_argument, NULL, OPT_EXCLUSIVE},                                           \
	    {"mem", required_argument, NULL, OPT_MEM}, {"idle", no_argument, NULL, OPT_IDLE},      \
	    {"wait", optional_argument, NULL, OPT_WAIT},                                           \
	    {"fallback", required_argument, NULL, OPT_FALLBACK},                                   \
	{                                                                                          \
		"no-framework-env", no_argument, NULL, OPT_NO_FRAMEWORK_ENV                        \
	}
/* Short options of SELECT: -n N. */
#define CLI_SELECT_SHORT "n:"

/* cli_parse's answer when parsing went through and the command goes on. */
#define CLI_CONTINUE (-1)

/*
 * Parse argv with getopt_long.  shortopts starting with '+' end options at
 * the first operand, so `run CMD --its-own-flag` works; otherwise options
 * may follow operands.  Common,
 * SELECT and RESERVE options are handled here; any other option goes to
 * own() (may be NULL), which returns CLI_CONTINUE or an exit status.
 * Returns CLI_CONTINUE with optind at the first operand, or the status to
 * exit with (0 after --help, 2 after a usage error, already reported).
 */
int cli_parse(struct cli *cli, const struct cmd_entry *cmd, int argc, char **argv,
              const char *shortopts, const struct option *longopts,
              int (*own)(struct cli *cli, int opt, const char *arg, void *data), void *data);

/* "gpuman CMD: message" on stderr; returns status. */
int cli_error(struct cli *cli, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A usage error: the message, then where to read more; returns 2. */
int cli_usage(struct cli *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Open a context and take a snapshot, reporting failure (NVML missing,
 * scenario malformed) in one line with a hint.  Returns EXIT_OK or 1. */
int cli_snapshot(struct cli *cli, struct gm_context **ctx, struct gm_snapshot **snap);

/* Print a JSON value (steals the reference) to stdout. */
struct json_t;
int cli_print_json(struct json_t *value);

#endif
