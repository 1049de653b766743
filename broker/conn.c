/*
 * conn.c - the broker's connections (main.c): accepting them,
 * their framed JSON replies and the requests they make (acquire, job,
 * release, view), and dropping the silent ones.  The protocol is in
 * lib/broker_wire.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"

/* ---- output -------------------------------------------------------------- */

/* Send buf[*off..len) while the socket takes it: 1 when all is sent, 0
 * when the socket is full, -1 when the client is gone. */
static int send_some(int fd, const char *buf, size_t len, size_t *off)
{
	while (*off < len) {
		ssize_t n = send(fd, buf + *off, len - *off, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n < 0)
			return -1;
		*off += (size_t)n;
	}
	return 1;
}

void conn_flush(struct daemon *d, struct conn *c)
{
	int rc = send_some(c->fd, c->out, c->out_len, &c->out_off);

	if (rc == 1 && c->shared)
		rc = send_some(c->fd, c->shared->data, c->shared->len, &c->shared_off);
	if (rc == 0) {
		struct epoll_event ev = {EPOLLIN | EPOLLOUT | EPOLLRDHUP, {.ptr = c}};

		epoll_ctl(d->epfd, EPOLL_CTL_MOD, c->fd, &ev);
		return;
	}
	/* all sent, or the client is gone: drop the rest */
	d->out_total -= c->out_len;
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = 0;
	shared_text_put(c->shared);
	c->shared = NULL;
	c->shared_off = 0;
	if (c->state == CONN_CLOSING) {
		conn_close(d, c);
		return;
	}
	{
		struct epoll_event ev = {EPOLLIN | EPOLLRDHUP, {.ptr = c}};

		epoll_ctl(d->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	}
}

/* Queue msg's line for c.  Returns its length, or 0 when the client is to
 * be dropped (it does not read). */
static size_t conn_queue(struct daemon *d, struct conn *c, json_t *msg)
{
	char *text;
	size_t n;
	char *grown;

	json_object_set_new(msg, "v", json_integer(BROKER_VERSION));
	text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!text)
		return -1;
	n = strlen(text);
	if (c->out_len + n + 1 > MAX_OUTPUT_BYTES) {
		free(text);
		return 0;
	}
	grown = realloc(c->out, c->out_len + n + 1);
	if (!grown) {
		free(text);
		return 0;
	}
	c->out = grown;
	memcpy(c->out + c->out_len, text, n);
	c->out[c->out_len + n] = '\n';
	c->out_len += n + 1;
	d->out_total += n + 1;
	free(text);
	return n + 1;
}

int conn_send(struct daemon *d, struct conn *c, json_t *msg)
{
	size_t n = conn_queue(d, c, msg);

	if (!n)
		return -1;
	if (c->out_off == 0 && c->out_len == n && !c->shared)
		conn_flush(d, c);
	return 0;
}

void conn_finish_with(struct daemon *d, struct conn *c, json_t *msg, struct shared_text *tail)
{
	if (c->dead) {
		json_decref(msg);
		shared_text_put(tail);
		return;
	}
	c->state = CONN_CLOSING;
	shutdown(c->fd, SHUT_RD);
	if (!tail) {
		if (conn_send(d, c, msg) < 0 || !c->out)
			conn_close(d, c);
		return;
	}
	/* A closing connection is sent nothing else: tail goes after msg. */
	if (!conn_queue(d, c, msg)) {
		shared_text_put(tail);
		conn_close(d, c);
		return;
	}
	c->shared = tail;
	c->shared_off = 0;
	conn_flush(d, c);
}

void conn_finish(struct daemon *d, struct conn *c, json_t *msg)
{
	conn_finish_with(d, c, msg, NULL);
}

void daemon_refuse(struct daemon *d, struct conn *c, enum gm_err code, const char *error,
                   const char *explain)
{
	json_t *m = json_object();

	json_object_set_new(m, "op", json_string("refused"));
	json_object_set_new(m, "code", json_integer(code));
	json_object_set_new(m, "error", json_string(error));
	if (explain)
		json_object_set_new(m, "explain", json_string(explain));
	conn_finish(d, c, m);
}

/* ---- connections -------------------------------------------------------- */

