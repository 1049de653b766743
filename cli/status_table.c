/*
 * status_table.c - `gpuman status` as a table on the terminal (cmd_status.c
 * chooses it, the JSON or the CSV): a line of the machine, a row a GPU and
 * MIG slice with its processes and leases, then the waste found.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "gpuman-internal.h"
#include "select.h"
#include "status.h"

/* Findings shown at the end of status; `gpuman waste` shows them all. */
#define STATUS_WASTE_LINES 5

/*
 * The table's layout for the terminal's width (cli_term_width; 0 in a
 * pipe: one line per GPU however long).  Nothing is cut to fit: the NAME
 * column is as wide as the longest name (or MIG slice label) shown, a GPU's
 * processes and leases continue on lines of their own under PROCESSES, and
 * where even one of them would not fit beside the readings, each GPU is
 * stacked: name, then readings, then its processes, each on lines of their
 * own.
 */
struct layout {
	int width;   /* 0: unlimited */
	int name_w;  /* NAME column */
	int fixed_w; /* index to power, before PROCESSES */
	int stacked;
	int narrow; /* stacked, and even the readings need two lines */
};
#define STATUS_MIN_NAME 26
#define STATUS_STACK_INDENT 5
/* The readings after the name: "%4uC %4u%% " + " %6s / %-6s %3u%% " + "%4u / %-4uW ". */
#define STATUS_READINGS_W 47
/* A stacked GPU's readings line: the indent, then "%4uC %4u%% " and the
 * rest of the readings. */
#define STATUS_STACKED_READINGS_W (STATUS_STACK_INDENT + STATUS_READINGS_W - 1)
/* A process entry, "alice 2028329 10.4G", needs about this much room. */
#define STATUS_ITEM_ROOM 20

/* Where the next character goes, for wrapping. */
struct cursor {
	int col;
	int width;  /* 0: never wrap */
	int indent; /* continuation lines start here */
};

/* Columns text takes on a terminal: colour sequences take none. */
static int visible_len(const char *s)
{
	int n = 0;

	while (*s) {
		if (*s == '\033') {
			while (*s && *s != 'm')
				s++;
			if (*s)
				s++;
			continue;
		}
		n += ((unsigned char)*s & 0xc0) != 0x80; /* UTF-8: count lead bytes */
		s++;
	}
	return n;
}

static void newline_indent(struct cursor *c)
{
	printf("\n%*s", c->indent, "");
	c->col = c->indent;
}

/* One entry of a list: sep (", " or " ") then item, on a new line when it
 * would run past the width; a comma stays at the end of the line. */
static void put_item(struct cursor *c, const char *sep, const char *item)
{
	int len = visible_len(item), comma = sep[0] == ',';

	if (c->width && c->col > c->indent && c->col + (int)strlen(sep) + len > c->width) {
		if (comma)
			putchar(',');
		newline_indent(c);
	} else {
		fputs(sep, stdout);
		c->col += (int)strlen(sep);
	}
	fputs(item, stdout);
	c->col += len;
}

/* Text of people, word by word: long lines go on under indent. */
static void put_words(struct cursor *c, const char *text)
{
	char word[CLI_SAFE_SIZE];

	while (*text) {
		size_t n = strcspn(text, " ");

		if (n >= sizeof word)
			n = sizeof word - 1;
		memcpy(word, text, n);
		word[n] = '\0';
		put_item(c, c->col > c->indent ? " " : "", word);
		text += n;
		while (*text == ' ')
			text++;
	}
}

/* "MIG 1g.10gb MIG-4f2a8c1d": a slice's NAME cell, the UUID shortened to
 * what CUDA_VISIBLE_DEVICES takes as a unique prefix. */
static const char *mig_label(const struct gm_mig *m, char *buf, size_t len)
{
	snprintf(buf, len, "MIG %s %.12s", m->profile[0] ? m->profile : "?",
	         m->uuid[0] ? m->uuid : "?");
	return buf;
}

