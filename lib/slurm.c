/*
 * slurm.c - the Slurm back end (slurm.h): Slurm's own commands, run as
 * child processes, their answers parsed, and their failures turned into
 * sentences that say what to do.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "slurm.h"

extern char **environ;

static void say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Is a program on PATH? */
static int on_path(const char *prog)
{
	const char *path = getenv("PATH");
	char buf[4096];

	while (path && *path) {
		size_t n = strcspn(path, ":");

		snprintf(buf, sizeof buf, "%.*s/%s", (int)n, n ? path : ".", prog);
		if (access(buf, X_OK) == 0)
			return 1;
		path += n + (path[n] == ':');
	}
	return 0;
}

/*
 * Run argv, its stdout and stderr together into out (NUL-terminated, cut
 * to len), for at most timeout_ms (0: no limit; then killed).  Returns the
 * wait status, -1 if it could not start or ran out of time (out says).
 * stdin is /dev/null.
 */
static int capture(const char *const *argv, char *out, size_t len, int timeout_ms)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none;
	int p[2], status = -1, rc;
	size_t n = 0;
	int64_t end = mono_ms() + timeout_ms;
	pid_t pid;

	out[0] = '\0';
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	/* the caller blocks Ctrl-C for its signalfd; salloc must get it */
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
	rc = posix_spawnp(&pid, argv[0], &fa, &attr, (char *const *)argv, environ);
	posix_spawnattr_destroy(&attr);
	if (rc != 0) {
		posix_spawn_file_actions_destroy(&fa);
		close(p[0]);
		close(p[1]);
		say(out, len, "cannot run %s", argv[0]);
		return -1;
	}
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	for (;;) {
		struct pollfd pfd = {p[0], POLLIN, 0};
		int wait_ms = timeout_ms ? (int)(end - mono_ms()) : -1;
		char buf[4096];
		ssize_t got;

		if (timeout_ms && wait_ms <= 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			close(p[0]);
			say(out, len, "%s did not answer within %d s", argv[0], timeout_ms / 1000);
			return -1;
		}
		if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR)
			break;
		if (!(pfd.revents & (POLLIN | POLLHUP)))
			continue;
		got = read(p[0], buf, sizeof buf);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		if (n + 1 < len) {
			size_t take = (size_t)got < len - 1 - n ? (size_t)got : len - 1 - n;

			memcpy(out + n, buf, take);
			n += take;
			out[n] = '\0';
		}
	}
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

/* The first line of text that starts with "<prog>: error: ", without it. */
static const char *slurm_error_line(const char *text, char *buf, size_t len)
{
	const char *p = strstr(text, "error: ");

	if (!p)
		p = text;
	else
		p += 7;
	snprintf(buf, len, "%.*s", (int)strcspn(p, "\n"), p);
	return buf;
}

int slurm_preflight(char *err, size_t len)
{
	static const char *const cmds[] = {"salloc", "srun",     "scancel",
	                                   "squeue", "scontrol", "sinfo"};
	char out[4096], line[512];
	const char *argv[] = {"sinfo", "-h", "-o", "%P", NULL};
	int st;

	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
		if (!on_path(cmds[i])) {
			say(err, len,
			    "Slurm's '%s' is not on the PATH: run this on a login node of the "
			    "cluster (or load its Slurm module)",
			    cmds[i]);
			return -1;
		}
	st = capture(argv, out, sizeof out, 30000);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		say(err, len,
		    "the Slurm controller does not answer (sinfo: %s): is slurmctld running, and "
		    "SLURM_CONF right?",
		    st == -1 ? out : slurm_error_line(out, line, sizeof line));
		return -1;
	}
	return 0;
}

/* A node's GPUs from sinfo's Gres or GresUsed ("gpu:a100:2,gpu:t4:2",
 * "gpu:a100:1(IDX:0),gpu:t4:0(IDX:N/A)"): the counts, without the
 * parenthesised index lists (which hold commas and colons of their own). */
static unsigned node_gpus(const char *gres)
{
	char plain[512];
	size_t o = 0;
	int depth = 0;

	for (const char *p = gres; *p && o + 1 < sizeof plain; p++) {
		depth += *p == '(';
		if (!depth)
			plain[o++] = *p;
		depth -= *p == ')' && depth > 0;
	}
	plain[o] = '\0';
	return strcmp(plain, "(null)") ? slurm_gres_per_node(plain) : 0;
}

static int by_free(const void *a, const void *b)
{
	const struct slurm_node_free *x = a, *y = b;

	return x->gpus != y->gpus ? (x->gpus < y->gpus ? 1 : -1) : strcmp(x->name, y->name);
}

