/*
 * registry.c - the daemonless registry as a lease transport (transport.h):
 * leases shared by every process and user of the machine: one attempt
 * (read everything, ask the rules) and the atomic choose-and-lease step
 * with first-come-first-served waiting.  Its parts: registry_dir.c (the
 * state directory and its safety checks), registry_read.c (which files to
 * believe, and the admin's caps on what they hold), registry_holder.c
 * (whether a file's holder lives), registry_files.c (writing them),
 * registry_wait.c (the wait line), registry_lock.c (the registry lock);
 * registry_impl.h what they share.  See registry.h for the
 * directory's layout and the locking protocol.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "caps.h"
#include "context.h"
#include "lease.h"
#include "pick.h"
#include "line.h"
#include "parse.h"
#include "proctree.h"
#include "record.h"
#include "policy.h"
#include "registry.h"
#include "registry_impl.h"
#include "snapshot.h"
#include "transport.h"
#include "util.h"

/* The files transport's open: the state directory (registry_dir.c). */
static enum gm_err files_open(struct registry *reg, const char *sock, char *err, size_t len)
{
	(void)sock;
	return registry_dir_open(reg, err, len);
}

/*
 * A ticket kept between tries (acquire_opts.keep_place): the queue's
 * dispatcher keeps its head job's place in line, as through the broker.
 * Without one, every `run --wait` that came after it was served first, and
 * the dispatcher read the whole line again at each change of the registry
 * (a third of a core while 200 waiters and 40 queued jobs shared 8 GPUs).
 */
struct files_place {
	char *key; /* record_place_key() */
	char name[128];
	int fd; /* holds the ticket's lock */
	char *why;
};

static void place_drop(struct registry *reg)
{
	struct files_place *p = reg->kept;
	char path[PATH_MAX + 130];

	if (!p)
		return;
	snprintf(path, sizeof path, "%s/%s", reg->dir, p->name);
	unlink(path);
	close(p->fd);
	free(p->key);
	free(p->why);
	free(p);
	reg->kept = NULL;
}

/* The place kept for this request, taken out of reg (NULL: none; one kept
 * for another request is given up). */
static struct files_place *place_take(struct registry *reg, const struct gm_request *req,
                                      const struct acquire_opts *opts)
{
	struct files_place *p = reg->kept;
	char *key;

	if (!p)
		return NULL;
	key = record_place_key(req, opts->command);
	if (!key || strcmp(key, p->key)) {
		free(key);
		place_drop(reg);
		return NULL;
	}
	free(key);
	reg->kept = NULL;
	return p;
}

/* Keep the ticket name (held by fd) for the next try; 0 kept, -1 not. */
static int place_keep(struct registry *reg, struct files_place *p, const struct gm_request *req,
                      const struct acquire_opts *opts, const char *name, int fd, const char *why)
{
	if (!p && !(p = calloc(1, sizeof *p)))
		return -1;
	if (!p->key && !(p->key = record_place_key(req, opts->command))) {
		free(p);
		return -1;
	}
	str_copy(p->name, sizeof p->name, name);
	p->fd = fd;
	if (why) {
		free(p->why);
		p->why = strdup(why);
	}
	reg->kept = p;
	return 0;
}

static void files_close(struct registry *reg)
{
	place_drop(reg);
	if (reg->held_fd >= 0 && reg->held_fd != reg->lock_fd)
		close(reg->held_fd);
	if (reg->lock_fd >= 0)
		close(reg->lock_fd);
	reg->held_fd = reg->lock_fd = -1;
}

/* ---- one attempt: read everything, ask the policy ---------------------- */

static void attempt_release(struct attempt *a)
{
	registry_view_release(&a->view);
	if (!a->snap_given)
		gm_snapshot_free(a->snap);
	pick_env_release(&a->env);
	free(a->cand);
	free(a->why);
	policy_result_release(&a->res);
	memset(a, 0, sizeof *a);
}

/*
 * Ask the rules (line.h) about the waiters of a->view whose ticket sorts
 * before `mine` (all of them when mine is NULL), then about this request.
 * *exact: whether the waiters not read, behind those read, could not
 * change its decision -- it did not take a policy run: its own cap keeps
 * it waiting (the grants of those would only add to what its user holds),
 * or every GPU was held back for the waiters read (line.h, rule 4).
 */
