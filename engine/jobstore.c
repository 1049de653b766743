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

#define SCHEMA_VERSION 5
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

/* The columns every read returns, in this order (env last, optional). */
#define COLUMNS                                                                                    \
	"id, state, command, argv, cwd, request, log, submit_ms, start_ms, end_ms, gpus, "         \
	"uuids, exit_status, reason, attempts, retries, ooms, min_free_mib, placed_free_mib, "     \
	"peak_mem_mib, util_samples, util_sum, runner_pid, run_slot, name, priority, notify, "     \
	"(SELECT group_concat(after) FROM (SELECT after FROM deps WHERE deps.job = jobs.id "       \
	"ORDER BY after)), time_limit_s, node, machine, array_task, array_of, array_limit"

/* A dispatcher sees the jobs of its own machine only (jobstore_set_machine);
 * jobs of an older store (NULL) are the default machine's (""). */
#define MACHINE "(:machine IS NULL OR IFNULL(machine, '') = :machine)"

/* An array task beyond its array's %K: K of its array run already, or
 * are queued before it (it waits like a job --after another). */
#define ARRAY_FULL                                                                                 \
	"(j.array_limit IS NOT NULL AND row_number() OVER (PARTITION BY j.array_of ORDER BY "      \
	"j.id) + (SELECT count(*) FROM jobs r WHERE r.array_of = j.array_of AND r.state = "        \
	"'running') > j.array_limit)"

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
    [ST_ENDED_SINCE] = "SELECT id, state FROM jobs WHERE end_ms >= ?1 "
                       "AND state NOT IN ('queued', 'running')",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
};

struct jobstore {
	sqlite3 *db;
	char path[4096];
	sqlite3_stmt *stmt[ST_COUNT];
	sqlite3_stmt *extra[JOBSTORE_EXTRA_STMTS]; /* jobstore_cached() */
	char *machine;                             /* jobstore_set_machine; NULL: all */
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

sqlite3_stmt *jobstore_cached(struct jobstore *st, unsigned slot, const char *sql)
{
	if (slot >= JOBSTORE_EXTRA_STMTS)
		return NULL;
	if (!st->extra[slot] && sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
	                                           &st->extra[slot], NULL) != SQLITE_OK)
		return NULL;
	sqlite3_reset(st->extra[slot]);
	sqlite3_clear_bindings(st->extra[slot]);
	return st->extra[slot];
}

static void bind_machine(sqlite3_stmt *s, const char *machine)
{
	int at = sqlite3_bind_parameter_index(s, ":machine");

	if (at)
		sqlite3_bind_text(s, at, machine, -1, SQLITE_STATIC);
}

char **jobstore_machine_filter(struct jobstore *st)
{
	return &st->machine;
}

static sqlite3_stmt *stmt(struct jobstore *st, enum stmt_id id)
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
static int step_done(sqlite3_stmt *s)
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

static const char *const migrations[SCHEMA_VERSION] = {schema, schema2, schema3, jobstore_schema4,
                                                       jobstore_schema5};

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
	sqlite3_stmt *s = stmt(st, id);

	if (!s || step_done(s) < 0)
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

static void bind_text(sqlite3_stmt *s, int col, const char *text)
{
	if (text)
		sqlite3_bind_text(s, col, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, col);
}

static void bind_opt_int(sqlite3_stmt *s, int col, int has, int64_t v)
{
	if (has)
		sqlite3_bind_int64(s, col, v);
	else
		sqlite3_bind_null(s, col);
}

enum gm_err jobstore_insert(struct jobstore *st, struct job *job, char *err, size_t len)
{
	sqlite3_stmt *s = stmt(st, ST_INSERT);

