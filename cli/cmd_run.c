/*
 * cmd_run.c - `gpuman run [SELECT] [RESERVE] -- CMD [ARG...]`: lease GPUs,
 * run an unmodified command on them, exit with its status.
 *
 * The job is forked under the registry lock, before the lease is published,
 * and waits on a pipe for the go: so the lease names the job's pid from its
 * first instant (memory shares are matched to the job's processes), and the
 * job never runs without its lease.  The job inherits the lease's
 * descriptor, so the lease lives exactly as long as the job, even if gpuman
 * itself is killed.  The job dies whole (protocol.h): gpuman is a child
 * subreaper, and once the command has ended it kills whatever the command
 * left running before it releases the lease.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "protocol.h"
#include "cli.h"
#include "gpuman-internal.h"
#include "select_help.h"

#define TEXT_(x) #x
#define TEXT(x) TEXT_(x)
/* The admin's max_lease ended the job (as timeout(1) exits). */
#define EXIT_LEASE_LIMIT 124

static volatile sig_atomic_t interrupted, limit_hit;
static volatile pid_t child_pid;

/* The admin's max_lease passed: end the job whole, as the queue's runner
 * ends one past submit --time -- SIGTERM, SIGKILL after the grace period
 * (then wait_child kills whatever it left).  Kept here, in the handler, so
 * no window between a check and waitpid can lose the limit. */
static void on_limit(int sig)
{
	int saved = errno;

	(void)sig;
	if (child_pid > 0) {
		kill(child_pid, limit_hit ? SIGKILL : SIGTERM);
		if (!limit_hit)
			alarm(PROTOCOL_CANCEL_GRACE_S);
		limit_hit = 1;
	}
	errno = saved;
}

/* While waiting: Ctrl-C gives up.  While the job runs: pass signals on --
 * except those the terminal already sent to the job's process group too,
 * which it would otherwise get twice. */
static void on_signal(int sig, siginfo_t *info, void *ctx)
{
	(void)ctx;
	if (child_pid > 0) {
		if (info->si_code == SI_USER || info->si_code == SI_QUEUE || sig == SIGTERM)
			kill(child_pid, sig);
	} else {
		interrupted = 1;
	}
}

static void install_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
	sa.sa_handler = on_limit;
	sa.sa_flags = 0;
	sigaction(SIGALRM, &sa, NULL);
}

struct run {
	struct cli *cli;
	char **argv;
	struct child_env env;
	int go[2]; /* the job waits on go[0] for one byte */
	pid_t pid;
	int64_t limit_ms; /* the admin's max_lease for us; 0 none */
	char limit_from[96];
	const char *conf;            /* the admin's file */
	struct protocol_sched sched; /* the caller's scheduling, for the job */
	int early; /* the child was forked as we waited: its environment comes by go */
};

/*
 * A child forked while we wait in the broker's line (prespawn: the broker
 * places it meanwhile) learns its environment, which the grant decides,
 * down the go socket (protocol_send_strings), then the go.  Nothing comes
 * if we die first.
 */

/* In the child: wait for the go, then become the job.  Never returns. */
static void child_exec(struct run *r, int lease_fd)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM};
	int err;

	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		signal(sigs[i], SIG_DFL);
	char **vars = r->env.vars;

	protocol_sched_restore(&r->sched);
	close(r->go[1]);
	if ((r->early && !(vars = protocol_receive_strings(r->go[0]))) ||
	    protocol_await_go(r->go[0]) < 0)
		_exit(EXIT_FAIL); /* gpuman died before the lease was ours */
	close(r->go[0]);
	/* Keep the lease's descriptor across exec: the job holds its lease. */
	if (lease_fd >= 0)
		fcntl(lease_fd, F_SETFD, 0);
	execvpe(r->argv[0], r->argv, vars);
	err = errno;
	fprintf(stderr, "gpuman run: cannot run '%s': %s\n", r->argv[0],
	        cli_exec_why(r->argv[0], err));
	_exit(err == ENOENT ? 127 : 126);
}