static enum gm_err attempt_decide(struct registry *reg, const struct gm_request *req,
                                  const char *mine, struct attempt *a, int *exact)
{
	struct proctree tree = PROCTREE_INIT;
	struct line_input in = {0};
	struct line_lease *ll = NULL;
	struct line_waiter *lw = NULL;
	struct line_decision *out = NULL;
	unsigned char **usable = NULL;
	const char *within = getenv("GPUMAN_RESERVATION");
	size_t n = 0;
	int shares = 0;
	enum gm_err rc = GM_ERR_NOMEM;

	ll = calloc(a->view.lease_count + 1, sizeof *ll);
	lw = calloc(a->view.waiter_count + 2, sizeof *lw);
	out = calloc(a->view.waiter_count + 2, sizeof *out);
	usable = calloc(2 * a->view.waiter_count + 2, sizeof *usable);
	a->cand = calloc(a->snap->gpu_count + 1, 1);
	if (!ll || !lw || !out || !usable || !a->cand)
		goto done;
	for (size_t i = 0; i < a->view.lease_count; i++) {
		ll[i] = line_lease_of(&a->view.leases[i]);
		shares |= !a->view.leases[i].exclusive;
	}
	if (shares && proctree_read(&tree) < 0)
		goto done;
	for (size_t w = 0; w < a->view.waiter_count; w++) {
		const struct waiter_info *wi = &a->view.waiters[w];

		if (mine && strcmp(wi->name, mine) >= 0)
			break;
		if (!wi->req)
			continue;
		usable[2 * n] = record_usable_from(wi->usable, a->snap);
		usable[2 * n + 1] = record_usable_migs_from(wi->usable_migs, a->snap);
		lw[n] = line_waiter_of(wi, usable[2 * n], usable[2 * n + 1], 1, 0);
		n++;
	}
	/* No name: it would only describe this request to waiters behind it,
	 * and there are none (a first getpwuid costs about 60 us). */
	lw[n] = (struct line_waiter){(unsigned)geteuid(), "",     getpid(),      req, a->env.usable,
	                             a->env.mig_usable,   within, req->has_wait, 1};
	in.snap = a->snap;
	in.cfg = &reg->cfg;
	in.now_ms = now_ms();
	in.tree = shares ? &tree : NULL;
	in.leases = ll;
	in.lease_count = a->view.lease_count;
	in.waiters = lw;
	in.waiter_count = n + 1;
	/* No ledger of GPU-hours here (a user's own files are the user's to
	 * delete): status says max_gpu_hours is the broker's. */
	if (line_decide(&in, out) < 0 || line_candidates(&in, n, a->cand) < 0)
		goto done;
	*exact = !out[n].ran;
	a->outcome = out[n].verdict == LINE_GRANT   ? POLICY_OK
	             : out[n].verdict == LINE_NEVER ? POLICY_NEVER
	                                            : POLICY_NOT_NOW;
	a->why = line_explain(a->snap, &out[n], req->count);
	a->res = out[n].res;
	out[n].res = (struct policy_result)POLICY_RESULT_INIT;
	if (a->why)
		rc = GM_OK;
done:
	if (out)
		line_decisions_release(out, n + 1);
	for (size_t i = 0; usable && i < 2 * n; i++)
		free(usable[i]);
	proctree_release(&tree);
	free(ll);
	free(lw);
	free(out);
	free(usable);
	return rc;
}

/*
 * Read NVML (unless given), the leases and the line ahead of `mine` (all
 * of it when mine is NULL: a request that does not wait queues behind
 * everyone), and ask the rules (line.h): the decision is a->res (the
 * policy's answer, when it ran) and a->why (one line, when it did not);
 * a->cand the GPUs it could ever be given.
 *
 * The line is read from its head only until the waiters read hold back
 * every GPU (struct registry_scope): the rules then decide everyone behind
 * them alike, so a hand-off costs what the head of the line costs.  Where
 * the rules grant some of them instead (GPUs freed that they have not
 * taken yet), those hold back less than the read assumed: it is read
 * again past more of the head (8, 16, ...), until the rules' decision
 * shows the rest of the line could not change it.
 */
