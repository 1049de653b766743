/*
 * state.c - the broker's state file: what a broker started after this one
 * restores (main.c's restore: the leases, the line's places and the
 * GPU-hours ledger), in a journal of JSON lines.
 *
 * The first line is a snapshot, the whole state as one document:
 *
 *   {"gpu_hours":[ENTRY,...],"leases":[LEASE,...],"waiters":[PLACE,...]}
 *
 * (a broker before the journal wrote this document alone, which reads as
 * a journal with no changes yet).  Each line after it is one change, in
 * the order made:
 *
 *   {"lease":LEASE}      a lease granted, or its record changed (it
 *                        replaces the lease of the same id)
 *   {"end":"ID"}         the lease ID ended
 *   {"place":PLACE}      a waiter joined the line
 *   {"unplace":"TOKEN"}  the waiter whose place token is TOKEN left it
 *   {"hours":ENTRY}      a user's ledger entry, as it is now (by uid)
 *
 * LEASE is the one lease record (daemon_lease_json, with its secrets),
 * PLACE a waiter's (restart.c), ENTRY a ledger entry (hours.c).  Ending or
 * removing what the file does not hold changes nothing.  The line is in
 * arrival order (seq: every insert keeps it so, restart.c), so its places
 * come back sorted by seq.
 *
 * A loop turn's changes are one append and one fdatasync: a change costs
 * its own bytes, whatever the number of leases and waiters.  Once the
 * changes appended outgrow twice the snapshot (and COMPACT_SLACK), the
 * next write is a new snapshot instead: a new file, synced and renamed
 * into place.  Its cost is paid for by the appends before it, so a change
 * costs O(1) bytes amortised.
 *
 * A broker killed mid-append, or a machine that loses power, may leave
 * the last line torn: it is ignored, and said.  Any other line that is not
 * a record stops the start: the leases in the file are running jobs, and a
 * broker that forgot them would hand their GPUs out again.  A failed
 * append (a full disk) is cut off the file again, said once, and the next
 * write is a snapshot from memory, retried every STATE_RETRY_MS: the state
 * in memory is never lost to a failed write.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"

/* Appends allowed beyond twice the snapshot before the next snapshot: a
 * small state is not rewritten every few changes. */
#define COMPACT_SLACK (64u << 10)
/* A state file that cannot be written is tried again this often. */
#define STATE_RETRY_MS 1000

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A lease's line in the state file, made once: a snapshot is the records
 * joined, so writing one costs a copy of their bytes, not a JSON encoding
 * of every lease. */
static const char *lease_record(struct blease *l)
{
	if (!l->record) {
		json_t *o = daemon_lease_json(l, 1);

		l->record = json_dumps(o, JSON_COMPACT);
		l->record_len = l->record ? strlen(l->record) : 0;
		json_decref(o);
	}
	return l->record;
}

/* ---- this turn's changes -------------------------------------------------- */

static int pend_grow(struct state_file *s, size_t more)
{
	char *grown;
	size_t cap = s->pend_cap ? s->pend_cap : 4096;

	if (s->pend_len + more <= s->pend_cap)
		return 0;
	while (cap < s->pend_len + more)
		cap *= 2;
	grown = realloc(s->pend, cap);
	if (!grown)
		return -1;
	s->pend = grown;
	s->pend_cap = cap;
	return 0;
}

/* {"key":value}\n, value JSON text of len bytes.  A change that cannot be
 * kept is not lost: the next write is a snapshot of memory. */
static void pend_raw(struct daemon *d, const char *key, const char *value, size_t len)
{
	struct state_file *s = &d->state;
	size_t klen = strlen(key);

	d->changed = 1;
	if (!value || pend_grow(s, klen + len + 6) < 0) {
		s->lost = 1;
		return;
	}
	s->pend_len += (size_t)sprintf(s->pend + s->pend_len, "{\"%s\":", key);
	memcpy(s->pend + s->pend_len, value, len);
	s->pend_len += len;
	memcpy(s->pend + s->pend_len, "}\n", 2);
	s->pend_len += 2;
}

