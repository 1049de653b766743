/*
 * snapshot.c - the broker's NVML session: the one NVML session of
 * the machine, which answers every client's snapshot (the "snapshot" op of
 * lib/broker_wire.h) and the broker's own placement.
 *
 * NVML is opened and read by a reader thread, never on the event loop.
 * A real driver's calls can take seconds (persistence mode off, a GPU that
 * fell off the bus); on the loop they would delay every grant, release and
 * answer of every user.  The loop asks for a reading, and goes on; the
 * reader says it is done through an eventfd in the loop's epoll.  Two
 * bounds, stated in lib/broker_wire.h and the man page:
 *
 *  - a client's reading is at most BROKER_SNAPSHOT_MAX_AGE_MS old: asked
 *    after that, the broker reads again, and answers when the reading is
 *    in, or after BROKER_SNAPSHOT_WAIT_MS with the reading it has, its age
 *    and why (the driver is slow);
 *  - placement uses a reading at most SNAPSHOT_REUSE_MS old, as it did
 *    when it read NVML itself, but waits for one at most PLACE_WAIT_MS of
 *    its reading's time: a slow driver costs the loop that once per
 *    reading, then the line is served on the reading it has, and again as
 *    soon as the new one is in.
 *
 * What a caller is told about other users' processes is what its own /proc
 * would show it (hidepid): a root process must not hand out what the
 * kernel hides.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"

/* How long placement waits for a reading in flight (see above). */
#define PLACE_WAIT_MS 50

/* A client waiting for the next reading. */
struct snap_waiter {
	struct conn *c;
	long max_age_ms;
	int64_t deadline; /* monotonic ms: answer with what there is */
	int view;         /* the view's line follows the reading's */
};

struct daemon_reader {
	enum ev_kind kind; /* first: epoll's data points here (EV_READER) */
	int efd;           /* reader -> loop: a reading is in */
	pthread_t thread;
	int started;
	/* Shared with the thread, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t wake;            /* loop -> reader: read */
	pthread_cond_t done;            /* reader -> loop: the first reading, a reading */
	int want, busy, stop, readings; /* readings: finished, good or not */
	int64_t busy_since;             /* monotonic ms, while busy */
	struct gm_snapshot *fresh;      /* a reading the loop has not taken */
	int64_t fresh_at;               /* monotonic ms when it was begun */
	char err[GM_ERRBUF_SIZE];       /* the last failure ("" none) */
	/* The loop's alone. */
	struct snap_waiter *waiters;
	size_t waiter_count, waiter_cap;
	/* d->snap's wire form, encoded once per reading (readings counts the
	 * readings taken into d->snap; wire_of, the one encoded), for every
	 * caller who may see all of it. */
	json_t *wire;
	unsigned long taken, wire_of;
	int64_t last_said_ms; /* of the last failure logged */
};

static void *reader_main(void *arg)
{
	struct daemon_reader *r = arg;
	struct gm_context *ctx = NULL;
	char err[GM_ERRBUF_SIZE];
	uint64_t one = 1;

	pthread_mutex_lock(&r->mu);
	r->busy = 1;
	r->busy_since = monotonic_ms();
	pthread_mutex_unlock(&r->mu);
	/* The driver's start-up: paid here once for every client. */
	if (context_open_local(&ctx, err, sizeof err) != GM_OK) {
		pthread_mutex_lock(&r->mu);
		str_copy(r->err, sizeof r->err, err);
		r->busy = 0;
		r->stop = 1;
		pthread_cond_broadcast(&r->done);
		pthread_mutex_unlock(&r->mu);
		return NULL;
	}
	pthread_mutex_lock(&r->mu);
	r->want = 1;
	while (!r->stop) {
		struct gm_snapshot *snap = NULL;
		int64_t begun;
		enum gm_err rc;

		if (!r->want) {
			r->busy = 0;
			pthread_cond_wait(&r->wake, &r->mu);
			continue;
		}
		r->want = 0;
		r->busy = 1;
		begun = r->busy_since = monotonic_ms();
		pthread_mutex_unlock(&r->mu);
		rc = snapshot_take(ctx, LISTING_UTIL_WINDOW_S * 1000, 1, &snap, err, sizeof err);
		pthread_mutex_lock(&r->mu);
		r->busy = 0;
		if (rc == GM_OK) {
			gm_snapshot_free(r->fresh);
			r->fresh = snap;
			r->fresh_at = begun;
			r->err[0] = '\0';
		} else {
			str_copy(r->err, sizeof r->err, err);
		}
		r->readings++;
		pthread_cond_broadcast(&r->done);
		if (write(r->efd, &one, sizeof one) < 0) {
			/* the counter is full: the loop has a wake-up coming */
		}
	}
	pthread_mutex_unlock(&r->mu);
	gm_close(ctx);
	return NULL;
}

