/*
 * common.c - options, messages and output helpers shared by the subcommands.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <time.h>
#include "cli.h"
#include "gpuman-internal.h"

/* Set once JSON went to stdout: a later error must not add a second
 * document to a stream that readers parse as one. */
static int json_printed;

/* With --json, a failure is also one JSON object on stdout, so that a
 * script reading stdout learns why rather than getting nothing. */
static void json_error(struct cli *cli, int status, const char *fmt, va_list ap)
{
	char *msg = NULL;
	json_t *o;

	if (!cli->json || status == 0 || json_printed || vasprintf(&msg, fmt, ap) < 0)
		return;
	o = json_pack("{s:s, s:i}", "error", msg, "status", status);
	free(msg);
	if (o)
		cli_print_json(o);
}

int cli_error(struct cli *cli, int status, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "gpuman%s%s: ", cli->cmd ? " " : "", cli->cmd ? cli->cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	va_start(ap, fmt);
	json_error(cli, status, fmt, ap);
	va_end(ap);
	return status;
}

int cli_usage(struct cli *cli, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "gpuman%s%s: ", cli->cmd ? " " : "", cli->cmd ? cli->cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see 'gpuman %s%s--help')\n", cli->cmd ? cli->cmd : "",
	        cli->cmd ? " " : "");
	va_start(ap, fmt);
	json_error(cli, EXIT_USAGE, fmt, ap);
	va_end(ap);
	return EXIT_USAGE;
}

static int bad_option(struct cli *cli, char **argv)
{
	const char *arg = argv[optind - 1];

	if (optopt && optopt < 256)
		return cli_usage(cli, "option '-%c' is unknown or needs a value", optopt);
	return cli_usage(cli, "option '%s' is unknown or needs a value", arg ? arg : "?");
}

/* --sim FILE: the simulator replaces the driver for this process and the
 * commands it runs, whose own NVML clients then see the same machine. */
static int use_simulator(struct cli *cli, const char *file)
{
	char path[PATH_MAX];

	if (!realpath(file, path) || access(path, R_OK) < 0)
		return cli_usage(cli, "--sim '%s': %s", file, strerror(errno));
	setenv("GPUMAN_SIM", path, 1);
	unsetenv("GPUMAN_NVML");
	return 0;
}

static int request_option(struct cli *cli, const char *key, const char *arg)
{
	char err[GM_ERRBUF_SIZE];

	if (gm_request_set(cli->req, key, arg, err, sizeof err) != GM_OK)
		return cli_usage(cli, "%s", err);
	return 0;
}

static int looks_like_duration(const char *s)
{
	char err[8];
	int64_t ms;

	return parse_duration_ms(s, &ms, err, sizeof err) == 0;
}

#define HELP_SHOWN 0x100

/* 0 handled, -1 not a common option, else a status to exit with. */
static int common_option(struct cli *cli, const struct cmd_entry *cmd, int opt, const char *arg)
{
	switch (opt) {
	case OPT_JSON:
		cli->json = 1;
		return 0;
	case OPT_SIM:
		return use_simulator(cli, arg);
	case OPT_HELP:
		fputs(cmd->usage, stdout);
		return HELP_SHOWN;
	case 'n':
		return request_option(cli, "n", arg);
	case OPT_BY:
		cli->by_given = 1;
		return request_option(cli, "by", arg);
	case OPT_MIN_FREE:
		return request_option(cli, "min-free", arg);
	case OPT_MAX_UTIL:
		return request_option(cli, "max-util", arg);
	case OPT_ONLY:
		return request_option(cli, "only", arg);
	case OPT_EXCLUDE:
		return request_option(cli, "exclude", arg);
	case OPT_MIG:
		return request_option(cli, "mig", arg);
	case OPT_EXCLUSIVE:
		return request_option(cli, "exclusive", NULL);
	case OPT_MEM:
		return request_option(cli, "mem", arg);
	case OPT_IDLE:
		return request_option(cli, "idle", NULL);
	case OPT_WAIT:
		cli->wait_given = 1;
		return request_option(cli, "wait", arg);
	case OPT_NO_FRAMEWORK_ENV:
		cli->no_framework_env = 1;
		return 0;
	case OPT_FALLBACK:
		if (strcmp(arg, "cpu"))
			return cli_usage(cli, "--fallback '%s': the only fallback is 'cpu'", arg);
		cli->fallback_cpu = 1;
		return 0;
	case OPT_FORMAT:
		if (strcmp(arg, "index") && strcmp(arg, "uuid") && strcmp(arg, "cuda"))
			return cli_usage(cli, "--format '%s': use index, uuid or cuda", arg);
		cli->format = arg;
		return 0;
	}
	return -1;
}

/*
 * [defaults] of gpuman.conf (the admin's, then the user's own file) for the
 * --by and --wait a command takes and was not given.
 */
