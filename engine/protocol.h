/*
 * protocol.h - what a job's supervisors share, each fact written once: the
 * engine (engine/), its runner (runner/gpuman-runner.c) and `gpuman run`.
 * The one header of the engine module that the runner and `run` include;
 * it is implemented in engine/protocol.c, childenv.c and jobtree.c, which
 * need nothing but libc, so that the static runner links them from
 * libgmengine.a alone.
 *
 * Between the engine and a runner:
 *
 *   engine                                  runner
 *   run file <run_dir>/slot-<n>.run,
 *     locked, with PROTOCOL_RESULT_ROOM
 *     bytes of room (protocol_run_path)
 *   posix_spawn(gpuman-runner ...)  ----->  holds the lease and run file
 *     (or, --late, as the job waits
 *     in the broker's line; at the
 *     grant, the lease's arguments  ----->  protocol_receive_strings)
 *   commit the claim; the go byte   ----->  protocol_await_go: runs the job
 *     (end of file: "do not run")           (or writes stop=aborted)
 *   SIGTERM (cancel), SIGUSR1 (Ctrl-C),     SIGTERM to the job's group,
 *     or its time limit passes (SIGALRM),
 *     SIGUSR2 (kill)                          SIGKILL PROTOCOL_CANCEL_GRACE_S
 *                                             later (at once on SIGUSR2)
 *   reads the result line           <-----  protocol_result_format into the
 *     (protocol_result_parse)                 run file, then releases the
 *                                             lease and exits
 *
 * `gpuman run` uses the same go byte between itself and its child, the
 * same job environment and the same exit mapping.
 */
#ifndef GM_PROTOCOL_H
#define GM_PROTOCOL_H

#include <stddef.h>
#include <sys/types.h>

/* ---- the go byte ------------------------------------------------------ */

/* Give the go: 0, or -1 with errno (the reader has gone). */
int protocol_give_go(int fd);
/* Wait for the go on fd (retrying EINTR): 0 go, -1 anything else (end of
 * file: the parent died or the claim was not recorded; do not run). */
int protocol_await_go(int fd);

/*
 * What a supervisor started before its grant learns at the grant, down the
 * go socket before the go: a list of strings (`gpuman run`'s child: its
 * environment; an early gpuman-runner: its lease's arguments), as their
 * count and bytes, then each with its NUL.  Sending to a reader that died
 * fails rather than raise SIGPIPE.  0, or -1.
 */
int protocol_send_strings(int fd, char *const *v);
/* The list sent (NULL-terminated, one allocation for the strings, v[0]'s
 * base where there is a v[0], and one for the array), or NULL: end of file, a read error, out
 * of memory, or a count past sanity. */
char **protocol_receive_strings(int fd);

/* ---- scheduling ---------------------------------------------------------- */

/*
 * A supervisor's work is brief and lies on the path from one job's end to
 * the next job's start, while a GPU stands idle; on a busy machine it waits
 * behind every runnable process at each wake-up.  So `gpuman run`, the
 * runner, the engine and the broker ask the kernel for a short time slice
 * (sched_setattr's sched_runtime: Linux 6.12's EEVDF runs such a task
 * sooner after it wakes, and gives it no larger share of the CPU).  The job
 * gets the caller's own settings back.  Older kernels ignore the hint, and
 * a call that fails changes nothing.
 */
struct protocol_sched {
	int saved;              /* the caller's settings are below */
	unsigned char attr[56]; /* struct sched_attr, as the kernel gave it */
};
/* Short slices from now on for the calling thread (and what it forks);
 * saved (may be NULL) keeps the settings it had. */
void protocol_sched_short(struct protocol_sched *saved);
/* Put back what protocol_sched_short saved; safe in a vfork child. */
void protocol_sched_restore(const struct protocol_sched *saved);

/* ---- exit statuses ---------------------------------------------------- */

/* A wait() status as a shell and gpuman report it: the exit status, or
 * 128+N if killed by signal N. */
int protocol_exit_status(int wait_status);
/* "killed by signal 9 (Killed)" / "exit status 3", for reasons. */
void protocol_describe_status(int status, char *buf, size_t len);

/* A time limit for people: "1d2h", "1h30m", "90s" -> "1m30s". */
void protocol_format_limit(long long seconds, char *buf, size_t len);

/* Cancelling a job: SIGTERM to its process group, SIGKILL this much later.
 * A job that reaches its time limit is ended the same way. */
#define PROTOCOL_CANCEL_GRACE_S 10

/* ---- run files and results --------------------------------------------- */

/* How a job was stopped, as the result line names it. */
enum protocol_stop {
	PROTOCOL_STOP_NONE = 0,        /* it ended by itself */
	PROTOCOL_STOP_CANCELLED = 1,   /* SIGTERM: gpuman cancel */
	PROTOCOL_STOP_INTERRUPTED = 2, /* SIGUSR1: batch's Ctrl-C */
	PROTOCOL_STOP_ABORTED = 3,     /* no go: it never ran, stays queued */
	PROTOCOL_STOP_TIMEOUT = 4      /* its time limit (--time-limit) passed */
};
const char *protocol_stop_name(enum protocol_stop stop);

struct protocol_result {
	long long job;
	int attempt;
	long long start_ms, end_ms; /* wall clock */
	int status;                 /* protocol_exit_status; -1 never ran */
	int oom;                    /* its output reported CUDA out of memory */
	enum protocol_stop stop;
};

/* Room a run file has for its result before the job starts (a disk that
 * fills up meanwhile cannot lose the result). */
#define PROTOCOL_RESULT_ROOM 256

