/*
 * cmd_batch_slurm.c - `gpuman batch --slurm [SLURM-OPTIONS] FILE`: the task
 * file of `gpuman batch`, run across the nodes of a Slurm allocation.
 *
 * One allocation (made here with salloc --no-shell, or the one gpuman runs
 * in), and each task an `srun --exact` step in it, started when a GPU of
 * the allocation is free: measured on the test cluster, a step starts in
 * 0.05-0.1 s while each wave of a job array waits for a scheduler cycle
 * (1 s tuned, 3 s by default), and gpuman, the parent of every srun, knows
 * each task's end at once without polling the controller.  The task file,
 * placeholders, log directory, task store (--resume) and summary are those
 * of the local batch (batch.h); what Slurm adds is here and in slurm.c.
 *
 * In each step a small /bin/sh wrapper fills in {gpu}, sets GPUMAN_TASK
 * and GPUMAN_GPUS and writes a record (start, node, GPUs, end, status) into
 * the log directory, which therefore must be on a file system the nodes
 * share (as the working directory of any Slurm job is).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "batch.h"
#include "jobs.h"
#include "parse.h"
#include "protocol.h"
#include "slurm.h"
#include "util.h"

enum { OPT_SLURM = OPT_BATCH_END + 1, OPT_PARTITION, OPT_ACCOUNT, OPT_TIME, OPT_CONSTRAINT,
       OPT_QOS, OPT_GRES, OPT_NODES, OPT_SALLOC_ARG, OPT_SRUN_ARG, OPT_TASK_TIME };

#define MAX_ARGS 48

struct slurm_opts {
	struct batch_opts b;
	char *alloc[MAX_ARGS];  /* salloc options: -N, -p, ... (owned) */
	size_t nalloc;
	char *step[MAX_ARGS];   /* extra srun options (owned) */
	size_t nstep;
	const char *gres;       /* --gres per node, for --ntasks-per-node */
	int nodes_given;
};

static int add_arg(struct cli *cli, char **list, size_t *n, const char *fmt, const char *arg)
{
	char buf[1024];

	if (*n >= MAX_ARGS - 1)
		return cli_usage(cli, "too many Slurm options");
	snprintf(buf, sizeof buf, fmt, arg);
	if (!(list[(*n)++] = strdup(buf)))
		return cli_error(cli, EXIT_FAIL, "out of memory");
	return CLI_CONTINUE;
}

static int slurm_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct slurm_opts *o = data;
	int rc = batch_option(cli, opt, arg, &o->b);

	if (rc != -1)
		return rc;
	switch (opt) {
	case OPT_SLURM: return CLI_CONTINUE;
	case 'N':
	case OPT_NODES:
		o->nodes_given = 1;
		return add_arg(cli, o->alloc, &o->nalloc, "--nodes=%s", arg);
	case 'p':
	case OPT_PARTITION: return add_arg(cli, o->alloc, &o->nalloc, "--partition=%s", arg);
	case 'A':
	case OPT_ACCOUNT: return add_arg(cli, o->alloc, &o->nalloc, "--account=%s", arg);
	case 't':
	case OPT_TIME: return add_arg(cli, o->alloc, &o->nalloc, "--time=%s", arg);
	case 'C':
	case OPT_CONSTRAINT: return add_arg(cli, o->alloc, &o->nalloc, "--constraint=%s", arg);
	case OPT_QOS: return add_arg(cli, o->alloc, &o->nalloc, "--qos=%s", arg);
	case OPT_GRES:
		if (strncmp(arg, "gpu", 3))
			return cli_usage(cli, "--gres '%s': gpuman asks for GPUs (gpu:N or "
					      "gpu:TYPE:N per node, several joined by commas)", arg);
		o->gres = arg;
		return add_arg(cli, o->alloc, &o->nalloc, "--gres=%s", arg);
	case OPT_SALLOC_ARG: return add_arg(cli, o->alloc, &o->nalloc, "%s", arg);
	case OPT_SRUN_ARG: return add_arg(cli, o->step, &o->nstep, "%s", arg);
	case OPT_TASK_TIME: return add_arg(cli, o->step, &o->nstep, "--time=%s", arg);
	}
	return -1;
}

/* ---- the step wrapper ------------------------------------------------- */