static void pend_json(struct daemon *d, const char *key, json_t *value)
{
	char *text = value ? json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	pend_raw(d, key, text, text ? strlen(text) : 0);
	free(text);
	json_decref(value);
}

void daemon_state_lease(struct daemon *d, struct blease *l)
{
	const char *record;

	free(l->record); /* what it says may have changed */
	l->record = NULL;
	record = lease_record(l);
	pend_raw(d, "lease", record, l->record_len);
}

void daemon_state_lease_end(struct daemon *d, const struct blease *l)
{
	pend_json(d, "end", json_string(l->rec.id));
}

void daemon_state_place(struct daemon *d, struct conn *c)
{
	struct state_file *s = &d->state;

	/* Its record is written with the turn's changes (it may leave the
	 * line before: a waiter granted at once costs the file nothing). */
	d->changed = 1;
	if (c->joined_at)
		return;
	if (s->joined_count == s->joined_cap) {
		size_t cap = s->joined_cap ? 2 * s->joined_cap : 64;
		struct conn **grown = realloc(s->joined, cap * sizeof *grown);

		if (!grown) {
			s->lost = 1;
			return;
		}
		s->joined = grown;
		s->joined_cap = cap;
	}
	s->joined[s->joined_count++] = c;
	c->joined_at = s->joined_count;
}

void daemon_state_unplace(struct daemon *d, struct conn *c)
{
	struct state_file *s = &d->state;

	if (c->joined_at) {
		/* Not written yet: it never will be. */
		struct conn *last = s->joined[--s->joined_count];

		s->joined[c->joined_at - 1] = last;
		last->joined_at = c->joined_at;
		c->joined_at = 0;
	}
	if (c->on_file) {
		c->on_file = 0;
		pend_json(d, "unplace", json_string(c->place));
	}
}

void daemon_state_hours(struct daemon *d, json_t *entry)
{
	pend_json(d, "hours", entry);
}

/* ---- writing -------------------------------------------------------------- */

