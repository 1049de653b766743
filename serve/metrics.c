/*
 * metrics.c - the Prometheus text exposition of one sample.
 *
 * GPU metrics use dcgm-exporter's names and units where the meaning is the
 * same, so dashboards built for it carry over; its labels are spelt in
 * snake case (uuid for UUID, name for modelName, hostname for Hostname), as
 * `promtool check metrics` asks.  What only gpuman knows (leases, the
 * waiting line, its own health) is named gpuman_*.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpuman-internal.h"
#include "serve.h"

struct out {
	FILE *f;
	const char *host;
};

static void head(struct out *o, const char *name, const char *type, const char *help)
{
	fprintf(o->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped; bytes that
 * are not printable ASCII become '?' so the output is always valid UTF-8. */
static void value(struct out *o, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '\\' || c == '"')
			fprintf(o->f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", o->f);
		else
			fputc(c >= 0x20 && c < 0x7f ? c : '?', o->f);
	}
}

static void label(struct out *o, int first, const char *name, const char *v)
{
	fprintf(o->f, "%s%s=\"", first ? "" : ",", name);
	value(o, v);
	fputc('"', o->f);
}

/* "name{hostname="..."} " - a series of the machine as a whole. */
static void host_series(struct out *o, const char *name)
{
	fprintf(o->f, "%s{hostname=\"", name);
	value(o, o->host);
	fputs("\"} ", o->f);
}

static void gpu_labels(struct out *o, const struct gm_gpu *g)
{
	char num[32];

	snprintf(num, sizeof num, "%u", g->index);
	label(o, 1, "gpu", num);
	label(o, 0, "uuid", g->uuid);
	label(o, 0, "pci_bus_id", g->pci_bus_id);
	snprintf(num, sizeof num, "nvidia%u", g->index);
	label(o, 0, "device", num);
	label(o, 0, "name", g->name);
	label(o, 0, "hostname", o->host);
}

/* A GPU's gauges: the GPU field table's rows that have a metric name
 * (lib/gpu_fields.h), and whether NVML answers for it at all. */
static void gpu_series(struct out *o, const struct gm_snapshot *snap, const struct gpu_field *f)
{
	const char *name = f ? f->metric : "gpuman_gpu_up";

	head(o, name, "gauge",
	     f ? f->help : "1 if NVML answers for the GPU, 0 if it is lost or fails.");
	for (size_t i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *g = &snap->gpus[i];
		int64_t v = 0;

		/* A field the GPU does not report is left out, never 0. */
		if (f && (g->state != GM_GPU_OK || !gpu_field_get(g, f, &v)))
			continue;
		fprintf(o->f, "%s{", name);
		gpu_labels(o, g);
		fputs("} ", o->f);
		if (!f)
			fputc(g->state == GM_GPU_OK ? '1' : '0', o->f);
		else if (f->scale > 1)
			fprintf(o->f, "%.3f", (double)v / f->scale);
		else
			fprintf(o->f, "%lld", (long long)v);
		fputc('\n', o->f);
	}
}

static void gpus(struct out *o, const struct gm_snapshot *snap)
{
	for (size_t m = 0; m < gpu_field_count; m++)
		if (gpu_field_named(gpu_fields[m].metric))
			gpu_series(o, snap, &gpu_fields[m]);
	gpu_series(o, snap, NULL);
}

static void processes(struct out *o, const struct gm_snapshot *snap)
{
	char num[32];

	head(o, "gpuman_gpu_processes", "gauge", "Processes NVML lists on the GPU.");
	for (size_t i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *g = &snap->gpus[i];
		size_t n = 0;

		for (size_t p = 0; p < snap->proc_count; p++)
			n += snap->procs[p].gpu == g->index;
		fputs("gpuman_gpu_processes{", o->f);
		gpu_labels(o, g);
		fprintf(o->f, "} %zu\n", n);
	}
	head(o, "gpuman_process_fb_used", "gauge",
	     "Framebuffer memory a process holds (in MiB), with its user.");
	for (size_t p = 0; p < snap->proc_count; p++) {
		const struct gm_proc *pr = &snap->procs[p];
		long pos = -1;

		for (size_t i = 0; i < snap->gpu_count; i++)
			if (snap->gpus[i].index == pr->gpu)
				pos = (long)i;
		if (!pr->has_mem || pos < 0)
			continue;
		fputs("gpuman_process_fb_used{", o->f);
		gpu_labels(o, &snap->gpus[pos]);
		snprintf(num, sizeof num, "%u", pr->pid);
		label(o, 0, "pid", num);
		label(o, 0, "user", pr->has_user ? pr->user : "");
		fprintf(o->f, "} %llu\n", (unsigned long long)pr->used_mib);
	}
}