void daemon_line_remove(struct daemon *d, struct conn *c)
{
	if (!c->in_line)
		return;
	c->in_line = 0;
	d->gen++;
	if (c->reserve_ms > 0) {
		struct user_slot *u = daemon_user(d, c->w.uid);

		if (u)
			u->reserve_waiting--;
		d->reserve_waiting--;
	}
	if (c->lprev)
		c->lprev->lnext = c->lnext;
	else
		d->line_head = c->lnext;
	if (c->lnext)
		c->lnext->lprev = c->lprev;
	else
		d->line_tail = c->lprev;
	c->lprev = c->lnext = NULL;
	d->line_len--;
	d->dirty = 1;
	daemon_state_unplace(d, c); /* its place leaves the state file */
}

void conn_free(struct conn *c)
{
	shared_text_put(c->shared);
	free(c->out);
	free(c->pend);
	free(c->place_record);
	record_waiter_release(&c->w);
	free(c);
}

void conn_close(struct daemon *d, struct conn *c)
{
	if (c->dead)
		return;
	daemon_snapshot_forget(d, c);
	daemon_fence_forget(c);
	daemon_fence_unplace(d, c); /* a waiter's job placed early */
	daemon_line_remove(d, c);
	if (c->lease)
		daemon_lease_end(d, c->lease);
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		d->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	d->out_total -= c->out_len;
	d->conn_count--;
	{
		struct user_slot *u = daemon_user(d, c->w.uid);

		if (u)
			u->conns--;
	}
	c->dead = 1;
	c->grave = d->dead_conns;
	d->dead_conns = c;
}

/* The end of a loop turn: nothing names them any more. */
void daemon_bury(struct daemon *d)
{
	while (d->dead_conns) {
		struct conn *c = d->dead_conns;

		d->dead_conns = c->grave;
		conn_free(c);
	}
	while (d->ended_leases) {
		struct blease *l = d->ended_leases;

		d->ended_leases = l->grave;
		daemon_lease_free(l);
	}
}

/* Set the connection caps from the descriptors the broker may open: some
 * are kept for its own files, and one user may have a 64th of the rest (at
 * most MAX_CONNS_PER_USER), so that it takes 64 accounts to fill it. */
void daemon_conn_limits(struct daemon *d)
{
	struct rlimit rl;
	size_t fds = 1024;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		fds = (size_t)rl.rlim_cur;
	else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		fds = 1u << 20;
	d->max_conns = fds > 256 ? fds - 128 : fds / 2;
	d->max_conns_per_user = d->max_conns / 64;
	if (d->max_conns_per_user > MAX_CONNS_PER_USER)
		d->max_conns_per_user = MAX_CONNS_PER_USER;
	if (d->max_conns_per_user < 4)
		d->max_conns_per_user = 4;
}

/* Over a cap: the refusal goes into the socket, which then closes; the
 * client reads it when its own message finds the broker gone
 * (broker_refusal in lib/broker.c). */
static void refuse_at_accept(int fd, const char *why)
{
	json_t *m = json_object();
	char *text;

	json_object_set_new(m, "op", json_string("refused"));
	json_object_set_new(m, "code", json_integer(GM_ERR_UNAVAILABLE));
	json_object_set_new(m, "error", json_string(why));
	json_object_set_new(m, "v", json_integer(BROKER_VERSION));
	text = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	if (text) {
		size_t n = strlen(text), off = 0;

		text[n] = '\n';
		send_some(fd, text, n + 1, &off);
		free(text);
	}
	close(fd);
}

/*
 * Accept what waits, ACCEPT_PER_TURN at most (the listener is reported
 * again next turn): each costs O(1), whoever sends it, so a flood of
 * connections cannot keep the loop from reading the ones it has.
 */
