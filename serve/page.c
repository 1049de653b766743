/*
 * page.c - the documents of `gpuman serve` besides the metrics: the
 * status JSON, the last hour's history, and the page that shows both.
 *
 * The page (page.html) is compiled into the binary, so it works
 * without any network but the one to gpuman, and each rendering inlines the
 * current data so the first paint needs no second request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpuman-internal.h"
#include "serve.h"

/* page.html, embedded by the assembler; NUL-terminated. */
__asm__(".section .rodata\n"
        ".global serve_page_html\n"
        ".type serve_page_html, @object\n"
        ".balign 16\n"
        "serve_page_html:\n"
        ".incbin \"serve/page.html\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char serve_page_html[];

int serve_history_init(struct serve_history *h, size_t cap)
{
	*h = (struct serve_history)SERVE_HISTORY_INIT;
	h->t_ms = calloc(cap ? cap : 1, sizeof *h->t_ms);
	if (!h->t_ms)
		return -1;
	h->cap = cap ? cap : 1;
	return 0;
}

void serve_history_release(struct serve_history *h)
{
	free(h->t_ms);
	free(h->util_pct);
	free(h->mem_pct);
	free(h->power_w);
	*h = (struct serve_history)SERVE_HISTORY_INIT;
}

/* Columns for n GPUs: a new machine layout starts the hour afresh. */
static int history_columns(struct serve_history *h, size_t n)
{
	if (h->gpus == n && (h->util_pct || n == 0))
		return 0;
	free(h->util_pct);
	free(h->mem_pct);
	free(h->power_w);
	h->util_pct = calloc(h->cap * (n ? n : 1), sizeof(float));
	h->mem_pct = calloc(h->cap * (n ? n : 1), sizeof(float));
	h->power_w = calloc(h->cap * (n ? n : 1), sizeof(float));
	h->gpus = n;
	h->count = h->next = 0;
	if (h->util_pct && h->mem_pct && h->power_w)
		return 0;
	h->gpus = 0;
	return -1;
}

void serve_history_add(struct serve_history *h, const struct gm_snapshot *snap)
{
	size_t row = h->next;

	if (history_columns(h, snap->gpu_count) < 0)
		return;
	h->t_ms[row] = snap->taken_ms;
	for (size_t i = 0; i < snap->gpu_count; i++) {
		const struct gm_gpu *g = &snap->gpus[i];
		size_t at = row * h->gpus + i;
		int ok = g->state == GM_GPU_OK;

		h->util_pct[at] = ok && (g->valid & GM_HAS_UTIL) ? (float)g->util_gpu_pct : -1;
		h->mem_pct[at] = ok && (g->valid & GM_HAS_MEMORY) && g->mem_total_mib
		                     ? (float)(100.0 * g->mem_used_mib / g->mem_total_mib)
		                     : -1;
		h->power_w[at] = ok && (g->valid & GM_HAS_POWER) ? g->power_mw / 1000.0f : -1;
	}
	h->next = (h->next + 1) % h->cap;
	if (h->count < h->cap)
		h->count++;
}

/* Mean of the known values of one series over samples [from, to) in age
 * order; null when none is known. */
static json_t *mean(const struct serve_history *h, const float *col, size_t gpu, size_t from,
                    size_t to)
{
	double sum = 0;
	size_t n = 0, first = (h->next + h->cap - h->count) % h->cap;

	for (size_t s = from; s < to; s++) {
		float v = col[((first + s) % h->cap) * h->gpus + gpu];

		if (v >= 0) {
			sum += v;
			n++;
		}
	}
	return n ? json_real((double)(long)(sum / n * 10 + 0.5) / 10) : json_null();
}

json_t *serve_history_json(const struct serve_history *h, size_t points)
{
	json_t *o = json_object(), *t = json_array(), *gpus = json_array();
	size_t buckets = h->count < points ? h->count : points;
	size_t first = (h->next + h->cap - h->count) % h->cap;

	for (size_t b = 0; b < buckets; b++) {
		size_t to = (b + 1) * h->count / buckets;

		json_array_append_new(t, json_integer(h->t_ms[(first + to - 1) % h->cap]));
	}
	for (size_t g = 0; g < h->gpus; g++) {
		json_t *jg = json_object(), *u = json_array(), *m = json_array(), *p = json_array();

		for (size_t b = 0; b < buckets; b++) {
			size_t from = b * h->count / buckets, to = (b + 1) * h->count / buckets;

			json_array_append_new(u, mean(h, h->util_pct, g, from, to));
			json_array_append_new(m, mean(h, h->mem_pct, g, from, to));
			json_array_append_new(p, mean(h, h->power_w, g, from, to));
		}
		json_object_set_new(jg, "utilization_gpu_pct", u);
		json_object_set_new(jg, "memory_used_pct", m);
		json_object_set_new(jg, "power_draw_w", p);
		json_array_append_new(gpus, jg);
	}
	json_object_set_new(o, "t_ms", t);
	json_object_set_new(o, "gpus", gpus);
	return o;
}

/* The program, never its arguments or its path. */
void serve_cut_program(char *command)
{
	char *end = command + strcspn(command, " \t"), *s = command, *slash;

	for (slash = s; (slash = memchr(slash, '/', (size_t)(end - slash))); s = ++slash)
		;
	memmove(command, s, (size_t)(end - s));
	command[end - s] = '\0';
}

static void cut_command(json_t *obj)
{
	json_t *cmd = json_object_get(obj, "command");
	char *prog;

	if (!json_is_string(cmd) || !(prog = strdup(json_string_value(cmd))))
		return;
	serve_cut_program(prog);
	json_object_set_new(obj, "command", json_string(prog));
	free(prog);
}

json_t *serve_status_json(const struct gm_snapshot *snap, const struct registry_view *view,
                          json_t *waste)
{
	json_t *o = listing_status_json(snap, view), *v;
	static const char *const lists[] = {"processes", "leases", "waiters", "waste"};
	size_t i;

	json_object_set_new(o, "waste", waste ? waste : json_null());
	for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++)
		json_array_foreach(json_object_get(o, lists[l]), i, v) cut_command(v);
	/* Each GPU carries its processes again. */
	json_array_foreach(json_object_get(o, "gpus"), i, v)
	{
		json_t *p;
		size_t k;

		json_array_foreach(json_object_get(v, "processes"), k, p) cut_command(p);
	}
	return o;
}