/*
 * Run inside each step by /bin/sh: $1 record file, $2 the task's line,
 * $3 its number.  {gpu} becomes the step's GPUs as Slurm numbers them on
 * the node (SLURM_STEP_GPUS), also in GPUMAN_GPUS.  The record's lines:
 *   start MS NODE GPUS
 *   end MS STATUS
 */
static const char wrapper[] =
	"r=$1; line=$2; GPUMAN_TASK=$3\n"
	"g=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}\n"
	"GPUMAN_GPUS=$g; export GPUMAN_TASK GPUMAN_GPUS\n"
	"out=; rest=$line\n"
	"while :; do case $rest in *'{gpu}'*) out=$out${rest%%'{gpu}'*}$g; "
	"rest=${rest#*'{gpu}'};; *) break;; esac; done\n"
	"echo \"start $(date +%s%3N) ${SLURMD_NODENAME:-$(hostname)} ${g:--}\" >\"$r\"\n"
	"/bin/sh -c \"$out$rest\"\n"
	"s=$?\n"
	"echo \"end $(date +%s%3N) $s\" >>\"$r\"\n"
	"exit $s\n";

struct record {
	int started, ended;
	int64_t start_ms, end_ms;
	char node[64], gpus[64];
	int status;
};

static void read_record(const char *path, struct record *r)
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

/* ---- the run ---------------------------------------------------------- */

struct slot {
	pid_t pid;            /* srun; 0 when not running */
	size_t task;          /* index into jobs */
	size_t type;          /* index into alloc.types */
	off_t log_from;
	int64_t spawned_ms;
};

struct run {
	struct cli *cli;
	struct slurm_alloc alloc;
	struct slurm_opts *o;
	struct jobstore *st;
	struct job *jobs;
	size_t njobs;
	unsigned *oom_types;  /* per task: bit t = ran out of memory on type t */
	unsigned *used;       /* per type: GPUs its running steps hold */
	unsigned per_task;    /* -n */
	struct slot *slots;
	size_t nslots, running;
	const char *dir;
	int stopping;         /* Ctrl-C seen: no new step */
	int killing;          /* a second Ctrl-C */
	char alloc_end[256];  /* the allocation ended: why */
	struct progress *prog;
	int64_t started_ms;
};

static void set_str(char **field, const char *value)
{
	free(*field);
	*field = value ? strdup(value) : NULL;
}

static int save(struct run *r, struct job *j, enum job_state expect, int expect_attempts)
{
	char err[GM_ERRBUF_SIZE];
	int changed;

	if (jobstore_update(r->st, j, expect, expect_attempts, &changed, err, sizeof err) != GM_OK) {
		cli_error(r->cli, 0, "%s", err);
		return -1;
	}
	return 0;
}

static void counts(const struct run *r, struct engine_counts *c)
{
	memset(c, 0, sizeof *c);
	for (size_t i = 0; i < r->njobs; i++)
		switch (r->jobs[i].state) {
		case JOB_QUEUED: c->queued++; break;
		case JOB_RUNNING: c->running++; break;
		case JOB_DONE: c->done++; break;
		case JOB_FAILED: c->failed++; break;
		case JOB_CANCELLED: c->cancelled++; break;
		case JOB_INTERRUPTED: c->interrupted++; break;
		}
	c->started_ms = r->started_ms;
	c->interrupting = r->stopping;
}

/* The type with a free GPU for task j: not one it ran out of memory on. */
static long free_type(const struct run *r, size_t j)
{
	for (size_t t = 0; t < r->alloc.type_count; t++)
		if (!(r->oom_types[j] & (1u << t)) &&
		    r->used[t] + r->per_task <= r->alloc.types[t].count)
			return (long)t;
	return -1;
}

