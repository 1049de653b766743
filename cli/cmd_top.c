/*
 * cmd_top.c - `gpuman top`: the machine live, in the spirit of nvitop and
 * htop: GPUs with memory and utilization bars, their processes with user,
 * own utilization, lease and waste marks, the waiting line.  Drawn with
 * ncurses (linked statically: the other commands must not pay for loading
 * it); without a terminal it is `status --watch`.
 */
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <ncurses.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "jobs.h"
#include "gpuman-internal.h"
#include "select.h"

enum { OPT_DELAY = OPT_CMD_BASE };
enum sort_key { SORT_GPU, SORT_UTIL, SORT_MEM, SORT_PID, SORT_USER, SORT_COUNT };
static const char *const sort_names[] = {"gpu", "util", "memory", "pid", "user"};

enum { PAIR_OK = 1, PAIR_WARN, PAIR_HOT, PAIR_TITLE };

struct top {
	struct cli *cli;
	struct cli_select sel;
	int64_t delay_ms;
	enum sort_key sort;
	char filter[64];       /* substring of user, command or pid */
	int mine;              /* only my processes */
	int selected;          /* row in the shown process list */
	unsigned selected_pid; /* follows the process when rows move */
	char message[256];
	struct cli_look look;
	int have_look;
	long *leases; /* per process: lease position or -1 */
	struct waste_report waste;
	size_t *rows; /* shown processes, sorted */
	size_t row_count;
	/* The user's own queue (gpuman submit): others' are private to them. */
	size_t queue_counts[JOB_STATE_COUNT];
	struct job *queued; /* the next few, oldest first */
	size_t queued_count;
	char queue_err[128]; /* why it could not be read, "" if it could */
};
#define TOP_QUEUED_SHOWN 2

static const struct gm_snapshot *sort_snap;
static enum sort_key sort_by;

static int row_cmp(const void *a, const void *b)
{
	const struct gm_proc *x = &sort_snap->procs[*(const size_t *)a];
	const struct gm_proc *y = &sort_snap->procs[*(const size_t *)b];
	int c = 0;

	switch (sort_by) {
	case SORT_UTIL:
		c = (y->util_pct > x->util_pct) - (y->util_pct < x->util_pct);
		break;
	case SORT_MEM:
		c = (y->used_mib > x->used_mib) - (y->used_mib < x->used_mib);
		break;
	case SORT_PID:
		c = (x->pid > y->pid) - (x->pid < y->pid);
		break;
	case SORT_USER:
		c = strcmp(x->has_user ? x->user : "~", y->has_user ? y->user : "~");
		break;
	default:
		break;
	}
	if (!c)
		c = (x->gpu > y->gpu) - (x->gpu < y->gpu);
	if (!c)
		c = (x->pid > y->pid) - (x->pid < y->pid);
	return c;
}

static int row_matches(const struct top *t, const struct gm_proc *p)
{
	char pid[16];

	if (!cli_select_proc(&t->sel, p))
		return 0;
	if (t->mine && (!p->has_user || p->uid != getuid()))
		return 0;
	if (!t->filter[0])
		return 1;
	snprintf(pid, sizeof pid, "%u", p->pid);
	return strstr(pid, t->filter) || (p->has_user && strstr(p->user, t->filter)) ||
	       strstr(p->command, t->filter);
}

static void release_look(struct top *t)
{
	if (!t->have_look)
		return;
	waste_report_release(&t->waste);
	jobstore_free_list(t->queued, t->queued_count);
	t->queued = NULL;
	t->queued_count = 0;
	free(t->leases);
	free(t->rows);
	t->leases = NULL;
	t->rows = NULL;
	t->row_count = 0;
	cli_look_release(&t->look);
	t->have_look = 0;
}

/* A fresh look at the machine; on failure the message says why and the old
 * view is gone (a vanished driver is news). */
