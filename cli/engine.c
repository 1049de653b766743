/*
 * engine.c - the dispatch engine of batch and the queue (see engine.h for
 * the protocol): placing queued jobs, starting their runners, recording results,
 * adopting runners after a restart, accounting, and the event loop.
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
#include "childenv.h"
#include "engine.h"
#include "jobs.h"
#include "jobtree.h"
#include "lease.h"
#include "parse.h"
#include "policy.h"
#include "proctree.h"
#include "registry.h"
#include "util.h"

extern char **environ;

#define TICK_MS 1000           /* NVML re-read and accounting sample */
#define MAX_OOM_REQUEUES 3
#define CANCEL_GRACE_S 10      /* SIGTERM, then SIGKILL this much later */
#define EFT_TAIL_PER_GPU 8     /* plan the tail only: at most this many queued per GPU */
#define EFT_OVERHEAD_MS 10     /* a start's cost, so that noise in tiny tasks holds nothing */
#define RESULT_MAGIC "gpuman-run 1 "
#define RESULT_ROOM 256 /* the runner's result line fits in it */
#define MAX_RUN_SLOTS 65536

/* ---- requests as JSON ------------------------------------------------- */

static void size_text(const struct gm_size *size, char *buf, size_t len)
{
	if (size->is_pct)
		snprintf(buf, len, "%u%%", size->pct);
	else
		snprintf(buf, len, "%llu", (unsigned long long)size->mib);
}

static json_t *list_json(const struct gpu_list *list)
{
	size_t need = 1;
	char *text;
	json_t *s;

	for (size_t i = 0; i < list->count; i++)
		need += strlen(list->items[i]) + 1;
	text = calloc(1, need);
	if (!text)
		return NULL;
	for (size_t i = 0; i < list->count; i++) {
		if (i)
			strcat(text, ",");
		strcat(text, list->items[i]);
	}
	s = json_string(text);
	free(text);
	return s;
}

char *engine_request_json(const struct gm_request *req, int no_framework_env)
{
	json_t *o = json_object();
	char buf[64], *text;

	if (!o)
		return NULL;
	snprintf(buf, sizeof buf, "%u", req->count);
	json_object_set_new(o, "n", json_string(buf));
	json_object_set_new(o, "by", json_string(policy_name(req->by)));
	if (req->has_min_free) {
		size_text(&req->min_free, buf, sizeof buf);
		json_object_set_new(o, "min-free", json_string(buf));
	}
	if (req->has_max_util) {
		snprintf(buf, sizeof buf, "%u", req->max_util);
		json_object_set_new(o, "max-util", json_string(buf));
	}
	if (req->only.count)
		json_object_set_new(o, "only", list_json(&req->only));
	if (req->exclude.count)
		json_object_set_new(o, "exclude", list_json(&req->exclude));
	if (req->share) {
		size_text(&req->mem, buf, sizeof buf);
		json_object_set_new(o, "mem", json_string(buf));
	}
	if (req->idle)
		json_object_set_new(o, "idle", json_string(""));
	if (no_framework_env)
		json_object_set_new(o, "no-framework-env", json_string(""));
	text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return text;
}

struct gm_request *engine_request_parse(const char *text, int *no_framework_env, char *err,
					size_t len)
{
	json_t *o = text ? json_loads(text, 0, NULL) : NULL, *v;
	struct gm_request *req = gm_request_new();
	const char *key;

	if (no_framework_env)
		*no_framework_env = 0;
	if (!req || !json_is_object(o)) {
		gm_fail(GM_ERR_INVALID, err, len, "the job's request is unreadable");
		goto failed;
	}
	json_object_foreach(o, key, v) {
		if (!strcmp(key, "no-framework-env")) {
			if (no_framework_env)
				*no_framework_env = 1;
			continue;
		}
		if (!json_is_string(v) ||
		    gm_request_set(req, key, json_string_value(v), err, len) != GM_OK)
			goto failed;
	}
	json_decref(o);
	return req;
failed:
	json_decref(o);
	gm_request_free(req);
	return NULL;
}

/* A deep copy of req, to add exclusions or a minimum to. */
static struct gm_request *request_copy(const struct gm_request *req)
{
	struct gm_request *c = gm_request_new();
	const struct gpu_list *src[2] = { &req->only, &req->exclude };

	if (!c)
		return NULL;
	*c = *req;
	c->only = (struct gpu_list)GPU_LIST_INIT;
	c->exclude = (struct gpu_list)GPU_LIST_INIT;
	for (int l = 0; l < 2; l++) {
		struct gpu_list *dst = l ? &c->exclude : &c->only;

		dst->items = calloc(src[l]->count + 1, sizeof *dst->items);
		if (!dst->items)
			goto failed;
		for (size_t i = 0; i < src[l]->count; i++) {
			if (!(dst->items[i] = strdup(src[l]->items[i])))
				goto failed;
			dst->count++;
		}
	}
	return c;
failed:
	gm_request_free(c);
	return NULL;
}

static int request_exclude(struct gm_request *req, unsigned index)
{
	char **grown = realloc(req->exclude.items, (req->exclude.count + 2) * sizeof *grown);
	char num[16];

	if (!grown)
		return -1;
	req->exclude.items = grown;
	snprintf(num, sizeof num, "%u", index);
	if (!(grown[req->exclude.count] = strdup(num)))
		return -1;
	req->exclude.count++;
	return 0;
}

void engine_describe_status(int status, char *buf, size_t len)
{
	if (status > 128 && status < 128 + 65)
		snprintf(buf, len, "killed by signal %d (%s)", status - 128, strsignal(status - 128));
	else if (status == 127)
		snprintf(buf, len, "exit status 127 (command not found?)");
	else
		snprintf(buf, len, "exit status %d", status);
}

/* ---- small system helpers --------------------------------------------- */

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* A submitted job's argument vector from its JSON; NULL-terminated,
 * strings owned (free with free_strv). */
static char **json_argv(const char *text)
{
	json_t *a = json_loads(text, 0, NULL), *v;
	char **argv = NULL;
	size_t i;

	if (!json_is_array(a) || !json_array_size(a))
		goto done;
	argv = calloc(json_array_size(a) + 1, sizeof *argv);
	if (!argv)
		goto done;
	json_array_foreach(a, i, v) {
		argv[i] = strdup(json_is_string(v) ? json_string_value(v) : "");
		if (!argv[i]) {
			for (size_t k = 0; k < i; k++)
				free(argv[k]);
			free(argv);
			argv = NULL;
			goto done;
		}
	}
done:
	json_decref(a);
	return argv;
}