static int start_task(struct run *r, size_t j, size_t type)
{
	struct job *job = &r->jobs[j];
	char rec[PATH_MAX + 64], name[48], num[24], *line = task_line(job->command, job->id);
	int fd;
	struct stat sb;
	size_t s;
	pid_t pid;

	if (!line)
		return -1;
	for (s = 0; s < r->nslots && r->slots[s].pid; s++)
		;
	snprintf(rec, sizeof rec, "%s/.runs/task-%lld.where", r->dir, (long long)job->id);
	snprintf(name, sizeof name, "gpuman-task-%lld", (long long)job->id);
	snprintf(num, sizeof num, "%lld", (long long)job->id);
	unlink(rec);
	fd = open(job->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		cli_error(r->cli, 0, "'%s': %s", job->log, strerror(errno));
		free(line);
		return -1;
	}
	fstat(fd, &sb);
	{
		const char *cmd[] = { "/bin/sh", "-c", wrapper, "sh", rec, line, num, NULL };

		r->o->step[r->o->nstep] = NULL;
		pid = slurm_step_spawn(&r->alloc, r->alloc.types[type].name, r->per_task, name,
				       (const char *const *)r->o->step, cmd, fd);
	}
	close(fd);
	free(line);
	if (pid < 0) {
		cli_error(r->cli, 0, "cannot start srun: %s", strerror(errno));
		return -1;
	}
	r->slots[s] = (struct slot){ pid, j, type, sb.st_size, now_ms() };
	r->used[type] += r->per_task;
	r->running++;
	job->state = JOB_RUNNING;
	job->attempts++;
	job->start_ms = now_ms();
	job->end_ms = 0;
	job->has_exit = 0;
	job->runner_pid = pid;
	set_str(&job->gpus, r->alloc.types[type].name[0] ? r->alloc.types[type].name : "?");
	return save(r, job, JOB_QUEUED, job->attempts - 1);
}

/* A step ended: record it, requeue it or not. */
static void finish(struct run *r, struct slot *sl, int wstatus)
{
	struct job *job = &r->jobs[sl->task];
	const char *tname = r->alloc.types[sl->type].name;
	char rec[PATH_MAX + 64], where[160], cause[320], why[768], desc[96];
	struct record rc;
	char *text;
	int requeueable, status, oom, attempts = job->attempts;
	struct outcome_counts oc;
	enum outcome_next next;

	snprintf(rec, sizeof rec, "%s/.runs/task-%lld.where", r->dir, (long long)job->id);
	read_record(rec, &rc);
	text = log_since(job->log, sl->log_from);
	slurm_step_cause(text, cause, sizeof cause, &requeueable);
	if (rc.ended)
		status = rc.status;
	else
		status = protocol_exit_status(wstatus);
	/* srun may exit 0 for a step Slurm killed (node failure): without the
	 * wrapper's "end" the task did not finish, whatever srun says */
	if (!rc.ended && status == 0)
		status = -1;
	oom = status != 0 && protocol_says_oom(text);
	free(text);
	r->used[sl->type] -= r->per_task;
	r->running--;
	sl->pid = 0;

	if (rc.started) {
		snprintf(where, sizeof where, "%s:%s", rc.node, rc.gpus);
		set_str(&job->gpus, where);
	}
	job->start_ms = rc.started ? rc.start_ms : sl->spawned_ms;
	job->end_ms = rc.ended ? rc.end_ms : now_ms();
	job->has_exit = status >= 0;
	job->exit_status = status;
	job->runner_pid = 0;
	if (!cause[0] && !rc.ended && r->alloc_end[0] == '\0') {
		char state[128];

		if (slurm_job_alive(&r->alloc, state, sizeof state) == 0)
			snprintf(r->alloc_end, sizeof r->alloc_end, "Slurm job %s ended (%s)",
				 r->alloc.job_id, state);
	}
	if (!cause[0] && r->alloc_end[0] && !rc.ended)
		snprintf(cause, sizeof cause, "%s", r->alloc_end);
	if (cause[0] && !r->alloc_end[0]) {
		char state[128];

		if (slurm_job_alive(&r->alloc, state, sizeof state) == 0)
			snprintf(r->alloc_end, sizeof r->alloc_end, "Slurm job %s ended (%s)",
				 r->alloc.job_id, state);
	}
	if (status < 0)
		snprintf(desc, sizeof desc, "the step ended before the task did");
	else
		protocol_describe_status(status, desc, sizeof desc);
	oc.attempts = job->attempts;
	oc.ooms = job->ooms;
	oc.retries = job->retries;
	next = outcome_next(outcome_classify(status, oom), &oc, !r->alloc_end[0]);
	if (next == OUTCOME_DONE) {
		job->state = JOB_DONE;
		if (!job->ooms)
			set_str(&job->reason, NULL);
	} else if (r->stopping) {
		job->state = JOB_INTERRUPTED;
		set_str(&job->reason, "stopped by Ctrl-C");
	} else if (next == OUTCOME_REQUEUE_OOM) {
		r->oom_types[sl->task] |= 1u << sl->type;
		job->ooms++;
		job->state = JOB_QUEUED;
		snprintf(why, sizeof why, "CUDA out of memory on %s%s%s; requeued for another GPU type",
			 rc.started ? where : "a GPU", tname[0] ? " of type " : "", tname);
		set_str(&job->reason, why);
		for (size_t t = 0, left = 0; t <= r->alloc.type_count; t++) {
			if (t < r->alloc.type_count) {
				left += !(r->oom_types[sl->task] & (1u << t));
				continue;
			}
			if (!left) {
				job->state = JOB_FAILED;
				snprintf(why, sizeof why,
					 "CUDA out of memory on every GPU type of the allocation "
					 "(last on %s)",
					 rc.started ? where : tname);
				set_str(&job->reason, why);
			}
		}
	} else if (cause[0] && requeueable && !r->alloc_end[0]) {
		job->state = JOB_QUEUED; /* not the task's fault: run it again */
		snprintf(why, sizeof why, "%s; requeued", cause);
		set_str(&job->reason, why);
	} else {
		job->state = next == OUTCOME_RETRY ? JOB_QUEUED : JOB_FAILED;
		outcome_reason(next, cause[0] ? cause : desc, oom, &oc, why, sizeof why);
		set_str(&job->reason, why);
	}
	if (job->state == JOB_QUEUED) {
		job->has_exit = 0;
	}
	save(r, job, JOB_RUNNING, attempts);
}