int slurm_idle_gpus(const char *partition, char *part_out, size_t part_len,
                    struct slurm_node_free *nodes, size_t max, size_t *count, char *err, size_t len)
{
	char out[65536], line[512], *save = NULL, *l;
	const char *argv[] = {"sinfo",
	                      "-h",
	                      "-N",
	                      "-p",
	                      NULL,
	                      "-O",
	                      "NodeList:64,StateCompact:16,Gres:200,GresUsed:300",
	                      NULL};
	const char *parts[] = {"sinfo", "-h", "-o", "%P", NULL};
	int st;

	*count = 0;
	if (!partition || !*partition) {
		/* the default partition: sinfo marks it with '*' */
		st = capture(parts, out, sizeof out, 30000);
		if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			say(err, len, "sinfo: %s",
			    st == -1 ? out : slurm_error_line(out, line, sizeof line));
			return -1;
		}
		for (l = strtok_r(out, "\n", &save); l && !strchr(l, '*');
		     l = strtok_r(NULL, "\n", &save))
			;
		if (!l) {
			say(err, len, "the cluster has no default partition: give one with -p");
			return -1;
		}
		*strchr(l, '*') = '\0';
		snprintf(part_out, part_len, "%s", l);
	} else {
		snprintf(part_out, part_len, "%s", partition);
	}
	argv[4] = part_out;
	st = capture(argv, out, sizeof out, 30000);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		say(err, len, "sinfo -p %s: %s", part_out,
		    st == -1 ? out : slurm_error_line(out, line, sizeof line));
		return -1;
	}
	save = NULL;
	for (l = strtok_r(out, "\n", &save); l && *count < max; l = strtok_r(NULL, "\n", &save)) {
		char name[64], state[32], gres[512], used[512];
		unsigned total, busy;

		if (sscanf(l, "%63s %31s %511s %511s", name, state, gres, used) != 4)
			continue;
		/* idle or mixed, without a flag (drain~, down*, ...) */
		if (strcmp(state, "idle") && strcmp(state, "mix"))
			continue;
		total = node_gpus(gres);
		busy = node_gpus(used);
		if (total <= busy)
			continue;
		snprintf(nodes[*count].name, sizeof nodes[0].name, "%s", name);
		snprintf(nodes[*count].gres, sizeof nodes[0].gres, "%.199s", gres);
		nodes[*count].total = total;
		nodes[(*count)++].gpus = total - busy;
	}
	qsort(nodes, *count, sizeof *nodes, by_free);
	return 0;
}

int slurm_spread(const struct slurm_node_free *nodes, size_t count, unsigned want,
                 unsigned per_task, unsigned *nodes_out, unsigned *gpus_out)
{
	unsigned best = 0;

	if (!per_task)
		per_task = 1;
	*nodes_out = *gpus_out = 0;
	for (size_t k = 1; k <= count; k++) {
		unsigned each = nodes[k - 1].gpus / per_task * per_task, useful;

		if (!each)
			break;
		/* no more per node than the sweep can use */
		if (each > want)
			each = (want + per_task - 1) / per_task * per_task;
		useful = (unsigned)k * each < want ? (unsigned)k * each : want;
		if (useful > best) {
			best = useful;
			*nodes_out = (unsigned)k;
			*gpus_out = each;
		}
	}
	return best ? 0 : -1;
}

/* "gpu:a100:4,gpu:t4:4" or "gpu:8" (JOB_GRES of scontrol show job -d). */
static void parse_job_gres(const char *s, struct slurm_alloc *a)
{
	while (s && *s) {
		size_t n = strcspn(s, ",");
		char item[96], *colon, *last;
		unsigned count;

		snprintf(item, sizeof item, "%.*s", (int)n, s);
		s += n + (s[n] == ',');
		item[strcspn(item, "(")] = '\0'; /* "(IDX:0-1)" */
		if (strncmp(item, "gpu:", 4) && strcmp(item, "gpu"))
			continue;
		last = strrchr(item, ':');
		if (!last || !*(last + 1) || strspn(last + 1, "0123456789") != strlen(last + 1))
			continue;
		count = (unsigned)strtoul(last + 1, NULL, 10);
		*last = '\0';
		colon = strchr(item, ':');
		if (a->type_count < SLURM_MAX_TYPES && count) {
			snprintf(a->types[a->type_count].name, sizeof a->types[0].name, "%s",
			         colon ? colon + 1 : "");
			a->types[a->type_count++].count = count;
		}
		a->gpus += count;
	}
}

void slurm_parse_gres(const char *gres, struct slurm_alloc *a)
{
	a->type_count = 0;
	a->gpus = 0;
	parse_job_gres(gres, a);
}