static int start_child(struct run *r, int lease_fd, char *err, size_t len)
{
	/* A socket pair rather than a pipe: a job that was killed as it
	 * waited is a failed send, not a SIGPIPE (protocol_send_strings). */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, r->go) < 0) {
		snprintf(err, len, "socketpair: %s", strerror(errno));
		return -1;
	}
	r->pid = fork();
	if (r->pid < 0) {
		snprintf(err, len, "fork: %s", strerror(errno));
		close(r->go[0]);
		close(r->go[1]);
		return -1;
	}
	if (r->pid == 0)
		child_exec(r, lease_fd);
	close(r->go[0]);
	return 0;
}

static void prespawn_drop(void *data);

/* The registry calls this under its lock, with the GPUs chosen. */
static int spawn_for_lease(void *data, const struct gm_lease *lease, pid_t *job_pid, char *err,
                           size_t len)
{
	struct run *r = data;
	struct protocol_job job = {0};
	int placed = lease->placed;

	job.cuda_visible = gm_lease_cuda_visible(lease);
	job.gpus = gm_lease_indices(lease);
	job.lease_id = gm_lease_id(lease);
	job.share = !lease->rec.exclusive;
	job.mem_fraction = gm_lease_mem_fraction(lease);
	job.no_framework_env = r->cli->no_framework_env;
	if (protocol_job_env(&r->env, &job) < 0) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	/* The job forked as we waited was killed meanwhile: another, as
	 * without (and placed as without). */
	if (r->pid > 0 && waitpid(r->pid, NULL, WNOHANG) == r->pid) {
		close(r->go[1]);
		r->go[1] = -1;
		r->pid = r->early = placed = 0;
	} else if (r->pid > 0 && protocol_send_strings(r->go[1], r->env.vars) < 0) {
		prespawn_drop(r);
		placed = 0;
	}
	if (r->pid <= 0 && start_child(r, gm_lease_fd(lease), err, len) < 0)
		return -1;
	/* Into its lease's cgroup while it waits for the go (unless the broker
	 * placed it as we waited): its first instruction already runs fenced.
	 * Refused, it never runs. */
	if (lease->broker && !placed && broker_fence(lease, r->pid, 0, err, len) < 0) {
		close(r->go[1]);
		r->go[1] = -1;
		waitpid(r->pid, NULL, 0);
		r->pid = 0;
		return -1;
	}
	*job_pid = r->pid;
	return 0;
}

/* The broker will place a waiter's job while it waits: fork it now (it
 * waits for its environment and the go), holding fd, the lease-to-be. */
static pid_t prespawn_job(void *data, int fd)
{
	struct run *r = data;
	char err[256];

	r->early = 1;
	if (start_child(r, fd, err, sizeof err) < 0) {
		r->early = 0;
		r->pid = 0;
		return -1;
	}
	return r->pid;
}

/* The early child ends: no lease for it after all (or a lost connection). */
static void prespawn_drop(void *data)
{
	struct run *r = data;

	if (r->pid <= 0)
		return;
	close(r->go[1]);
	r->go[1] = -1;
	kill(r->pid, SIGKILL);
	waitpid(r->pid, NULL, 0);
	r->pid = 0;
	r->early = 0;
}

/* Once, as the wait begins: for what, and why it waits (the rules' reason,
 * per GPU or for all; none where it queued on sight of a line). */
static void tell_waiting(void *data, const char *why)
{
	struct run *r = data;

	cli_say_waiting("run", r->argv[0], why);
}

static void tell_lock_wait(void *data, const char *who)
{
	(void)data;
	fprintf(stderr, "gpuman run: waiting: %s\n", who);
}

