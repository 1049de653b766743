/*
 * cmd_waste.c - `gpuman waste`: what holds GPUs without using them, per
 * user, with the advice that fixes it.  The finding is lib/waste.c's; this
 * file only shows it.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "gpuman-internal.h"
#include "select.h"

enum { OPT_GRACE = OPT_CMD_BASE };

/* Exit status when something is found, for scripts (gpuman(1), EXIT STATUS). */
#define EXIT_WASTE_FOUND 3

struct waste_args {
	struct waste_opts opts;
	struct cli_select sel;
};

static int waste_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct waste_args *args = data;
	struct waste_opts *opts = &args->opts;
	char err[256];
	int64_t ms;

	if (opt != OPT_GRACE)
		return cli_select_option(cli, &args->sel, opt, arg);
	if (parse_duration_ms(arg, &ms, err, sizeof err) < 0)
		return cli_usage(cli, "--grace '%s': %s", arg, err);
	opts->lease_grace_ms = ms;
	return CLI_CONTINUE;
}

/* One finding: what, then the advice, indented under it. */
static void print_item(const struct cli *cli, const struct cli_look *look,
                       const struct waste_opts *opts, const struct waste_item *it)
{
	char text[1024];

	printf("  %s%-10s%s %s\n", c_yellow(cli), waste_kind_name(it->kind), c_reset(cli),
	       waste_what(look->snap, look->view, opts, it, text, sizeof text));
	printf("  %10s %sadvice:%s %s\n", "", c_bold(cli), c_reset(cli),
	       waste_advice(look->snap, look->view, it, text, sizeof text));
}

/* A user's processes outside gpuman, on one line: "2028329 (GPU 0), ..." */
static size_t print_unleased(const struct cli *cli, const struct cli_look *look,
                             const struct waste_report *rep, size_t first)
{
	const struct waste_item *it = &rep->items[first];
	char gpus[256], text[1024], user[CLI_SAFE_SIZE];
	size_t i;

	printf("  %s%-10s%s pid", c_yellow(cli), waste_kind_name(it->kind), c_reset(cli));
	for (i = first;
	     i < rep->count && rep->items[i].kind == WASTE_UNLEASED &&
	     !strcmp(rep->items[i].user, it->user) && rep->items[i].has_user == it->has_user;
	     i++) {
		const struct waste_item *u = &rep->items[i];

		printf("%s %u (%s", i > first ? "," : "", u->pid,
		       waste_where(look->snap, u, u->gpus, gpus, sizeof gpus));
		if (u->lease >= 0)
			printf(", outside its lease %s",
			       cli_safe(user, look->view->leases[u->lease].id));
		if (u->on_lease >= 0)
			printf(", leased to %s",
			       cli_safe(user, look->view->leases[u->on_lease].user));
		printf(")");
	}
	printf(" outside gpuman\n  %10s %sadvice:%s %s\n", "", c_bold(cli), c_reset(cli),
	       waste_advice(look->snap, look->view, it, text, sizeof text));
	return i;
}

void cli_waste_print(const struct cli *cli, const struct cli_look *look,
                     const struct waste_opts *opts, const struct waste_report *rep)
{
	char user[CLI_SAFE_SIZE];

	for (size_t i = 0; i < rep->count;) {
		const struct waste_item *it = &rep->items[i];

		if (i == 0 || it->has_user != rep->items[i - 1].has_user ||
		    strcmp(it->user, rep->items[i - 1].user))
			printf("%s%s%s\n", c_bold(cli),
			       it->has_user ? cli_safe(user, it->user)
			                    : "user unknown (pid not in this machine's /proc: "
			                      "another container?)",
			       c_reset(cli));
		if (it->kind == WASTE_UNLEASED) {
			i = print_unleased(cli, look, rep, i);
			continue;
		}
		print_item(cli, look, opts, it);
		i++;
	}
}

static const struct csv_column waste_columns[] = {
    {"kind", "hog, idle-lease, unleased, over-limit"},
    {"user", ""},
    {"pid", ""},
    {"command", ""},
    {"lease", "id"},
    {"gpus", ""},
    {"compute_gpus", ""},
    {"held_mib", ""},
    {"held_s", ""},
    {"on_lease_of", "user"},
    {"what", ""},
    {"advice", ""},
};
#define WASTE_COLUMNS (sizeof waste_columns / sizeof waste_columns[0])

