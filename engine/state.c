/*
 * state.c - the engine's bookkeeping: its running jobs (slots) and their run
 * file numbers, the in-memory queue of job ids, messages for people, and
 * the transaction of each round (see internal.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "util.h"
#include "internal.h"

void engine_say(struct engine *e, const char *fmt, ...)
{
	va_list ap;

	if (!e->cfg->log)
		return;
	va_start(ap, fmt);
	vfprintf(e->cfg->log, fmt, ap);
	va_end(ap);
	fputc('\n', e->cfg->log);
	fflush(e->cfg->log);
}

void engine_run_path(const struct engine *e, int run_slot, char *buf, size_t len)
{
	protocol_run_path(e->cfg->run_dir, run_slot, buf, len);
}

int engine_slot_number_busy(const struct engine *e, int n)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i]->run_slot == n)
			return 1;
	for (size_t i = 0; i < e->nheld; i++)
		if (e->held_slots[i] == n)
			return 1;
	return 0;
}

void engine_hold_slot_number(struct engine *e, int n)
{
	if (n < 0)
		return;
	if (e->nheld == e->heldcap) {
		size_t ncap = e->heldcap ? e->heldcap * 2 : 16;
		int *grown = realloc(e->held_slots, ncap * sizeof *grown);

		if (!grown)
			return;
		e->held_slots = grown;
		e->heldcap = ncap;
	}
	e->held_slots[e->nheld++] = n;
}

int engine_tx(struct engine *e)
{
	if (e->in_tx)
		return 0;
	if (jobstore_begin(e->cfg->store, e->err, sizeof e->err) != GM_OK) {
		e->failed = 1;
		return -1;
	}
	e->in_tx = 1;
	return 0;
}

void engine_slot_free(struct slot *s)
{
	if (!s)
		return;
	if (s->pidfd >= 0)
		close(s->pidfd);
	if (s->go_fd >= 0)
		close(s->go_fd);
	free(s->gpu);
	free(s);
}

void engine_slot_remove(struct engine *e, struct slot *s)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i] == s) {
			e->slots[i] = e->slots[--e->nslots];
			break;
		}
	engine_slot_free(s);
}

struct slot *engine_slot_add(struct engine *e, int64_t id)
{
	struct slot **grown = realloc(e->slots, (e->nslots + 1) * sizeof *grown);
	struct slot *s = calloc(1, sizeof *s);

	if (!grown || !s) {
		free(s);
		if (grown)
			e->slots = grown;
		return NULL;
	}
	e->slots = grown;
	s->id = id;
	s->pidfd = -1;
	s->go_fd = -1;
	s->placed_free = -1;
	s->run_slot = -1;
	e->slots[e->nslots++] = s;
	return s;
}

struct slot *engine_slot_by_id(struct engine *e, int64_t id)
{
	for (size_t i = 0; i < e->nslots; i++)
		if (e->slots[i]->id == id)
			return e->slots[i];
	return NULL;
}

int engine_parse_gpus(struct slot *s, const char *text)
{
	size_t n = 1;

	if (!text || !*text)
		return 0;
	for (const char *p = text; *p; p++)
		n += *p == ',';
	s->gpu = calloc(n, sizeof *s->gpu);
	if (!s->gpu)
		return -1;
	for (const char *p = text; *p;) {
		s->gpu[s->ngpu++] = (unsigned)strtoul(p, NULL, 10);
		p += strcspn(p, ",");
		p += *p == ',';
	}
	return 0;
}

/* ---- the in-memory queue --------------------------------------------- */

int engine_queue_reload(struct engine *e)
{
	int64_t *ids;
	size_t n;
	enum gm_err rc;

	/* The queue's jobs are served by priority and only once what they
	 * wait for (--after) has succeeded; a batch's tasks in order. */
	if (e->cfg->request)
		rc = jobstore_ids(e->cfg->store, JOB_QUEUED, &ids, &n, e->err, sizeof e->err);
	else
		rc = jobstore_ready_ids(e->cfg->store, &ids, &n, &e->deps_waiting, e->err,
		                        sizeof e->err);
	if (rc != GM_OK) {
		e->failed = 1;
		return -1;
	}
	free(e->queue);
	e->queue = ids;
	e->qhead = 0;
	e->qcount = e->qcap = n;
	e->counts.queued = n;
	e->dirty = 1;
	return 0;
}

/* Put a requeued job back in its place: ids are the order. */
void engine_queue_insert(struct engine *e, int64_t id)
{
	size_t at;

	if (e->qhead > 0 && (e->qhead == e->qcount || e->queue[e->qhead] > id)) {
		e->queue[--e->qhead] = id;
		return;
	}
	if (e->qcount == e->qcap) {
		size_t ncap = e->qcap ? e->qcap * 2 : 64;
		int64_t *grown = realloc(e->queue, ncap * sizeof *grown);

		if (!grown)
			return; /* stays queued in the store: a reload finds it */
		e->queue = grown;
		e->qcap = ncap;
	}
	for (at = e->qhead; at < e->qcount && e->queue[at] < id; at++)
		;
	memmove(&e->queue[at + 1], &e->queue[at], (e->qcount - at) * sizeof *e->queue);
	e->queue[at] = id;
	e->qcount++;
}
