/*
 * sessions.c - login sessions in the fence ([fence] sessions = yes in
 * gpuman.conf): the PAM hook places a user's login session in a cgroup of
 * its own ("session"), whose filter then follows her leases: it opens just
 * the GPUs she holds.
 *
 * Every change is made on the broker's worker (worker.c), in order with
 * the placements.  A filter's change waits for the kernel's cgroup lock,
 * and a move being made holds it through a whole grace period where the
 * hierarchy lacks favordynmods (gpuman-trust(7)); made on the loop, such a
 * change kept every other user's answer waiting behind it.  What a user is
 * told after a change (her reservation granted or released, her session
 * placed) is told once the change is in.
 */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"

/* uid's sessions' filters, to the rule of its leases at the time asked. */
struct follow_job {
	struct work w; /* key: "sessions <uid>" */
	unsigned uid;
	struct fence_rule rule, all;
	int failed;
	char name[96], err[300]; /* the first session that failed */
};

/* A session placed: its cgroup made under the rule, the session moved in. */
struct login_job {
	struct work w; /* key: its cgroup's name */
	struct conn *c;
	int pid;
	unsigned uid;
	uint64_t start;
	struct fence_rule rule, all;
	int rc;
	char err[300];
	struct login_job *next;
};
static struct login_job *logging_in;

/* An answer held until the changes queued before it are made. */
struct answer_job {
	struct work w;
	struct conn *c;
	json_t *answer;
	struct answer_job *next;
};
static struct answer_job *answering;

/* Changes queued and not yet done: an answer waits for them. */
static size_t changes_pending;