/* Ask for a reading (one in flight serves).  Call with r->mu held. */
static void ask_locked(struct daemon_reader *r)
{
	if (!r->busy && !r->want) {
		r->want = 1;
		pthread_cond_signal(&r->wake);
	}
}

/* Take a finished reading into d->snap.  Call with r->mu held.  1 if one
 * was taken. */
static int collect_locked(struct daemon *d)
{
	struct daemon_reader *r = d->reader;
	int64_t now = monotonic_ms();

	if (r->err[0] && now - r->last_said_ms >= 60000) {
		daemon_say("cannot read the GPUs: %s", r->err);
		r->last_said_ms = now;
	}
	if (!r->fresh)
		return 0;
	gm_snapshot_free(d->snap);
	d->snap = r->fresh;
	d->snap_at = r->fresh_at;
	r->fresh = NULL;
	r->taken++;
	return 1;
}

int daemon_reader_start(struct daemon *d)
{
	struct daemon_reader *r = calloc(1, sizeof *r);
	struct epoll_event ev = {EPOLLIN, {.ptr = NULL}};
	int rc = -1;

	if (!r)
		return -1;
	d->reader = r;
	r->kind = EV_READER;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->wake, NULL);
	pthread_cond_init(&r->done, NULL);
	r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ev.data.ptr = r;
	if (r->efd < 0 || epoll_ctl(d->epfd, EPOLL_CTL_ADD, r->efd, &ev) < 0) {
		daemon_say("cannot watch the NVML reader: %s", strerror(errno));
		return -1;
	}
	if (pthread_create(&r->thread, NULL, reader_main, r) != 0) {
		daemon_say("cannot start the NVML reader thread");
		return -1;
	}
	r->started = 1;
	/* The line needs the GPUs: serve once they are read. */
	pthread_mutex_lock(&r->mu);
	while (!r->fresh && !r->stop && !r->readings)
		pthread_cond_wait(&r->done, &r->mu);
	if (r->fresh) {
		collect_locked(d);
		rc = 0;
	} else {
		daemon_say("%s", r->err[0] ? r->err : "cannot read the GPUs");
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

void daemon_reader_stop(struct daemon *d)
{
	struct daemon_reader *r = d->reader;

	if (!r)
		return;
	d->reader = NULL;
	if (r->started) {
		struct timespec until;

		pthread_mutex_lock(&r->mu);
		r->stop = 1;
		pthread_cond_signal(&r->wake);
		pthread_mutex_unlock(&r->mu);
		/* An idle reader ends at once.  A driver call in flight is not
		 * interrupted: past a second the process ends without waiting
		 * for it, and r stays the thread's. */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		if (pthread_timedjoin_np(r->thread, NULL, &until) != 0) {
			pthread_detach(r->thread);
			return;
		}
	}
	gm_snapshot_free(r->fresh);
	if (r->efd >= 0)
		close(r->efd);
	free(r->waiters);
	json_decref(r->wire);
	free(r);
}

/* Placement's reading (place.c, on_acquire): see the file's head. */
struct gm_snapshot *daemon_snapshot(struct daemon *d, int fresh)
{
	struct daemon_reader *r = d->reader;
	int64_t now = monotonic_ms();

	if (d->snap && !fresh && now - d->snap_at < SNAPSHOT_REUSE_MS)
		return d->snap;
	pthread_mutex_lock(&r->mu);
	if (!collect_locked(d) || fresh || now - d->snap_at >= SNAPSHOT_REUSE_MS) {
		ask_locked(r);
		for (;;) {
			struct timespec until;
			int64_t limit = r->busy_since + PLACE_WAIT_MS, left;

			if (collect_locked(d) || r->stop || (!r->busy && !r->want))
				break;
			left = limit - monotonic_ms();
			if (r->busy && left <= 0)
				break;
			if (!r->busy)
				left = PLACE_WAIT_MS;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += left / 1000;
			until.tv_nsec += (left % 1000) * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&r->done, &r->mu, &until);
		}
		/* Still reading: the recheck timer must not spin meanwhile. */
		if (monotonic_ms() - d->snap_at >= SNAPSHOT_REUSE_MS && r->busy)
			d->snap_at = monotonic_ms();
	}
	pthread_mutex_unlock(&r->mu);
	return d->snap;
}

/* ---- what a caller may see (hidepid) ------------------------------------- */