/*
 * MIG slices, one series per slice with its GPU's labels plus the slice's:
 * dcgm-exporter puts slices on the GPU's own names with GPU_I_ID and
 * GPU_I_PROFILE labels, which would double-count a GPU's memory in a sum by
 * gpu; gpuman keeps them apart under names of their own.
 */
static void mig_slices(struct out *o, const struct gm_snapshot *snap)
{
	static const struct {
		const char *name, *help;
		enum gm_mig_value what;
	} mig_metrics[] = {
	    {"gpuman_mig_fb_used", "Memory used in a MIG slice (in MiB).", GM_MIG_MEM_USED_MIB},
	    {"gpuman_mig_fb_free", "Memory free in a MIG slice (in MiB).", GM_MIG_MEM_FREE_MIB},
	    {"gpuman_mig_fb_capacity", "Memory of a MIG slice (in MiB).", GM_MIG_MEM_TOTAL_MIB},
	};
	size_t n = gm_snapshot_mig_count(snap);
	char num[32];

	if (n == 0)
		return;
	for (size_t m = 0; m < sizeof mig_metrics / sizeof mig_metrics[0]; m++) {
		head(o, mig_metrics[m].name, "gauge", mig_metrics[m].help);
		for (size_t i = 0; i < n; i++) {
			const struct gm_mig *mig = gm_snapshot_mig(snap, i);
			const struct gm_gpu *g = NULL;
			int64_t v, gi;

			for (size_t k = 0; k < snap->gpu_count; k++)
				if (snap->gpus[k].index == gm_mig_gpu(mig))
					g = &snap->gpus[k];
			/* A value the slice does not report is left out, never 0. */
			if (!g || !gm_mig_value(mig, mig_metrics[m].what, &v))
				continue;
			fprintf(o->f, "%s{", mig_metrics[m].name);
			gpu_labels(o, g);
			label(o, 0, "mig_uuid", gm_mig_uuid(mig));
			label(o, 0, "gpu_i_profile", gm_mig_profile(mig));
			num[0] = '\0';
			if (gm_mig_value(mig, GM_MIG_GPU_INSTANCE_ID, &gi))
				snprintf(num, sizeof num, "%lld", (long long)gi);
			label(o, 0, "gpu_i_id", num);
			fprintf(o->f, "} %lld\n", (long long)v);
		}
	}
}

/* "0,3": a lease's GPUs as one label value. */
static void lease_gpus(char *buf, size_t len, const struct lease_info *l)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t k = 0; k < l->gpu_count && used < len; k++)
		used +=
		    (size_t)snprintf(buf + used, len - used, "%s%u", k ? "," : "", l->indices[k]);
}

static void lease_labels(struct out *o, const struct lease_info *l)
{
	char gpus_buf[256];

	lease_gpus(gpus_buf, sizeof gpus_buf, l);
	label(o, 1, "lease", l->id);
	label(o, 0, "user", l->user);
	label(o, 0, "kind", l->exclusive ? "exclusive" : "share");
	label(o, 0, "gpus", gpus_buf);
	label(o, 0, "hostname", o->host);
}

