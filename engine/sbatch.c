/*
 * sbatch.c - placement_sbatch: the queue on Slurm (`gpuman submit --slurm`).
 * Each queued job becomes its own Slurm job (`sbatch`), so that Slurm
 * chooses node and GPUs, the job waits in Slurm's queue, and it outlives
 * the dispatcher; the dispatcher only follows it.
 *
 * The job runs slurm.c's wrapper (the batch's, as a batch script): it
 * records node, GPUs, start, end and exit status in <run_dir>/slurm-ID.where
 * and the sampler's figures beside it; the Slurm job's id is kept in
 * <run_dir>/slurm-ID.job (gpuman cancel scancels it).  Each second the
 * records are read: a start gives the job its node and GPUs in the store,
 * an end its outcome.  A Slurm job that is gone without an end (scancel,
 * time limit, node failure) is seen through one squeue for all jobs every
 * few seconds and recorded with Slurm's word for its end.  A dispatcher
 * that restarts adopts the running jobs from their .job files.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "internal.h"

#define SQUEUE_MS 2000 /* how often Slurm is asked about jobs without an end */

struct sbatch_state {
	char gpuman[PATH_MAX]; /* this program, for the sampler on the node */
	char script[PATH_MAX + 32];
	int64_t squeue_at;
};

static void file_path(const struct engine *e, int64_t id, const char *ext, char *buf, size_t len)
{
	snprintf(buf, len, "%s/slurm-%lld.%s", e->cfg->run_dir, (long long)id, ext);
}

/* Run argv (envp: NULL ours) and collect its stdout and stderr; its exit
 * status, -1 if it could not run. */
