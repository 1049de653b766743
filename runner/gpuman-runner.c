/*
 * gpuman-runner.c - the supervisor of one batch task or queued job, started
 * by the engine (engine/) with posix_spawn; not for people.
 *
 * It holds the job's lease and its run file's lock for as long as it lives,
 * waits for the go (one byte on a pipe, written once the engine has
 * committed the claim; end of file instead means "do not run"), runs the
 * job in its own process group with its output in the log, waits for it,
 * writes one result line into the run file, releases the lease and exits.
 * The engine reads the result when it sees the runner exit; a runner that
 * dies without writing one takes its job with it (PR_SET_PDEATHSIG), so a
 * job never runs unsupervised.
 *
 * A job dies whole (protocol.h): the runner is a child subreaper, and once
 * the job's process has ended it kills whatever the job left behind before
 * it writes the result and releases the lease.  If the runner itself is
 * killed, the job's other processes go to the engine, which does the same.
 * Every process of the job inherits the run file (and the lease), so a
 * restarted engine sees the job as running while any of them lives.
 *
 * It is a small static program rather than a fork of the engine: a fork of
 * the engine costs the engine about five times as much (page tables, then a
 * copy-on-write fault for each page either side writes), and the engine is
 * the one process every task waits for.
 *
 * A time limit (--time-limit, submit --time) ends the job as a cancel does:
 * SIGALRM at the limit, SIGTERM to the job's group, SIGKILL
 * PROTOCOL_CANCEL_GRACE_S later, its leftovers killed as always; the result
 * says stop=timeout and the log says so.  The runner keeps the time, so the
 * limit holds while the engine is away.
 *
 * Signals: SIGTERM cancels (SIGTERM to the job's group, SIGKILL
 * PROTOCOL_CANCEL_GRACE_S later, or at once on a second SIGTERM); SIGUSR1 interrupts (batch's
 * Ctrl-C: SIGTERM, recorded as interrupted); SIGUSR2 kills.  SIGINT, SIGHUP
 * and SIGQUIT from a terminal are ignored: batch decides.
 *
 * Arguments (all --name=value, then the command):
 *   --job=ID --attempt=N --run-fd=FD --go-fd=FD --lease-fd=FD
 *   --lease-path=PATH --lease-id=ID --gpus=1,7 --uuids=GPU-..,GPU-..
 *   --cuda-visible=VALUE [--mem-fraction=F [--no-framework-env]]
 *   --log=PATH [--cwd=DIR] [--task] [--time-limit=SECONDS]
 *   (--line=SHELL-LINE | -- PROGRAM ARG...)
 * Its environment is the job's.
 *
 * --late: started as its job waits in the broker's line, to be placed in
 * the lease's cgroup meanwhile (the engine's prespawn).  The lease's own
 * arguments (--lease-path ... --mem-fraction, --no-framework-env) come
 * down the go socket at the grant, before the go (protocol_send_strings).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "protocol.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TEXT_(x) #x
#define TEXT(x) TEXT_(x)

struct args {
	long long job;
	int attempt;
	int run_fd, go_fd, lease_fd;
	const char *lease_path, *lease_id, *gpus, *uuids, *cuda_visible;
	int late;  /* the lease's arguments come before the go */
	int share; /* --mem-fraction: a memory share */
	double mem_fraction;
	int no_framework_env;
	const char *log;
	const char *cwd;
	int task;             /* batch: GPUMAN_TASK */
	const char *line;     /* batch: a command line */
	char **argv;          /* queue: the argument vector */
	long long time_limit; /* seconds; 0 none */
};

/* r_limit: the pending SIGALRM is the time limit, not a grace period. */
static volatile sig_atomic_t r_stop, r_kill, r_limit;
static volatile pid_t r_job;
/* The scheduling we were started with: the job's (protocol_sched_short). */
static struct protocol_sched job_sched;