static void state_failed(struct daemon *d, int err)
{
	struct state_file *s = &d->state;

	if (!s->failing)
		daemon_say(
		    "cannot write the state file '%s': %s (leases would not survive a restart)",
		    d->state_path, strerror(err));
	s->failing = 1;
	s->retry_ms = monotonic_ms() + STATE_RETRY_MS;
	/* Memory is the truth: the next write is a whole snapshot of it. */
	s->pend_len = 0;
	s->lost = 0;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

static void state_written(struct daemon *d)
{
	struct state_file *s = &d->state;

	if (s->failing)
		daemon_say("the state file '%s' is written again", d->state_path);
	s->failing = 0;
	s->retry_ms = 0;
	s->pend_len = 0;
	s->lost = 0;
}

/* Every lease, place and ledger entry to a new file, synced and renamed
 * into place (a broker killed mid-write, or a machine that loses power,
 * leaves the file before); it stays open for the appends after it. */
static void state_snapshot(struct daemon *d)
{
	struct state_file *s = &d->state;
	char tmp[PATH_MAX + 8];
	json_t *doc = json_object();
	char *hours, *text = NULL;
	size_t len = 0, cap;
	int fd, first, err = ENOMEM;

	for (size_t i = 0; i < s->joined_count; i++)
		s->joined[i]->joined_at = 0; /* the snapshot has them */
	s->joined_count = 0;
	json_object_set_new(doc, "gpu_hours", daemon_hours_json(d));
	hours = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	cap = 64 + (hours ? strlen(hours) : 0);
	for (struct blease *l = d->leases; l; l = l->next)
		cap += (lease_record(l) ? l->record_len : 0) + 1;
	for (struct conn *c = d->line_head; c; c = c->lnext)
		cap += (daemon_place_record(c) ? c->place_record_len : 0) + 1;
	text = hours ? malloc(cap) : NULL;
	if (text) {
		/* {"gpu_hours":[...],"leases":[l1,...],"waiters":[w1,...]}\n */
		len = strlen(hours) - 1;
		memcpy(text, hours, len);
		len += (size_t)sprintf(text + len, ",\"leases\":[");
		first = 1;
		for (struct blease *l = d->leases; l; l = l->next) {
			if (!l->record)
				continue;
			if (!first)
				text[len++] = ',';
			first = 0;
			memcpy(text + len, l->record, l->record_len);
			len += l->record_len;
		}
		/* The line's places (restart.c), in line order. */
		len += (size_t)sprintf(text + len, "],\"waiters\":[");
		first = 1;
		for (struct conn *c = d->line_head; c; c = c->lnext) {
			if (!c->place_record)
				continue;
			if (!first)
				text[len++] = ',';
			first = 0;
			memcpy(text + len, c->place_record, c->place_record_len);
			len += c->place_record_len;
		}
		len += (size_t)sprintf(text + len, "]}\n");
	}
	free(hours);
	snprintf(tmp, sizeof tmp, "%s.tmp", d->state_path);
	unlink(tmp);
	fd = text ? open(tmp, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)
	          : -1;
	if (text && fd < 0)
		err = errno;
	if (fd >= 0 &&
	    (write_all(fd, text, len) < 0 || fdatasync(fd) < 0 || rename(tmp, d->state_path) < 0)) {
		err = errno;
		close(fd);
		unlink(tmp);
		fd = -1;
	}
	free(text);
	if (fd < 0) {
		state_failed(d, err);
		return;
	}
	if (s->fd >= 0)
		close(s->fd);
	s->fd = fd;
	s->snapshot_bytes = len;
	s->appended_bytes = 0;
	for (struct conn *c = d->line_head; c; c = c->lnext)
		c->on_file = c->place_record != NULL;
	state_written(d);
}

void daemon_persist(struct daemon *d)
{
	struct state_file *s = &d->state;
	size_t len;

	d->changed = 0;
	/* The places of the waiters who joined, after the turn's removals
	 * (a place taken over leaves under its token before it comes back). */
	for (size_t i = 0; i < s->joined_count; i++) {
		struct conn *c = s->joined[i];

		c->joined_at = 0;
		if (daemon_place_record(c)) {
			pend_raw(d, "place", c->place_record, c->place_record_len);
			c->on_file = 1;
		}
	}
	s->joined_count = 0;
	if (s->fd >= 0 && !s->lost && !s->pend_len)
		return;
	len = s->pend_len;
	if (s->fd < 0 || s->lost ||
	    s->appended_bytes + len > 2 * s->snapshot_bytes + COMPACT_SLACK) {
		state_snapshot(d);
		return;
	}
	if (write_all(s->fd, s->pend, len) < 0 || fdatasync(s->fd) < 0) {
		int err = errno;

		/* A part written (a full disk) would make the lines after it
		 * one torn line in the middle: cut it off again. */
		if (ftruncate(s->fd, (off_t)(s->snapshot_bytes + s->appended_bytes)) < 0)
			(void)0; /* the file is replaced before it is appended to again */
		state_failed(d, err);
		return;
	}
	s->appended_bytes += len;
	state_written(d);
}

int64_t daemon_state_due(struct daemon *d)
{
	struct state_file *s = &d->state;
	int64_t now;

	if (!s->failing)
		return -1;
	now = monotonic_ms();
	if (now < s->retry_ms)
		return s->retry_ms;
	d->changed = 1; /* the turn's end tries again */
	return now;
}

/* One broker per state file.  A second one, started by hand beside the
 * service (or on a socket of its own), would restore, rewrite and serve the
 * first one's leases: two authorities, and a GPU granted twice.  The lock
 * is flock(2) on STATE.lock, which the kernel drops when its holder dies
 * however it dies, so a crash never leaves it behind; the holder's pid is
 * written in it for the message.  -1: held by another broker (said). */
int daemon_state_lock(struct daemon *d)
{
	char path[PATH_MAX], pid[24] = "";
	int fd, n;

	if (snprintf(path, sizeof path, "%s.lock", d->state_path) >= (int)sizeof path) {
		daemon_say("the state file's path '%s' is too long", d->state_path);
		return -1;
	}
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		daemon_say("cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		n = (int)pread(fd, pid, sizeof pid - 1, 0);
		pid[n > 0 ? strcspn(pid, "\n") : 0] = '\0';
		daemon_say("another broker%s%s%s keeps its leases in '%s': stop it first "
		           "(systemctl stop gpuman), or give this one a --state of its own",
		           pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "", d->state_path);
		close(fd);
		return -1;
	}
	n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		daemon_say("cannot write '%s': %s (the lock holds all the same)", path,
		           strerror(errno));
	d->state.lock_fd = fd;
	return 0;
}

void daemon_state_close(struct daemon *d)
{
	struct state_file *s = &d->state;

	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	s->lock_fd = -1;
	free(s->pend);
	free(s->joined);
	s->pend = NULL;
	s->joined = NULL;
	s->pend_len = s->pend_cap = s->joined_count = s->joined_cap = 0;
}

/* ---- reading -------------------------------------------------------------- */

/* The state being read back: records by their key. */
struct fold {
	json_t *hours;   /* uid (text) -> ENTRY */
	json_t *leases;  /* id -> LEASE */
	json_t *waiters; /* token -> PLACE */
};

/* key (a string, or a uid) of o in map, or -1 when it has none. */
static int fold_set(json_t *map, json_t *o, const char *field)
{
	json_t *k = json_object_get(o, field);
	char uid[24];
	const char *key = json_string_value(k);

	if (json_is_integer(k)) {
		snprintf(uid, sizeof uid, "%lld", (long long)json_integer_value(k));
		key = uid;
	}
	if (!json_is_object(o) || !key)
		return -1;
	return json_object_set(map, key, o);
}

static int fold_del(json_t *map, json_t *key)
{
	if (!json_is_string(key))
		return -1;
	json_object_del(map, json_string_value(key)); /* absent: nothing to do */
	return 0;
}

static int fold_snapshot(struct fold *f, json_t *doc)
{
	json_t *o;
	size_t i;

	json_object_clear(f->hours);
	json_object_clear(f->leases);
	json_object_clear(f->waiters);
	json_array_foreach(json_object_get(doc, "gpu_hours"), i, o)
	{
		if (fold_set(f->hours, o, "uid") < 0)
			return -1;
	}
	json_array_foreach(json_object_get(doc, "leases"), i, o)
	{
		if (fold_set(f->leases, o, "id") < 0)
			return -1;
	}
	json_array_foreach(json_object_get(doc, "waiters"), i, o)
	{
		if (fold_set(f->waiters, o, "place") < 0)
			return -1;
	}
	return 0;
}

/* One line of the file into f: 0, or -1 when it is no record. */
static int fold_line(struct fold *f, json_t *o)
{
	json_t *v;

	if (!json_is_object(o) || json_object_size(o) == 0)
		return -1;
	if (json_object_size(o) == 1) {
		if ((v = json_object_get(o, "lease")))
			return fold_set(f->leases, v, "id");
		if ((v = json_object_get(o, "end")))
			return fold_del(f->leases, v);
		if ((v = json_object_get(o, "place")))
			return fold_set(f->waiters, v, "place");
		if ((v = json_object_get(o, "unplace")))
			return fold_del(f->waiters, v);
		if ((v = json_object_get(o, "hours")))
			return fold_set(f->hours, v, "uid");
	}
	if (json_object_get(o, "gpu_hours") || json_object_get(o, "leases") ||
	    json_object_get(o, "waiters"))
		return fold_snapshot(f, o);
	return -1;
}

static int by_seq(const void *a, const void *b)
{
	json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "seq"));
	json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "seq"));

	return (x > y) - (x < y);
}

