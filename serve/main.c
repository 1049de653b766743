/*
 * main.c - gpuman-serve, which `gpuman serve` becomes: the machine as
 * Prometheus metrics, the status JSON and a page, over HTTP.
 *
 * A program of its own so that libmicrohttpd (and the TLS libraries it
 * pulls in, 10 ms of loading) is loaded by the server only, never by
 * every `gpuman pick`.
 *
 * The main thread is the sampler: one snapshot and one read of the leases
 * per interval, every document rendered once, then it sleeps in
 * sigtimedwait until the next interval or a signal to stop.  The HTTP
 * thread (serve_http.c) never touches NVML.
 */
#include <errno.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "cmdline.h"
#include "gpuman-internal.h"
#include "queue.h"
#include "serve.h"

#define HISTORY_MS (3600 * 1000) /* the page plots the last hour */
#define HISTORY_MAX 3600         /* samples kept at most, whatever the interval */
#define HISTORY_POINTS 240       /* points per plotted series */

enum { OPT_LISTEN = OPT_CMD_BASE, OPT_INTERVAL, OPT_MAX_CONN, OPT_TIMEOUT };

/* For cli_parse: --help prints the usage gpuman's table shows. */
static const struct cmd_entry serve_entry = {"serve", NULL, cmdline_serve_usage, NULL,
                                             cmdline_serve_no_json};

struct serve_opts {
	const char *listen;
	int interval_ms;
	struct serve_limits lim;
};

/* A positive number within [lo, hi]; the culprit is named on failure. */
static int number_option(struct cli *cli, const char *name, const char *arg, double lo, double hi,
                         double *out)
{
	char *end;

	errno = 0;
	*out = strtod(arg, &end);
	if (errno || end == arg || *end || !(*out >= lo && *out <= hi))
		return cli_usage(cli, "%s '%s': use a number from %g to %g", name, arg, lo, hi);
	return CLI_CONTINUE;
}

static int serve_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct serve_opts *o = data;
	double v;
	int rc;

	switch (opt) {
	case OPT_LISTEN:
		o->listen = arg;
		return CLI_CONTINUE;
	case OPT_INTERVAL:
		rc = number_option(cli, "--interval", arg, 0.1, 3600, &v);
		o->interval_ms = (int)(v * 1000 + 0.5);
		return rc;
	case OPT_MAX_CONN:
		rc = number_option(cli, "--max-connections", arg, 1, 65536, &v);
		o->lim.max_connections = (unsigned)v;
		return rc;
	case OPT_TIMEOUT:
		rc = number_option(cli, "--timeout", arg, 1, 3600, &v);
		o->lim.timeout_s = (unsigned)v;
		return rc;
	}
	return -1;
}

/* Each connection is a descriptor: make room for the limit, or lower the
 * limit to the room there is. */
static void fit_descriptors(struct cli *cli, struct serve_limits *lim)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)lim->max_connections + 64;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= need)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < need) {
		lim->max_connections = rl.rlim_cur > 128 ? (unsigned)(rl.rlim_cur - 64) : 64;
		cli_error(cli, 0,
		          "warning: only %u connections at once: the descriptor limit is "
		          "%llu (raise it with ulimit -n or LimitNOFILE=)",
		          lim->max_connections, (unsigned long long)rl.rlim_cur);
	}
}

static char *dump(json_t *doc, size_t *len)
{
	/* 7 digits: 231.4, not 231.40000000000001. */
	char *s = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));

	json_decref(doc);
	*len = s ? strlen(s) : 0;
	return s;
}

