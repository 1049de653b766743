/*
 * registry_read.c - reading the registry: each lease and ticket file whose
 * holder still holds its lock, and which of them to believe (the uid a file
 * names is its owner's; its holder is a live, running process of that owner,
 * as registry_holder.c finds; a ticket does not claim to be older than it
 * is), and the admin's caps on what they hold.  See registry.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "caps.h"
#include "lease.h"
#include "parse.h"
#include "record.h"
#include "registry.h"
#include "snapshot.h"
#include "text.h"
#include "util.h"
#include "registry_impl.h"

/* ---- reading leases and tickets ---------------------------------------- */

/*
 * Open a lease or ticket and tell whether its holder lives: the holder keeps
 * an exclusive flock, so our shared try-lock fails exactly while it lives.
 * Returns 1 (alive, *text malloc'd, *st filled), 0 (dead or gone; removed
 * where permitted) or -1 (out of memory).
 */
static int read_live_file(int dirfd, const char *name, char **text, struct stat *st)
{
	ssize_t n, got = 0;
	char *buf;
	int fd, rc = 0;

	*text = NULL;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode))
		goto done;
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		/* The sticky directory lets only its owner and root remove it. */
		if (st->st_uid == geteuid() || geteuid() == 0)
			unlinkat(dirfd, name, 0);
		goto done;
	}
	buf = malloc(MAX_FILE_BYTES + 1);
	if (!buf) {
		rc = -1;
		goto done;
	}
	while (got < MAX_FILE_BYTES && (n = read(fd, buf + got, MAX_FILE_BYTES - got)) > 0)
		got += n;
	buf[got] = '\0';
	*text = buf;
	rc = 1;
done:
	close(fd);
	return rc;
}

/* ---- who may be believed (their holders: registry_holder.c) ---------- */

/* The uid a file claims must be its owner's: nobody writes in another's
 * name, and a file without one (an older gpuman's) is its owner's too. */
static int uid_matches(json_t *o, const struct stat *st)
{
	json_t *u = json_object_get(o, "uid");

	return !u || (json_is_integer(u) && json_integer_value(u) == (json_int_t)st->st_uid);
}

static json_int_t file_pidns(json_t *o)
{
	json_t *ns = json_object_get(o, "pidns");

	return ns ? json_integer_value(ns) : registry_own_pidns();
}

/*
 * A ticket names the instant it was queued; one whose name claims a time
 * well before the file existed (its ctime, which nobody can set back) is
 * trying to jump the line.
 */
#define TICKET_SKEW_NS (30LL * 1000000000LL)

static int ticket_time_honest(const char *name, const struct stat *st)
{
	long long claimed;
	int64_t ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;

	if (sscanf(name, WAIT_PREFIX "%20lld.", &claimed) != 1)
		return 0;
	return claimed >= ctime_ns - TICKET_SKEW_NS;
}

/* resv: read from a resv.<id> file, which alone may claim to be a reservation. */
static int parse_lease(const char *text, const struct stat *st, struct lease_info *li, int resv)
{
	json_t *o = json_loads(text, 0, NULL);

	if (!o)
		return -1;
	memset(li, 0, sizeof *li);
	li->pid = (int)json_integer_value(json_object_get(o, "pid"));
	li->job_pid = (int)json_integer_value(json_object_get(o, "job_pid"));
	li->pid_start = (unsigned long long)json_integer_value(json_object_get(o, "pid_start"));
	li->job_start = (unsigned long long)json_integer_value(json_object_get(o, "job_start"));
	li->reservation = json_is_true(json_object_get(o, "reservation"));
	li->expires_ms = json_integer_value(json_object_get(o, "expires_ms"));
	/* Alive while its holder or its job lives (the job keeps the lease's
	 * descriptor when gpuman run is killed), never on the lock alone: a
	 * dead lease that someone else flocks is revived for nobody.  A
	 * reservation lives by its file alone (parse_reservation). */
	if (!uid_matches(o, st) || li->reservation != resv ||
	    (resv && !json_object_get(o, "uid")) ||
	    (!li->reservation &&
	     registry_holder_state(li->pid, st->st_uid, li->pid_start, file_pidns(o)) ==
	         REGISTRY_HOLDER_GONE &&
	     registry_holder_state(li->job_pid, st->st_uid, li->job_start, file_pidns(o)) ==
	         REGISTRY_HOLDER_GONE)) {
		json_decref(o);
		return 1;
	}
	if (record_lease_parse(o, li) < 0) {
		json_decref(o);
		return -1;
	}
	/* The file's owner names its user, never what it says. */
	li->uid = st->st_uid;
	registry_user_name(st->st_uid, li->user, sizeof li->user);
	json_decref(o);
	return 0;
}