/* Wait for the job; its status becomes ours (128+N if killed by signal N). */
static int wait_child(struct run *r)
{
	int status;

	child_pid = r->pid;
	if (protocol_give_go(r->go[1]) < 0)
		kill(r->pid, SIGKILL);
	close(r->go[1]);
	if (r->limit_ms > 0) {
		struct itimerval t = {
		    {0, 0},
		    {(time_t)(r->limit_ms / 1000), (suseconds_t)(r->limit_ms % 1000) * 1000}};

		setitimer(ITIMER_REAL, &t, NULL);
	}
	/* What the job orphans comes to us (a subreaper): reap it as it ends. */
	for (pid_t got; (got = waitpid(-1, &status, 0)) != r->pid;)
		if (got < 0 && errno != EINTR) {
			jobtree_kill_children(NULL, 0);
			return EXIT_FAIL;
		}
	child_pid = 0;
	alarm(0);
	jobtree_kill_children(NULL, 0);
	if (limit_hit) {
		char limit[32];

		duration_text(limit, sizeof limit, r->limit_ms);
		fprintf(stderr,
		        "gpuman: job ended: lease limit %s of %s reached (max_lease in %s); its "
		        "processes got SIGTERM%s\n",
		        limit, r->conf, r->limit_from,
		        protocol_exit_status(status) == 128 + SIGKILL
		            ? ", then SIGKILL " TEXT(PROTOCOL_CANCEL_GRACE_S) " s later"
		            : "");
		return EXIT_LEASE_LIMIT;
	}
	return protocol_exit_status(status);
}

static int run_on_cpu(struct run *r, const char *why)
{
	struct protocol_job cpu = {.cuda_visible = "", .gpus = ""};
	char err[256];

	fprintf(stderr, "gpuman run: %s; running '%s' on the CPU (--fallback cpu)\n", why,
	        r->argv[0]);
	if (protocol_job_env(&r->env, &cpu) < 0) {
		return cli_error(r->cli, EXIT_FAIL, "out of memory");
	}
	if (start_child(r, -1, err, sizeof err) < 0)
		return cli_error(r->cli, EXIT_FAIL, "%s", err);
	return wait_child(r);
}

static int run_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_OPTIONS, CLI_SELECT_OPTIONS, CLI_RESERVE_OPTIONS, {0}};
	struct run r = {.cli = cli, .go = {-1, -1}};
	struct acquire_opts opts = {0};
	struct gm_context *ctx = NULL;
	struct registry *reg = NULL;
	struct gm_lease *lease = NULL;
	char err[GM_ERRBUF_SIZE], *explain = NULL, cmdline[256] = "";
	enum gm_err rc;
	int status;

	status = cli_parse(cli, &cmd_run, argc, argv, "+" CLI_SELECT_SHORT, longopts, NULL, NULL);
	if (status != CLI_CONTINUE)
		return status;
	if (optind >= argc)
		return cli_usage(cli, "no command to run (gpuman run [OPTIONS] -- CMD [ARG...])");
	r.argv = argv + optind;
	for (char **a = r.argv; *a; a++) {
		size_t used = strlen(cmdline);

		snprintf(cmdline + used, sizeof cmdline - used, "%s%s", a == r.argv ? "" : " ", *a);
	}
	if (child_env_init(&r.env) < 0)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	install_signals();
	jobtree_subreaper();
	protocol_sched_short(&r.sched);

	rc = gm_open(&ctx, err, sizeof err);
	if (rc != GM_OK) {
		/* No driver, or one that does not work: the CPU.  A malformed
		 * scenario is a mistake to fix, not a machine without GPUs. */
		int no_gpu = rc == GM_ERR_NVML_LOAD || rc == GM_ERR_NVML;

		status = cli->fallback_cpu && no_gpu
		             ? run_on_cpu(&r, err)
		             : cli_error(cli, EXIT_FAIL, "%s%s", err,
		                         rc == GM_ERR_NVML_LOAD ? "; no NVIDIA driver here? add "
		                                                  "--fallback cpu to run on the CPU"
		                                                : "");
		goto done;
	}
	rc = registry_open(&reg, err, sizeof err);
	if (rc != GM_OK) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	opts.command = cmdline;
	opts.spawn = spawn_for_lease;
	opts.prespawn = prespawn_job;
	opts.prespawn_drop = prespawn_drop;
	opts.spawn_data = &r;
	opts.interrupted = &interrupted;
	opts.on_wait = tell_waiting;
	opts.on_wait_data = &r;
	opts.on_lock_wait = tell_lock_wait;
	rc = registry_acquire(reg, ctx, cli->req, &opts, &lease, &explain, err, sizeof err);
	switch (rc) {
	case GM_OK:
		r.conf = reg->cfg.system_path;
		r.limit_ms = config_max_lease_ms(&reg->cfg, (unsigned)getuid(), r.limit_from,
		                                 sizeof r.limit_from);
		if (lease->note[0])
			fprintf(stderr, "gpuman run: note: %s\n", lease->note);
		if (isatty(STDERR_FILENO) && cli->req->mig[0])
			fprintf(stderr, "gpuman run: MIG slice %s of GPU %s leased\n",
			        gm_lease_cuda_visible(lease), gm_lease_indices(lease));
		else if (isatty(STDERR_FILENO))
			fprintf(stderr, "gpuman run: GPU %s leased (%s)\n", gm_lease_indices(lease),
			        lease->rec.exclusive ? "exclusive" : "memory share");
		status = wait_child(&r);
		break;
	case GM_ERR_UNAVAILABLE:
	case GM_ERR_NEVER:
	case GM_ERR_TIMEOUT:
		if (cli->fallback_cpu) {
			status = run_on_cpu(&r, err);
			break;
		}
		status = cli_error(cli, EXIT_UNAVAILABLE, "%s%s%s%s", err,
		                   rc == GM_ERR_UNAVAILABLE ? " (add --wait to queue for it)" : "",
		                   explain && *cli_explained(explain) ? ":\n" : "",
		                   cli_explained(explain));
		break;
	case GM_ERR_INTERRUPTED:
		status = cli_error(cli, 128 + SIGINT, "%s", err);
		break;
	default:
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		break;
	}
