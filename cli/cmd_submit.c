/*
 * cmd_submit.c - `gpuman submit [SELECT] [RESERVE] -- CMD [ARG...]`: put a
 * command in the user's persistent queue, with its working directory and
 * environment, and make sure a dispatcher runs.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "gpuman-internal.h"
#include "engine.h"
#include "jobs.h"
#include "notify.h"
#include "select_help.h"
#include "submit_slurm.h"

extern char **environ;

enum {
	OPT_RETRIES = OPT_CMD_BASE,
	OPT_NAME,
	OPT_AFTER,
	OPT_PRIORITY,
	OPT_NOTIFY,
	OPT_TIME,
	OPT_ARRAY,
	OPT_WRAP,
	OPT_DEPENDENCY,
	OPT_GRES
};

#define NAME_MAX_LEN 64

#define PRIORITY_MAX 1000
#define AFTER_MAX 64

struct submit_opts {
	unsigned retries;
	const char *name;
	int priority;
	char after[AFTER_MAX * 21]; /* "3,4": the ids as given, checked */
	int64_t after_ids[AFTER_MAX];
	size_t nafter;
	int notify;             /* --notify given */
	const char *notify_how; /* its =HOW; NULL: the default */
	long long time_limit;   /* --time, seconds; 0 none */
	int *tasks;             /* --array: the task numbers; NULL: one job */
	size_t ntasks;
	int array_limit;  /* --array ...%K */
	const char *wrap; /* --wrap LINE: run through /bin/sh -c */
	int shell;        /* the command is one line for /bin/sh -c */
};

/* --after ID[,ID]: job ids, at most AFTER_MAX; may be given more than once. */
static int parse_after(struct cli *cli, const char *arg, struct submit_opts *o)
{
	const char *p = arg;

	if (!*p)
		return cli_usage(cli, "--after '': name the jobs to wait for (--after 3,4)");
	while (*p) {
		size_t l = strcspn(p, ",");
		char word[32];
		int64_t id;

		snprintf(word, sizeof word, "%.*s",
		         (int)(l < sizeof word - 1 ? l : sizeof word - 1), p);
		id = parse_job_id(word);
		if (id < 0 || l >= sizeof word - 1)
			return cli_usage(cli, "--after '%s': '%s' is not a job id", arg, word);
		if (o->nafter == AFTER_MAX)
			return cli_usage(cli, "--after: at most %d jobs", AFTER_MAX);
		o->after_ids[o->nafter++] = id;
		p += l;
		p += *p == ',';
	}
	return CLI_CONTINUE;
}

/* Slurm's --dependency=afterok:ID[:ID][,afterok:ID...]: every job must
 * succeed first, which is --after.  Slurm's other kinds (afterany,
 * afternotok, singleton, '?' for any of them) mean something --after does
 * not, so they are refused rather than read as it. */
static int parse_dependency(struct cli *cli, const char *arg, struct submit_opts *o)
{
	char *list = strdup(arg), *item, *save = NULL;
	int rc = CLI_CONTINUE;

	if (!list)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	if (strchr(arg, '?') || !*arg)
		rc = cli_usage(cli,
		               "--dependency '%s': only afterok:ID[:ID] (all must succeed) is "
		               "gpuman's --after; '?' (any of them) has no equal",
		               arg);
	for (item = strtok_r(list, ",", &save); item && rc == CLI_CONTINUE;
	     item = strtok_r(NULL, ",", &save)) {
		char *ids = strchr(item, ':');

		if (!ids || (size_t)(ids - item) != 7 || strncmp(item, "afterok", 7)) {
			rc =
			    cli_usage(cli,
			              "--dependency '%s': only afterok:ID[:ID] is supported (it is "
			              "--after ID,ID); '%.*s' means something else",
			              arg, (int)strcspn(item, ":"), item);
			break;
		}
		for (char *c = ids; *c; c++)
			if (*c == ':')
				*c = ',';
		rc = parse_after(cli, ids + 1, o);
	}
	free(list);
	return rc;
}

/* --gres=gpu:N (Slurm's spelling, without --slurm): N GPUs, as -n N.  A
 * GPU type (gpu:a100:2) is Slurm's to choose; here GPUs are chosen by
 * --by, --min-free and --only, so a type is refused, not ignored. */
