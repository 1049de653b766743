/*
 * record.c - what becomes of a job when its runner ends (its result into
 * the store: done, failed, retried, requeued after running out of memory),
 * the accounting samples of running jobs, and the queue's job records.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "util.h"
#include "internal.h"
#include "snapshot.h"

/* ---- results ---------------------------------------------------------- */

int engine_read_result(int fd, struct protocol_result *r)
{
	char buf[PROTOCOL_RESULT_ROOM + 1];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return protocol_result_parse(buf, r);
}

void engine_count_move(struct engine *e, enum job_state from, enum job_state to)
{
	size_t *c[JOB_STATE_COUNT] = {&e->counts.queued,    &e->counts.running,
	                              &e->counts.done,      &e->counts.failed,
	                              &e->counts.cancelled, &e->counts.interrupted,
	                              &e->counts.failed /* timeout: a failure to count */};

	if (*c[from])
		(*c[from])--;
	(*c[to])++;
}

void engine_note_ended(struct engine *e, int64_t id)
{
	if (e->nended == e->endedcap) {
		size_t ncap = e->endedcap ? e->endedcap * 2 : 16;
		int64_t *grown = realloc(e->ended, ncap * sizeof *grown);

		if (!grown)
			return;
		e->ended = grown;
		e->endedcap = ncap;
	}
	e->ended[e->nended++] = id;
}

/* Queue: a job's accounting, once it has ended, next to its log:
 * <log_dir>/<id>.json, as `gpuman queue --json` shows it. */
