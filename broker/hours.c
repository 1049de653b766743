/*
 * hours.c - max_gpu_hours (gpuman.conf): the broker's ledger of the
 * GPU-time each user's leases held today.
 *
 * A day is local midnight to midnight.  A user's use today is what their
 * ended leases held since midnight (the ledger, kept in the broker's
 * root-owned state file, so a restart keeps it) plus what their live
 * leases and reservations have held since midnight.  A GPU counts whole
 * whatever the lease takes of it (a memory share or a MIG slice too).
 * Only the broker can keep such a ledger: one in a user's own files is one
 * the user can delete.  Once a user's use reaches the cap, their new
 * requests wait (or, without --wait, are refused) with the reason; leases
 * already held run on.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"

int64_t daemon_day_start(int64_t at_ms)
{
	time_t t = (time_t)(at_ms / 1000);
	struct tm tm;

	localtime_r(&t, &tm);
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	tm.tm_isdst = -1;
	return (int64_t)mktime(&tm) * 1000;
}

/* What l held since day (GPU-ms), up to now. */
static int64_t held_since(const struct blease *l, int64_t day, int64_t now)
{
	int64_t from = l->rec.start_ms > day ? l->rec.start_ms : day;

	return now > from ? (now - from) * (int64_t)l->rec.gpu_count : 0;
}

static struct hours_use *entry(struct daemon *d, unsigned uid, int64_t day, int add)
{
	struct hours_use *grown;

	for (size_t i = 0; i < d->hours_count; i++)
		if (d->hours[i].uid == uid) {
			if (d->hours[i].day_ms != day) {
				d->hours[i].day_ms = day; /* a new day: yesterday's is gone */
				d->hours[i].used_ms = 0;
			}
			return &d->hours[i];
		}
	if (!add)
		return NULL;
	grown = realloc(d->hours, (d->hours_count + 1) * sizeof *grown);
	if (!grown)
		return NULL;
	d->hours = grown;
	d->hours[d->hours_count] = (struct hours_use){uid, day, 0};
	return &d->hours[d->hours_count++];
}

/* An entry's one record, in the state file's snapshot and its changes. */
static json_t *entry_json(const struct hours_use *h)
{
	return json_pack("{s:i, s:I, s:I}", "uid", (int)h->uid, "day_ms", (json_int_t)h->day_ms,
	                 "used_ms", (json_int_t)h->used_ms);
}

void daemon_hours_charge(struct daemon *d, const struct blease *l)
{
	int64_t now = now_ms(), day = daemon_day_start(now), used = held_since(l, day, now);
	struct hours_use *h;

	if (used <= 0 || !(h = entry(d, l->rec.uid, day, 1)))
		return;
	h->used_ms += used;
	daemon_state_hours(d, entry_json(h)); /* this user's entry alone */
}

int64_t daemon_hours_used(struct daemon *d, unsigned uid)
{
	int64_t now = now_ms(), day = daemon_day_start(now), used = 0;
	struct hours_use *h = entry(d, uid, day, 0);

	if (h)
		used = h->used_ms;
	for (const struct blease *l = d->leases; l; l = l->next)
		if (l->rec.uid == uid)
			used += held_since(l, day, now);
	return used;
}

json_t *daemon_hours_json(const struct daemon *d)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < d->hours_count; i++)
		json_array_append_new(arr, entry_json(&d->hours[i]));
	return arr;
}

void daemon_hours_restore(struct daemon *d, json_t *arr)
{
	int64_t day = daemon_day_start(now_ms());
	json_t *o;
	size_t i;

	json_array_foreach(arr, i, o)
	{
		struct hours_use *h;

		if (json_integer_value(json_object_get(o, "day_ms")) != day)
			continue; /* another day's */
		h = entry(d, (unsigned)json_integer_value(json_object_get(o, "uid")), day, 1);
		if (h)
			h->used_ms = json_integer_value(json_object_get(o, "used_ms"));
	}
}
