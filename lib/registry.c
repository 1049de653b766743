/*
 * registry.c - leases shared by every process and user of the machine: the
 * state directory and its safety checks, the admin's caps, one attempt
 * (read everything, ask the policy) and the atomic choose-and-lease step
 * with first-come-first-served waiting, and the lease API.  Its parts:
 * registry_read.c (which files to believe), registry_files.c (writing
 * them), registry_wait.c (the wait line), registry_lock.c (the registry
 * lock); registry_impl.h what they share.  See registry.h for the
 * directory's layout and the locking protocol.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "caps.h"
#include "context.h"
#include "lease.h"
#include "parse.h"
#include "pick.h"
#include "line.h"
#include "proctree.h"
#include "record.h"
#include "policy.h"
#include "registry.h"
#include "registry_impl.h"
#include "snapshot.h"
#include "text.h"
#include "transport.h"
#include "util.h"

/* ---- the directory ------------------------------------------------------ */

static enum gm_err check_dir(const char *dir, struct stat *out, char *err, size_t len)
{
	struct stat st;

	if (lstat(dir, &st) < 0)
		return gm_fail(GM_ERR_STATE, err, len, "state directory '%s': %s", dir,
		               strerror(errno));
	if (S_ISLNK(st.st_mode))
		return gm_fail(
		    GM_ERR_STATE, err, len,
		    "state directory '%s' is a symbolic link; refusing it (another user "
		    "could redirect everyone's leases); point GPUMAN_STATE_DIR at a real "
		    "directory",
		    dir);
	if (!S_ISDIR(st.st_mode))
		return gm_fail(GM_ERR_STATE, err, len, "state directory '%s' is not a directory",
		               dir);
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		struct passwd *pw = getpwuid(st.st_uid);

		return gm_fail(GM_ERR_STATE, err, len,
		               "state directory '%s' is owned by user '%s', who could remove "
		               "everyone's leases; for a registry shared by all users an admin "
		               "should run 'install -d -m 1777 /run/gpuman' (see "
		               "contrib/gpuman.tmpfiles.conf), or set GPUMAN_STATE_DIR to a "
		               "directory owned by root or by you",
		               dir, pw ? pw->pw_name : "?");
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
		return gm_fail(GM_ERR_STATE, err, len,
		               "state directory '%s' is writable by others without the sticky bit, "
		               "so anyone could remove your leases; fix it with 'chmod +t %s'",
		               dir, dir);
	*out = st;
	return GM_OK;
}

/* Shared by every user, so world-writable and sticky: each user may add
 * files but only remove their own. */
static enum gm_err make_shared_dir(const char *dir, char *err, size_t len)
{
	if (mkdir(dir, 01777) == 0) {
		if (chmod(dir, 01777) < 0) /* mkdir obeys the umask */
			return gm_fail(GM_ERR_STATE, err, len, "state directory '%s': chmod: %s",
			               dir, strerror(errno));
	} else if (errno != EEXIST) {
		return gm_fail(GM_ERR_STATE, err, len,
		               "cannot create state directory '%s': %s (set GPUMAN_STATE_DIR)", dir,
		               strerror(errno));
	}
	return GM_OK;
}

enum gm_err registry_open(struct registry **out, char *err, size_t len)
{
	const char *env = getenv("GPUMAN_STATE_DIR");
	struct registry *reg;
	struct stat st, fst;
	enum gm_err rc;
	char sock[PATH_MAX];