static enum gm_err attempt_run(struct registry *reg, struct gm_context *ctx,
                               const struct gm_snapshot *given, const struct gm_request *req,
                               const char *mine, struct attempt *a, char *err, size_t len)
{
	enum gm_err rc;

	memset(a, 0, sizeof *a);
	a->outcome = POLICY_NEVER;
	/* NVML first: its GPUs bound how much of the line matters. */
	if (given) {
		a->snap = (struct gm_snapshot *)given;
		a->snap_given = 1;
	} else {
		rc = snapshot_take(ctx, 0, 0, &a->snap, err, len); /* no clocks: placing is hot */
		if (rc != GM_OK)
			return rc;
	}
	if (pick_env_init(&a->env, a->snap) < 0)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	for (size_t past = 0;; past = past ? 2 * past : 8) {
		struct registry_scope scope = {mine, a->snap, 0, past, 0};
		int exact = 0;

		/* gm_pick under the broker reads the broker's view, whole. */
		rc = reg->transport == &transport_files
		         ? registry_read_scoped(reg, &a->view, &scope, err, len)
		         : reg->transport->read(reg, &a->view, NULL, a->snap, err, len);
		if (rc != GM_OK)
			return rc;
		rc = attempt_decide(reg, req, mine, a, &exact);
		if (rc != GM_OK)
			return gm_fail(rc, err, len, "out of memory");
		if (!scope.cut || exact)
			return GM_OK;
		registry_view_release(&a->view);
		free(a->cand);
		free(a->why);
		policy_result_release(&a->res);
		a->cand = NULL;
		a->why = NULL;
		a->outcome = POLICY_NEVER;
	}
}

/* The reservations cap (caps.h), as the broker applies it: counted under
 * the registry lock, so two reserves at once cannot both pass it. */
static enum gm_err reservations_ok(const struct registry_view *view, char *err, size_t len)
{
	unsigned me = (unsigned)geteuid();
	size_t held = 0;
	char name[33];

	for (size_t i = 0; i < view->lease_count; i++)
		held += view->leases[i].reservation && view->leases[i].uid == me;
	if (held < CAPS_RESERVATIONS_PER_USER)
		return GM_OK;
	registry_user_name(me, name, sizeof name);
	return gm_fail(GM_ERR_UNAVAILABLE, err, len,
	               "%s has %zu reservations, the cap (%d a user); release some (gpuman "
	               "release ID)",
	               name, held, CAPS_RESERVATIONS_PER_USER);
}

/* Is anyone queued?  Any ticket's name will do: a dead one costs an
 * arrival only its attempt after queueing instead of before. */
static int line_has_tickets(const struct registry *reg)
{
	DIR *d = opendir(reg->dir);
	struct dirent *de;
	int found = 0;

	while (d && !found && (de = readdir(d)))
		found = registry_starts_with(de->d_name, WAIT_PREFIX);
	if (d)
		closedir(d);
	return found;
}

/*
 * An arrival that will wait where others do queues without reading the
 * line: its ticket needs only what it could ever be given, and its first
 * look ahead (registry_wait_for_change), a read of the line backwards from
 * its ticket, lets it try at once if nobody ahead holds back its GPUs.  A
 * read from the head costs an arrival about a millisecond, as much as
 * the rest of its queueing, and a burst of arrivals slowed every hand-off
 * of the line meanwhile.  Not for a caller that is told why it waits (the
 * queue's dispatcher), nor inside a reservation (whose leases bound what it
 * may take).  1: a holds the candidates; 0: read as before.
 */
