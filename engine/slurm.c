/*
 * slurm.c - placement_slurm: a batch's tasks as `srun --exact` steps in a
 * Slurm allocation (lib/slurm.c drives Slurm's commands), through the same
 * loop, store, rounds, Ctrl-C and outcome rules as on one machine.
 *
 * A task starts when a GPU type of the allocation has room for it and it
 * has not run out of memory on that type before; gpuman is the parent of
 * every srun, so it knows each task's end at once without polling the
 * controller.  In each step a small /bin/sh wrapper fills in {gpu}, sets
 * GPUMAN_TASK and GPUMAN_GPUS and writes a record (start, node, GPUs, end,
 * status) into the run directory, which therefore must be on a file
 * system the nodes share (as the working directory of any Slurm job is).
 * Tasks the store says are running (a batch that was killed) ran in an
 * allocation that is gone or not ours: they are queued again.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "internal.h"
#include "slurm.h"

/*
 * Run inside each step by /bin/sh: $1 record file, $2 the task's line,
 * $3 its number, $4 gpuman (its path here; the nodes see the same file
 * system).  {gpu} becomes the step's GPUs as Slurm numbers them on the
 * node (SLURM_STEP_GPUS), also in GPUMAN_GPUS.  The record's lines:
 *   start MS NODE GPUS
 *   end MS STATUS
 * Beside the task, `gpuman slurm-sample` keeps its peak GPU memory and
 * utilization in the record's .usage file, as the local engine samples
 * them (skipped where gpuman is not on the node).
 */
const char slurm_wrapper[] =
    "r=$1; line=$2; GPUMAN_TASK=$3; gm=$4; sp=\n"
    "g=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}\n"
    "GPUMAN_GPUS=$g; export GPUMAN_TASK GPUMAN_GPUS\n"
    "out=; rest=$line\n"
    "while :; do case $rest in *'{gpu}'*) out=$out${rest%%'{gpu}'*}$g; "
    "rest=${rest#*'{gpu}'};; *) break;; esac; done\n"
    "(umask 077; echo \"start $(date +%s%3N) ${SLURMD_NODENAME:-$(hostname)} ${g:--}\" "
    ">\"$r\")\n"
    "if [ -x \"$gm\" ]; then\n"
    "  \"$gm\" slurm-sample $$ \"${r%.where}.usage\" </dev/null >/dev/null 2>&1 & sp=$!\n"
    "fi\n"
    "/bin/sh -c \"$out$rest\"\n"
    "s=$?\n"
    "[ -z \"$sp\" ] || { kill $sp; wait $sp; } 2>/dev/null\n"
    "echo \"end $(date +%s%3N) $s\" >>\"$r\"\n"
    "exit $s\n";

/* What slurm.c keeps besides the engine's slots. */
struct slurm_state {
	struct engine_slurm *cfg;
	const struct slurm_alloc *alloc;
	unsigned used[SLURM_MAX_TYPES]; /* per type: GPUs its running steps hold */
	unsigned *oom_types;            /* per task id: bit t = ran out of memory on type t */
	size_t noom;
	char gpuman[PATH_MAX]; /* this program, for the steps' sampler; "" if unknown */
};

void slurm_read_record(const char *path, struct slurm_record *r)
{
	FILE *f = fopen(path, "r");
	char line[256];

	memset(r, 0, sizeof *r);
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		long long ms;
		int st;

		if (sscanf(line, "start %lld %63s %63s", &ms, r->node, r->gpus) == 3) {
			r->started = 1;
			r->start_ms = ms;
		} else if (sscanf(line, "end %lld %d", &ms, &st) == 2) {
			r->ended = 1;
			r->end_ms = ms;
			r->status = st;
		}
	}
	fclose(f);
}

/* The step's sampler's figures (gpuman slurm-sample): "PEAK|- N SUM". */
void slurm_read_usage(const char *record, struct job *j)
{
	char path[PATH_MAX + 80], peak[32];
	FILE *f;
	int n;
	double sum;

	snprintf(path, sizeof path, "%.*s.usage", (int)(strlen(record) - strlen(".where")), record);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fscanf(f, "%31s %d %lf", peak, &n, &sum) == 3 && n >= 0) {
		j->has_peak = strcmp(peak, "-") != 0;
		j->peak_mem_mib = j->has_peak ? strtoll(peak, NULL, 10) : 0;
		j->util_samples = n;
		j->util_sum = sum;
	}
	fclose(f);
}