	if (!s)
		return db_fail(st, err, len, "insert");
	bind_opt_int(s, 1, job->id > 0, job->id);
	sqlite3_bind_text(s, 2, job_state_name(job->state), -1, SQLITE_STATIC);
	bind_text(s, 3, job->command ? job->command : "");
	bind_text(s, 4, job->argv);
	bind_text(s, 5, job->cwd);
	if (job->env)
		sqlite3_bind_blob(s, 6, job->env, (int)job->env_len, SQLITE_STATIC);
	bind_text(s, 7, job->request);
	bind_text(s, 8, job->log);
	sqlite3_bind_int64(s, 9, job->submit_ms);
	sqlite3_bind_int(s, 10, job->attempts);
	sqlite3_bind_int(s, 11, job->retries);
	sqlite3_bind_int64(s, 12, job->min_free_mib);
	bind_text(s, 13, job->name);
	sqlite3_bind_int(s, 14, job->priority);
	bind_text(s, 15, job->notify);
	bind_opt_int(s, 16, job->time_limit_s > 0, job->time_limit_s);
	bind_text(s, 17, job->machine);
	bind_opt_int(s, 18, job->array_task >= 0, job->array_task);
	bind_opt_int(s, 19, job->array_of > 0, job->array_of);
	bind_opt_int(s, 20, job->array_limit > 0, job->array_limit);
	if (step_done(s) < 0)
		return db_fail(st, err, len, "insert");
	job->id = sqlite3_last_insert_rowid(st->db);
	for (const char *p = job->after; p && *p;) {
		sqlite3_stmt *d = stmt(st, ST_INSERT_DEP);

		if (!d)
			return db_fail(st, err, len, "insert");
		sqlite3_bind_int64(d, 1, job->id);
		sqlite3_bind_int64(d, 2, strtoll(p, NULL, 10));
		if (step_done(d) < 0)
			return db_fail(st, err, len, "insert");
		p += strcspn(p, ",");
		p += *p == ',';
	}
	return GM_OK;
}

static char *col_text(sqlite3_stmt *s, int col)
{
	const unsigned char *t = sqlite3_column_text(s, col);

	return t ? strdup((const char *)t) : NULL;
}

/* One row of COLUMNS (and env at column 34 if with_env) into a job. */
static int read_row(sqlite3_stmt *s, struct job *j, int with_env)
{
	int state;

	*j = (struct job)JOB_INIT;
	j->id = sqlite3_column_int64(s, 0);
	state = job_state_parse((const char *)sqlite3_column_text(s, 1));
	j->state = state < 0 ? JOB_FAILED : (enum job_state)state;
	j->command = col_text(s, 2);
	j->argv = col_text(s, 3);
	j->cwd = col_text(s, 4);
	j->request = col_text(s, 5);
	j->log = col_text(s, 6);
	j->submit_ms = sqlite3_column_int64(s, 7);
	j->start_ms = sqlite3_column_int64(s, 8);
	j->end_ms = sqlite3_column_int64(s, 9);
	j->gpus = col_text(s, 10);
	j->uuids = col_text(s, 11);
	j->has_exit = sqlite3_column_type(s, 12) != SQLITE_NULL;
	j->exit_status = sqlite3_column_int(s, 12);
	j->reason = col_text(s, 13);
	j->attempts = sqlite3_column_int(s, 14);
	j->retries = sqlite3_column_int(s, 15);
	j->ooms = sqlite3_column_int(s, 16);
	j->min_free_mib = sqlite3_column_int64(s, 17);
	j->placed_free_mib =
	    sqlite3_column_type(s, 18) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 18);
	j->has_peak = sqlite3_column_type(s, 19) != SQLITE_NULL;
	j->peak_mem_mib = sqlite3_column_int64(s, 19);
	j->util_samples = sqlite3_column_int(s, 20);
	j->util_sum = sqlite3_column_double(s, 21);
	j->runner_pid = sqlite3_column_int(s, 22);
	j->run_slot = sqlite3_column_type(s, 23) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 23);
	j->name = col_text(s, 24);
	j->priority = sqlite3_column_int(s, 25);
	j->notify = col_text(s, 26);
	j->after = col_text(s, 27);
	j->time_limit_s = sqlite3_column_int64(s, 28);
	j->node = col_text(s, 29);
	j->machine = col_text(s, 30);
	j->array_task = sqlite3_column_type(s, 31) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 31);
	j->array_of = sqlite3_column_int64(s, 32);
	j->array_limit = sqlite3_column_int(s, 33);
	if (with_env && sqlite3_column_type(s, 34) != SQLITE_NULL) {
		int n = sqlite3_column_bytes(s, 34);
		const void *blob = sqlite3_column_blob(s, 34);

		j->env = malloc((size_t)n + 1);
		if (!j->env)
			return -1;
		if (n)
			memcpy(j->env, blob, (size_t)n);
		j->env[n] = '\0';
		j->env_len = (size_t)n;
	}
	if (!j->command)
		return -1;
	return 0;
}