static int queue_behind(struct registry *reg, struct gm_context *ctx, const struct gm_request *req,
                        const struct acquire_opts *opts, struct attempt *a)
{
	struct line_waiter me = {(unsigned)geteuid(), "", getpid(), req, NULL, NULL, NULL, 1, 1};
	struct line_input in = {0};
	char err[GM_ERRBUF_SIZE];
	unsigned possible = 0;

	if (!req->has_wait || (opts && (opts->keep_place || opts->snapshot)) ||
	    getenv("GPUMAN_RESERVATION") || !line_has_tickets(reg))
		return 0;
	if (snapshot_take(ctx, 0, 0, &a->snap, err, sizeof err) != GM_OK ||
	    pick_env_init(&a->env, a->snap) < 0 || !(a->cand = calloc(a->snap->gpu_count + 1, 1)))
		goto no;
	me.usable = a->env.usable;
	me.mig_usable = a->env.mig_usable;
	in.snap = a->snap;
	in.cfg = &reg->cfg;
	in.now_ms = now_ms();
	in.waiters = &me;
	in.waiter_count = 1;
	if (line_candidates(&in, 0, a->cand) < 0)
		goto no;
	for (size_t pos = 0; pos < a->snap->gpu_count; pos++)
		possible += a->cand[pos];
	/* Never to be met: the rules say so now, not at the head of the line. */
	if (possible < (req->mig[0] || !req->count ? 1 : req->count))
		goto no;
	a->outcome = POLICY_NOT_NOW;
	a->unread = 1;
	return 1;
no:
	attempt_release(a);
	return 0;
}

/*
 * Does a read without the registry lock already show that the request
 * must wait?  One that will wait then queues without the lock (a ticket's
 * name, not the lock, fixes its place), and arrivals never hold the lock
 * only to learn that they wait.  Its first attempt under the lock comes
 * when nobody ahead holds back its GPUs (registry_wait_for_change), so a
 * GPU freed meanwhile is not missed.  A caller that tries again at every
 * change of the registry (keep_place: the queue's dispatcher, batch) is
 * told "not now" from it: each change once woke it into an attempt under
 * the lock that the line ahead refused -- 600 of the lock's 1,070 holds
 * while 200 `run --wait` and a queue of 40 shared 8 GPUs.  A read
 * without the lock can count a GPU held that was freed while it read; the
 * event that freed it wakes such a caller again.  Reservations are counted
 * under the lock, so they never skip it.  1: wait (a holds the reading);
 * 0: take the lock.
 */
static int wait_unlocked(struct registry *reg, struct gm_context *ctx, const struct gm_request *req,
                         const struct acquire_opts *opts, struct attempt *a, char *err, size_t len)
{
	if (!(req->has_wait || (opts && opts->keep_place)) || (opts && opts->reserve_ms > 0))
		return 0;
	attempt_release(a);
	if (queue_behind(reg, ctx, req, opts, a))
		return 1;
	if (attempt_run(reg, ctx, opts ? opts->snapshot : NULL, req, NULL, a, err, len) != GM_OK)
		return 0; /* said again under the lock */
	return a->outcome == POLICY_NOT_NOW;
}

/* A try that keeps its place (keep_place) and has none yet takes one
 * now, at its first "not now"; without one it is served after those who
 * queue meanwhile.  Its ticket shows RECORD_QUEUED_JOB, not the command. */
static void take_place(struct registry *reg, struct attempt *a, const struct gm_request *req,
                       const struct acquire_opts *opts, char *ticket, size_t len, int *fd)
{
	struct acquire_opts shown = *opts;
	char err[GM_ERRBUF_SIZE];

	shown.command = RECORD_QUEUED_JOB;
	if (registry_write_ticket(reg, a, req, &shown, ticket, len, fd, err, sizeof err) != GM_OK) {
		ticket[0] = '\0';
		*fd = -1;
	}
}

/* The files transport's acquire: choose and lease under the registry
 * lock, waiting in the line of tickets (registry.h). */
static enum gm_err files_acquire(struct registry *reg, struct gm_context *ctx,
                                 const struct gm_request *req, const struct acquire_opts *opts,
                                 struct gm_lease **out, char **explain, char *err, size_t len)
{
	struct attempt a;
	struct gm_snapshot *ours;
	char ticket[128] = "";
	struct waiting w = WAITING_INIT(ctx->cancel_fd, reg, ticket);
	int ticket_fd = -1, locked = 0, told = 0;
	int keep = !req->has_wait && opts && opts->keep_place && opts->reserve_ms <= 0;
	int64_t deadline = req->has_wait && req->wait_ms >= 0 ? monotonic_ms() + req->wait_ms : -1;
	int64_t lock_asked;
	struct files_place *kept = NULL;
	enum gm_err rc;

