/*
 * serve.h - the parts of gpuman-serve, the program behind `gpuman serve`.
 *
 * One sampler (main.c, the main thread) takes an NVML snapshot and
 * reads the leases once per interval, then renders every document once:
 * the Prometheus text (metrics.c), the status JSON, the history JSON
 * and the page (page.c).  The HTTP thread (http.c, on
 * libmicrohttpd) only hands out the latest rendering, so a request costs a
 * lookup and a send whatever the number of clients, and NVML is never
 * asked more often than the interval says.
 */
#ifndef GM_SERVE_H
#define GM_SERVE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "gpuman.h"

struct registry_view;
struct waste_report;

/* gpuman's own health, shown in /metrics. */
struct serve_health {
	int64_t start_ms;         /* wall clock when serve started */
	uint64_t snapshots;       /* snapshots taken */
	uint64_t snapshot_errors; /* snapshots NVML failed */
	uint64_t registry_errors; /* lease reads that failed */
	int64_t last_ok_ms;       /* wall clock of the last good snapshot; 0 none */
	double last_duration_s;   /* how long the last snapshot took */
	int snapshot_ok;          /* the last try succeeded */
	int interval_ms;
};

/* The queue (gpuman submit) of the user serve runs as: each user's queue
 * is a private file of theirs, so it is the only one serve may read. */
struct serve_queue {
	int ok; /* 0: unreadable (the reason went to stderr): no series */
	char user[33];
	size_t queued, running;
};

/* The Prometheus text exposition (format 0.0.4) of one sample and the
 * waste finder's report on it; malloc'd, *len bytes.  NULL when out of
 * memory. */
char *serve_metrics(const struct gm_snapshot *snap, const struct registry_view *view,
                    const struct waste_report *waste, const struct serve_queue *queue,
                    const struct serve_health *health, const char *hostname, size_t *len);

/*
 * The last hour of every GPU's utilization, memory and power: a ring of
 * samples sized by the interval, so its memory is fixed when serve starts.
 * A change in the number of GPUs starts it afresh.
 */
struct serve_history {
	size_t cap;      /* samples kept */
	size_t count;    /* samples held, <= cap */
	size_t next;     /* where the next sample goes */
	size_t gpus;     /* columns of each sample */
	int64_t *t_ms;   /* [cap] */
	float *util_pct; /* [cap * gpus] */
	float *mem_pct;
	float *power_w; /* negative: not reported */
};
#define SERVE_HISTORY_INIT                                                                         \
	{                                                                                          \
		0, 0, 0, 0, NULL, NULL, NULL, NULL                                                 \
	}

int serve_history_init(struct serve_history *h, size_t cap);
void serve_history_add(struct serve_history *h, const struct gm_snapshot *snap);
/* At most points averaged points per series (new reference). */
json_t *serve_history_json(const struct serve_history *h, size_t points);
void serve_history_release(struct serve_history *h);

/* The status document as `status --json` prints it (waste included), but
 * with command lines cut to the program's name: arguments may hold secrets
 * (new reference).  The waste report's commands must be cut already
 * (serve_cut_program), since its sentences quote them. */
json_t *serve_status_json(const struct gm_snapshot *snap, const struct registry_view *view,
                          json_t *waste);
/* "python3 train.py --token x" -> "python3", in place. */
void serve_cut_program(char *command);

/* The page: the embedded HTML with the first data inlined, so it shows the
 * machine without waiting for a fetch; malloc'd, *len bytes. */
char *serve_page(const char *status_json, const char *history_json, int interval_ms, size_t *len);

/* ---- the HTTP side ---------------------------------------------------- */

struct serve_limits {
	unsigned max_connections; /* at once, all clients together */
	unsigned per_ip;          /* at once from one address; 0 none */
	unsigned timeout_s;       /* idle connection closed after this */
	size_t conn_memory;       /* per connection: request line and headers */
};

struct serve_http;

/* Listen on addr (numeric "127.0.0.1:9400", "[::1]:9400") and serve.
 * Returns 0; -2 with err when addr is malformed; -1 with err when it
 * cannot listen or start.  *port gets the port bound (for port 0). */
int serve_http_start(struct serve_http **out, const char *addr, const struct serve_limits *lim,
                     unsigned *port, char *err, size_t errlen);
/* Replace what the paths answer; takes ownership of the malloc'd bodies. */
void serve_http_publish(struct serve_http *http, char *metrics, size_t metrics_len, char *status,
                        size_t status_len, char *history, size_t history_len, char *page,
                        size_t page_len);
void serve_http_stop(struct serve_http *http);

#endif