static void signal_steps(struct run *r, int sig)
{
	for (size_t s = 0; s < r->nslots; s++)
		if (r->slots[s].pid)
			kill(r->slots[s].pid, sig);
}

static int dispatch(struct run *r, int sfd)
{
	struct engine_counts c;

	for (;;) {
		/* start what fits, in file order */
		for (size_t j = 0; !r->stopping && !r->alloc_end[0] && j < r->njobs; j++) {
			long t;

			if (r->jobs[j].state != JOB_QUEUED)
				continue;
			if (r->o->b.jobs && r->running >= r->o->b.jobs)
				break;
			if ((t = free_type(r, j)) < 0)
				continue;
			if (start_task(r, j, (size_t)t) < 0)
				return -1;
		}
		counts(r, &c);
		draw(r->prog, &c, 0);
		if (!r->running)
			break;
		struct pollfd pfd = { sfd, POLLIN, 0 };

		if (poll(&pfd, 1, 1000) < 0 && errno != EINTR)
			return -1;
		if (pfd.revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof si) == sizeof si) {
				if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM) {
					if (r->stopping) {
						r->killing = 1;
						signal_steps(r, SIGKILL);
					} else {
						r->stopping = 1;
						counts(r, &c);
						draw(r->prog, &c, 1);
						signal_steps(r, SIGTERM);
					}
				}
			}
		}
		for (;;) {
			int ws;
			pid_t pid = waitpid(-1, &ws, WNOHANG);

			if (pid <= 0)
				break;
			for (size_t s = 0; s < r->nslots; s++)
				if (r->slots[s].pid == pid)
					finish(r, &r->slots[s], ws);
		}
	}
	return 0;
}

/* Per node and GPU: the tasks it ran and its busy time. */
static void node_table(struct cli *cli, const struct job *jobs, size_t n, json_t *out)
{
	struct row {
		char where[160];
		size_t tasks;
		int64_t busy_ms;
	} *rows = calloc(n + 1, sizeof *rows);
	size_t nr = 0;
	char dur[32];

	if (!rows)
		return;
	for (size_t i = 0; i < n; i++) {
		size_t k;

		if (jobs[i].state != JOB_DONE || !jobs[i].gpus)
			continue;
		for (k = 0; k < nr && strcmp(rows[k].where, jobs[i].gpus); k++)
			;
		if (k == nr)
			snprintf(rows[nr++].where, sizeof rows[0].where, "%s", jobs[i].gpus);
		rows[k].tasks++;
		rows[k].busy_ms += jobs[i].end_ms - jobs[i].start_ms;
	}
	if (!out && nr)
		printf("\n%s%-16s %6s %9s%s\n", c_bold(cli), "NODE:GPU", "TASKS", "BUSY",
		       c_reset(cli));
	for (size_t k = 0; k < nr; k++) {
		if (out) {
			json_t *g = json_object();
			char *colon = strrchr(rows[k].where, ':');

			json_object_set_new(g, "node", json_stringn(rows[k].where,
								    colon ? (size_t)(colon - rows[k].where)
									  : strlen(rows[k].where)));
			json_object_set_new(g, "gpus", json_string(colon ? colon + 1 : ""));
			json_object_set_new(g, "tasks", json_integer((json_int_t)rows[k].tasks));
			json_object_set_new(g, "busy_ms", json_integer(rows[k].busy_ms));
			json_array_append_new(out, g);
		} else {
			printf("%-16s %6zu %9s\n", rows[k].where, rows[k].tasks,
			       fmt_duration(dur, sizeof dur, rows[k].busy_ms));
		}
	}
	free(rows);
}

