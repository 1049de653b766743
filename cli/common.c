/*
 * common.c - output helpers and the machine as the views read it, shared by
 * the subcommands (the command line itself: cmdline/cmdline.c).
 */
#include <errno.h>
#include <sys/stat.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <time.h>
#include "cli.h"
#include "gpuman-internal.h"

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

void cli_read_leases(struct cli *cli, const struct gm_snapshot *snap, struct registry_view *view)
{
	struct registry *reg;
	char err[GM_ERRBUF_SIZE];

	*view = (struct registry_view)REGISTRY_VIEW_INIT;
	if (registry_open(&reg, err, sizeof err) != GM_OK) {
		cli_error(cli, 0, "warning: leases not shown: %s", err);
		return;
	}
	if (registry_read_with(reg, snap, view, err, sizeof err) != GM_OK)
		cli_error(cli, 0, "warning: leases not shown: %s", err);
	registry_close(reg);
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

char *fmt_age(char *buf, size_t len, int64_t since_ms)
{
	age_text(buf, len, now_ms() - since_ms);
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
	cli->leases = 1;
	look->view = malloc(sizeof *look->view);
	if (!look->view)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	rc = cli_snapshot(cli, &look->ctx, &look->snap);
	if (rc != EXIT_OK) {
		free(look->view);
		look->view = NULL;
		return rc;
	}
	cli_read_leases(cli, look->snap, look->view);
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

int cli_waste(struct cli *cli, const struct cli_look *look, struct waste_opts *opts,
              struct waste_report *rep)
{
	int rc = listing_find_waste(look->snap, look->view, opts, rep);

	if (rc < 0)
		cli_error(cli, 0, "out of memory looking for waste");
	return rc;
}

int cli_exec_sibling(struct cli *cli, const struct cmd_entry *cmd, const char *program, char **argv)
{
	char self[PATH_MAX], path[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash;

	/* gpuman --json serve: the --json never reaches the program's argv */
	if (cli_json_check(cli, cmd) != CLI_CONTINUE)
		return EXIT_USAGE;
	if (n < 0)
		return cli_error(cli, EXIT_FAIL, "cannot find my own program: %s", strerror(errno));
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(path, sizeof path, "%s/%s", self, program);
	argv[0] = (char *)program;
	execv(path, argv);
	return cli_error(cli, EXIT_FAIL, "cannot run '%s': %s (it is installed next to gpuman)",
	                 path, strerror(errno));
}

void cli_say_waiting(const char *cmd, const char *what, const char *why)
{
	int n = (int)strlen(why);

	while (n && why[n - 1] == '\n')
		n--;
	fprintf(stderr, "gpuman %s: waiting for GPUs%s%s%s (Ctrl-C to give up)%s%.*s\n", cmd,
	        what ? " for '" : "", what ? what : "", what ? "'" : "", n ? ":\n" : "", n, why);
}

const char *cli_exec_why(const char *prog, int err)
{
	struct stat st;

	if (err == ENOENT && !strchr(prog, '/'))
		return "not found in PATH";
	if (err == EACCES && strchr(prog, '/') && stat(prog, &st) == 0 && S_ISDIR(st.st_mode))
		return "is a directory";
	return strerror(err);
}

const char *cli_explained(char *explain)
{
	size_t n = explain ? strlen(explain) : 0;

	while (n && explain[n - 1] == '\n')
		explain[--n] = '\0';
	return n ? explain : "";
}

int cli_never_fits(struct cli *cli, struct gm_context *ctx, const struct gm_snapshot *snap,
                   const char *not_done)
{
	struct gm_snapshot *own = NULL;
	unsigned *indices = NULL;
	size_t count = 0;
	char *explain = NULL, err[GM_ERRBUF_SIZE];
	int status = EXIT_OK;

	if (!snap) {
		if (gm_snapshot_take(ctx, &own, err, sizeof err) != GM_OK)
			return EXIT_OK;
		snap = own;
	}
	if (gm_pick(ctx, snap, cli->req, &indices, &count, &explain) == GM_ERR_NEVER) {
		const char *why = cli_explained(explain);

		status = cli_error(cli, EXIT_UNAVAILABLE,
		                   "no GPU of this machine can ever meet the request; %s%s%s",
		                   not_done, *why ? "\n" : "", why);
	}
	free(indices);
	free(explain);
	gm_snapshot_free(own);
	return status;
}
