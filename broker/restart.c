/*
 * restart.c - a waiter's place survives a restart of the broker (a
 * crash, systemctl restart, a package upgrade).
 *
 * Each waiter is given a place token in its "queued" reply, and its line
 * entry (arrival seq and time, uid, pid and the pid's start time, the
 * token and the request) goes to the state file beside the leases (a
 * record made once: daemon_place_record; state.c writes it).  A
 * broker that starts puts the entries of the one before it back in the
 * line, in their old order, as places that no connection holds yet: they
 * hold back the GPUs they could use (the rules treat them as any waiter
 * ahead) but are never granted.  The waiter's client, seeing the broker
 * go, connects again and presents its token; the kernel's word on the new
 * connection (SO_PEERCRED: the same uid, the same pid started at the same
 * time) must match the entry, and then the connection takes the place.
 * Anything else (a forged token, another user's) is an ordinary request
 * that queues at the back.  A place whose process has ended is dropped at
 * start; one not taken within PLACE_GRACE_MS is dropped then.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"

/* How long a restored place is held for its waiter.  The client tries to
 * connect again for CONNECT_PATIENCE_MS (5 s, lib/broker.c) after the
 * broker goes, and systemd starts the new broker within a second: 10 s
 * covers both with room for a loaded machine, while a waiter that does not
 * come back holds the line up no longer than that. */
#define PLACE_GRACE_MS 10000

void daemon_place_token(struct conn *c)
{
	daemon_random_hex(c->place, 16);
}

/* The one waiter record (record.h), plus what only the broker keeps: its
 * turn, the token that claims it and, for a reservation, how long. */
static json_t *place_json(const struct conn *c)
{
	/* What it asked for; what it is shown (its candidates, its user's
	 * limit) is worked out again by the broker that reads it. */
	struct waiter_info wi = c->w;
	json_t *o;

	wi.cand = NULL;
	wi.cand_count = 0;
	wi.summary[0] = wi.limit[0] = wi.user[0] = '\0';
	o = record_waiter_json(&wi);
	if (o) {
		json_object_set_new(o, "seq", json_integer((json_int_t)c->seq));
		json_object_set_new(o, "place", json_string(c->place));
		json_object_set_new(o, "reserve_ms", json_integer(c->reserve_ms));
	}
	return o;
}

const char *daemon_place_record(struct conn *c)
{
	/* What it says does not change while it waits: made once. */
	if (!c->place_record && c->wait && c->place[0] && c->w.req) {
		json_t *o = place_json(c);

		c->place_record = json_dumps(o, JSON_COMPACT);
		c->place_record_len = c->place_record ? strlen(c->place_record) : 0;
		json_decref(o);
	}
	return c->place_record;
}

/* c into the line before next (NULL: at the back), counted as conn.c's
 * on_acquire counts it. */
static void line_insert(struct daemon *d, struct conn *c, struct conn *next)
{
	c->in_line = 1;
	if (c->reserve_ms > 0) {
		struct user_slot *me = daemon_user(d, c->w.uid);

		if (me)
			me->reserve_waiting++;
		d->reserve_waiting++;
	}
	c->lnext = next;
	c->lprev = next ? next->lprev : d->line_tail;
	if (c->lprev)
		c->lprev->lnext = c;
	else
		d->line_head = c;
	if (next)
		next->lprev = c;
	else
		d->line_tail = c;
	d->line_len++;
	d->gen++;
	d->dirty = 1;
	daemon_state_place(d, c);
}

void daemon_places_restore(struct daemon *d, json_t *arr)
{
	struct gm_snapshot *snap = daemon_snapshot(d, 0);
	size_t i, kept = 0, gone = 0;
	json_t *o;

	json_array_foreach(arr, i, o)
	{
		struct conn *g = calloc(1, sizeof *g);
		const char *token = json_string_value(json_object_get(o, "place"));

		if (!g)
			break;
		g->kind = EV_CONN;
		g->fd = -1;
		g->ghost = 1;
		g->wait = 1;
		g->state = CONN_WAITING;
		/* Its request unreadable: its req stays NULL (dropped below). */
		(void)record_waiter_parse(o, &g->w);
		if (!g->w.command[0])
			str_copy(g->w.command, sizeof g->w.command, "?");
		g->seq = (uint64_t)json_integer_value(json_object_get(o, "seq"));
		g->reserve_ms = json_integer_value(json_object_get(o, "reserve_ms"));
		/* Its process is gone (or the pid is another's now): nobody will
		 * come back for it. */
		if (!token || strlen(token) != 32 || !g->w.req || g->w.pid <= 0 ||
		    !g->w.pid_start || proctree_start(g->w.pid) != g->w.pid_start || !snap ||
		    (g->w.usable && !json_is_object(g->w.usable)) ||
		    (g->w.usable_migs && !json_is_object(g->w.usable_migs))) {
			conn_free(g);
			gone++;
			continue;
		}
		str_copy(g->place, sizeof g->place, token);
		line_summary(g->w.req, g->w.summary, sizeof g->w.summary);
		daemon_user_name(g->w.uid, g->w.user, sizeof g->w.user);
		daemon_candidates(d, g, snap);
		if (g->seq > d->next_seq)
			d->next_seq = g->seq;
		line_insert(d, g, NULL);
		kept++;
	}
	d->places_until = kept ? monotonic_ms() + PLACE_GRACE_MS : 0;
	if (kept || gone)
		daemon_say("holding %zu place%s in line of the broker before me for %d s (%zu "
		           "whose process ended dropped)",
		           kept, kept == 1 ? "" : "s", PLACE_GRACE_MS / 1000, gone);
}

static void place_drop(struct daemon *d, struct conn *g)
{
	daemon_line_remove(d, g);
	conn_free(g);
}

int daemon_place_take(struct daemon *d, struct conn *c, const char *token)
{
	struct conn *g = NULL, *next;

	c->w.pid_start = proctree_start(c->w.pid);
	/* Only a restored place (a ghost) is ever taken, and only by its
	 * token: without one, g stays NULL, however like the line's head the
	 * caller looks (one process's many connections share uid and pid). */
	for (struct conn *p = token ? d->line_head : NULL; p; p = p->lnext)
		if (p->ghost && strlen(token) == strlen(p->place) && !strcmp(p->place, token)) {
			g = p;
			break;
		}
	/* The kernel's word on this connection against the entry: the same
	 * user, the same process (a pid reused since is another process). */
	if (!g || g->w.uid != c->w.uid || g->w.pid != c->w.pid || !c->w.pid_start ||
	    g->w.pid_start != c->w.pid_start) {
		daemon_place_token(c);
		line_insert(d, c, NULL);
		return 0;
	}
	str_copy(c->place, sizeof c->place, g->place);
	c->seq = g->seq;
	c->w.since_ms = g->w.since_ms;
	/* c stands where g stood. */
	next = g->lnext;
	place_drop(d, g);
	line_insert(d, c, next);
	return 1;
}

int64_t daemon_places_due(struct daemon *d)
{
	struct conn *g, *next;

	if (!d->places_until)
		return -1;
	if (monotonic_ms() < d->places_until)
		return d->places_until;
	d->places_until = 0;
	for (g = d->line_head; g; g = next) {
		next = g->lnext;
		if (g->ghost) {
			daemon_say(
			    "dropped the place of pid %d (uid %u): it did not come back within "
			    "%d s",
			    g->w.pid, g->w.uid, PLACE_GRACE_MS / 1000);
			place_drop(d, g);
		}
	}
	return -1;
}