/* Each task's "node" and its "gpus" there (the store holds "n1:2,3"). */
static void task_nodes(json_t *tasks, const struct job *jobs, size_t n)
{
	for (size_t i = 0; i < n && i < json_array_size(tasks); i++) {
		json_t *t = json_array_get(tasks, i), *gpus = json_array();
		const char *w = jobs[i].gpus, *colon = w ? strrchr(w, ':') : NULL;

		json_object_set_new(t, "node", colon ? json_stringn(w, (size_t)(colon - w))
						     : json_null());
		for (const char *p = colon ? colon + 1 : ""; *p && *p != '-';) {
			json_t *g = json_object();

			json_object_set_new(g, "index", json_integer(strtol(p, NULL, 10)));
			json_array_append_new(gpus, g);
			p += strcspn(p, ",");
			p += *p == ',';
		}
		json_object_set_new(t, "gpus", gpus);
	}
}

/* Inside an allocation (salloc's shell, an sbatch script) but not in a
 * step of it, on several nodes or none of them: the tasks go to Slurm. */
int batch_in_allocation(void)
{
	const char *job = getenv("SLURM_JOB_ID"), *nodes = getenv("SLURM_JOB_NUM_NODES");
	const char *off = getenv("GPUMAN_SLURM");

	if (!job || !*job || getenv("SLURM_STEP_ID") || (off && !strcmp(off, "0")))
		return 0;
	return (nodes && strtoul(nodes, NULL, 10) > 1) || !getenv("SLURMD_NODENAME");
}

int batch_wants_slurm(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--slurm"))
			return 1;
	return batch_in_allocation();
}

static int usage_checks(struct cli *cli, const struct task *t, size_t n)
{
	char *json = engine_request_json(cli->req, cli->no_framework_env);
	json_t *o = json ? json_loads(json, 0, NULL) : NULL;
	const char *key;
	json_t *v;
	int rc = CLI_CONTINUE;

	free(json);
	json_object_foreach(o, key, v)
	{
		if (!strcmp(key, "n") ||
		    (!strcmp(key, "by") && !strcmp(json_string_value(v), "memory")))
			continue; /* -n, and the default policy */
		rc = cli_usage(cli, "--%s does not apply under Slurm: Slurm chooses each task's GPUs "
				    "(whole GPUs; ask for a type with --gres=gpu:TYPE:N)",
			       key);
		break;
	}
	json_decref(o);
	for (size_t i = 0; rc == CLI_CONTINUE && i < n; i++)
		if (strstr(t[i].line, "{uuid}"))
			rc = cli_usage(cli, "task %lld uses {uuid}, which Slurm does not tell a "
					    "step; use {gpu} (the GPUs' indices on their node)",
				       (long long)t[i].n);
	return rc;
}

static unsigned request_gpus(struct cli *cli)
{
	char *json = engine_request_json(cli->req, cli->no_framework_env);
	json_t *o = json ? json_loads(json, 0, NULL) : NULL;
	unsigned n = 1;

	free(json);
	if (json_is_string(json_object_get(o, "n")))
		n = (unsigned)strtoul(json_string_value(json_object_get(o, "n")), NULL, 10);
	json_decref(o);
	return n ? n : 1;
}