static void refresh_look(struct top *t)
{
	struct waste_opts wopts = WASTE_OPTS_INIT;
	const struct gm_snapshot *snap;
	FILE *saved = stderr;
	char err[256] = "";

	release_look(t);
	/* cli_* report on stderr, which would scribble over the screen. */
	stderr = fmemopen(err, sizeof err - 1, "w");
	if (!stderr)
		stderr = saved;
	if (cli_look_take(t->cli, &t->look) != CLI_CONTINUE) {
		if (stderr != saved)
			fclose(stderr);
		stderr = saved;
		snprintf(t->message, sizeof t->message, "%s",
		         err[0] ? err : "cannot read the GPUs");
		return;
	}
	t->have_look = 1;
	t->queue_err[0] = '\0';
	if (queue_peek(t->queue_counts, &t->queued, &t->queued_count, TOP_QUEUED_SHOWN,
	               t->queue_err, sizeof t->queue_err) < 0 &&
	    !t->queue_err[0])
		snprintf(t->queue_err, sizeof t->queue_err, "cannot read your queue");
	t->leases = listing_proc_leases(t->look.snap, t->look.view);
	if (t->leases)
		cli_waste(t->cli, &t->look, &wopts, &t->waste);
	if (stderr != saved)
		fclose(stderr);
	stderr = saved;
	snap = t->look.snap;
	t->rows = calloc(snap->proc_count + 1, sizeof *t->rows);
	if (!t->rows || !t->leases) {
		release_look(t);
		snprintf(t->message, sizeof t->message, "out of memory");
		return;
	}
	for (size_t i = 0; i < snap->proc_count; i++)
		if (row_matches(t, &snap->procs[i]))
			t->rows[t->row_count++] = i;
	sort_snap = snap;
	sort_by = t->sort;
	qsort(t->rows, t->row_count, sizeof *t->rows, row_cmp);
	/* Keep the same process selected when the rows move. */
	for (size_t r = 0; r < t->row_count; r++)
		if (snap->procs[t->rows[r]].pid == t->selected_pid)
			t->selected = (int)r;
	if (t->selected >= (int)t->row_count)
		t->selected = t->row_count ? (int)t->row_count - 1 : 0;
}

/* "hog" / "out" for a process the waste finder names. */
static const char *waste_mark(const struct top *t, const struct gm_proc *p)
{
	for (size_t i = 0; i < t->waste.count; i++) {
		const struct waste_item *it = &t->waste.items[i];

		if (it->pid != p->pid)
			continue;
		if (it->kind == WASTE_HOG && (it->idle_gpus & ((uint64_t)1 << (p->gpu & 63))))
			return "hog";
		if (it->kind == WASTE_UNLEASED)
			return "out";
	}
	return "";
}

static int level_pair(unsigned pct)
{
	return pct >= 80 ? PAIR_HOT : pct >= 30 ? PAIR_WARN : PAIR_OK;
}

/* "[|||||     45%]" in width cells */
static void draw_bar(int y, int x, int width, unsigned pct, const char *label)
{
	int inner = width - 2, fill, len = (int)strlen(label);

	if (inner < 1)
		return;
	fill = (int)((long)inner * (pct > 100 ? 100 : pct) / 100);
	mvaddch(y, x, '[');
	attron(COLOR_PAIR(level_pair(pct)));
	for (int i = 0; i < inner; i++)
		mvaddch(y, x + 1 + i, i < fill ? '|' : ' ');
	attroff(COLOR_PAIR(level_pair(pct)));
	if (len <= inner)
		mvaddstr(y, x + 1 + inner - len, label);
	mvaddch(y, x + 1 + inner, ']');
}

/* A row per MIG slice under its GPU: profile, instance id, memory bar (a
 * slice is a device of its own for CUDA; utilization is per GPU only). */
static void draw_slices(const struct gm_snapshot *snap, const struct gm_gpu *g, int bar, int *y)
{
	char a[16], b[16], label[48];

	for (size_t i = 0; i < gm_snapshot_mig_count(snap) && *y < LINES - 4; i++) {
		const struct gm_mig *mig = gm_snapshot_mig(snap, i);
		int64_t used, total, gi;

		if (gm_mig_gpu(mig) != g->index)
			continue;
		mvprintw(*y, 0, "    %-8.8s",
		         gm_mig_profile(mig)[0] ? gm_mig_profile(mig) : "slice");
		if (gm_mig_value(mig, GM_MIG_GPU_INSTANCE_ID, &gi))
			printw(" gi %-3lld", (long long)gi);
		if (bar >= 8 && gm_mig_value(mig, GM_MIG_MEM_USED_MIB, &used) &&
		    gm_mig_value(mig, GM_MIG_MEM_TOTAL_MIB, &total) && total > 0) {
			snprintf(label, sizeof label, "%s/%s", fmt_mib(a, sizeof a, (uint64_t)used),
			         fmt_mib(b, sizeof b, (uint64_t)total));
			draw_bar(*y, 25, bar, (unsigned)(used * 100 / total), label);
		}
		(*y)++;
	}
}