/*
 * A reservation (resv.<id>): no process holds it, so it is believed on the
 * file alone -- its owner's, not writable by others, naming its owner's uid
 * and, in its id, its own name (a hard link under another name is not it)
 * -- until it expires.  With an admin's max_reserve, a file
 * its owner edits by hand counts no longer than that after the edit.
 * Returns 0 (live), 1 (expired or untrusted), -1 (out of memory).
 */
static int parse_reservation(const struct registry *reg, int dirfd, const char *name,
                             struct lease_info *li)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), rc;
	int64_t now = now_ms(), limit, ctime_ms;
	char buf[8192], from[96];
	struct stat st;
	ssize_t n;

	if (fd < 0)
		return 1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & (S_IWGRP | S_IWOTH)) ||
	    (n = read(fd, buf, sizeof buf - 1)) <= 0) {
		close(fd);
		return 1;
	}
	close(fd);
	buf[n] = '\0';
	rc = parse_lease(buf, &st, li, 1);
	if (rc != 0)
		return rc;
	limit = config_max_reserve_ms(&reg->cfg, li->uid, from, sizeof from);
	ctime_ms = (int64_t)st.st_ctim.tv_sec * 1000 + st.st_ctim.tv_nsec / 1000000;
	if (!li->reservation || strcmp(li->id, name + strlen(RESV_PREFIX)) ||
	    li->expires_ms <= now || (limit && ctime_ms + limit <= now)) {
		if (li->reservation && li->expires_ms <= now)
			unlinkat(dirfd, name, 0); /* EPERM for others': left to them */
		free(li->uuids);
		free(li->indices);
		free(li->migs);
		return 1;
	}
	return 0;
}

/* A ticket that does not say what the rules place it by (record.h), from
 * an older gpuman, asks for one GPU among its candidates. */
static int waiter_request_old(struct waiter_info *wi)
{
	char err[GM_ERRBUF_SIZE];

	if (wi->cand_count && (wi->req = gm_request_new())) {
		char *only = calloc(wi->cand_count, sizeof wi->cand[0]);

		for (size_t i = 0; only && i < wi->cand_count; i++)
			sprintf(only + strlen(only), "%s%s", i ? "," : "", wi->cand[i]);
		if (!only || gm_request_set(wi->req, "only", only, err, sizeof err) != GM_OK) {
			gm_request_free(wi->req);
			wi->req = NULL;
		}
		free(only);
	}
	return wi->req ? 0 : -1;
}

static int parse_waiter(const char *name, const char *text, const struct stat *st,
                        struct waiter_info *wi)
{
	json_t *o = json_loads(text, 0, NULL);
	enum registry_holder h;
	int rc;

	if (!o)
		return -1;
	/* The one waiter record (record.h): its "uid", "user", "name" and
	 * "limit" are the file's word, which the file's owner, name and our
	 * own reading of the caps replace. */
	rc = record_waiter_parse(o, wi);
	if (rc < 0) {
		record_waiter_release(wi);
		json_decref(o);
		return -1;
	}
	/* A stopped waiter would hold its GPUs back from everyone behind it
	 * while taking none: it keeps its place, and counts again once it runs. */
	h = registry_holder_state(wi->pid, st->st_uid, wi->pid_start, file_pidns(o));
	if (rc > 0 || !uid_matches(o, st) || h == REGISTRY_HOLDER_GONE ||
	    h == REGISTRY_HOLDER_STOPPED || !ticket_time_honest(name, st) ||
	    (!wi->req && waiter_request_old(wi) < 0)) {
		record_waiter_release(wi);
		json_decref(o);
		return 1;
	}
	str_copy(wi->name, sizeof wi->name, name);
	wi->uid = st->st_uid;
	registry_user_name(st->st_uid, wi->user, sizeof wi->user);
	wi->limit[0] = '\0';
	json_decref(o);
	return 0;
}

