/*
 * queue.h - the per-user queue directory of batch and the queue commands:
 * where it is, opening its job store, peeking at it (top, serve), waking
 * and starting its dispatchers race-free, pruning, and the machine a job
 * belongs to.  The commands' own side (reporting, table cells) is
 * cli/jobs.h.
 *
 * The queue directory ($GPUMAN_QUEUE_DIR, else
 * ${XDG_STATE_HOME:-$HOME/.local/state}/gpuman; mode 0700) holds:
 *
 *   jobs.db          the job store (SQLite, WAL; 0600)
 *   dispatcher.lock  flock'd by the live dispatcher; holds its pid (one per
 *                    machine: dispatcher-<hash>.lock, see queue_machine_key)
 *   dispatcher.log   what the dispatcher has to say
 *   wake             rewritten by submit and cancel: "look at the queue"
 *   events           rewritten by the dispatcher when jobs end
 *   logs/<id>.log    each job's stdout and stderr
 *   runs/slot-<n>.run  the run files of running jobs, reused (protocol.h);
 *                    runs-<hash>/ those of another machine's dispatcher
 */
#ifndef GM_QUEUE_H
#define GM_QUEUE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include "jobstore.h"

struct queue {
	char dir[PATH_MAX];
	struct jobstore *store;
};

/* Resolve, create (0700) and check the queue directory and open its store.
 * 0, or -1 with a message in err. */
int queue_open(struct queue *q, char *err, size_t len);
void queue_close(struct queue *q);
/* "<dir>/<name>" into buf. */
char *queue_path(const struct queue *q, const char *name, char *buf, size_t len);
/* The log file of a job. */
char *queue_log_path(const struct queue *q, const struct job *job, char *buf, size_t len);
/*
 * The queue of the user running gpuman, read without creating anything (for
 * views: top, serve): jobs per enum job_state into counts[JOB_STATE_COUNT]
 * and the first max queued jobs, oldest first, into *next
 * (free with jobstore_free_list).  0 with zero counts when the user has no
 * queue; -1 with a message in err when it cannot be read.
 */
int queue_peek(size_t *counts, struct job **next, size_t *nnext, size_t max, char *err, size_t len);
/* Tell a running dispatcher to look at the queue again. */
void queue_wake(const struct queue *q);

/*
 * Start the dispatcher of machine (queue_machine_key) unless one runs: take
 * its lock without waiting; if that works nobody holds it, so fork, setsid,
 * fork again and exec `gpuman dispatcher` in the grandchild, in the
 * machine's environment, which inherits the locked descriptor; if it is
 * held, a dispatcher runs and will see our commit (it looks again after
 * dropping the lock).  Returns 0, -1 with a message.
 */
int queue_ensure_machine(const struct queue *q, const char *machine, char *errbuf, size_t errlen);
/* The same for every machine that has jobs queued, running or with an end
 * still to tell. */
int queue_ensure_dispatcher(const struct queue *q, char *errbuf, size_t errlen);
/* Forget the jobs that ended before ended_before_ms (INT64_MAX: all that
 * ended) and delete their logs; *count gets how many.  0, or -1 with a
 * message. */
int queue_prune(struct queue *q, int64_t ended_before_ms, size_t *count, char *errbuf,
                size_t errlen);
/*
 * Read what an inotify descriptor watching the queue directory has (non-
 * blocking); 1 if any of it may mean news -- anything but the closing of
 * a dispatcher's lock, which every queue_ensure_dispatcher() call (ours too)
 * causes: a watcher that reacted to it would wake itself for ever.
 */
int queue_drain_events(int ifd);
/* Does any job wait or run?  (Then a dispatcher must live.) */
int queue_has_work(struct queue *q);

/*
 * Each job keeps its own machine: the variables of its environment that
 * decide its GPUs and its registry (GPUMAN_NVML, GPUMAN_SIM,
 * GPUMAN_SIM_STATE, GPUMAN_STATE_DIR, GPUMAN_BROKER, GPUMAN_CONFIG, paths
 * made absolute; GPUMAN_RESERVATION) make its machine key, "NAME=VALUE\n" each, "" when none is
 * set.  The queue runs one dispatcher per machine key, in that environment,
 * with its own lock and run files ("" keeps the names dispatcher.lock and
 * runs/).
 */
/* The key of the calling process's environment; caller frees; NULL
 * out of memory. */
char *queue_machine_key(void);
/* Make the environment that of key: its variables set, the others unset.
 * 0, -1 if key is not one. */
int queue_machine_apply(const char *key);
/* The run files' directory and the dispatcher's lock file name of a machine. */
char *queue_run_dir(const struct queue *q, const char *machine, char *buf, size_t len);
char *queue_lock_name(const char *machine, char *buf, size_t len);

#endif