enum gm_err jobstore_get(struct jobstore *st, int64_t id, int with_env, struct job *out, char *err,
                         size_t len)
{
	sqlite3_stmt *s = stmt(st, with_env ? ST_GET_ENV : ST_GET);
	enum gm_err rc = GM_OK;
	int step;

	*out = (struct job)JOB_INIT;
	if (!s)
		return db_fail(st, err, len, "read");
	sqlite3_bind_int64(s, 1, id);
	step = sqlite3_step(s);
	if (step == SQLITE_ROW) {
		if (read_row(s, out, with_env) < 0) {
			job_release(out);
			rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		}
	} else if (step == SQLITE_DONE) {
		rc = gm_fail(GM_ERR_NOT_FOUND, err, len, "no job %lld", (long long)id);
	} else {
		rc = db_fail(st, err, len, "read");
	}
	sqlite3_reset(s);
	return rc;
}

enum gm_err jobstore_list(struct jobstore *st, int state, int64_t after_id, size_t limit,
                          struct job **jobs, size_t *count, char *err, size_t len)
{
	char sql[512];
	sqlite3_stmt *s = NULL;
	struct job *list = NULL;
	size_t n = 0, cap = 0;
	enum gm_err rc = GM_OK;
	int step;

	*jobs = NULL;
	*count = 0;
	snprintf(sql, sizeof sql, "SELECT " COLUMNS " FROM jobs WHERE id > ?1 %s ORDER BY id %s",
	         state >= 0 ? "AND state = ?2" : "", limit ? "LIMIT ?3" : "");
	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
		return db_fail(st, err, len, "list");
	sqlite3_bind_int64(s, 1, after_id);
	if (state >= 0)
		sqlite3_bind_text(s, 2, job_state_name((enum job_state)state), -1, SQLITE_STATIC);
	if (limit)
		sqlite3_bind_int64(s, 3, (sqlite3_int64)limit);
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct job *grown = realloc(list, ncap * sizeof *grown);

			if (!grown) {
				rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
				break;
			}
			list = grown;
			cap = ncap;
		}
		if (read_row(s, &list[n], 0) < 0) {
			job_release(&list[n]);
			rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
			break;
		}
		n++;
	}
	if (rc == GM_OK && step != SQLITE_DONE)
		rc = db_fail(st, err, len, "list");
	sqlite3_finalize(s);
	if (rc != GM_OK) {
		jobstore_free_list(list, n);
		return rc;
	}
	*jobs = list;
	*count = n;
	return GM_OK;
}

void jobstore_free_list(struct job *jobs, size_t count)
{
	for (size_t i = 0; i < count; i++)
		job_release(&jobs[i]);
	free(jobs);
}

/* Step s (bound, or NULL after a failed prepare) and collect column 0 of
 * its rows into *ids (malloc'd); with waiting, a row whose column 1 is
 * non-zero is counted there instead. */