/* Render every document from the latest snapshot and hand them over. */
static void publish(struct serve_http *http, struct gm_snapshot *snap, struct registry_view *view,
                    const struct serve_history *hist, const struct serve_queue *queue,
                    const struct serve_health *health, const char *host)
{
	struct waste_opts wopts = WASTE_OPTS_INIT;
	struct waste_report waste = WASTE_REPORT_INIT;
	size_t ml = 0, sl = 0, hl = 0, pl = 0;
	char *metrics, *status, *history, *page;
	int have_waste = listing_find_waste(snap, view, &wopts, &waste) == 0;

	if (!have_waste)
		fprintf(stderr, "gpuman serve: out of memory looking for waste\n");
	/* What the finder says quotes commands: cut them first. */
	for (size_t i = 0; have_waste && i < waste.count; i++)
		serve_cut_program(waste.items[i].command);
	metrics = serve_metrics(snap, view, have_waste ? &waste : NULL, queue, health, host, &ml);
	status = dump(
	    serve_status_json(snap, view,
	                      have_waste ? listing_waste_json(snap, view, &wopts, &waste) : NULL),
	    &sl);
	history = dump(serve_history_json(hist, HISTORY_POINTS), &hl);
	page = status && history ? serve_page(status, history, health->interval_ms, &pl) : NULL;
	waste_report_release(&waste);
	serve_http_publish(http, metrics, ml, status, sl, history, hl, page, pl);
}

/* The leases and the line; an unusable registry shows none, counted, with a
 * warning only when its reason changes. */
static void read_view(struct registry_view *view, struct serve_health *health, char *last_err,
                      size_t len)
{
	struct registry *reg;
	char err[GM_ERRBUF_SIZE];

	*view = (struct registry_view)REGISTRY_VIEW_INIT;
	if (registry_open(&reg, err, sizeof err) == GM_OK) {
		enum gm_err rc = registry_read(reg, view, err, sizeof err);

		registry_close(reg);
		if (rc == GM_OK) {
			last_err[0] = '\0';
			return;
		}
	}
	health->registry_errors++;
	if (strcmp(err, last_err))
		fprintf(stderr, "gpuman serve: warning: leases not shown: %s\n", err);
	str_copy(last_err, len, err);
}

/* The queue of serve's own user (struct serve_queue); a warning only when
 * its reason changes. */
static void read_queue(struct serve_queue *q, char *last_err, size_t len)
{
	size_t counts[JOB_STATE_COUNT];
	struct passwd *pw = getpwuid(geteuid());
	struct job *next = NULL;
	char err[GM_ERRBUF_SIZE] = "";
	size_t n = 0;

	q->ok = queue_peek(counts, &next, &n, 0, err, sizeof err) == 0;
	jobstore_free_list(next, n);
	if (pw)
		str_copy(q->user, sizeof q->user, pw->pw_name);
	else
		snprintf(q->user, sizeof q->user, "%u", (unsigned)geteuid());
	q->queued = q->ok ? counts[JOB_QUEUED] : 0;
	q->running = q->ok ? counts[JOB_RUNNING] : 0;
	if (!q->ok && strcmp(err, last_err))
		fprintf(stderr, "gpuman serve: warning: queue not shown: %s\n", err);
	str_copy(last_err, len, q->ok ? "" : err);
}

static int serve_loop(struct cli *cli, struct gm_context *ctx, struct gm_snapshot *snap,
                      struct serve_http *http, struct serve_health *health, const sigset_t *stop)
{
	struct serve_history hist;
	struct registry_view view = REGISTRY_VIEW_INIT;
	char host[256] = "", err[GM_ERRBUF_SIZE], last_nvml[GM_ERRBUF_SIZE] = "";
	char last_reg[GM_ERRBUF_SIZE] = "", last_queue[GM_ERRBUF_SIZE] = "";
	struct serve_queue queue;
	size_t cap = (size_t)(HISTORY_MS / health->interval_ms);
	int sig = 0;