/* "0 1 5": GPU indices, space separated; NULL for none. */
static const char *gpu_cell(uint64_t gpus, char *buf, size_t len)
{
	if (!gpus)
		return NULL;
	waste_gpu_list(gpus, buf, len);
	for (char *c = buf; *c; c++)
		if (*c == ',')
			*c = ' ';
	return buf;
}

/* One line per finding, as --json has them; a field a finding lacks is empty. */
static void print_csv(const struct cli_select *sel, const struct cli_look *look,
                      const struct waste_opts *opts, const struct waste_report *rep,
                      const size_t *idx, size_t n)
{
	char buf[1024];

	csv_header(sel, waste_columns, idx, n);
	for (size_t i = 0; i < rep->count; i++) {
		const struct waste_item *it = &rep->items[i];
		const struct lease_info *l = it->lease >= 0 ? &look->view->leases[it->lease] : NULL;

		for (size_t c = 0; c < n; c++) {
			const char *v = buf;

			switch (idx[c]) {
			case 0:
				v = waste_kind_name(it->kind);
				break;
			case 1:
				v = it->has_user ? it->user : NULL;
				break;
			case 2:
				snprintf(buf, sizeof buf, "%u", it->pid);
				break;
			case 3:
				v = it->command[0] ? it->command : NULL;
				break;
			case 4:
				v = l ? l->id : NULL;
				break;
			case 5:
				v = gpu_cell(it->kind == WASTE_UNLEASED ? it->gpus : it->idle_gpus,
				             buf, sizeof buf);
				break;
			case 6:
				v = it->kind == WASTE_HOG ? gpu_cell(it->busy_gpus, buf, sizeof buf)
				                          : NULL;
				break;
			case 7:
				snprintf(buf, sizeof buf, "%llu", (unsigned long long)it->held_mib);
				v = it->kind != WASTE_IDLE_LEASE && it->kind != WASTE_OVER_LIMIT
				        ? buf
				        : NULL;
				break;
			case 8:
				snprintf(buf, sizeof buf, "%lld", (long long)(it->age_ms / 1000));
				v = it->kind == WASTE_IDLE_LEASE || it->kind == WASTE_OVER_LIMIT
				        ? buf
				        : NULL;
				break;
			case 9:
				v = it->kind == WASTE_UNLEASED && it->on_lease >= 0
				        ? look->view->leases[it->on_lease].user
				        : NULL;
				break;
			case 10:
				v = waste_what(look->snap, look->view, opts, it, buf, sizeof buf);
				break;
			default:
				v = waste_advice(look->snap, look->view, it, buf, sizeof buf);
				break;
			}
			csv_field(c == 0, v);
		}
		putchar('\n');
	}
}

/* -i and -u: keep the findings that touch those GPUs and users. */
static void keep_selected(const struct cli_select *sel, struct waste_report *rep)
{
	size_t n = 0;

	for (size_t i = 0; i < rep->count; i++) {
		const struct waste_item *it = &rep->items[i];

		if (!cli_select_user_name(sel, it->has_user, it->user) ||
		    (sel->gpus && !((it->idle_gpus | it->busy_gpus | it->gpus) & sel->gpus)))
			continue;
		rep->items[n++] = *it;
	}
	rep->count = n;
}