static enum gm_err collect_ids(struct jobstore *st, sqlite3_stmt *s, int64_t **ids, size_t *count,
                               size_t *waiting, char *err, size_t len)
{
	int64_t *list = NULL;
	size_t n = 0, cap = 0;
	int step;

	*ids = NULL;
	*count = 0;
	if (waiting)
		*waiting = 0;
	if (!s)
		return db_fail(st, err, len, "list");
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		if (waiting && sqlite3_column_int(s, 1)) {
			(*waiting)++;
			continue;
		}
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			int64_t *grown = realloc(list, ncap * sizeof *grown);

			if (!grown) {
				free(list);
				sqlite3_reset(s);
				return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
			}
			list = grown;
			cap = ncap;
		}
		list[n++] = sqlite3_column_int64(s, 0);
	}
	sqlite3_reset(s);
	if (step != SQLITE_DONE) {
		free(list);
		return db_fail(st, err, len, "list");
	}
	*ids = list;
	*count = n;
	return GM_OK;
}

enum gm_err jobstore_ids(struct jobstore *st, enum job_state state, int64_t **ids, size_t *count,
                         char *err, size_t len)
{
	sqlite3_stmt *s = stmt(st, ST_IDS);

	if (s)
		sqlite3_bind_text(s, 1, job_state_name(state), -1, SQLITE_STATIC);
	return collect_ids(st, s, ids, count, NULL, err, len);
}

enum gm_err jobstore_counts(struct jobstore *st, size_t *counts, char *err, size_t len)
{
	sqlite3_stmt *s = stmt(st, ST_COUNTS);
	int step;

	memset(counts, 0, JOB_STATE_COUNT * sizeof *counts);
	if (!s)
		return db_fail(st, err, len, "count");
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		int state = job_state_parse((const char *)sqlite3_column_text(s, 0));

		if (state >= 0)
			counts[state] = (size_t)sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	return step == SQLITE_DONE ? GM_OK : db_fail(st, err, len, "count");
}

enum gm_err jobstore_update(struct jobstore *st, const struct job *j, enum job_state expect,
                            int expect_attempts, int *changed, char *err, size_t len)
{
	sqlite3_stmt *s = stmt(st, ST_UPDATE);

	*changed = 0;
	if (!s)
		return db_fail(st, err, len, "update");
	sqlite3_bind_int64(s, 1, j->id);
	sqlite3_bind_text(s, 2, job_state_name(j->state), -1, SQLITE_STATIC);
	bind_opt_int(s, 3, j->start_ms != 0, j->start_ms);
	bind_opt_int(s, 4, j->end_ms != 0, j->end_ms);
	bind_text(s, 5, j->gpus);
	bind_text(s, 6, j->uuids);
	bind_opt_int(s, 7, j->has_exit, j->exit_status);
	bind_text(s, 8, j->reason);
	sqlite3_bind_int(s, 9, j->attempts);
	sqlite3_bind_int(s, 10, j->ooms);
	sqlite3_bind_int64(s, 11, j->min_free_mib);
	bind_opt_int(s, 12, j->placed_free_mib >= 0, j->placed_free_mib);
	bind_opt_int(s, 13, j->has_peak, j->peak_mem_mib);
	sqlite3_bind_int(s, 14, j->util_samples);
	sqlite3_bind_double(s, 15, j->util_sum);
	bind_opt_int(s, 16, j->runner_pid > 0, j->runner_pid);
	bind_text(s, 17, j->log);
	bind_opt_int(s, 20, j->run_slot >= 0, j->run_slot);
	sqlite3_bind_text(s, 18, job_state_name(expect), -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 19, expect_attempts);
	if (step_done(s) < 0)
		return db_fail(st, err, len, "update");
	*changed = sqlite3_changes(st->db) > 0;
	return GM_OK;
}

enum gm_err jobstore_account(struct jobstore *st, const struct job *j, char *err, size_t len)
{
	sqlite3_stmt *s = stmt(st, ST_ACCOUNT);