static int waiter_cmp(const void *a, const void *b)
{
	return strcmp(((const struct waiter_info *)a)->name, ((const struct waiter_info *)b)->name);
}

int registry_starts_with(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* Remove a crashed creator's temporary file, never a fresh one. */
static void clean_tmp(int dirfd, const char *name)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (int64_t)st.st_mtime * 1000 + TMP_STALE_MS < now_ms())
		unlinkat(dirfd, name, 0);
}

/*
 * One user may create as many files as the file system has inodes (the
 * directory is everyone's), and opening, locking and closing each one
 * costs several system calls.  Past this many lease and ticket files
 * opened in one read, a reader believes only those whose inode the kernel lists as flock'd: a
 * dead file then costs its name in the listing and nothing more.
 */
#define FLOOD_OPENS 256
/* Reservation files opened per owner in one read: twice the cap (caps.h),
 * room for expired ones not yet removed.  Past it a user's further files
 * cost their name and a stat each: a flood of them slows nobody else much. */
#define RESV_OPENS_PER_USER (2 * CAPS_RESERVATIONS_PER_USER)
/* /proc/locks shows every lock only to a reader in the initial pid
 * namespace (its inode is fixed); elsewhere a live lease's lock may be
 * missing from it, and each file is opened as usual. */
#define INIT_PIDNS_INO 4026531836LL
/* Crash debris (.tmp.*) looked at per read; the rest waits for the next. */
#define TMP_CLEAN_MAX 16

/* Reservation files opened so far in a read, per owner. */
struct resv_owners {
	struct {
		unsigned uid;
		size_t opened;
	} * by;
	size_t count;
};

/* May another reservation file of uid be opened in this read? */
static int resv_may_open(struct resv_owners *o, unsigned uid)
{
	size_t i = 0;

	while (i < o->count && o->by[i].uid != uid)
		i++;
	if (i == o->count) {
		void *grown = realloc(o->by, (o->count + 1) * sizeof *o->by);

		if (!grown)
			return 0;
		o->by = grown;
		o->by[o->count].uid = uid;
		o->by[o->count++].opened = 0;
	}
	return o->by[i].opened++ < RESV_OPENS_PER_USER;
}

/* The inodes of one file system that someone holds an flock on. */
struct flocked {
	int state;     /* 0 not loaded, 1 loaded, -1 cannot tell (open each file) */
	ino_t *inodes; /* sorted */
	size_t count;
};

static int ino_cmp(const void *a, const void *b)
{
	ino_t x = *(const ino_t *)a, y = *(const ino_t *)b;

	return x < y ? -1 : x > y;
}

static void flocked_load(struct flocked *fl, dev_t dev)
{
	char line[256];
	size_t cap = 0;
	FILE *f;

	fl->state = -1;
	if (registry_own_pidns() != INIT_PIDNS_INO || !(f = fopen("/proc/locks", "re")))
		return;
	while (fgets(line, sizeof line, f)) {
		unsigned long long ino;
		unsigned maj, min;
		char kind[16];

		/* "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; a line
		 * with "->" is a process waiting for the lock, not holding it */
		if (strstr(line, "->") ||
		    sscanf(line, "%*d: %15s %*s %*s %*d %x:%x:%llu", kind, &maj, &min, &ino) != 4 ||
		    strcmp(kind, "FLOCK") || maj != major(dev) || min != minor(dev))
			continue;
		if (fl->count == cap) {
			ino_t *grown =
			    realloc(fl->inodes, (cap = cap ? cap * 2 : 256) * sizeof *grown);

			if (!grown) {
				fclose(f);
				return;
			}
			fl->inodes = grown;
		}
		fl->inodes[fl->count++] = (ino_t)ino;
	}
	fclose(f);
	if (fl->count)
		qsort(fl->inodes, fl->count, sizeof *fl->inodes, ino_cmp);
	fl->state = 1;
}