static void on_signal(int sig)
{
	int saved = errno;

	if (sig == SIGALRM && r_limit && !r_stop)
		r_stop = PROTOCOL_STOP_TIMEOUT;
	else if (sig == SIGTERM && r_stop)
		r_kill = 1;
	else if (sig == SIGTERM)
		r_stop = PROTOCOL_STOP_CANCELLED;
	else if (sig == SIGUSR1 && !r_stop)
		r_stop = PROTOCOL_STOP_INTERRUPTED;
	else if (sig == SIGUSR2 || sig == SIGALRM)
		r_kill = 1;
	if (r_job > 0)
		kill(-r_job, r_kill ? SIGKILL : SIGTERM);
	if ((sig == SIGTERM || (sig == SIGALRM && r_limit)) && !r_kill)
		alarm(PROTOCOL_CANCEL_GRACE_S);
	r_limit = 0;
	errno = saved;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_result(const struct args *a, int64_t start, int64_t end, int status, int oom,
                         enum protocol_stop stop)
{
	struct protocol_result r = {a->job, a->attempt, start, end, status, oom, stop};
	char line[PROTOCOL_RESULT_ROOM + 1];
	int n = protocol_result_format(&r, line, sizeof line);

	if (n < 0 || pwrite(a->run_fd, line, (size_t)n, 0) != n)
		_exit(1); /* unrecorded: the engine says "runner died" */
}

/* Remove the lease's file (the registry's; the broker's has none).  Its
 * descriptor closes as we exit, just after: the release, which a waiter
 * hears only once the file is gone, and the broker only once we are on
 * our way out, so that it does not move us home from the lease's cgroup
 * (a move that waits a kernel grace period, and the next grant behind it). */
static void release_lease(const struct args *a)
{
	if (a->lease_path && a->lease_path[0])
		unlink(a->lease_path);
}

/*
 * The job's log, private (0600) like everything of a job.  A batch task's
 * log is in its log directory, which nobody else can change (safedir.h);
 * even so a link there is never followed, and the first attempt makes a
 * new file rather than truncate whatever is there.  A queued job's log is
 * where its owner asked for it.
 */
static int open_log(const struct args *a)
{
	int flags = O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC;

	if (!a->task)
		return open(a->log, flags | (a->attempt == 1 ? O_TRUNC : 0), 0600);
	if (a->attempt == 1 && unlink(a->log) < 0 && errno != ENOENT)
		return -1;
	return open(a->log, flags | O_NOFOLLOW | (a->attempt == 1 ? O_EXCL : 0), 0600);
}

/* Did this attempt's output report a CUDA out-of-memory error? */
static int log_has_oom(int fd, off_t from)
{
	enum { CHUNK = 65536, OVERLAP = PROTOCOL_OOM_OVERLAP };
	char *buf = malloc(CHUNK + OVERLAP + 1);
	size_t kept = 0;
	int found = 0;
	ssize_t got;

	if (!buf)
		return 0;
	while (!found && (got = pread(fd, buf + kept, CHUNK, from)) > 0) {
		size_t n = kept + (size_t)got;

		from += got;
		for (size_t i = 0; i < n; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[n] = '\0';
		found = protocol_says_oom(buf);
		kept = n < OVERLAP ? n : OVERLAP;
		memmove(buf, buf + n - kept, kept);
	}
	free(buf);
	return found;
}

/*
 * Does a line need /bin/sh?  Only plain words do not: then it is split on
 * blanks and run directly, which saves a shell's start-up per task (a
 * thousand trivial tasks a second depend on it).
 */
static int needs_shell(const char *line)
{
	static const char *const words[] = {
	    "!",        "{",        "}",     "case",  "do",     "done",   "elif",
	    "else",     "esac",     "fi",    "for",   "if",     "in",     "then",
	    "until",    "while",    ".",     ":",     "alias",  "break",  "cd",
	    "command",  "continue", "eval",  "exec",  "exit",   "export", "read",
	    "readonly", "return",   "set",   "shift", "source", "test",   "times",
	    "trap",     "ulimit",   "umask", "unset", "wait",   "[",
	};
	size_t first;

	if (strpbrk(line, "|&;<>()$`\\\"'*?[#~\n\r"))
		return 1;
	line += strspn(line, " \t");
	first = strcspn(line, " \t");
	if (!first || memchr(line, '=', first))
		return 1;
	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (strlen(words[i]) == first && !strncmp(line, words[i], first))
			return 1;
	return 0;
}

/* Split a plain line into words (it has no quotes: see needs_shell). */
static char **split_words(char *line)
{
	size_t n = 0, cap = 8;
	char **argv = malloc(cap * sizeof *argv), *save = NULL;

	if (!argv)
		return NULL;
	for (char *w = strtok_r(line, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		if (n + 2 > cap) {
			char **grown = realloc(argv, (cap *= 2) * sizeof *argv);

			if (!grown) {
				free(argv);
				return NULL;
			}
			argv = grown;
		}
		argv[n++] = w;
	}
	argv[n] = NULL;
	return argv;
}

/* Where execvp would find argv0 in the job's own PATH; caller frees. */
static char *resolve_program(const char *argv0, const struct child_env *env)
{
	const char *path = "/usr/local/bin:/usr/bin:/bin";
	size_t alen = strlen(argv0);

	if (strchr(argv0, '/'))
		return strdup(argv0);
	for (size_t i = 0; i < env->count; i++)
		if (!strncmp(env->vars[i], "PATH=", 5))
			path = env->vars[i] + 5;
	for (const char *p = path;; p += strcspn(p, ":") + 1) {
		size_t dlen = strcspn(p, ":");
		char *cand = malloc(dlen + alen + 3);
		struct stat st;

		if (!cand)
			return NULL;
		snprintf(cand, dlen + alen + 3, "%.*s/%s", (int)dlen, dlen ? p : ".", argv0);
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return cand;
		free(cand);
		if (!p[dlen])
			return NULL;
	}
}

struct job_exec {
	const char *program; /* resolved path, or NULL: not found */
	char **argv;
	char **envp;
	const char *cwd;
	int log_fd, lease_fd, run_fd, null_fd;
	pid_t runner;
	char msg[512]; /* "gpuman: cannot run 'x': " */
	size_t msg_len;
};

/*
 * In the job's process, between vfork and exec: it shares the runner's
 * memory, so it only makes system calls on prepared data.  Never returns.
 */
static void job_exec(const struct job_exec *x)
{
	static const int sigs[] = {SIGINT,  SIGQUIT, SIGHUP,  SIGPIPE, SIGTERM,
	                           SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD};
	struct sigaction dfl;
	sigset_t none;
	const char *why;
	int err;

	setpgid(0, 0);
	protocol_sched_restore(&job_sched);
	/* A killed runner takes its job with it rather than leave it running
	 * unsupervised with nobody to record it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != x->runner)
		_exit(1);
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		sigaction(sigs[i], &dfl, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (x->null_fd >= 0)
		dup2(x->null_fd, 0);
	dup2(x->log_fd, 1);
	dup2(x->log_fd, 2);
	if (x->cwd && chdir(x->cwd) < 0) {
		err = errno;
		why = "cannot enter its working directory";
		goto failed;
	}
	/* The job holds its lease too: a job that outlives its runner keeps
	 * its GPUs until it ends. */
	fcntl(x->lease_fd, F_SETFD, 0);
	/* And its run file, locked: whoever finds it locked knows that some
	 * process of the job still lives (jobtree_kill_holders). */
	fcntl(x->run_fd, F_SETFD, 0);
	if (!x->program) {
		err = ENOENT;
		why = "not found in PATH";
		goto failed;
	}
	execve(x->program, x->argv, x->envp);
	err = errno;
	why = strerror(err);
failed:
	if (write(2, x->msg, x->msg_len) < 0 || write(2, why, strlen(why)) < 0 ||
	    write(2, "\n", 1) < 0)
		_exit(err == ENOENT ? 127 : 126);
	_exit(err == ENOENT ? 127 : 126);
}

/* vfork in a function of its own: nothing of the caller's frame is live
 * across it. */
static __attribute__((noinline)) pid_t spawn_job(const struct job_exec *x)
{
	pid_t pid = vfork();

	if (pid == 0)
		job_exec(x);
	return pid;
}

/* One --name[=value]: 0, or -1 unknown or malformed. */
static int parse_arg(const char *arg, struct args *a)
{
	const char *v = strchr(arg, '=');
	size_t klen = v ? (size_t)(v - arg) : strlen(arg);
	char key[32];

	if (!strcmp(arg, "--no-framework-env"))
		return a->no_framework_env = 1, 0;
	if (!strcmp(arg, "--task"))
		return a->task = 1, 0;
	if (!strcmp(arg, "--late"))
		return a->late = 1, 0;
	if (!v || klen >= sizeof key)
		return -1;
	/* arg stays as it was: ps and /proc/PID/cmdline show it whole */
	memcpy(key, arg, klen);
	key[klen] = '\0';
	v++;
	if (!strcmp(key, "--job"))
		a->job = strtoll(v, NULL, 10);
	else if (!strcmp(key, "--attempt"))
		a->attempt = atoi(v);
	else if (!strcmp(key, "--run-fd"))
		a->run_fd = atoi(v);
	else if (!strcmp(key, "--go-fd"))
		a->go_fd = atoi(v);
	else if (!strcmp(key, "--lease-fd"))
		a->lease_fd = atoi(v);
	else if (!strcmp(key, "--lease-path"))
		a->lease_path = v;
	else if (!strcmp(key, "--lease-id"))
		a->lease_id = v;
	else if (!strcmp(key, "--gpus"))
		a->gpus = v;
	else if (!strcmp(key, "--uuids"))
		a->uuids = v;
	else if (!strcmp(key, "--cuda-visible"))
		a->cuda_visible = v;
	else if (!strcmp(key, "--mem-fraction"))
		a->share = 1, a->mem_fraction = strtod(v, NULL);
	else if (!strcmp(key, "--log"))
		a->log = v;
	else if (!strcmp(key, "--cwd"))
		a->cwd = v;
	else if (!strcmp(key, "--line"))
		a->line = v;
	else if (!strcmp(key, "--time-limit"))
		a->time_limit = strtoll(v, NULL, 10);
	else
		return -1;
	return 0;
}

/* Are the lease's arguments all there? */
static int lease_known(const struct args *a)
{
	return a->lease_path && a->lease_id && a->gpus && a->uuids && a->cuda_visible;
}

static int parse_args(int argc, char **argv, struct args *a)
{
	memset(a, 0, sizeof *a);
	a->run_fd = a->go_fd = a->lease_fd = -1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			a->argv = argv + i + 1;
			break;
		}
		if (parse_arg(argv[i], a) < 0)
			return -1;
	}
	if (a->job <= 0 || a->attempt <= 0 || a->run_fd < 3 || a->go_fd < 3 || a->lease_fd < 3 ||
	    !(a->late || lease_known(a)) || !a->log || (!a->line && !(a->argv && a->argv[0])))
		return -1;
	return 0;
}

/* An early runner's lease arguments, from the go socket: 0, or -1 (none
 * came: the engine died or gave the place up; or they are malformed). */
static int receive_late(struct args *a)
{
	char **v = protocol_receive_strings(a->go_fd);

	if (!v)
		return -1;
	for (char **p = v; *p; p++)
		if (parse_arg(*p, a) < 0)
			return -1;
	return lease_known(a) ? 0 : -1;
}

/* Close every descriptor above 2 but ours: nothing of the engine's lives on
 * in us (its lock, another runner's go socket). */
static void close_others(const struct args *a)
{
	int keep[3] = {a->run_fd, a->go_fd, a->lease_fd};
	unsigned lo = 3;

	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (keep[j] < keep[i]) {
				int t = keep[i];

				keep[i] = keep[j];
				keep[j] = t;
			}
	for (int i = 0; i <= 3; i++) {
		unsigned hi = i < 3 ? (unsigned)keep[i] : ~0u;

		if (hi > lo) {
#ifdef SYS_close_range
			if (syscall(SYS_close_range, lo, hi - 1, 0) < 0)
#endif
				for (unsigned fd = lo; fd < hi && fd < 65536; fd++)
					close((int)fd);
		}
		lo = hi + 1;
	}
}

int main(int argc, char **argv)
{
	static const int handled[] = {SIGTERM, SIGUSR1, SIGUSR2, SIGALRM};
	static const int ignored[] = {SIGINT, SIGQUIT, SIGHUP, SIGPIPE};
	struct args a;
	struct child_env env = CHILD_ENV_INIT;
	struct protocol_job job = {0};
	struct job_exec x;
	struct sigaction sa;
	sigset_t none, all, old;
	char *line = NULL, **jargv = NULL, **own_argv = NULL;
	int status = -1, oom = 0, log_fd, ws;
	int64_t start = 0, end;
	off_t from;
	pid_t pid;

	memset(&x, 0, sizeof x);
	x.null_fd = -1;
	if (argc == 2 && !strcmp(argv[1], "--help")) {
		/* For people who find it next to gpuman, and for its man page. */
		printf("usage: gpuman-runner (started by gpuman only)\n"
		       "\n"
		       "The supervisor of one batch task or queued job: 'gpuman batch' and the\n"
		       "queue's dispatcher start one per task.  It holds the task's GPU lease,\n"
		       "runs the task in its own process group with its output in the log, and\n"
		       "records its result, so that the dispatcher may die and restart without\n"
		       "losing or repeating a job.  It is installed next to gpuman, which\n"
		       "looks for it there.\n");
		return 0;
	}
	if (parse_args(argc, argv, &a) < 0) {
		fprintf(stderr, "gpuman-runner: started by gpuman only\n");
		return 2;
	}
	close_others(&a);
	jobtree_subreaper();
	protocol_sched_short(&job_sched);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < ARRAY_SIZE(handled); i++)
		sigaddset(&sa.sa_mask, handled[i]);
	for (size_t i = 0; i < ARRAY_SIZE(handled); i++)
		sigaction(handled[i], &sa, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(ignored); i++)
		signal(ignored[i], SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	if ((a.late && receive_late(&a) < 0) || protocol_await_go(a.go_fd) < 0) {
		/* The claim was not recorded: the job stays queued. */
		write_result(&a, 0, 0, -1, 0, PROTOCOL_STOP_ABORTED);
		release_lease(&a);
		return 0;
	}
	close(a.go_fd);
	if (r_stop) {
		end = now_ms();
		write_result(&a, end, end, -1, 0, (enum protocol_stop)r_stop);
		release_lease(&a);
		return 0;
	}

	log_fd = open_log(&a);
	if (log_fd < 0)
		log_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	from = lseek(log_fd, 0, SEEK_END);
	if (a.attempt > 1)
		dprintf(log_fd, "--- gpuman: attempt %d on GPU %s ---\n", a.attempt, a.gpus);

	job.cuda_visible = a.cuda_visible;
	job.gpus = a.gpus;
	job.lease_id = a.lease_id;
	job.id_name = a.task ? "GPUMAN_TASK" : "GPUMAN_JOB";
	job.id = a.job;
	job.share = a.share;
	job.mem_fraction = a.mem_fraction;
	job.no_framework_env = a.no_framework_env;
	if (child_env_init(&env) < 0 || protocol_job_env(&env, &job) < 0) {
		dprintf(log_fd, "gpuman: out of memory\n");
		goto finish;
	}
	if (a.argv) {
		jargv = a.argv;
	} else {
		line = protocol_substitute(a.line, a.gpus, a.uuids, a.job);
		if (line && needs_shell(line)) {
			jargv = calloc(4, sizeof *jargv);
			if (jargv) {
				jargv[0] = (char *)"/bin/sh";
				jargv[1] = (char *)"-c";
				jargv[2] = line;
			}
		} else if (line) {
			jargv = split_words(line);
		}
		own_argv = jargv;
	}
	if (!jargv || !jargv[0]) {
		dprintf(log_fd, "gpuman: nothing to run (out of memory or an empty command)\n");
		goto finish;
	}

	x.program = resolve_program(jargv[0], &env);
	x.argv = jargv;
	x.envp = env.vars;
	x.cwd = a.cwd;
	x.log_fd = log_fd;
	x.lease_fd = a.lease_fd;
	x.run_fd = a.run_fd;
	x.null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	x.runner = getpid();
	x.msg_len = (size_t)snprintf(x.msg, sizeof x.msg, "gpuman: cannot run '%s': ", jargv[0]);
	if (x.msg_len >= sizeof x.msg)
		x.msg_len = sizeof x.msg - 1;
	/* No signal handler may run in the child while it shares our memory. */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	start = now_ms();
	pid = spawn_job(&x);
	if (pid > 0) {
		setpgid(pid, pid);
		r_job = pid;
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		dprintf(log_fd, "gpuman: cannot start the job: %s\n", strerror(errno));
		goto finish;
	}
	if (r_stop) {
		kill(-pid, r_kill ? SIGKILL : SIGTERM);
	} else if (a.time_limit > 0) {
		r_limit = 1;
		alarm(a.time_limit > 0xfffffff ? 0xfffffff : (unsigned)a.time_limit);
	}
	/* Processes the job orphans come to us (a subreaper): reap them as
	 * they end, or they would pile up as zombies for as long as it runs. */
	for (pid_t got; (got = waitpid(-1, &ws, 0)) != pid;)
		if (got < 0 && errno != EINTR) {
			ws = 0xff00; /* unknowable: as exit 255 */
			break;
		}
	r_job = 0;
	end = now_ms();
	status = protocol_exit_status(ws);
	if (r_stop == PROTOCOL_STOP_TIMEOUT) {
		char limit[32];

		protocol_format_limit(a.time_limit, limit, sizeof limit);
		dprintf(log_fd,
		        "gpuman: job %lld reached its time limit (%s): SIGTERM to its processes%s; "
		        "recorded as timeout\n",
		        a.job, limit,
		        r_kill ? ", SIGKILL " TEXT(PROTOCOL_CANCEL_GRACE_S) " s later" : "");
	}
	if (status != 0)
		oom = log_has_oom(log_fd, from);
	/* The result first: the engine reads it only once we have exited,
	 * after what follows; if we are killed meanwhile, it ends what is left
	 * of the job itself and still records how the job ended. */
	write_result(&a, start, end, status, oom, (enum protocol_stop)r_stop);
	/* Whatever the job left running ends now, before its lease is
	 * released: nothing of it runs on a GPU that is no longer leased, nor
	 * beside a retry. */
	kill(-pid, SIGKILL);
	jobtree_kill_children(NULL, 0);
	release_lease(&a);
	goto done;
finish:
	end = now_ms();
	if (!start)
		start = end;
	if (status < 0)
		status = 126;
	write_result(&a, start, end, status, oom, (enum protocol_stop)r_stop);
	release_lease(&a);
done:
	free((char *)x.program);
	free(own_argv);
	free(line);
	child_env_release(&env);
	if (x.null_fd >= 0)
		close(x.null_fd);
	close(log_fd);
	/* No exit handlers: under the broker's fence the runner sits in its
	 * lease's cgroup until the broker moves it out after the release
	 * above, and whatever a handler starts meanwhile is killed with the
	 * cgroup -- a sanitized build's leak check clones a tracer at exit and
	 * then waited for it forever. */
	fflush(NULL);
	_exit(0);
}
