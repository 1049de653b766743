/*
 * jobstore.c - the SQLite job store of batch and the queue.  Statements are
 * prepared once per connection: the dispatcher writes a few per task, and
 * at a thousand tasks a second re-preparing would cost more than the work.
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "jobstore.h"
#include "jobstore_db.h"
#include "util.h"

#define SCHEMA_VERSION 6
#define BUSY_TIMEOUT_MS 10000

static const char *const state_names[JOB_STATE_COUNT] = {
    [JOB_QUEUED] = "queued",   [JOB_RUNNING] = "running",     [JOB_DONE] = "done",
    [JOB_FAILED] = "failed",   [JOB_CANCELLED] = "cancelled", [JOB_INTERRUPTED] = "interrupted",
    [JOB_TIMEOUT] = "timeout",
};

const char *job_state_name(enum job_state state)
{
	return (unsigned)state < JOB_STATE_COUNT ? state_names[state] : "unknown";
}

int job_state_parse(const char *name)
{
	for (int i = 0; name && i < JOB_STATE_COUNT; i++)
		if (!strcmp(name, state_names[i]))
			return i;
	return -1;
}

int job_state_final(enum job_state state)
{
	return state != JOB_QUEUED && state != JOB_RUNNING;
}

void job_release(struct job *job)
{
	free(job->command);
	free(job->argv);
	free(job->cwd);
	free(job->env);
	free(job->request);
	free(job->log);
	free(job->gpus);
	free(job->uuids);
	free(job->reason);
	free(job->name);
	free(job->after);
	free(job->notify);
	free(job->node);
	free(job->machine);
	*job = (struct job)JOB_INIT;
}

/* An array task beyond its array's %K: K of its array run already, or
 * are queued before it (it waits like a job --after another). */
#define ARRAY_FULL                                                                                 \
	"(j.array_limit IS NOT NULL AND row_number() OVER (PARTITION BY j.array_of ORDER BY "      \
	"j.id) + (SELECT count(*) FROM jobs r WHERE r.array_of = j.array_of AND r.state = "        \
	"'running') > j.array_limit)"

static const char *const stmt_sql[ST_COUNT] = {
    [ST_INSERT] =
        "INSERT INTO jobs (id, state, command, argv, cwd, env, request, log, "
        "submit_ms, attempts, retries, min_free_mib, name, priority, notify, time_limit_s, "
        "machine, array_task, array_of, array_limit) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
        "?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
    [ST_INSERT_DEP] = "INSERT OR IGNORE INTO deps (job, after) VALUES (?1, ?2)",
    [ST_READY] =
        "SELECT id, waiting FROM (SELECT j.id, j.priority, EXISTS (SELECT 1 FROM "
        "deps d JOIN jobs p ON p.id = d.after WHERE d.job = j.id AND p.state != "
        "'done') OR " ARRAY_FULL " AS waiting FROM jobs j WHERE state = 'queued' AND " MACHINE
        ") ORDER BY priority DESC, id",
    [ST_GET] = "SELECT " COLUMNS " FROM jobs WHERE id = ?1",
    [ST_GET_ENV] = "SELECT " COLUMNS ", env FROM jobs WHERE id = ?1",
    [ST_UPDATE] = "UPDATE jobs SET state = ?2, start_ms = ?3, end_ms = ?4, gpus = ?5, "
                  "uuids = ?6, exit_status = ?7, reason = ?8, attempts = ?9, ooms = ?10, "
                  "min_free_mib = ?11, placed_free_mib = ?12, peak_mem_mib = ?13, "
                  "util_samples = ?14, util_sum = ?15, runner_pid = ?16, log = ?17, "
                  "run_slot = ?20 WHERE id = ?1 AND state = ?18 AND attempts = ?19",
    [ST_ACCOUNT] = "UPDATE jobs SET peak_mem_mib = ?2, util_samples = ?3, util_sum = ?4 "
                   "WHERE id = ?1 AND state = 'running'",
    [ST_IDS] = "SELECT id FROM jobs WHERE state = ?1 AND " MACHINE " ORDER BY id",
    [ST_COUNTS] = "SELECT state, count(*) FROM jobs GROUP BY state",
    [ST_HAS_LIVE] = "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running') "
                    "AND " MACHINE ") OR EXISTS (SELECT 1 FROM jobs WHERE notify IS NOT NULL "
                    "AND notified = 0 AND " MACHINE ")",
    [ST_NOTIFY_DUE] = "SELECT id FROM jobs WHERE notify IS NOT NULL AND notified = 0 "
                      "AND state NOT IN ('queued', 'running') AND " MACHINE " ORDER BY id",
    [ST_NOTIFIED] = "UPDATE jobs SET notified = 1 WHERE id = ?1",
    [ST_ENDED_SINCE] = "SELECT id, state FROM jobs WHERE recorded_ms >= ?1 "
                       "AND state NOT IN ('queued', 'running')",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
};

static enum gm_err db_fail(struct jobstore *st, char *err, size_t len, const char *what)
{
	return gm_fail(GM_ERR_IO, err, len, "job store '%s': %s: %s", st->path, what,
	               sqlite3_errmsg(st->db));
}