	if (!s)
		return db_fail(st, err, len, "update");
	sqlite3_bind_int64(s, 1, j->id);
	bind_opt_int(s, 2, j->has_peak, j->peak_mem_mib);
	sqlite3_bind_int(s, 3, j->util_samples);
	sqlite3_bind_double(s, 4, j->util_sum);
	return step_done(s) < 0 ? db_fail(st, err, len, "update") : GM_OK;
}

enum gm_err jobstore_delete(struct jobstore *st, int64_t id, char *err, size_t len)
{
	sqlite3_stmt *s = NULL;
	int rc;

	if (sqlite3_prepare_v2(st->db,
	                       id > 0 ? "DELETE FROM jobs WHERE id = ?1" : "DELETE FROM jobs", -1,
	                       &s, NULL) != SQLITE_OK)
		return db_fail(st, err, len, "delete");
	if (id > 0)
		sqlite3_bind_int64(s, 1, id);
	rc = step_done(s);
	sqlite3_finalize(s);
	return rc < 0 ? db_fail(st, err, len, "delete") : GM_OK;
}

enum gm_err jobstore_each(struct jobstore *st, unsigned states,
                          int (*fn)(void *data, const struct job *job), void *data, int *stopped,
                          char *err, size_t len)
{
	char sql[2048], in[256] = "";
	size_t used = 0;
	sqlite3_stmt *s = NULL;
	enum gm_err rc = GM_OK;
	int step, stop = 0;

	if (stopped)
		*stopped = 0;
	/* The state names are ours, not the caller's: no binding needed.  An
	 * IN list on the indexed state reads only those jobs. */
	for (int i = 0; i < JOB_STATE_COUNT; i++)
		if (states & JOB_STATES(i))
			used += (size_t)snprintf(in + used, sizeof in - used, "%s'%s'",
			                         used ? ", " : "", state_names[i]);
	snprintf(sql, sizeof sql, "SELECT " COLUMNS " FROM jobs %s%s%s ORDER BY id",
	         used ? "WHERE state IN (" : "", in, used ? ")" : "");
	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
		return db_fail(st, err, len, "list");
	while (!stop && (step = sqlite3_step(s)) == SQLITE_ROW) {
		struct job j;

		if (read_row(s, &j, 0) < 0) {
			job_release(&j);
			rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
			break;
		}
		stop = fn(data, &j);
		job_release(&j);
	}
	if (rc == GM_OK && !stop && step != SQLITE_DONE)
		rc = db_fail(st, err, len, "list");
	sqlite3_finalize(s);
	if (stopped)
		*stopped = stop;
	return rc;
}

enum gm_err jobstore_has_live(struct jobstore *st, int *live, char *err, size_t len)
{
	sqlite3_stmt *s = stmt(st, ST_HAS_LIVE);
	int step;

	*live = 0;
	if (!s)
		return db_fail(st, err, len, "count");
	step = sqlite3_step(s);
	if (step == SQLITE_ROW)
		*live = sqlite3_column_int(s, 0) != 0;
	sqlite3_reset(s);
	return step == SQLITE_ROW ? GM_OK : db_fail(st, err, len, "count");
}

enum gm_err jobstore_ended(struct jobstore *st, const int64_t *ids, size_t n,
                           struct job_end **ended, size_t *count, char *err, size_t len)
{
	sqlite3_stmt *get = stmt(st, ST_GET);
	struct job_end *out;
	size_t k = 0;
	enum gm_err rc = GM_OK;
	int own_tx = sqlite3_get_autocommit(st->db);

