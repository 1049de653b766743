/*
 * cmdline.c - the command line of gpuman's commands and of gpuman-serve
 * (cmdline.h): options, messages, the first snapshot.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmdline.h"

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

/* An option getopt refused: one that needs a value and has none, or one
 * the command does not know, with the command's option it is a slip away
 * from ("--jsn": did you mean '--json'?). */
static int bad_option(struct cli *cli, char **argv, int opt, const struct option *longopts)
{
	const char *arg = argv[optind - 1];
	char word[64];
	struct spell near;
	const char *best;

	if (opt == ':' && optopt && optopt < 256)
		return cli_usage(cli, "option '-%c' needs a value", optopt);
	if (opt == ':')
		return cli_usage(cli, "option '%s' needs a value", arg ? arg : "?");
	if (optopt && optopt < 256)
		return cli_usage(cli, "unknown option '-%c'", optopt);
	if (!arg || strncmp(arg, "--", 2))
		return cli_usage(cli, "unknown option '%s'", arg ? arg : "?");
	snprintf(word, sizeof word, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
	near = (struct spell)SPELL_INIT(word);
	for (const struct option *o = longopts; o && o->name; o++)
		spell_offer(&near, o->name);
	best = spell_best(&near);
	if (best)
		return cli_usage(cli, "unknown option '--%s' (did you mean '--%s'?)", word, best);
	return cli_usage(cli, "unknown option '%s'", arg);
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

int cli_json_check(struct cli *cli, const struct cmd_entry *cmd)
{
	if (!cli->json || !cmd->no_json)
		return CLI_CONTINUE;
	/* Not as JSON: that would be the very output the command lacks. */
	cli->json = 0;
	return cli_usage(cli, "--json: %s has no JSON output (%s)", cmd->name, cmd->no_json);
}

int cli_parse(struct cli *cli, const struct cmd_entry *cmd, int argc, char **argv,
              const char *shortopts, const struct option *longopts,
              int (*own)(struct cli *cli, int opt, const char *arg, void *data), void *data)
{
	char optstring[64];
	int opt, rc, takes_select = 0;

	for (const struct option *o = longopts; o && o->name; o++)
		takes_select |= o->val == OPT_BY;

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
			return bad_option(cli, argv, opt, longopts);
		/* --wait's duration is optional, so "--wait 15m" would make 15m an
		 * operand (the command to run); a word that reads as a duration is
		 * far more likely meant for --wait. */
		if (opt == OPT_WAIT && !optarg && optind < argc &&
		    looks_like_duration(argv[optind]))
			return cli_usage(cli,
			                 "--wait %s: write --wait=%s ('--wait %s' would wait "
			                 "forever and take '%s' as an argument)",
			                 argv[optind], argv[optind], argv[optind], argv[optind]);
		/* -n is SELECT's GPU count in a command with SELECT options;
		 * elsewhere the command's own (cancel -n NAME, as scancel's). */
		rc = opt == 'n' && !takes_select ? -1 : common_option(cli, cmd, opt, optarg);
		if (rc == -1)
			rc = own ? own(cli, opt, optarg, data) : -1;
		else if (rc == 0)
			rc = CLI_CONTINUE;
		if (rc == HELP_SHOWN)
			return EXIT_OK;
		if (rc != CLI_CONTINUE)
			return rc == -1 ? bad_option(cli, argv, '?', longopts) : rc;
	}
	rc = cli_json_check(cli, cmd);
	if (rc != CLI_CONTINUE)
		return rc;
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
	if (cli->leases)
		context_want_view(*ctx); /* a broker sends both at once */
	rc = snapshot_take(*ctx, cli->proc_util ? LISTING_UTIL_WINDOW_S * 1000 : 0, cli->clocks,
	                   snap, err, sizeof err);
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