/* "<run_dir>/slot-<n>.run" into buf. */
void protocol_run_path(const char *run_dir, int slot, char *buf, size_t len);
/* The result line, '\n'-terminated, into buf; its length (< len, at most
 * PROTOCOL_RESULT_ROOM), or -1 if it does not fit. */
int protocol_result_format(const struct protocol_result *r, char *buf, size_t len);
/* Parse the start of a run file (text, NUL-terminated): 0 if it holds a
 * complete result, -1 if not (none yet, the room's zeros, or garbage). */
int protocol_result_parse(const char *text, struct protocol_result *r);

/* ---- a batch task's line ------------------------------------------------- */

/* Its placeholders filled in: {gpu} the GPUs (NVML indices), {uuid} their
 * UUIDs, {task} its number; gpus or uuids NULL: that placeholder stays (as
 * people read the line before it runs, or for a step that learns its GPUs
 * on its node).  Caller frees; NULL out of memory. */
char *protocol_substitute(const char *line, const char *gpus, const char *uuids, long long task);

/* The placeholders of a batch line, without braces: "gpu", "uuid", "task",
 * then NULL.  protocol_substitute fills exactly these. */
extern const char *const protocol_placeholders[];

/*
 * A command line that runs through /bin/sh -c (a batch line, submit's
 * single string), checked when it is given rather than when it runs: no
 * NUL or other control byte (a binary file), every quote closed, no
 * backslash at the end, and no {word} a slip away from a placeholder in
 * known (NULL-terminated, names without braces: {gpus}, {Task} for
 * {gpu}, {task}), which would run as literal text.  len: the line's bytes
 * (a NUL inside counts).  0, or -1 with err saying what and where
 * ("unknown placeholder '{gpus}' (did you mean '{gpu}'?)").
 */
int protocol_check_line(const char *line, size_t len, const char *const *known, char *err,
                        size_t errlen);

/* ---- what a job's output says ------------------------------------------ */

/* Does text (NUL-terminated) report a CUDA out-of-memory error (PyTorch's
 * "CUDA out of memory", CUDA_ERROR_OUT_OF_MEMORY,
 * cudaErrorMemoryAllocation; case-insensitive)? */
int protocol_says_oom(const char *text);
/* Longest pattern protocol_says_oom looks for: a reader of chunks keeps
 * this many bytes of overlap. */
#define PROTOCOL_OOM_OVERLAP 64

/* ---- the job's environment ---------------------------------------------- */

struct child_env {
	char **vars; /* "NAME=VALUE", NULL-terminated; owned */
	size_t count;
};
#define CHILD_ENV_INIT                                                                             \
	{                                                                                          \
		NULL, 0                                                                            \
	}

/* Start from a copy of environ.  Returns 0, -1 out of memory. */
int child_env_init(struct child_env *env);
/* Start from a block of NUL-separated NAME=VALUE strings (len bytes). */
int child_env_init_block(struct child_env *env, const char *block, size_t len);
/* Set NAME=VALUE; an existing NAME is replaced only if overwrite.
 * Returns 0, -1 out of memory. */
int child_env_set(struct child_env *env, const char *name, const char *value, int overwrite);
void child_env_release(struct child_env *env);

/* Tell frameworks that grab every GPU's memory to stay within a memory
 * share of this fraction of the GPU; values already set win. */
int child_env_framework(struct child_env *env, double fraction);

/* What a job is told about its GPUs. */
struct protocol_job {
	const char *cuda_visible; /* CUDA_VISIBLE_DEVICES ("" no GPU) */
	const char *gpus;         /* GPUMAN_GPUS: NVML indices */
	const char *lease_id;     /* GPUMAN_LEASE; NULL none */
	const char *id_name;      /* "GPUMAN_TASK", "GPUMAN_JOB"; NULL none */
	long long id;
	int share;            /* a memory share: framework variables ... */
	double mem_fraction;  /* ... with this fraction of the GPU ... */
	int no_framework_env; /* ... unless the user said no */
};
/* Set the job's variables in env (overwriting).  0, -1 out of memory. */
int protocol_job_env(struct child_env *env, const struct protocol_job *job);

/* ---- jobs die whole ------------------------------------------------------ */

/*
 * A job dies whole: every process it started, not only the one
 * gpuman started, ends before its lease is released and its end recorded.
 *
 * The supervisor of a job (`gpuman run`, gpuman-runner) makes itself a
 * child subreaper, so that whatever the job leaves behind (a background
 * child, a double-forked daemon) becomes its child when its parent ends;
 * when the job's own process has ended it kills its remaining children, and
 * theirs as they are handed to it, until none is left.  The engine that
 * starts runners is a subreaper too: if a runner is killed (SIGKILL, the
 * OOM killer), the job's processes come to the engine, which kills them
 * before it records the job.
 */

/* Become a child subreaper.  Returns 0, -1 with errno. */
int jobtree_subreaper(void);

/*
 * SIGKILL every child of the caller except the nkeep pids in keep, and
 * every process handed to it meanwhile, until it has no other child; each
 * is reaped here (waitpid on its own pid, so a caller's waitpid(-1) loop
 * never sees them).  Returns how many were killed.
 */
unsigned jobtree_kill_children(const pid_t *keep, size_t nkeep);

/*
 * SIGKILL every process of ours but the caller that holds an open
 * descriptor of the file fd refers to (a job's run file, which all its
 * processes inherit) - for processes that no subreaper of ours received,
 * because their supervisor and its engine both died.  Returns how many
 * were signalled.
 */
unsigned jobtree_kill_holders(int fd);

/* Does process pid hold an open descriptor of the file fd refers to? */
int jobtree_holds(pid_t pid, int fd);

#endif