int slurm_typed_request(const char *tres_per_node)
{
	const char *p = tres_per_node;

	while ((p = strstr(p, "gpu:"))) {
		p += 4;
		if (*p && !strchr("0123456789", *p))
			return 1;
	}
	return 0;
}

unsigned slurm_gres_per_node(const char *gres)
{
	unsigned total = 0;

	while (gres && *gres) {
		size_t n = strcspn(gres, ",");
		const char *last = gres + n;

		while (last > gres && last[-1] != ':')
			last--;
		if (!strncmp(gres, "gpu", 3))
			total += last > gres ? (unsigned)strtoul(last, NULL, 10) : 1;
		gres += n + (gres[n] == ',');
	}
	return total;
}

/* Fill a from `scontrol show job -d -o J`. */
static int describe(struct slurm_alloc *a, char *err, size_t len)
{
	char out[16384], line[512], *p;
	const char *argv[] = {"scontrol", "show", "job", "-d", "-o", a->job_id, NULL};
	int st = capture(argv, out, sizeof out, 30000);

	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		say(err, len, "Slurm job %s: %s", a->job_id,
		    st == -1 ? out : slurm_error_line(out, line, sizeof line));
		return -1;
	}
	a->type_count = 0;
	a->gpus = 0;
	if ((p = strstr(out, " JOB_GRES="))) {
		snprintf(line, sizeof line, "%.*s", (int)strcspn(p + 10, " \n"), p + 10);
		snprintf(a->gres, sizeof a->gres, "%.*s", (int)(sizeof a->gres - 1), line);
		parse_job_gres(line, a);
	}
	/* Steps may ask for a GPU type only if the job did (22.05: "Step
	 * requested GRES (gpu:a100) not found in the job"); else one pool. */
	if ((p = strstr(out, " TresPerNode=")) &&
	    !slurm_typed_request(strndupa(p + 13, strcspn(p + 13, " \n")))) {
		a->type_count = 1;
		a->types[0].name[0] = '\0';
		a->types[0].count = a->gpus;
	}
	if ((p = strstr(out, " NumNodes=")))
		a->nodes = (unsigned)strtoul(p + 10, NULL, 10);
	if ((p = strstr(out, " NodeList=")))
		snprintf(a->node_list, sizeof a->node_list, "%.*s", (int)strcspn(p + 10, " \n"),
		         p + 10);
	if (!a->gpus) {
		say(err, len,
		    "Slurm job %s has no GPUs (ask for them: --gres=gpu:N per node, e.g. "
		    "--gres=gpu:a100:4)",
		    a->job_id);
		return -1;
	}
	return 0;
}

int slurm_adopt(const char *job_id, struct slurm_alloc *a, char *err, size_t len)
{
	snprintf(a->job_id, sizeof a->job_id, "%s", job_id);
	a->own = 0;
	return describe(a, err, len);
}

/* Slurm's refusals, with what to do about them. */
static void explain_refusal(const char *out, char *err, size_t len)
{
	char line[512], gres[512] = "?";
	const char *argv[] = {"sinfo", "-h", "-o", "%P %D %G %f", NULL};

	slurm_error_line(out, line, sizeof line);
	if (strcasestr(out, "invalid partition")) {
		capture(argv, gres, sizeof gres, 15000);
		say(err, len,
		    "Slurm: no such partition (%s); partitions, nodes, GRES and features "
		    "here:\n%s",
		    line, gres);
	} else if (strcasestr(out, "node configuration is not available") ||
	           strcasestr(out, "Invalid generic resource") || strcasestr(out, "gres") ||
	           strcasestr(out, "Invalid feature")) {
		capture(argv, gres, sizeof gres, 15000);
		say(err, len,
		    "Slurm: no node can ever give what was asked (%s): check the --gres type and "
		    "count per node, -N and --constraint against what the partitions have:\n%s",
		    line, gres);
	} else if (strcasestr(out, "account")) {
		say(err, len,
		    "Slurm refused the account (%s): see 'sacctmgr show assoc user=$USER'", line);
	} else if (strcasestr(out, "time limit")) {
		say(err, len,
		    "Slurm refused the time limit (%s): the partition allows less (sinfo "
		    "-o '%%P %%l')",
		    line);
	} else if (strcasestr(out, "Unable to contact")) {
		say(err, len, "the Slurm controller does not answer (%s)", line);
	} else {
		say(err, len, "Slurm refused the allocation: %s", line);
	}
}