static int waste_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option own[] = {
	    {"grace", required_argument, NULL, OPT_GRACE}, CLI_SELECT_LONGOPTS, {0}};
	struct waste_args args = {WASTE_OPTS_INIT, CLI_SELECT_INIT};
	struct waste_opts opts;
	struct waste_report rep = WASTE_REPORT_INIT;
	struct cli_look look;
	size_t idx[WASTE_COLUMNS], shown = 0;
	int rc, ncols = 0;

	rc = cli_look_with(cli, &cmd_waste, argc, argv, CLI_SELECT_SHORTOPTS, own, waste_option,
	                   &args, &look);
	if (rc != CLI_CONTINUE)
		return rc;
	opts = args.opts;
	rc = cli_select_resolve(cli, &args.sel, look.snap);
	if (rc != EXIT_OK)
		goto done;
	if (args.sel.csv &&
	    (ncols = csv_choose(cli, waste_columns, WASTE_COLUMNS, &args.sel, idx)) < 0) {
		rc = EXIT_USAGE;
		goto done;
	}
	if (cli_waste(cli, &look, &opts, &rep) < 0) {
		rc = EXIT_FAIL;
		goto done;
	}
	keep_selected(&args.sel, &rep);
	for (size_t i = 0; i < look.snap->gpu_count; i++) /* those -i looks at */
		shown += cli_select_gpu(&args.sel, look.snap->gpus[i].index) != 0;
	if (cli->json) {
		json_t *o = json_object();

		json_object_set_new(o, "window_s", json_integer(opts.window_s));
		json_object_set_new(o, "grace_s", json_integer(opts.lease_grace_ms / 1000));
		json_object_set_new(o, "waste",
		                    listing_waste_json(look.snap, look.view, &opts, &rep));
		rc = cli_print_json(o);
	} else if (args.sel.csv) {
		print_csv(&args.sel, &look, &opts, &rep, idx, (size_t)ncols);
	} else if (rep.count == 0) {
		printf("no waste found on %zu GPU%s (per-process utilization over the last %us; "
		       "leases older than %llds)\n",
		       shown, shown == 1 ? "" : "s", opts.window_s,
		       (long long)(opts.lease_grace_ms / 1000));
	} else {
		printf("%sgpuman waste%s: %zu finding%s on %zu GPU%s (per-process utilization over "
		       "the last %us; leases older than %llds)\n",
		       c_bold(cli), c_reset(cli), rep.count, rep.count == 1 ? "" : "s", shown,
		       shown == 1 ? "" : "s", opts.window_s,
		       (long long)(opts.lease_grace_ms / 1000));
		cli_waste_print(cli, &look, &opts, &rep);
	}
	for (size_t i = 0; !cli->json && !args.sel.csv && i < look.snap->note_count; i++)
		if (strstr(look.snap->notes[i], "utilization"))
			printf("%snote: %s%s\n", c_dim(cli), look.snap->notes[i], c_reset(cli));
	if (rc == EXIT_OK && rep.count)
		rc = EXIT_WASTE_FOUND;
done:
	waste_report_release(&rep);
	cli_look_release(&look);
	return rc;
}

const struct cmd_entry cmd_waste = {
    "waste",
    "what holds GPUs without using them, per user, with advice",
    "usage: gpuman waste [--grace DURATION] [-i GPU[,GPU]] [-u USER[,USER]]\n"
    "                    [--format csv[=COLUMNS]] [--json] [--sim FILE]\n"
    "\n"
    "Finds, per user:\n"
    "  hog         a process holding memory on GPUs where it computes nothing\n"
    "              (per-process utilization from NVML, over the last 10 s): a\n"
    "              framework that opened every visible GPU, an idle notebook\n"
    "  idle-lease  a gpuman lease older than the grace period with a GPU on\n"
    "              which none of its processes runs; a reservation (gpuman\n"
    "              reserve) with a GPU on which nothing of its user runs\n"
    "  unleased    a compute process outside any gpuman lease: nothing stops\n"
    "              gpuman from placing someone else's job beside it\n"
    "On a GPU in MIG mode the slice is the unit: a lease of a slice is used only\n"
    "by its processes in that slice, and findings name the slice.\n"
    "  over-limit  a gpuman lease held longer than the admin's max_lease (a\n"
    "              library client's: run and the queue end theirs at the limit)\n"
    "and says what to do about each.\n"
    "\n"
    "  --grace DURATION  leases younger than this are still starting (default 10m)\n"
    "  -i, --id GPU[,GPU]      only findings on these GPUs (indices, ranges such as\n"
    "                          0-3, or UUID prefixes)\n"
    "  -u, --user USER[,USER]  only these users' findings\n"
    "  --format csv[=COLUMNS]  one CSV line per finding with a header; COLUMNS from\n"
    "                    kind, user, pid, command, lease, gpus, compute_gpus,\n"
    "                    held_mib, held_s, on_lease_of, what, advice (a field a\n"
    "                    finding lacks is empty; GPU lists are space separated)\n"
    "  --json            the findings as JSON (schema in gpuman-waste(1))\n"
    "  --sim FILE        use the NVML simulator with this scenario\n"
    "\n"
    "exit status: 0 nothing found, 3 waste found, 1 failure, 2 usage error\n",
    waste_exec,
    NULL,
};