static int request_defaults(struct cli *cli, const struct option *longopts)
{
	int takes_by = 0, takes_wait = 0;
	char err[GM_ERRBUF_SIZE];
	struct config cfg;

	for (const struct option *o = longopts; o && o->name; o++) {
		takes_by |= o->val == OPT_BY;
		takes_wait |= o->val == OPT_WAIT;
	}
	if ((!takes_by || cli->by_given) && (!takes_wait || cli->wait_given))
		return CLI_CONTINUE;
	if (config_load(&cfg, 1, err, sizeof err) != GM_OK)
		return cli_error(cli, EXIT_FAIL, "%s", err);
	if (cfg.user_note[0])
		fprintf(stderr, "gpuman: note: %s\n", cfg.user_note);
	if (takes_by && !cli->by_given && cfg.default_by >= 0)
		cli->req->by = (enum gm_policy)cfg.default_by;
	if (takes_wait && !cli->wait_given && cfg.has_default_wait) {
		cli->req->has_wait = 1;
		cli->req->wait_ms = cfg.default_wait_ms;
	}
	config_release(&cfg);
	return CLI_CONTINUE;
}

int cli_parse(struct cli *cli, const struct cmd_entry *cmd, int argc, char **argv,
              const char *shortopts, const struct option *longopts,
              int (*own)(struct cli *cli, int opt, const char *arg, void *data), void *data)
{
	char optstring[64];
	int opt, rc;

	/* A leading '+' (run, submit) ends options at the command to run;
	 * elsewhere options may follow operands (info 3 --json). */
	shortopts = shortopts ? shortopts : "";
	snprintf(optstring, sizeof optstring, "%s:%s", *shortopts == '+' ? "+" : "",
	         shortopts + (*shortopts == '+'));
	/* --json anywhere among the options: even an error in an option
	 * before it is then reported as JSON (not past '--' or, for run, the
	 * command). */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (*shortopts == '+' && argv[i][0] != '-')
			break;
		if (!strcmp(argv[i], "--json"))
			cli->json = 1;
	}
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
		if (opt == '?' || opt == ':')
			return bad_option(cli, argv);
		/* --wait's duration is optional, so "--wait 15m" would make 15m an
		 * operand (the command to run); a word that reads as a duration is
		 * far more likely meant for --wait. */
		if (opt == OPT_WAIT && !optarg && optind < argc &&
		    looks_like_duration(argv[optind]))
			return cli_usage(cli,
			                 "--wait %s: write --wait=%s ('--wait %s' would wait "
			                 "forever and take '%s' as an argument)",
			                 argv[optind], argv[optind], argv[optind], argv[optind]);
		rc = common_option(cli, cmd, opt, optarg);
		if (rc == -1)
			rc = own ? own(cli, opt, optarg, data) : -1;
		else if (rc == 0)
			rc = CLI_CONTINUE;
		if (rc == HELP_SHOWN)
			return EXIT_OK;
		if (rc != CLI_CONTINUE)
			return rc == -1 ? bad_option(cli, argv) : rc;
	}
	return request_defaults(cli, longopts);
}

/* The shipped scenario, for hints: in the source tree, else relative to
 * this program as installed (bin/../share/gpuman), wherever it was moved. */