int slurm_allocate(const char *const *args, struct slurm_alloc *a, char *err, size_t len)
{
	const char *argv[64];
	char out[8192];
	const char *p;
	size_t n = 0;
	int st;

	argv[n++] = "salloc";
	argv[n++] = "--no-shell";
	argv[n++] = "--job-name=gpuman-batch";
	for (; *args && n < sizeof argv / sizeof argv[0] - 1; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	st = capture(argv, out, sizeof out, 0);
	p = strstr(out, "Granted job allocation ");
	if (!p) {
		if (st != -1 && WIFSIGNALED(st))
			say(err, len, "salloc was stopped (%s) before Slurm granted the allocation",
			    strsignal(WTERMSIG(st)));
		else if (strstr(out, "Job allocation") && strstr(out, "has been revoked"))
			say(err, len, "the allocation request was withdrawn before it was granted");
		else
			explain_refusal(out, err, len);
		return -1;
	}
	snprintf(a->job_id, sizeof a->job_id, "%.*s", (int)strspn(p + 23, "0123456789"), p + 23);
	a->own = 1;
	return describe(a, err, len);
}

pid_t slurm_step_spawn(const struct slurm_alloc *a, const char *type, unsigned gpus,
                       const char *name, const char *const *extra, const char *const *cmd,
                       int out_fd)
{
	char jobid[48], gres[64], jname[96];
	const char *argv[128];
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none;
	size_t n = 0;
	pid_t pid;
	int rc;

	snprintf(jobid, sizeof jobid, "--jobid=%s", a->job_id);
	if (type && *type)
		snprintf(gres, sizeof gres, "--gres=gpu:%s:%u", type, gpus);
	else
		snprintf(gres, sizeof gres, "--gres=gpu:%u", gpus);
	snprintf(jname, sizeof jname, "--job-name=%s", name);
	argv[n++] = "srun";
	argv[n++] = jobid;
	/* --exact: the step takes only what it asks, so steps share nodes;
	 * a step that finds no free GPU waits for one (-Q: quietly) */
	argv[n++] = "--exact";
	argv[n++] = "-N1";
	argv[n++] = "-n1";
	argv[n++] = "-c1";
	argv[n++] = gres;
	argv[n++] = jname;
	argv[n++] = "-Q";
	argv[n++] = "--kill-on-bad-exit=1";
	for (; extra && *extra && n < 100; extra++)
		argv[n++] = *extra;
	for (; *cmd && n < sizeof argv / sizeof argv[0] - 1; cmd++)
		argv[n++] = *cmd;
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
	rc = posix_spawnp(&pid, "srun", &fa, &attr, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc) {
		errno = rc;
		return -1;
	}
	return pid;
}

void slurm_step_cause(const char *text, char *buf, size_t len, int *requeueable)
{
	static const struct {
		const char *says, *means;
		int requeue;
	} causes[] = {
	    {"DUE TO TIME LIMIT", "killed by Slurm: time limit", 0},
	    {"DUE TO NODE FAILURE", "killed by Slurm: node failure", 1},
	    {"DUE TO PREEMPTION", "killed by Slurm: preempted", 1},
	    {"DUE TO JOB REQUEUE", "killed by Slurm: job requeued", 1},
	    {"Node failure", "killed by Slurm: node failure", 1},
	    {"CANCELLED AT", "cancelled in Slurm (scancel)", 0},
	    {"Exceeded job memory limit", "killed by Slurm: memory limit", 0},
	    {"oom-kill", "killed by the kernel: host memory (oom-kill)", 0},
	    {"Unable to create step", "Slurm refused the step (its log says why)", 0},
	};

	buf[0] = '\0';
	*requeueable = 0;
	for (size_t i = 0; i < sizeof causes / sizeof causes[0]; i++)
		if (strstr(text, causes[i].says)) {
			snprintf(buf, len, "%s", causes[i].means);
			*requeueable = causes[i].requeue;
			return;
		}
}

int slurm_job_alive(const struct slurm_alloc *a, char *buf, size_t len)
{
	char out[1024], *reason;
	const char *argv[] = {"squeue", "-h", "-t", "all", "-j", a->job_id, "-o", "%T %r", NULL};
	int st = capture(argv, out, sizeof out, 15000);

	buf[0] = '\0';
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !out[0])
		return -1;
	out[strcspn(out, "\n")] = '\0';
	if (!strncmp(out, "RUNNING", 7) || !strncmp(out, "CONFIGURING", 11))
		return 1;
	/* "COMPLETING TimeLimit": the reason says more than the state */
	reason = strchr(out, ' ');
	snprintf(buf, len, "%s", reason && strcmp(reason + 1, "None") ? reason + 1 : out);
	if (reason && !strcmp(reason + 1, "None"))
		buf[strcspn(buf, " ")] = '\0';
	return 0;
}

void slurm_release(struct slurm_alloc *a)
{
	char out[1024];
	const char *argv[] = {"scancel", a->job_id, NULL};

	if (a->own && a->job_id[0])
		capture(argv, out, sizeof out, 30000);
	a->own = 0;
}