static void layout_init(struct layout *l, const struct cli_select *sel, const struct cli_look *look,
                        int (*shown)(const struct cli_select *, const struct cli_look *,
                                     const struct gm_gpu *))
{
	const struct gm_snapshot *snap = look->snap;
	char label[64];

	l->width = cli_term_width();
	l->name_w = STATUS_MIN_NAME;
	for (size_t i = 0; i < snap->gpu_count; i++) {
		int n = visible_len(snap->gpus[i].name[0] ? snap->gpus[i].name : "?");

		if (shown(sel, look, &snap->gpus[i]) && n > l->name_w)
			l->name_w = n;
	}
	for (size_t i = 0; i < snap->mig_count; i++) {
		int n = visible_len(mig_label(&snap->migs[i], label, sizeof label));

		if (n > l->name_w)
			l->name_w = n;
	}
	l->fixed_w = 3 + 2 + l->name_w + 1 + STATUS_READINGS_W;
	l->stacked = l->width && l->width < l->fixed_w + 1 + STATUS_ITEM_ROOM;
	l->narrow = l->stacked && l->width < STATUS_STACKED_READINGS_W;
}

/* "1h05m", "42s": the time a reservation has left. */
static const char *fmt_left(char *buf, size_t len, int64_t ms)
{
	int64_t sec = ms > 0 ? (ms + 999) / 1000 : 0;

	if (sec < 60)
		snprintf(buf, len, "%llds", (long long)sec);
	else if (sec < 3600)
		snprintf(buf, len, "%lldm%02llds", (long long)(sec / 60), (long long)(sec % 60));
	else
		snprintf(buf, len, "%lldh%02lldm", (long long)(sec / 3600),
		         (long long)(sec % 3600 / 60));
	return buf;
}

/* ", pid 4242 over its limit (max_lease 2h of [limits])" for a lease held
 * longer than the admin allows; "" else. */
static const char *over_limit(char *buf, size_t len, const struct lease_info *l)
{
	char limit[32];

	if (!l->over_limit_ms)
		return "";
	duration_text(limit, sizeof limit, l->over_limit_ms);
	snprintf(buf, len, ", pid %d over its limit (max_lease %s of %s)", l->pid, limit,
	         l->limit_from);
	return buf;
}

/* " [leased: alice]", ", [share: bob 8.0G]": the leases of the whole GPU g
 * (mig NULL), or of its slice mig. */
static void put_leases(const struct cli *cli, const struct cli_select *sel,
                       const struct registry_view *view, const struct gm_gpu *g,
                       const struct gm_mig *mig, struct cursor *c)
{
	char size[16], user[CLI_SAFE_SIZE], item[CLI_SAFE_SIZE + 320], left[32], over[200];
	int n = 0;

	for (size_t i = 0; i < view->lease_count; i++) {
		const struct lease_info *l = &view->leases[i];

		for (size_t k = 0; k < l->gpu_count; k++) {
			if (strcmp(l->uuids[k], g->uuid) || !cli_select_user_name(sel, 1, l->user))
				continue;
			if (mig ? strcmp(l->migs[k], mig->uuid) != 0 : l->migs[k][0] != '\0')
				continue;
			if (l->reservation)
				snprintf(item, sizeof item, "%s[reserved: %s, %s left]%s",
				         c_yellow(cli), cli_safe(user, l->user),
				         fmt_left(left, sizeof left, l->expires_ms - now_ms()),
				         c_reset(cli));
			else if (l->exclusive)
				snprintf(item, sizeof item, "%s[leased: %s%s]%s", c_yellow(cli),
				         cli_safe(user, l->user), over_limit(over, sizeof over, l),
				         c_reset(cli));
			else
				snprintf(item, sizeof item, "%s[share: %s %s%s]%s", c_yellow(cli),
				         cli_safe(user, l->user),
				         fmt_mib(size, sizeof size, l->share_mib),
				         over_limit(over, sizeof over, l), c_reset(cli));
			put_item(c, n++ ? ", " : " ", item);
		}
	}
}

/* The processes of a row ("alice 2028329 10.4G, pid 3141592 485M", "-" for
 * none), then its leases; of the slice mig, else of the whole GPU g. */
