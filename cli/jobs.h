/*
 * jobs.h - what batch and the queue commands share besides the engine
 * (engine.h) and the queue directory (queue.h): opening the queue with
 * the failure reported, jobs as table cells, and what submit records.
 */
#ifndef GM_JOBS_H
#define GM_JOBS_H

#include <stddef.h>
#include <stdint.h>
#include "cli.h"
#include "engine.h"
#include "queue.h"

/* queue_open, the failure reported; EXIT_OK or EXIT_FAIL. */
int cli_queue_open(struct cli *cli, struct queue *q);

/* queue -u USER (NULL: every user but me): their running jobs' leases and
 * their requests in the waiting line, from the registry, as status shows
 * them to everyone (queue_others.c).  Exit status. */
int queue_show_others(struct cli *cli, const char *user, unsigned me);

/* "1.2s", "3m05s", "2h01m"; "-" for negative. */
char *fmt_duration(char *buf, size_t len, int64_t ms);
/* Peak GPU memory / mean utilization cells: "2.0G" / "90%", or "-" when
 * the job was never sampled. */
char *fmt_peak(char *buf, size_t len, const struct job *job);
char *fmt_util(char *buf, size_t len, const struct job *job);
/* Parse a job id operand; -1 if it is not one. */
int64_t parse_job_id(const char *s);
/* "17" or "17-36" (an array's ids; at most 100000): 0 with *lo..*hi, -1 if
 * it is neither. */
int parse_id_range(const char *s, int64_t *lo, int64_t *hi);
/* A queued job that something of its machine holds back (a dispatcher
 * that cannot start, a full disk), or with gpus, other jobs' GPUs (said
 * once, however often their holders change): say why on stderr, as wait
 * and logs -f wait for it, unless said already holds that reason; said
 * (len bytes, "" at first) then holds it. */
void job_tell_held(struct cli *cli, const struct job *job, int gpus, char *said, size_t len);

/* ---- jobspec.c: what submit records beside the command ---------------- */

/* submit --time: "90s", "30m", "2h", "1h30m", "1d", or Slurm's "MM:SS",
 * "HH:MM:SS", "D-HH[:MM[:SS]]"; a bare number is refused (minutes to
 * Slurm, seconds elsewhere) unless bare_minutes (submit -t, Slurm's own
 * letter, where it means minutes as in Slurm).  Whole seconds, 1s to
 * 366d; -1 with a message that names the option (opt: "--time", "-t"). */
int parse_time_limit(const char *opt, const char *s, int bare_minutes, long long *secs,
                     char *errbuf, size_t errlen);

/* submit --array: at most this many tasks, numbered 0..ARRAY_INDEX_MAX. */
#define ARRAY_MAX 1000
#define ARRAY_INDEX_MAX 999999
/* "1-20", "0-30:10" (a step), "1,3,5", "1-5,10", each optionally with
 * "%K" (at most K run at once): the task numbers in order into *tasks
 * (caller frees), *count of them, K into *limit (0: no limit).  -1 with a
 * message naming the option. */
int parse_array_spec(const char *s, int **tasks, size_t *count, int *limit, char *errbuf,
                     size_t errlen);
/* s with every {task} replaced by task; caller frees; NULL out of memory. */
char *subst_task(const char *s, int task);

#endif
