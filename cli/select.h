/*
 * select.h - what status, ps, waste and top share to show part of the
 * machine and to print it as CSV: -i GPU[,GPU] (NVML indices or UUID
 * prefixes, as nvidia-smi -i), -u USER[,USER], --format csv[=COLUMNS],
 * --watch[=SEC].
 *
 *   struct cli_select sel = CLI_SELECT_INIT;
 *   cli_look_with(cli, cmd, argc, argv, CLI_SELECT_SHORTOPTS, opts, own, &sel, &look)
 *     where own() hands every option to cli_select_option() first;
 *   cli_select_resolve(cli, &sel, look.snap)      (-i against this snapshot)
 *   ... cli_select_gpu(&sel, index), cli_select_proc(&sel, proc) ...
 */
#ifndef GM_CLI_SELECT_H
#define GM_CLI_SELECT_H

#include <stdint.h>
#include <stdio.h>
#include "cli.h"

#define CLI_SELECT_MAX_USERS 32

enum { OPT_SELECT_FORMAT = OPT_CMD_BASE + 50, OPT_SELECT_WATCH };

struct cli_select {
	const char *gpus_arg; /* -i as given; resolved per snapshot */
	uint64_t gpus;        /* NVML index bits; 0 with gpus_arg NULL: all */
	size_t user_count;    /* -u: 0 every user */
	unsigned uids[CLI_SELECT_MAX_USERS];
	char names[CLI_SELECT_MAX_USERS][33]; /* "" for a uid without a name */
	int csv;                              /* --format csv */
	const char *columns;                  /* --format csv=COLUMNS; NULL the default */
	int noheader, nounits;                /* --format csv,noheader,nounits (nvidia-smi's) */
	int smi;                              /* status --query-gpu: nvidia-smi's CSV form */
	int watch;                            /* --watch */
	int watch_arg_missing;                /* --watch without =SEC: SEC may follow */
	int64_t watch_ms;
};
#define CLI_SELECT_INIT                                                                            \
	{                                                                                          \
		NULL, 0, 0, {0}, {""}, 0, NULL, 0, 0, 0, 0, 0, 2000                                \
	}

#define CLI_SELECT_SHORTOPTS "i:u:"
#define CLI_SELECT_LONGOPTS                                                                        \
	{"id", required_argument, NULL, 'i'}, {"user", required_argument, NULL, 'u'},              \
	{                                                                                          \
		"format", required_argument, NULL, OPT_SELECT_FORMAT                               \
	}
#define CLI_WATCH_LONGOPT                                                                          \
	{                                                                                          \
		"watch", optional_argument, NULL, OPT_SELECT_WATCH                                 \
	}

/* CLI_CONTINUE when handled, -1 when not a selection option, else the
 * status to exit with (a usage error, reported). */
int cli_select_option(struct cli *cli, struct cli_select *sel, int opt, const char *arg);
/* Resolve -i against snap: EXIT_OK, or EXIT_USAGE naming the entry. */
int cli_select_resolve(struct cli *cli, struct cli_select *sel, const struct gm_snapshot *snap);
int cli_select_gpu(const struct cli_select *sel, unsigned index);
int cli_select_user(const struct cli_select *sel, int has_user, unsigned uid);
int cli_select_proc(const struct cli_select *sel, const struct gm_proc *p);
/* A user by name (leases, waiters and findings carry names). */
int cli_select_user_name(const struct cli_select *sel, int has_user, const char *name);
/* Is g shown: selected, and (with --user) used or leased by one of them? */
int cli_select_gpu_shown(const struct cli_select *sel, const struct cli_look *look,
                         const struct gm_gpu *g);

/*
 * CSV output.  A command describes its columns once; the user's list picks
 * and orders them.  Fields are RFC 4180 quoted, and other users' text has
 * its control characters escaped like every human-readable view.
 */
struct csv_column {
	const char *name;
	const char *help; /* unit or meaning, for the usage text */
};
/* Parse sel->columns (NULL: every column) into idx (room for count); the
 * number chosen, or -1 with a usage error naming the unknown column. */
int csv_choose(struct cli *cli, const struct csv_column *cols, size_t count,
               const struct cli_select *sel, size_t *idx);
/* The header line, unless --format csv,noheader. */
void csv_header(const struct cli_select *sel, const struct csv_column *cols, const size_t *idx,
                size_t n);
/* One field: sep before it unless first; NULL prints an empty field. */
void csv_field(int first, const char *text);

/* status --watch (cmd_status.c): also what top shows without a terminal.
 * idx/ncols: the CSV columns when sel->csv. */
int cli_status_watch(struct cli *cli, struct cli_select *sel, const size_t *idx, size_t ncols);

#endif