/* The text a task's log got from offset on (at most the last 64 KiB). */
static char *log_since(const char *path, off_t from)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	char *buf = NULL;
	ssize_t got;

	if (fd < 0)
		return strdup("");
	if (fstat(fd, &sb) == 0) {
		if (sb.st_size - from > 65536)
			from = sb.st_size - 65536;
		buf = calloc((size_t)(sb.st_size - from) + 1, 1);
		if (buf && (got = pread(fd, buf, (size_t)(sb.st_size - from), from)) > 0)
			for (ssize_t i = 0; i < got; i++)
				if (!buf[i])
					buf[i] = ' ';
	}
	close(fd);
	return buf ? buf : strdup("");
}

static void record_path(const struct engine *e, int64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/task-%lld.where", e->cfg->run_dir, (long long)id);
}

/* The types task id ran out of memory on (a bit each); grows the table. */
static unsigned *oom_types(struct slurm_state *ss, int64_t id)
{
	if (id < 0)
		return NULL;
	if ((size_t)id >= ss->noom) {
		size_t n = (size_t)id * 2 + 16;
		unsigned *grown = realloc(ss->oom_types, n * sizeof *grown);

		if (!grown)
			return NULL;
		memset(grown + ss->noom, 0, (n - ss->noom) * sizeof *grown);
		ss->oom_types = grown;
		ss->noom = n;
	}
	return &ss->oom_types[id];
}

/* The type with room for task id: not one it ran out of memory on. */
static long free_type(struct slurm_state *ss, int64_t id)
{
	unsigned *oom = oom_types(ss, id);

	for (size_t t = 0; t < ss->alloc->type_count; t++)
		if (!(oom && (*oom & (1u << t))) &&
		    ss->used[t] + ss->cfg->per_task <= ss->alloc->types[t].count)
			return (long)t;
	return -1;
}

static int slurm_init(struct engine *e, char *err, size_t len)
{
	struct slurm_state *ss = calloc(1, sizeof *ss);

	if (!ss) {
		gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		return -1;
	}
	ss->cfg = e->cfg->slurm;
	ss->alloc = ss->cfg->alloc;
	ss->cfg->ended[0] = '\0';
	{
		ssize_t n = readlink("/proc/self/exe", ss->gpuman, sizeof ss->gpuman - 1);

		ss->gpuman[n > 0 ? n : 0] = '\0';
	}
	e->place_data = ss;
	return 0;
}

static int slurm_full(struct engine *e)
{
	struct slurm_state *ss = e->place_data;

	for (size_t t = 0; t < ss->alloc->type_count; t++)
		if (ss->used[t] + ss->cfg->per_task <= ss->alloc->types[t].count)
			return 0;
	return 1;
}

static enum place slurm_place(struct engine *e, int64_t id)
{
	struct slurm_state *ss = e->place_data;
	struct job job, upd;
	struct slot *s;
	struct stat sb;
	char rec[PATH_MAX + 64], usage[PATH_MAX + 80], name[48], num[24], *line;
	const char *tname;
	int fd, changed = 0;
	long t;
	pid_t pid;