	*out = NULL;
	reg = calloc(1, sizeof *reg);
	if (!reg)
		return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
	reg->lock_fd = -1;
	reg->held_fd = -1;
	reg->transport = transport_choose(sock, sizeof sock);
	if (reg->transport == &transport_broker) {
		char *slash = strrchr(sock, '/');

		reg->broker = strdup(sock);
		if (!reg->broker) {
			rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
			goto failed;
		}
		/* dir: the socket's, which exists, for callers that watch the
		 * registry for changes (the engine): they then look again on
		 * their own timer, as nothing is written there. */
		if (slash && slash != sock)
			*slash = '\0';
		str_copy(reg->dir, sizeof reg->dir, slash && slash != sock ? sock : "/");
		/* The broker enforces the caps; its clients read the file for
		 * what their own side keeps (max_lease ends run's and the
		 * queue's jobs, status marks leases past it). */
		rc = config_load(&reg->cfg, 0, err, len);
		if (rc != GM_OK)
			goto failed;
		*out = reg;
		return GM_OK;
	}
	if (env && *env)
		snprintf(reg->dir, sizeof reg->dir, "%s", env);
	else if (stat("/run/gpuman", &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(reg->dir, sizeof reg->dir, "/run/gpuman");
	else
		snprintf(reg->dir, sizeof reg->dir, "/tmp/gpuman");
	rc = make_shared_dir(reg->dir, err, len);
	if (rc == GM_OK)
		rc = check_dir(reg->dir, &st, err, len);
	if (rc != GM_OK)
		goto failed;
	/*
	 * The lock is the directory itself: nobody but its owner (root, or
	 * this user) can rename or replace it, unlike a file in it, which its
	 * creator could rename away so that later callers lock another inode.
	 * Read-only, like every flock here: it needs no write access.
	 */
	reg->lock_fd = open(reg->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (reg->lock_fd < 0 || fstat(reg->lock_fd, &fst) < 0) {
		rc = gm_fail(GM_ERR_STATE, err, len, "cannot open state directory '%s': %s",
		             reg->dir, strerror(errno));
		goto failed;
	}
	if (fst.st_dev != st.st_dev || fst.st_ino != st.st_ino) {
		rc = gm_fail(GM_ERR_STATE, err, len,
		             "state directory '%s' was replaced while it was opened; try again",
		             reg->dir);
		goto failed;
	}
	rc = config_load(&reg->cfg, 0, err, len);
	if (rc != GM_OK)
		goto failed;
	*out = reg;
	return GM_OK;
failed:
	registry_close(reg);
	return rc;
}

void registry_close(struct registry *reg)
{
	if (!reg)
		return;
	if (reg->held_fd >= 0 && reg->held_fd != reg->lock_fd)
		close(reg->held_fd);
	if (reg->lock_fd >= 0)
		close(reg->lock_fd);
	config_release(&reg->cfg);
	if (reg->transport && reg->transport->close)
		reg->transport->close(reg);
	free(reg->broker);
	free(reg);
}

/* ---- caps: the admin's limits (caps.h) ---------------------------------- */

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

/* A lease file as the rules (line.h) read it. */
static struct line_lease line_lease_of(const struct lease_info *li)
{
	return (struct line_lease){li->id,
	                           li->uid,
	                           li->user,
	                           li->pid,
	                           li->job_pid,
	                           li->reservation,
	                           li->expires_ms,
	                           li->exclusive,
	                           li->share_mib,
	                           li->gpu_count,
	                           (const char(*)[96])li->uuids,
	                           (const char(*)[96])li->migs};
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
	char self[33];
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
		lw[n] = (struct line_waiter){wi->uid,       wi->user,          wi->pid,    wi->req,
		                             usable[2 * n], usable[2 * n + 1], wi->within, 1};
		n++;
	}
	registry_user_name((unsigned)geteuid(), self, sizeof self);
	lw[n] = (struct line_waiter){(unsigned)geteuid(), self,   getpid(),     req, a->env.usable,
	                             a->env.mig_usable,   within, req->has_wait};
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

		rc = registry_read_scoped(reg, &a->view, &scope, err, len);
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

enum gm_err registry_acquire(struct registry *reg, struct gm_context *ctx,
                             const struct gm_request *req, const struct acquire_opts *opts,
                             struct gm_lease **out, char **explain, char *err, size_t len)
{
	return reg->transport->acquire(reg, ctx, req, opts, out, explain, err, len);
}

enum gm_err registry_read_upto(struct registry *reg, struct registry_view *view, const char *upto,
                               char *err, size_t len)
{
	enum gm_err rc = reg->transport->read(reg, view, upto, err, len);

	if (rc != GM_OK)
		return rc;
	registry_mark_over_limit(reg, view);
	/* Not available here: said in status, not silently skipped. */
	view->gpu_hours_unenforced =
	    config_has_gpu_hours(&reg->cfg) && !(reg->transport->caps & TRANSPORT_GPU_HOURS);
	return GM_OK;
}

/* The files transport's acquire: choose and lease under the registry
 * lock, waiting in the line of tickets (registry.h). */
static enum gm_err files_acquire(struct registry *reg, struct gm_context *ctx,
                                 const struct gm_request *req, const struct acquire_opts *opts,
                                 struct gm_lease **out, char **explain, char *err, size_t len)
{
	struct attempt a;
	char ticket[128] = "";
	struct waiting w = WAITING_INIT(ctx->cancel_fd, reg, ticket);
	int ticket_fd = -1, locked = 0;
	int64_t deadline = req->has_wait && req->wait_ms >= 0 ? monotonic_ms() + req->wait_ms : -1;
	enum gm_err rc;

	*out = NULL;
	if (explain)
		*explain = NULL;
	if (opts && opts->reserve_ms > 0 &&
	    caps_reserve_ok(&reg->cfg, (unsigned)geteuid(), opts->reserve_ms, err, len) < 0)
		return GM_ERR_INVALID;
	memset(&a, 0, sizeof a);
	for (;;) {
		rc = registry_lock(reg, deadline, &w, opts, err, len);
		if (rc != GM_OK)
			goto done;
		locked = 1;
		attempt_release(&a);
		rc = attempt_run(reg, ctx, opts && !ticket[0] ? opts->snapshot : NULL, req,
		                 ticket[0] ? ticket : NULL, &a, err, len);
		if (rc != GM_OK)
			goto done;
		if (a.outcome == POLICY_OK) {
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
			goto done;
		}
		if (!ticket[0]) {
			/* Queue: the ticket's name fixes our place in line. */
			rc = registry_write_ticket(reg, &a, req, opts, ticket, sizeof ticket,
			                           &ticket_fd, err, len);
			if (rc != GM_OK)
				goto done;
			registry_ahead_refresh(&w);
			registry_unlock(reg);
			locked = 0;
			if (opts && opts->on_wait)
				opts->on_wait(opts->on_wait_data, a.why ? a.why : "");
		} else {
			registry_unlock(reg);
			locked = 0;
		}
		rc = registry_wait_for_change(&w, deadline, opts);
		if (rc == GM_ERR_TIMEOUT) {
			gm_fail(rc, err, len, "no GPU met the request within the wait");
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
	/* Our child waiting behind another ticket shares our ticket's lock. */
	registry_waiting_release(&w);
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

enum gm_err registry_release(struct registry *reg, const char *id, char *err, size_t len)
{
	return reg->transport->release_id(reg, id, err, len);
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

int registry_wake_fd(const struct registry *reg)
{
	return reg->transport->wake_fd(reg);
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
    "registry",    0,    files_acquire, registry_files_read, files_release_id, files_release,
    files_wake_fd, NULL,
};

/* ---- the public lease API ----------------------------------------------- */

GM_API enum gm_err gm_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                           const struct gm_request *req, unsigned **indices, size_t *count,
                           char **explain)
{
	return registry_pick(ctx, snap, req, indices, count, NULL, explain);
}

enum gm_err registry_pick(struct gm_context *ctx, const struct gm_snapshot *snap,
                          const struct gm_request *req, unsigned **indices, size_t *count,
                          long *mig_pos, char **explain)
{
	struct registry *reg = NULL;
	struct attempt a;
	enum gm_err rc;

	*indices = NULL;
	*count = 0;
	if (explain)
		*explain = NULL;
	memset(&a, 0, sizeof a);
	rc = registry_open(&reg, NULL, 0);
	if (rc == GM_OK) {
		rc = attempt_run(reg, ctx, snap, req, NULL, &a, NULL, 0);
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
	registry_close(reg);
	return rc;
}

GM_API enum gm_err gm_acquire(struct gm_context *ctx, const struct gm_request *req,
                              struct gm_lease **out, char *errbuf, size_t errlen)
{
	struct registry *reg;
	char *explain = NULL;
	enum gm_err rc;

	*out = NULL;
	if (!ctx || !req)
		return gm_fail(GM_ERR_INVALID, errbuf, errlen, "no context or request");
	rc = registry_open(&reg, errbuf, errlen);
	if (rc != GM_OK)
		return rc;
	rc = registry_acquire(reg, ctx, req, NULL, out, &explain, errbuf, errlen);
	if (rc == GM_ERR_INTERRUPTED) {
		uint64_t count;

		/* consumed: the next gm_acquire waits again */
		if (read(ctx->cancel_fd, &count, sizeof count) < 0)
			count = 0;
	}
	if (explain && *explain && errbuf && errlen) {
		size_t used = strlen(errbuf);

		snprintf(errbuf + used, errlen - used, ":\n%s", explain);
	}
	free(explain);
	registry_close(reg);
	return rc;
}

GM_API void gm_cancel(struct gm_context *ctx)
{
	uint64_t one = 1;

	/* write(2) is async-signal-safe: callable from a handler. */
	if (ctx && ctx->cancel_fd >= 0 && write(ctx->cancel_fd, &one, sizeof one) < 0)
		return;
}

GM_API void gm_lease_release(struct gm_lease *lease)
{
	if (!lease)
		return;
	transport_of_lease(lease)->release(lease);
	registry_lease_free_fields(lease);
}

void lease_detach(struct gm_lease *lease)
{
	if (!lease)
		return;
	if (lease->fd >= 0)
		close(lease->fd);
	registry_lease_free_fields(lease);
}

GM_API const char *gm_lease_id(const struct gm_lease *l)
{
	return l->id;
}
GM_API size_t gm_lease_gpu_count(const struct gm_lease *l)
{
	return l->gpu_count;
}
GM_API unsigned gm_lease_gpu_index(const struct gm_lease *l, size_t i)
{
	return i < l->gpu_count ? l->indices[i] : 0;
}
GM_API const char *gm_lease_gpu_uuid(const struct gm_lease *l, size_t i)
{
	return i < l->gpu_count ? l->uuids[i] : "";
}
GM_API const char *gm_lease_cuda_visible(const struct gm_lease *l)
{
	return l->cuda_visible;
}
GM_API const char *gm_lease_indices(const struct gm_lease *l)
{
	return l->indices_text;
}
GM_API double gm_lease_mem_fraction(const struct gm_lease *l)
{
	return l->mem_fraction;
}
GM_API int gm_lease_fd(const struct gm_lease *l)
{
	return l->fd;
}