	*out = NULL;
	if (explain)
		*explain = NULL;
	if (opts && opts->reserve_ms > 0 &&
	    caps_reserve_ok(&reg->cfg, (unsigned)geteuid(), opts->reserve_ms, err, len) < 0)
		return GM_ERR_INVALID;
	memset(&a, 0, sizeof a);
	if (keep && (kept = place_take(reg, req, opts))) {
		/* Still behind a waiter that may take every GPU it could:
		 * it waits on, and nothing else is read (no NVML, no lease). */
		str_copy(ticket, sizeof ticket, kept->name);
		ticket_fd = kept->fd;
		registry_ahead_refresh(&w);
		if (!registry_ahead_room(&w)) {
			rc = gm_fail(GM_ERR_UNAVAILABLE, err, len, "no GPU meets the request now");
			if (explain && kept->why)
				*explain = strdup(kept->why);
			goto done;
		}
	}
	for (;;) {
		int fresh; /* a.snap was read just now, without the lock */

		if (!ticket[0] && wait_unlocked(reg, ctx, req, opts, &a, err, len)) {
			if (!req->has_wait) {
				rc = gm_fail(GM_ERR_UNAVAILABLE, err, len,
				             "no GPU meets the request now");
				if (explain)
					*explain = a.why ? strdup(a.why) : NULL;
				if (keep)
					take_place(reg, &a, req, opts, ticket, sizeof ticket,
					           &ticket_fd);
				goto done;
			}
			rc = registry_write_ticket(reg, &a, req, opts, ticket, sizeof ticket,
			                           &ticket_fd, err, len);
			if (rc != GM_OK)
				goto done;
			registry_ahead_refresh(&w);
			if (opts && opts->on_wait)
				opts->on_wait(
				    opts->on_wait_data,
				    a.why      ? a.why
				    : a.unread ? "behind earlier requests in line (gpuman status "
				                 "lists them)"
				               : "");
			told = 1;
			goto wait;
		}
		fresh = !ticket[0] && a.snap; /* read by wait_unlocked() */
		/* NVML is read before the lock, never under it: a driver call
		 * that takes seconds (persistence off, a GPU falling off the
		 * bus) then delays this request alone, not every gpuman of every
		 * user, which all wait on this lock. */
		if (!fresh && !(opts && opts->snapshot && (!ticket[0] || keep))) {
			attempt_release(&a);
			/* no clocks: placing is hot */
			rc = snapshot_take(ctx, 0, 0, &a.snap, err, len);
			if (rc != GM_OK) {
				a.snap = NULL;
				goto done;
			}
			fresh = 1;
		}
		lock_asked = monotonic_ms();
		/* Let through by a read without the lock, an arrival that will
		 * wait if it must finds the lock held: others are placing now.
		 * It takes its place in line first and the lock as a waiter.
		 * Else the arrivals of a burst that all saw a GPU free before
		 * any took one queue on the lock, and the head of the line,
		 * woken by a release, waits behind them (40 of 200 `run
		 * --wait` did; a release waited 100-225 ms). */
		if (!ticket[0] && fresh && a.outcome == POLICY_OK && req->has_wait &&
		    !(opts && opts->reserve_ms > 0) && !registry_trylock(reg) &&
		    errno == EWOULDBLOCK) {
			rc = registry_write_ticket(reg, &a, req, opts, ticket, sizeof ticket,
			                           &ticket_fd, err, len);
			if (rc != GM_OK)
				goto done;
			registry_ahead_refresh(&w);
			goto wait;
		}
		rc = reg->held_fd >= 0 ? GM_OK : registry_lock(reg, deadline, &w, opts, err, len);
		if (rc != GM_OK)
			goto done;
		locked = 1;
		/* An attempt under the lock places against the reading of NVML
		 * taken just before it (one reading a try, none under the lock,
		 * however long the driver took), or against the caller's.  A
		 * reading older than a wait of seconds for the lock (its holder
		 * was slow or hostile) is not trusted for outside processes
		 * that may have come meanwhile: read again, under the lock. */
		if (monotonic_ms() - lock_asked >= RECHECK_MS)
			fresh = 0;
		ours = fresh && a.snap && !a.snap_given ? a.snap : NULL;
		a.snap = ours ? NULL : a.snap;
		attempt_release(&a);
		rc = attempt_run(reg, ctx,
		                 ours                           ? ours
		                 : opts && (!ticket[0] || keep) ? opts->snapshot
		                                                : NULL,
		                 req, ticket[0] ? ticket : NULL, &a, err, len);
		if (ours)
			a.snap_given = 0; /* ours again: freed with a */
		if (rc != GM_OK)
			goto done;
		if (opts && opts->reserve_ms > 0 && !ticket[0]) {
			rc = reservations_ok(&a.view, err, len);
			if (rc != GM_OK)
				goto done;
		}
		if (a.outcome == POLICY_OK) {
			/* Our turn is taken: the waiter behind us starts waking now
			 * (its thread waits on this lock), and waits on the registry
			 * lock while we publish, instead of after our job's exec
			 * (which closes the ticket's last descriptor). */
			if (ticket_fd >= 0)
				flock(ticket_fd, LOCK_UN);
			rc = registry_publish_lease(reg, &a, req, opts, out, err, len);
			goto done;
		}
		if (a.outcome == POLICY_NEVER || !req->has_wait) {
			rc = a.outcome == POLICY_NEVER ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE;
			gm_fail(rc, err, len, "%s",
			        rc == GM_ERR_NEVER
			            ? "no GPU of this machine can ever meet the request"
			            : "no GPU meets the request now");
			if (explain)
				*explain = a.why ? strdup(a.why) : NULL;
			if (keep && rc == GM_ERR_UNAVAILABLE && !ticket[0]) {
				registry_unlock(reg);
				locked = 0;
				take_place(reg, &a, req, opts, ticket, sizeof ticket, &ticket_fd);
			}
			goto done;
		}
		/* Queue: the ticket's name, not the lock, fixes our place in
		 * line, so it is written after the lock is let go (the first
		 * wait then tries again under it). */
		registry_unlock(reg);
		locked = 0;
		if (!ticket[0]) {
			rc = registry_write_ticket(reg, &a, req, opts, ticket, sizeof ticket,
			                           &ticket_fd, err, len);
			if (rc != GM_OK)
				goto done;
			registry_ahead_refresh(&w); /* a read without the lock */
		}
		if (!told && opts && opts->on_wait)
			opts->on_wait(opts->on_wait_data, a.why ? a.why : "");
		told = 1;
	wait:
		rc = registry_wait_for_change(&w, deadline, opts);
		if (rc == GM_ERR_TIMEOUT) {
			if (a.unread) {
				/* Why, read now: it queued on sight of the line. */
				attempt_release(&a);
				attempt_run(reg, ctx, NULL, req, ticket, &a, err, len);
			}
			{
				char waited[32];

				duration_text(waited, sizeof waited, req->wait_ms);
				gm_fail(rc, err, len, "no GPU met the request within the wait (%s)",
				        waited);
			}
			if (explain)
				*explain = a.why ? strdup(a.why) : NULL;
			goto done;
		}
		if (rc == GM_ERR_INTERRUPTED) {
			gm_fail(rc, err, len, "interrupted while waiting");
			goto done;
		}
		if (rc != GM_OK) {
			gm_fail(rc, err, len, "waiting failed: %s", strerror(errno));
			goto done;
		}
	}
done:
	registry_waiting_release(&w);
	/* Still waiting: the place is kept for the next try. */
	if (keep && rc == GM_ERR_UNAVAILABLE && ticket_fd >= 0 &&
	    place_keep(reg, kept, req, opts, ticket, ticket_fd, a.why) == 0) {
		kept = NULL;
		ticket_fd = -1;
	}
	if (kept) {
		free(kept->key);
		free(kept->why);
		free(kept);
	}
	if (ticket_fd >= 0) {
		char path[PATH_MAX + 130];

		snprintf(path, sizeof path, "%s/%s", reg->dir, ticket);
		unlink(path);
		close(ticket_fd);
	}
	if (locked)
		registry_unlock(reg);
	attempt_release(&a);
	return rc;
}