	if (jobstore_get(e->cfg->store, id, 0, &job, e->err, sizeof e->err) != GM_OK) {
		if (strncmp(e->err, "no job", 6))
			e->failed = 1;
		return PLACE_SKIPPED;
	}
	if (job.state != JOB_QUEUED) {
		job_release(&job);
		return PLACE_SKIPPED;
	}
	if ((t = free_type(ss, id)) < 0) {
		job_release(&job);
		return PLACE_LATER;
	}
	tname = ss->alloc->types[t].name;
	line = protocol_substitute(job.command ? job.command : "", "{gpu}", NULL, id);
	record_path(e, id, rec, sizeof rec);
	snprintf(name, sizeof name, "gpuman-task-%lld", (long long)id);
	snprintf(num, sizeof num, "%lld", (long long)id);
	unlink(rec);
	snprintf(usage, sizeof usage, "%.*s.usage", (int)(strlen(rec) - strlen(".where")), rec);
	unlink(usage);
	/* private, as the local batch's logs (the directory passed safedir) */
	fd = line && job.log
	         ? open(job.log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600)
	         : -1;
	if (fd < 0) {
		gm_fail(GM_ERR_IO, e->err, sizeof e->err, "'%s': %s", job.log ? job.log : "?",
		        line ? strerror(errno) : "out of memory");
		e->failed = 1;
		free(line);
		job_release(&job);
		return PLACE_BLOCKED;
	}
	if (fstat(fd, &sb) < 0)
		sb.st_size = 0;
	{
		const char *cmd[] = {"/bin/sh", "-c", slurm_wrapper, "sh", rec,
		                     line,      num,  ss->gpuman,    NULL};

		pid = slurm_step_spawn(ss->alloc, tname, ss->cfg->per_task, name,
		                       ss->cfg->step_args, cmd, fd);
	}
	close(fd);
	free(line);
	s = pid > 0 ? engine_slot_add(e, id) : NULL;
	if (!s) {
		gm_fail(GM_ERR_IO, e->err, sizeof e->err, "cannot start srun: %s",
		        pid > 0 ? "out of memory" : strerror(errno));
		if (pid > 0)
			kill(pid, SIGKILL); /* reaped as a stranger */
		e->failed = 1;
		job_release(&job);
		return PLACE_BLOCKED;
	}
	s->own = 1;
	s->runner = pid;
	s->type = (size_t)t;
	s->log_from = (long long)sb.st_size;
	s->attempt = job.attempts + 1;
	s->start_ms = now_ms();
	ss->used[t] += ss->cfg->per_task;