/* JSON inside <script>: "</script" or "<!--" in a string would end or
 * derail the element; '<' appears only in strings, where \u003c means it. */
static void put_inline(FILE *f, const char *json)
{
	for (; *json; json++) {
		if (*json == '<')
			fputs("\\u003c", f);
		else
			fputc(*json, f);
	}
}

/* The readings the page's cards list one a line: the GPU field table's
 * rows with a label and a JSON key, as [{"key", "label", "unit"}]. */
static void put_fields(FILE *f)
{
	json_t *arr = json_array();
	char *text;

	for (size_t i = 0; i < gpu_field_count; i++) {
		const struct gpu_field *g = &gpu_fields[i];

		if (gpu_field_named(g->label) && gpu_field_named(g->json))
			json_array_append_new(arr,
			                      json_pack("{s:s,s:s,s:s}", "key", g->json, "label",
			                                g->label, "unit", g->shown_unit));
	}
	text = json_dumps(arr, JSON_COMPACT);
	put_inline(f, text ? text : "[]");
	free(text);
	json_decref(arr);
}

char *serve_page(const char *status_json, const char *history_json, int interval_ms, size_t *len)
{
	const char *mark = strstr(serve_page_html, "<!--DATA-->");
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		return NULL;
	if (!mark) {
		fputs(serve_page_html, f);
	} else {
		fwrite(serve_page_html, 1, (size_t)(mark - serve_page_html), f);
		fprintf(f, "<script>var GM_INTERVAL_MS=%d;var GM_STATUS=", interval_ms);
		put_inline(f, status_json);
		fputs(";var GM_HISTORY=", f);
		put_inline(f, history_json);
		fputs(";var GM_FIELDS=", f);
		put_fields(f);
		fputs(";</script>", f);
		fputs(mark + strlen("<!--DATA-->"), f);
	}
	if (ferror(f)) {
		fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	return buf;
}