/* Nobody holds a lock on it: a dead lease or ticket, known without opening it. */
static int flocked_unheld(const struct flocked *fl, ino_t ino)
{
	return fl->state == 1 &&
	       !(fl->count && bsearch(&ino, fl->inodes, fl->count, sizeof ino, ino_cmp));
}

/* Read the lease file name into view: 0 (added or not believed), -1 out of memory. */
static int read_lease(int dirfd, const char *name, struct registry_view *view)
{
	struct lease_info *l;
	struct stat st;
	char *text;
	int live = read_live_file(dirfd, name, &text, &st);

	if (live <= 0)
		return live;
	l = realloc(view->leases, (view->lease_count + 1) * sizeof *l);
	if (!l) {
		free(text);
		return -1;
	}
	view->leases = l;
	if (parse_lease(text, &st, &l[view->lease_count], 0) == 0) /* 1: untrusted */
		view->lease_count++;
	free(text);
	return 0;
}

/* Read the ticket name into view: 1 added, 0 dead or not believed, -1 out of memory. */
static int read_ticket(int dirfd, const char *name, struct registry_view *view)
{
	struct waiter_info *w;
	struct stat st;
	char *text;
	int live = read_live_file(dirfd, name, &text, &st), rc;

	if (live <= 0)
		return live;
	w = realloc(view->waiters, (view->waiter_count + 1) * sizeof *w);
	if (!w) {
		free(text);
		return -1;
	}
	view->waiters = w;
	rc = parse_waiter(name, text, &st, &w[view->waiter_count]);
	free(text);
	if (rc == 0)
		view->waiter_count++;
	return rc < 0 ? -1 : rc == 0;
}

struct ticket_name {
	char name[128];
	ino_t ino;
};

static int name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ticket_name *)a)->name, ((const struct ticket_name *)b)->name);
}

/* GPUs that the waiters read so far hold back, until all of them are. */
struct cover {
	const char **uuids;
	char *held;
	size_t count, left;
};

static int cover_init(struct cover *c, size_t count)
{
	c->uuids = calloc(count + 1, sizeof *c->uuids);
	c->held = calloc(count + 1, 1);
	c->count = c->left = count;
	return c->uuids && c->held ? 0 : -1;
}

/* May wi take any of the GPUs in question? */
static int cover_overlaps(const struct cover *c, const struct waiter_info *wi)
{
	for (size_t k = 0; k < wi->cand_count; k++)
		for (size_t g = 0; g < c->count; g++)
			if (!strcmp(c->uuids[g], wi->cand[k]))
				return 1;
	return 0;
}

/* wi holds back its candidates: are all the GPUs held back now? */
static int cover_add(struct cover *c, const struct waiter_info *wi)
{
	for (size_t k = 0; k < wi->cand_count; k++)
		for (size_t g = 0; g < c->count; g++)
			if (!c->held[g] && !strcmp(c->uuids[g], wi->cand[k])) {
				c->held[g] = 1;
				c->left--;
			}
	return c->left == 0;
}

/*
 * Read the tickets, in line order, as far as the scope needs: a waiter is
 * held back only by the uncapped waiters ahead of it that may take its
 * GPUs, and once those read hold back every GPU in question, the rest of
 * the line changes nothing -- so a hand-off reads what the head of the
 * line holds, however long the line.
 */