static int parse_gres(struct cli *cli, const char *arg)
{
	const char *n = "1";
	char err[GM_ERRBUF_SIZE];

	if (strncmp(arg, "gpu", 3) || (arg[3] && arg[3] != ':'))
		return cli_usage(cli, "--gres '%s': only gpu or gpu:N (N GPUs, as -n N) here", arg);
	if (arg[3] == ':')
		n = arg + 4;
	if (strchr(n, ':') || strspn(n, "0123456789") != strlen(n) || !*n)
		return cli_usage(cli,
		                 "--gres '%s': a GPU type is Slurm's to choose (submit --slurm "
		                 "--gres=%s); here give gpu:N, with --only or --min-free to choose",
		                 arg, arg);
	if (gm_request_set(cli->req, "n", n, err, sizeof err) != GM_OK)
		return cli_usage(cli, "--gres '%s': %s", arg, err);
	return CLI_CONTINUE;
}

/* A name is for people and for `queue`: printable, no blanks, short. */
static int check_name(struct cli *cli, const char *name)
{
	size_t len = strlen(name);

	if (!len)
		return cli_usage(cli, "--name '': give the job a name, or leave --name out");
	if (len > NAME_MAX_LEN)
		return cli_usage(cli, "--name '%.20s...': too long (%zu bytes; at most %d)", name,
		                 len, NAME_MAX_LEN);
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if (*p <= ' ' || *p == 0x7f)
			return cli_usage(
			    cli, "--name '%s': no spaces or control characters (use - or _)", name);
	return CLI_CONTINUE;
}

/* Each --after job exists and has not failed; its ids into o->after. */
static int check_after(struct cli *cli, struct queue *q, struct submit_opts *o)
{
	char err[GM_ERRBUF_SIZE];
	size_t used = 0;

	for (size_t i = 0; i < o->nafter; i++) {
		struct job dep;
		enum gm_err rc = jobstore_get(q->store, o->after_ids[i], 0, &dep, err, sizeof err);
		enum job_state state = dep.state;

		if (rc == GM_ERR_NOT_FOUND)
			return cli_usage(cli, "--after %lld: no job %lld in your queue",
			                 (long long)o->after_ids[i], (long long)o->after_ids[i]);
		if (rc != GM_OK)
			return cli_error(cli, EXIT_FAIL, "%s", err);
		job_release(&dep);
		if (job_state_final(state) && state != JOB_DONE)
			return cli_usage(
			    cli, "--after %lld: job %lld has %s; a job after it could never start",
			    (long long)o->after_ids[i], (long long)o->after_ids[i],
			    state == JOB_CANCELLED ? "been cancelled" : job_state_name(state));
		used += (size_t)snprintf(o->after + used, sizeof o->after - used, "%s%lld",
		                         used ? "," : "", (long long)o->after_ids[i]);
	}
	return EXIT_OK;
}

static int submit_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct submit_opts *o = data;
	char err[256];

	switch (opt) {
	case OPT_RETRIES:
		if (!strcmp(arg, "0")) {
			o->retries = 0;
			return CLI_CONTINUE;
		}
		if (parse_count(arg, &o->retries, err, sizeof err) < 0)
			return cli_usage(cli, "--retries '%s': %s", arg, err);
		return CLI_CONTINUE;
	case OPT_NAME:
	case 'J':
		o->name = arg;
		return check_name(cli, arg);
	case OPT_NOTIFY:
		o->notify = 1;
		o->notify_how = arg;
		return CLI_CONTINUE;
	case OPT_AFTER:
		return parse_after(cli, arg, o);
	case OPT_DEPENDENCY:
		return parse_dependency(cli, arg, o);
	case OPT_GRES:
		return parse_gres(cli, arg);
	case OPT_WRAP:
		o->wrap = arg;
		return CLI_CONTINUE;
	case OPT_ARRAY:
		free(o->tasks);
		if (parse_array_spec(arg, &o->tasks, &o->ntasks, &o->array_limit, err, sizeof err) <
		    0)
			return cli_usage(cli, "%s", err);
		return CLI_CONTINUE;
	case OPT_TIME:
	case 't':
		if (parse_time_limit(opt == 't' ? "-t" : "--time", arg, opt == 't', &o->time_limit,
		                     err, sizeof err) < 0)
			return cli_usage(cli, "%s", err);
		return CLI_CONTINUE;
	case OPT_PRIORITY: {
		char *end;
		long v;

		errno = 0;
		v = strtol(arg, &end, 10);
		if (errno || end == arg || *end || v < -PRIORITY_MAX || v > PRIORITY_MAX)
			return cli_usage(cli, "--priority '%s': a whole number from -%d to %d", arg,
			                 PRIORITY_MAX, PRIORITY_MAX);
		o->priority = (int)v;
		return CLI_CONTINUE;
	}
	default:
		return -1;
	}
}

