/*
 * select.c - -i, -u, --format csv and --watch for the commands that show
 * the machine (select.h).
 */
#include <errno.h>
#include <stdio.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include "gpuman-internal.h"
#include "select.h"

static int add_user(struct cli *cli, struct cli_select *sel, const char *name)
{
	struct passwd *pw;
	char *end;
	unsigned long uid;

	if (sel->user_count == CLI_SELECT_MAX_USERS)
		return cli_usage(cli, "-u: at most %d users", CLI_SELECT_MAX_USERS);
	pw = getpwnam(name);
	if (!pw) {
		errno = 0;
		uid = strtoul(name, &end, 10);
		if (!*name || *end || errno || uid > 0xFFFFFFFFul)
			return cli_usage(cli, "-u '%s': no such user (give a user name or a uid)",
			                 name);
		pw = getpwuid((uid_t)uid);
		sel->uids[sel->user_count] = (unsigned)uid;
	} else {
		sel->uids[sel->user_count] = pw->pw_uid;
	}
	snprintf(sel->names[sel->user_count], sizeof sel->names[0], "%s", pw ? pw->pw_name : "");
	sel->user_count++;
	return CLI_CONTINUE;
}

static int watch_option(struct cli *cli, struct cli_select *sel, const char *arg)
{
	char err[256], *end;
	double s;
	int64_t ms;

	sel->watch = 1;
	sel->watch_arg_missing = !arg;
	if (!arg)
		return CLI_CONTINUE;
	s = strtod(arg, &end);
	if (end != arg && !*end) {
		ms = (int64_t)(s * 1000);
	} else if (parse_duration_ms(arg, &ms, err, sizeof err) < 0) {
		return cli_usage(cli, "--watch '%s': %s", arg, err);
	}
	if (ms < 100 || ms > 86400000)
		return cli_usage(cli, "--watch '%s': give 0.1 to 86400 seconds", arg);
	sel->watch_ms = ms;
	return CLI_CONTINUE;
}

int cli_select_option(struct cli *cli, struct cli_select *sel, int opt, const char *arg)
{
	char *list, *tok, *save = NULL;
	int rc = CLI_CONTINUE;

	switch (opt) {
	case 'i':
		sel->gpus_arg = arg;
		return CLI_CONTINUE;
	case 'u':
		list = strdup(arg);
		if (!list)
			return cli_error(cli, EXIT_FAIL, "out of memory");
		for (tok = strtok_r(list, ",", &save); tok && rc == CLI_CONTINUE;
		     tok = strtok_r(NULL, ",", &save))
			rc = add_user(cli, sel, tok);
		free(list);
		if (rc == CLI_CONTINUE && !sel->user_count)
			rc = cli_usage(cli, "-u '%s': name a user", arg);
		return rc;
	case OPT_SELECT_FORMAT:
		if (!strncmp(arg, "csv=", 4) && arg[4]) {
			sel->csv = 1;
			sel->columns = arg + 4;
			return CLI_CONTINUE;
		}
		/* csv[,noheader][,nounits]: nvidia-smi's words, meaning what
		 * they mean there (gpuman's CSV has no units to drop) */
		if (!strncmp(arg, "csv", 3) && (!arg[3] || arg[3] == ',')) {
			for (const char *p = arg + 3; *p == ','; p += strcspn(p + 1, ",") + 1) {
				size_t l = strcspn(p + 1, ",");

				if (l == 8 && !strncmp(p + 1, "noheader", 8))
					sel->noheader = 1;
				else if (l == 7 && !strncmp(p + 1, "nounits", 7))
					sel->nounits = 1;
				else
					return cli_usage(
					    cli,
					    "--format '%s': after csv only noheader and "
					    "nounits (csv=COLUMN,... picks columns)",
					    arg);
			}
			sel->csv = 1;
			return CLI_CONTINUE;
		}
		return cli_usage(cli,
		                 "--format '%s': use csv, csv=COLUMN,COLUMN... or "
		                 "csv,noheader,nounits",
		                 arg);
	case OPT_SELECT_WATCH:
		return watch_option(cli, sel, arg);
	}
	return -1;
}

/* Inside a Slurm job the node's other GPUs are other jobs': the GPUs of
 * the allocation as pick reads them (SLURM_STEP_GPUS / SLURM_JOB_GPUS
 * behind CUDA_VISIBLE_DEVICES), as index bits; 0 outside a job. */
static uint64_t slurm_gpus(const struct gm_snapshot *snap)
{
	struct pick_env env;
	uint64_t mask = 0;

	if (!getenv("SLURM_JOB_ID") || pick_env_init(&env, snap) < 0)
		return 0;
	for (size_t k = 0; env.usable && k < snap->gpu_count; k++)
		if (env.usable[k])
			mask |= (uint64_t)1 << (snap->gpus[k].index & 63);
	pick_env_release(&env);
	return mask;
}