static void free_strv(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* ---- starting a runner ------------------------------------------------ */

enum stop { STOP_NONE = 0, STOP_CANCELLED = 1, STOP_INTERRUPTED = 2, STOP_ABORTED = 3 };
static const char *const stop_names[] = { "none", "cancelled", "interrupted", "aborted" };

struct launch {
	struct engine *e;
	const struct job *job;
	int batch;
	int no_framework_env;
	const char *log;     /* log path */
	int run_fd;
	int go[2];
	pid_t runner;
	char err[256];
};

static int strv_add(char ***v, size_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int strv_add(char ***v, size_t *n, const char *fmt, ...)
{
	char **grown = realloc(*v, (*n + 2) * sizeof *grown);
	va_list ap;
	int rc;

	if (!grown)
		return -1;
	*v = grown;
	va_start(ap, fmt);
	rc = vasprintf(&grown[*n], fmt, ap);
	va_end(ap);
	if (rc < 0)
		return -1;
	grown[++*n] = NULL;
	return 0;
}

/*
 * Start gpuman-runner for a claimed job (see runner/gpuman-runner.c for its
 * arguments).  posix_spawn (vfork and exec) rather than fork: see there.
 * Called by the registry under its lock, with the GPUs chosen and before
 * the lease is published, so that the lease names the runner from the
 * start; the runner is the ancestor of the job's processes.
 */
static int spawn_runner(void *data, const struct gm_lease *lease, pid_t *job_pid, char *err,
			size_t len);

/* ---- the engine's state ---------------------------------------------- */

struct slot {
	int64_t id;
	int run_slot;          /* its run file: <run_dir>/slot-<n>.run */
	int attempt;           /* job.attempts of this start */
	pid_t runner;
	int own;               /* our child (SIGCHLD); else adopted (pidfd / tick) */
	int pidfd;             /* adopted runner: readable once it exits; -1 */
	int go_fd;             /* write end of the go pipe until the go is given */
	int abort;             /* the claim did not commit: no go */
	int64_t start_ms;
	size_t ngpu;
	unsigned *gpu;         /* NVML indices */
	int64_t placed_free;
	int has_peak;
	int64_t peak;
	int samples;
	double util_sum;
	int acct_dirty;
	int signalled;         /* interrupts sent */
};

struct engine {
	const struct engine_config *cfg;
	char runner_path[4200]; /* gpuman-runner, next to our own program */
	struct slot **slots;
	size_t nslots;
	int64_t *queue;        /* queued ids in order; [qhead, qcount) live */
	size_t qhead, qcount, qcap;
	struct gm_snapshot *snap;
	int64_t tick_at;       /* monotonic: next NVML read */
	int sfd, ifd, reg_wd, wake_wd;
	sigset_t oldmask;
	int dirty;             /* something changed since placement last failed */
	int interrupt;         /* Ctrl-C count (batch) */
	int stop;              /* dispatcher: SIGTERM */
	int in_tx;
	int ended_any;         /* a job left "running" in this round */
	/* Run slots whose result this round records: not reused before the
	 * round commits, or a crash in between would lose that result. */
	int *held_slots;
	size_t nheld, heldcap;
	int64_t *ended;        /* queue: jobs that ended this round (their .json) */
	size_t nended, endedcap;
	struct engine_counts counts;
	/* batch: per NVML index (up to gpu_cap) */
	size_t gpu_cap;
	int64_t *done_ms;      /* sum of done tasks' durations */
	unsigned *done_n;
	int64_t *floor_mib;    /* OOM at this much free: -1 none */
	char err[GM_ERRBUF_SIZE];
	int failed;            /* a store error: stop */
};

static void say(struct engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct engine *e, const char *fmt, ...)
{
	va_list ap;

	if (!e->cfg->log)
		return;
	va_start(ap, fmt);
	vfprintf(e->cfg->log, fmt, ap);
	va_end(ap);
	fputc('\n', e->cfg->log);
	fflush(e->cfg->log);
}

static void run_path(const struct engine *e, int run_slot, char *buf, size_t len)
{
	snprintf(buf, len, "%s/slot-%d.run", e->cfg->run_dir, run_slot);
}

static int slot_number_busy(const struct engine *e, int n)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i]->run_slot == n)
			return 1;
	for (size_t i = 0; i < e->nheld; i++)
		if (e->held_slots[i] == n)
			return 1;
	return 0;
}

static void hold_slot_number(struct engine *e, int n)
{
	if (n < 0)
		return;
	if (e->nheld == e->heldcap) {
		size_t ncap = e->heldcap ? e->heldcap * 2 : 16;
		int *grown = realloc(e->held_slots, ncap * sizeof *grown);

		if (!grown)
			return;
		e->held_slots = grown;
		e->heldcap = ncap;
	}
	e->held_slots[e->nheld++] = n;
}

static int tx(struct engine *e)
{
	if (e->in_tx)
		return 0;
	if (jobstore_begin(e->cfg->store, e->err, sizeof e->err) != GM_OK) {
		e->failed = 1;
		return -1;
	}
	e->in_tx = 1;
	return 0;
}

static void slot_free(struct slot *s)
{
	if (!s)
		return;
	if (s->pidfd >= 0)
		close(s->pidfd);
	if (s->go_fd >= 0)
		close(s->go_fd);
	free(s->gpu);
	free(s);
}

static void slot_remove(struct engine *e, struct slot *s)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i] == s) {
			e->slots[i] = e->slots[--e->nslots];
			break;
		}
	slot_free(s);
}

static struct slot *slot_add(struct engine *e, int64_t id)
{
	struct slot **grown = realloc(e->slots, (e->nslots + 1) * sizeof *grown);
	struct slot *s = calloc(1, sizeof *s);

	if (!grown || !s) {
		free(s);
		if (grown)
			e->slots = grown;
		return NULL;
	}
	e->slots = grown;
	s->id = id;
	s->pidfd = -1;
	s->go_fd = -1;
	s->placed_free = -1;
	s->run_slot = -1;
	e->slots[e->nslots++] = s;
	return s;
}

static struct slot *slot_by_id(struct engine *e, int64_t id)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i]->id == id)
			return e->slots[i];
	return NULL;
}

static int parse_gpus(struct slot *s, const char *text)
{
	size_t n = 1;

	if (!text || !*text)
		return 0;
	for (const char *p = text; *p; p++)
		n += *p == ',';
	s->gpu = calloc(n, sizeof *s->gpu);
	if (!s->gpu)
		return -1;
	for (const char *p = text; *p;) {
		s->gpu[s->ngpu++] = (unsigned)strtoul(p, NULL, 10);
		p += strcspn(p, ",");
		p += *p == ',';
	}
	return 0;
}

/* ---- the in-memory queue --------------------------------------------- */

static int queue_reload(struct engine *e)
{
	int64_t *ids;
	size_t n;

	if (jobstore_ids(e->cfg->store, JOB_QUEUED, &ids, &n, e->err, sizeof e->err) != GM_OK) {
		e->failed = 1;
		return -1;
	}
	free(e->queue);
	e->queue = ids;
	e->qhead = 0;
	e->qcount = e->qcap = n;
	e->counts.queued = n;
	e->dirty = 1;
	return 0;
}

