/*
 * jobstore_ext.c - the job store's schema 4: time limits (submit --time),
 * the state timeout, the node a job ran on, the machine a job belongs to
 * and array tasks; and submit's look at the jobs it queued a moment ago.
 * Kept apart from jobstore.c, which is long enough.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jobstore_db.h"
#include "util.h"

/*
 * Schema 3 to 4.  A job that times out cancels the jobs after it as a
 * failure does: the trigger is made again with the new state.  A store
 * written before machines were recorded keeps NULL there: the default
 * machine's jobs (jobstore_set_machine).
 */
const char jobstore_schema4[] =
    "ALTER TABLE jobs ADD COLUMN time_limit_s INTEGER;"
    "ALTER TABLE jobs ADD COLUMN node TEXT;"
    "ALTER TABLE jobs ADD COLUMN machine TEXT;"
    "ALTER TABLE jobs ADD COLUMN array_task INTEGER;"
    "DROP TRIGGER IF EXISTS deps_cancel;"
    "CREATE TRIGGER deps_cancel AFTER UPDATE OF state ON jobs"
    " WHEN NEW.state IN ('failed', 'cancelled', 'interrupted', 'timeout')"
    "  AND OLD.state != NEW.state"
    " BEGIN"
    "  UPDATE jobs SET state = 'cancelled',"
    "   end_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),"
    "   reason = 'not started: job ' || NEW.id || ' (--after) ' ||"
    "    CASE NEW.state WHEN 'cancelled' THEN 'was cancelled'"
    "     WHEN 'timeout' THEN 'timed out' ELSE NEW.state END"
    "  WHERE state = 'queued' AND id IN (SELECT job FROM deps WHERE after = NEW.id);"
    " END;";

/* Schema 4 to 5: arrays (submit --array 1-20%K): the first task's id and
 * K, at most K of its tasks running at once; the index keeps counting them
 * to the array's own rows. */
const char jobstore_schema5[] =
    "ALTER TABLE jobs ADD COLUMN array_of INTEGER;"
    "ALTER TABLE jobs ADD COLUMN array_limit INTEGER;"
    "CREATE INDEX IF NOT EXISTS jobs_by_array ON jobs (array_of, state, id)"
    " WHERE array_of IS NOT NULL;";

/* Schema 5 to 6: when each end was recorded.  The end itself may come far
 * earlier: the dispatcher records ends as it reaps their runners, rounds
 * later on a busy machine (300 ms and more for trivial jobs on 2 cores).
 * gpuman wait asks for the ends recorded since it last looked, and so
 * misses none that were recorded late.  A trigger stamps it, so that every
 * writer of an end (the dispatcher, cancel, the --after cascade) does. */
const char jobstore_schema6[] =
    "ALTER TABLE jobs ADD COLUMN recorded_ms INTEGER;"
    "CREATE INDEX IF NOT EXISTS jobs_by_recorded ON jobs (recorded_ms)"
    " WHERE recorded_ms IS NOT NULL;"
    "CREATE TRIGGER IF NOT EXISTS jobs_recorded AFTER UPDATE OF state ON jobs"
    " WHEN NEW.state NOT IN ('queued', 'running') AND OLD.state IN ('queued', 'running')"
    " BEGIN"
    "  UPDATE jobs SET recorded_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
    "  WHERE id = NEW.id;"
    " END;";

enum { X_SET_NODE, X_LIVE_MACHINES, X_SET_ARRAY, X_STALLED, X_SAYS, X_QUEUED_LIKE };

enum gm_err jobstore_set_array(struct jobstore *st, int64_t first, int64_t last, char *err,
                               size_t len)
{
	sqlite3_stmt *s = jobstore_cached(
	    st, X_SET_ARRAY, "UPDATE jobs SET array_of = ?1 WHERE id BETWEEN ?1 AND ?2");
	int rc;

	if (!s)
		return jobstore_db_fail(st, err, len, "update");
	sqlite3_bind_int64(s, 1, first);
	sqlite3_bind_int64(s, 2, last);
	rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? GM_OK : jobstore_db_fail(st, err, len, "update");
}