void daemon_accept_all(struct daemon *d)
{
	for (int k = 0; k < ACCEPT_PER_TURN; k++) {
		int fd = accept4(d->listener.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct ucred cred;
		socklen_t cl = sizeof cred;
		struct epoll_event ev;
		struct user_slot *u;
		struct conn *c;
		char why[320];

		if (fd < 0)
			return;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
			close(fd);
			continue;
		}
		u = daemon_user(d, cred.uid);
		if (!u) {
			close(fd);
			continue;
		}
		/* root is trusted (a bench's 500 waiters are root's) */
		if ((u->conns >= d->max_conns_per_user && cred.uid != 0) ||
		    d->conn_count >= d->max_conns) {
			/* Bounded: one user's flood cannot take every descriptor,
			 * nor a few users' together. */
			if (d->conn_count < d->max_conns)
				snprintf(
				    why, sizeof why,
				    "%s has %zu connections to the lease broker open, its cap "
				    "(waiting requests and leases each hold one); end some, or "
				    "give many tasks to one gpuman batch or gpuman submit, "
				    "which wait in line once",
				    u->name, u->conns);
			else
				snprintf(why, sizeof why,
				         "the lease broker serves %zu connections, its cap; try "
				         "again when some end",
				         d->conn_count);
			refuse_at_accept(fd, why);
			continue;
		}
		c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			continue;
		}
		c->kind = EV_CONN;
		c->fd = fd;
		c->w.uid = cred.uid;
		c->w.pid = cred.pid;
		c->state = CONN_NEW;
		c->opened_ms = monotonic_ms();
		c->next = d->conns;
		if (d->conns)
			d->conns->prev = c;
		d->conns = c;
		u->conns++;
		d->conn_count++;
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.ptr = c;
		epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev);
	}
}

/* ---- requests ------------------------------------------------------------ */

static void on_acquire(struct daemon *d, struct conn *c, json_t *msg)
{
	json_t *usable = json_object_get(msg, "usable");
	json_t *usable_migs = json_object_get(msg, "usable_migs");
	const char *cmd = json_string_value(json_object_get(msg, "command"));
	char err[GM_ERRBUF_SIZE] = "";
	struct gm_snapshot *snap;

	if ((usable && !json_is_object(usable)) || (usable_migs && !json_is_object(usable_migs)) ||
	    !(c->w.req =
	          record_request_parse(json_object_get(msg, "request"), NULL, err, sizeof err))) {
		daemon_refuse(d, c, GM_ERR_INVALID, err[0] ? err : "malformed request", NULL);
		return;
	}
	c->wait = json_is_true(json_object_get(msg, "wait"));
	json_t *v = json_object_get(msg, "reserve_ms");

	/* The wire is an entry point like the command line: the same bound
	 * as parse_duration_ms, so that start + reserve_ms cannot overflow. */
	if (v && (!json_is_integer(v) || json_integer_value(v) <= 0 ||
	          json_integer_value(v) > MAX_DURATION_MS)) {
		snprintf(err, sizeof err,
		         "reserve_ms must be a whole number of milliseconds from 1 to %lld (%dd)",
		         (long long)MAX_DURATION_MS, MAX_DURATION_DAYS);
		daemon_refuse(d, c, GM_ERR_INVALID, err, NULL);
		return;
	}
	c->reserve_ms = v ? json_integer_value(v) : 0;
	str_copy(c->w.within, sizeof c->w.within,
	         json_string_value(json_object_get(msg, "within")) ?: "");
	/* A reservation that is not the caller's (or not live) changes
	 * nothing: forget it now rather than look for it at every pass. */
	if (c->w.within[0]) {
		const struct blease *own = d->leases;

		while (own && !(own->rec.reservation && own->rec.uid == c->w.uid &&
		                !strcmp(own->rec.id, c->w.within)))
			own = own->next;
		if (!own)
			c->w.within[0] = '\0';
	}
	daemon_config_fresh(d);
	if (c->reserve_ms > 0 &&
	    caps_reserve_ok(&d->cfg, c->w.uid, c->reserve_ms, err, sizeof err) < 0) {
		daemon_refuse(d, c, GM_ERR_INVALID, err, NULL);
		return;
	}
	if (c->reserve_ms > 0) {
		struct user_slot *me = daemon_user(d, c->w.uid);

		/* Reservations hold no connection: their own caps bound them
		 * (and the state file), those waiting to be granted included. */
		if (me && me->reservations + me->reserve_waiting >= MAX_RESERVATIONS_PER_USER) {
			snprintf(
			    err, sizeof err,
			    "%s has %zu reservations (held or asked for), the cap of the lease "
			    "broker (%d a user); release some (gpuman release ID)",
			    me->name, me->reservations + me->reserve_waiting,
			    MAX_RESERVATIONS_PER_USER);
			daemon_refuse(d, c, GM_ERR_UNAVAILABLE, err, NULL);
			return;
		}
		if (d->reservation_count + d->reserve_waiting >= MAX_RESERVATIONS) {
			snprintf(
			    err, sizeof err,
			    "the lease broker holds %zu reservations, its cap (%d in all); try "
			    "again when some end",
			    d->reservation_count + d->reserve_waiting, MAX_RESERVATIONS);
			daemon_refuse(d, c, GM_ERR_UNAVAILABLE, err, NULL);
			return;
		}
	}
	c->w.usable = json_incref(usable);
	c->w.usable_migs = json_incref(usable_migs);
	c->queued_job = json_is_true(json_object_get(msg, "queued_job"));
	if (cmd)
		str_copy(c->w.command, sizeof c->w.command, cmd);
	else
		daemon_proc_command(c->w.pid, c->w.command, sizeof c->w.command);
	line_summary(c->w.req, c->w.summary, sizeof c->w.summary);
	/* The name the broker gives this uid everywhere (its leases too). */
	str_copy(c->w.user, sizeof c->w.user, daemon_user_cached(d, c->w.uid));
	c->w.since_ms = now_ms();
	c->seq = ++d->next_seq;
	/* The GPUs it could ever use: what it holds back while it waits,
	 * and what status shows. */
	snap = daemon_snapshot(d, 0);
	if (!snap) {
		daemon_refuse(d, c, GM_ERR_NVML, "the lease broker cannot read the GPUs", NULL);
		return;
	}
	daemon_candidates(d, c, snap);
	c->state = CONN_WAITING;
	/* Back to its old place after a restart (restart.c), or at the back. */
	daemon_place_take(d, c, json_string_value(json_object_get(msg, "place")));
}