/* The command for people: words joined, quoted where a shell would need it. */
static char *display_command(char **argv)
{
	size_t need = 1;
	char *out, *p;

	for (char **a = argv; *a; a++)
		need += strlen(*a) * 4 + 3;
	out = p = malloc(need);
	if (!out)
		return NULL;
	for (char **a = argv; *a; a++) {
		int quote = !**a || strpbrk(*a, " \t\n'\"\\$`|&;<>()*?[]#~{}!") != NULL;

		if (a != argv)
			*p++ = ' ';
		if (quote)
			*p++ = '\'';
		for (const char *c = *a; *c; c++) {
			if (quote && *c == '\'') {
				memcpy(p, "'\\''", 4);
				p += 4;
			} else {
				*p++ = *c;
			}
		}
		if (quote)
			*p++ = '\'';
	}
	*p = '\0';
	return out;
}

#define TASK_VAR "GPUMAN_ARRAY_TASK_ID="
#define CHECK_STANDS_MS 60000

/* The environment as NAME=VALUE\0...; an array task's number (task >= 0)
 * in GPUMAN_ARRAY_TASK_ID. */
static char *env_block(size_t *len, int task)
{
	size_t need = 32;
	char *block, *p;

	for (char **e = environ; *e; e++)
		need += strlen(*e) + 1;
	block = p = malloc(need + 1);
	if (!block)
		return NULL;
	for (char **e = environ; *e; e++) {
		size_t l = strlen(*e) + 1;

		if (task >= 0 && !strncmp(*e, TASK_VAR, strlen(TASK_VAR)))
			continue;
		memcpy(p, *e, l);
		p += l;
	}
	if (task >= 0)
		p += sprintf(p, TASK_VAR "%d", task) + 1;
	*len = (size_t)(p - block);
	return block;
}

/*
 * Insert the job, or one job per --array task: {task} in its arguments
 * becomes the task's number, as does GPUMAN_ARRAY_TASK_ID, and --name
 * gets _<task>.  One transaction (the caller's): all of them or none.
 * The ids go to ids[] (ntasks of them, or one).
 */
static enum gm_err insert_jobs(struct queue *q, struct job *job, const struct submit_opts *o,
                               char **cmd, int64_t *ids, char *err, size_t len)
{
	enum gm_err rc = GM_OK;

	if (!o->tasks) {
		rc = jobstore_insert(q->store, job, err, len);
		ids[0] = job->id;
		return rc;
	}
	for (size_t t = 0; t < o->ntasks && rc == GM_OK; t++) {
		struct job tj = *job;
		int task = o->tasks[t];
		size_t argc = 0;
		char **targv, name[NAME_MAX_LEN + 16];
		json_t *jargv = json_array();

		while (cmd[argc])
			argc++;
		targv = calloc(argc + 1, sizeof *targv);
		for (size_t i = 0; targv && i < argc; i++)
			if ((targv[i] = subst_task(cmd[i], task)))
				json_array_append_new(jargv, json_string(targv[i]));
		tj.id = 0;
		tj.argv = json_dumps(jargv, JSON_COMPACT);
		tj.command = !targv || !targv[argc - 1] ? NULL
		             : o->shell                 ? strdup(targv[2])
		                                        : display_command(targv);
		tj.env = env_block(&tj.env_len, task);
		tj.array_task = task;
		tj.array_limit = o->array_limit;
		if (o->name) {
			snprintf(name, sizeof name, "%s_%d", o->name, task);
			tj.name = name;
		}
		if (!tj.argv || !tj.command || !tj.env)
			rc = gm_fail(GM_ERR_NOMEM, err, len,
			             "out of memory (or an argument is not UTF-8)");
		else
			rc = jobstore_insert(q->store, &tj, err, len);
		ids[t] = tj.id;
		for (size_t i = 0; targv && i < argc; i++)
			free(targv[i]);
		free(targv);
		free(tj.argv);
		free(tj.command);
		free(tj.env);
		json_decref(jargv);
	}
	if (rc == GM_OK)
		rc = jobstore_set_array(q->store, ids[0], ids[o->ntasks - 1], err, len);
	return rc;
}