	upd = job;
	upd.state = JOB_RUNNING;
	upd.attempts = s->attempt;
	upd.start_ms = s->start_ms;
	upd.end_ms = 0;
	upd.has_exit = 0;
	upd.runner_pid = pid;
	upd.has_peak = 0; /* this attempt's, as the sampler measures it */
	upd.util_samples = 0;
	upd.util_sum = 0;
	upd.gpus = (char *)(tname[0] ? tname : "?");
	if (engine_tx(e) < 0 || jobstore_update(e->cfg->store, &upd, JOB_QUEUED, job.attempts,
	                                        &changed, e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	/* a requeued task's node was the last attempt's: not known yet */
	if (changed && job.node &&
	    jobstore_set_node(e->cfg->store, id, NULL, e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed)
		engine_count_move(e, JOB_QUEUED, JOB_RUNNING);
	else
		kill(pid, SIGTERM); /* cancelled meanwhile: it ends, unrecorded */
	upd.gpus = NULL;
	job_release(&job);
	return changed ? PLACE_STARTED : PLACE_SKIPPED;
}

/* Each second: the node and GPUs of steps that started since, from their
 * wrapper's record, into the store (queue and status show them). */
void slurm_note_where(struct engine *e, struct slot *s, const struct slurm_record *rc)
{
	struct job job;
	int changed = 0;

	if (s->where_known || !rc->started ||
	    jobstore_get(e->cfg->store, s->id, 0, &job, NULL, 0) != GM_OK)
		return;
	free(job.gpus);
	job.gpus = strcmp(rc->gpus, "-") ? strdup(rc->gpus) : NULL;
	if (engine_tx(e) < 0 ||
	    jobstore_update(e->cfg->store, &job, JOB_RUNNING, s->attempt, &changed, e->err,
	                    sizeof e->err) != GM_OK ||
	    (changed &&
	     jobstore_set_node(e->cfg->store, s->id, rc->node, e->err, sizeof e->err) != GM_OK))
		e->failed = 1;
	s->where_known = 1;
	job_release(&job);
}

void slurm_record_end(struct engine *e, struct slot *s, struct job *upd,
                      const struct slurm_record *rc)
{
	int changed = 0;

	if (engine_tx(e) < 0 || jobstore_update(e->cfg->store, upd, JOB_RUNNING, s->attempt,
	                                        &changed, e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed && rc->started && !s->where_known &&
	    jobstore_set_node(e->cfg->store, s->id, rc->node, e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed) {
		engine_count_move(e, JOB_RUNNING, upd->state);
		e->ended_any = 1;
		if (upd->state == JOB_QUEUED)
			engine_queue_insert(e, s->id);
		else if (!e->cfg->batch)
			engine_note_ended(e, s->id);
	}
}

static void slurm_tick(struct engine *e)
{
	for (size_t i = 0; i < e->nslots; i++) {
		char rec[PATH_MAX + 64];
		struct slurm_record rc;

		if (e->slots[i]->where_known || e->slots[i]->runner <= 0)
			continue;
		record_path(e, e->slots[i]->id, rec, sizeof rec);
		slurm_read_record(rec, &rc);
		slurm_note_where(e, e->slots[i], &rc);
	}
}

/* A step's cause from the allocation's end, when its log did not get
 * slurmstepd's words (srun may go before they reach it, on a loaded
 * machine): "Slurm job 4 ended (TimeLimit)" is a time limit. */
static const char *alloc_end_cause(const char *ended)
{
	if (strstr(ended, "(TimeLimit") || strstr(ended, "(TIMEOUT"))
		return "killed by Slurm: time limit";
	if (strstr(ended, "(NodeDown") || strstr(ended, "(NODE_FAIL"))
		return "killed by Slurm: node failure";
	if (strstr(ended, "(Preempt") || strstr(ended, "(PREEMPTED"))
		return "killed by Slurm: preempted";
	return ended;
}

/* Has the allocation ended (time limit, scancel)?  Then say why, once. */
static void note_alloc_end(struct slurm_state *ss)
{
	char state[128];

	if (!ss->cfg->ended[0] && slurm_job_alive(ss->alloc, state, sizeof state) == 0)
		snprintf(ss->cfg->ended, sizeof ss->cfg->ended, "Slurm job %s ended (%s)",
		         ss->alloc->job_id, state);
}

/* A step ended: record it, requeue it or not. */
static void slurm_ended(struct engine *e, struct slot *s, int ws)
{
	struct slurm_state *ss = e->place_data;
	const char *tname = ss->alloc->types[s->type].name;
	char rec[PATH_MAX + 64], where[160], cause[320], why[768], desc[96];
	struct outcome_counts oc;
	enum outcome_next next;
	struct slurm_record rc;
	struct job job, upd;
	char *text;
	int requeueable, status, oom;

	ss->used[s->type] -= ss->cfg->per_task;
	e->dirty = 1;
	if (jobstore_get(e->cfg->store, s->id, 0, &job, e->err, sizeof e->err) != GM_OK) {
		if (strncmp(e->err, "no job", 6))
			e->failed = 1;
		engine_slot_remove(e, s);
		return;
	}
	record_path(e, s->id, rec, sizeof rec);
	slurm_read_record(rec, &rc);
	text = log_since(job.log ? job.log : "", (off_t)s->log_from);
	slurm_step_cause(text, cause, sizeof cause, &requeueable);
	status = rc.ended ? rc.status : protocol_exit_status(ws);
	/* srun may exit 0 for a step Slurm killed (node failure): without the
	 * wrapper's "end" the task did not finish, whatever srun says */
	if (!rc.ended && status == 0)
		status = -1;
	oom = status != 0 && protocol_says_oom(text);
	free(text);

	upd = job;
	where[0] = '\0';
	if (rc.started) {
		snprintf(where, sizeof where, "%s:%s", rc.node, rc.gpus);
		upd.gpus = strcmp(rc.gpus, "-") ? rc.gpus : NULL;
	}
	slurm_read_usage(rec, &upd);
	upd.start_ms = rc.started ? rc.start_ms : s->start_ms;
	upd.end_ms = rc.ended ? rc.end_ms : now_ms();
	upd.has_exit = status >= 0;
	upd.exit_status = status;
	upd.runner_pid = 0;
	if (!cause[0] && !rc.ended)
		note_alloc_end(ss);
	if (!cause[0] && ss->cfg->ended[0] && !rc.ended)
		snprintf(cause, sizeof cause, "%s", alloc_end_cause(ss->cfg->ended));
	if (cause[0])
		note_alloc_end(ss);
	if (ss->cfg->ended[0])
		e->closed = 1; /* nothing more can start */
	if (status < 0)
		snprintf(desc, sizeof desc, "the step ended before the task did");
	else
		protocol_describe_status(status, desc, sizeof desc);
	oc.attempts = job.attempts;
	oc.ooms = job.ooms;
	oc.retries = job.retries;
	next = outcome_next(outcome_classify(status, oom), &oc, !ss->cfg->ended[0]);
	why[0] = '\0';
	if (next == OUTCOME_DONE) {
		upd.state = JOB_DONE;
		if (job.ooms && job.reason)
			snprintf(why, sizeof why, "%s", job.reason);
	} else if (e->interrupt) {
		upd.state = JOB_INTERRUPTED;
		snprintf(why, sizeof why, "stopped by Ctrl-C");
	} else if (next == OUTCOME_REQUEUE_OOM) {
		unsigned *bits = oom_types(ss, s->id), left = 0;

		if (bits)
			*bits |= 1u << s->type;
		for (size_t t = 0; t < ss->alloc->type_count; t++)
			left += !(bits && (*bits & (1u << t)));
		upd.ooms = job.ooms + 1;
		upd.state = left ? JOB_QUEUED : JOB_FAILED;
		if (left)
			snprintf(why, sizeof why,
			         "CUDA out of memory on %s%s%s; requeued for another GPU type",
			         rc.started ? where : "a GPU", tname[0] ? " of type " : "", tname);
		else
			snprintf(
			    why, sizeof why,
			    "CUDA out of memory on every GPU type of the allocation (last on %s)",
			    rc.started ? where : tname);
	} else if (cause[0] && requeueable && !ss->cfg->ended[0]) {
		upd.state = JOB_QUEUED; /* not the task's fault: run it again */
		snprintf(why, sizeof why, "%s; requeued", cause);
	} else {
		upd.state = next == OUTCOME_RETRY ? JOB_QUEUED : JOB_FAILED;
		outcome_reason(next, cause[0] ? cause : desc, oom, &oc, why, sizeof why);
	}
	if (upd.state == JOB_QUEUED)
		upd.has_exit = 0;
	upd.reason = why[0] ? why : NULL;
	slurm_record_end(e, s, &upd, &rc);
	upd.gpus = NULL;
	upd.reason = NULL;
	job_release(&job);
	engine_slot_remove(e, s);
}

/* Tasks left running by a batch that was killed: queued again. */
static void slurm_requeue_running(struct engine *e)
{
	int64_t *ids = NULL;
	size_t n = 0;

	if (jobstore_ids(e->cfg->store, JOB_RUNNING, &ids, &n, e->err, sizeof e->err) != GM_OK) {
		e->failed = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct job job;
		int changed = 0;

		if (engine_slot_by_id(e, ids[i]) ||
		    jobstore_get(e->cfg->store, ids[i], 0, &job, NULL, 0) != GM_OK)
			continue;
		job.state = JOB_QUEUED;
		job.runner_pid = 0;
		if (engine_tx(e) < 0 ||
		    jobstore_update(e->cfg->store, &job, JOB_RUNNING, job.attempts, &changed,
		                    e->err, sizeof e->err) != GM_OK)
			e->failed = 1;
		if (changed)
			engine_count_move(e, JOB_RUNNING, JOB_QUEUED);
		job_release(&job);
	}
	free(ids);
}

/* Ctrl-C: SIGTERM to every step (srun passes it on), then SIGKILL. */
static void slurm_interrupt(struct engine *e)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i]->runner > 0)
			kill(e->slots[i]->runner, e->interrupt == 1 ? SIGTERM : SIGKILL);
}

static void slurm_release_state(struct engine *e)
{
	struct slurm_state *ss = e->place_data;

	/* Steps still running (the engine failed): they end with us. */
	for (size_t i = 0; ss && i < e->nslots; i++)
		if (e->slots[i]->runner > 0)
			kill(e->slots[i]->runner, SIGKILL);
	if (ss)
		free(ss->oom_types);
	free(ss);
	e->place_data = NULL;
}

const struct placement placement_slurm = {
    .name = "slurm",
    .init = slurm_init,
    .tick = slurm_tick,
    .full = slurm_full,
    .place = slurm_place,
    .ended = slurm_ended,
    .adopt = slurm_requeue_running,
    .interrupt = slurm_interrupt,
    .release = slurm_release_state,
};