static enum gm_err files_release_id(struct registry *reg, const char *id, char *err, size_t len)
{
	char name[128], user[33];
	struct stat st;
	int dfd;

	if (!*id || strchr(id, '/') || strlen(id) > 64)
		return gm_fail(GM_ERR_INVALID, err, len, "'%s' is not a reservation id", id);
	snprintf(name, sizeof name, RESV_PREFIX "%s", id);
	dfd = reg->lock_fd;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return gm_fail(GM_ERR_INVALID, err, len,
		               "no reservation '%s' (it may have expired; gpuman status lists "
		               "the live ones)",
		               id);
	registry_user_name(st.st_uid, user, sizeof user);
	/* The sticky directory refuses others anyway; say so plainly first. */
	if (st.st_uid != geteuid() && geteuid() != 0)
		return gm_fail(GM_ERR_INVALID, err, len,
		               "reservation '%s' is %s's: only they (or root) can release it", id,
		               user);
	if (unlinkat(dfd, name, 0) < 0)
		return gm_fail(GM_ERR_STATE, err, len, "cannot release reservation '%s': %s", id,
		               strerror(errno));
	return GM_OK;
}

static void files_release(struct gm_lease *lease)
{
	if (lease->fd < 0)
		return;
	/* Remove first: a waiter woken by the close must not find it. */
	unlink(lease->path);
	close(lease->fd);
	lease->fd = -1;
}