static void put_processes(const struct cli *cli, const struct cli_select *sel,
                          const struct gm_snapshot *snap, const struct registry_view *view,
                          const struct gm_gpu *g, const struct gm_mig *mig, const struct layout *l,
                          struct cursor *c)
{
	char a[16], user[CLI_SAFE_SIZE], item[CLI_SAFE_SIZE + 32];
	int printed = 0;

	for (size_t i = 0; i < snap->proc_count; i++) {
		const struct gm_proc *p = &snap->procs[i];
		int o;

		if ((mig ? gm_proc_mig(snap, p) != mig : p->gpu != g->index) ||
		    !cli_select_proc(sel, p))
			continue;
		o = snprintf(item, sizeof item, "%s %u",
		             p->has_user ? cli_safe(user, p->user) : "pid", p->pid);
		if (p->has_mem && o > 0 && (size_t)o < sizeof item)
			snprintf(item + o, sizeof item - (size_t)o, " %s",
			         fmt_mib(a, sizeof a, p->used_mib));
		put_item(c, printed ? ", " : l->stacked ? "" : " ", item);
		printed = 1;
	}
	if (!printed) {
		snprintf(item, sizeof item, "%s-%s", c_dim(cli), c_reset(cli));
		put_item(c, l->stacked ? "" : " ", item);
	}
	put_leases(cli, sel, view, g, mig, c);
	putchar('\n');
}

/* Where a row's PROCESSES start: beside the readings, or stacked on a line
 * of their own. */
static void start_processes(const struct layout *l, struct cursor *c)
{
	if (l->stacked) {
		printf("\n%*s", STATUS_STACK_INDENT, "");
		*c = (struct cursor){STATUS_STACK_INDENT, l->width, STATUS_STACK_INDENT};
	} else {
		putchar(' ');
		*c = (struct cursor){l->fixed_w, l->width, l->fixed_w + 1};
	}
}

/* A MIG slice under its GPU: profile, the UUID that CUDA_VISIBLE_DEVICES
 * takes (shortened), memory, its processes and lease. */
static void print_mig_row(const struct cli *cli, const struct cli_select *sel,
                          const struct gm_snapshot *snap, const struct registry_view *view,
                          const struct gm_gpu *g, const struct gm_mig *m, const struct layout *l)
{
	char a[16], b[16], label[64];
	struct cursor c;

	mig_label(m, label, sizeof label);
	if (l->stacked)
		printf("%3s  %s\n%*s%5s %5s ", "", label, STATUS_STACK_INDENT, "", "", "");
	else
		printf("%3s  %-*s %5s %5s ", "", l->name_w, label, "", "");
	if (m->valid & GM_MIG_HAS_MEMORY)
		printf(" %6s / %-6s %3u%% ", fmt_mib(a, sizeof a, m->mem_used_mib),
		       fmt_mib(b, sizeof b, m->mem_total_mib),
		       m->mem_total_mib ? (unsigned)(m->mem_used_mib * 100 / m->mem_total_mib) : 0);
	else
		printf(" %-19s ", "      - / -");
	if (!l->stacked)
		printf("%12s", ""); /* no power of its own */
	start_processes(l, &c);
	put_processes(cli, sel, snap, view, g, m, l, &c);
}

/* A GPU's row: its readings from the GPU field table (gm_gpu_value), in
 * the table's own layout, which fits 80 columns and the README's picture;
 * a reading added to the field table shows in info, the CSV, the JSON and
 * the page, not here. */
