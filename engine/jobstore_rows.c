/*
 * jobstore_rows.c - the job store's rows: inserting a job, reading one or a
 * list, the ids in a state, updating, accounting, the dependants of ended
 * jobs and pruning.  The connection, its schema and its prepared statements
 * are jobstore.c's.
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
	sqlite3_stmt *s = jobstore_stmt(st, ST_INSERT);

	if (!s)
		return jobstore_db_fail(st, err, len, "insert");
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
	if (jobstore_step_done(s) < 0)
		return jobstore_db_fail(st, err, len, "insert");
	job->id = sqlite3_last_insert_rowid(st->db);
	for (const char *p = job->after; p && *p;) {
		sqlite3_stmt *d = jobstore_stmt(st, ST_INSERT_DEP);

		if (!d)
			return jobstore_db_fail(st, err, len, "insert");
		sqlite3_bind_int64(d, 1, job->id);
		sqlite3_bind_int64(d, 2, strtoll(p, NULL, 10));
		if (jobstore_step_done(d) < 0)
			return jobstore_db_fail(st, err, len, "insert");
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
	sqlite3_stmt *s = jobstore_stmt(st, with_env ? ST_GET_ENV : ST_GET);
	enum gm_err rc = GM_OK;
	int step;

	*out = (struct job)JOB_INIT;
	if (!s)
		return jobstore_db_fail(st, err, len, "read");
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
		rc = jobstore_db_fail(st, err, len, "read");
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
		return jobstore_db_fail(st, err, len, "list");
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
		rc = jobstore_db_fail(st, err, len, "list");
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
		return jobstore_db_fail(st, err, len, "list");
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
		return jobstore_db_fail(st, err, len, "list");
	}
	*ids = list;
	*count = n;
	return GM_OK;
}

enum gm_err jobstore_ids(struct jobstore *st, enum job_state state, int64_t **ids, size_t *count,
                         char *err, size_t len)
{
	sqlite3_stmt *s = jobstore_stmt(st, ST_IDS);

	if (s)
		sqlite3_bind_text(s, 1, job_state_name(state), -1, SQLITE_STATIC);
	return collect_ids(st, s, ids, count, NULL, err, len);
}

enum gm_err jobstore_counts(struct jobstore *st, size_t *counts, char *err, size_t len)
{
	sqlite3_stmt *s = jobstore_stmt(st, ST_COUNTS);
	int step;

	memset(counts, 0, JOB_STATE_COUNT * sizeof *counts);
	if (!s)
		return jobstore_db_fail(st, err, len, "count");
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		int state = job_state_parse((const char *)sqlite3_column_text(s, 0));

		if (state >= 0)
			counts[state] = (size_t)sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	return step == SQLITE_DONE ? GM_OK : jobstore_db_fail(st, err, len, "count");
}

enum gm_err jobstore_update(struct jobstore *st, const struct job *j, enum job_state expect,
                            int expect_attempts, int *changed, char *err, size_t len)
{
	sqlite3_stmt *s = jobstore_stmt(st, ST_UPDATE);

	*changed = 0;
	if (!s)
		return jobstore_db_fail(st, err, len, "update");
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
	if (jobstore_step_done(s) < 0)
		return jobstore_db_fail(st, err, len, "update");
	*changed = sqlite3_changes(st->db) > 0;
	return GM_OK;
}

enum gm_err jobstore_account(struct jobstore *st, const struct job *j, char *err, size_t len)
{
	sqlite3_stmt *s = jobstore_stmt(st, ST_ACCOUNT);

	if (!s)
		return jobstore_db_fail(st, err, len, "update");
	sqlite3_bind_int64(s, 1, j->id);
	bind_opt_int(s, 2, j->has_peak, j->peak_mem_mib);
	sqlite3_bind_int(s, 3, j->util_samples);
	sqlite3_bind_double(s, 4, j->util_sum);
	return jobstore_step_done(s) < 0 ? jobstore_db_fail(st, err, len, "update") : GM_OK;
}

enum gm_err jobstore_delete(struct jobstore *st, int64_t id, char *err, size_t len)
{
	sqlite3_stmt *s = NULL;
	int rc;

	if (sqlite3_prepare_v2(st->db,
	                       id > 0 ? "DELETE FROM jobs WHERE id = ?1" : "DELETE FROM jobs", -1,
	                       &s, NULL) != SQLITE_OK)
		return jobstore_db_fail(st, err, len, "delete");
	if (id > 0)
		sqlite3_bind_int64(s, 1, id);
	rc = jobstore_step_done(s);
	sqlite3_finalize(s);
	return rc < 0 ? jobstore_db_fail(st, err, len, "delete") : GM_OK;
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
			                         used ? ", " : "", job_state_name(i));
	snprintf(sql, sizeof sql, "SELECT " COLUMNS " FROM jobs %s%s%s ORDER BY id",
	         used ? "WHERE state IN (" : "", in, used ? ")" : "");
	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
		return jobstore_db_fail(st, err, len, "list");
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
		rc = jobstore_db_fail(st, err, len, "list");
	sqlite3_finalize(s);
	if (stopped)
		*stopped = stop;
	return rc;
}

enum gm_err jobstore_has_live(struct jobstore *st, int *live, char *err, size_t len)
{
	sqlite3_stmt *s = jobstore_stmt(st, ST_HAS_LIVE);
	int step;

	*live = 0;
	if (!s)
		return jobstore_db_fail(st, err, len, "count");
	step = sqlite3_step(s);
	if (step == SQLITE_ROW)
		*live = sqlite3_column_int(s, 0) != 0;
	sqlite3_reset(s);
	return step == SQLITE_ROW ? GM_OK : jobstore_db_fail(st, err, len, "count");
}

enum gm_err jobstore_ended(struct jobstore *st, const int64_t *ids, size_t n,
                           struct job_end **ended, size_t *count, char *err, size_t len)
{
	sqlite3_stmt *get = jobstore_stmt(st, ST_GET);
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
		return jobstore_db_fail(st, err, len, "read");
	}
	for (size_t i = 0; i < n && rc == GM_OK; i++) {
		int step, state;

		sqlite3_reset(get);
		sqlite3_bind_int64(get, 1, ids[i]);
		step = sqlite3_step(get);
		if (step == SQLITE_DONE) {
			rc = gm_fail(GM_ERR_NOT_FOUND, err, len, "no job %lld", (long long)ids[i]);
		} else if (step != SQLITE_ROW) {
			rc = jobstore_db_fail(st, err, len, "read");
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
		rc = jobstore_db_fail(st, err, len, "prune");
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
		rc = jobstore_db_fail(st, err, len, "prune");
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
	return collect_ids(st, jobstore_stmt(st, ST_READY), ids, count, waiting, err, len);
}

enum gm_err jobstore_notify_due(struct jobstore *st, int64_t **ids, size_t *count, char *err,
                                size_t len)
{
	return collect_ids(st, jobstore_stmt(st, ST_NOTIFY_DUE), ids, count, NULL, err, len);
}

enum gm_err jobstore_set_notified(struct jobstore *st, int64_t id, char *err, size_t len)
{
	sqlite3_stmt *s = jobstore_stmt(st, ST_NOTIFIED);

	if (!s)
		return jobstore_db_fail(st, err, len, "update");
	sqlite3_bind_int64(s, 1, id);
	return jobstore_step_done(s) < 0 ? jobstore_db_fail(st, err, len, "update") : GM_OK;
}

enum gm_err jobstore_ended_since(struct jobstore *st, int64_t since_ms,
                                 void (*fn)(void *data, int64_t id, enum job_state state),
                                 void *data, char *err, size_t len)
{
	sqlite3_stmt *s = jobstore_stmt(st, ST_ENDED_SINCE);
	int step;

	if (!s)
		return jobstore_db_fail(st, err, len, "read");
	sqlite3_bind_int64(s, 1, since_ms);
	while ((step = sqlite3_step(s)) == SQLITE_ROW) {
		int state = job_state_parse((const char *)sqlite3_column_text(s, 1));

		fn(data, sqlite3_column_int64(s, 0),
		   state < 0 ? JOB_FAILED : (enum job_state)state);
	}
	sqlite3_reset(s);
	return step == SQLITE_DONE ? GM_OK : jobstore_db_fail(st, err, len, "read");
}
