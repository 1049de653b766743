/*
 * cmd_reserve.c - `gpuman reserve` and `gpuman release`: GPUs held for a
 * user's interactive work (a notebook, a debugger) for a stated time, with
 * no process of theirs holding the lease.  The registry records it as a
 * resv.<id> file (registry.h), the broker in its memory and state file;
 * both end it at its expiry or at `gpuman release`.  Built on the public
 * gm_reserve and gm_release_reservation (lib/reserve_api.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "gpuman-internal.h"
#include "protocol.h"
#include "select_help.h"

enum { OPT_FOR = OPT_CMD_BASE, OPT_RELEASE, OPT_SHELL, OPT_ENTER };

struct reserve_args {
	int64_t for_ms;       /* 0: not given */
	const char *for_text; /* as given, for gm_reserve */
	const char *release;
	const char *enter;
	int shell;
};

static int reserve_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct reserve_args *a = data;
	char err[128];

	if (opt == OPT_RELEASE) {
		a->release = arg;
		return CLI_CONTINUE;
	}
	if (opt == OPT_SHELL) {
		a->shell = 1;
		return CLI_CONTINUE;
	}
	if (opt == OPT_ENTER) {
		a->enter = arg;
		return CLI_CONTINUE;
	}
	if (opt != OPT_FOR)
		return -1;
	if (parse_duration_ms(arg, &a->for_ms, err, sizeof err) < 0 || a->for_ms <= 0)
		return cli_usage(cli, "--for '%s': %s (a duration such as 90m or 4h)", arg,
		                 a->for_ms <= 0 && !err[0] ? "must be more than 0" : err);
	a->for_text = arg;
	return CLI_CONTINUE;
}

static int release_id(struct cli *cli, const char *id)
{
	char err[GM_ERRBUF_SIZE];

	if (gm_release_reservation(id, err, sizeof err) != GM_OK)
		return cli_error(cli, EXIT_FAIL, "%s", err);
	if (cli->json) {
		json_t *o = json_object();

		json_object_set_new(o, "released", json_string(id));
		return cli_print_json(o);
	}
	fprintf(stderr, "gpuman: reservation %s released\n", id);
	return EXIT_OK;
}

/* The shell that evals our lines places itself with this one (its own
 * $$, however it ran us), under the broker only: see reserve_enter. */
static void print_enter(const char *id)
{
	char self[PATH_MAX], path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);

	if (n <= 0 || !broker_wanted(path, sizeof path))
		return;
	self[n] = '\0';
	if (strchr(self, '\''))
		return; /* no quoting it for every shell: unfenced, as before */
	printf("'%s' reserve --enter %s $$\n", self, id);
}

static void print_reserved(struct cli *cli, const struct gm_reservation *r, int64_t for_ms,
                           int enter)
{
	int64_t until = gm_reservation_expires_ms(r);
	char when[32] = "?", dur[32];
	time_t t = (time_t)(until / 1000);
	const char *id = gm_reservation_id(r);
	struct tm tm;

	duration_text(dur, sizeof dur, for_ms);
	if (localtime_r(&t, &tm))
		strftime(when, sizeof when, "%H:%M:%S", &tm);
	if (cli->json) {
		json_t *o = json_object(), *gpus = json_array();

		for (size_t i = 0; i < gm_reservation_gpu_count(r); i++) {
			json_t *g = json_object();

			json_object_set_new(g, "index",
			                    json_integer(gm_reservation_gpu_index(r, i)));
			json_object_set_new(g, "uuid", json_string(gm_reservation_gpu_uuid(r, i)));
			json_array_append_new(gpus, g);
		}
		json_object_set_new(o, "id", json_string(id));
		json_object_set_new(o, "gpus", gpus);
		json_object_set_new(o, "cuda_visible_devices",
		                    json_string(gm_reservation_cuda_visible(r)));
		json_object_set_new(o, "expires_ms", json_integer(until));
		cli_print_json(o);
		return;
	}
	/* stdout is for the shell (eval "$(gpuman reserve ...)"); people read
	 * stderr. */
	printf("export CUDA_VISIBLE_DEVICES=%s\n", gm_reservation_cuda_visible(r));
	printf("export GPUMAN_GPUS=%s\n", gm_reservation_indices(r));
	printf("export GPUMAN_RESERVATION=%s\n", id);
	if (enter)
		print_enter(id);
	fprintf(stderr,
	        "gpuman reserve: GPU %s reserved for %s (until %s), id %s\n"
	        "  use it: eval \"$(gpuman reserve ...)\" sets the lines above in your shell;\n"
	        "  then your programs see only these GPUs, and gpuman run places jobs on them\n"
	        "  end it early: gpuman release %s\n",
	        gm_reservation_indices(r), dur, when, id, id);
}