static void leases(struct out *o, const struct gm_snapshot *snap, const struct registry_view *view,
                   int64_t now)
{
	size_t excl = 0, share = 0;

	head(o, "gpuman_lease_age_seconds", "gauge", "How long a live lease has been held.");
	for (size_t i = 0; i < view->lease_count; i++) {
		const struct lease_info *l = &view->leases[i];

		fputs("gpuman_lease_age_seconds{", o->f);
		lease_labels(o, l);
		fprintf(o->f, "} %.3f\n", (now - l->start_ms) / 1000.0);
		*(l->exclusive ? &excl : &share) += 1;
	}
	head(o, "gpuman_lease_gpus", "gauge", "GPUs a live lease holds.");
	for (size_t i = 0; i < view->lease_count; i++) {
		fputs("gpuman_lease_gpus{", o->f);
		lease_labels(o, &view->leases[i]);
		fprintf(o->f, "} %zu\n", view->leases[i].gpu_count);
	}
	head(o, "gpuman_lease_share_mib", "gauge",
	     "Memory a shared lease reserves per GPU (in MiB).");
	for (size_t i = 0; i < view->lease_count; i++) {
		if (view->leases[i].exclusive)
			continue;
		fputs("gpuman_lease_share_mib{", o->f);
		lease_labels(o, &view->leases[i]);
		fprintf(o->f, "} %llu\n", (unsigned long long)view->leases[i].share_mib);
	}
	head(o, "gpuman_leases", "gauge", "Live leases, by kind.");
	fprintf(o->f, "gpuman_leases{kind=\"exclusive\",hostname=\"");
	value(o, o->host);
	fprintf(o->f, "\"} %zu\n", excl);
	fprintf(o->f, "gpuman_leases{kind=\"share\",hostname=\"");
	value(o, o->host);
	fprintf(o->f, "\"} %zu\n", share);
	head(o, "gpuman_gpu_leases", "gauge", "Live leases on the GPU.");
	for (size_t i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *g = &snap->gpus[i];
		size_t n = 0;

		for (size_t k = 0; k < view->lease_count; k++)
			for (size_t u = 0; u < view->leases[k].gpu_count; u++)
				n += !strcmp(view->leases[k].uuids[u], g->uuid);
		fputs("gpuman_gpu_leases{", o->f);
		gpu_labels(o, g);
		fprintf(o->f, "} %zu\n", n);
	}
}

/* The waiters of user, listed and, past the head of a long line the
 * broker lists, counted. */
static size_t user_waiting(const struct registry_view *view, const char *user)
{
	size_t n = 0;

	for (size_t k = 0; k < view->waiter_count; k++)
		n += !strcmp(view->waiters[k].user, user);
	for (size_t k = 0; k < view->more_waiter_count; k++)
		if (!strcmp(view->more_waiters[k].user, user))
			n += view->more_waiters[k].count;
	return n;
}

static void line(struct out *o, const struct registry_view *view, int64_t now)
{
	char pos[32];
	size_t total = view->waiter_count;

	for (size_t i = 0; i < view->more_waiter_count; i++)
		total += view->more_waiters[i].count;
	head(o, "gpuman_line_length", "gauge", "Requests waiting for GPUs.");
	host_series(o, "gpuman_line_length");
	fprintf(o->f, "%zu\n", total);
	/* One series a listed waiter: a long line's tail, which the broker
	 * counts per user, is in the length and the users' requests only. */
	head(o, "gpuman_line_wait_seconds", "gauge",
	     "How long each waiting request has waited, by its place in the line.");
	for (size_t i = 0; i < view->waiter_count; i++) {
		const struct waiter_info *w = &view->waiters[i];

		snprintf(pos, sizeof pos, "%zu", i + 1);
		fputs("gpuman_line_wait_seconds{", o->f);
		label(o, 1, "position", pos);
		label(o, 0, "user", w->user);
		label(o, 0, "request", w->summary);
		label(o, 0, "hostname", o->host);
		fprintf(o->f, "} %.3f\n", (now - w->since_ms) / 1000.0);
	}
	/* The queue depth of each user, once each, in the line's order. */
	head(o, "gpuman_line_requests", "gauge", "Waiting requests of each user.");
	for (size_t i = 0; i < view->waiter_count + view->more_waiter_count; i++) {
		const char *user = i < view->waiter_count
		                       ? view->waiters[i].user
		                       : view->more_waiters[i - view->waiter_count].user;
		int seen = 0;

		for (size_t k = 0; k < i && !seen; k++)
			seen = !strcmp(user, k < view->waiter_count
			                         ? view->waiters[k].user
			                         : view->more_waiters[k - view->waiter_count].user);
		if (seen)
			continue;
		fputs("gpuman_line_requests{", o->f);
		label(o, 1, "user", user);
		label(o, 0, "hostname", o->host);
		fprintf(o->f, "} %zu\n", user_waiting(view, user));
	}
}