done:
	gm_lease_release(lease);
	free(explain);
	registry_close(reg);
	gm_close(ctx);
	child_env_release(&r.env);
	return status;
}

const struct cmd_entry cmd_run = {
    "run",
    "lease GPUs and run a command on them",
    "usage: gpuman run [SELECT] [RESERVE] [--no-framework-env] -- CMD [ARG...]\n"
    "\n"
    "Choose GPUs, lease them (no other gpuman launch can take them, even one a\n"
    "millisecond later), and run CMD without a shell.  CMD gets:\n"
    "  CUDA_VISIBLE_DEVICES  the leased GPUs as UUIDs (or, inside a Slurm job or\n"
    "                        container, the inherited entries), which CUDA cannot\n"
    "                        misread whatever its device order\n"
    "  GPUMAN_GPUS           their NVML indices (as nvidia-smi numbers them)\n"
    "  GPUMAN_LEASE          the lease id\n"
    "With --mem, frameworks are told to stay within the share:\n"
    "TF_FORCE_GPU_ALLOW_GROWTH=true, XLA_PYTHON_CLIENT_PREALLOCATE=false and\n"
    "XLA_CLIENT_MEM_FRACTION (values you set win; --no-framework-env: none).\n"
    "\n"
    "The lease lasts as long as CMD, even if gpuman is killed; signals sent to\n"
    "gpuman reach CMD; gpuman exits with CMD's status (128+N if killed by signal N).\n"
    "Processes CMD leaves running when it exits are killed before the lease ends.\n"
    "An admin's max_lease (gpuman.conf) ends CMD whole once it has held its GPUs\n"
    "that long: SIGTERM, SIGKILL 10 s later, what it left killed; exit 124 then.\n"
    "CMD runs with your nice and time slice; gpuman itself asks for a short time\n"
    "slice (Linux 6.12+), so that a freed GPU passes on soon on a busy machine.\n"
    "\n" SELECT_HELP "\n" RESERVE_HELP "\n"
    "Without --wait, exit 75 if nothing fits now.  Waiters are served first come,\n"
    "first served: a request waiting for 4 GPUs is not overtaken by later ones.\n"
    "\n"
    "examples:\n"
    "  gpuman run -- python train.py --lr 3e-4\n"
    "  gpuman run -n 2 --wait=2h -- torchrun --nproc-per-node 2 train.py\n"
    "  gpuman run --mem 8G --wait -- python eval.py\n",
    run_exec,
    NULL,
};