/* The folded state as the one document a snapshot is. */
static json_t *fold_doc(struct fold *f)
{
	json_t *doc = json_object(), *arr, *o;
	size_t n = json_object_size(f->waiters), i = 0;
	json_t **places = calloc(n + 1, sizeof *places);
	const char *key;

	if (!doc || !places) {
		json_decref(doc);
		free(places);
		return NULL;
	}
	arr = json_array();
	json_object_foreach(f->hours, key, o)
	{
		json_array_append(arr, o);
	}
	json_object_set_new(doc, "gpu_hours", arr);
	arr = json_array();
	json_object_foreach(f->leases, key, o)
	{
		json_array_append(arr, o);
	}
	json_object_set_new(doc, "leases", arr);
	json_object_foreach(f->waiters, key, o)
	{
		places[i++] = o;
	}
	qsort(places, n, sizeof *places, by_seq);
	arr = json_array();
	for (i = 0; i < n; i++)
		json_array_append(arr, places[i]);
	json_object_set_new(doc, "waiters", arr);
	free(places);
	return doc;
}

static char *read_whole(int fd, size_t *len)
{
	struct stat st;
	char *buf;
	size_t cap, got = 0;

	if (fstat(fd, &st) < 0)
		return NULL;
	cap = (size_t)st.st_size + 1;
	buf = malloc(cap + 1);
	while (buf) {
		ssize_t n = read(fd, buf + got, cap - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			return NULL;
		}
		if (n == 0)
			break;
		got += (size_t)n;
		if (got == cap) {
			char *grown = realloc(buf, 2 * cap + 1);

			if (!grown)
				free(buf);
			buf = grown;
			cap *= 2;
		}
	}
	if (buf)
		buf[got] = '\0';
	*len = got;
	return buf;
}