static void queue(struct out *o, const struct serve_queue *q)
{
	head(o, "gpuman_queue_jobs", "gauge",
	     "Jobs in the queue (gpuman submit) of the user serve runs as, by state.");
	if (!q || !q->ok)
		return;
	for (int running = 0; running < 2; running++) {
		fputs("gpuman_queue_jobs{", o->f);
		label(o, 1, "user", q->user);
		label(o, 0, "state", running ? "running" : "queued");
		label(o, 0, "hostname", o->host);
		fprintf(o->f, "} %zu\n", running ? q->running : q->queued);
	}
}

static void health(struct out *o, const struct gm_snapshot *snap, const struct serve_health *h)
{
	size_t bad = 0;

	for (size_t i = 0; i < snap->gpu_count; i++)
		bad += snap->gpus[i].state != GM_GPU_OK;
	head(o, "gpuman_snapshot_ok", "gauge", "1 if the last NVML snapshot succeeded.");
	host_series(o, "gpuman_snapshot_ok");
	fprintf(o->f, "%d\n", h->snapshot_ok);
	head(o, "gpuman_snapshot_timestamp_seconds", "gauge",
	     "Wall-clock time of the snapshot these metrics come from.");
	host_series(o, "gpuman_snapshot_timestamp_seconds");
	fprintf(o->f, "%.3f\n", h->last_ok_ms / 1000.0);
	head(o, "gpuman_snapshot_duration_seconds", "gauge", "How long the last snapshot took.");
	host_series(o, "gpuman_snapshot_duration_seconds");
	fprintf(o->f, "%.6f\n", h->last_duration_s);
	head(o, "gpuman_snapshot_interval_seconds", "gauge", "Time between snapshots.");
	host_series(o, "gpuman_snapshot_interval_seconds");
	fprintf(o->f, "%.3f\n", h->interval_ms / 1000.0);
	head(o, "gpuman_snapshots_total", "counter", "Snapshots taken since serve started.");
	host_series(o, "gpuman_snapshots_total");
	fprintf(o->f, "%llu\n", (unsigned long long)h->snapshots);
	head(o, "gpuman_nvml_errors_total", "counter",
	     "Snapshots that failed because NVML failed as a whole.");
	host_series(o, "gpuman_nvml_errors_total");
	fprintf(o->f, "%llu\n", (unsigned long long)h->snapshot_errors);
	head(o, "gpuman_gpu_errors", "gauge", "GPUs NVML answers with an error (lost or failing).");
	host_series(o, "gpuman_gpu_errors");
	fprintf(o->f, "%zu\n", bad);
	head(o, "gpuman_registry_errors_total", "counter", "Lease registry reads that failed.");
	host_series(o, "gpuman_registry_errors_total");
	fprintf(o->f, "%llu\n", (unsigned long long)h->registry_errors);
	head(o, "gpuman_start_time_seconds", "gauge", "When serve started.");
	host_series(o, "gpuman_start_time_seconds");
	fprintf(o->f, "%.3f\n", h->start_ms / 1000.0);
	head(o, "gpuman_build_info", "gauge", "gpuman and driver versions.");
	fputs("gpuman_build_info{", o->f);
	label(o, 1, "version", gm_version());
	label(o, 0, "driver_version", snap->driver_version);
	label(o, 0, "hostname", o->host);
	fputs("} 1\n", o->f);
}

/* A gauge per lease the waste finder reports as kind: an idle lease's age,
 * or how long an over-limit one is past its max_lease. */