static void on_job(struct daemon *d, struct conn *c, json_t *msg)
{
	json_int_t asked = json_integer_value(json_object_get(msg, "pid"));
	int pid = asked > 0 && asked <= INT_MAX ? (int)asked : 0; /* a pid, or nothing */
	long uid = pid > 0 ? daemon_proc_uid(pid) : -1;

	/* Only a process of the lease's own user can keep it alive across a
	 * restart of the broker. */
	if (!c->lease || uid < 0 || (c->w.uid != 0 && (unsigned)uid != c->w.uid))
		return;
	c->lease->rec.job_pid = pid;
	c->lease->rec.job_start = proctree_start(pid);
	daemon_state_lease(d, c->lease); /* its state-file record changed */
	d->gen++;
}

static void on_release(struct daemon *d, struct conn *c, json_t *msg)
{
	const char *id = json_string_value(json_object_get(msg, "id"));
	const char *token = json_string_value(json_object_get(msg, "token"));
	json_t *m = json_object();

	json_object_set_new(m, "op", json_string("released"));
	if (c->lease) {
		struct blease *l = c->lease;

		daemon_lease_end(d, l);
		daemon_fence_released(d, c, l, m);
		return;
	}
	for (struct blease *l = d->leases; id && !token && l; l = l->next)
		if (l->rec.reservation && !strcmp(l->rec.id, id)) {
			char why[160];

			/* The kernel says who asks: the owner, or root. */
			if (l->rec.uid == c->w.uid || c->w.uid == 0) {
				daemon_say("reservation %s of %s released", l->rec.id, l->rec.user);
				daemon_fence_spare(d, l, c->w.pid);
				daemon_lease_end(d, l);
				daemon_fence_released(d, c, l, m);
				return;
			}
			json_decref(m);
			snprintf(why, sizeof why,
			         "reservation '%.64s' is %s's: only they (or root) can release it",
			         id, l->rec.user);
			daemon_refuse(d, c, GM_ERR_INVALID, why, NULL);
			return;
		}
	if (id && !token) {
		char why[200];

		json_decref(m);
		snprintf(why, sizeof why,
		         "no reservation '%.64s' (it may have expired; gpuman status lists the "
		         "live ones)",
		         id);
		daemon_refuse(d, c, GM_ERR_INVALID, why, NULL);
		return;
	}
	for (struct blease *l = d->leases; id && token && l; l = l->next)
		if (!strcmp(l->rec.id, id)) {
			/* The kernel says who asks; the token proves the lease was
			 * given to them. */
			if (l->rec.uid == c->w.uid && strlen(token) == strlen(l->token) &&
			    !strcmp(l->token, token)) {
				if (l->conn)
					l->conn->lease = NULL;
				daemon_lease_end(d, l);
				daemon_fence_released(d, c, l, m);
				return;
			}
			break;
		}
	json_decref(m);
	daemon_refuse(d, c, GM_ERR_INVALID, "no such lease of yours", NULL);
}