static enum gm_err read_tickets(struct registry *reg, int dirfd, struct ticket_name *names,
                                size_t count, struct registry_scope *scope,
                                struct registry_view *view, struct flocked *fl, dev_t dev,
                                size_t *opens)
{
	int nearest = scope && scope->nearest;
	const struct gm_snapshot *snap = scope ? scope->cover : NULL;
	struct cover c = {NULL, NULL, 0, 0};
	enum gm_err rc = GM_OK;
	int covering = 0, passed_nearest = 0;
	size_t k, past = scope ? scope->past : 0;

	if (count > 1)
		qsort(names, count, sizeof *names, name_cmp);
	if (snap && !nearest) {
		if (cover_init(&c, snap->gpu_count) < 0)
			return GM_ERR_NOMEM;
		for (size_t g = 0; g < snap->gpu_count; g++)
			c.uuids[g] = snap->gpus[g].uuid;
		covering = 1;
	}
	for (k = 0; k < count && !(covering && c.left == 0); k++) {
		size_t i = nearest ? count - 1 - k : k;
		const struct waiter_info *wi;
		int got;

		if (++*opens > FLOOD_OPENS && !fl->state)
			flocked_load(fl, dev);
		if (flocked_unheld(fl, names[i].ino))
			continue;
		got = read_ticket(dirfd, names[i].name, view);
		if (got < 0) {
			rc = GM_ERR_NOMEM;
			break;
		}
		if (!got)
			continue;
		wi = &view->waiters[view->waiter_count - 1];
		if (nearest && scope->upto && !strcmp(wi->name, scope->upto)) {
			/* Our own ticket: the GPUs in question are ours. */
			if (cover_init(&c, wi->cand_count) < 0) {
				rc = GM_ERR_NOMEM;
				break;
			}
			for (size_t g = 0; g < wi->cand_count; g++)
				c.uuids[g] = wi->cand[g];
			covering = 1;
			continue;
		}
		/* Its own user's cap keeps it waiting: it holds nothing back
		 * (line.h, rule 2: caps_over on what its user's leases hold).
		 * The rules also count this pass's grants, which attempt_run
		 * checks for, and leave out the reservation a waiter asks
		 * inside: such a waiter found capped here only makes the read
		 * go further. */
		if (!covering || registry_waiter_capped(reg, view, wi))
			continue;
		/* Backwards, the nearest waiter that may take our GPUs does not
		 * count: those beyond it must hold them back without it, so that
		 * the caller can wait behind one of them, and a stop of the
		 * nearest (which then holds nothing back) cannot leave it
		 * waiting for nothing. */
		if (nearest && !passed_nearest) {
			if (cover_overlaps(&c, wi)) {
				passed_nearest = 1;
				continue;
			}
		}
		/* Forwards, the first `past` (the rules may grant them). */
		if (!nearest && past) {
			past--;
			continue;
		}
		cover_add(&c, wi);
	}
	if (scope && rc == GM_OK && k < count)
		scope->cut = 1;
	free(c.uuids);
	free(c.held);
	return rc;
}

/*
 * The files transport's read, only as much of the line as scope says
 * (registry_impl.h).  Leases are read whole, the line in name order.
 */
enum gm_err registry_read_scoped(struct registry *reg, struct registry_view *view,
                                 struct registry_scope *scope, char *err, size_t len)
{
	const char *upto = scope ? scope->upto : NULL;
	/* Backwards, the leases matter only to the admin's max_gpus (whose
	 * waiters hold nothing back): without one, a waiter's look at the
	 * line ahead opens no lease. */
	int no_leases = scope && scope->nearest && !config_has_max_gpus(&reg->cfg);
	struct flocked fl = {0, NULL, 0};
	struct resv_owners owners = {NULL, 0};
	struct ticket_name *tickets = NULL;
	size_t nt = 0, cap = 0, opens = 0, tmps = 0;
	struct dirent *de;
	struct stat dst;
	enum gm_err rc = GM_OK;
	DIR *d;