enum proc_view { SEE_ALL, SEE_NO_COMMAND, SEE_NOTHING };

/* A "Gid:" or "Groups:" line naming the gid sought (*data; set to -1
 * when found)? */
static int gid_line(const char *line, void *data)
{
	long *gid = data;
	const char *p;
	char *end;

	if (strncmp(line, "Gid:", 4) && strncmp(line, "Groups:", 7))
		return 0;
	for (p = strchr(line, ':') + 1;; p = end) {
		unsigned long v = strtoul(p, &end, 10);

		if (end == p)
			return 0;
		if ((long)v == *gid) {
			*gid = -1;
			return 1;
		}
	}
}

/* Is gid among pid's groups? */
static int in_group(int pid, unsigned gid)
{
	long sought = (long)gid;

	return daemon_proc_status(pid, gid_line, &sought) == 0 && sought == -1;
}

/*
 * What the caller's own /proc (in its mount namespace: a container's, a
 * hardened login's) shows it of other users' processes: hidepid=1
 * (noaccess) hides their command lines, 2 (invisible) and 4 (ptraceable)
 * the processes themselves; its gid= group and root see everything.  A
 * caller whose mounts cannot be read sees nothing of others.
 */
static enum proc_view caller_view(const struct conn *c)
{
	char path[64], line[4096];
	enum proc_view view = SEE_NOTHING;
	long gid = -1;
	FILE *f;