static const char *example_scenario(char *buf, size_t len)
{
	static const char *const rel[] = {"../share/gpuman/examples/lab-8gpu.json",
	                                  "../examples/lab-8gpu.json"};
	char self[PATH_MAX], path[PATH_MAX + 64];
	ssize_t n;

	if (access("examples/lab-8gpu.json", R_OK) == 0)
		return "examples/lab-8gpu.json";
	n = readlink("/proc/self/exe", self, sizeof self - 1);
	self[n > 0 ? n : 0] = '\0';
	if (strrchr(self, '/'))
		*strrchr(self, '/') = '\0';
	for (size_t i = 0; n > 0 && i < sizeof rel / sizeof rel[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", self, rel[i]);
		if (realpath(path, buf) && strlen(buf) < len)
			return buf;
	}
	snprintf(buf, len, "%s", GM_DATADIR "/examples/lab-8gpu.json");
	return buf;
}

int cli_snapshot(struct cli *cli, struct gm_context **ctx, struct gm_snapshot **snap)
{
	char example[PATH_MAX];
	char err[GM_ERRBUF_SIZE];
	enum gm_err rc;

	*snap = NULL;
	rc = gm_open(ctx, err, sizeof err);
	if (rc == GM_ERR_NVML_LOAD)
		return cli_error(cli, EXIT_FAIL,
		                 "%s; no NVIDIA driver here? try the simulator: gpuman --sim %s %s",
		                 err, example_scenario(example, sizeof example),
		                 cli->cmd ? cli->cmd : "status");
	if (rc != GM_OK)
		return cli_error(cli, EXIT_FAIL, "%s", err);
	rc = snapshot_take(*ctx, cli->proc_util ? CLI_UTIL_WINDOW_S * 1000 : 0, cli->clocks, snap,
	                   err, sizeof err);
	if (rc != GM_OK) {
		gm_close(*ctx);
		*ctx = NULL;
		return cli_error(cli, EXIT_FAIL, "%s", err);
	}
	return EXIT_OK;
}

int cli_print_json(json_t *value)
{
	int rc = json_dumpf(value, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	json_printed = 1;
	json_decref(value);
	fputc('\n', stdout);
	return rc == 0 ? EXIT_OK : EXIT_FAIL;
}

int cli_term_width(void)
{
	const char *env = getenv("COLUMNS");
	struct winsize ws;
	char *end;
	long n;

	if (env && *env) {
		errno = 0;
		n = strtol(env, &end, 10);
		if (!*end && !errno && n > 0 && n <= 10000)
			return (int)n;
	}
	if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 0;
}

char *fmt_mib(char *buf, size_t len, uint64_t mib)
{
	if (mib < 1024)
		snprintf(buf, len, "%lluM", (unsigned long long)mib);
	else
		snprintf(buf, len, "%.1fG", mib / 1024.0);
	return buf;
}

#define COLOUR(fn, code)                                                                           \
	const char *fn(const struct cli *cli)                                                      \
	{                                                                                          \
		return cli->color ? code : "";                                                     \
	}
COLOUR(c_bold, "\033[1m")
COLOUR(c_dim, "\033[2m")
COLOUR(c_red, "\033[31m")
COLOUR(c_green, "\033[32m")
COLOUR(c_yellow, "\033[33m")
COLOUR(c_reset, "\033[0m")

void cli_read_leases(struct cli *cli, struct registry_view *view)
{
	struct registry *reg;
	char err[GM_ERRBUF_SIZE];

	*view = (struct registry_view)REGISTRY_VIEW_INIT;
	if (registry_open(&reg, err, sizeof err) != GM_OK) {
		cli_error(cli, 0, "warning: leases not shown: %s", err);
		return;
	}
	if (registry_read(reg, view, err, sizeof err) != GM_OK)
		cli_error(cli, 0, "warning: leases not shown: %s", err);
	registry_close(reg);
}

json_t *cli_leases_json(const struct registry_view *view)
{
	return listing_leases_json(view);
}

json_t *cli_waiters_json(const struct registry_view *view)
{
	return listing_waiters_json(view);
}

void cli_note_mig_gpus(const struct cli *cli, const char *cmd, const struct gm_snapshot *snap)
{
	if (!snap || cli->req->mig[0])
		return;
	for (size_t i = 0; i < snap->gpu_count; i++)
		if ((snap->gpus[i].valid & GM_HAS_MIG) && snap->gpus[i].mig_mode == 1)
			fprintf(stderr,
			        "gpuman %s: note: GPU %u is in MIG mode: never handed out "
			        "whole (ask for a slice with --mig PROFILE)\n",
			        cmd, snap->gpus[i].index);
}

json_t *cli_status_json(const struct gm_snapshot *snap, const struct registry_view *view)
{
	json_t *o = snapshot_json(snap);

	json_object_set_new(o, "leases", cli_leases_json(view));
	json_object_set_new(o, "waiters", cli_waiters_json(view));
	return o;
}

char *fmt_age(char *buf, size_t len, int64_t since_ms)
{
	struct timespec ts;
	int64_t s;

	clock_gettime(CLOCK_REALTIME, &ts);
	s = ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - since_ms) / 1000;
	if (s < 0)
		s = 0;
	if (s < 60)
		snprintf(buf, len, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(buf, len, "%lldm", (long long)(s / 60));
	else
		snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600),
		         (long long)(s % 3600 / 60));
	return buf;
}

int cli_look_with(struct cli *cli, const struct cmd_entry *cmd, int argc, char **argv,
                  const char *shortopts, const struct option *own_opts,
                  int (*own)(struct cli *cli, int opt, const char *arg, void *data), void *data,
                  struct cli_look *look)
{
	static const struct option common[] = {CLI_COMMON_OPTIONS};
	struct option longopts[32];
	size_t n = 0;
	int rc;

	memset(look, 0, sizeof *look);
	for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
		longopts[n++] = common[i];
	for (size_t i = 0; own_opts && own_opts[i].name && n + 1 < 32; i++)
		longopts[n++] = own_opts[i];
	memset(&longopts[n], 0, sizeof longopts[n]);
	rc = cli_parse(cli, cmd, argc, argv, shortopts, longopts, own, data);
	if (rc != CLI_CONTINUE)
		return rc;
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	return cli_look_take(cli, look);
}