int batch_slurm_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_OPTIONS, CLI_SELECT_OPTIONS, CLI_RESERVE_OPTIONS, BATCH_OPTIONS,
		{ "slurm", no_argument, NULL, OPT_SLURM },
		{ "nodes", required_argument, NULL, OPT_NODES },
		{ "partition", required_argument, NULL, OPT_PARTITION },
		{ "account", required_argument, NULL, OPT_ACCOUNT },
		{ "time", required_argument, NULL, OPT_TIME },
		{ "constraint", required_argument, NULL, OPT_CONSTRAINT },
		{ "qos", required_argument, NULL, OPT_QOS },
		{ "gres", required_argument, NULL, OPT_GRES },
		{ "salloc-arg", required_argument, NULL, OPT_SALLOC_ARG },
		{ "srun-arg", required_argument, NULL, OPT_SRUN_ARG },
		{ "task-time", required_argument, NULL, OPT_TASK_TIME },
		{ 0 }
	};
	struct slurm_opts o;
	struct run r;
	struct task *tasks = NULL;
	size_t ntasks = 0, skipped = 0;
	struct progress prog = { 0 };
	char dir[PATH_MAX], path[PATH_MAX + 64], err[GM_ERRBUF_SIZE], tpn[48];
	const char *file;
	sigset_t mask, old;
	int status, lock_fd = -1, sfd = -1, have_alloc = 0;
	int64_t started, ended;
	FILE *f;

	memset(&o, 0, sizeof o);
	memset(&r, 0, sizeof r);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, &old);
	/* A shell starts background commands with SIGINT ignored, and an
	 * ignored signal never reaches the signalfd: Ctrl-C (kill -INT) must
	 * still stop the batch and cancel what it submitted. */
	signal(SIGINT, SIG_DFL);
	status = cli_parse(cli, &cmd_batch, argc, argv, CLI_SELECT_SHORT "j:N:p:A:t:C:", longopts,
			   slurm_option, &o);
	if (status != CLI_CONTINUE)
		goto done;
	if (optind + 1 != argc) {
		status = cli_usage(cli, "which task file? (gpuman batch --slurm [SLURM-OPTIONS] FILE)");
		goto done;
	}
	if (cli->fallback_cpu) {
		status = cli_usage(cli, "--fallback cpu does not apply to batch");
		goto done;
	}
	file = argv[optind];
	f = strcmp(file, "-") ? fopen(file, "r") : stdin;
	if (!f) {
		status = cli_usage(cli, "cannot read '%s': %s", file, strerror(errno));
		goto done;
	}
	status = read_tasks(f, &tasks, &ntasks);
	if (f != stdin)
		fclose(f);
	if (status < 0) {
		status = cli_error(cli, EXIT_FAIL, "cannot read '%s': %s", file, strerror(errno));
		goto done;
	}
	if ((status = usage_checks(cli, tasks, ntasks)) != CLI_CONTINUE)
		goto done;
	r.per_task = request_gpus(cli);
	if (o.b.log_dir) {
		snprintf(path, sizeof path, "%s", o.b.log_dir);
	} else {
		char copy[PATH_MAX];

		snprintf(copy, sizeof copy, "%s", file);
		snprintf(path, sizeof path, "gpuman-logs/%s",
			 strcmp(file, "-") ? basename(copy) : "stdin");
	}
	/* Our own allocation: as many task slots per node as GPUs, so that
	 * every GPU can run a step at once (one CPU each). */
	if (!o.gres)
		add_arg(cli, o.alloc, &o.nalloc, "--gres=gpu:%s", "1");
	snprintf(tpn, sizeof tpn, "%u", slurm_gres_per_node(o.gres ? o.gres : "gpu:1"));
	add_arg(cli, o.alloc, &o.nalloc, "--ntasks-per-node=%s", tpn);
	o.alloc[o.nalloc] = NULL;
	if (o.b.dry_run) {
		for (size_t i = 0; i < ntasks; i++) {
			char *line = task_line(tasks[i].line, tasks[i].n);

			printf("%5lld  %s\n", (long long)tasks[i].n, line ? line : "?");
			free(line);
		}
		printf("%zu task%s, %u GPU%s each, as srun steps in ", ntasks, ntasks == 1 ? "" : "s",
		       r.per_task, r.per_task == 1 ? "" : "s");
		if (batch_in_allocation() || (getenv("SLURM_JOB_ID") && o.nalloc == 2 && !o.gres))
			printf("Slurm job %s\n", getenv("SLURM_JOB_ID"));
		else
			for (size_t i = 0; i <= o.nalloc; i++)
				printf(i ? " %s" : "salloc --no-shell%s", i ? o.alloc[i - 1] : "");
		printf("%s; logs in %s\n", o.b.dry_run ? "" : "", path);
		status = EXIT_OK;
		goto done;
	}
	if (!ntasks) {
		cli_error(cli, 0, "'%s' has no tasks (one command per line; # starts a comment)", file);
		status = EXIT_OK;
		goto done;
	}
	if (slurm_preflight(err, sizeof err) < 0) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	if (make_dirs(path, 0755) < 0 || !realpath(path, dir)) {
		status = cli_error(cli, EXIT_FAIL, "log directory '%s': %s", path, strerror(errno));
		goto done;
	}
	snprintf(path, sizeof path, "%s/.runs", dir);
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		status = cli_error(cli, EXIT_FAIL, "'%s': %s", path, strerror(errno));
		goto done;
	}
	snprintf(path, sizeof path, "%s/batch.lock", dir);
	lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		status = cli_error(cli, EXIT_FAIL,
				   "another gpuman batch is running in '%s' (use --log-dir for a "
				   "second one)",
				   dir);
		goto done;
	}
	snprintf(path, sizeof path, "%s/jobs.db", dir);
	if (jobstore_open(&r.st, path, err, sizeof err) != GM_OK) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	status = prepare_store(cli, r.st, tasks, ntasks, &o.b, dir, -1, &skipped);
	if (status != EXIT_OK)
		goto done;
	snprintf(path, sizeof path, "%s/summary.json", dir);
	unlink(path);
	if (skipped)
		fprintf(stderr, "gpuman batch: --resume: %zu of %zu tasks already succeeded\n", skipped,
			ntasks);

	/* The allocation: the one we run in, unless Slurm options ask for
	 * another; else a new one (salloc waits while it is pending; Ctrl-C
	 * reaches salloc, in our process group, which withdraws it). */
	if (getenv("SLURM_JOB_ID") && o.nalloc == 2 && !o.gres) {
		if (slurm_adopt(getenv("SLURM_JOB_ID"), &r.alloc, err, sizeof err) < 0) {
			status = cli_error(cli, EXIT_FAIL, "%s", err);
			goto done;
		}
	} else {
		fprintf(stderr, "gpuman batch: asking Slurm for an allocation: salloc --no-shell");
		for (size_t i = 0; i < o.nalloc; i++)
			fprintf(stderr, " %s", o.alloc[i]);
		fputc('\n', stderr);
		if (slurm_allocate((const char *const *)o.alloc, &r.alloc, err, sizeof err) < 0) {
			sigset_t pend;

			sigpending(&pend);
			status = sigismember(&pend, SIGINT) ? 128 + SIGINT
							    : cli_error(cli, EXIT_FAIL, "%s", err);
			if (r.alloc.job_id[0])
				slurm_release(&r.alloc);
			goto done;
		}
	}
	have_alloc = 1;
	fprintf(stderr, "gpuman batch: Slurm job %s: %u node%s (%s), %u GPU%s (%s)%s\n",
		r.alloc.job_id, r.alloc.nodes, r.alloc.nodes == 1 ? "" : "s", r.alloc.node_list,
		r.alloc.gpus, r.alloc.gpus == 1 ? "" : "s", r.alloc.gres,
		r.alloc.types[0].name[0] ? "" : "; steps take any of them");
	if (jobstore_list(r.st, -1, 0, 0, &r.jobs, &r.njobs, err, sizeof err) != GM_OK) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	r.cli = cli;
	r.o = &o;
	r.dir = dir;
	r.prog = &prog;
	r.oom_types = calloc(r.njobs + 1, sizeof *r.oom_types);
	r.used = calloc(r.alloc.type_count + 1, sizeof *r.used);
	r.nslots = r.alloc.gpus / r.per_task + 1;
	r.slots = calloc(r.nslots, sizeof *r.slots);
	if (!r.oom_types || !r.used || !r.slots) {
		status = cli_error(cli, EXIT_FAIL, "out of memory");
		goto done;
	}
	/* tasks left "running" by a killed batch ran in an allocation that is
	 * gone or not ours: run them again */
	for (size_t i = 0; i < r.njobs; i++)
		if (r.jobs[i].state == JOB_RUNNING) {
			int a = r.jobs[i].attempts;

			r.jobs[i].state = JOB_QUEUED;
			save(&r, &r.jobs[i], JOB_RUNNING, a);
		}
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	prog.tty = isatty(STDERR_FILENO);
	prog.on = prog.tty || o.b.progress;
	prog.total = ntasks;
	prog.done0 = skipped;
	started = now_ms();
	r.started_ms = monotonic_ms();
	if (sfd < 0 || dispatch(&r, sfd) < 0) {
		signal_steps(&r, SIGKILL);
		status = cli_error(cli, EXIT_FAIL, "%s", strerror(errno));
	}
	ended = now_ms();
	{
		struct engine_counts c;

		counts(&r, &c);
		if (prog.on)
			draw(&prog, &c, 1);
		if (prog.tty && prog.drawn)
			fputc('\n', stderr);
	}
	/* the summary, as the local batch writes it, with nodes for GPUs */
	{
		struct job *jobs = NULL;
		size_t njobs = 0, c[JOB_STATE_COUNT] = { 0 };
		FILE *out = cli->json ? stderr : stdout;
		json_t *sum;

		if (jobstore_list(r.st, -1, 0, 0, &jobs, &njobs, err, sizeof err) != GM_OK) {
			status = cli_error(cli, EXIT_FAIL, "%s", err);
			goto done;
		}
		snprintf(path, sizeof path, "%s/summary.json", dir);
		if (write_summary(path, file, dir, jobs, njobs, NULL, 0, started, ended) == 0 &&
		    (sum = json_load_file(path, 0, NULL))) {
			json_t *gpus = json_array(), *sl = json_object();

			node_table(cli, jobs, njobs, gpus);
			json_object_set_new(sum, "gpus", gpus);
			task_nodes(json_object_get(sum, "tasks"), jobs, njobs);
			json_object_set_new(sl, "job_id", json_string(r.alloc.job_id));
			json_object_set_new(sl, "nodes", json_string(r.alloc.node_list));
			json_object_set_new(sl, "ended", r.alloc_end[0] ? json_string(r.alloc_end)
									: json_null());
			json_object_set_new(sum, "slurm", sl);
			json_dump_file(sum, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
			if (cli->json)
				cli_print_json(sum);
			else
				json_decref(sum);
		}
		if (!cli->json) {
			print_summary(cli, jobs, njobs, NULL, 0);
			node_table(cli, jobs, njobs, NULL);
		}
		for (size_t i = 0; i < njobs; i++)
			c[jobs[i].state]++;
		if (r.alloc_end[0])
			fprintf(out, "%s%s", cli->json ? "gpuman batch: " : "\n", r.alloc_end);
		fprintf(out, "%s%zu task%s: %zu done", cli->json ? "gpuman batch: " : "\n", njobs,
			njobs == 1 ? "" : "s", c[JOB_DONE]);
		if (c[JOB_FAILED])
			fprintf(out, ", %s%zu failed%s", c_red(cli), c[JOB_FAILED], c_reset(cli));
		if (c[JOB_INTERRUPTED])
			fprintf(out, ", %zu interrupted", c[JOB_INTERRUPTED]);
		if (c[JOB_QUEUED] + c[JOB_RUNNING])
			fprintf(out, ", %zu not run (--resume runs them)", c[JOB_QUEUED] + c[JOB_RUNNING]);
		if (skipped)
			fprintf(out, " (%zu from an earlier run)", skipped);
		fprintf(out, ", in %s on Slurm job %s; logs and summary.json in %s\n",
			fmt_duration(path, sizeof path, ended - started), r.alloc.job_id, dir);
		if (status != EXIT_FAIL)
			status = c[JOB_DONE] == njobs ? EXIT_OK : EXIT_FAIL;
		if (r.stopping)
			status = 128 + SIGINT;
		jobstore_free_list(jobs, njobs);
	}
done:
	if (have_alloc)
		slurm_release(&r.alloc);
	if (sfd >= 0)
		close(sfd);
	for (size_t i = 0; i < o.nalloc; i++)
		free(o.alloc[i]);
	for (size_t i = 0; i < o.nstep; i++)
		free(o.step[i]);
	free(r.oom_types);
	free(r.used);
	free(r.slots);
	jobstore_free_list(r.jobs, r.njobs);
	jobstore_close(r.st);
	tasks_free(tasks, ntasks);
	if (lock_fd >= 0)
		close(lock_fd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return status;
}