enum gm_err jobstore_set_node(struct jobstore *st, int64_t id, const char *node, char *err,
                              size_t len)
{
	sqlite3_stmt *s =
	    jobstore_cached(st, X_SET_NODE, "UPDATE jobs SET node = ?2 WHERE id = ?1");
	int rc;

	if (!s)
		return jobstore_db_fail(st, err, len, "update");
	sqlite3_bind_int64(s, 1, id);
	if (node)
		sqlite3_bind_text(s, 2, node, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? GM_OK : jobstore_db_fail(st, err, len, "update");
}

/* What jobstore_set_stalled says: the whole of it is a waiting reason
 * (the engine clears such a reason as the job starts). */
#define STALLED JOB_WAITING "the dispatcher cannot start: "

enum gm_err jobstore_set_stalled(struct jobstore *st, const char *why, int *news, char *err,
                                 size_t len)
{
	sqlite3_stmt *s;
	char reason[GM_ERRBUF_SIZE + 128];
	int rc;

	if (news)
		*news = 0;
	if (why) {
		snprintf(reason, sizeof reason, STALLED "%s; its jobs start once that is mended",
		         why);
		/* News when no queued job of the machine says it yet. */
		s = jobstore_cached(
		    st, X_SAYS,
		    "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued' AND " MACHINE
		    " AND reason = :said)");
		if (!s)
			return jobstore_db_fail(st, err, len, "read");
		sqlite3_bind_text(s, sqlite3_bind_parameter_index(s, ":said"), reason, -1,
		                  SQLITE_STATIC);
		rc = sqlite3_step(s);
		if (news)
			*news = rc == SQLITE_ROW && !sqlite3_column_int(s, 0);
		sqlite3_reset(s);
		if (rc != SQLITE_ROW)
			return jobstore_db_fail(st, err, len, "read");
	}
	s = jobstore_cached(
	    st, X_STALLED,
	    "UPDATE jobs SET reason = :said WHERE state = 'queued' AND " MACHINE " AND "
	    "CASE WHEN :said IS NULL THEN substr(reason, 1, length(:stalled)) = :stalled "
	    "ELSE (reason IS NULL OR substr(reason, 1, 7) = 'waiting') AND reason IS NOT :said "
	    "END");
	if (!s)
		return jobstore_db_fail(st, err, len, "update");
	if (why)
		sqlite3_bind_text(s, sqlite3_bind_parameter_index(s, ":said"), reason, -1,
		                  SQLITE_STATIC);
	sqlite3_bind_text(s, sqlite3_bind_parameter_index(s, ":stalled"), STALLED, -1,
	                  SQLITE_STATIC);
	rc = sqlite3_step(s);
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? GM_OK : jobstore_db_fail(st, err, len, "update");
}

enum gm_err jobstore_live_machines(struct jobstore *st, char ***machines, size_t *count, char *err,
                                   size_t len)
{
	/* Live jobs only, by the state index, and the ends still to tell. */
	sqlite3_stmt *s = jobstore_cached(
	    st, X_LIVE_MACHINES,
	    "SELECT IFNULL(machine, '') FROM jobs WHERE state IN ('queued', 'running') UNION "
	    "SELECT IFNULL(machine, '') FROM jobs WHERE notify IS NOT NULL AND notified = 0");
	char **list = NULL;
	size_t n = 0;
	int step;

	*machines = NULL;
	*count = 0;
	if (!s)
		return jobstore_db_fail(st, err, len, "list");
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		char **grown = realloc(list, (n + 1) * sizeof *grown);
		const char *m = (const char *)sqlite3_column_text(s, 0);

		if (!grown || !(grown[n] = strdup(m ? m : ""))) {
			list = grown ? grown : list;
			step = SQLITE_NOMEM;
			break;
		}
		list = grown;
		n++;
	}
	sqlite3_reset(s);
	if (step != SQLITE_DONE) {
		for (size_t i = 0; i < n; i++)
			free(list[i]);
		free(list);
		return step == SQLITE_NOMEM ? gm_fail(GM_ERR_NOMEM, err, len, "out of memory")
		                            : jobstore_db_fail(st, err, len, "list");
	}
	*machines = list;
	*count = n;
	return GM_OK;
}

enum gm_err jobstore_queued_like(struct jobstore *st, const struct job *like, int64_t since_ms,
                                 int *yes, char *err, size_t len)
{
	/* The last 64 rows by the primary key: the cost does not grow with
	 * the history. */
	sqlite3_stmt *s = jobstore_cached(
	    st, X_QUEUED_LIKE,
	    "SELECT state != 'failed' AND submit_ms >= ?1 FROM jobs WHERE id > (SELECT "
	    "IFNULL(max(id), 0) - 64 FROM jobs) AND request = ?2 AND env = ?3 AND "
	    "IFNULL(machine, '') = IFNULL(?4, '') ORDER BY id DESC LIMIT 1");
	int rc;

	*yes = 0;
	if (!s)
		return jobstore_db_fail(st, err, len, "read");
	if (!like->request || !like->env)
		return GM_OK;
	sqlite3_bind_int64(s, 1, since_ms);
	sqlite3_bind_text(s, 2, like->request, -1, SQLITE_STATIC);
	sqlite3_bind_blob(s, 3, like->env, (int)like->env_len, SQLITE_STATIC);
	if (like->machine)
		sqlite3_bind_text(s, 4, like->machine, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*yes = sqlite3_column_int(s, 0);
	sqlite3_reset(s);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? GM_OK
	                                             : jobstore_db_fail(st, err, len, "read");
}

enum gm_err jobstore_set_machine(struct jobstore *st, const char *machine, char *err, size_t len)
{
	char **filter = jobstore_machine_filter(st), *copy = NULL;

	if (machine && !(copy = strdup(machine)))
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	free(*filter);
	*filter = copy;
	return GM_OK;
}
