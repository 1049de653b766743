/*
 * cmd_complete.c - `gpuman complete WHAT [CMD]`: the words the shell
 * completion scripts (contrib/completion/) offer, read from the command
 * table and each command's --help text at TAB time, so that a new command
 * or option completes without touching the scripts.  Hidden from --help.
 *
 *   commands          NAME<TAB>summary, one a line
 *   options [CMD]     the options CMD's --help text names (global ones without CMD)
 *   values OPTION [CMD]  the words OPTION takes in CMD; "@gpus", "@files" or "@dirs"
 *                     for a kind
 *   operands CMD      what CMD's operands are: @gpus, @jobs, @files, @command or nothing
 *   gpus              NVML indices and UUIDs of this machine (or --sim's)
 *   jobs              ids of your queued and running jobs
 * Errors print nothing: a completion must never spill messages into a prompt.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "jobs.h"
#include "engine.h"
#include "gpuman-internal.h"

/* Operands by command; one row per command that takes any. */
static const char *const operand_kinds[][2] = {
    {"info", "@gpus"},   {"batch", "@files"}, {"run", "@command"}, {"submit", "@command"},
    {"cancel", "@jobs"}, {"logs", "@jobs"},   {"wait", "@jobs"},   {"help", "@commands"},
};

/* Option values, per command where commands differ (pick's --format is
 * not status's): only what that command accepts, which completion.bats
 * checks by running the command with each.  Options not listed take a
 * free-form value or none. */
static const struct {
	const char *option;
	const char *cmd; /* NULL: every command that takes the option */
	const char *words;
} option_values[] = {
    {"--by", NULL, "memory memory-rate power util index"},
    {"--format", "pick", "index uuid cuda"},
    {"--format", "status", "csv csv,noheader csv,nounits csv,noheader,nounits"},
    {"--format", "ps", "csv csv,noheader"},
    {"--format", "waste", "csv csv,noheader"},
    {"--fallback", "run", "cpu"},
    {"--only", NULL, "@gpus"},
    {"--exclude", NULL, "@gpus"},
    {"--sim", NULL, "@files"},
    {"--log-dir", NULL, "@dirs"},
};

static const struct cmd_entry *find(const char *name)
{
	size_t n;
	const struct cmd_entry *const *cmds = cli_commands(&n);

	for (size_t i = 0; name && i < n; i++)
		if (!strcmp(cmds[i]->name, name))
			return cmds[i];
	return NULL;
}

/* The options a help text defines: every distinct "--word" or "-x" on its
 * usage lines (up to the first blank line) and on lines that start with an
 * option; examples and prose, whose commands have options of their own,
 * are not read.  seen holds " --json --sim ... " already printed. */
static void print_options(const char *text, char *seen, size_t seen_len)
{
	int usage = 1;

	for (const char *line = text; *line;) {
		size_t end = strcspn(line, "\n");
		const char *first = line + strspn(line, " ");

		if (end == 0)
			usage = 0;
		for (const char *p = line; (usage || *first == '-') && p < line + end; p++) {
			size_t len = 0;
			char word[64];

			if (*p != '-' || (p > text && !strchr(" [|,", p[-1])))
				continue;
			if (p[1] == '-' && islower((unsigned char)p[2]))
				for (len = 2; isalnum((unsigned char)p[len]) || p[len] == '-';
				     len++)
					;
			else if (isalpha((unsigned char)p[1]) && !isalnum((unsigned char)p[2]))
				len = 2;
			if (len < 2 || len + 3 >= sizeof word || p[len - 1] == '-')
				continue;
			snprintf(word, sizeof word, " %.*s ", (int)len, p);
			if (!strstr(seen, word) && strlen(seen) + len + 2 < seen_len) {
				strcat(seen, word + 1);
				printf("%.*s\n", (int)len, p);
			}
			p += len - 1;
		}
		line += end + (line[end] == '\n');
	}
}

static int print_gpus(struct cli *cli)
{
	struct gm_context *ctx;
	struct gm_snapshot *snap;
	char err[GM_ERRBUF_SIZE];

	(void)cli;
	if (gm_open(&ctx, err, sizeof err) != GM_OK)
		return EXIT_FAIL;
	if (snapshot_take(ctx, 0, 0, &snap, err, sizeof err) == GM_OK) {
		for (size_t i = 0; i < snap->gpu_count; i++)
			printf("%u\t%s\n", snap->gpus[i].index, snap->gpus[i].name);
		for (size_t i = 0; i < snap->gpu_count; i++)
			if (snap->gpus[i].uuid[0])
				printf("%s\tGPU %u\n", snap->gpus[i].uuid, snap->gpus[i].index);
		gm_snapshot_free(snap);
	}
	gm_close(ctx);
	return EXIT_OK;
}

static int print_jobs(struct cli *cli)
{
	struct queue q;
	struct job *jobs = NULL;
	size_t n = 0;
	char err[GM_ERRBUF_SIZE];

	if (cli_queue_open(cli, &q) != EXIT_OK)
		return EXIT_FAIL;
	if (jobstore_list(q.store, -1, 0, 0, &jobs, &n, err, sizeof err) == GM_OK) {
		for (size_t i = 0; i < n; i++)
			printf("%lld\t%s: %s\n", (long long)jobs[i].id,
			       job_state_name(jobs[i].state),
			       jobs[i].command ? jobs[i].command : "");
		jobstore_free_list(jobs, n);
	}
	queue_close(&q);
	return EXIT_OK;
}

static int complete_exec(struct cli *cli, int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "", *arg = argc > 2 ? argv[2] : NULL;
	size_t n;
	const struct cmd_entry *const *cmds = cli_commands(&n);

	if (!strcmp(what, "commands")) {
		for (size_t i = 0; i < n; i++)
			if (cmds[i]->summary)
				printf("%s\t%s\n", cmds[i]->name, cmds[i]->summary);
		printf("help\tshow a command's usage\n");
	} else if (!strcmp(what, "options")) {
		if (!arg)
			printf("--sim\n--json\n--version\n--help\n");
		else if (find(arg)) {
			char seen[4096] = " --json --sim --help ";

			printf("--json\n--sim\n--help\n");
			print_options(find(arg)->usage, seen, sizeof seen);
		}
	} else if (!strcmp(what, "values")) {
		const char *cmd = argc > 3 ? argv[3] : NULL;

		for (size_t i = 0; arg && i < sizeof option_values / sizeof option_values[0]; i++)
			if (!strcmp(option_values[i].option, arg) &&
			    (!option_values[i].cmd || (cmd && !strcmp(option_values[i].cmd, cmd))))
				for (const char *w = option_values[i].words; *w;) {
					size_t len = strcspn(w, " ");

					printf("%.*s\n", (int)len, w);
					w += len + (w[len] == ' ');
				}
	} else if (!strcmp(what, "operands")) {
		for (size_t i = 0; arg && i < sizeof operand_kinds / sizeof operand_kinds[0]; i++)
			if (!strcmp(operand_kinds[i][0], arg))
				printf("%s\n", operand_kinds[i][1]);
	} else if (!strcmp(what, "gpus")) {
		return print_gpus(cli);
	} else if (!strcmp(what, "jobs")) {
		return print_jobs(cli);
	} else {
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

const struct cmd_entry cmd_complete = {
    "complete",
    NULL,
    "usage: gpuman complete commands | options [CMD] | values OPTION [CMD] | operands CMD\n"
    "                       | gpus | jobs\n"
    "\n"
    "The words shell completion offers, one a line (WORD<TAB>description where\n"
    "there is one).  Used by the bash, zsh and fish completion scripts.\n",
    complete_exec,
    NULL,
};
