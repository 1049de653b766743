/*
 * place.c - placing queued jobs: a free run file, the request (the job's
 * own, or batch's with what the batch learned), a lease whose publication
 * starts the runner, and the claim of the job in the store; first come,
 * first served.
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

/* WHY, then the registry's explanation (a line per GPU) on the same line. */
static void with_explain(char *out, size_t size, const char *why, const char *explain)
{
	size_t n = (size_t)snprintf(out, size, "%s", why);

	for (const char *p = explain; p && *p && n < size - 4;) {
		size_t l = strcspn(p, "\n");

		n += (size_t)snprintf(out + n, size - n, "; %.*s", (int)l, p);
		p += l + (p[l] == '\n');
	}
}

static void fail_unplaceable(struct engine *e, struct job *job, const char *why,
                             const char *explain)
{
	char reason[2048];
	int changed = 0;
	struct job upd = *job;

	with_explain(reason, sizeof reason, why, explain);
	upd.state = JOB_FAILED;
	upd.reason = reason;
	upd.end_ms = now_ms();
	if (engine_tx(e) == 0 && jobstore_update(e->cfg->store, &upd, JOB_QUEUED, job->attempts,
	                                         &changed, e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed) {
		engine_count_move(e, JOB_QUEUED, JOB_FAILED);
		e->ended_any = 1;
		if (!e->cfg->batch)
			engine_note_ended(e, job->id);
		engine_say(e, "job %lld: failed: %s", (long long)job->id, reason);
	}
}

static const char WAITING[] = JOB_WAITING;

/* A queued job's reason, written when it changes; the record is what
 * failed to be written perhaps: not fatal. */
static void set_queued_reason(struct engine *e, const struct job *job, char *reason)
{
	struct job upd = *job;
	int changed = 0;

	if (job->reason && !strcmp(job->reason, reason))
		return;
	upd.reason = reason;
	if (engine_tx(e) == 0 && jobstore_update(e->cfg->store, &upd, JOB_QUEUED, job->attempts,
	                                         &changed, e->err, sizeof e->err) != GM_OK)
		e->err[0] = '\0';
}

/* Say why a queued job cannot start now (a full disk, a state directory
 * it cannot write): in its record, which gpuman queue shows, and in the
 * log once per distinct cause, not at each round.  It stays queued and
 * starts once that is mended. */
static void note_waiting(struct engine *e, struct job *job, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note_waiting(struct engine *e, struct job *job, const char *fmt, ...)
{
	char why[sizeof e->wait_said], reason[sizeof why + 64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	snprintf(reason, sizeof reason, "%s%s; it starts once that is mended", WAITING, why);
	if (strcmp(e->wait_said, why)) {
		memcpy(e->wait_said, why, sizeof why);
		engine_say(e, "job %lld: %s", (long long)job->id, reason);
	}
	set_queued_reason(e, job, reason);
}

/* The head of the queue's reason while the GPUs keep it waiting (who
 * holds them), as gpuman run --wait would say; the jobs behind it wait
 * for it.  Cleared when it starts.  A reason of its own (requeued after
 * running out of memory) stays.  Batch's tasks show none; a batch none of
 * whose tasks runs is told (cfg->blocked). */
static const char BLOCKED[] = JOB_BLOCKED;

static void note_blocked(struct engine *e, struct job *job, const char *explain)
{
	char reason[2048];

	if (!explain || !*explain)
		return;
	if (e->cfg->batch) {
		if (e->cfg->blocked && !e->blocked_told && !e->counts.running) {
			e->blocked_told = 1;
			e->cfg->blocked(e->cfg->blocked_data, explain);
		}
		return;
	}
	if (job->reason && strncmp(job->reason, BLOCKED, strlen(BLOCKED)) &&
	    strncmp(job->reason, WAITING, strlen(WAITING)))
		return;
	with_explain(reason, sizeof reason, BLOCKED, explain);
	set_queued_reason(e, job, reason);
}

/* The request for this job: its own or batch's, plus what it learned. */
static struct gm_request *job_request(struct engine *e, const struct job *job,
                                      int *no_framework_env, int *owned)
{
	struct gm_request *req;

	*owned = 0;
	*no_framework_env = e->cfg->no_framework_env;
	if (e->cfg->request) {
		req = (struct gm_request *)e->cfg->request;
		if (req->has_wait) {
			/* The engine is the one that waits; a lease attempt
			 * must never block it. */
			req = engine_request_copy(req);
			if (!req)
				return NULL;
			req->has_wait = 0;
			*owned = 1;
		}
	} else {
		req = engine_request_parse(job->request, no_framework_env, NULL, 0);
		if (!req)
			return NULL;
		*owned = 1;
	}
	if (job->min_free_mib > 0 && (!req->has_min_free || req->min_free.is_pct ||
	                              req->min_free.mib < (uint64_t)job->min_free_mib)) {
		if (!*owned) {
			req = engine_request_copy(req);
			if (!req)
				return NULL;
			*owned = 1;
		}
		req->has_min_free = 1;
		req->min_free.is_pct = 0;
		req->min_free.mib = (uint64_t)job->min_free_mib;
	}
	return req;
}

/*
 * Make a run file the room of a result, all zeros (no result), so that the
 * runner's result overwrites space the file already has: on a disk that
 * fills up while the job runs, a job that succeeded is still recorded as
 * such, not as "runner died".  Overwritten, then cut to that size, never
 * emptied first: ext4 writes a file emptied and rewritten out at its
 * close, a disk write for every job.
 */
static int run_file_prepare(int fd)
{
	static const char zeros[PROTOCOL_RESULT_ROOM];

	if (pwrite(fd, zeros, sizeof zeros, 0) != (ssize_t)sizeof zeros ||
	    ftruncate(fd, sizeof zeros) < 0)
		return -1;
	return 0;
}

/* Someone has held the registry lock for seconds: say who. */
static void tell_lock_wait(void *data, const char *who)
{
	struct launch *L = data;

	engine_say(L->e, "job %lld: waiting: %s", (long long)L->job->id, who);
}

/* A free run slot, locked and prepared (*fd): not ours in memory, and not
 * locked by a runner (one that got no go may still be on its way out).
 * Its number, or -1 (none: why is in job's record). */
static int free_run_slot(struct engine *e, struct job *job, int *fd)
{
	char path[4200];

	for (int n = 0; n < MAX_RUN_SLOTS; n++) {
		if (engine_slot_number_busy(e, n))
			continue;
		engine_run_path(e, n, path, sizeof path);
		*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (*fd < 0) {
			note_waiting(e, job, "cannot create '%s': %s", path, strerror(errno));
			return -1;
		}
		if (flock(*fd, LOCK_EX | LOCK_NB) < 0) {
			close(*fd);
			*fd = -1;
			continue;
		}
		if (run_file_prepare(*fd) == 0)
			return n;
		note_waiting(e, job, "cannot prepare '%s': %s", path, strerror(errno));
		return -1;
	}
	return -1;
}

static enum place try_place(struct engine *e, int64_t id)
{
	struct job job;
	struct gm_request *req = NULL;
	struct launch L;
	struct acquire_opts opts;
	struct gm_lease *lease = NULL;
	char logbuf[4200], err[GM_ERRBUF_SIZE], *explain = NULL;
	unsigned *excl = NULL;
	size_t nexcl = 0;
	int owned = 0, nfe = 0, changed = 0, run_slot = -1;
	enum place result = PLACE_BLOCKED;
	enum gm_err rc = GM_ERR_STATE;

	memset(&L, 0, sizeof L);
	L.run_fd = L.go[0] = L.go[1] = L.early_pidfd = -1;
	if (jobstore_get(e->cfg->store, id, 1, &job, e->err, sizeof e->err) != GM_OK) {
		if (strncmp(e->err, "no job", 6))
			e->failed = 1;
		return PLACE_SKIPPED;
	}
	if (job.state != JOB_QUEUED) {
		job_release(&job);
		return PLACE_SKIPPED;
	}
	req = job_request(e, &job, &nfe, &owned);
	if (!req) {
		fail_unplaceable(e, &job, "its request cannot be read", NULL);
		result = PLACE_SKIPPED;
		goto done;
	}
	if (e->cfg->batch && e->snap && e->gpu_cap) {
		excl = calloc(e->snap->gpu_count * 2 + 1, sizeof *excl);
		if (excl && engine_batch_holdback(e, req, excl, &nexcl))
			goto done;
		if (nexcl) {
			if (!owned) {
				req = engine_request_copy(req);
				owned = 1;
			}
			for (size_t i = 0; req && i < nexcl; i++)
				if (engine_request_exclude(req, excl[i]) < 0)
					break;
			if (!req)
				goto done;
		}
	}
	if (job.log) {
		str_copy(logbuf, sizeof logbuf, job.log);
	} else {
		snprintf(logbuf, sizeof logbuf, "%s/%lld.log", e->cfg->log_dir, (long long)id);
	}
	L.e = e;
	L.job = &job;
	L.batch = e->cfg->batch;
	L.no_framework_env = nfe;
	L.log = logbuf;
	/* Its runner, started as it waited in the broker's line, holds its
	 * run slot; else a free one. */
	run_slot = engine_early_take(e, &L, id, job.attempts + 1);
	if (run_slot < 0 && (run_slot = free_run_slot(e, &job, &L.run_fd)) < 0)
		goto done;
	memset(&opts, 0, sizeof opts);
	opts.command = job.command;
	opts.spawn = engine_spawn_runner;
	opts.spawn_data = &L;
	/* Where the broker places a waiter's job as it waits, the runner
	 * waits placed too: at the grant nothing is moved. */
	opts.prespawn = engine_prespawn_runner;
	opts.prespawn_drop = engine_prespawn_drop;
	opts.prespawn_keeps = 1;
	opts.snapshot = e->snap;
	opts.on_lock_wait = tell_lock_wait;
	opts.on_wait_data = &L;
	/* First come, first served with every other waiter of a broker. */
	opts.keep_place = 1;
	rc = registry_acquire(e->cfg->reg, e->cfg->ctx, req, &opts, &lease, &explain, err,
	                      sizeof err);
	if (rc == GM_OK) {
		struct slot *s = engine_slot_add(e, id);
		struct job upd = job;
		char *gpus = NULL, *uuids = NULL;
		size_t ulen = 1;
		int64_t free_min = -1;

		for (size_t i = 0; i < gm_lease_gpu_count(lease); i++) {
			long k =
			    e->snap ? engine_snap_pos(e->snap, gm_lease_gpu_index(lease, i)) : -1;

			ulen += strlen(gm_lease_gpu_uuid(lease, i)) + 1;
			if (k >= 0 && (e->snap->gpus[k].valid & GM_HAS_MEMORY) &&
			    (free_min < 0 || (int64_t)e->snap->gpus[k].mem_free_mib < free_min))
				free_min = (int64_t)e->snap->gpus[k].mem_free_mib;
		}
		gpus = strdup(gm_lease_indices(lease));
		uuids = calloc(1, ulen);
		for (size_t i = 0; uuids && i < gm_lease_gpu_count(lease); i++) {
			if (i)
				strcat(uuids, ",");
			strcat(uuids, gm_lease_gpu_uuid(lease, i));
		}
		close(L.go[0]);
		L.go[0] = -1;
		if (!s || !gpus || !uuids) {
			/* out of memory: the runner gets no go and aborts */
			free(gpus);
			free(uuids);
			if (s)
				engine_slot_remove(e, s);
			lease_detach(lease);
			goto done;
		}
		s->own = 1;
		s->run_slot = run_slot;
		s->runner = L.runner;
		s->attempt = job.attempts + 1;
		s->start_ms = now_ms();
		s->placed_free = free_min;
		s->go_fd = L.go[1];
		L.go[1] = -1;
		engine_parse_gpus(s, gpus);
		lease_detach(lease);

		upd.state = JOB_RUNNING;
		upd.attempts = s->attempt;
		upd.start_ms = s->start_ms;
		upd.end_ms = 0;
		upd.has_exit = 0;
		upd.gpus = gpus;
		upd.uuids = uuids;
		upd.reason = job.reason && (!strncmp(job.reason, WAITING, strlen(WAITING)) ||
		                            !strncmp(job.reason, BLOCKED, strlen(BLOCKED)))
		                 ? NULL
		                 : job.reason;
		e->wait_said[0] = '\0';
		upd.runner_pid = L.runner;
		upd.placed_free_mib = free_min;
		upd.has_peak = 0;
		upd.util_samples = 0;
		upd.util_sum = 0;
		upd.log = logbuf;
		upd.run_slot = run_slot;
		if (engine_tx(e) < 0 ||
		    jobstore_update(e->cfg->store, &upd, JOB_QUEUED, job.attempts, &changed, e->err,
		                    sizeof e->err) != GM_OK)
			e->failed = 1;
		if (!changed)
			s->abort = 1;
		else
			engine_count_move(e, JOB_QUEUED, JOB_RUNNING);
		free(gpus);
		free(uuids);
		result = changed ? PLACE_STARTED : PLACE_SKIPPED;
	} else if (rc == GM_ERR_NEVER) {
		fail_unplaceable(e, &job,
		                 job.min_free_mib > 0
		                     ? "after running out of memory it needs a GPU with "
		                       "more free memory than any of this machine has"
		                     : "no GPU of this machine can ever meet the request",
		                 explain);
		result = PLACE_SKIPPED;
	} else if (L.err[0]) {
		/* No runner can start (gpuman-runner missing?): engine_say so rather
		 * than keep the job queued for ever. */
		fail_unplaceable(e, &job, L.err, NULL);
		result = PLACE_SKIPPED;
	} else if (rc != GM_ERR_UNAVAILABLE && rc != GM_ERR_TIMEOUT && e->cfg->batch) {
		/* The registry refuses the lease itself (a state directory this
		 * user cannot write, a full disk): nothing will wake the batch, so
		 * its task fails saying why rather than wait silently for ever;
		 * --resume runs it again once that is mended. */
		char why[GM_ERRBUF_SIZE + 32];

		snprintf(why, sizeof why, "cannot lease GPUs: %s", err);
		fail_unplaceable(e, &job, why, NULL);
		result = PLACE_SKIPPED;
	} else if (rc != GM_ERR_UNAVAILABLE && rc != GM_ERR_TIMEOUT) {
		note_waiting(e, &job, "cannot lease GPUs: %s", err);
	} else {
		note_blocked(e, &job, explain);
	}
	if (rc != GM_OK && L.runner > 0) {
		/* started, then publishing failed: it gets no go */
		close(L.go[1]);
		L.go[1] = -1;
	}
done:
	/* Still in line: its early runner waits on with it. */
	engine_early_keep(e, &L, run_slot, rc == GM_ERR_UNAVAILABLE && result == PLACE_BLOCKED);
	if (L.run_fd >= 0)
		close(L.run_fd);
	if (L.go[0] >= 0)
		close(L.go[0]);
	if (L.go[1] >= 0)
		close(L.go[1]);
	free(explain);
	free(excl);
	if (owned)
		gm_request_free(req);
	job_release(&job);
	return result;
}

/* Batch of exclusive tasks: do our own tasks hold every GPU already? */
static int batch_gpus_all_ours(struct engine *e)
{
	const struct gm_request *req = e->cfg->request;
	size_t ours = 0;

	if (!req || req->share || !e->snap)
		return 0;
	for (size_t i = 0; i < e->nslots; i++)
		ours += e->slots[i]->ngpu;
	return ours + req->count > e->snap->gpu_count;
}

/* Commit what is written, then let the claimed jobs go: a job starts only
 * once its start is on record (a dispatcher killed in between must not
 * run it twice).  Also after each job placed, not only at the round's end:
 * the go of the first of several GPUs freed at once would otherwise wait
 * for every later placement.  0, or -1 when the commit failed. */
int engine_commit_go(struct engine *e)
{
	int ok = 1;

	if (e->in_tx) {
		if (e->failed || jobstore_commit(e->cfg->store, e->err, sizeof e->err) != GM_OK) {
			jobstore_rollback(e->cfg->store);
			ok = 0;
			e->failed = 1;
		}
		e->in_tx = 0;
	}
	for (size_t i = 0; i < e->nslots; i++) {
		struct slot *s = e->slots[i];

		if (s->go_fd < 0)
			continue;
		if (ok && !s->abort && protocol_give_go(s->go_fd) < 0)
			s->abort = 1;
		close(s->go_fd);
		s->go_fd = -1;
	}
	if (ok)
		e->nheld = 0;
	return ok ? 0 : -1;
}

/* ---- placement_local -------------------------------------------------- */

static int local_init(struct engine *e, char *err, size_t len)
{
	/* gpuman-runner lives next to our own program. */
	char self[4096];
	ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash;

	self[l > 0 ? l : 0] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(e->runner_path, sizeof e->runner_path, "%s/gpuman-runner", self);
	/* Not fatal: each job then fails saying so, rather than wait for ever
	 * behind a dispatcher that cannot start. */
	if (access(e->runner_path, X_OK) < 0)
		engine_say(e,
		           "warning: cannot run '%s': %s (it is installed with gpuman, next to it)",
		           e->runner_path, strerror(errno));
	/* Processes of a job whose runner dies come to us (protocol.h). */
	jobtree_subreaper();
	e->reg_wd = inotify_add_watch(e->ifd, e->cfg->reg->dir, IN_CLOSE_WRITE | IN_DELETE);
	if (e->reg_wd < 0) {
		gm_fail(GM_ERR_IO, err, len, "cannot watch for events: %s", strerror(errno));
		return -1;
	}
	if (snapshot_take(e->cfg->ctx, 0, 0, &e->snap, err, len) != GM_OK) /* no clocks */
		return -1;
	if (!e->cfg->batch)
		return 0;
	/* A batch learns per GPU: its tasks' durations, out-of-memory floors. */
	e->gpu_cap = 64;
	for (size_t k = 0; k < e->snap->gpu_count; k++)
		if (e->snap->gpus[k].index >= e->gpu_cap)
			e->gpu_cap = e->snap->gpus[k].index + 1;
	e->done_ms = calloc(e->gpu_cap, sizeof *e->done_ms);
	e->done_n = calloc(e->gpu_cap, sizeof *e->done_n);
	e->floor_mib = malloc(e->gpu_cap * sizeof *e->floor_mib);
	if (!e->done_ms || !e->done_n || !e->floor_mib) {
		gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		return -1;
	}
	for (size_t g = 0; g < e->gpu_cap; g++)
		e->floor_mib[g] = -1;
	return 0;
}

static void local_tick(struct engine *e)
{
	engine_refresh_snapshot(e);
	for (size_t i = 0; i < e->nslots; i++)
		if (!e->slots[i]->own && e->slots[i]->pidfd < 0 &&
		    engine_adopted_ended(e, e->slots[i])) {
			engine_runner_ended(e, e->slots[i], 0);
			i--;
		}
}

static void local_ended(struct engine *e, struct slot *s, int ws)
{
	engine_runner_ended(e, s, WIFSIGNALED(ws));
}

/* Ctrl-C: the runners stop their jobs (SIGUSR1), then kill them. */
static void local_interrupt(struct engine *e)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i]->runner > 0 && !e->slots[i]->abort)
			kill(e->slots[i]->runner, e->interrupt == 1 ? SIGUSR1 : SIGUSR2);
}