/*
 * --shell: a shell (or cmd) with the reservation's environment, placed by
 * the broker in the reservation's cgroup before it runs, so that it and
 * everything it starts can open only the reserved GPUs; the reservation
 * ends when it exits, and its end (expiry, gpuman release) ends whatever
 * is left of it.
 */
/* As the wait begins (--wait): why, as run says it. */
static void tell_waiting(void *data, const char *why)
{
	(void)data;
	cli_say_waiting("reserve", NULL, why);
}

static int reserve_shell(struct cli *cli, const struct gm_reservation *r, char **cmd)
{
	const char *id = gm_reservation_id(r), *sh = getenv("SHELL");
	char *fallback[] = {(char *)(sh && *sh ? sh : "/bin/sh"), NULL};
	char path[PATH_MAX], err[GM_ERRBUF_SIZE];
	struct child_env env = CHILD_ENV_INIT;
	int go[2], status = 0, rc;
	pid_t pid;

	if (!cmd || !cmd[0])
		cmd = fallback;
	if (child_env_init(&env) < 0 ||
	    child_env_set(&env, "CUDA_VISIBLE_DEVICES", gm_reservation_cuda_visible(r), 1) < 0 ||
	    child_env_set(&env, "GPUMAN_GPUS", gm_reservation_indices(r), 1) < 0 ||
	    child_env_set(&env, "GPUMAN_RESERVATION", id, 1) < 0 || pipe2(go, O_CLOEXEC) < 0) {
		child_env_release(&env);
		gm_release_reservation(id, NULL, 0);
		return cli_error(cli, EXIT_FAIL, "cannot start the shell: %s", strerror(errno));
	}
	pid = fork();
	if (pid == 0) {
		char c;

		close(go[1]);
		/* Not before the broker has placed us (or said it places nobody). */
		if (read(go[0], &c, 1) != 1)
			_exit(EXIT_FAIL);
		execvpe(cmd[0], cmd, env.vars);
		int why = errno;

		fprintf(stderr, "gpuman reserve: cannot run '%s': %s\n", cmd[0],
		        cli_exec_why(cmd[0], why));
		_exit(why == ENOENT ? 127 : 126);
	}
	close(go[0]);
	child_env_release(&env);
	rc = pid < 0 ? -1 : 0;
	if (rc == 0 && broker_wanted(path, sizeof path))
		rc = broker_fence_reservation(path, id, pid, 0, err, sizeof err);
	else if (rc < 0)
		snprintf(err, sizeof err, "fork: %s", strerror(errno));
	if (rc >= 0 && write(go[1], "g", 1) != 1)
		rc = -1;
	close(go[1]);
	while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	gm_release_reservation(id, NULL, 0);
	if (rc < 0)
		return cli_error(cli, EXIT_FAIL, "reservation %s: the shell did not start: %s", id,
		                 err);
	return protocol_exit_status(status);
}

/*
 * --enter ID [PID]: the line reserve prints for eval under the broker.
 * The shell that evals it (PID, its $$; default our parent) is placed by
 * the broker (root) in reservation ID's cgroup as its keeper: it and what
 * it starts from then on open only the reserved GPUs; at the
 * reservation's end (expiry, gpuman release) it goes back where it was,
 * alive, and what it started meanwhile is ended, as with --shell.
 */