	if (serve_history_init(&hist, cap > HISTORY_MAX ? HISTORY_MAX : cap) < 0)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	gethostname(host, sizeof host - 1);
	serve_history_add(&hist, snap);
	for (;;) {
		int64_t next = monotonic_ms() + health->interval_ms, left;
		struct timespec ts;

		read_view(&view, health, last_reg, sizeof last_reg);
		read_queue(&queue, last_queue, sizeof last_queue);
		publish(http, snap, &view, &hist, &queue, health, host);
		registry_view_release(&view);
		do {
			left = next - monotonic_ms();
			if (left < 0)
				left = 0;
			ts.tv_sec = left / 1000;
			ts.tv_nsec = left % 1000 * 1000000;
			sig = sigtimedwait(stop, NULL, &ts);
		} while (sig < 0 && errno == EINTR);
		if (sig > 0)
			break;
		{
			struct gm_snapshot *fresh = NULL;
			int64_t t0 = monotonic_ms();
			/* Per-process utilization too, as status reads it: the
			 * waste finder judges hogs by it. */
			enum gm_err rc = snapshot_take(ctx, LISTING_UTIL_WINDOW_S * 1000, 1, &fresh,
			                               err, sizeof err);

			health->snapshots++;
			health->last_duration_s = (monotonic_ms() - t0) / 1000.0;
			health->snapshot_ok = rc == GM_OK;
			if (rc != GM_OK) {
				/* Keep showing the last good one; its time says how old. */
				health->snapshot_errors++;
				if (strcmp(err, last_nvml))
					fprintf(stderr, "gpuman serve: snapshot failed: %s\n", err);
				str_copy(last_nvml, sizeof last_nvml, err);
				continue;
			}
			last_nvml[0] = '\0';
			gm_snapshot_free(snap);
			snap = fresh;
			health->last_ok_ms = snap->taken_ms;
			serve_history_add(&hist, snap);
		}
	}
	fprintf(stderr, "gpuman serve: %s, stopping\n", strsignal(sig));
	serve_history_release(&hist);
	gm_snapshot_free(snap);
	return EXIT_OK;
}

static int serve_run(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_OPTIONS,
	    {"listen", required_argument, NULL, OPT_LISTEN},
	    {"interval", required_argument, NULL, OPT_INTERVAL},
	    {"max-connections", required_argument, NULL, OPT_MAX_CONN},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {0}};
	struct serve_opts o = {"127.0.0.1:9400", 5000, {1024, 0, 10, 16384}};
	struct serve_health health = {0};
	struct gm_context *ctx = NULL;
	struct gm_snapshot *snap = NULL;
	struct serve_http *http = NULL;
	char err[GM_ERRBUF_SIZE];
	sigset_t stop;
	unsigned port = 0;
	int64_t t0;
	int rc;

	rc = cli_parse(cli, &serve_entry, argc, argv, "", longopts, serve_option, &o);
	if (rc != CLI_CONTINUE)
		return rc;
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	/* The first snapshot must work: a wrong driver or scenario is reported
	 * now, not as an empty page. */
	t0 = monotonic_ms();
	cli->proc_util = 1;
	cli->clocks = 1;
	rc = cli_snapshot(cli, &ctx, &snap);
	if (rc != EXIT_OK)
		return rc;
	health.start_ms = now_ms();
	health.interval_ms = o.interval_ms;
	health.snapshots = 1;
	health.snapshot_ok = 1;
	health.last_ok_ms = snap->taken_ms;
	health.last_duration_s = (monotonic_ms() - t0) / 1000.0;
	fit_descriptors(cli, &o.lim);
	/* Signals are taken by sigtimedwait; the HTTP thread inherits the mask. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	rc = serve_http_start(&http, o.listen, &o.lim, &port, err, sizeof err);
	if (rc < 0) {
		rc = rc == -2 ? cli_usage(cli, "%s", err) : cli_error(cli, EXIT_FAIL, "%s", err);
		gm_snapshot_free(snap);
		goto done;
	}
	fprintf(stderr, "gpuman serve: listening on %s (port %u): /, /metrics, /api/v1/status\n",
	        o.listen, port);
	rc = serve_loop(cli, ctx, snap, http, &health, &stop);
done:
	serve_http_stop(http);
	gm_close(ctx);
	return rc;
}

int main(int argc, char **argv)
{
	struct cli cli = {0};
	int rc;

	cli.cmd = "serve";
	cli.req = gm_request_new();
	if (!cli.req)
		return cli_error(&cli, EXIT_FAIL, "out of memory");
	rc = serve_run(&cli, argc, argv);
	gm_request_free(cli.req);
	return rc;
}