static void local_release(struct engine *e)
{
	engine_early_drop(e);
	free(e->done_ms);
	free(e->done_n);
	free(e->floor_mib);
	gm_snapshot_free(e->snap);
	e->done_ms = NULL;
	e->done_n = NULL;
	e->floor_mib = NULL;
	e->snap = NULL;
}

const struct placement placement_local = {
    .name = "local",
    .init = local_init,
    .tick = local_tick,
    /* Exclusive tasks that hold every GPU: a lease could only fail. */
    .full = batch_gpus_all_ours,
    .place = try_place,
    .ended = local_ended,
    .adopt = engine_adopt,
    .interrupt = local_interrupt,
    .release = local_release,
};

/* ---- the rounds ------------------------------------------------------- */

void engine_schedule(struct engine *e)
{
	size_t i = e->qhead;

	e->dirty = 0;
	/* Its last waiting job gone (cancelled): nobody to keep a place for
	 * (its early runner holds the place's connection: it ends first). */
	if (e->qhead == e->qcount && e->cfg->reg) {
		engine_early_drop(e);
		registry_drop_place(e->cfg->reg);
	}
	while (i < e->qcount && !e->interrupt && !e->stop && !e->failed && !e->closed) {
		enum place p;

		if (e->cfg->max_running && e->nslots >= e->cfg->max_running)
			break;
		if (e->place->full(e))
			break; /* no job could start: save the work */
		p = e->place->place(e, e->queue[i]);
		if (p == PLACE_BLOCKED)
			break; /* first come, first served: the head waits */
		if (p == PLACE_LATER) {
			i++; /* it waits in its place; a later job may fit */
			continue;
		}
		if (p == PLACE_STARTED) {
			engine_commit_go(e);
			e->blocked_told = 0;
		}
		/* Started, or no longer queued: out of the in-memory queue. */
		if (i == e->qhead) {
			e->qhead++;
			i++;
		} else {
			memmove(&e->queue[i], &e->queue[i + 1],
			        (e->qcount - i - 1) * sizeof *e->queue);
			e->qcount--;
		}
	}
	if (e->qhead > 1024 && e->qhead * 2 > e->qcount) {
		memmove(e->queue, e->queue + e->qhead, (e->qcount - e->qhead) * sizeof *e->queue);
		e->qcount -= e->qhead;
		e->qhead = 0;
	}
	e->counts.queued = e->qcount - e->qhead;
}