/*
 * Whether a job like this one (the same request, environment and machine)
 * was queued in the last minute, and has not failed: its check stands.
 * Without a broker the check loads the driver, 24 ms of a real H200's
 * start-up in each submit of a sweep; a GPU lost since then is found by
 * the dispatcher, which fails the job saying so, and the next submit
 * checks again.
 */
static int checked_lately(struct queue *q, const struct job *job)
{
	char err[GM_ERRBUF_SIZE];
	int yes = 0;

	if (jobstore_queued_like(q->store, job, now_ms() - CHECK_STANDS_MS, &yes, err,
	                         sizeof err) != GM_OK)
		return 0;
	return yes;
}

static int submit_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_OPTIONS,
	    CLI_SELECT_OPTIONS,
	    CLI_RESERVE_OPTIONS,
	    {"retries", required_argument, NULL, OPT_RETRIES},
	    {"name", required_argument, NULL, OPT_NAME},
	    {"after", required_argument, NULL, OPT_AFTER},
	    {"priority", required_argument, NULL, OPT_PRIORITY},
	    {"notify", optional_argument, NULL, OPT_NOTIFY},
	    {"time", required_argument, NULL, OPT_TIME},
	    {"array", required_argument, NULL, OPT_ARRAY},
	    {"wrap", required_argument, NULL, OPT_WRAP},
	    {"dependency", required_argument, NULL, OPT_DEPENDENCY},
	    {"gres", required_argument, NULL, OPT_GRES},
	    {"job-name", required_argument, NULL, OPT_NAME},
	    {0}};
	char notify[4200];
	struct submit_opts o;
	struct config cfg = CONFIG_INIT;
	struct job job = JOB_INIT;
	struct queue q = {.store = NULL};
	json_t *jargv = json_array();
	char *shell_argv[4] = {(char *)"/bin/sh", (char *)"-c", NULL, NULL}, **cmd;
	char err[GM_ERRBUF_SIZE], cwd[PATH_MAX], *argv_text = NULL, *command = NULL,
	                                         *request = NULL, *env = NULL, *machine = NULL,
	                                         *slurm = NULL;
	int64_t *ids = NULL;
	size_t env_len = 0;
	int status;

	memset(&o, 0, sizeof o);
	/* --slurm: the job goes to Slurm (submit_slurm.h) */
	status = submit_slurm_take(cli, &argc, argv, &slurm);
	if (status != CLI_CONTINUE)
		goto done;
	status = cli_parse(cli, &cmd_submit, argc, argv, CLI_SELECT_SHORT "J:t:", longopts,
	                   submit_option, &o);
	if (status != CLI_CONTINUE)
		goto done;
	/* One rule with batch: one string (submit "A && B", --wrap "A && B")
	 * is a command line for /bin/sh -c; words after -- are the program
	 * and its arguments, run as they are. */
	if (o.wrap && optind < argc) {
		status = cli_usage(cli, "--wrap gives the command; '%s' would be a second one",
		                   argv[optind]);
		goto done;
	}
	if (o.wrap || (argc - optind == 1 && strcmp(argv[optind - 1], "--"))) {
		const char *const array_known[] = {"task", NULL}, *const none[] = {NULL};

		shell_argv[2] = o.wrap ? (char *)o.wrap : argv[optind];
		if (protocol_check_line(shell_argv[2], strlen(shell_argv[2]),
		                        o.tasks ? array_known : none, err, sizeof err) < 0) {
			status = cli_usage(cli, "%s: %s", o.wrap ? "--wrap" : "the command", err);
			goto done;
		}
		o.shell = 1;
	}
	if (slurm && (status = slurm_request_check(cli, 0)) != CLI_CONTINUE)
		goto done;
	if (optind >= argc && !o.shell) {
		status = cli_usage(
		    cli,
		    "no command to queue (gpuman submit [OPTIONS] -- CMD [ARG...], or \"CMD\")");
		goto done;
	}
	cmd = o.shell ? shell_argv : argv + optind;
	if (o.notify && !o.notify_how && !o.wrap &&
	    (!strcmp(argv[optind], "desktop") || !strcmp(argv[optind], "mail") ||
	     !strncmp(argv[optind], "mail:", 5) || !strncmp(argv[optind], "exec:", 5))) {
		status = cli_usage(cli, "--notify %s: write --notify=%s (else '%s' is the command)",
		                   argv[optind], argv[optind], argv[optind]);
		goto done;
	}
	if (o.notify && notify_resolve(o.notify_how, notify, sizeof notify, err, sizeof err) < 0) {
		status = cli_usage(cli, "%s", err);
		goto done;
	}
	if (cli->fallback_cpu) {
		status = cli_usage(cli, "--fallback cpu does not apply to queued jobs");
		goto done;
	}
	if (!getcwd(cwd, sizeof cwd)) {
		status = cli_error(cli, EXIT_FAIL, "cannot tell the working directory: %s",
		                   strerror(errno));
		goto done;
	}
	for (char **a = cmd; *a; a++)
		json_array_append_new(jargv, json_string(*a));
	argv_text = json_dumps(jargv, JSON_COMPACT);
	command = o.shell ? strdup(shell_argv[2]) : display_command(cmd);
	request = engine_request_json(cli->req, cli->no_framework_env);
	env = env_block(&env_len, -1);
	ids = calloc(o.tasks ? o.ntasks : 1, sizeof *ids);
	machine = queue_machine_key();
	if (machine && slurm) {
		char *both = NULL;

		if (asprintf(&both, "%s%s", machine, slurm) < 0)
			both = NULL;
		free(machine);
		machine = both;
	}
	if (!argv_text || !command || !request || !env || !machine || !ids) {
		status = cli_error(cli, EXIT_FAIL, "out of memory (or an argument is not UTF-8)");
		goto done;
	}
	/* the dispatcher leases as the environment of this submit says */
	if (config_load(&cfg, 1, err, sizeof err) != GM_OK || lease_env_check(err, sizeof err)) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	status = cli_queue_open(cli, &q);
	if (status != EXIT_OK)
		goto done;
	job.request = request;
	job.env = env;
	job.env_len = env_len;
	/* The machine is the submit's, not the dispatcher's. */
	job.machine = machine;
	if (!slurm && !checked_lately(&q, &job)) {
		/* A job that can never run is better refused now than queued to
		 * fail in the dispatcher at once (on Slurm, sbatch says so when
		 * the dispatcher hands it over). */
		struct gm_context *ctx = NULL;
		struct gm_snapshot *snap = NULL;

		status = cli_snapshot(cli, &ctx, &snap);
		if (status == EXIT_OK)
			status = cli_never_fits(cli, ctx, snap,
			                        o.tasks ? "no task was queued"
			                                : "the job was not queued");
		gm_snapshot_free(snap);
		gm_close(ctx);
		if (status != EXIT_OK)
			goto done;
	}
	job.command = command;
	job.argv = argv_text;
	job.cwd = cwd;
	job.submit_ms = now_ms();
	job.retries = (int)o.retries;
	job.name = (char *)o.name;
	job.priority = o.priority;
	job.notify = o.notify ? notify : NULL;
	job.time_limit_s = o.time_limit;
	/* The jobs waited for are checked and the job inserted in one
	 * transaction: none of them can end unseen in between.  A job can
	 * only wait for jobs that exist already, so --after never makes a
	 * cycle. */
	if (jobstore_begin(q.store, err, sizeof err) != GM_OK) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	status = check_after(cli, &q, &o);
	if (status == EXIT_OK) {
		job.after = o.after[0] ? o.after : NULL;
		if (insert_jobs(&q, &job, &o, cmd, ids, err, sizeof err) != GM_OK ||
		    jobstore_commit(q.store, err, sizeof err) != GM_OK)
			status = cli_error(cli, EXIT_FAIL, "%s", err);
		job.after = NULL;
	}
	if (status != EXIT_OK) {
		jobstore_rollback(q.store);
		goto done;
	}
	queue_wake(&q);
	/* The history is pruned here, by its owner, as it grows: an index on
	 * the end time makes this cost what it deletes. */
	if (cfg.keep_ms > 0 && queue_prune(&q, now_ms() - cfg.keep_ms, NULL, err, sizeof err) < 0)
		cli_error(cli, 0, "warning: cannot forget old jobs: %s", err);
	if (queue_ensure_machine(&q, machine, err, sizeof err) < 0)
		cli_error(cli, 0,
		          "warning: cannot start the dispatcher: %s (job %lld stays queued)", err,
		          (long long)ids[0]);
	if (cli->json && !o.tasks) {
		status = cli_print_json(json_pack("{s:I}", "id", (json_int_t)ids[0]));
	} else if (cli->json) {
		json_t *list = json_array();

		for (size_t t = 0; t < o.ntasks; t++)
			json_array_append_new(list, json_integer(ids[t]));
		status =
		    cli_print_json(json_pack("{s:I,s:o}", "id", (json_int_t)ids[0], "ids", list));
	} else {
		/* An array's ids on one line: gpuman wait $(gpuman submit --array ...) */
		for (size_t t = 0; t < (o.tasks ? o.ntasks : 1); t++)
			printf("%lld%s", (long long)ids[t],
			       t + 1 < (o.tasks ? o.ntasks : 1) ? " " : "\n");
		status = EXIT_OK;
	}