static int run_capture(const char *const argv[], char *const envp[], char *out, size_t len)
{
	int pfd[2], st;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	out[0] = '\0';
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(pfd[1], STDOUT_FILENO);
		dup2(pfd[1], STDERR_FILENO);
		if (envp)
			execvpe(argv[0], (char *const *)argv, envp);
		else
			execvp(argv[0], (char *const *)argv);
		dprintf(STDERR_FILENO, "'%s': %s", argv[0], strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	while (pid > 0 && (n = read(pfd[0], out + got, len - 1 - got)) > 0 && got + 1 < len)
		got += (size_t)n;
	out[got] = '\0';
	close(pfd[0]);
	if (pid < 0)
		return -1;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int sb_init(struct engine *e, char *err, size_t len)
{
	struct sbatch_state *ss = calloc(1, sizeof *ss);
	ssize_t n;
	int fd;

	if (!ss) {
		gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		return -1;
	}
	n = readlink("/proc/self/exe", ss->gpuman, sizeof ss->gpuman - 1);
	ss->gpuman[n > 0 ? n : 0] = '\0';
	/* sbatch copies the script when the job is submitted */
	snprintf(ss->script, sizeof ss->script, "%s/slurm-wrapper.sh", e->cfg->run_dir);
	unlink(ss->script);
	fd = open(ss->script, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700);
	if (fd < 0 || dprintf(fd, "#!/bin/sh\n%s", slurm_wrapper) < 0) {
		gm_fail(GM_ERR_IO, err, len, "'%s': %s", ss->script, strerror(errno));
		if (fd >= 0)
			close(fd);
		free(ss);
		return -1;
	}
	close(fd);
	e->place_data = ss;
	return 0;
}

static int sb_full(struct engine *e)
{
	(void)e;
	return 0; /* Slurm's queue takes every job */
}

/* Record slot s's end: status (-1: none), cause (Slurm's word) or NULL. */
static void sb_finish(struct engine *e, struct slot *s, int status, const char *cause,
                      int cancelled)
{
	char rec[PATH_MAX + 64], path[PATH_MAX + 64], desc[96], why[512];
	struct slurm_record rc;
	struct outcome_counts oc;
	enum outcome_next next;
	struct job job, upd;

	if (jobstore_get(e->cfg->store, s->id, 0, &job, e->err, sizeof e->err) != GM_OK) {
		engine_slot_remove(e, s);
		return;
	}
	file_path(e, s->id, "where", rec, sizeof rec);
	slurm_read_record(rec, &rc);
	upd = job;
	slurm_read_usage(rec, &upd);
	if (rc.started) {
		upd.start_ms = rc.start_ms;
		upd.gpus = strcmp(rc.gpus, "-") ? rc.gpus : NULL;
	}
	upd.end_ms = rc.ended ? rc.end_ms : now_ms();
	upd.has_exit = status >= 0;
	upd.exit_status = status;
	why[0] = '\0';
	if (cancelled) {
		upd.state = JOB_CANCELLED;
		snprintf(why, sizeof why, "%s cancelled (gpuman cancel: scancel)",
		         cause ? cause : "its Slurm job");
		upd.has_exit = 0;
	} else {
		if (status < 0)
			snprintf(desc, sizeof desc, "%s", cause ? cause : "ended without a status");
		else
			protocol_describe_status(status, desc, sizeof desc);
		oc.attempts = job.attempts;
		oc.ooms = job.ooms;
		oc.retries = job.retries;
		next = outcome_next(outcome_classify(status, 0), &oc, 1);
		upd.state = next == OUTCOME_DONE    ? JOB_DONE
		            : next == OUTCOME_RETRY ? JOB_QUEUED
		                                    : JOB_FAILED;
		if (upd.state != JOB_DONE)
			outcome_reason(next, desc, 0, &oc, why, sizeof why);
	}
	if (upd.state == JOB_QUEUED)
		upd.has_exit = 0;
	upd.reason = why[0] ? why : NULL;
	upd.runner_pid = 0;
	slurm_record_end(e, s, &upd, &rc);
	file_path(e, s->id, "job", path, sizeof path);
	unlink(path);
	file_path(e, s->id, "cancel", path, sizeof path);
	unlink(path);
	upd.gpus = NULL;
	upd.reason = NULL;
	job_release(&job);
	e->dirty = 1;
	engine_slot_remove(e, s);
}

static enum place sb_place(struct engine *e, int64_t id)
{
	struct sbatch_state *ss = e->place_data;
	struct child_env env = {0};
	struct job job, upd;
	struct slot *s;
	char rec[PATH_MAX + 64], jobf[PATH_MAX + 64], log[PATH_MAX + 64], out[1024], num[24],
	    name[48], output[PATH_MAX + 80], chdir_to[PATH_MAX + 16], why[1100];
	const char *argv[64];
	char *args = NULL, *save = NULL;
	size_t n = 0;
	int rc, fd, changed = 0;

	if (jobstore_get(e->cfg->store, id, 1, &job, e->err, sizeof e->err) != GM_OK) {
		if (strncmp(e->err, "no job", 6))
			e->failed = 1;
		return PLACE_SKIPPED;
	}
	if (job.state != JOB_QUEUED) {
		job_release(&job);
		return PLACE_SKIPPED;
	}
	file_path(e, id, "cancel", rec, sizeof rec);
	unlink(rec);
	file_path(e, id, "where", rec, sizeof rec);
	unlink(rec);
	snprintf(log, sizeof log, "%s/%lld.log", e->cfg->log_dir, (long long)id);
	snprintf(num, sizeof num, "%lld", (long long)id);
	snprintf(name, sizeof name, "--job-name=gpuman-%lld", (long long)id);
	snprintf(output, sizeof output, "--output=%s", log);
	snprintf(chdir_to, sizeof chdir_to, "--chdir=%s", job.cwd ? job.cwd : "/");
	argv[n++] = "sbatch";
	argv[n++] = "--parsable";
	argv[n++] = name;
	argv[n++] = output;
	argv[n++] = "--open-mode=append";
	argv[n++] = chdir_to;
	args = strdup(e->cfg->sbatch_args);
	for (char *w = args ? strtok_r(args, " ", &save) : NULL; w && n < 52;
	     w = strtok_r(NULL, " ", &save))
		argv[n++] = w;
	argv[n++] = ss->script;
	argv[n++] = rec;
	argv[n++] = job.command ? job.command : "true";
	argv[n++] = num;
	argv[n++] = ss->gpuman;
	argv[n] = NULL;
	/* the job's own environment, as submit saw it (sbatch exports it) */
	if (job.env && child_env_init_block(&env, job.env, job.env_len) < 0)
		child_env_release(&env); /* then sbatch gets ours */
	rc = run_capture(argv, env.vars, out, sizeof out);
	child_env_release(&env);
	free(args);
	upd = job;
	upd.attempts = job.attempts + 1;
	upd.log = log;
	upd.has_peak = 0;
	upd.util_samples = 0;
	upd.util_sum = 0;
	upd.gpus = NULL;
	if (rc != 0 || strtoll(out, NULL, 10) <= 0) {
		out[strcspn(out, "\n")] = '\0';
		snprintf(why, sizeof why, "sbatch refused it: %s", out[0] ? out : "no answer");
		upd.state = JOB_FAILED;
		upd.reason = why;
		upd.end_ms = now_ms();
		if (engine_tx(e) < 0 ||
		    jobstore_update(e->cfg->store, &upd, JOB_QUEUED, job.attempts, &changed, e->err,
		                    sizeof e->err) != GM_OK)
			e->failed = 1;
		if (changed) {
			engine_count_move(e, JOB_QUEUED, JOB_FAILED);
			engine_note_ended(e, id);
		}
		upd.log = upd.gpus = upd.reason = NULL;
		job_release(&job);
		return PLACE_SKIPPED;
	}
	out[strcspn(out, ";\n")] = '\0';
	file_path(e, id, "job", jobf, sizeof jobf);
	fd = open(jobf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0) {
		dprintf(fd, "%s\n", out);
		close(fd);
	}
	s = engine_slot_add(e, id);
	if (!s) {
		gm_fail(GM_ERR_NOMEM, e->err, sizeof e->err, "out of memory");
		e->failed = 1;
		upd.log = NULL;
		job_release(&job);
		return PLACE_BLOCKED;
	}
	s->attempt = upd.attempts;
	s->start_ms = now_ms();
	snprintf(why, sizeof why, "Slurm job %s", out);
	upd.state = JOB_RUNNING;
	upd.start_ms = s->start_ms;
	upd.end_ms = 0;
	upd.has_exit = 0;
	upd.runner_pid = 0;
	upd.reason = why;
	if (engine_tx(e) < 0 || jobstore_update(e->cfg->store, &upd, JOB_QUEUED, job.attempts,
	                                        &changed, e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed && job.node &&
	    jobstore_set_node(e->cfg->store, id, NULL, e->err, sizeof e->err) != GM_OK)
		e->failed = 1;
	if (changed)
		engine_count_move(e, JOB_QUEUED, JOB_RUNNING);
	upd.log = upd.reason = NULL;
	job_release(&job);
	return changed ? PLACE_STARTED : PLACE_SKIPPED;
}

/* Slurm's state of each job still without an end ("" when squeue no
 * longer lists it); 0, or -1 when squeue did not answer. */
static int ask_squeue(struct engine *e, char (*state)[32], char (*ids)[24])
{
	size_t n = 0, len = 0;
	char list[8192], out[16384];
	const char *argv[] = {"squeue", "-h", "-o", "%i %T", "-j", list, NULL};

	list[0] = '\0';
	for (size_t i = 0; i < e->nslots; i++) {
		char path[PATH_MAX + 64];
		FILE *f;

		state[i][0] = ids[i][0] = '\0';
		file_path(e, e->slots[i]->id, "job", path, sizeof path);
		if (!(f = fopen(path, "r")))
			continue;
		if (fscanf(f, "%23s", ids[i]) == 1 && len + strlen(ids[i]) + 2 < sizeof list)
			len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
			                        n++ ? "," : "", ids[i]);
		fclose(f);
	}
	if (!n)
		return 0;
	/* squeue exits 1 for ids it has forgotten: what it lists still counts */
	if (run_capture(argv, NULL, out, sizeof out) < 0 || strstr(out, "Unable to contact") ||
	    strstr(out, "ocket timed out"))
		return -1;
	for (char *line = out, *next; line && *line; line = next) {
		char id[24], st[32];

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (sscanf(line, "%23s %31s", id, st) != 2)
			continue;
		for (size_t i = 0; i < e->nslots; i++)
			if (!strcmp(ids[i], id))
				snprintf(state[i], sizeof state[i], "%s", st);
	}
	for (size_t i = 0; i < e->nslots; i++)
		if (ids[i][0] && !state[i][0])
			snprintf(state[i], sizeof state[i], "GONE");
	return 0;
}

static int final_state(const char *st)
{
	return st[0] && strcmp(st, "PENDING") && strcmp(st, "RUNNING") &&
	       strcmp(st, "CONFIGURING") && strcmp(st, "COMPLETING") && strcmp(st, "SUSPENDED") &&
	       strcmp(st, "REQUEUED") && strcmp(st, "RESIZING");
}

static void sb_tick(struct engine *e)
{
	int ask = e->nslots && now_ms() >= ((struct sbatch_state *)e->place_data)->squeue_at;
	char(*state)[32] = ask ? calloc(e->nslots, sizeof *state) : NULL;
	char(*ids)[24] = ask ? calloc(e->nslots, sizeof *ids) : NULL;

	if (ask && state && ids && ask_squeue(e, state, ids) < 0)
		ask = 0;
	if (ask)
		((struct sbatch_state *)e->place_data)->squeue_at = now_ms() + SQUEUE_MS;
	for (size_t i = e->nslots; i-- > 0;) {
		struct slot *s = e->slots[i];
		char rec[PATH_MAX + 64];
		struct slurm_record rc;

		file_path(e, s->id, "where", rec, sizeof rec);
		slurm_read_record(rec, &rc);
		slurm_note_where(e, s, &rc);
		if (rc.ended) {
			sb_finish(e, s, rc.status, NULL, 0);
		} else if (ask && state && ids && final_state(state[i])) {
			char cause[96], mark[PATH_MAX + 64];

			snprintf(cause, sizeof cause, "Slurm job %s", ids[i]);
			file_path(e, s->id, "cancel", mark, sizeof mark);
			if (access(mark, F_OK) == 0) {
				sb_finish(e, s, -1, cause, 1);
			} else {
				snprintf(cause, sizeof cause, "Slurm job %s ended: %s", ids[i],
				         !strcmp(state[i], "GONE") ? "no longer known to Slurm"
				                                   : state[i]);
				sb_finish(e, s, -1, cause, 0);
			}
		}
	}
	free(state);
	free(ids);
}

/* Running jobs of this machine, from an earlier dispatcher: followed again
 * if their Slurm job is known, else failed with the reason. */
static void sb_adopt(struct engine *e)
{
	int64_t *run = NULL;
	size_t n = 0;

	if (jobstore_ids(e->cfg->store, JOB_RUNNING, &run, &n, e->err, sizeof e->err) != GM_OK) {
		e->failed = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX + 64];
		struct job job;
		struct slot *s;

		if (engine_slot_by_id(e, run[i]) ||
		    jobstore_get(e->cfg->store, run[i], 0, &job, NULL, 0) != GM_OK)
			continue;
		file_path(e, run[i], "job", path, sizeof path);
		if (access(path, R_OK) == 0 && (s = engine_slot_add(e, run[i]))) {
			s->attempt = job.attempts;
			s->start_ms = job.start_ms;
		} else {
			struct job upd = job;
			int changed = 0;

			upd.state = JOB_FAILED;
			upd.reason = (char *)"its Slurm job id was lost (dispatcher)";
			upd.end_ms = now_ms();
			if (engine_tx(e) < 0 ||
			    jobstore_update(e->cfg->store, &upd, JOB_RUNNING, job.attempts,
			                    &changed, e->err, sizeof e->err) != GM_OK)
				e->failed = 1;
			if (changed) {
				engine_count_move(e, JOB_RUNNING, JOB_FAILED);
				engine_note_ended(e, run[i]);
			}
			upd.reason = NULL;
		}
		job_release(&job);
	}
	free(run);
}

static void sb_ended(struct engine *e, struct slot *s, int ws)
{
	(void)ws; /* no child of ours: never called */
	engine_slot_remove(e, s);
}

static void sb_interrupt(struct engine *e)
{
	(void)e; /* the Slurm jobs outlive the dispatcher */
}

static void sb_release(struct engine *e)
{
	free(e->place_data);
	e->place_data = NULL;
}

const struct placement placement_sbatch = {
    .name = "sbatch",
    .init = sb_init,
    .tick = sb_tick,
    .full = sb_full,
    .place = sb_place,
    .ended = sb_ended,
    .adopt = sb_adopt,
    .interrupt = sb_interrupt,
    .release = sb_release,
};