static int files_wake_fd(const struct registry *reg)
{
	(void)reg; /* its waiters watch the directory themselves */
	return -1;
}

const struct lease_transport transport_files = {
    "registry",          0,
    files_open,          files_acquire,
    registry_files_read, files_release_id,
    files_release,       files_wake_fd,
    place_drop,          files_close,
};

/* ---- a choice without a lease (gpuman pick, gm_pick()) ---------------- */

enum gm_err registry_files_pick(struct registry *reg, struct gm_context *ctx,
                                const struct gm_snapshot *snap, const struct gm_request *req,
                                unsigned **indices, size_t *count, long *mig_pos, char **explain,
                                char *errbuf, size_t errlen)
{
	struct attempt a;
	enum gm_err rc;

	*indices = NULL;
	*count = 0;
	if (explain)
		*explain = NULL;
	memset(&a, 0, sizeof a);
	if (reg) {
		rc = attempt_run(reg, ctx, snap, req, NULL, &a, errbuf, errlen);
	} else {
		/* No usable registry (say, an unsafe state directory): choose
		 * from NVML alone rather than not at all; run will refuse. */
		a.snap = (struct gm_snapshot *)snap;
		a.snap_given = 1;
		if (pick_env_init(&a.env, snap) < 0)
			rc = GM_ERR_NOMEM;
		else {
			struct policy_input in = {
			    .snap = snap, .usable = a.env.usable, .mig_usable = a.env.mig_usable};

			rc = policy_choose(&in, req, &a.res) < 0 ? GM_ERR_NOMEM : GM_OK;
			a.outcome = a.res.outcome;
			a.why = pick_explain(snap, &a.res, req->count);
		}
	}
	if (rc != GM_OK)
		goto done;
	if (explain && !(*explain = a.why ? strdup(a.why) : NULL)) {
		rc = GM_ERR_NOMEM;
		goto done;
	}
	if (a.outcome != POLICY_OK) {
		rc = a.outcome == POLICY_NEVER ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE;
		goto done;
	}
	*indices = malloc((a.res.count + 1) * sizeof **indices);
	if (!*indices) {
		rc = GM_ERR_NOMEM;
		goto done;
	}
	for (size_t i = 0; i < a.res.count; i++)
		(*indices)[i] =
		    a.res.mig ? snap->migs[a.res.chosen[i]].gpu : snap->gpus[a.res.chosen[i]].index;
	*count = a.res.count;
	if (mig_pos)
		*mig_pos = a.res.mig && a.res.count ? (long)a.res.chosen[0] : -1;
done:
	attempt_release(&a);
	return rc;
}
