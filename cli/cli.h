/*
 * cli.h - what the gpuman subcommands share: the command table entry, the
 * common options (SELECT, RESERVE, --json, --sim), exit codes and output
 * helpers.  Each subcommand lives in its own cmd_*.c and exports one
 * struct cmd_entry; cli/gpuman.c lists them.
 */
#ifndef GM_CLI_H
#define GM_CLI_H

#include <getopt.h>
#include <stdio.h>
#include "gpuman.h"
#include "gpuman-internal.h"

/* Exit statuses (README "Exit status"). */
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
	int by_given, wait_given; /* --by, --wait given: [defaults] do not apply */
};

struct cmd_entry {
	const char *name;
	const char *summary; /* one line for `gpuman --help` */
	const char *usage;   /* full text for `gpuman NAME --help` */
	int (*exec)(struct cli *cli, int argc, char **argv);
};

extern const struct cmd_entry cmd_status, cmd_info, cmd_ps, cmd_pick, cmd_run;
extern const struct cmd_entry cmd_batch, cmd_submit, cmd_queue, cmd_cancel, cmd_logs, cmd_wait,
    cmd_dispatcher, cmd_serve, cmd_waste, cmd_top;
extern const struct cmd_entry cmd_complete, cmd_daemon, cmd_slurm_sample, cmd_reserve, cmd_release;
/* The command table of cli/gpuman.c (completion and man pages read it). */
const struct cmd_entry *const *cli_commands(size_t *count);

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
/* For a whole-GPU request (no --mig): on stderr, "gpuman CMD: note: GPU 0 is
 * in MIG mode: never handed out whole (...)" for each such GPU of snap, so
 * that a GPU that looks idle is not passed over without a word. */
void cli_note_mig_gpus(const struct cli *cli, const char *cmd, const struct gm_snapshot *snap);

/* The live leases and waiters, for display.  An unusable registry gives an
 * empty view and a warning on stderr (the GPUs are still worth showing). */
struct registry_view;
void cli_read_leases(struct cli *cli, struct registry_view *view);
/* The leases and waiters as JSON arrays (new references). */
struct json_t *cli_leases_json(const struct registry_view *view);
struct json_t *cli_waiters_json(const struct registry_view *view);
/* The `status --json` document: the snapshot, leases and waiters (new
 * reference); `serve` publishes the same document. */
struct json_t *cli_status_json(const struct gm_snapshot *snap, const struct registry_view *view);
/* "3m", "2h05m": how long since ms (wall clock). */
char *fmt_age(char *buf, size_t len, int64_t since_ms);

/*
 * The machine as a command without operands shows it: options parsed (the
 * common ones and the command's own, handed to own() as in cli_parse), a
 * snapshot taken with per-process utilization, the live leases and waiters
 * read.  cli_look_with() returns CLI_CONTINUE, or the status to exit with
 * (already reported); on CLI_CONTINUE the caller ends with
 * cli_look_release().
 */
struct cli_look {
	struct gm_context *ctx;
	struct gm_snapshot *snap;
	struct registry_view *view;
};
void cli_look_release(struct cli_look *look);
int cli_look_with(struct cli *cli, const struct cmd_entry *cmd, int argc, char **argv,
                  const char *shortopts, const struct option *own_opts,
                  int (*own)(struct cli *cli, int opt, const char *arg, void *data), void *data,
                  struct cli_look *look);
/* Only the snapshot and leases, options already parsed (a refresh). */
int cli_look_take(struct cli *cli, struct cli_look *look);

/* How far back per-process utilization is averaged (NVML keeps samples of
 * the last seconds; asking costs no waiting). */
#define CLI_UTIL_WINDOW_S 10

/* For each process of look->snap, the position in look->view of the lease
 * it runs under (the lease's job or a descendant), or -1.  Caller frees;
 * NULL when out of memory. */
long *cli_proc_leases(const struct cli_look *look);

/* The waste finder on the look, with the lease grace period; 0, or -1 out
 * of memory (reported). */
struct waste_report;
struct waste_opts;
int cli_waste(struct cli *cli, const struct cli_look *look, struct waste_opts *opts,
              struct waste_report *rep);
/* The report as a JSON array of findings (new reference). */
struct json_t *cli_waste_json(const struct cli_look *look, const struct waste_opts *opts,
                              const struct waste_report *rep);

/* The findings for people, grouped per user (cmd_waste.c). */
void cli_waste_print(const struct cli *cli, const struct cli_look *look,
                     const struct waste_opts *opts, const struct waste_report *rep);

/* Another user's text, escaped for the terminal (text_printable) into a
 * buffer of CLI_SAFE_SIZE; for printf arguments. */
#define CLI_SAFE_SIZE 1024
const char *cli_safe(char *buf, const char *s);

/* Print a JSON value (steals the reference) to stdout. */
struct json_t;
int cli_print_json(struct json_t *value);

/* Human sizes: "812M", "23.9G". */
char *fmt_mib(char *buf, size_t len, uint64_t mib);
/* The width tables must fit: $COLUMNS if it is a number, else the
 * terminal's when stdout is one; 0 (no limit) otherwise. */
int cli_term_width(void);

/* Colours, empty when cli->color is off. */
const char *c_bold(const struct cli *cli);
const char *c_dim(const struct cli *cli);
const char *c_red(const struct cli *cli);
const char *c_green(const struct cli *cli);
const char *c_yellow(const struct cli *cli);
const char *c_reset(const struct cli *cli);

#endif