done:
	queue_close(&q);
	config_release(&cfg);
	json_decref(jargv);
	free(argv_text);
	free(command);
	free(request);
	free(env);
	free(machine);
	free(ids);
	free(o.tasks);
	free(slurm);
	return status;
}

const struct cmd_entry cmd_submit = {
    "submit",
    "queue a command; a dispatcher runs it when GPUs fit",
    "usage: gpuman submit [SELECT] [RESERVE] [--name NAME] [--after ID[,ID]]\n"
    "                     [--priority N] [--time LIMIT] [--array LIST[%K]]\n"
    "                     [--retries N] -- CMD [ARG...]\n"
    "       gpuman submit [OPTIONS] \"COMMAND LINE\"   (or --wrap \"COMMAND LINE\")\n"
    "       gpuman submit --slurm [--gres=gpu[:TYPE]:N] [-p PART] [-A ACCT] [-t TIME]\n"
    "                     [-C FEATURES] [--qos QOS] [--sbatch-arg ARG] ... -- CMD\n"
    "\n"
    "Put CMD in your persistent queue and print its job id.  The working\n"
    "directory and the environment are recorded now; CMD runs with them as soon\n"
    "as GPUs that fit are free (first come, first served): words after -- are\n"
    "the program and its arguments, run without a shell; one string instead\n"
    "(\"prep && train\", or --wrap as in Slurm) is a command line that\n"
    "/bin/sh -c runs, like a batch line, checked now (quotes closed, no binary\n"
    "bytes).  It runs with the same variables as 'gpuman run'\n"
    "(CUDA_VISIBLE_DEVICES, GPUMAN_GPUS, GPUMAN_LEASE) and GPUMAN_JOB, its\n"
    "id.  Its stdout and stderr go to its log ('gpuman logs ID').  A request\n"
    "no GPU of this machine can ever meet is refused at once (exit 75), with\n"
    "each GPU's reason; nothing is queued (a submit like one queued in the\n"
    "last minute, same request and environment, trusts that one's check\n"
    "unless it has failed).\n"
    "\n"
    "A small dispatcher starts by itself and exits when the queue is empty.  Each\n"
    "running job has its own supervisor that holds its lease and records its\n"
    "result, so the dispatcher can die and restart without losing or repeating a\n"
    "job; if it has died, the next submit, queue, wait or logs starts a new one.\n"
    "A job that fails with a CUDA out-of-memory error is requeued for a GPU with\n"
    "more free memory (up to 3 times).\n"
    "\n"
    "  --name NAME        a name to know it by in 'gpuman queue' (up to 64 bytes,\n"
    "                     no spaces); -J NAME and --job-name NAME as in Slurm\n"
    "  --wrap LINE        LINE is the command, a line for the shell (as in Slurm)\n"
    "  --after ID[,ID]    start only once these jobs of yours have succeeded; if\n"
    "                     one fails or is cancelled, this one is cancelled, with\n"
    "                     that as its reason (and so are the jobs after it)\n"
    "  --dependency=afterok:ID[:ID]\n"
    "                     Slurm's spelling of --after (its other kinds are refused)\n"
    "  --notify[=HOW]     tell me when it has ended: a desktop notification\n"
    "                     (notify-send) when submitted from a desktop session,\n"
    "                     else a mail to $USER (unset: the user you are) through\n"
    "                     the system's sendmail;\n"
    "                     HOW: desktop, mail, mail:ADDRESS, or exec:PROGRAM (run\n"
    "                     as PROGRAM ID STATE, with GPUMAN_JOB, GPUMAN_JOB_STATE,\n"
    "                     GPUMAN_JOB_NAME and GPUMAN_JOB_REASON set)\n"
    "  --priority N       -1000..1000 (default 0): of your queued jobs, higher\n"
    "                     ones start first; equal ones first come, first served\n"
    "  --time LIMIT       end it, with every process it started, once it has run\n"
    "                     this long: SIGTERM, SIGKILL 10 s later; recorded as\n"
    "                     timeout.  90s, 30m, 2h, 1h30m, 1d, or Slurm's MM:SS,\n"
    "                     HH:MM:SS, D-HH[:MM[:SS]] (a bare number is refused)\n"
    "  -t LIMIT           Slurm's -t: the same, and a bare number is minutes\n"
    "  --array LIST[%K]   a sweep: one job per task number in LIST (1-20, 0-30:10,\n"
    "                     1,3,5; at most 1000), {task} in CMD and ARGs replaced by\n"
    "                     it, GPUMAN_ARRAY_TASK_ID set, --name NAME_<task>; %K: at\n"
    "                     most K of them run at once.  Prints their ids on one line\n"
    "  --retries N        run it again up to N times if it fails (default 0)\n"
    "  --json             print {\"id\": N} instead of the bare id\n"
    "  --slurm            run it as its own Slurm job (sbatch) with these Slurm\n"
    "                     options (one word each; --gres default gpu:1): Slurm\n"
    "                     picks node and GPUs, queue shows them, wait gives its\n"
    "                     outcome, cancel scancels it; --time is then Slurm's\n"
    "  --gres=gpu:N       without --slurm: N GPUs, as -n N (a GPU type is refused:\n"
    "                     choose with --only or --min-free)\n"
    "-n is GPUs per job here (Slurm's -n counts tasks): -n 2 asks for 2 GPUs.\n"
    "\n" SELECT_HELP "\n"
    "reserve:\n"
    "  --exclusive        nobody else is placed on the GPU (default)\n"
    "  --mem SIZE         share the GPU: SIZE counts against its free memory\n"
    "  --idle             only GPUs with no process at all\n"
    "  --no-framework-env with --mem: no framework memory variables\n"
    "Queued jobs always wait; --wait is accepted and changes nothing.\n"
    "\n"
    "The queue lives in $GPUMAN_QUEUE_DIR, else\n"
    "${XDG_STATE_HOME:-~/.local/state}/gpuman (yours alone: mode 0700).  Each\n"
    "submit forgets the finished jobs older than [queue] keep in gpuman.conf\n"
    "(default 90d; ~/.config/gpuman/gpuman.conf, else /etc/gpuman/gpuman.conf),\n"
    "with their logs.\n"
    "\n"
    "examples:\n"
    "  gpuman submit --name lr3e-4 -- python train.py --lr 3e-4\n"
    "  gpuman submit -n 2 --min-free 20G -- torchrun --nproc-per-node 2 train.py\n"
    "  id=$(gpuman submit --mem 8G -- python eval.py) && gpuman wait $id\n"
    "  p=$(gpuman submit -- python prep.py)\n"
    "  t=$(gpuman submit --after $p -- python train.py)\n"
    "  gpuman submit --after $t --notify -- python evaluate.py\n"
    "  gpuman submit --time 2h -- python train.py\n"
    "  gpuman submit \"python prep.py && python train.py\"\n"
    "  ids=$(gpuman submit --array 1-20%4 -- python train.py --seed {task})\n",
    submit_exec,
    NULL,
};