static int reserve_enter(struct cli *cli, const char *id, const char *pid_text)
{
	char path[PATH_MAX], err[GM_ERRBUF_SIZE], *end = NULL;
	long pid = pid_text ? strtol(pid_text, &end, 10) : (long)getppid();

	if (pid_text && (!*pid_text || *end || pid <= 1 || pid > INT_MAX))
		return cli_usage(cli, "--enter %s '%s': no process id (the shell's $$)", id,
		                 pid_text);
	if (!broker_wanted(path, sizeof path))
		return EXIT_OK; /* the daemonless registry fences nobody */
	if (broker_fence_reservation(path, id, (int)pid, 1, err, sizeof err) < 0)
		return cli_error(cli, EXIT_FAIL,
		                 "reservation %s: your shell (pid %ld) is not fenced: %s", id, pid,
		                 err);
	return EXIT_OK;
}

static int reserve_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS,
	                                         CLI_SELECT_OPTIONS,
	                                         {"exclusive", no_argument, NULL, OPT_EXCLUSIVE},
	                                         {"mem", required_argument, NULL, OPT_MEM},
	                                         {"idle", no_argument, NULL, OPT_IDLE},
	                                         {"wait", optional_argument, NULL, OPT_WAIT},
	                                         {"for", required_argument, NULL, OPT_FOR},
	                                         {"release", required_argument, NULL, OPT_RELEASE},
	                                         {"shell", no_argument, NULL, OPT_SHELL},
	                                         {"enter", required_argument, NULL, OPT_ENTER},
	                                         {0}};
	struct reserve_args args = {0, NULL, NULL, NULL, 0};
	struct gm_context *ctx = NULL;
	struct gm_reservation *resv = NULL;
	char err[GM_ERRBUF_SIZE] = "";
	const char *why;
	enum gm_err rc;
	int status;

	status = cli_parse(cli, &cmd_reserve, argc, argv, CLI_SELECT_SHORT, longopts,
	                   reserve_option, &args);
	if (status != CLI_CONTINUE)
		return status;
	if (args.enter) {
		if (optind + 1 < argc)
			return cli_usage(cli, "unexpected argument '%s'", argv[optind + 1]);
		return reserve_enter(cli, args.enter, optind < argc ? argv[optind] : NULL);
	}
	if (optind < argc && !args.shell)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	if (args.release)
		return release_id(cli, args.release);
	if (!args.for_ms)
		return cli_usage(cli, "say how long with --for DURATION (e.g. --for 4h); a "
		                      "reservation always ends");
	if (cli->req->mig[0])
		return cli_usage(cli, "--mig: MIG slices cannot be reserved yet; reserve the GPU");
	rc = gm_open(&ctx, err, sizeof err);
	if (rc == GM_OK)
		rc = reserve_telling(ctx, cli->req, args.for_text, tell_waiting, NULL, &resv, err,
		                     sizeof err);
	/* gm_reserve appends the per-GPU reasons after ":\n"; the advice to
	 * wait belongs to the first line. */
	why = strstr(err, ":\n");
	switch (rc) {
	case GM_OK:
		print_reserved(cli, resv, args.for_ms, !args.shell);
		status = args.shell ? reserve_shell(cli, resv, argv + optind) : EXIT_OK;
		break;
	case GM_ERR_UNAVAILABLE:
		status = cli_error(cli, EXIT_UNAVAILABLE, "%.*s (add --wait to queue for it)%s",
		                   why ? (int)(why - err) : (int)strlen(err), err, why ? why : "");
		break;
	case GM_ERR_NEVER:
	case GM_ERR_TIMEOUT:
		status = cli_error(cli, EXIT_UNAVAILABLE, "%s", err);
		break;
	case GM_ERR_INVALID:
		status = cli_error(cli, EXIT_USAGE, "%s", err);
		break;
	default:
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		break;
	}
	gm_reservation_free(resv);
	gm_close(ctx);
	return status;
}