	*ended = NULL;
	*count = 0;
	out = calloc(n ? n : 1, sizeof *out);
	if (!out)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	/* One read transaction: a consistent view, and the WAL index is
	 * looked at once rather than once per id. */
	if (!get || (own_tx && sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)) {
		free(out);
		return db_fail(st, err, len, "read");
	}
	for (size_t i = 0; i < n && rc == GM_OK; i++) {
		int step, state;

		sqlite3_reset(get);
		sqlite3_bind_int64(get, 1, ids[i]);
		step = sqlite3_step(get);
		if (step == SQLITE_DONE) {
			rc = gm_fail(GM_ERR_NOT_FOUND, err, len, "no job %lld", (long long)ids[i]);
		} else if (step != SQLITE_ROW) {
			rc = db_fail(st, err, len, "read");
		} else {
			state = job_state_parse((const char *)sqlite3_column_text(get, 1));
			if (state < 0)
				state = JOB_FAILED;
			if (job_state_final((enum job_state)state)) {
				out[k].id = ids[i];
				out[k++].state = (enum job_state)state;
			}
		}
	}
	sqlite3_reset(get);
	if (own_tx)
		sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
	if (rc != GM_OK) {
		free(out);
		return rc;
	}
	*ended = out;
	*count = k;
	return GM_OK;
}

enum gm_err jobstore_prune(struct jobstore *st, int64_t ended_before_ms,
                           void (*fn)(void *data, int64_t id, const char *log), void *data,
                           size_t *deleted, char *err, size_t len)
{
	sqlite3_stmt *s = NULL;
	enum gm_err rc = GM_OK;
	size_t n = 0;
	int step;

	if (deleted)
		*deleted = 0;
	if (jobstore_begin(st, err, len) != GM_OK)
		return GM_ERR_IO;
	/* end_ms is set for ended jobs; the state test keeps a job that is
	 * queued again (a retry) whatever its last end. */
	if (sqlite3_prepare_v2(st->db,
	                       "DELETE FROM jobs WHERE end_ms < ?1 AND state NOT IN ('queued', "
	                       "'running') RETURNING id, log",
	                       -1, &s, NULL) != SQLITE_OK) {
		rc = db_fail(st, err, len, "prune");
		goto done;
	}
	sqlite3_bind_int64(s, 1, ended_before_ms);
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		if (fn)
			fn(data, sqlite3_column_int64(s, 0),
			   (const char *)sqlite3_column_text(s, 1));
		n++;
	}
	if (step != SQLITE_DONE)
		rc = db_fail(st, err, len, "prune");
	sqlite3_finalize(s);
	s = NULL;
	if (rc == GM_OK)
		rc = jobstore_commit(st, err, len);
done:
	sqlite3_finalize(s);
	if (rc != GM_OK)
		jobstore_rollback(st);
	else if (deleted)
		*deleted = n;
	return rc;
}

enum gm_err jobstore_ready_ids(struct jobstore *st, int64_t **ids, size_t *count, size_t *waiting,
                               char *err, size_t len)
{
	return collect_ids(st, stmt(st, ST_READY), ids, count, waiting, err, len);
}

enum gm_err jobstore_notify_due(struct jobstore *st, int64_t **ids, size_t *count, char *err,
                                size_t len)
{
	return collect_ids(st, stmt(st, ST_NOTIFY_DUE), ids, count, NULL, err, len);
}

enum gm_err jobstore_set_notified(struct jobstore *st, int64_t id, char *err, size_t len)
{
	sqlite3_stmt *s = stmt(st, ST_NOTIFIED);

	if (!s)
		return db_fail(st, err, len, "update");
	sqlite3_bind_int64(s, 1, id);
	return step_done(s) < 0 ? db_fail(st, err, len, "update") : GM_OK;
}

enum gm_err jobstore_ended_since(struct jobstore *st, int64_t since_ms,
                                 void (*fn)(void *data, int64_t id, enum job_state state),
                                 void *data, char *err, size_t len)
{
	sqlite3_stmt *s = stmt(st, ST_ENDED_SINCE);
	int step;

	if (!s)
		return db_fail(st, err, len, "read");
	sqlite3_bind_int64(s, 1, since_ms);
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		int state = job_state_parse((const char *)sqlite3_column_text(s, 1));

		fn(data, sqlite3_column_int64(s, 0),
		   state < 0 ? JOB_FAILED : (enum job_state)state);
	}
	sqlite3_reset(s);
	return step == SQLITE_DONE ? GM_OK : db_fail(st, err, len, "read");
}