enum gm_err jobstore_db_fail(struct jobstore *st, char *err, size_t len, const char *what)
{
	return db_fail(st, err, len, what);
}

static void bind_machine(sqlite3_stmt *s, const char *machine)
{
	int at = sqlite3_bind_parameter_index(s, ":machine");

	if (at)
		sqlite3_bind_text(s, at, machine, -1, SQLITE_STATIC);
}

sqlite3_stmt *jobstore_cached(struct jobstore *st, unsigned slot, const char *sql)
{
	if (slot >= JOBSTORE_EXTRA_STMTS)
		return NULL;
	if (!st->extra[slot] && sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
	                                           &st->extra[slot], NULL) != SQLITE_OK)
		return NULL;
	sqlite3_reset(st->extra[slot]);
	sqlite3_clear_bindings(st->extra[slot]);
	if (st->machine)
		bind_machine(st->extra[slot], st->machine);
	return st->extra[slot];
}

char **jobstore_machine_filter(struct jobstore *st)
{
	return &st->machine;
}

sqlite3_stmt *jobstore_stmt(struct jobstore *st, enum stmt_id id)
{
	if (!st->stmt[id] && sqlite3_prepare_v3(st->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
	                                        &st->stmt[id], NULL) != SQLITE_OK)
		return NULL;
	sqlite3_reset(st->stmt[id]);
	sqlite3_clear_bindings(st->stmt[id]);
	if (st->machine)
		bind_machine(st->stmt[id], st->machine);
	return st->stmt[id];
}

/* Run a statement to completion; SQLITE_DONE or SQLITE_ROW is success. */
int jobstore_step_done(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);

	while (rc == SQLITE_ROW)
		rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? 0 : -1;
}

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " state TEXT NOT NULL,"
    " command TEXT NOT NULL,"
    " argv TEXT, cwd TEXT, env BLOB, request TEXT, log TEXT,"
    " submit_ms INTEGER NOT NULL, start_ms INTEGER, end_ms INTEGER,"
    " gpus TEXT, uuids TEXT, exit_status INTEGER, reason TEXT,"
    " attempts INTEGER NOT NULL DEFAULT 0, retries INTEGER NOT NULL DEFAULT 0,"
    " ooms INTEGER NOT NULL DEFAULT 0, min_free_mib INTEGER NOT NULL DEFAULT 0,"
    " placed_free_mib INTEGER, peak_mem_mib INTEGER,"
    " util_samples INTEGER NOT NULL DEFAULT 0, util_sum REAL NOT NULL DEFAULT 0,"
    " runner_pid INTEGER, run_slot INTEGER);"
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, id);";

/* Schema 1 to 2: job names, and an index on the end time so that pruning
 * old jobs costs what it deletes. */
static const char schema2[] =
    "ALTER TABLE jobs ADD COLUMN name TEXT;"
    "CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs (end_ms) WHERE end_ms IS NOT NULL;";

/* Schema 2 to 3: priorities, dependencies and notifications (submit
 * --priority, --after, --notify; the index holds only the jobs whose end
 * has not been told yet).
 * A job that ends without success cancels, in the same transaction, every
 * queued job that waits for it, and theirs in turn (recursive_triggers):
 * whoever records the end -- the dispatcher, cancel, a trigger -- cannot
 * forget to.  Pruned jobs take their dependency rows with them. */
static const char schema3[] =
    "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN notify TEXT;"
    "ALTER TABLE jobs ADD COLUMN notified INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX IF NOT EXISTS jobs_to_notify ON jobs (id) WHERE notify IS NOT NULL AND notified "
    "= 0;"
    "CREATE TABLE IF NOT EXISTS deps (job INTEGER NOT NULL, after INTEGER NOT NULL,"
    " PRIMARY KEY (job, after)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS deps_by_after ON deps (after);"
    "CREATE TRIGGER IF NOT EXISTS deps_cancel AFTER UPDATE OF state ON jobs"
    " WHEN NEW.state IN ('failed', 'cancelled', 'interrupted') AND OLD.state != NEW.state"
    " BEGIN"
    "  UPDATE jobs SET state = 'cancelled',"
    "   end_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),"
    "   reason = 'not started: job ' || NEW.id || ' (--after) ' ||"
    "    CASE NEW.state WHEN 'cancelled' THEN 'was cancelled' ELSE NEW.state END"
    "  WHERE state = 'queued' AND id IN (SELECT job FROM deps WHERE after = NEW.id);"
    " END;"
    "CREATE TRIGGER IF NOT EXISTS deps_forget AFTER DELETE ON jobs"
    " BEGIN DELETE FROM deps WHERE job = OLD.id; END;";

static const char *const migrations[SCHEMA_VERSION] = {
    schema, schema2, schema3, jobstore_schema4, jobstore_schema5, jobstore_schema6};

/* Run sql, retrying while another connection holds a lock that the busy
 * handler does not wait for (switching to WAL, a fresh database's first
 * schema).  Returns the last SQLite result. */