void engine_write_job_record(struct engine *e, int64_t id)
{
	char path[4200], tmp[4300], log[4200];
	struct job job;
	json_t *o;

	if (jobstore_get(e->cfg->store, id, 0, &job, NULL, 0) != GM_OK)
		return;
	if (job.log)
		str_copy(log, sizeof log, job.log);
	else
		snprintf(log, sizeof log, "%s/%lld.log", e->cfg->log_dir, (long long)id);
	o = job_json(&job, log, 0);
	snprintf(path, sizeof path, "%s/%lld.json", e->cfg->log_dir, (long long)id);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	if (o && json_dump_file(o, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0)
		rename(tmp, path);
	json_decref(o);
	job_release(&job);
}

long long engine_time_limit_s(const struct engine *e, const struct job *job, char *where,
                              size_t len)
{
	const struct registry *reg = e->cfg->reg;
	char from[96];
	int64_t ms;
	long long s;

	where[0] = '\0';
	if (!reg)
		return job->time_limit_s; /* on Slurm: its own limits apply */
	ms = config_max_lease_ms(&reg->cfg, (unsigned)getuid(), from, sizeof from);
	s = (long long)((ms + 999) / 1000);
	if (!s || (job->time_limit_s > 0 && job->time_limit_s <= s))
		return job->time_limit_s;
	snprintf(where, len, "max_lease in %s of %s", from, reg->cfg.system_path);
	return s;
}

/*
 * Record how a running job ended, from its run file's result (text NULL:
 * none, the runner died).  s carries the accounting (NULL at adoption).
 * The write is conditional on the job still being in this attempt.
 */
void engine_record_end(struct engine *e, struct slot *s, int64_t id, int fd)
{
	struct job job, upd;
	struct outcome_in in = {0};
	struct outcome out;
	char where[300];
	int changed = 0, expect;

	if (jobstore_get(e->cfg->store, id, 0, &job, e->err, sizeof e->err) != GM_OK) {
		if (strncmp(e->err, "no job", 6))
			e->failed = 1;
		return;
	}
	if (job.state != JOB_RUNNING || (s && s->attempt != job.attempts)) {
		job_release(&job);
		return; /* a stale runner (its claim never committed) */
	}
	in.have_result = fd >= 0 && engine_read_result(fd, &in.r) == 0 && in.r.job == id &&
	                 in.r.attempt == job.attempts;
	in.requeue_dead = e->cfg->requeue_dead;
	in.job = &job;
	/* Worked out again as the runner was given it (the admin's file is
	 * read once, when the engine opens the registry). */
	in.limit_s = engine_time_limit_s(e, &job, where, sizeof where);
	in.limit_where = where;
	outcome_decide(&in, &out);
	upd = job;
	expect = job.attempts;
	upd.runner_pid = 0;
	if (s) {
		upd.has_peak = s->has_peak;
		upd.peak_mem_mib = s->peak;
		upd.util_samples = s->samples;
		upd.util_sum = s->util_sum;
	}
	upd.state = out.state;
	upd.ooms = out.ooms;
	upd.min_free_mib = out.min_free_mib;
	if (!in.have_result) {
		upd.end_ms = now_ms();
	} else if (out.uncount) {
		upd.attempts--;
		upd.start_ms = 0;
		upd.end_ms = 0;
	} else if (out.has_exit) {
		upd.start_ms = in.r.start_ms;
		upd.end_ms = in.r.end_ms;
		upd.has_exit = 1;
		upd.exit_status = in.r.status;
	}
	upd.reason = out.reason[0] ? out.reason : NULL;
	if (engine_tx(e) == 0 && jobstore_update(e->cfg->store, &upd, JOB_RUNNING, expect, &changed,
	                                         e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed) {
		engine_count_move(e, JOB_RUNNING, upd.state);
		e->ended_any = 1;
		/* Back in line: a batch's by task number; the queue's by its
		 * serving order (priorities), which the store knows. */
		if (upd.state == JOB_QUEUED && e->cfg->request)
			engine_queue_insert(e, id);
		else if (upd.state == JOB_QUEUED)
			engine_queue_reload(e);
		engine_batch_learn(e, s, &upd);
		if (!e->cfg->batch && job_state_final(upd.state))
			engine_note_ended(e, id);
		if (upd.state != JOB_DONE)
			engine_say(e, "job %lld: %s%s%s", (long long)id, job_state_name(upd.state),
			           upd.reason ? ": " : "", upd.reason ? upd.reason : "");
	}
	upd.reason = NULL;
	job_release(&job);
}

/* ---- accounting ------------------------------------------------------- */

void engine_refresh_snapshot(struct engine *e)
{
	struct gm_snapshot *snap;
	struct proctree tree = PROCTREE_INIT;

	if (snapshot_take(e->cfg->ctx, 0, 0, &snap, e->err, sizeof e->err) != GM_OK) {
		engine_say(e, "warning: cannot read the GPUs: %s", e->err);
		return;
	}
	gm_snapshot_free(e->snap);
	e->snap = snap;
	if (!e->nslots || proctree_read(&tree) < 0)
		return;
	for (size_t i = 0; i < e->nslots; i++) {
		struct slot *s = e->slots[i];
		uint64_t mem = 0, util = 0;
		int seen = 0, has_mem = 0;
		size_t nutil = 0;

		if (s->runner <= 0 || s->go_fd >= 0)
			continue;
		for (size_t p = 0; p < snap->proc_count; p++) {
			const struct gm_proc *pr = &snap->procs[p];
			int mine = 0;

			for (size_t g = 0; g < s->ngpu; g++)
				mine |= pr->gpu == s->gpu[g];
			if (!mine || !proctree_within(&tree, s->runner, (int)pr->pid))
				continue;
			seen = 1;
			if (pr->has_mem) {
				has_mem = 1;
				mem += pr->used_mib;
			}
		}
		if (!seen)
			continue;
		for (size_t g = 0; g < s->ngpu; g++) {
			long pos = -1;

			for (size_t k = 0; k < snap->gpu_count; k++)
				if (snap->gpus[k].index == s->gpu[g])
					pos = (long)k;
			if (pos >= 0 && (snap->gpus[pos].valid & GM_HAS_UTIL)) {
				util += snap->gpus[pos].util_gpu_pct;
				nutil++;
			}
		}
		if (has_mem && (!s->has_peak || (int64_t)mem > s->peak)) {
			s->has_peak = 1;
			s->peak = (int64_t)mem;
		}
		if (nutil) {
			s->util_sum += (double)util / (double)nutil;
			s->samples++;
		}
		s->acct_dirty = 1;
	}
	proctree_release(&tree);
}

void engine_flush_accounting(struct engine *e)
{
	for (size_t i = 0; i < e->nslots; i++) {
		struct slot *s = e->slots[i];
		struct job j = JOB_INIT;

		if (!s->acct_dirty || s->abort)
			continue;
		j.id = s->id;
		j.has_peak = s->has_peak;
		j.peak_mem_mib = s->peak;
		j.util_samples = s->samples;
		j.util_sum = s->util_sum;
		if (engine_tx(e) == 0 &&
		    jobstore_account(e->cfg->store, &j, e->err, sizeof e->err) != GM_OK)
			e->failed = 1;
		s->acct_dirty = 0;
	}
}
