/*
 * jobstore_db.h - the job store's own: what jobstore.c (the connection,
 * its schema and statements) shares with the files that extend it
 * (jobstore_rows.c: the rows; jobstore_ext.c: schema 4 and 5).  Not for
 * the commands.
 */
#ifndef GM_JOBSTORE_DB_H
#define GM_JOBSTORE_DB_H

#include <sqlite3.h>
#include "jobstore.h"

/* A dispatcher sees the jobs of its own machine only (jobstore_set_machine);
 * jobs of an older store (NULL) are the default machine's (""). */
#define MACHINE "(:machine IS NULL OR IFNULL(machine, '') = :machine)"

/* Statements of jobstore_ext.c, prepared once per connection. */
#define JOBSTORE_EXTRA_STMTS 6

/* The statement in slot (prepared from sql on first use), reset and with
 * the machine filter bound; NULL if it cannot be prepared. */
sqlite3_stmt *jobstore_cached(struct jobstore *st, unsigned slot, const char *sql);
enum gm_err jobstore_db_fail(struct jobstore *st, char *errbuf, size_t errlen, const char *what);
/* The machine filter of the connection (owned by it). */
char **jobstore_machine_filter(struct jobstore *st);

/* Schema 3 to 4, 5 and 6 (jobstore_ext.c). */
extern const char jobstore_schema4[];
extern const char jobstore_schema5[];
extern const char jobstore_schema6[];

/* ---- jobstore.c's connection, for jobstore_rows.c --------------------- */

/* The columns every read returns, in this order (env last, optional). */
#define COLUMNS                                                                                    \
	"id, state, command, argv, cwd, request, log, submit_ms, start_ms, end_ms, gpus, "         \
	"uuids, exit_status, reason, attempts, retries, ooms, min_free_mib, placed_free_mib, "     \
	"peak_mem_mib, util_samples, util_sum, runner_pid, run_slot, name, priority, notify, "     \
	"(SELECT group_concat(after) FROM (SELECT after FROM deps WHERE deps.job = jobs.id "       \
	"ORDER BY after)), time_limit_s, node, machine, array_task, array_of, array_limit"

enum stmt_id {
	ST_INSERT,
	ST_INSERT_DEP,
	ST_READY,
	ST_GET,
	ST_GET_ENV,
	ST_UPDATE,
	ST_ACCOUNT,
	ST_IDS,
	ST_COUNTS,
	ST_HAS_LIVE,
	ST_NOTIFY_DUE,
	ST_NOTIFIED,
	ST_ENDED_SINCE,
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST_COUNT
};

struct jobstore {
	sqlite3 *db;
	char path[4096];
	sqlite3_stmt *stmt[ST_COUNT];
	sqlite3_stmt *extra[JOBSTORE_EXTRA_STMTS]; /* jobstore_cached() */
	char *machine;                             /* jobstore_set_machine; NULL: all */
};

sqlite3_stmt *jobstore_stmt(struct jobstore *st, enum stmt_id id);

/* Run a statement to completion; SQLITE_DONE or SQLITE_ROW is success. */
int jobstore_step_done(sqlite3_stmt *s);

#endif