/* Put a requeued job back in its place: ids are the order. */
static void queue_insert(struct engine *e, int64_t id)
{
	size_t at;

	if (e->qhead > 0 && (e->qhead == e->qcount || e->queue[e->qhead] > id)) {
		e->queue[--e->qhead] = id;
		return;
	}
	if (e->qcount == e->qcap) {
		size_t ncap = e->qcap ? e->qcap * 2 : 64;
		int64_t *grown = realloc(e->queue, ncap * sizeof *grown);

		if (!grown)
			return; /* stays queued in the store: a reload finds it */
		e->queue = grown;
		e->qcap = ncap;
	}
	for (at = e->qhead; at < e->qcount && e->queue[at] < id; at++)
		;
	memmove(&e->queue[at + 1], &e->queue[at], (e->qcount - at) * sizeof *e->queue);
	e->queue[at] = id;
	e->qcount++;
}

/* ---- results ---------------------------------------------------------- */

struct result {
	long long job;
	int attempt;
	long long start_ms, end_ms;
	int status, oom;
	enum stop stop;
};

/* Read a run file's result; 0 if it holds a complete one. */
static int read_result(int fd, struct result *r)
{
	char buf[512], stop[32];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	if (strncmp(buf, RESULT_MAGIC, strlen(RESULT_MAGIC)) || !strchr(buf, '\n'))
		return -1;
	if (sscanf(buf + strlen(RESULT_MAGIC),
		   "job=%lld attempt=%d start_ms=%lld end_ms=%lld status=%d oom=%d stop=%31s", &r->job,
		   &r->attempt, &r->start_ms, &r->end_ms, &r->status, &r->oom, stop) != 7)
		return -1;
	r->stop = STOP_NONE;
	for (size_t i = 0; i < ARRAY_SIZE(stop_names); i++)
		if (!strcmp(stop, stop_names[i]))
			r->stop = (enum stop)i;
	return 0;
}

static void count_move(struct engine *e, enum job_state from, enum job_state to)
{
	size_t *c[JOB_STATE_COUNT] = { &e->counts.queued, &e->counts.running, &e->counts.done,
				       &e->counts.failed, &e->counts.cancelled,
				       &e->counts.interrupted };

	if (*c[from])
		(*c[from])--;
	(*c[to])++;
}

static void batch_learn(struct engine *e, const struct slot *s, const struct job *upd)
{
	if (!e->cfg->request || !s)
		return;
	for (size_t i = 0; i < s->ngpu; i++) {
		unsigned g = s->gpu[i];

		if (g >= e->gpu_cap)
			continue;
		if (upd->state == JOB_DONE && s->ngpu == 1) {
			e->done_ms[g] += upd->end_ms - upd->start_ms;
			e->done_n[g]++;
		}
		if (upd->state == JOB_QUEUED && upd->ooms > 0 && s->placed_free >= 0 &&
		    upd->reason && strstr(upd->reason, "out of memory") &&
		    s->placed_free > e->floor_mib[g])
			e->floor_mib[g] = s->placed_free;
	}
}

static void note_ended(struct engine *e, int64_t id)
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
static void write_job_record(struct engine *e, int64_t id)
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

/*
 * Record how a running job ended, from its run file's result (text NULL:
 * none, the runner died).  s carries the accounting (NULL at adoption).
 * The write is conditional on the job still being in this attempt.
 */