static int exec_retry(sqlite3 *db, const char *sql)
{
	int64_t deadline = monotonic_ms() + BUSY_TIMEOUT_MS;
	int rc;

	for (;;) {
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
		if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
			return rc;
		if (monotonic_ms() > deadline)
			return rc;
		usleep(5000);
	}
}

static int int_pragma(sqlite3 *db, const char *sql, int *value)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

	if (rc == SQLITE_OK) {
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			*value = sqlite3_column_int(s, 0);
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(s);
	return rc;
}

static int is_wal(sqlite3 *db)
{
	sqlite3_stmt *s = NULL;
	int wal = 0;

	if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL) == SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW)
		wal = !strcmp((const char *)sqlite3_column_text(s, 0), "wal");
	sqlite3_finalize(s);
	return wal;
}

enum gm_err jobstore_open(struct jobstore **out, const char *path, char *err, size_t len)
{
	struct jobstore *st;
	enum gm_err rc = GM_ERR_STATE;
	int fd, version = -1;

	*out = NULL;
	st = calloc(1, sizeof *st);
	if (!st)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	str_copy(st->path, sizeof st->path, path);
	/* Create it ourselves, so that it is private from the first instant;
	 * SQLite gives the -wal and -shm files the same mode. */
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		gm_fail(rc, err, len, "job store '%s': %s", path, strerror(errno));
		goto failed;
	}
	close(fd);
	if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) !=
	    SQLITE_OK) {
		gm_fail(rc, err, len, "job store '%s': %s", path,
		        st->db ? sqlite3_errmsg(st->db) : "cannot open");
		goto failed;
	}
	sqlite3_busy_timeout(st->db, BUSY_TIMEOUT_MS);
	/* WAL is a property of the file, set once by whoever comes first.  A
	 * small page cache: the dispatcher is meant to stay within a few MiB. */
	if ((!is_wal(st->db) && exec_retry(st->db, "PRAGMA journal_mode = WAL") != SQLITE_OK) ||
	    exec_retry(st->db,
	               "PRAGMA synchronous = NORMAL; PRAGMA cache_size = -256;"
	               "PRAGMA temp_store = MEMORY; PRAGMA recursive_triggers = ON") != SQLITE_OK) {
		db_fail(st, err, len, "setting it up");
		goto failed;
	}
	if (int_pragma(st->db, "PRAGMA user_version", &version) != SQLITE_OK) {
		db_fail(st, err, len, "reading its version");
		goto failed;
	}
	if (version < SCHEMA_VERSION) {
		/* Several first users at once: one creates, under the write
		 * lock, the others find it done. */
		int ok = exec_retry(st->db, "BEGIN IMMEDIATE") == SQLITE_OK &&
		         int_pragma(st->db, "PRAGMA user_version", &version) == SQLITE_OK;
		char set[48];

		/* An older store is brought up to date in the same
		 * transaction: all of it or nothing. */
		for (int v = version; ok && v < SCHEMA_VERSION; v++)
			ok = sqlite3_exec(st->db, migrations[v], NULL, NULL, NULL) == SQLITE_OK;
		snprintf(set, sizeof set, "PRAGMA user_version = %d", SCHEMA_VERSION);
		if (!ok ||
		    (version < SCHEMA_VERSION &&
		     sqlite3_exec(st->db, set, NULL, NULL, NULL) != SQLITE_OK) ||
		    sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
			db_fail(st, err, len,
			        version > 0 ? "upgrading its tables" : "creating its tables");
			sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
			goto failed;
		}
		if (version < SCHEMA_VERSION)
			version = SCHEMA_VERSION;
	}
	if (version > SCHEMA_VERSION) {
		gm_fail(rc, err, len,
		        "job store '%s' was written by a newer gpuman (schema %d); use that "
		        "version or move the file away",
		        path, version);
		goto failed;
	}
	*out = st;
	return GM_OK;
failed:
	jobstore_close(st);
	return rc;
}

void jobstore_close(struct jobstore *st)
{
	if (!st)
		return;
	for (int i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(st->stmt[i]);
	for (int i = 0; i < JOBSTORE_EXTRA_STMTS; i++)
		sqlite3_finalize(st->extra[i]);
	free(st->machine);
	sqlite3_close(st->db);
	free(st);
}

static enum gm_err simple(struct jobstore *st, enum stmt_id id, const char *what, char *err,
                          size_t len)
{
	sqlite3_stmt *s = jobstore_stmt(st, id);

	if (!s || jobstore_step_done(s) < 0)
		return db_fail(st, err, len, what);
	return GM_OK;
}

enum gm_err jobstore_begin(struct jobstore *st, char *err, size_t len)
{
	return simple(st, ST_BEGIN, "begin", err, len);
}

enum gm_err jobstore_commit(struct jobstore *st, char *err, size_t len)
{
	return simple(st, ST_COMMIT, "commit", err, len);
}

void jobstore_rollback(struct jobstore *st)
{
	if (!sqlite3_get_autocommit(st->db))
		simple(st, ST_ROLLBACK, "rollback", NULL, 0);
}