int cli_select_resolve(struct cli *cli, struct cli_select *sel, const struct gm_snapshot *snap)
{
	char *list, *tok, *save = NULL;
	const struct gm_gpu *g;
	uint64_t slurm = slurm_gpus(snap);
	int rc = EXIT_OK;

	sel->gpus = 0;
	if (!sel->gpus_arg) {
		sel->gpus = slurm;
		return EXIT_OK;
	}
	list = strdup(sel->gpus_arg);
	if (!list)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned lo, hi;
		int named = 0;

		if (gpu_index_range(tok, strlen(tok), &lo, &hi)) {
			if (lo > hi) {
				rc = cli_usage(cli,
				               "-i '%s': a range of indices runs upwards (%u-%u)",
				               tok, hi, lo);
				break;
			}
			for (size_t i = 0; i < snap->gpu_count; i++)
				if (lo <= snap->gpus[i].index && snap->gpus[i].index <= hi) {
					sel->gpus |= (uint64_t)1 << (snap->gpus[i].index & 63);
					named = 1;
				}
			if (named)
				continue;
			g = NULL;
		} else {
			g = gm_snapshot_find(snap, tok);
		}
		if (!g) {
			rc = cli_usage(cli,
			               "-i '%s': names no GPU (an NVML index 0-%zu or a "
			               "unique UUID prefix; see gpuman status)",
			               tok, snap->gpu_count ? snap->gpu_count - 1 : 0);
			break;
		}
		sel->gpus |= (uint64_t)1 << (g->index & 63);
	}
	if (rc == EXIT_OK && !sel->gpus)
		rc = cli_usage(cli, "-i '%s': name a GPU", sel->gpus_arg);
	if (rc == EXIT_OK && slurm && !(sel->gpus &= slurm))
		rc = cli_usage(cli,
		               "-i '%s': not a GPU of Slurm job %s (its GPUs are shown without -i)",
		               sel->gpus_arg, getenv("SLURM_JOB_ID"));
	free(list);
	return rc;
}

int cli_select_gpu(const struct cli_select *sel, unsigned index)
{
	return !sel->gpus || (sel->gpus & ((uint64_t)1 << (index & 63)));
}

int cli_select_user(const struct cli_select *sel, int has_user, unsigned uid)
{
	if (!sel->user_count)
		return 1;
	for (size_t i = 0; has_user && i < sel->user_count; i++)
		if (sel->uids[i] == uid)
			return 1;
	return 0;
}

int cli_select_user_name(const struct cli_select *sel, int has_user, const char *name)
{
	if (!sel->user_count)
		return 1;
	for (size_t i = 0; has_user && i < sel->user_count; i++)
		if (sel->names[i][0] && !strcmp(sel->names[i], name))
			return 1;
	return 0;
}

int cli_select_proc(const struct cli_select *sel, const struct gm_proc *p)
{
	return cli_select_gpu(sel, p->gpu) && cli_select_user(sel, p->has_user, p->uid);
}

int csv_choose(struct cli *cli, const struct csv_column *cols, size_t count,
               const struct cli_select *sel, size_t *idx)
{
	char *list, *tok, *save = NULL;
	size_t n = 0, k;

	if (!sel->columns) {
		for (k = 0; k < count; k++)
			idx[k] = k;
		return (int)count;
	}
	list = strdup(sel->columns);
	if (!list)
		return cli_error(cli, EXIT_FAIL, "out of memory"), -1;
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		for (k = 0; k < count && strcmp(cols[k].name, tok); k++)
			;
		if (k == count) {
			char names[512];
			size_t o = 0;

			for (k = 0; k < count && o < sizeof names; k++)
				o += (size_t)snprintf(names + o, sizeof names - o, "%s%s",
				                      k ? "," : "", cols[k].name);
			cli_usage(cli, "--format csv: unknown column '%s' (columns: %s)", tok,
			          names);
			free(list);
			return -1;
		}
		if (n < count)
			idx[n++] = k;
	}
	free(list);
	return (int)n;
}

void csv_header(const struct cli_select *sel, const struct csv_column *cols, const size_t *idx,
                size_t n)
{
	if (sel->noheader)
		return;
	for (size_t i = 0; i < n; i++)
		printf("%s%s", i ? "," : "", cols[idx[i]].name);
	putchar('\n');
}

void csv_field(int first, const char *text)
{
	char safe[1024];

	if (!first)
		putchar(',');
	if (!text)
		return;
	text_printable(safe, sizeof safe, text);
	if (!strpbrk(safe, ",\"")) {
		fputs(safe, stdout);
		return;
	}
	putchar('"');
	for (const char *s = safe; *s; s++) {
		if (*s == '"')
			putchar('"');
		putchar(*s);
	}
	putchar('"');
}

/* Is GPU g shown: selected, and (with --user) used or leased by one of
 * the users? */
int cli_select_gpu_shown(const struct cli_select *sel, const struct cli_look *look,
                         const struct gm_gpu *g)
{
	if (!cli_select_gpu(sel, g->index))
		return 0;
	if (!sel->user_count)
		return 1;
	for (size_t i = 0; i < look->snap->proc_count; i++)
		if (look->snap->procs[i].gpu == g->index &&
		    cli_select_proc(sel, &look->snap->procs[i]))
			return 1;
	for (size_t i = 0; i < look->view->lease_count; i++)
		for (size_t k = 0; k < look->view->leases[i].gpu_count; k++)
			if (look->view->leases[i].indices[k] == g->index &&
			    cli_select_user_name(sel, 1, look->view->leases[i].user))
				return 1;
	return 0;
}