	if (c->w.uid == 0)
		return SEE_ALL;
	snprintf(path, sizeof path, "/proc/%d/mountinfo", c->w.pid);
	f = fopen(path, "re");
	if (!f)
		return SEE_NOTHING;
	/* The last mount on /proc is the one the caller sees.  A line:
	 * "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE
	 * SOURCE SUPEROPTS". */
	while (fgets(line, sizeof line, f)) {
		char point[256], fstype[64], opts[1024], *sep = strstr(line, " - "), *save, *tok;

		if (!sep)
			continue;
		*sep = '\0';
		if (sscanf(line, "%*s %*s %*s %*s %255s", point) != 1 || strcmp(point, "/proc") ||
		    sscanf(sep + 3, "%63s %*s %1023s", fstype, opts) != 2 || strcmp(fstype, "proc"))
			continue;
		view = SEE_ALL;
		gid = -1;
		for (tok = strtok_r(opts, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (!strncmp(tok, "gid=", 4))
				gid = atol(tok + 4);
			else if (!strcmp(tok, "hidepid=1") || !strcmp(tok, "hidepid=noaccess"))
				view = SEE_NO_COMMAND;
			else if (!strncmp(tok, "hidepid=", 8) && strcmp(tok, "hidepid=0") &&
			         strcmp(tok, "hidepid=off"))
				view = SEE_NOTHING;
		}
	}
	fclose(f);
	if (view != SEE_ALL && gid >= 0 && in_group(c->w.pid, (unsigned)gid))
		view = SEE_ALL;
	return view;
}

/* The reading as c may see it: others' processes keep their GPU, memory
 * and utilization (free memory and "busy" are the GPU's, not theirs), and
 * lose what the caller's /proc hides. */
static json_t *snapshot_for(const struct daemon *d, const struct conn *c)
{
	enum proc_view view = caller_view(c);
	struct daemon_reader *r = d->reader;
	json_t *o, *procs, *p;
	size_t i;

	if (!r->wire || r->wire_of != r->taken) {
		json_decref(r->wire);
		r->wire = snapshot_wire_encode(d->snap);
		r->wire_of = r->taken;
	}
	if (view == SEE_ALL)
		return json_incref(r->wire);
	o = json_deep_copy(r->wire);
	procs = json_object_get(o, "processes");
	json_array_foreach(procs, i, p)
	{
		const struct gm_proc *pr = &d->snap->procs[i];

		if (pr->has_user && pr->uid == c->w.uid)
			continue;
		json_object_del(p, "command");
		if (view == SEE_NOTHING) {
			json_object_del(p, "uid");
			json_object_del(p, "user");
			json_object_set_new(p, "pid", json_integer(0));
		}
	}
	return o;
}

/* The reading for c; with view, the view's line (the "view" op's answer)
 * after it, so that a look at the GPUs and their leases (status, pick)
 * takes one round trip. */
static void answer(struct daemon *d, struct conn *c, long max_age_ms, int view)
{
	json_t *m = json_object();
	int64_t age = now_ms() - d->snap->taken_ms;

	json_object_set_new(m, "op", json_string("snapshot"));
	json_object_set_new(m, "age_ms", json_integer(age < 0 ? 0 : age));
	if (max_age_ms >= 0 && age > max_age_ms) {
		char why[GM_ERRBUF_SIZE + 200];

		if (d->reader->err[0])
			snprintf(
			    why, sizeof why,
			    "the lease broker's last reading of the GPUs failed (%s); this one "
			    "is %.1f s old",
			    d->reader->err, (double)age / 1000.0);
		else
			snprintf(why, sizeof why,
			         "the driver did not answer the lease broker within %d ms; this "
			         "reading is %.1f s old",
			         BROKER_SNAPSHOT_WAIT_MS, (double)age / 1000.0);
		json_object_set_new(m, "stale", json_string(why));
	}
	json_object_set_new(m, "snapshot", snapshot_for(d, c));
	conn_finish_with(d, c, m, view ? daemon_view_text(d) : NULL);
}

void daemon_snapshot_op(struct daemon *d, struct conn *c, json_t *msg)
{
	struct daemon_reader *r = d->reader;
	json_t *age = json_object_get(msg, "max_age_ms");
	long max_age = age ? (long)json_integer_value(age) : BROKER_SNAPSHOT_MAX_AGE_MS;
	int view = json_is_true(json_object_get(msg, "view"));
	struct snap_waiter *grown;

	if (age && (!json_is_integer(age) || json_integer_value(age) < -1 ||
	            json_integer_value(age) > 86400000)) {
		daemon_refuse(d, c, GM_ERR_INVALID,
		              "max_age_ms must be -1 (any) or 0 to 86400000 milliseconds", NULL);
		return;
	}
	pthread_mutex_lock(&r->mu);
	collect_locked(d);
	if (max_age < 0 || now_ms() - d->snap->taken_ms <= max_age) {
		pthread_mutex_unlock(&r->mu);
		answer(d, c, max_age, view);
		return;
	}
	ask_locked(r);
	pthread_mutex_unlock(&r->mu);
	for (size_t i = 0; i < r->waiter_count; i++)
		if (r->waiters[i].c == c)
			return; /* asked twice: one answer */
	if (r->waiter_count == r->waiter_cap) {
		size_t cap = r->waiter_cap ? r->waiter_cap * 2 : 16;

		grown = realloc(r->waiters, cap * sizeof *grown);
		if (!grown) {
			answer(d, c, max_age, view);
			return;
		}
		r->waiters = grown;
		r->waiter_cap = cap;
	}
	r->waiters[r->waiter_count++] =
	    (struct snap_waiter){c, max_age, monotonic_ms() + BROKER_SNAPSHOT_WAIT_MS, view};
}

void daemon_snapshot_forget(struct daemon *d, struct conn *c)
{
	struct daemon_reader *r = d->reader;

	for (size_t i = 0; r && i < r->waiter_count; i++)
		if (r->waiters[i].c == c) {
			r->waiters[i] = r->waiters[--r->waiter_count];
			return;
		}
}

/* Answer the waiters that a reading now satisfies, or whose time is up;
 * ask again for the others. */
static void answer_waiters(struct daemon *d)
{
	struct daemon_reader *r = d->reader;
	int64_t now = monotonic_ms();
	int64_t age = now_ms() - d->snap->taken_ms;

	for (size_t i = 0; i < r->waiter_count;) {
		struct snap_waiter w = r->waiters[i];

		if (age > w.max_age_ms && w.deadline > now) {
			i++;
			continue;
		}
		r->waiters[i] = r->waiters[--r->waiter_count];
		/* Answered with what there is, its age said. */
		answer(d, w.c, w.max_age_ms, w.view);
	}
	if (r->waiter_count) {
		pthread_mutex_lock(&r->mu);
		ask_locked(r);
		pthread_mutex_unlock(&r->mu);
	}
}

void daemon_reader_ready(struct daemon *d)
{
	struct daemon_reader *r = d->reader;
	uint64_t n;
	int got;

	if (read(r->efd, &n, sizeof n) < 0) {
		/* spurious: nothing to take */
	}
	pthread_mutex_lock(&r->mu);
	got = collect_locked(d);
	pthread_mutex_unlock(&r->mu);
	if (got && d->line_head)
		d->dirty = 1; /* the line may move on the new reading */
	answer_waiters(d);
}

int64_t daemon_reader_due(struct daemon *d)
{
	struct daemon_reader *r = d->reader;
	int64_t next = -1;

	if (!r)
		return -1;
	answer_waiters(d);
	for (size_t i = 0; i < r->waiter_count; i++)
		if (next < 0 || r->waiters[i].deadline < next)
			next = r->waiters[i].deadline;
	return next;
}