static void print_gpu_row(const struct cli *cli, const struct cli_select *sel,
                          const struct gm_snapshot *snap, const struct registry_view *view,
                          const struct gm_gpu *g, const struct layout *l)
{
	char a[16], b[16];
	struct cursor c;
	int64_t v, w;

	if (l->stacked)
		printf("%3u  %s\n%*s", g->index, g->name[0] ? g->name : "?", STATUS_STACK_INDENT,
		       "");
	else
		printf("%3u  %-*s ", g->index, l->name_w, g->name[0] ? g->name : "?");
	if (g->state != GM_GPU_OK) {
		printf("%s%s: %s%s\n", c_red(cli), g->state == GM_GPU_LOST ? "lost" : "error",
		       g->note, c_reset(cli));
		return;
	}
	if (gm_gpu_value(g, GM_GPU_TEMPERATURE_C, &v))
		printf("%4lldC ", (long long)v);
	else
		printf("%5s ", "-");
	if (gm_gpu_value(g, GM_GPU_UTIL_GPU_PCT, &v))
		printf("%s%4lld%%%s ",
		       v >= 80   ? c_red(cli)
		       : v >= 30 ? c_yellow(cli)
		                 : c_green(cli),
		       (long long)v, c_reset(cli));
	else
		printf("%5s ", "-");
	if (gm_gpu_value(g, GM_GPU_MEM_USED_MIB, &v) && gm_gpu_value(g, GM_GPU_MEM_TOTAL_MIB, &w))
		printf(" %6s / %-6s %3u%% ", fmt_mib(a, sizeof a, (uint64_t)v),
		       fmt_mib(b, sizeof b, (uint64_t)w), w ? (unsigned)(v * 100 / w) : 0);
	else
		printf(" %-19s ", "      - / -");
	if (l->narrow)
		printf("\n%*s", STATUS_STACK_INDENT, "");
	if (gm_gpu_value(g, GM_GPU_POWER_MW, &v) && gm_gpu_value(g, GM_GPU_POWER_LIMIT_MW, &w))
		printf("%4lld / %-4lldW", (long long)(v / 1000), (long long)(w / 1000));
	else if (gm_gpu_value(g, GM_GPU_POWER_MW, &v))
		printf("%4lld / -   W", (long long)(v / 1000));
	else
		printf("%12s", "-");
	start_processes(l, &c);
	put_processes(cli, sel, snap, view, g, NULL, l, &c);
	for (size_t i = 0; i < snap->mig_count; i++)
		if (snap->migs[i].gpu == g->index)
			print_mig_row(cli, sel, snap, view, g, &snap->migs[i], l);
}

int status_waste_shown(const struct cli_select *sel, const struct waste_item *it)
{
	return cli_select_user_name(sel, it->has_user, it->user) &&
	       (!sel->gpus || ((it->idle_gpus | it->busy_gpus | it->gpus) & sel->gpus));
}

/* The hogs and idle leases, then one line for the processes outside gpuman. */
static void print_waste(const struct cli *cli, const struct cli_select *sel,
                        const struct cli_look *look, const struct waste_opts *wopts,
                        const struct waste_report *waste, int width)
{
	char what[CLI_SAFE_SIZE];
	size_t shown = 0, unleased = 0;

	for (size_t i = 0; i < waste->count; i++) {
		const struct waste_item *it = &waste->items[i];

		if (!status_waste_shown(sel, it))
			continue;
		if (it->kind == WASTE_UNLEASED) {
			unleased++;
			continue;
		}
		if (shown == 0)
			printf("%swaste (gpuman waste for advice):%s\n", c_bold(cli), c_reset(cli));
		if (++shown > STATUS_WASTE_LINES)
			continue;
		{
			struct cursor c = {13, width, 13};

			printf("  %s%-10s%s ", c_yellow(cli), waste_kind_name(it->kind),
			       c_reset(cli));
			put_words(&c,
			          waste_what(look->snap, look->view, wopts, it, what, sizeof what));
			putchar('\n');
		}
	}
	if (shown > STATUS_WASTE_LINES)
		printf("  ... and %zu more\n", shown - STATUS_WASTE_LINES);
	if (unleased && !shown)
		printf("%swaste (gpuman waste for advice):%s\n", c_bold(cli), c_reset(cli));
	if (unleased) {
		struct cursor c = {13, width, 13};

		printf("  %s%-10s%s ", c_yellow(cli), "unleased", c_reset(cli));
		snprintf(what, sizeof what, "%zu process%s on GPUs outside gpuman", unleased,
		         unleased == 1 ? "" : "es");
		put_words(&c, what);
		putchar('\n');
	}
}