static void on_view(struct daemon *d, struct conn *c)
{
	struct shared_text *view = daemon_view_text(d);

	if (!view) {
		daemon_refuse(d, c, GM_ERR_NOMEM, "the lease broker is out of memory", NULL);
		return;
	}
	c->shared = view;
	c->shared_off = 0;
	c->state = CONN_CLOSING;
	shutdown(c->fd, SHUT_RD);
	conn_flush(d, c);
}

/* One message from c.  Returns 0, or -1 when c is gone. */
static int on_message(struct daemon *d, struct conn *c, json_t *msg)
{
	const char *op = json_string_value(json_object_get(msg, "op"));

	if (c->state == CONN_NEW && !strcmp(op, "acquire"))
		on_acquire(d, c, msg);
	else if (c->state == CONN_NEW && !strcmp(op, "view"))
		on_view(d, c);
	else if (c->state == CONN_NEW && !strcmp(op, "snapshot"))
		daemon_snapshot_op(d, c, msg);
	else if ((c->state == CONN_NEW || c->state == CONN_LEASED) && !strcmp(op, "release"))
		on_release(d, c, msg);
	else if (c->state == CONN_LEASED && !strcmp(op, "job"))
		on_job(d, c, msg);
	else if (c->state == CONN_NEW && !strcmp(op, "session"))
		daemon_fence_session(d, c, msg);
	else if ((c->state == CONN_LEASED || c->state == CONN_NEW) && !strcmp(op, "fence"))
		daemon_fence_place(d, c, msg);
	else if (!strcmp(op, "preplace")) {
		/* A waiter's job; one granted meanwhile is placed at its grant */
		if (c->state == CONN_WAITING)
			daemon_fence_preplace(d, c, msg);
	} else
		daemon_refuse(d, c, GM_ERR_INVALID, "unexpected message", NULL);
	return c->dead || c->state == CONN_CLOSING ? -1 : 0;
}

void conn_readable(struct daemon *d, struct conn *c)
{
	struct broker_buf *b = &d->scratch;
	json_t *msg;
	ssize_t n;
	int rc;

	if (c->dead || c->state == CONN_CLOSING)
		return;
	if (c->pend_len)
		memcpy(b->data, c->pend, c->pend_len);
	b->len = c->pend_len;
	n = recv(c->fd, b->data + b->len, sizeof b->data - b->len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		/* End of file: the last holder closed it, or it died. */
		conn_close(d, c);
		return;
	}
	b->len += (size_t)n;
	while ((rc = broker_take_line(b, &msg)) == 1) {
		int gone = on_message(d, c, msg);

		json_decref(msg);
		if (gone)
			return;
	}
	if (rc < 0) {
		daemon_refuse(d, c, GM_ERR_INVALID,
		              "malformed message (one JSON object per line, "
		              "of protocol version 1)",
		              NULL);
		return;
	}
	free(c->pend);
	c->pend = NULL;
	c->pend_len = 0;
	if (b->len) {
		c->pend = malloc(b->len);
		if (!c->pend) {
			conn_close(d, c);
			return;
		}
		memcpy(c->pend, b->data, b->len);
		c->pend_len = b->len;
	}
}

/* Connections that have not said what they want in time are dropped. */
int64_t daemon_drop_silent(struct daemon *d)
{
	int64_t now = monotonic_ms(), next = -1;
	struct conn *c, *n;

	for (c = d->conns; c; c = n) {
		n = c->next;
		if (c->state != CONN_NEW && c->state != CONN_CLOSING)
			continue; /* waiting costs nothing; a lease lasts */
		if (now - c->opened_ms >= FIRST_MESSAGE_MS)
			conn_close(d, c);
		else if (next < 0 || c->opened_ms + FIRST_MESSAGE_MS < next)
			next = c->opened_ms + FIRST_MESSAGE_MS;
	}
	return next;
}