static void lease_findings(struct out *o, const struct waste_report *rep,
                           const struct registry_view *view, enum waste_kind kind, const char *name,
                           const char *help)
{
	char gpus_buf[256];

	head(o, name, "gauge", help);
	for (size_t i = 0; rep && i < rep->count; i++) {
		const struct waste_item *it = &rep->items[i];

		if (it->kind != kind || it->lease < 0 || (size_t)it->lease >= view->lease_count)
			continue;
		fprintf(o->f, "%s{", name);
		label(o, 1, "lease", view->leases[it->lease].id);
		label(o, 0, "user", it->has_user ? it->user : "");
		waste_gpu_list(it->idle_gpus, gpus_buf, sizeof gpus_buf);
		label(o, 0, "gpus", gpus_buf);
		if (it->mig_uuid[0]) /* a finding about a MIG slice */
			label(o, 0, "mig_uuid", it->mig_uuid);
		label(o, 0, "hostname", o->host);
		fprintf(o->f, "} %.3f\n",
		        (kind == WASTE_IDLE_LEASE ? it->age_ms
		                                  : view->leases[it->lease].over_limit_ms) /
		            1000.0);
	}
}

/* The waste finder's findings: how many of each kind, and per finding what
 * it holds (hogs and processes outside gpuman) or how long (idle leases). */
static void waste(struct out *o, const struct registry_view *view, const struct waste_report *rep)
{
	static const enum waste_kind kinds[] = {WASTE_HOG, WASTE_IDLE_LEASE, WASTE_UNLEASED,
	                                        WASTE_OVER_LIMIT};
	char num[32], gpus_buf[256];

	head(o, "gpuman_waste_findings", "gauge",
	     "What the waste finder reports now, by kind (hog, idle-lease, unleased, "
	     "over-limit).");
	for (size_t k = 0; rep && k < sizeof kinds / sizeof kinds[0]; k++) {
		size_t n = 0;

		for (size_t i = 0; i < rep->count; i++)
			n += rep->items[i].kind == kinds[k];
		fputs("gpuman_waste_findings{", o->f);
		label(o, 1, "kind", waste_kind_name(kinds[k]));
		label(o, 0, "hostname", o->host);
		fprintf(o->f, "} %zu\n", n);
	}
	head(o, "gpuman_waste_held_mib", "gauge",
	     "Memory a hog holds on GPUs where it computes nothing, or a process outside gpuman "
	     "holds (in MiB).");
	for (size_t i = 0; rep && i < rep->count; i++) {
		const struct waste_item *it = &rep->items[i];

		if (it->kind == WASTE_IDLE_LEASE || it->kind == WASTE_OVER_LIMIT)
			continue;
		fputs("gpuman_waste_held_mib{", o->f);
		label(o, 1, "kind", waste_kind_name(it->kind));
		label(o, 0, "user", it->has_user ? it->user : "");
		snprintf(num, sizeof num, "%u", it->pid);
		label(o, 0, "pid", num);
		waste_gpu_list(it->kind == WASTE_HOG ? it->idle_gpus : it->gpus, gpus_buf,
		               sizeof gpus_buf);
		label(o, 0, "gpus", gpus_buf);
		if (it->mig_uuid[0]) /* a finding about a MIG slice */
			label(o, 0, "mig_uuid", it->mig_uuid);
		label(o, 0, "hostname", o->host);
		fprintf(o->f, "} %llu\n", (unsigned long long)it->held_mib);
	}
	lease_findings(o, rep, view, WASTE_IDLE_LEASE, "gpuman_waste_idle_lease_seconds",
	               "How long a lease has held GPUs on which none of its processes runs.");
	lease_findings(o, rep, view, WASTE_OVER_LIMIT, "gpuman_waste_over_limit_seconds",
	               "How long a lease has been held past its user's max_lease (gpuman.conf).");
}

char *serve_metrics(const struct gm_snapshot *snap, const struct registry_view *view,
                    const struct waste_report *rep, const struct serve_queue *q,
                    const struct serve_health *h, const char *hostname, size_t *len)
{
	char *buf = NULL;
	struct out o = {NULL, hostname};
	int64_t now = now_ms();

	o.f = open_memstream(&buf, len);
	if (!o.f)
		return NULL;
	gpus(&o, snap);
	processes(&o, snap);
	mig_slices(&o, snap);
	leases(&o, snap, view, now);
	line(&o, view, now);
	queue(&o, q);
	waste(&o, view, rep);
	health(&o, snap, h);
	if (ferror(o.f)) {
		fclose(o.f);
		free(buf);
		return NULL;
	}
	fclose(o.f);
	return buf;
}