static void draw_gpus(const struct top *t, int *y)
{
	const struct gm_snapshot *snap = t->look.snap;
	int bar = (COLS - 38) / 2; /* two bars, then temperature and power */
	char a[16], b[16], label[48];

	for (size_t i = 0; i < snap->gpu_count && *y < LINES - 4; i++) {
		const struct gm_gpu *g = &snap->gpus[i];
		unsigned mem_pct =
		    g->mem_total_mib ? (unsigned)(g->mem_used_mib * 100 / g->mem_total_mib) : 0;

		if (!cli_select_gpu(&t->sel, g->index))
			continue;
		mvprintw(*y, 0, "%3u %-20.20s", g->index, g->name);
		if (g->state != GM_GPU_OK) {
			printw("  %s", g->state == GM_GPU_LOST ? "lost" : "error");
		} else if (bar >= 8) {
			snprintf(label, sizeof label, "%s/%s",
			         fmt_mib(a, sizeof a, g->mem_used_mib),
			         fmt_mib(b, sizeof b, g->mem_total_mib));
			if (g->valid & GM_HAS_MEMORY)
				draw_bar(*y, 25, bar, mem_pct, label);
			snprintf(label, sizeof label, "%u%%", g->util_gpu_pct);
			if (g->valid & GM_HAS_UTIL)
				draw_bar(*y, 26 + bar, bar, g->util_gpu_pct, label);
			if (g->valid & GM_HAS_TEMPERATURE)
				mvprintw(*y, 27 + 2 * bar, "%3uC", g->temperature_c);
			if (g->valid & GM_HAS_POWER)
				printw(" %3uW", g->power_mw / 1000);
		}
		(*y)++;
		draw_slices(snap, g, bar, y);
	}
}

static void draw_procs(const struct top *t, int *y, int bottom)
{
	const struct gm_snapshot *snap = t->look.snap;
	char mem[16], util[8], user[CLI_SAFE_SIZE], cmd[CLI_SAFE_SIZE], id[CLI_SAFE_SIZE];
	int first = 0, room = bottom - *y - 1;

	attron(A_BOLD);
	mvprintw(*y, 0, "%3s %8s %-10s %5s %7s %-14s %-4s %s", "GPU", "PID", "USER", "UTIL",
	         "MEMORY", "LEASE", "MARK", "COMMAND");
	attroff(A_BOLD);
	(*y)++;
	if (room < 1)
		return;
	if (t->selected >= room)
		first = t->selected - room + 1;
	for (int r = first; r < (int)t->row_count && *y < bottom; r++) {
		const struct gm_proc *p = &snap->procs[t->rows[r]];
		long l = t->leases[t->rows[r]];
		const char *mark = waste_mark(t, p);

		if (p->has_util)
			snprintf(util, sizeof util, "%u%%", p->util_pct);
		if (r == t->selected)
			attron(A_REVERSE);
		mvprintw(*y, 0, "%3u %8u %-10.10s %5s %7s %-14.14s ", p->gpu, p->pid,
		         p->has_user ? cli_safe(user, p->user) : "?", p->has_util ? util : "-",
		         p->has_mem ? fmt_mib(mem, sizeof mem, p->used_mib) : "-",
		         l >= 0 ? cli_safe(id, t->look.view->leases[l].id) : "-");
		if (*mark)
			attron(COLOR_PAIR(PAIR_HOT));
		printw("%-4s", mark);
		if (*mark)
			attroff(COLOR_PAIR(PAIR_HOT));
		printw(" %.*s", COLS > 70 ? COLS - 70 : 0,
		       p->command[0] ? cli_safe(cmd, p->command) : "?");
		clrtoeol();
		if (r == t->selected)
			attroff(A_REVERSE);
		(*y)++;
	}
	if (!t->row_count)
		mvprintw((*y)++, 0, "  (no process%s)", t->filter[0] || t->mine ? " matches" : "");
}