static void record_end(struct engine *e, struct slot *s, int64_t id, int fd)
{
	struct job job, upd;
	struct result r;
	char reason[512] = "", what[128];
	int ok, changed = 0, expect;

	if (jobstore_get(e->cfg->store, id, 0, &job, e->err, sizeof e->err) != GM_OK) {
		if (strncmp(e->err, "no job", 6))
			e->failed = 1;
		return;
	}
	if (job.state != JOB_RUNNING || (s && s->attempt != job.attempts)) {
		job_release(&job);
		return; /* a stale runner (its claim never committed) */
	}
	ok = fd >= 0 && read_result(fd, &r) == 0 && r.job == id && r.attempt == job.attempts;
	upd = job;
	expect = job.attempts;
	upd.runner_pid = 0;
	if (s) {
		upd.has_peak = s->has_peak;
		upd.peak_mem_mib = s->peak;
		upd.util_samples = s->samples;
		upd.util_sum = s->util_sum;
	}
	if (!ok) {
		upd.end_ms = now_ms();
		if (e->cfg->requeue_dead) {
			upd.state = JOB_QUEUED;
			snprintf(reason, sizeof reason, "its runner died; queued again");
		} else {
			upd.state = JOB_FAILED;
			snprintf(reason, sizeof reason,
				 "runner died: its supervisor was killed before it recorded a result "
				 "(the job was killed with it)");
		}
	} else if (r.stop == STOP_ABORTED) {
		upd.state = JOB_QUEUED;
		upd.attempts--;
		upd.start_ms = 0;
		upd.end_ms = 0;
		snprintf(reason, sizeof reason, "%s", job.reason ? job.reason : "");
	} else {
		upd.start_ms = r.start_ms;
		upd.end_ms = r.end_ms;
		upd.has_exit = 1;
		upd.exit_status = r.status;
		engine_describe_status(r.status, what, sizeof what);
		if (r.stop == STOP_CANCELLED) {
			upd.state = JOB_CANCELLED;
			snprintf(reason, sizeof reason, "cancelled");
		} else if (r.stop == STOP_INTERRUPTED) {
			upd.state = JOB_INTERRUPTED;
			snprintf(reason, sizeof reason, "interrupted (Ctrl-C)");
		} else if (r.status == 0) {
			upd.state = JOB_DONE;
			/* Say why it took more than one start. */
			if (job.ooms && job.reason)
				snprintf(reason, sizeof reason, "%s", job.reason);
		} else if (r.oom && job.ooms < MAX_OOM_REQUEUES) {
			int64_t need = job.placed_free_mib >= 0 ? job.placed_free_mib + 1 : 0;

			upd.state = JOB_QUEUED;
			upd.ooms++;
			if (need > upd.min_free_mib)
				upd.min_free_mib = need;
			if (job.placed_free_mib >= 0)
				snprintf(reason, sizeof reason,
					 "CUDA out of memory on GPU %s with %lld MiB free; requeued for "
					 "a GPU with more",
					 job.gpus ? job.gpus : "?", (long long)job.placed_free_mib);
			else
				snprintf(reason, sizeof reason,
					 "CUDA out of memory on GPU %s; requeued",
					 job.gpus ? job.gpus : "?");
		} else if (job.attempts - job.ooms <= job.retries) {
			upd.state = JOB_QUEUED;
			snprintf(reason, sizeof reason, "%s%s; retry %d of %d", what,
				 r.oom ? " (CUDA out of memory)" : "", job.attempts - job.ooms,
				 job.retries);
		} else {
			upd.state = JOB_FAILED;
			snprintf(reason, sizeof reason, "%s%s", what,
				 r.oom ? " (CUDA out of memory)" : "");
		}
	}
	upd.reason = reason[0] ? reason : NULL;
	if (tx(e) == 0 &&
	    jobstore_update(e->cfg->store, &upd, JOB_RUNNING, expect, &changed, e->err,
			    sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed) {
		count_move(e, JOB_RUNNING, upd.state);
		e->ended_any = 1;
		if (upd.state == JOB_QUEUED)
			queue_insert(e, id);
		batch_learn(e, s, &upd);
		if (!e->cfg->request && job_state_final(upd.state))
			note_ended(e, id);
		if (upd.state != JOB_DONE)
			say(e, "job %lld: %s%s%s", (long long)id, job_state_name(upd.state),
			    upd.reason ? ": " : "", upd.reason ? upd.reason : "");
	}
	upd.reason = NULL;
	job_release(&job);
}

/*
 * A job's runner died without its result, or its engine did too, and some
 * processes of the job may live on: those that lost their parent came to
 * us (a subreaper) if the runner was our child; others still hold the run
 * file, which every process of the job inherits.  Kill them all before the
 * job is recorded, so that it never runs again beside them (jobtree.h).
 */
static void end_survivors(struct engine *e, struct slot *s, int64_t id, int fd)
{
	if (s && s->own) {
		pid_t *keep = calloc(e->nslots + 1, sizeof *keep);
		size_t n = 0;

		for (size_t i = 0; keep && i < e->nslots; i++)
			if (e->slots[i]->own && e->slots[i] != s)
				keep[n++] = e->slots[i]->runner;
		if (keep && jobtree_kill_children(keep, n))
			say(e, "job %lld: killed the processes its dead runner left", (long long)id);
		free(keep);
	}
	if (fd < 0)
		return;
	for (int i = 0; i < 250 && flock(fd, LOCK_EX | LOCK_NB) < 0; i++) {
		if (i == 0)
			say(e, "job %lld: killing the processes its dead runner left",
			    (long long)id);
		jobtree_kill_holders(fd);
		usleep(20000);
	}
	flock(fd, LOCK_UN);
}

/*
 * The runner of s has exited (killed: by a signal, if known): record its
 * job's end.  A runner writes its result before it ends the job's leftover
 * processes, so a runner killed in between leaves a result and survivors:
 * they still hold the run file.
 */
static void runner_ended(struct engine *e, struct slot *s, int killed)
{
	struct result r;
	char path[4200];
	int fd;

	fd = -1;
	if (s->run_slot >= 0) {
		run_path(e, s->run_slot, path, sizeof path);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0 || killed || read_result(fd, &r) < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		end_survivors(e, s, s->id, fd);
	record_end(e, s, s->id, fd);
	if (fd >= 0)
		close(fd);
	e->dirty = 1;
	hold_slot_number(e, s->run_slot);
	slot_remove(e, s);
}

/* ---- adoption after a restart ---------------------------------------- */

/*
 * Every job the store says is running and that we do not supervise: its
 * runner lives (run file locked: watch it), has finished (record its
 * result), or died (record that).
 */
static void adopt(struct engine *e)
{
	int64_t *ids = NULL;
	size_t n = 0;

	if (jobstore_ids(e->cfg->store, JOB_RUNNING, &ids, &n, e->err, sizeof e->err) != GM_OK) {
		e->failed = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char path[4200];
		struct job job;
		struct slot *s;
		int fd = -1, run_slot;

		if (slot_by_id(e, ids[i]))
			continue;
		if (jobstore_get(e->cfg->store, ids[i], 0, &job, e->err, sizeof e->err) != GM_OK)
			continue;
		run_slot = job.run_slot;
		if (run_slot >= 0) {
			run_path(e, run_slot, path, sizeof path);
			fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		}
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
			/* Alive.  Its pid is the runner's while the lock is held;
			 * checking the lock again after pidfd_open rules out a
			 * reused pid. */
			s = slot_add(e, ids[i]);
			if (!s) { /* out of memory: look again next time */
				job_release(&job);
				close(fd);
				continue;
			}
			{
				s->run_slot = run_slot;
				s->attempt = job.attempts;
				s->runner = job.runner_pid;
				s->start_ms = job.start_ms;
				s->placed_free = job.placed_free_mib;
				s->has_peak = job.has_peak;
				s->peak = job.peak_mem_mib;
				s->samples = job.util_samples;
				s->util_sum = job.util_sum;
				parse_gpus(s, job.gpus);
				s->pidfd = job.runner_pid > 0 ? pidfd_open_(job.runner_pid) : -1;
				if (s->pidfd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
					/* it ended meanwhile: record it below */
					slot_remove(e, s);
					s = NULL;
				} else if (job.runner_pid <= 0 || !jobtree_holds(job.runner_pid, fd)) {
					/* The runner is gone (its pid, if any, is
					 * another process now) but the job's processes
					 * hold the file: end them, record it below. */
					slot_remove(e, s);
					s = NULL;
					end_survivors(e, NULL, ids[i], fd);
				} else {
					say(e, "job %lld: re-adopted its runner (pid %d)", (long long)ids[i],
					    job.runner_pid);
				}
			}
			if (s) {
				job_release(&job);
				close(fd);
				continue;
			}
		}
		job_release(&job);
		/* Ended, with or without a result. */
		record_end(e, NULL, ids[i], fd);
		hold_slot_number(e, run_slot);
		if (fd >= 0)
			close(fd);
	}
	free(ids);
}

/* An adopted runner without a pidfd: has its lock gone? */
static int adopted_ended(struct engine *e, struct slot *s)
{
	char path[4200];
	int fd, ended;

	if (s->run_slot < 0)
		return 1;
	run_path(e, s->run_slot, path, sizeof path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	ended = flock(fd, LOCK_SH | LOCK_NB) == 0;
	close(fd);
	return ended;
}

/* ---- accounting ------------------------------------------------------- */

static void refresh_snapshot(struct engine *e)
{
	struct gm_snapshot *snap;
	struct proctree tree = PROCTREE_INIT;

	if (gm_snapshot_take(e->cfg->ctx, &snap, e->err, sizeof e->err) != GM_OK) {
		say(e, "warning: cannot read the GPUs: %s", e->err);
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

static void flush_accounting(struct engine *e)
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
		if (tx(e) == 0 && jobstore_account(e->cfg->store, &j, e->err, sizeof e->err) != GM_OK)
			e->failed = 1;
		s->acct_dirty = 0;
	}
}

/* ---- placing ---------------------------------------------------------- */

static int spawn_runner(void *data, const struct gm_lease *lease, pid_t *job_pid, char *err,
			size_t len)
{
	static const int defaults[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD,
					SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM };
	struct launch *L = data;
	const struct job *job = L->job;
	struct child_env env = CHILD_ENV_INIT;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t set;
	char **args = NULL, **jargv = NULL, *uuids = NULL;
	size_t n = 0, ulen = 1;
	pid_t pid;
	int rc = -1, erc;

	for (size_t i = 0; i < gm_lease_gpu_count(lease); i++)
		ulen += strlen(gm_lease_gpu_uuid(lease, i)) + 1;
	uuids = calloc(1, ulen);
	if (!uuids)
		goto oom;
	for (size_t i = 0; i < gm_lease_gpu_count(lease); i++) {
		if (i)
			strcat(uuids, ",");
		strcat(uuids, gm_lease_gpu_uuid(lease, i));
	}
	if (strv_add(&args, &n, "gpuman-runner") || strv_add(&args, &n, "--job=%lld", (long long)job->id) ||
	    strv_add(&args, &n, "--attempt=%d", job->attempts + 1) ||
	    strv_add(&args, &n, "--run-fd=%d", L->run_fd) ||
	    strv_add(&args, &n, "--go-fd=%d", L->go[0]) ||
	    strv_add(&args, &n, "--lease-fd=%d", lease->fd) ||
	    strv_add(&args, &n, "--lease-path=%s", lease->path) ||
	    strv_add(&args, &n, "--lease-id=%s", gm_lease_id(lease)) ||
	    strv_add(&args, &n, "--gpus=%s", gm_lease_indices(lease)) ||
	    strv_add(&args, &n, "--uuids=%s", uuids) ||
	    strv_add(&args, &n, "--cuda-visible=%s", gm_lease_cuda_visible(lease)) ||
	    strv_add(&args, &n, "--log=%s", L->log))
		goto oom;
	if (!lease->exclusive &&
	    (strv_add(&args, &n, "--mem-fraction=%.6f", gm_lease_mem_fraction(lease)) ||
	     (L->no_framework_env && strv_add(&args, &n, "--no-framework-env"))))
		goto oom;
	if ((L->batch && strv_add(&args, &n, "--task")) ||
	    (job->cwd && strv_add(&args, &n, "--cwd=%s", job->cwd)))
		goto oom;
	if (job->argv) {
		jargv = json_argv(job->argv);
		if (!jargv || strv_add(&args, &n, "--"))
			goto oom;
		for (size_t i = 0; jargv[i]; i++)
			if (strv_add(&args, &n, "%s", jargv[i]))
				goto oom;
	} else if (strv_add(&args, &n, "--line=%s", job->command)) {
		goto oom;
	}
	if (job->env && child_env_init_block(&env, job->env, job->env_len) < 0)
		goto oom;

	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	/* The same descriptor number again: clears close-on-exec. */
	posix_spawn_file_actions_adddup2(&fa, L->run_fd, L->run_fd);
	posix_spawn_file_actions_adddup2(&fa, L->go[0], L->go[0]);
	posix_spawn_file_actions_adddup2(&fa, lease->fd, lease->fd);
	sigemptyset(&set);
	posix_spawnattr_setsigmask(&attr, &set);
	for (size_t i = 0; i < ARRAY_SIZE(defaults); i++)
		sigaddset(&set, defaults[i]);
	posix_spawnattr_setsigdefault(&attr, &set);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	erc = posix_spawn(&pid, L->e->runner_path, &fa, &attr, args, job->env ? env.vars : environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (erc) {
		snprintf(err, len, "cannot start '%s': %s", L->e->runner_path, strerror(erc));
		str_copy(L->err, sizeof L->err, err);
		goto done;
	}
	L->runner = pid;
	*job_pid = pid;
	rc = 0;
	goto done;
oom:
	snprintf(err, len, "out of memory");
done:
	free_strv(args);
	free_strv(jargv);
	free(uuids);
	child_env_release(&env);
	return rc;
}

static long snap_pos(const struct gm_snapshot *snap, unsigned index)
{
	for (size_t k = 0; k < snap->gpu_count; k++)
		if (snap->gpus[k].index == index)
			return (long)k;
	return -1;
}

/*
 * Batch only: GPUs this task should not take now.  (1) A GPU where a task
 * of this batch ran out of memory gets no further task while it has no
 * more free memory than then.  (2) Near the end, fastest finish first:
 * plan the remaining tasks greedily by earliest finish over the GPUs'
 * measured task durations, and leave idle a free GPU the plan gives nothing
 * now (a faster GPU will finish that task sooner).  Returns 1 when every
 * free GPU is held back.
 */
static int batch_holdback(struct engine *e, const struct gm_request *req, unsigned *excl,
			  size_t *nexcl)
{
	const struct gm_snapshot *snap = e->snap;
	size_t ng = snap->gpu_count, q = e->qcount - e->qhead, free_known = 0, free_unknown = 0;
	int64_t now = now_ms(), *avail = NULL;
	unsigned char *state = NULL; /* 0 out, 1 free, 2 own busy */
	struct registry_view view = REGISTRY_VIEW_INIT;
	int held_all = 0;

	*nexcl = 0;
	for (size_t k = 0; k < ng; k++) {
		unsigned g = snap->gpus[k].index;

		if (g < e->gpu_cap && e->floor_mib[g] >= 0 && (snap->gpus[k].valid & GM_HAS_MEMORY) &&
		    (int64_t)snap->gpus[k].mem_free_mib <= e->floor_mib[g])
			excl[(*nexcl)++] = g;
	}
	if (req->count != 1 || req->share || q == 0 || q > EFT_TAIL_PER_GPU * ng)
		return 0;
	avail = calloc(ng + 1, sizeof *avail);
	state = calloc(ng + 1, 1);
	if (!avail || !state || registry_read(e->cfg->reg, &view, NULL, 0) != GM_OK)
		goto done;
	for (size_t k = 0; k < ng; k++) {
		const struct gm_gpu *gpu = &snap->gpus[k];
		int out = gpu->state != GM_GPU_OK ||
			  (req->only.count && !gpu_list_matches(&req->only, gpu->index, gpu->uuid)) ||
			  gpu_list_matches(&req->exclude, gpu->index, gpu->uuid);

		for (size_t x = 0; x < *nexcl; x++)
			out |= excl[x] == gpu->index;
		state[k] = out ? 0 : 1;
	}
	for (size_t l = 0; l < view.lease_count; l++)
		for (size_t g = 0; g < view.leases[l].gpu_count; g++) {
			long k = snap_pos(snap, view.leases[l].indices[g]);

			if (k >= 0)
				state[k] = 0;
		}
	for (size_t i = 0; i < e->nslots; i++) {
		const struct slot *s = e->slots[i];

		for (size_t g = 0; g < s->ngpu; g++) {
			long k = snap_pos(snap, s->gpu[g]);
			unsigned idx = s->gpu[g];

			if (k < 0)
				continue;
			state[k] = 0;
			if (s->ngpu == 1 && idx < e->gpu_cap && e->done_n[idx]) {
				int64_t est = e->done_ms[idx] / e->done_n[idx];
				int64_t end = s->start_ms + est;

				/* Overdue: assume it is as late again as it is now. */
				avail[k] = end > now ? end : now + (now - end);
				state[k] = 2;
			}
		}
	}
	for (size_t k = 0; k < ng; k++) {
		unsigned idx = snap->gpus[k].index;

		if (state[k] != 1)
			continue;
		if (idx < e->gpu_cap && e->done_n[idx]) {
			avail[k] = now;
			free_known++;
		} else {
			free_unknown++;
		}
	}
	if (!free_known)
		goto done;
	{
		unsigned char *used = calloc(ng + 1, 1);
		size_t used_count = 0;

		if (!used)
			goto done;
		for (size_t t = 0; t < q && used_count < free_known; t++) {
			long best = -1;
			int64_t best_end = 0;

			for (size_t k = 0; k < ng; k++) {
				unsigned idx = snap->gpus[k].index;
				int64_t end;

				if (!state[k] || idx >= e->gpu_cap || !e->done_n[idx])
					continue;
				end = avail[k] + e->done_ms[idx] / e->done_n[idx] + EFT_OVERHEAD_MS;
				if (best < 0 || end < best_end) {
					best = (long)k;
					best_end = end;
				}
			}
			if (best < 0)
				break;
			if (state[best] == 1 && !used[best]) {
				used[best] = 1;
				used_count++;
			}
			avail[best] = best_end;
		}
		for (size_t k = 0; k < ng; k++)
			if (state[k] == 1 && snap->gpus[k].index < e->gpu_cap &&
			    e->done_n[snap->gpus[k].index] && !used[k])
				excl[(*nexcl)++] = snap->gpus[k].index;
		held_all = used_count == 0 && free_unknown == 0;
		free(used);
	}
done:
	registry_view_release(&view);
	free(avail);
	free(state);
	return held_all;
}

enum place { PLACE_STARTED, PLACE_SKIPPED, PLACE_BLOCKED };

static void fail_unplaceable(struct engine *e, struct job *job, const char *why,
			     const char *explain)
{
	char reason[2048];
	size_t n;
	int changed = 0;
	struct job upd = *job;

	n = (size_t)snprintf(reason, sizeof reason, "%s", why);
	for (const char *p = explain; p && *p && n < sizeof reason - 4;) {
		size_t l = strcspn(p, "\n");

		n += (size_t)snprintf(reason + n, sizeof reason - n, "; %.*s", (int)l, p);
		p += l + (p[l] == '\n');
	}
	upd.state = JOB_FAILED;
	upd.reason = reason;
	upd.end_ms = now_ms();
	if (tx(e) == 0 && jobstore_update(e->cfg->store, &upd, JOB_QUEUED, job->attempts, &changed,
					  e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed) {
		count_move(e, JOB_QUEUED, JOB_FAILED);
		e->ended_any = 1;
		if (!e->cfg->request)
			note_ended(e, job->id);
		say(e, "job %lld: failed: %s", (long long)job->id, reason);
	}
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
			req = request_copy(req);
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
	if (job->min_free_mib > 0 &&
	    (!req->has_min_free || req->min_free.is_pct ||
	     req->min_free.mib < (uint64_t)job->min_free_mib)) {
		if (!*owned) {
			req = request_copy(req);
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
 * Empty a run file and give it the room of a result (zeros: no result), so
 * that the runner's result overwrites space the file already has: on a
 * disk that fills up while the job runs, a job that succeeded is still
 * recorded as such, not as "runner died".
 */
static int run_file_prepare(int fd)
{
	static const char zeros[RESULT_ROOM];

	if (ftruncate(fd, 0) < 0 || pwrite(fd, zeros, sizeof zeros, 0) != (ssize_t)sizeof zeros)
		return -1;
	return 0;
}

static enum place try_place(struct engine *e, int64_t id)
{
	struct job job;
	struct gm_request *req = NULL;
	struct launch L;
	struct acquire_opts opts;
	struct gm_lease *lease = NULL;
	char path[4200], logbuf[4200], err[GM_ERRBUF_SIZE], *explain = NULL;
	unsigned *excl = NULL;
	size_t nexcl = 0;
	int owned = 0, nfe = 0, changed = 0, run_slot = -1;
	enum place result = PLACE_BLOCKED;
	enum gm_err rc;

	memset(&L, 0, sizeof L);
	L.run_fd = L.go[0] = L.go[1] = -1;
	path[0] = '\0';
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
	if (e->cfg->request && e->snap && e->gpu_cap) {
		excl = calloc(e->snap->gpu_count * 2 + 1, sizeof *excl);
		if (excl && batch_holdback(e, req, excl, &nexcl))
			goto done;
		if (nexcl) {
			if (!owned) {
				req = request_copy(req);
				owned = 1;
			}
			for (size_t i = 0; req && i < nexcl; i++)
				if (request_exclude(req, excl[i]) < 0)
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
	L.batch = e->cfg->request != NULL;
	L.no_framework_env = nfe;
	L.log = logbuf;
	/* A free run slot: not ours in memory, and not locked by a runner
	 * (one that got no go may still be on its way out). */
	for (run_slot = 0; run_slot < MAX_RUN_SLOTS; run_slot++) {
		if (slot_number_busy(e, run_slot))
			continue;
		run_path(e, run_slot, path, sizeof path);
		L.run_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (L.run_fd < 0) {
			say(e, "job %lld: cannot create '%s': %s", (long long)id, path, strerror(errno));
			goto done;
		}
		if (flock(L.run_fd, LOCK_EX | LOCK_NB) == 0)
			break;
		close(L.run_fd);
		L.run_fd = -1;
	}
	if (L.run_fd < 0)
		goto done;
	if (run_file_prepare(L.run_fd) < 0) {
		say(e, "job %lld: cannot prepare '%s': %s; it waits", (long long)id, path,
		    strerror(errno));
		goto done;
	}
	if (pipe2(L.go, O_CLOEXEC) < 0)
		goto done;
	memset(&opts, 0, sizeof opts);
	opts.command = job.command;
	opts.spawn = spawn_runner;
	opts.spawn_data = &L;
	opts.snapshot = e->snap;
	rc = registry_acquire(e->cfg->reg, e->cfg->ctx, req, &opts, &lease, &explain, err,
			      sizeof err);
	if (rc == GM_OK) {
		struct slot *s = slot_add(e, id);
		struct job upd = job;
		char *gpus = NULL, *uuids = NULL;
		size_t ulen = 1;
		int64_t free_min = -1;

		for (size_t i = 0; i < gm_lease_gpu_count(lease); i++) {
			long k = e->snap ? snap_pos(e->snap, gm_lease_gpu_index(lease, i)) : -1;

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
				slot_remove(e, s);
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
		parse_gpus(s, gpus);
		lease_detach(lease);

		upd.state = JOB_RUNNING;
		upd.attempts = s->attempt;
		upd.start_ms = s->start_ms;
		upd.end_ms = 0;
		upd.has_exit = 0;
		upd.gpus = gpus;
		upd.uuids = uuids;
		upd.reason = job.reason;
		upd.runner_pid = L.runner;
		upd.placed_free_mib = free_min;
		upd.has_peak = 0;
		upd.util_samples = 0;
		upd.util_sum = 0;
		upd.log = logbuf;
		upd.run_slot = run_slot;
		if (tx(e) < 0 || jobstore_update(e->cfg->store, &upd, JOB_QUEUED, job.attempts,
						 &changed, e->err, sizeof e->err) != GM_OK)
			e->failed = 1;
		if (!changed)
			s->abort = 1;
		else
			count_move(e, JOB_QUEUED, JOB_RUNNING);
		free(gpus);
		free(uuids);
		result = changed ? PLACE_STARTED : PLACE_SKIPPED;
	} else if (rc == GM_ERR_NEVER) {
		fail_unplaceable(e, &job, job.min_free_mib > 0
						  ? "after running out of memory it needs a GPU with "
						    "more free memory than any of this machine has"
						  : "no GPU of this machine can ever meet the request",
				 explain);
		result = PLACE_SKIPPED;
	} else if (L.err[0]) {
		/* No runner can start (gpuman-runner missing?): say so rather
		 * than keep the job queued for ever. */
		fail_unplaceable(e, &job, L.err, NULL);
		result = PLACE_SKIPPED;
	} else if (rc != GM_ERR_UNAVAILABLE && rc != GM_ERR_TIMEOUT) {
		say(e, "job %lld: cannot lease GPUs: %s", (long long)id, err);
	}
	if (rc != GM_OK && L.runner > 0) {
		/* started, then publishing failed: it gets no go */
		close(L.go[1]);
		L.go[1] = -1;
	}
done:
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
static int batch_gpus_all_ours(const struct engine *e)
{
	const struct gm_request *req = e->cfg->request;
	size_t ours = 0;

	if (!req || req->share || !e->snap)
		return 0;
	for (size_t i = 0; i < e->nslots; i++)
		ours += e->slots[i]->ngpu;
	return ours + req->count > e->snap->gpu_count;
}

static void schedule(struct engine *e)
{
	e->dirty = 0;
	while (e->qhead < e->qcount && !e->interrupt && !e->stop && !e->failed) {
		enum place p;

		if (e->cfg->max_running && e->nslots >= e->cfg->max_running)
			break;
		if (batch_gpus_all_ours(e))
			break; /* a lease could only fail: save the registry a read */
		p = try_place(e, e->queue[e->qhead]);
		if (p == PLACE_BLOCKED)
			break; /* first come, first served: the head waits */
		e->qhead++;
	}
	if (e->qhead > 1024 && e->qhead * 2 > e->qcount) {
		memmove(e->queue, e->queue + e->qhead, (e->qcount - e->qhead) * sizeof *e->queue);
		e->qcount -= e->qhead;
		e->qhead = 0;
	}
	e->counts.queued = e->qcount - e->qhead;
}

/* End of a round: commit, then let the claimed jobs go and drop the run
 * files of the recorded ones. */
static void commit_round(struct engine *e)
{
	int ok = 1;

	flush_accounting(e);
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
		if (ok && !s->abort && write(s->go_fd, "g", 1) != 1)
			s->abort = 1;
		close(s->go_fd);
		s->go_fd = -1;
	}
	if (ok)
		e->nheld = 0;
	for (size_t i = 0; ok && i < e->nended; i++)
		write_job_record(e, e->ended[i]);
	e->nended = 0;
	if (ok && e->ended_any && e->cfg->events_path) {
		int fd = open(e->cfg->events_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		if (fd >= 0) {
			if (write(fd, "1", 1) != 1)
				say(e, "warning: cannot write '%s'", e->cfg->events_path);
			close(fd);
		}
	}
	e->ended_any = 0;
}

/* ---- events ----------------------------------------------------------- */

static void reap(struct engine *e)
{
	pid_t pid;
	int ws;

	while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
		for (size_t i = 0; i < e->nslots; i++)
			if (e->slots[i]->own && e->slots[i]->runner == pid) {
				runner_ended(e, e->slots[i], WIFSIGNALED(ws));
				break;
			}
	}
}

static void signal_runners(struct engine *e, int sig)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i]->runner > 0 && !e->slots[i]->abort)
			kill(e->slots[i]->runner, sig);
}

static void read_signals(struct engine *e)
{
	struct signalfd_siginfo si[8];
	ssize_t n = read(e->sfd, si, sizeof si);

	for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof si[0]; i++) {
		int sig = (int)si[i].ssi_signo;

		if (sig == SIGCHLD)
			continue; /* reaped below */
		if (!e->cfg->request) {
			e->stop = 1; /* dispatcher: leave, the runners go on */
			continue;
		}
		e->interrupt++;
		e->counts.interrupting = 1;
		signal_runners(e, e->interrupt == 1 ? SIGUSR1 : SIGUSR2);
	}
	reap(e);
}

static void read_inotify(struct engine *e)
{
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t got;

	while ((got = read(e->ifd, buf, sizeof buf)) > 0) {
		for (char *p = buf; p < buf + got;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			if (ev->mask & IN_Q_OVERFLOW) {
				e->dirty = 1;
				if (e->wake_wd >= 0)
					queue_reload(e);
			} else if (ev->wd == e->reg_wd && ev->len &&
				   (!strncmp(ev->name, "lease.", 6) || !strncmp(ev->name, "wait.", 5))) {
				e->dirty = 1;
			} else if (ev->wd == e->wake_wd && ev->len &&
				   !strcmp(ev->name, e->cfg->wake_name)) {
				queue_reload(e);
				adopt(e);
			}
			p += sizeof *ev + ev->len;
		}
	}
}

static int setup(struct engine *e)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, &e->oldmask) < 0)
		return -1;
	e->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	e->ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (e->sfd < 0 || e->ifd < 0)
		return -1;
	e->reg_wd = inotify_add_watch(e->ifd, e->cfg->reg->dir, IN_CLOSE_WRITE | IN_DELETE);
	e->wake_wd = -1;
	if (e->cfg->wake_dir && e->cfg->wake_name)
		e->wake_wd = inotify_add_watch(e->ifd, e->cfg->wake_dir, IN_CLOSE_WRITE);
	return e->reg_wd < 0 ? -1 : 0;
}

/* Dispatcher: nothing left.  Drop the lock, then look once more: a submit
 * that committed before our look found the lock held and counted on us. */
static int may_exit(struct engine *e)
{
	size_t counts[JOB_STATE_COUNT];

	commit_round(e);
	if (e->cfg->dispatcher_lock_fd < 0)
		return 1;
	flock(e->cfg->dispatcher_lock_fd, LOCK_UN);
	if (jobstore_counts(e->cfg->store, counts, e->err, sizeof e->err) != GM_OK)
		return 1;
	if (!counts[JOB_QUEUED] && !counts[JOB_RUNNING])
		return 1;
	if (flock(e->cfg->dispatcher_lock_fd, LOCK_EX | LOCK_NB) < 0) {
		e->stop = 1; /* another dispatcher has started */
		return 1;
	}
	queue_reload(e);
	adopt(e);
	return 0;
}

enum engine_result engine_run(const struct engine_config *cfg, char *err, size_t len)
{
	struct engine eng, *e = &eng;
	size_t counts[JOB_STATE_COUNT];
	enum engine_result result = ENGINE_DONE;
	struct pollfd *pfd = NULL;

	memset(e, 0, sizeof *e);
	e->cfg = cfg;
	e->sfd = e->ifd = e->reg_wd = e->wake_wd = -1;
	e->counts.started_ms = monotonic_ms();
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
		/* Not fatal: each job then fails saying so, rather than wait
		 * for ever behind a dispatcher that cannot start. */
		if (access(e->runner_path, X_OK) < 0)
			say(e, "warning: cannot run '%s': %s (it is installed with gpuman, next "
			       "to it)",
			    e->runner_path, strerror(errno));
	}
	/* Processes of a job whose runner dies come to us (jobtree.h). */
	jobtree_subreaper();
	if (setup(e) < 0) {
		gm_fail(GM_ERR_IO, err, len, "cannot watch for events: %s", strerror(errno));
		result = ENGINE_ERROR;
		goto done;
	}
	if (gm_snapshot_take(cfg->ctx, &e->snap, err, len) != GM_OK) {
		result = ENGINE_ERROR;
		goto done;
	}
	e->tick_at = monotonic_ms() + TICK_MS;
	if (cfg->request) {
		e->gpu_cap = 64;
		for (size_t k = 0; k < e->snap->gpu_count; k++)
			if (e->snap->gpus[k].index >= e->gpu_cap)
				e->gpu_cap = e->snap->gpus[k].index + 1;
		e->done_ms = calloc(e->gpu_cap, sizeof *e->done_ms);
		e->done_n = calloc(e->gpu_cap, sizeof *e->done_n);
		e->floor_mib = malloc(e->gpu_cap * sizeof *e->floor_mib);
		if (!e->done_ms || !e->done_n || !e->floor_mib) {
			gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
			result = ENGINE_ERROR;
			goto done;
		}
		for (size_t g = 0; g < e->gpu_cap; g++)
			e->floor_mib[g] = -1;
	}
	if (jobstore_counts(cfg->store, counts, err, len) != GM_OK) {
		result = ENGINE_ERROR;
		goto done;
	}
	e->counts.done = counts[JOB_DONE];
	e->counts.failed = counts[JOB_FAILED];
	e->counts.cancelled = counts[JOB_CANCELLED];
	e->counts.interrupted = counts[JOB_INTERRUPTED];
	e->counts.running = counts[JOB_RUNNING];
	adopt(e);
	queue_reload(e);

	for (;;) {
		int64_t now = monotonic_ms();
		int timeout = -1, n;
		size_t np = 0;

		if (e->failed)
			break;
		if ((e->qcount > e->qhead || e->nslots) && now >= e->tick_at) {
			refresh_snapshot(e);
			for (size_t i = 0; i < e->nslots; i++)
				if (!e->slots[i]->own && e->slots[i]->pidfd < 0 &&
				    adopted_ended(e, e->slots[i])) {
					runner_ended(e, e->slots[i], 0);
					i--;
				}
			if (!cfg->request)
				queue_reload(e);
			e->dirty = 1;
			e->tick_at = now + TICK_MS;
		}
		if (e->dirty && !e->interrupt && !e->stop)
			schedule(e);
		commit_round(e);
		if (e->failed)
			break;
		e->counts.running = e->nslots;
		e->counts.queued = e->qcount - e->qhead;
		if (cfg->progress)
			cfg->progress(cfg->progress_data, &e->counts);
		if (e->stop) {
			result = ENGINE_STOPPED;
			break;
		}
		if (!e->nslots && (e->interrupt || e->qcount == e->qhead)) {
			if (e->interrupt) {
				result = ENGINE_INTERRUPTED;
				break;
			}
			if (may_exit(e)) {
				result = e->stop ? ENGINE_STOPPED : ENGINE_DONE;
				break;
			}
			continue;
		}
		if (e->qcount > e->qhead || e->nslots) {
			now = monotonic_ms();
			timeout = e->tick_at > now ? (int)(e->tick_at - now) : 0;
		}
		free(pfd);
		pfd = calloc(e->nslots + 2, sizeof *pfd);
		if (!pfd) {
			gm_fail(GM_ERR_NOMEM, e->err, sizeof e->err, "out of memory");
			e->failed = 1;
			break;
		}
		pfd[np++] = (struct pollfd){ e->sfd, POLLIN, 0 };
		pfd[np++] = (struct pollfd){ e->ifd, POLLIN, 0 };
		for (size_t i = 0; i < e->nslots; i++)
			if (e->slots[i]->pidfd >= 0)
				pfd[np++] = (struct pollfd){ e->slots[i]->pidfd, POLLIN, 0 };
		n = poll(pfd, np, timeout);
		if (n < 0 && errno != EINTR) {
			gm_fail(GM_ERR_IO, e->err, sizeof e->err, "poll: %s", strerror(errno));
			e->failed = 1;
			break;
		}
		if (n <= 0)
			continue;
		if (pfd[0].revents)
			read_signals(e);
		if (pfd[1].revents)
			read_inotify(e);
		for (size_t p = 2; p < np; p++) {
			if (!pfd[p].revents)
				continue;
			for (size_t i = 0; i < e->nslots; i++)
				if (e->slots[i]->pidfd == pfd[p].fd) {
					runner_ended(e, e->slots[i], 0);
					break;
				}
		}
	}
	if (e->failed) {
		commit_round(e);
		gm_fail(GM_ERR_IO, err, len, "%s", e->err);
		result = ENGINE_ERROR;
	}
done:
	for (size_t i = 0; i < e->nslots; i++)
		slot_free(e->slots[i]);
	free(e->held_slots);
	free(e->ended);
	free(e->slots);
	free(e->queue);
	free(pfd);
	free(e->done_ms);
	free(e->done_n);
	free(e->floor_mib);
	gm_snapshot_free(e->snap);
	if (e->sfd >= 0)
		close(e->sfd);
	if (e->ifd >= 0)
		close(e->ifd);
	{
		/* Take what is still pending before unblocking: a last SIGCHLD,
		 * or a Ctrl-C that must not kill us before the summary. */
		sigset_t set;
		struct timespec zero = { 0, 0 };
		int sig;

		sigemptyset(&set);
		sigaddset(&set, SIGCHLD);
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGHUP);
		while ((sig = sigtimedwait(&set, NULL, &zero)) > 0)
			if (sig != SIGCHLD && result == ENGINE_DONE && cfg->request)
				result = ENGINE_INTERRUPTED;
	}
	sigprocmask(SIG_SETMASK, &e->oldmask, NULL);
	return result;
}