static void follow_run(struct work *w)
{
	struct follow_job *j = (struct follow_job *)w;
	const struct fence *f = daemon_fence_mechanism();
	char prefix[48], path[PATH_MAX], err[300];
	DIR *dir;

	snprintf(prefix, sizeof prefix, "session-%u-", j->uid);
	dir = opendir(f->root);
	for (struct dirent *e; dir && (e = readdir(dir));) {
		if (strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		/* A session that ended leaves an empty cgroup: gone now. */
		snprintf(path, sizeof path, "%s/%s", f->root, e->d_name);
		if (rmdir(path) == 0)
			continue;
		if (f->ops->update(f, e->d_name, &j->rule, &j->all, err, sizeof err) < 0 &&
		    !j->failed++) {
			str_copy(j->name, sizeof j->name, e->d_name);
			str_copy(j->err, sizeof j->err, err);
		}
	}
	if (dir)
		closedir(dir);
}

static void follow_done(struct daemon *d, struct work *w)
{
	struct follow_job *j = (struct follow_job *)w;

	(void)d;
	changes_pending--;
	if (j->failed)
		daemon_say("cannot update the fence of %s%s: %s", j->name,
		           j->failed > 1 ? " (and of other sessions of its user)" : "", j->err);
	fence_rule_release(&j->rule);
	fence_rule_release(&j->all);
	free(j);
}

void daemon_fence_sessions(struct daemon *d, unsigned uid, const struct blease *skip)
{
	struct follow_job *j;
	char err[300];

	if (!daemon_fence_mechanism()->ops || !d->cfg.fence_sessions || uid == 0 ||
	    !(j = calloc(1, sizeof *j)))
		return;
	j->rule = (struct fence_rule)FENCE_RULE_INIT;
	j->all = (struct fence_rule)FENCE_RULE_INIT;
	/* The rule now, in the order of the leases' changes. */
	if (daemon_fence_rule(d, NULL, uid, skip, &j->rule, &j->all, err, sizeof err) < 0) {
		daemon_say("cannot update the fence of uid %u's sessions: %s", uid, err);
		fence_rule_release(&j->rule);
		fence_rule_release(&j->all);
		free(j);
		return;
	}
	j->uid = uid;
	snprintf(j->w.key, sizeof j->w.key, "sessions %u", uid);
	j->w.run = follow_run;
	j->w.done = follow_done;
	changes_pending++;
	daemon_work_submit(d, &j->w);
}

/* ---- answers after the changes ------------------------------------------- */

static void answer_run(struct work *w)
{
	(void)w; /* its turn is all it waits for */
}

static void answer_done(struct daemon *d, struct work *w)
{
	struct answer_job *a = (struct answer_job *)w;

	for (struct answer_job **pp = &answering; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	if (a->c)
		conn_finish(d, a->c, a->answer);
	else
		json_decref(a->answer);
	free(a);
}

void daemon_fence_answer(struct daemon *d, struct conn *c, json_t *answer)
{
	struct answer_job *a;

	if (!changes_pending || !(a = calloc(1, sizeof *a))) {
		conn_finish(d, c, answer);
		return;
	}
	a->c = c;
	a->answer = answer;
	str_copy(a->w.key, sizeof a->w.key, "answer");
	a->w.run = answer_run;
	a->w.done = answer_done;
	a->next = answering;
	answering = a;
	daemon_work_submit(d, &a->w);
}

/* ---- a login session placed ------------------------------------------------ */

static void login_run(struct work *w)
{
	struct login_job *j = (struct login_job *)w;
	const struct fence *f = daemon_fence_mechanism();

	j->rc = f->ops->update(f, w->key, &j->rule, &j->all, j->err, sizeof j->err) < 0 ||
	                f->ops->enter(f, w->key, j->pid, j->err, sizeof j->err) < 0
	            ? -1
	            : 0;
}

static void login_done(struct daemon *d, struct work *w)
{
	struct login_job *j = (struct login_job *)w;
	char why[400];

	for (struct login_job **pp = &logging_in; *pp; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	changes_pending--;
	if (w->cancelled || j->rc < 0 || proctree_start(j->pid) != j->start) {
		snprintf(why, sizeof why, "cannot fence login session %d of uid %u: %s", j->pid,
		         j->uid,
		         w->cancelled ? "the lease broker stops"
		         : j->rc < 0  ? j->err
		                      : "it ended");
		daemon_say("%s", why);
		if (j->c)
			daemon_refuse(d, j->c, GM_ERR_STATE, why, NULL);
	} else if (j->c) {
		daemon_fenced(d, j->c, 1, NULL);
	}
	fence_rule_release(&j->rule);
	fence_rule_release(&j->all);
	free(j);
}

/* {"op":"session","pid":N,"uid":U} from the PAM hook (root): the login
 * session N of user U opens only the GPUs of U's leases from now on. */
void daemon_fence_session(struct daemon *d, struct conn *c, json_t *msg)
{
	int pid = (int)json_integer_value(json_object_get(msg, "pid"));
	json_int_t uid = json_integer_value(json_object_get(msg, "uid"));
	const struct fence *f = daemon_fence_mechanism();
	struct login_job *j;
	char err[300] = "", why[400];
	uint64_t start;
	int pidfd;

	if (c->w.uid != 0) {
		daemon_refuse(d, c, GM_ERR_INVALID,
		              "only root (the PAM hook) places login sessions", NULL);
		return;
	}
	daemon_config_fresh(d);
	if (!d->cfg.fence_sessions) {
		daemon_fenced(
		    d, c, 0,
		    "login sessions are not fenced ([fence] sessions = yes in gpuman.conf)");
		return;
	}
	if (!f->ops || uid <= 0 || uid > 0xfffffffe || pid <= 1) {
		daemon_fenced(d, c, 0, !f->ops ? f->why : "root's sessions are not fenced");
		return;
	}
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	start = proctree_start(pid);
	if (pidfd >= 0)
		close(pidfd);
	j = calloc(1, sizeof *j);
	if (j) {
		j->rule = (struct fence_rule)FENCE_RULE_INIT;
		j->all = (struct fence_rule)FENCE_RULE_INIT;
	}
	if (pidfd < 0 || !start || !j ||
	    daemon_fence_rule(d, NULL, (unsigned)uid, NULL, &j->rule, &j->all, err, sizeof err) <
	        0) {
		snprintf(why, sizeof why, "cannot fence login session %d of uid %u: %s", pid,
		         (unsigned)uid,
		         !j       ? "out of memory"
		         : err[0] ? err
		                  : "it ended");
		daemon_say("%s", why);
		daemon_refuse(d, c, GM_ERR_STATE, why, NULL);
		if (j) {
			fence_rule_release(&j->rule);
			fence_rule_release(&j->all);
		}
		free(j);
		return;
	}
	j->c = c;
	j->pid = pid;
	j->uid = (unsigned)uid;
	j->start = start;
	snprintf(j->w.key, sizeof j->w.key, "session-%u-%d", (unsigned)uid, pid);
	j->w.run = login_run;
	j->w.done = login_done;
	j->next = logging_in;
	logging_in = j;
	changes_pending++;
	daemon_work_submit(d, &j->w);
}

void daemon_sessions_forget(struct conn *c)
{
	for (struct login_job *j = logging_in; j; j = j->next)
		if (j->c == c)
			j->c = NULL;
	for (struct answer_job *a = answering; a; a = a->next)
		if (a->c == c) {
			a->c = NULL;
			json_decref(a->answer);
			a->answer = NULL;
		}
}