void status_print_table(const struct cli *cli, const struct cli_select *sel,
                        const struct cli_look *look, const struct waste_opts *wopts,
                        const struct waste_report *waste)
{
	const struct gm_snapshot *snap = look->snap;
	const struct registry_view *view = look->view;
	const char *sim = getenv("GPUMAN_SIM");
	char age[32], user[CLI_SAFE_SIZE], cmd[CLI_SAFE_SIZE], what[CLI_SAFE_SIZE];
	size_t shown = 0;
	struct layout l;

	layout_init(&l, sel, look, cli_select_gpu_shown);

	if (sim && strrchr(sim, '/'))
		sim = strrchr(sim, '/') + 1;
	{
		struct cursor c = {0, l.width, 0};
		char item[PATH_MAX + 32];

		snprintf(item, sizeof item, "%sgpuman%s", c_bold(cli), c_reset(cli));
		put_item(&c, "", item);
		snprintf(item, sizeof item, "%zu GPU%s", snap->gpu_count,
		         snap->gpu_count == 1 ? "" : "s");
		put_item(&c, "  ", item);
		snprintf(item, sizeof item, "driver %s",
		         snap->driver_version[0] ? snap->driver_version : "?");
		put_item(&c, "  ", item);
		snprintf(item, sizeof item, "CUDA %d.%d", snap->cuda_driver_version / 1000,
		         snap->cuda_driver_version % 1000 / 10);
		put_item(&c, "  ", item);
		if (sim) {
			snprintf(item, sizeof item, "(simulated: %s)", sim);
			put_item(&c, "  ", item);
		}
		/* The reading's age: the broker may answer from its last one. */
		if (snap->from_broker) {
			snprintf(item, sizeof item, "read by the broker %lld ms ago",
			         (long long)snap->age_ms);
			put_item(&c, "  ", item);
		}
		putchar('\n');
	}
	if (snap->gpu_count) {
		if (l.stacked)
			printf("%s%3s  %s\n%*s%5s %5s  %-20s%s%*s%s\n%*s%s%s\n", c_bold(cli), "GPU",
			       "NAME", STATUS_STACK_INDENT, "", "TEMP", "UTIL",
			       "MEMORY USED / TOTAL", l.narrow ? "\n" : " ",
			       l.narrow ? STATUS_STACK_INDENT : 0, "", "POWER", STATUS_STACK_INDENT,
			       "", "PROCESSES (user pid memory)", c_reset(cli));
		else
			printf("%s%3s  %-*s %5s %5s  %-20s %-12s %s%s\n", c_bold(cli), "GPU",
			       l.name_w, "NAME", "TEMP", "UTIL", "MEMORY USED / TOTAL", "POWER",
			       l.width && l.width < l.fixed_w + 29 ? " PROCESSES"
			                                           : " PROCESSES (user pid memory)",
			       c_reset(cli));
		for (size_t i = 0; i < snap->gpu_count; i++)
			if (cli_select_gpu_shown(sel, look, &snap->gpus[i])) {
				print_gpu_row(cli, sel, snap, view, &snap->gpus[i], &l);
				shown++;
			}
		if (!shown)
			printf("%sno GPU with a process or lease of the selected users%s\n",
			       c_dim(cli), c_reset(cli));
	} else {
		printf("no NVIDIA GPU found\n");
	}
	shown = 0;
	for (size_t i = 0; i < view->waiter_count; i++) {
		const struct waiter_info *w = &view->waiters[i];

		if (!cli_select_user_name(sel, 1, w->user))
			continue;
		if (shown++ == 0)
			printf("%swaiting (served in this order):%s\n", c_bold(cli), c_reset(cli));
		if (!l.width) { /* a pipe: one line each, as scripts read it */
			printf("%3zu. %s, %s, pid %d, for %s: %.60s\n", i + 1,
			       cli_safe(user, w->user), cli_safe(what, w->summary), w->pid,
			       fmt_age(age, sizeof age, w->since_ms), cli_safe(cmd, w->command));
		} else {
			struct cursor c = {0, l.width, STATUS_STACK_INDENT};
			char head[CLI_SAFE_SIZE * 2 + 128];

			snprintf(head, sizeof head, "%3zu. %s, %s, pid %d, for %s:", i + 1,
			         cli_safe(user, w->user), cli_safe(what, w->summary), w->pid,
			         fmt_age(age, sizeof age, w->since_ms));
			put_words(&c, head);
			put_words(&c, cli_safe(cmd, w->command));
			putchar('\n');
		}
		if (w->limit[0])
			printf(
			    "     %swaits for its user's limit, not in the way of others: %s%s\n",
			    c_dim(cli), w->limit, c_reset(cli));
	}
	/* A long line: the broker listed its head, and counts the rest. */
	for (size_t i = 0; i < view->more_waiter_count; i++) {
		const struct view_more *m = &view->more_waiters[i];

		if (!cli_select_user_name(sel, 1, m->user))
			continue;
		if (shown++ == 0)
			printf("%swaiting (served in this order):%s\n", c_bold(cli), c_reset(cli));
		printf("     ... and %zu more from %s\n", m->count, cli_safe(user, m->user));
	}
	for (size_t i = 0; i < view->more_lease_count; i++) {
		const struct view_more *m = &view->more_leases[i];

		if (cli_select_user_name(sel, 1, m->user))
			printf("%s... and %zu more leases of %s (%zu GPU%s), not listed%s\n",
			       c_dim(cli), m->count, cli_safe(user, m->user), m->gpus,
			       m->gpus == 1 ? "" : "s", c_reset(cli));
	}
	shown = 0;
	for (size_t i = 0; i < view->lease_count; i++) {
		const struct lease_info *r = &view->leases[i];
		char left[32], list[256] = "", id[CLI_SAFE_SIZE];
		size_t used = 0;

		if (!r->reservation || !cli_select_user_name(sel, 1, r->user))
			continue;
		if (shown++ == 0)
			printf("%sreserved (gpuman release ID ends one early):%s\n", c_bold(cli),
			       c_reset(cli));
		for (size_t g = 0; g < r->gpu_count && used < sizeof list; g++)
			used += (size_t)snprintf(list + used, sizeof list - used, "%s%u",
			                         g ? "," : "", r->indices[g]);
		printf("  %s, GPU%s %s, %s left, id %s\n", cli_safe(user, r->user),
		       r->gpu_count > 1 ? "s" : "", list,
		       fmt_left(left, sizeof left, r->expires_ms - now_ms()), cli_safe(id, r->id));
	}
	print_waste(cli, sel, look, wopts, waste, l.width);
	if (snapshot_persistence_note(snap, what, sizeof what))
		printf("%snote: %s%s\n", c_dim(cli), what, c_reset(cli));
	for (size_t i = 0; i < snap->note_count; i++)
		printf("%snote: %s%s\n", c_dim(cli), cli_safe(what, snap->notes[i]), c_reset(cli));
	if (view->gpu_hours_unenforced)
		printf(
		    "%snote: max_gpu_hours (gpuman.conf) is not enforced: only the broker (gpuman "
		    "daemon, not running here) keeps a GPU-hours ledger that users cannot "
		    "delete%s\n",
		    c_dim(cli), c_reset(cli));
	{
		/* One line on a pipe, wrapped to a terminal like the rest. */
		struct cursor c = {0, l.width, 2};
		char line[CLI_SAFE_SIZE + 160];

		if (view->placement_enforced)
			snprintf(
			    line, sizeof line,
			    "placement: enforced by the kernel (%s): a job opens only its leased "
			    "GPUs",
			    cli_safe(what, view->placement));
		else
			snprintf(
			    line, sizeof line,
			    "placement: advisory, not enforced by the kernel (%s): leases bind "
			    "gpuman's users, not the driver",
			    cli_safe(what, view->placement[0] ? view->placement
			                                      : "the leases could not be read"));
		fputs(c_dim(cli), stdout);
		put_words(&c, line);
		printf("%s\n", c_reset(cli));
	}
}
