/*
 * cli.h - what the gpuman subcommands share beyond the command line
 * (cmdline/cmdline.h: the command entry, the common options, exit codes,
 * messages): the command table, the machine as the views read it, and
 * output helpers.  Each subcommand lives in its own cmd_*.c and exports
 * one struct cmd_entry; cli/gpuman.c lists them.
 */
#ifndef GM_CLI_H
#define GM_CLI_H

#include <stdio.h>
#include "cmdline.h"

extern const struct cmd_entry cmd_status, cmd_info, cmd_ps, cmd_pick, cmd_run;
extern const struct cmd_entry cmd_batch, cmd_submit, cmd_queue, cmd_cancel, cmd_logs, cmd_wait,
    cmd_dispatcher, cmd_serve, cmd_waste, cmd_top;
extern const struct cmd_entry cmd_complete, cmd_daemon, cmd_slurm_sample, cmd_reserve, cmd_release;
extern const struct cmd_entry cmd_pam_session;
/* The command table of cli/gpuman.c (completion and man pages read it). */
const struct cmd_entry *const *cli_commands(size_t *count);

/* For a whole-GPU request (no --mig): on stderr, "gpuman CMD: note: GPU 0 is
 * in MIG mode: never handed out whole (...)" for each such GPU of snap, so
 * that a GPU that looks idle is not passed over without a word. */
void cli_note_mig_gpus(const struct cli *cli, const char *cmd, const struct gm_snapshot *snap);

/* On stderr as a wait begins: "gpuman CMD: waiting for GPUs[ for 'WHAT']
 * (Ctrl-C to give up):" and the rules' reason (none: the first line only). */
void cli_say_waiting(const char *cmd, const char *what, const char *why);

/* Why exec of prog failed with err, for people: "not found in PATH" for
 * a bare name, "is a directory", or strerror's text. */
const char *cli_exec_why(const char *prog, int err);

/* The policy's per-GPU explanation (pick_explain) without its last line
 * end, for the end of a message; "" for none. */
const char *cli_explained(char *explain);

/* EXIT_UNAVAILABLE, having said why and that not_done ("no task was
 * run"), when no GPU of this machine could ever take cli->req (in snap, or
 * a reading taken here when NULL); EXIT_OK otherwise, also when NVML
 * cannot tell now (the engine then says why each task waits). */
int cli_never_fits(struct cli *cli, struct gm_context *ctx, const struct gm_snapshot *snap,
                   const char *not_done);

/* The live leases and waiters, for display: those sent with snap where a
 * broker sent them (cli->leases).  An unusable registry gives an empty
 * view and a warning on stderr (the GPUs are still worth showing). */
struct registry_view;
void cli_read_leases(struct cli *cli, const struct gm_snapshot *snap, struct registry_view *view);
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

/* The waste finder on the look (listing_find_waste); 0, or -1 out of
 * memory (reported).  Its JSON is listing_waste_json. */
struct waste_report;
struct waste_opts;
int cli_waste(struct cli *cli, const struct cli_look *look, struct waste_opts *opts,
              struct waste_report *rep);

/* The findings for people, grouped per user (cmd_waste.c). */
void cli_waste_print(const struct cli *cli, const struct cli_look *look,
                     const struct waste_opts *opts, const struct waste_report *rep);

/* Another user's text, escaped for the terminal (text_printable) into a
 * buffer of CLI_SAFE_SIZE; for printf arguments. */
#define CLI_SAFE_SIZE 1024
const char *cli_safe(char *buf, const char *s);

/* Become program (gpuman-serve, gpuman-broker), installed next to gpuman,
 * with argv (argv[0] is replaced): the servers are programs of their own.
 * Returns only on failure, reported. */
int cli_exec_sibling(struct cli *cli, const struct cmd_entry *cmd, const char *program,
                     char **argv);

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