/* "your queue: 3 queued, 1 running", then the next jobs to run. */
static void draw_queue(const struct top *t, int *y)
{
	char cmd[CLI_SAFE_SIZE];

	if (t->queue_err[0]) {
		mvprintw((*y)++, 0, "your queue: %s", t->queue_err);
		return;
	}
	if (!t->queue_counts[JOB_QUEUED] && !t->queue_counts[JOB_RUNNING])
		return;
	mvprintw((*y)++, 0, "your queue: %zu queued, %zu running  (gpuman queue lists it)",
	         t->queue_counts[JOB_QUEUED], t->queue_counts[JOB_RUNNING]);
	for (size_t i = 0; i < t->queued_count; i++)
		mvprintw((*y)++, 0, "  next %zu. job %lld: %.*s", i + 1, (long long)t->queued[i].id,
		         COLS > 30 ? COLS - 30 : 0,
		         cli_safe(cmd, t->queued[i].command ? t->queued[i].command : "?"));
}

static void draw(struct top *t)
{
	const struct registry_view *view;
	char user[CLI_SAFE_SIZE], what[CLI_SAFE_SIZE], filt[CLI_SAFE_SIZE];
	size_t hogs = 0, idle = 0, out = 0,
	       queue_active = t->queue_counts[JOB_QUEUED] + t->queue_counts[JOB_RUNNING];
	int y = 0, bottom, queue_lines;

	erase();
	attron(COLOR_PAIR(PAIR_TITLE) | A_BOLD);
	mvprintw(0, 0, "gpuman top  every %.1fs  sort: %s  filter: %s%s", t->delay_ms / 1000.0,
	         sort_names[t->sort], t->filter[0] ? cli_safe(filt, t->filter) : "-",
	         t->mine ? "  (mine)" : "");
	clrtoeol();
	attroff(COLOR_PAIR(PAIR_TITLE) | A_BOLD);
	mvprintw(0, COLS > 60 ? COLS - 28 : 40, "h help  q quit");
	y = 1;
	if (!t->have_look) {
		mvprintw(2, 0, "%s", t->message);
		refresh();
		return;
	}
	view = t->look.view;
	draw_gpus(t, &y);
	y++;
	/* The bottom lines: waiting requests, your queue, waste, the message. */
	queue_lines = t->queue_err[0] ? 1 : (int)t->queued_count + (queue_active > 0);
	bottom = LINES - 3 - (int)(view->waiter_count > 3 ? 3 : view->waiter_count) - queue_lines;
	draw_procs(t, &y, bottom);
	y = bottom;
	for (size_t i = 0; i < view->waiter_count && i < 3; i++, y++) {
		const struct waiter_info *w = &view->waiters[i];

		mvprintw(y, 0, "waiting %zu. %s, %s, pid %d: %s", i + 1, cli_safe(user, w->user),
		         w->summary, w->pid, cli_safe(what, w->command));
	}
	draw_queue(t, &y);
	for (size_t i = 0; i < t->waste.count; i++) {
		hogs += t->waste.items[i].kind == WASTE_HOG;
		idle += t->waste.items[i].kind == WASTE_IDLE_LEASE;
		out += t->waste.items[i].kind == WASTE_UNLEASED;
	}
	mvprintw(LINES - 2, 0, "waste: %zu hog%s, %zu idle lease%s, %zu outside gpuman%s", hogs,
	         hogs == 1 ? "" : "s", idle, idle == 1 ? "" : "s", out,
	         hogs + idle + out ? "  (gpuman waste explains)" : "");
	if (view->waiter_count > 3) {
		size_t more = view->waiter_count - 3; /* and the tail the broker counts */

		for (size_t i = 0; i < view->more_waiter_count; i++)
			more += view->more_waiters[i].count;
		printw("  +%zu more waiting", more);
	}
	mvprintw(LINES - 1, 0, "%s", t->message);
	clrtoeol();
	refresh();
}