static int release_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS, {0}};
	int status = cli_parse(cli, &cmd_release, argc, argv, "", longopts, NULL, NULL);

	if (status != CLI_CONTINUE)
		return status;
	if (optind + 1 != argc)
		return cli_usage(cli, "name one reservation: gpuman release ID");
	return release_id(cli, argv[optind]);
}

const struct cmd_entry cmd_reserve = {
    "reserve",
    "hold GPUs for interactive work for a while (a notebook, a debugger)",
    "usage: gpuman reserve --for DURATION [SELECT] [--mem SIZE | --exclusive]\n"
    "                      [--idle] [--wait[=DURATION]] [--json] [--sim FILE]\n"
    "       gpuman reserve --release ID       (the same as gpuman release ID)\n"
    "       gpuman reserve --enter ID [PID]   (the line eval runs under the broker)\n"
    "\n"
    "Lease GPUs to you for DURATION (90m, 4h) with no process holding them: no\n"
    "other user's run, batch, queue or reserve is given them until the time is\n"
    "up or you release them.  Prints the environment to use them, as shell\n"
    "lines on stdout (so that eval takes them) and in words on stderr:\n"
    "  export CUDA_VISIBLE_DEVICES=GPU-...   the reserved GPUs, by UUID\n"
    "  export GPUMAN_GPUS=0,1                their NVML indices\n"
    "  export GPUMAN_RESERVATION=ID          the id to release it with\n"
    "  'gpuman' reserve --enter ID $$        under the broker: your shell is fenced\n"
    "Your own programs started with that CUDA_VISIBLE_DEVICES use them.  With\n"
    "GPUMAN_RESERVATION set, your gpuman run, batch and library calls lease\n"
    "inside the reservation: its GPUs count as yours, not as taken (two runs\n"
    "there still never share a GPU unasked).  gpuman status shows it with the\n"
    "time left; gpuman waste flags it when its GPUs stay idle.\n"
    "\n"
    "  --for DURATION  how long (required; the admin's max_reserve may cap it)\n"
    "  --release ID    end reservation ID now\n"
    "  --enter ID [PID]  place the shell PID (default: the caller) in reservation\n"
    "                  ID: under the broker (root) it and all it starts from then\n"
    "                  on open only the reserved GPUs; at the reservation's end it\n"
    "                  goes on and what it started ends (the line eval runs)\n"
    "  --shell [-- CMD]  then start $SHELL (or CMD) with those lines set; under\n"
    "                  the broker (root) it and all it starts can open only the\n"
    "                  reserved GPUs; the reservation ends when it exits\n"
    "  --json          the id, GPUs, CUDA_VISIBLE_DEVICES and expires_ms\n"
    "\n" SELECT_HELP "\n"
    "Exit 0 reserved; 75 nothing fits now (add --wait) or within the wait;\n"
    "2 --for missing or longer than max_reserve; 1 any other error.\n"
    "\n"
    "examples:\n"
    "  eval \"$(gpuman reserve -n 2 --for 4h)\"; jupyter lab\n"
    "  gpuman reserve --mem 16G --for 90m --wait=10m\n"
    "  gpuman release \"$GPUMAN_RESERVATION\"\n",
    reserve_exec,
    NULL,
};

const struct cmd_entry cmd_release = {
    "release",
    "end one of your reservations before it expires",
    "usage: gpuman release ID [--json]\n"
    "\n"
    "End reservation ID (gpuman reserve) now; its GPUs go to the next in line.\n"
    "Only its owner (or root) can release it.  Exit 0 released; 1 no such\n"
    "reservation (expired?) or another user's.\n"
    "\n"
    "example:\n"
    "  gpuman release \"$GPUMAN_RESERVATION\"\n",
    release_exec,
    NULL,
};
