/*
 * batch.c - what the two ways of running a task file share (see batch.h):
 * the BATCH options, the task file, the progress line, the summary and the
 * task store of a log directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include "batch.h"
#include "cli.h"
#include "engine.h"
#include "jobs.h"
#include "gpuman-internal.h"
#include "safedir.h"
#include "select_help.h"

int batch_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct batch_opts *o = data;
	char err[256];

	switch (opt) {
	case 'j':
	case OPT_JOBS:
		if (parse_count(arg, &o->jobs, err, sizeof err) < 0)
			return cli_usage(cli, "-j '%s': %s", arg, err);
		return CLI_CONTINUE;
	case OPT_RETRIES:
		if (!strcmp(arg, "0"))
			o->retries = 0;
		else if (parse_count(arg, &o->retries, err, sizeof err) < 0)
			return cli_usage(cli, "--retries '%s': %s", arg, err);
		return CLI_CONTINUE;
	case OPT_LOG_DIR:
		o->log_dir = arg;
		return CLI_CONTINUE;
	case OPT_DRY_RUN:
		o->dry_run = 1;
		return CLI_CONTINUE;
	case OPT_RESUME:
		o->resume = 1;
		return CLI_CONTINUE;
	case OPT_PROGRESS:
		o->progress = 1;
		return CLI_CONTINUE;
	}
	return -1;
}

/* ---- the task file ---------------------------------------------------- */

void tasks_free(struct task *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(t[i].line);
	free(t);
}

/* Each non-empty line that is not a comment (# first) is a task; CRLF line
 * ends and a leading byte order mark are taken as a text editor meant them. */
int read_tasks(FILE *f, const char *name, struct task **out, size_t *count, char *err,
               size_t errlen)
{
	struct task *t = NULL;
	size_t n = 0, cap = 0, sz = 0, lineno = 0;
	char *line = NULL, why[256];
	ssize_t len;

	while ((len = getline(&line, &sz, f)) >= 0) {
		char *s = line, *e = line + len;

		/* A file saved by a Windows editor starts with a byte order mark,
		 * which would otherwise be the first task's first word. */
		if (++lineno == 1 && len >= 3 && !memcmp(s, "\xef\xbb\xbf", 3))
			s += 3;
		while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
			*--e = '\0';
		s += strspn(s, " \t");
		if (s == e || *s == '#')
			continue;
		/* Refused now, naming the line, rather than run as garbage or
		 * failing with the shell's message in a task's log later. */
		if (protocol_check_line(s, (size_t)(e - s), protocol_placeholders, why,
		                        sizeof why) < 0) {
			snprintf(err, errlen, "%s:%zu: %s", strcmp(name, "-") ? name : "stdin",
			         lineno, why);
			free(line);
			tasks_free(t, n);
			return -2;
		}
		if (n == cap) {
			struct task *grown = realloc(t, (cap = cap ? cap * 2 : 64) * sizeof *grown);

			if (!grown)
				goto failed;
			t = grown;
		}
		t[n].n = (int64_t)n + 1;
		if (!(t[n].line = strdup(s)))
			goto failed;
		n++;
	}
	free(line);
	*out = t;
	*count = n;
	return ferror(f) ? -1 : 0;
failed:
	free(line);
	tasks_free(t, n);
	return -1;
}

/* ---- progress --------------------------------------------------------- */

void batch_bar_draw(struct batch_bar *p, const struct engine_counts *c, int force)
{
	int64_t now = monotonic_ms(), elapsed = now - c->started_ms;
	size_t ended = c->done + c->failed + c->cancelled + c->interrupted - p->done0 - p->failed0;
	char eta[32] = "", el[32], line[256];

	if (c->interrupting && !p->told_stop) {
		p->told_stop = 1;
		fprintf(stderr,
		        "%sgpuman batch: stopping; %zu running task%s got SIGTERM (Ctrl-C "
		        "again to kill them)\n",
		        p->drawn && p->tty ? "\r\033[K" : "", c->running,
		        c->running == 1 ? "" : "s");
	}
	if (!p->on || (!force && now - p->last_ms < (p->tty ? 100 : 1000)))
		return;
	p->last_ms = now;
	if (ended && (c->queued || c->running)) {
		double rate = (double)ended / (double)(elapsed > 0 ? elapsed : 1);
		double left = ((double)c->queued + (double)c->running / 2.0) / rate;

		snprintf(eta, sizeof eta, ", ETA %s", fmt_duration(el, sizeof el, (int64_t)left));
	}
	snprintf(line, sizeof line,
	         "gpuman batch: %zu/%zu done, %zu running, %zu failed, %zu queued, "
	         "%s elapsed%s",
	         c->done, p->total, c->running, c->failed + c->cancelled + c->interrupted,
	         c->queued, fmt_duration(el, sizeof el, elapsed), eta);
	if (p->tty)
		fprintf(stderr, "\r\033[K%s", line);
	else
		fprintf(stderr, "%s\n", line);
	p->drawn = 1;
}