	*view = (struct registry_view)REGISTRY_VIEW_INIT;
	d = opendir(reg->dir);
	if (!d)
		return gm_fail(GM_ERR_STATE, err, len, "cannot read state directory '%s': %s",
		               reg->dir, strerror(errno));
	if (fstat(dirfd(d), &dst) < 0)
		fl.state = -1;
	while (rc == GM_OK && (de = readdir(d))) {
		const char *name = de->d_name;
		int is_lease = registry_starts_with(name, LEASE_PREFIX);
		int is_wait = registry_starts_with(name, WAIT_PREFIX);

		if (registry_starts_with(name, TMP_PREFIX)) {
			if (tmps++ < TMP_CLEAN_MAX)
				clean_tmp(dirfd(d), name);
			continue;
		}
		if (no_leases && (registry_starts_with(name, RESV_PREFIX) ||
		                  registry_starts_with(name, LEASE_PREFIX)))
			continue;
		if (registry_starts_with(name, RESV_PREFIX)) {
			struct stat rs;
			struct lease_info *l;

			if (fstatat(dirfd(d), name, &rs, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !resv_may_open(&owners, (unsigned)rs.st_uid))
				continue;
			l = realloc(view->leases, (view->lease_count + 1) * sizeof *l);
			int live;

			if (!l) {
				rc = GM_ERR_NOMEM;
				break;
			}
			view->leases = l;
			live = parse_reservation(reg, dirfd(d), name, &l[view->lease_count]);
			if (live < 0)
				rc = GM_ERR_NOMEM;
			view->lease_count += live == 0;
			continue;
		}
		if ((!is_lease && !is_wait) || (is_wait && upto && strcmp(name, upto) > 0))
			continue;
		if (is_lease) {
			if (++opens > FLOOD_OPENS && !fl.state)
				flocked_load(&fl, dst.st_dev);
			if (!flocked_unheld(&fl, de->d_ino) && read_lease(dirfd(d), name, view) < 0)
				rc = GM_ERR_NOMEM;
			continue;
		}
		if (strlen(name) >= sizeof tickets->name)
			continue; /* no name of ours is this long */
		if (nt == cap) {
			struct ticket_name *grown =
			    realloc(tickets, (cap = cap ? cap * 2 : 64) * sizeof *grown);

			if (!grown) {
				rc = GM_ERR_NOMEM;
				break;
			}
			tickets = grown;
		}
		memcpy(tickets[nt].name, name, strlen(name) + 1);
		tickets[nt++].ino = de->d_ino;
	}
	/* The leases first: whether a waiter's cap keeps it waiting depends
	 * on what its user holds. */
	if (rc == GM_OK)
		rc = read_tickets(reg, dirfd(d), tickets, nt, scope, view, &fl, dst.st_dev, &opens);
	closedir(d);
	free(tickets);
	free(fl.inodes);
	free(owners.by);
	if (view->waiter_count > 1)
		qsort(view->waiters, view->waiter_count, sizeof *view->waiters, waiter_cmp);
	for (size_t i = 0; i < view->waiter_count; i++) {
		struct waiter_info *wi = &view->waiters[i];

		registry_over_cap(reg, view, wi->uid, wi->req ? wi->req->count : 1, wi->limit,
		                  sizeof wi->limit);
	}
	if (rc != GM_OK) {
		registry_view_release(view);
		return gm_fail(rc, err, len, "out of memory");
	}
	str_copy(view->placement, sizeof view->placement,
	         "no lease broker: the daemonless registry cannot fence jobs");
	return GM_OK;
}

/* ---- caps: the admin's limits (caps.h), on what a read found --------- */

/* GPUs that uid's live leases hold. */
static unsigned held_by(const struct registry_view *view, unsigned uid)
{
	unsigned held = 0;

	for (size_t i = 0; i < view->lease_count; i++)
		if (view->leases[i].uid == uid)
			held += (unsigned)view->leases[i].gpu_count;
	return held;
}

/* Would count more GPUs take uid beyond its cap?  caps_over(). */
int registry_over_cap(const struct registry *reg, const struct registry_view *view, unsigned uid,
                      unsigned count, char *why, size_t len)
{
	return caps_over(&reg->cfg, uid, held_by(view, uid), count, why, len);
}

/* A waiter that its own user's cap keeps waiting holds nothing back from
 * the users behind it: first come, first served within what each may have. */
int registry_waiter_capped(const struct registry *reg, const struct registry_view *view,
                           const struct waiter_info *wi)
{
	return registry_over_cap(reg, view, wi->uid, wi->req ? wi->req->count : 1, NULL, 0) != 0;
}

/* The files transport's read (transport.h): the line up to upto, whole. */
enum gm_err registry_files_read(struct registry *reg, struct registry_view *view, const char *upto,
                                const struct gm_snapshot *with, char *err, size_t len)
{
	struct registry_scope scope = {upto, NULL, 0, 0, 0};

	(void)with; /* NVML's readings carry no leases */
	return registry_read_scoped(reg, view, &scope, err, len);
}