static void help(void)
{
	static const char *const lines[] = {
	    "gpuman top - keys",
	    "",
	    "  q          quit",
	    "  up/down    select a process",
	    "  k          send a signal to the selected process (yours only)",
	    "  s          sort by the next key: gpu, util, memory, pid, user",
	    "  / or f     filter: pid, user or command containing a text",
	    "  u          only my processes (again: everyone's)",
	    "  c          clear the filter",
	    "  + / -      refresh more / less often",
	    "  space      refresh now",
	    "",
	    "MARK: hog = holds memory on this GPU without computing on it,",
	    "      out = runs outside any gpuman lease.  gpuman waste explains.",
	    "",
	    "any key returns",
	};

	erase();
	for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
		mvprintw((int)i + 1, 2, "%s", lines[i]);
	refresh();
	timeout(-1);
	getch();
}

/* Read a line at the bottom; empty when cancelled with Escape. */
static void prompt(const char *what, char *buf, size_t len)
{
	size_t n = 0;
	int ch;

	timeout(-1);
	curs_set(1);
	buf[0] = '\0';
	for (;;) {
		mvprintw(LINES - 1, 0, "%s%s", what, buf);
		clrtoeol();
		refresh();
		ch = getch();
		if (ch == '\n' || ch == KEY_ENTER)
			break;
		if (ch == 27) {
			buf[0] = '\0';
			break;
		}
		if ((ch == KEY_BACKSPACE || ch == 127 || ch == 8) && n > 0)
			buf[--n] = '\0';
		else if (ch >= 32 && ch < 127 && n + 1 < len) {
			buf[n++] = (char)ch;
			buf[n] = '\0';
		}
	}
	curs_set(0);
}

static void signal_selected(struct top *t)
{
	static const struct {
		int key, sig;
		const char *name;
	} sigs[] = {
	    {'t', SIGTERM, "TERM"}, {'i', SIGINT, "INT"},   {'k', SIGKILL, "KILL"},
	    {'h', SIGHUP, "HUP"},   {'s', SIGSTOP, "STOP"}, {'c', SIGCONT, "CONT"},
	};
	const struct gm_proc *p;
	char answer[8], cmd[CLI_SAFE_SIZE], ask[CLI_SAFE_SIZE + 128];

	if (!t->have_look || !t->row_count) {
		snprintf(t->message, sizeof t->message, "no process selected");
		return;
	}
	p = &t->look.snap->procs[t->rows[t->selected]];
	if (!p->has_user || (p->uid != getuid() && getuid() != 0)) {
		snprintf(t->message, sizeof t->message, "pid %u is not yours: not signalled",
		         p->pid);
		return;
	}
	snprintf(ask, sizeof ask,
	         "signal pid %u (%.40s): t TERM, i INT, k KILL, h HUP, s STOP, "
	         "c CONT, Esc cancel: ",
	         p->pid, cli_safe(cmd, p->command));
	prompt(ask, answer, sizeof answer);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		if (answer[0] != sigs[i].key || answer[1])
			continue;
		if (kill((pid_t)p->pid, sigs[i].sig) == 0)
			snprintf(t->message, sizeof t->message, "sent SIG%s to pid %u",
			         sigs[i].name, p->pid);
		else
			snprintf(t->message, sizeof t->message, "pid %u: %s", p->pid,
			         strerror(errno));
		return;
	}
	snprintf(t->message, sizeof t->message, "no signal sent");
}

/* One key; returns 0 to quit. */
static int key(struct top *t, int ch)
{
	switch (ch) {
	case 'q':
	case 'Q':
		return 0;
	case KEY_UP:
		if (t->selected > 0)
			t->selected--;
		break;
	case KEY_DOWN:
		if (t->selected + 1 < (int)t->row_count)
			t->selected++;
		break;
	case 's':
		t->sort = (t->sort + 1) % SORT_COUNT;
		break;
	case 'u':
		t->mine = !t->mine;
		break;
	case 'c':
		t->filter[0] = '\0';
		t->mine = 0;
		break;
	case '/':
	case 'f':
		prompt("filter (pid, user or command): ", t->filter, sizeof t->filter);
		break;
	case 'k':
		signal_selected(t);
		break;
	case '+':
		if (t->delay_ms > 500)
			t->delay_ms -= 500;
		break;
	case '-':
		if (t->delay_ms < 60000)
			t->delay_ms += 500;
		break;
	case 'h':
	case '?':
		help();
		break;
	default:
		break;
	}
	if (t->have_look && t->row_count)
		t->selected_pid = t->look.snap->procs[t->rows[t->selected]].pid;
	return 1;
}

