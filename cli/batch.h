/*
 * batch.h - what the two ways of running a task file share (batch.c): on
 * this machine (cmd_batch.c) and on Slurm (cmd_batch_slurm.c).  The task file, its
 * placeholders, the log directory and its task store (what --resume reads),
 * the progress line and the summary are one code for both, so that a task
 * file reads and reports the same wherever it runs.
 */
#ifndef GM_BATCH_H
#define GM_BATCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include "cli.h"
#include "engine.h"
#include "protocol.h"
#include "safedir.h" /* make_dirs */

/* The BATCH options; batch_option() handles them for cli_parse(). */
enum {
	OPT_JOBS = OPT_CMD_BASE,
	OPT_RETRIES,
	OPT_LOG_DIR,
	OPT_DRY_RUN,
	OPT_RESUME,
	OPT_PROGRESS,
	OPT_BATCH_END
};
#define BATCH_OPTIONS                                                                              \
	{"jobs", required_argument, NULL, OPT_JOBS},                                               \
	    {"retries", required_argument, NULL, OPT_RETRIES},                                     \
	    {"log-dir", required_argument, NULL, OPT_LOG_DIR},                                     \
	    {"dry-run", no_argument, NULL, OPT_DRY_RUN},                                           \
	    {"resume", no_argument, NULL, OPT_RESUME},                                             \
	{                                                                                          \
		"progress", no_argument, NULL, OPT_PROGRESS                                        \
	}

struct batch_opts {
	unsigned jobs; /* -j; 0 no limit */
	unsigned retries;
	const char *log_dir;
	int dry_run, resume, progress;
};
/* cli_parse's own() for the BATCH options (data: struct batch_opts);
 * -1 for an option that is not one of them. */
int batch_option(struct cli *cli, int opt, const char *arg, void *data);

/* The task file: each non-empty line that is not a comment is a task. */
struct task {
	int64_t n; /* its number: 1, 2, ... over the non-comment lines */
	char *line;
};
/* 0; -1 a read error (errno); -2 a line that cannot run as written
 * (protocol_check_line), with err saying "FILE:LINE: what". */
int read_tasks(FILE *f, const char *name, struct task **out, size_t *count, char *err,
               size_t errlen);
void tasks_free(struct task *t, size_t n);

/* The task store of a log directory: without --resume start over, with it
 * keep the tasks that succeeded (same number and line) and queue the rest;
 * *skipped counts those kept.  The logs of tasks that run again move to
 * run-<time>/ in dir (dir_fd: dir opened, or -1).  Reports failures;
 * EXIT_OK or EXIT_FAIL. */
/* A file or directory of ours in the log directory (dir_fd), not a link;
 * a directory is created (0700) if missing, a missing file is fine.  -1
 * with errno otherwise. */
int batch_private_entry(int dir_fd, const char *name, mode_t type);
/* The log directory made ready for a batch, local or Slurm: path checked
 * and opened (safedir_open; owned as it takes it), its absolute path into
 * dir, its .runs/ (whose path goes into runs), its batch.lock held against
 * a second batch there, and its job store open.  EXIT_OK, or the error
 * told; what was opened is left in *dir_fd, *lock_fd and *st either way,
 * for the caller to close. */
int batch_open_dir(struct cli *cli, const char *path, int owned, char *dir, size_t dirlen,
                   char *runs, size_t runslen, int *dir_fd, int *lock_fd, struct jobstore **st);
int prepare_store(struct cli *cli, struct jobstore *st, const struct task *t, size_t n,
                  const struct batch_opts *o, const char *dir, int dir_fd, size_t *skipped);

/* The progress line on stderr. */
struct batch_bar {
	int on, tty;
	size_t total;
	size_t done0, failed0; /* already ended before this run */
	int64_t last_ms;
	int told_stop;
	int drawn;
};
void batch_bar_draw(struct batch_bar *p, const struct engine_counts *c, int force);
/* The engine's progress callback (data: struct batch_bar). */
void batch_progress(void *data, const struct engine_counts *c);
/* The engine's blocked callback: why no task can start (data: the bar). */
void batch_blocked(void *data, const char *why);
/* The last progress line, from the store's counts, and its newline. */
void batch_progress_end(struct batch_bar *p, struct jobstore *st, int64_t elapsed_ms);

/* The summary: per task, then per GPU (nt rows; 0 prints none). */
struct gpu_tally {
	unsigned index;
	char name[96];
	char uuid[96];
	size_t tasks;
	int64_t busy_ms;
};
void print_summary(struct cli *cli, const struct job *jobs, size_t n, const struct gpu_tally *t,
                   size_t nt);
int write_summary(const char *path, const char *file, const char *log_dir, const struct job *jobs,
                  size_t n, const struct gpu_tally *t, size_t nt, int64_t started_ms,
                  int64_t ended_ms);

/* Slurm (cmd_batch_slurm.c): does this command line go to Slurm (--slurm,
 * or plain batch inside a multi-node allocation, or in salloc's shell on a
 * login node; GPUMAN_SLURM=0 keeps it local)?  Then batch_slurm_exec runs
 * it. */
int batch_in_allocation(void);
int batch_wants_slurm(int argc, char **argv);
int batch_slurm_exec(struct cli *cli, const struct cmd_entry *cmd, int argc, char **argv);

#endif