int cli_look_take(struct cli *cli, struct cli_look *look)
{
	int rc;

	memset(look, 0, sizeof *look);
	cli->proc_util = 1;
	look->view = malloc(sizeof *look->view);
	if (!look->view)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	rc = cli_snapshot(cli, &look->ctx, &look->snap);
	if (rc != EXIT_OK) {
		free(look->view);
		look->view = NULL;
		return rc;
	}
	cli_read_leases(cli, look->view);
	return CLI_CONTINUE;
}

void cli_look_release(struct cli_look *look)
{
	if (look->view) {
		registry_view_release(look->view);
		free(look->view);
	}
	gm_snapshot_free(look->snap);
	gm_close(look->ctx);
	memset(look, 0, sizeof *look);
}

const char *cli_safe(char *buf, const char *s)
{
	return text_printable(buf, CLI_SAFE_SIZE, s);
}

long *cli_proc_leases(const struct cli_look *look)
{
	const struct gm_snapshot *snap = look->snap;
	const struct registry_view *view = look->view;
	struct proctree tree = PROCTREE_INIT;
	long *out = calloc(snap->proc_count + 1, sizeof *out);

	if (!out)
		return NULL;
	/* Reading every process's parent costs; only a GPU process needs it. */
	if (view->lease_count && snap->proc_count)
		proctree_read(&tree);
	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];

		out[i] = -1;
		for (size_t l = 0; l < view->lease_count && out[i] < 0; l++)
			if (!view->leases[l].reservation &&
			    proctree_within(&tree, view->leases[l].job_pid, (int)p->pid))
				out[i] = (long)l;
		/* A reservation has no process: its user's on its GPUs are in it. */
		for (size_t l = 0; l < view->lease_count && out[i] < 0; l++) {
			const struct lease_info *li = &view->leases[l];

			for (size_t g = 0; li->reservation && p->has_user && p->uid == li->uid &&
			                   g < li->gpu_count;
			     g++)
				if (li->indices[g] == p->gpu)
					out[i] = (long)l;
		}
	}
	proctree_release(&tree);
	return out;
}

int cli_waste(struct cli *cli, const struct cli_look *look, struct waste_opts *opts,
              struct waste_report *rep)
{
	long *leases = cli_proc_leases(look);
	int rc;

	opts->now_ms = look->snap->taken_ms;
	opts->window_s = CLI_UTIL_WINDOW_S;
	rc = leases ? waste_find(look->snap, look->view, leases, opts, rep) : -1;
	free(leases);
	if (rc < 0)
		cli_error(cli, 0, "out of memory looking for waste");
	return rc;
}

static json_t *gpu_array(uint64_t mask)
{
	json_t *arr = json_array();

	for (unsigned i = 0; i < 64; i++)
		if (mask & ((uint64_t)1 << i))
			json_array_append_new(arr, json_integer(i));
	return arr;
}

json_t *cli_waste_json(const struct cli_look *look, const struct waste_opts *opts,
                       const struct waste_report *rep)
{
	json_t *arr = json_array();
	char text[1024];

	for (size_t i = 0; i < rep->count; i++) {
		const struct waste_item *it = &rep->items[i];
		const struct lease_info *l = it->lease >= 0 ? &look->view->leases[it->lease] : NULL;
		json_t *o = json_object();

		json_object_set_new(o, "kind", json_string(waste_kind_name(it->kind)));
		json_object_set_new(o, "user", it->has_user ? json_text(it->user) : json_null());
		json_object_set_new(o, "pid", json_integer(it->pid));
		json_object_set_new(o, "command",
		                    it->command[0] ? json_text(it->command) : json_null());
		json_object_set_new(o, "lease", l ? json_text(l->id) : json_null());
		json_object_set_new(
		    o, "gpus", gpu_array(it->kind == WASTE_UNLEASED ? it->gpus : it->idle_gpus));
		if (it->kind == WASTE_HOG)
			json_object_set_new(o, "compute_gpus", gpu_array(it->busy_gpus));
		if (it->kind != WASTE_IDLE_LEASE)
			json_object_set_new(o, "held_mib", json_integer((json_int_t)it->held_mib));
		if (it->kind == WASTE_IDLE_LEASE)
			json_object_set_new(o, "held_s", json_integer(it->age_ms / 1000));
		if (it->kind == WASTE_UNLEASED)
			json_object_set_new(o, "on_lease_of",
			                    it->on_lease >= 0
			                        ? json_text(look->view->leases[it->on_lease].user)
			                        : json_null());
		json_object_set_new(
		    o, "what",
		    json_text(waste_what(look->snap, look->view, opts, it, text, sizeof text)));
		json_object_set_new(
		    o, "advice",
		    json_text(waste_advice(look->snap, look->view, it, text, sizeof text)));
		json_array_append_new(arr, o);
	}
	return arr;
}
