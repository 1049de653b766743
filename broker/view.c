/*
 * view.c - what the broker shows of its leases and its line (the "view"
 * request, status and top through it): built once per change, bounded
 * however long the line, shared by every asker until the next change.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpuman-internal.h"
#include "daemon.h"

/* The uids of a view's summarised tail, in the order first met, with a
 * count each in their slots. */
struct tally {
	unsigned *uids;
	size_t count, cap;
};

static void tally_add(struct daemon *d, struct tally *t, unsigned uid, int lease, size_t gpus)
{
	struct user_slot *u = daemon_user(d, uid);

	if (!u)
		return;
	if (u->tally_gen != d->view_builds) {
		unsigned *grown;

		if (t->count == t->cap) {
			t->cap = t->cap ? t->cap * 2 : 16;
			grown = realloc(t->uids, t->cap * sizeof *grown);
			if (!grown)
				return;
			t->uids = grown;
		}
		t->uids[t->count++] = uid;
		u->tally_gen = d->view_builds;
		u->tally_waiters = u->tally_leases = u->tally_gpus = 0;
	}
	if (lease) {
		u->tally_leases++;
		u->tally_gpus += gpus;
	} else {
		u->tally_waiters++;
	}
}

static json_t *tally_json(struct daemon *d, const struct tally *t, int lease)
{
	json_t *a = json_array();

	for (size_t i = 0; i < t->count; i++) {
		struct user_slot *u = daemon_user(d, t->uids[i]);
		json_t *o = json_object();

		if (!u)
			continue;
		json_object_set_new(o, "uid", json_integer(u->uid));
		json_object_set_new(o, "user", json_string(u->name));
		json_object_set_new(
		    o, "count",
		    json_integer((json_int_t)(lease ? u->tally_leases : u->tally_waiters)));
		if (lease)
			json_object_set_new(o, "gpus", json_integer((json_int_t)u->tally_gpus));
		json_array_append_new(a, o);
	}
	return a;
}

/*
 * The view, built once per change and sent to every asker until the next
 * (VIEW_REUSE_MS at most): the first VIEW_LEASES leases and VIEW_WAITERS
 * waiters one by one, the rest counted per user, so that its cost and size
 * are bounded however long the line and however many the reservations.
 */
static struct shared_text *view_build(struct daemon *d)
{
	json_t *m = json_object(), *leases = json_array(), *waiters = json_array();
	struct tally more_leases = {0}, more_waiters = {0};
	struct shared_text *t = NULL;
	size_t n = 0;
	char *text;

	d->view_builds++;
	for (struct blease *l = d->leases; l; l = l->next, n++)
		if (n < VIEW_LEASES)
			json_array_append_new(leases, daemon_lease_json(l, 0));
		else
			tally_add(d, &more_leases, l->rec.uid, 1, l->rec.gpu_count);
	n = 0;
	for (struct conn *c = d->line_head; c; c = c->lnext, n++) {
		/* The one waiter record (record.h), as the registry's tickets
		 * show theirs, less what the broker places it by. */
		struct waiter_info wi = c->w;

		if (n >= VIEW_WAITERS) {
			tally_add(d, &more_waiters, c->w.uid, 0, 0);
			continue;
		}
		wi.req = NULL;
		wi.usable = wi.usable_migs = NULL;
		wi.pid_start = 0;
		wi.within[0] = '\0';
		snprintf(wi.name, sizeof wi.name, "wait.%020llu", (unsigned long long)c->seq);
		if (!wi.user[0])
			str_copy(wi.user, sizeof wi.user, "?");
		if (c->queued_job)
			str_copy(wi.command, sizeof wi.command, RECORD_QUEUED_JOB);
		json_array_append_new(waiters, record_waiter_json(&wi));
	}
	json_object_set_new(m, "op", json_string("view"));
	json_object_set_new(m, "leases", leases);
	json_object_set_new(m, "waiters", waiters);
	daemon_fence_view(m);
	if (more_leases.count)
		json_object_set_new(m, "more_leases", tally_json(d, &more_leases, 1));
	if (more_waiters.count)
		json_object_set_new(m, "more_waiters", tally_json(d, &more_waiters, 0));
	json_object_set_new(m, "v", json_integer(BROKER_VERSION));
	text = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	free(more_leases.uids);
	free(more_waiters.uids);
	if (text) {
		size_t len = strlen(text);

		t = malloc(sizeof *t + len + 1);
		if (t) {
			t->refs = 1;
			t->len = len + 1;
			memcpy(t->data, text, len);
			t->data[len] = '\n';
		}
		free(text);
	}
	return t;
}

struct shared_text *daemon_view_text(struct daemon *d)
{
	int64_t now = monotonic_ms();

	daemon_config_fresh(d); /* new limits are a change */
	if (!d->view || d->view_gen != d->gen || now - d->view_at >= VIEW_REUSE_MS) {
		shared_text_put(d->view);
		d->view = view_build(d);
		d->view_gen = d->gen;
		d->view_at = now;
	}
	if (d->view)
		d->view->refs++;
	return d->view;
}