void batch_progress(void *data, const struct engine_counts *c)
{
	batch_bar_draw(data, c, 0);
}

void batch_blocked(void *data, const char *why)
{
	struct batch_bar *p = data;
	int n = (int)strlen(why);

	while (n && why[n - 1] == '\n')
		n--;
	fprintf(stderr, "%sgpuman batch: no task can start; waiting for GPUs others hold:\n%.*s\n",
	        p->drawn && p->tty ? "\r\033[K" : "", n, why);
	p->last_ms = 0; /* the progress line again, below it */
}

void batch_progress_end(struct batch_bar *p, struct jobstore *st, int64_t elapsed_ms)
{
	size_t c[JOB_STATE_COUNT];
	struct engine_counts ec = {0};

	if (!p->on || !p->drawn)
		return;
	if (jobstore_counts(st, c, NULL, 0) == GM_OK) {
		ec.queued = c[JOB_QUEUED];
		ec.running = c[JOB_RUNNING];
		ec.done = c[JOB_DONE];
		ec.failed = c[JOB_FAILED];
		ec.cancelled = c[JOB_CANCELLED];
		ec.interrupted = c[JOB_INTERRUPTED];
		ec.started_ms = monotonic_ms() - elapsed_ms;
		batch_bar_draw(p, &ec, 1);
	}
	if (p->tty)
		fputc('\n', stderr);
}

/* ---- the summary ------------------------------------------------------ */

void print_summary(struct cli *cli, const struct job *jobs, size_t n, const struct gpu_tally *t,
                   size_t nt)
{
	char dur[32], peak[32], util[16], where[160];

	printf("%s%5s  %-11s %-5s %8s %6s %5s %5s  %s%s\n", c_bold(cli), "TASK", "STATE", "GPU",
	       "TIME", "PEAK", "UTIL", "TRIES", "COMMAND", c_reset(cli));
	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];
		const char *color = j->state == JOB_DONE ? c_green(cli)
		                    : j->state == JOB_QUEUED || j->state == JOB_RUNNING
		                        ? c_yellow(cli)
		                        : c_red(cli);

		char *cmd = protocol_substitute(j->command, NULL, NULL, j->id);

		printf("%5lld  %s%-11s%s %-5s %8s %6s %5s %5d  %s\n", (long long)j->id, color,
		       job_state_name(j->state), c_reset(cli),
		       j->state != JOB_QUEUED ? job_where(j, where, sizeof where) : "-",
		       fmt_duration(dur, sizeof dur,
		                    j->start_ms && j->end_ms ? j->end_ms - j->start_ms : -1),
		       fmt_peak(peak, sizeof peak, j), fmt_util(util, sizeof util, j), j->attempts,
		       cmd ? cmd : j->command);
		free(cmd);
		if (j->reason && (j->state != JOB_DONE || j->ooms))
			printf("%5s  %s%s%s\n", "", c_dim(cli), j->reason, c_reset(cli));
	}
	if (!nt)
		return;
	printf("\n%s%5s  %-28s %6s %9s%s\n", c_bold(cli), "GPU", "NAME", "TASKS", "BUSY",
	       c_reset(cli));
	for (size_t k = 0; k < nt; k++)
		printf("%5u  %-28.28s %6zu %9s\n", t[k].index, t[k].name, t[k].tasks,
		       fmt_duration(dur, sizeof dur, t[k].busy_ms));
}