json_t *daemon_state_load(struct daemon *d, int *refuse)
{
	struct fold f = {json_object(), json_object(), json_object()};
	json_t *doc = NULL;
	char *text = NULL;
	size_t len = 0, at = 0, line = 0;
	int fd = open(d->state_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	*refuse = 0;
	if (fd < 0 && errno == ENOENT)
		goto done; /* a first start */
	if (fd < 0 || !(text = read_whole(fd, &len))) {
		daemon_say("cannot read the state file '%s': %s (its leases are running jobs: "
		           "fix it, or move it aside to start without them)",
		           d->state_path, strerror(errno));
		*refuse = 1;
		goto done;
	}
	if (!f.hours || !f.leases || !f.waiters) {
		daemon_say("out of memory reading the state file '%s'", d->state_path);
		*refuse = 1;
		goto done;
	}
	while (at < len) {
		char *nl = memchr(text + at, '\n', len - at);
		size_t end = nl ? (size_t)(nl - text) : len;
		json_error_t jerr;
		json_t *o;

		line++;
		if (end == at) { /* an empty line says nothing */
			at = end + 1;
			continue;
		}
		o = json_loadb(text + at, end - at, 0, &jerr);
		if (!o && line == 1 && (o = json_loadb(text, len, 0, &jerr))) {
			/* A document over several lines: a file of before the
			 * journal, written by hand. */
			end = len;
		}
		if (!o && !nl && line > 1) {
			/* The last line, cut short by a broker killed mid-append
			 * (or a machine that lost power): that turn's changes
			 * after its last whole line are lost. */
			daemon_say("the state file '%s' ends in a torn line %zu (%zu bytes: %s); "
			           "ignored",
			           d->state_path, line, end - at, jerr.text);
			break;
		}
		if (!o || fold_line(&f, o) < 0) {
			daemon_say(
			    "the state file '%s' line %zu is not a record of the broker's (%s); "
			    "its leases are running jobs: fix it, or move it aside to start "
			    "without them",
			    d->state_path, line, o ? "unknown change" : jerr.text);
			json_decref(o);
			*refuse = 1;
			goto done;
		}
		json_decref(o);
		at = end + 1;
	}
	if (line && !(doc = fold_doc(&f))) {
		daemon_say("out of memory reading the state file '%s'", d->state_path);
		*refuse = 1;
	}
done:
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(f.hours);
	json_decref(f.leases);
	json_decref(f.waiters);
	return doc;
}