static int top_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct top *t = data;
	char *end;
	double s;

	if (opt == OPT_DELAY || opt == 'd') {
		s = strtod(arg, &end);
		if (end == arg || *end || s < 0.1 || s > 3600)
			return cli_usage(cli, "--delay '%s': give 0.1 to 3600 seconds", arg);
		t->delay_ms = (int64_t)(s * 1000);
		return CLI_CONTINUE;
	}
	return cli_select_option(cli, &t->sel, opt, arg);
}

static int top_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS,
	                                         CLI_SELECT_LONGOPTS,
	                                         {"delay", required_argument, NULL, OPT_DELAY},
	                                         {0}};
	struct top t;
	SCREEN *screen = NULL;
	int rc, ch, running = 1;

	memset(&t, 0, sizeof t);
	t.sel = (struct cli_select)CLI_SELECT_INIT;
	t.cli = cli;
	t.delay_ms = 2000;
	rc = cli_parse(cli, &cmd_top, argc, argv, "d:" CLI_SELECT_SHORTOPTS, longopts, top_option,
	               &t);
	if (rc != CLI_CONTINUE)
		return rc;
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	if (t.sel.csv)
		return cli_usage(cli, "top is a live view: use status --watch --format csv");
	setlocale(LC_ALL, "");
	if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO))
		screen = newterm(NULL, stdout, stdin);
	if (!screen) {
		/* No terminal (a pipe, a log, TERM unknown): the same view as text. */
		t.sel.watch_ms = t.delay_ms;
		return cli_status_watch(cli, &t.sel, NULL, 0);
	}
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	if (has_colors()) {
		start_color();
		use_default_colors();
		init_pair(PAIR_OK, COLOR_GREEN, -1);
		init_pair(PAIR_WARN, COLOR_YELLOW, -1);
		init_pair(PAIR_HOT, COLOR_RED, -1);
		init_pair(PAIR_TITLE, COLOR_CYAN, -1);
	}
	refresh_look(&t);
	if (t.have_look && cli_select_resolve(cli, &t.sel, t.look.snap) != EXIT_OK) {
		endwin();
		delscreen(screen);
		release_look(&t);
		return EXIT_USAGE;
	}
	while (running) {
		draw(&t);
		timeout((int)t.delay_ms);
		ch = getch();
		if (ch == KEY_RESIZE)
			continue; /* ncurses has the new size: draw again */
		if (ch != ERR)
			running = key(&t, ch);
		if (running)
			refresh_look(&t);
	}
	endwin();
	delscreen(screen);
	release_look(&t);
	return EXIT_OK;
}

const struct cmd_entry cmd_top = {
    "top",
    "the machine live: GPUs, processes, waste, the waiting line",
    "usage: gpuman top [-d SEC] [-i GPU[,GPU]] [-u USER[,USER]] [--sim FILE]\n"
    "\n"
    "A live terminal view: each GPU with bars for memory and utilization, then\n"
    "the processes with user, their own utilization, memory, gpuman lease and a\n"
    "waste mark (hog: holds memory here without computing; out: outside any\n"
    "gpuman lease), the waiting line, your own queue (gpuman submit: how many\n"
    "jobs wait and run, and the next two; other users' queues are private to\n"
    "them) and a count of the waste.  Keys: q quits,\n"
    "up/down select, k signals the selected process (your own), s sorts, / or f\n"
    "filters, u shows only yours, c clears, + and - change the interval, h helps.\n"
    "Without a terminal it prints `gpuman status --watch` instead.\n"
    "\n"
    "  -d, --delay SEC        refresh every SEC seconds (default 2)\n"
    "  -i, --id GPU[,GPU]     only these GPUs: NVML indices, ranges (0-3) or UUID\n"
    "                         prefixes\n"
    "  -u, --user USER[,USER] only these users' processes\n"
    "  --sim FILE             use the NVML simulator with this scenario\n",
    top_exec,
    "use 'gpuman status --watch --json' for the same view as JSON, again every interval",
};