int write_summary(const char *path, const char *file, const char *log_dir, const struct job *jobs,
                  size_t n, const struct gpu_tally *t, size_t nt, int64_t started_ms,
                  int64_t ended_ms)
{
	json_t *o = json_object(), *tasks = json_array(), *gpus = json_array(),
	       *counts = json_object();
	size_t c[JOB_STATE_COUNT] = {0};
	char tmp[PATH_MAX + 80];
	int rc;

	for (size_t i = 0; i < n; i++) {
		json_array_append_new(tasks, job_json(&jobs[i], jobs[i].log, 1));
		c[jobs[i].state]++;
	}
	for (size_t k = 0; k < nt; k++) {
		json_t *g = json_object();

		json_object_set_new(g, "index", json_integer(t[k].index));
		json_object_set_new(g, "uuid", json_string(t[k].uuid));
		json_object_set_new(g, "name", json_string(t[k].name));
		json_object_set_new(g, "tasks", json_integer((json_int_t)t[k].tasks));
		json_object_set_new(g, "busy_ms", json_integer(t[k].busy_ms));
		json_array_append_new(gpus, g);
	}
	for (int s = 0; s < JOB_STATE_COUNT; s++)
		json_object_set_new(counts, job_state_name((enum job_state)s),
		                    json_integer((json_int_t)c[s]));
	json_object_set_new(o, "file", json_string(file));
	json_object_set_new(o, "log_dir", json_string(log_dir));
	json_object_set_new(o, "start_ms", json_integer(started_ms));
	json_object_set_new(o, "end_ms", json_integer(ended_ms));
	json_object_set_new(o, "elapsed_ms", json_integer(ended_ms - started_ms));
	json_object_set_new(o, "counts", counts);
	json_object_set_new(o, "tasks", tasks);
	json_object_set_new(o, "gpus", gpus);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	unlink(tmp); /* a new file, never through a link left there */
	rc = json_dump_file(o, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (rc == 0)
		rc = rename(tmp, path);
	return rc;
}

/* ---- preparing the store ---------------------------------------------- */

/* A file or directory of ours in the log directory, not a link; a
 * directory is created (0700) if missing, a missing file is fine.  -1 with
 * errno otherwise. */
int batch_private_entry(int dir_fd, const char *name, mode_t type)
{
	struct stat st;

	if (type == S_IFDIR && mkdirat(dir_fd, name, 0700) < 0 && errno != EEXIST)
		return -1;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT && type != S_IFDIR ? 0 : -1;
	if (S_ISLNK(st.st_mode))
		errno = ELOOP;
	else if ((st.st_mode & S_IFMT) != type)
		errno = type == S_IFDIR ? ENOTDIR : EISDIR;
	else if (st.st_uid != geteuid())
		errno = EPERM;
	else
		return 0;
	return -1;
}

int batch_open_dir(struct cli *cli, const char *path, int owned, char *dir, size_t dirlen,
                   char *runs, size_t runslen, int *dir_fd, int *lock_fd, struct jobstore **st)
{
	char db[PATH_MAX + 64], err[GM_ERRBUF_SIZE];

	*dir_fd = safedir_open(path, owned, dir, dirlen, err, sizeof err);
	if (*dir_fd < 0)
		return cli_error(cli, EXIT_FAIL, "%s", err);
	snprintf(runs, runslen, "%s/.runs", dir);
	if (batch_private_entry(*dir_fd, ".runs", S_IFDIR) < 0)
		return cli_error(cli, EXIT_FAIL, "'%s': %s", runs, strerror(errno));
	*lock_fd = openat(*dir_fd, "batch.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (*lock_fd < 0 || flock(*lock_fd, LOCK_EX | LOCK_NB) < 0)
		return cli_error(cli, EXIT_FAIL,
		                 *lock_fd < 0 ? "'%s': cannot open its lock"
		                              : "another gpuman batch is running in '%s' (use "
		                                "--log-dir for a second one)",
		                 dir);
	if (batch_private_entry(*dir_fd, "jobs.db", S_IFREG) < 0)
		return cli_error(cli, EXIT_FAIL, "'%s/jobs.db': %s", dir, strerror(errno));
	snprintf(db, sizeof db, "%s/jobs.db", dir);
	if (jobstore_open(st, db, err, sizeof err) != GM_OK)
		return cli_error(cli, EXIT_FAIL, "%s", err);
	return EXIT_OK;
}

/* A log's name in the log directory, or NULL if it lies elsewhere. */
static const char *log_name(const char *log, const char *dir)
{
	size_t dlen = strlen(dir);

	if (!log || strncmp(log, dir, dlen) || log[dlen] != '/' || strchr(log + dlen + 1, '/'))
		return NULL;
	return log + dlen + 1;
}

/*
 * Where the logs of an earlier run go when tasks run again: run-<its
 * start>/ in the log directory, created at the first use.  A new run never
 * deletes a log.  Returns the directory's descriptor, or -1.
 */
static int aside_dir(int dir_fd, const struct job *old, size_t nold, char *name, size_t len)
{
	int64_t first = 0;
	time_t t;
	struct tm tm;
	char stamp[32];

	for (size_t i = 0; i < nold; i++)
		if (old[i].submit_ms > 0 && (!first || old[i].submit_ms < first))
			first = old[i].submit_ms;
	t = (time_t)((first ? first : now_ms()) / 1000);
	localtime_r(&t, &tm);
	strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
	for (int k = 1; k < 1000; k++) {
		if (k == 1)
			snprintf(name, len, "run-%s", stamp);
		else
			snprintf(name, len, "run-%s-%d", stamp, k);
		if (mkdirat(dir_fd, name, 0700) == 0)
			return openat(dir_fd, name,
			              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (errno != EEXIST)
			return -1;
	}
	return -1;
}

/* Without --resume: start over.  With it: keep the tasks that succeeded
 * (same number, same line), and those still running; queue the rest.
 * Logs of tasks that run again, and the last summary, are set aside. */
int prepare_store(struct cli *cli, struct jobstore *st, const struct task *t, size_t n,
                  const struct batch_opts *o, const char *dir, int dir_fd, size_t *skipped)
{
	struct job *old = NULL;
	size_t nold = 0;
	unsigned char *keep = calloc(n + 1, 1);
	char err[GM_ERRBUF_SIZE], log[PATH_MAX + 64], aside[64] = "";
	int status = EXIT_FAIL, aside_fd = -1, own_fd = -1;

	*skipped = 0;
	if (!keep)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	if (dir_fd < 0)
		dir_fd = own_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir_fd < 0) {
		free(keep);
		return cli_error(cli, EXIT_FAIL, "'%s': %s", dir, strerror(errno));
	}
	if (jobstore_list(st, -1, 0, 0, &old, &nold, err, sizeof err) != GM_OK ||
	    jobstore_begin(st, err, sizeof err) != GM_OK) {
		cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	for (size_t i = 0; i < nold; i++) {
		const struct job *j = &old[i];
		int same =
		    j->id >= 1 && (size_t)j->id <= n && !strcmp(j->command, t[j->id - 1].line);
		const char *name = log_name(j->log, dir);
		struct stat sb;

		if (o->resume && same && (j->state == JOB_DONE || j->state == JOB_RUNNING)) {
			keep[j->id] = 1;
			*skipped += j->state == JOB_DONE;
			continue;
		}
		if (name && j->state != JOB_RUNNING &&
		    fstatat(dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
			if (aside_fd < 0)
				aside_fd = aside_dir(dir_fd, old, nold, aside, sizeof aside);
			if (aside_fd < 0 || renameat(dir_fd, name, aside_fd, name) < 0) {
				snprintf(
				    err, sizeof err,
				    "cannot keep the last run's log '%.1500s' in '%.1500s/%s': "
				    "%s (move it away yourself, or use another --log-dir)",
				    j->log, dir, aside[0] ? aside : "run-*", strerror(errno));
				goto failed;
			}
		}
		if (jobstore_delete(st, j->id, err, sizeof err) != GM_OK)
			goto failed;
	}
	if (aside_fd >= 0) {
		if (renameat(dir_fd, "summary.json", aside_fd, "summary.json") < 0 &&
		    errno != ENOENT)
			unlinkat(dir_fd, "summary.json", 0);
		fprintf(stderr, "gpuman batch: the last run's logs are kept in %s/%s\n", dir,
		        aside);
	} else {
		unlinkat(dir_fd, "summary.json", 0);
	}
	for (size_t i = 0; i < n; i++) {
		struct job job = JOB_INIT;

		if (keep[t[i].n])
			continue;
		snprintf(log, sizeof log, "%s/task-%lld.log", dir, (long long)t[i].n);
		job.id = t[i].n;
		job.command = t[i].line;
		job.log = log;
		job.submit_ms = now_ms();
		job.retries = (int)o->retries;
		if (jobstore_insert(st, &job, err, sizeof err) != GM_OK)
			goto failed;
	}
	if (jobstore_commit(st, err, sizeof err) != GM_OK)
		goto failed;
	status = EXIT_OK;
	goto done;
failed:
	jobstore_rollback(st);
	cli_error(cli, EXIT_FAIL, "%s", err);
done:
	jobstore_free_list(old, nold);
	free(keep);
	if (aside_fd >= 0)
		close(aside_fd);
	if (own_fd >= 0)
		close(own_fd);
	return status;
}
