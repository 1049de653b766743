/*
 * cmd_daemon.c - `gpuman daemon`: the lease broker of a machine shared by
 * several users (the protocol is in lib/broker.h).
 *
 * Started by root (contrib/gpuman.socket and gpuman.service), it is the one
 * arbiter that users cannot touch: the line and the leases live in its
 * memory, callers are known by the kernel's word (SO_PEERCRED), and a lease
 * is its connection, inherited by the job, so it ends when the last process
 * holding it closes it.  Placement is lib/policy.c on a fresh snapshot, the
 * same functions the daemonless registry calls.  One thread, epoll: an idle
 * waiter costs a socket and nothing else; a release hands its GPUs to the
 * next in line in the same loop turn.
 *
 * Leases are written to a state file owned by root after every change; a
 * broker that is killed and started again keeps the leases whose job (or,
 * without one, holder) still lives, watching it with a pidfd, and accepts
 * their release from a new connection with the lease's token.
 *
 * A reservation (gpuman reserve) is a lease that no connection holds: it
 * ends at its expires_ms, checked on the loop's timer, or when its user (or
 * root) releases it by id.  The admin's gpuman.conf binds every grant here
 * through lib/caps.c, the functions the daemonless registry calls: a
 * waiter over its max_gpus holds nothing back and is not served, GPUs kept
 * out or kept for a group are never candidates for others, and a
 * reservation longer than max_reserve is refused.  The file is read again
 * when it changes.
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
#include "cli.h"

#define DEFAULT_STATE "/run/gpuman-broker/leases.json"
/* A connection must say what it wants this soon (a stalled or silent
 * client is dropped, never waited for). */
#define FIRST_MESSAGE_MS 5000
/* While anybody waits, NVML is read again this often: a process that ends
 * outside gpuman frees memory without any event the broker sees. */
#define RECHECK_MS 1000
/* A snapshot this fresh is reused by the passes of one burst of events. */
#define SNAPSHOT_REUSE_MS 20
#define MAX_CONNS_PER_USER 4096
/* Replies are small except the view; a client that does not read them is
 * dropped before it costs the broker much memory. */
#define MAX_OUTPUT_BYTES (8u << 20)

enum ev_kind { EV_LISTEN, EV_CONN, EV_PIDFD };

enum conn_state {
	CONN_NEW,     /* no message yet */
	CONN_WAITING, /* in the line */
	CONN_LEASED,  /* its lease lives */
	CONN_CLOSING  /* flushing its last reply */
};

struct blease;

struct conn {
	enum ev_kind kind; /* first: epoll's data points here */
	int fd;
	unsigned uid;
	int pid;
	enum conn_state state;
	int64_t opened_ms; /* monotonic */
	char *pend;        /* a partial line received */
	size_t pend_len;
	char *out; /* replies not yet taken by the client */
	size_t out_len, out_off;
	/* in the line */
	struct gm_request *req;
	int wait;
	int64_t reserve_ms; /* > 0: a reservation for this long */
	char within[64];    /* inside this reservation of its user's; "" none */
	int told;           /* "queued" sent */
	int64_t since_ms;   /* wall clock */
	uint64_t seq;
	char command[256];
	char summary[128];
	json_t *usable;      /* UUID -> pick_env usable value; NULL: all */
	json_t *usable_migs; /* the same for MIG slices; NULL: as their GPU */
	char (*cand)[96];
	size_t cand_count;
	struct conn *prev, *next;   /* every connection */
	struct conn *lprev, *lnext; /* the line, in arrival order */
	int in_line;
	struct blease *lease;
	/* Closed: freed at the end of the loop turn, as an event of the same
	 * turn may still name it. */
	int dead;
	struct conn *grave;
};

struct blease {
	enum ev_kind kind; /* EV_PIDFD, for restored leases */
	char id[64];
	char token[40];
	unsigned uid;
	char user[33];
	int pid; /* the process that asked */
	uint64_t pid_start;
	int job_pid; /* the job it started, if it said so */
	uint64_t job_start;
	char command[256];
	int64_t start_ms;
	int exclusive;
	uint64_t share_mib;
	size_t n;
	unsigned *indices;
	char (*uuids)[96];
	char (*migs)[96];   /* the MIG slice of each GPU it holds, "" none */
	int reservation;    /* held by nobody until expires_ms */
	int64_t expires_ms; /* wall clock */
	struct conn *conn;  /* NULL: restored, watched by pidfd, or a reservation */
	int pidfd;
	struct blease *prev, *next;
	int ended; /* freed at the end of the loop turn */
	struct blease *grave;
};

struct daemon {
	int epfd;
	struct {
		enum ev_kind kind;
		int fd;
	} listener;
	const char *state_path;
	struct gm_context *ctx;
	struct gm_snapshot *snap;
	int64_t snap_at; /* monotonic ms */
	struct conn *conns;
	struct conn *line_head, *line_tail;
	size_t line_len;
	uint64_t next_seq;
	struct blease *leases;
	size_t lease_count;
	int dirty;   /* the line may move: serve it */
	int changed; /* leases changed: persist */
	size_t out_total;
	struct conn *dead_conns;
	struct blease *ended_leases;
	struct broker_buf scratch;
	struct config cfg;        /* the admin's gpuman.conf */
	struct timespec cfg_mtim; /* of the file read; reread when it changes */
	int cfg_read;
};

static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
	(void)sig;
	stopping = 1;
}

/* ---- small helpers ------------------------------------------------------ */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	fputs("gpuman daemon: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void user_name(unsigned uid, char *out, size_t len)
{
	struct passwd pw, *res = NULL;
	char buf[1024];

	if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
		str_copy(out, len, pw.pw_name);
	else
		snprintf(out, len, "%u", uid);
}

/* The start time of a process (clock ticks since boot, field 22 of
 * /proc/PID/stat): with the pid, it names one process even after the pid
 * is reused.  0 when it does not exist. */
static uint64_t proc_start(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
	if (!p)
		return 0;
	/* after ") ": state is field 3; start time is field 22 */
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p)
		start = strtoull(p + 1, NULL, 10);
	return start;
}

/* The real uid of a process, or -1. */
static long proc_uid(int pid)
{
	char path[64], line[256];
	long uid = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "Uid:", 4)) {
			uid = strtol(line + 4, NULL, 10);
			break;
		}
	fclose(f);
	return uid;
}

static void proc_command(int pid, char *out, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, out, len - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0) {
		str_copy(out, len, "?");
		return;
	}
	while (n > 0 && out[n - 1] == '\0')
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (out[i] == '\0')
			out[i] = ' ';
	out[n] = '\0';
}

static void random_hex(char *buf, size_t bytes)
{
	unsigned char r[32];

	if (bytes > sizeof r)
		bytes = sizeof r;
	if (getrandom(r, bytes, 0) != (ssize_t)bytes)
		for (size_t i = 0; i < bytes; i++)
			r[i] = (unsigned char)(now_ms() >> (i % 8)) ^ (unsigned char)rand();
	for (size_t i = 0; i < bytes; i++)
		sprintf(buf + 2 * i, "%02x", r[i]);
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int pidfd_open_(int pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* ---- output -------------------------------------------------------------- */

static void conn_close(struct daemon *d, struct conn *c);

static void conn_flush(struct daemon *d, struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
		                 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct epoll_event ev = {EPOLLIN | EPOLLOUT | EPOLLRDHUP, {.ptr = c}};

			epoll_ctl(d->epfd, EPOLL_CTL_MOD, c->fd, &ev);
			return;
		}
		if (n < 0) {
			c->out_off = c->out_len; /* gone: drop the rest */
			break;
		}
		c->out_off += (size_t)n;
	}
	d->out_total -= c->out_len;
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = 0;
	if (c->state == CONN_CLOSING) {
		conn_close(d, c);
		return;
	}
	{
		struct epoll_event ev = {EPOLLIN | EPOLLRDHUP, {.ptr = c}};

		epoll_ctl(d->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	}
}

/* Queue msg for c and send what the socket takes now.  Returns -1 when
 * the client is to be dropped (it does not read). */
static int conn_send(struct daemon *d, struct conn *c, json_t *msg)
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
		return -1;
	}
	grown = realloc(c->out, c->out_len + n + 1);
	if (!grown) {
		free(text);
		return -1;
	}
	c->out = grown;
	memcpy(c->out + c->out_len, text, n);
	c->out[c->out_len + n] = '\n';
	c->out_len += n + 1;
	d->out_total += n + 1;
	free(text);
	if (c->out_off == 0 && c->out_len == n + 1)
		conn_flush(d, c);
	return 0;
}

/* Reply and close once the reply is out. */
static void conn_finish(struct daemon *d, struct conn *c, json_t *msg)
{
	if (c->dead) {
		json_decref(msg);
		return;
	}
	c->state = CONN_CLOSING;
	shutdown(c->fd, SHUT_RD);
	if (conn_send(d, c, msg) < 0 || !c->out)
		conn_close(d, c);
}

static void refuse(struct daemon *d, struct conn *c, enum gm_err code, const char *error,
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

/* ---- leases ------------------------------------------------------------- */

static json_t *lease_json(const struct blease *l, int secret)
{
	json_t *o = json_object(), *gpus = json_array();

	json_object_set_new(o, "id", json_string(l->id));
	if (secret) {
		json_object_set_new(o, "token", json_string(l->token));
		json_object_set_new(o, "pid_start", json_integer((json_int_t)l->pid_start));
		json_object_set_new(o, "job_start", json_integer((json_int_t)l->job_start));
	}
	json_object_set_new(o, "uid", json_integer(l->uid));
	json_object_set_new(o, "user", json_string(l->user));
	json_object_set_new(o, "pid", json_integer(l->pid));
	json_object_set_new(o, "job_pid", json_integer(l->job_pid ? l->job_pid : l->pid));
	json_object_set_new(o, "command", json_string(l->command));
	json_object_set_new(o, "start_ms", json_integer(l->start_ms));
	json_object_set_new(o, "kind", json_string(l->exclusive ? "exclusive" : "share"));
	json_object_set_new(o, "share_mib",
	                    l->exclusive ? json_null() : json_integer((json_int_t)l->share_mib));
	if (l->reservation) {
		json_object_set_new(o, "reservation", json_true());
		json_object_set_new(o, "expires_ms", json_integer(l->expires_ms));
	}
	for (size_t i = 0; i < l->n; i++) {
		json_t *g = json_object();

		json_object_set_new(g, "index", json_integer(l->indices[i]));
		json_object_set_new(g, "uuid", json_string(l->uuids[i]));
		if (l->migs[i][0])
			json_object_set_new(g, "mig_uuid", json_string(l->migs[i]));
		json_array_append_new(gpus, g);
	}
	json_object_set_new(o, "gpus", gpus);
	return o;
}

/* Write every lease to the state file (a new file renamed into place, so a
 * broker killed mid-write leaves the previous one). */
static void persist(struct daemon *d)
{
	char tmp[PATH_MAX + 8];
	json_t *doc = json_object(), *arr = json_array();
	char *text;
	int fd;

	d->changed = 0;
	for (struct blease *l = d->leases; l; l = l->next)
		json_array_append_new(arr, lease_json(l, 1));
	json_object_set_new(doc, "leases", arr);
	snprintf(tmp, sizeof tmp, "%s.tmp", d->state_path);
	unlink(tmp);
	/* One write: json_dumpfd writes token by token, a system call each,
	 * and this runs on every hand-off. */
	text = json_dumps(doc, JSON_COMPACT);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (!text || fd < 0 || write_all(fd, text, strlen(text)) < 0 ||
	    rename(tmp, d->state_path) < 0)
		say("cannot write the state file '%s': %s (leases would not survive a restart)",
		    d->state_path, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(doc);
}

static void lease_free(struct blease *l)
{
	free(l->indices);
	free(l->uuids);
	free(l->migs);
	free(l);
}

static void lease_end(struct daemon *d, struct blease *l)
{
	if (l->prev)
		l->prev->next = l->next;
	else
		d->leases = l->next;
	if (l->next)
		l->next->prev = l->prev;
	if (l->pidfd >= 0) {
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, l->pidfd, NULL);
		close(l->pidfd);
		l->pidfd = -1;
	}
	if (l->conn)
		l->conn->lease = NULL;
	d->lease_count--;
	d->dirty = d->changed = 1;
	l->ended = 1;
	l->grave = d->ended_leases;
	d->ended_leases = l;
}

static void lease_add(struct daemon *d, struct blease *l)
{
	l->prev = NULL;
	l->next = d->leases;
	if (d->leases)
		d->leases->prev = l;
	d->leases = l;
	d->lease_count++;
	d->changed = 1;
}

/* ---- connections -------------------------------------------------------- */

static void line_remove(struct daemon *d, struct conn *c)
{
	if (!c->in_line)
		return;
	c->in_line = 0;
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
}

static void conn_free(struct conn *c)
{
	free(c->out);
	free(c->pend);
	free(c->cand);
	json_decref(c->usable);
	json_decref(c->usable_migs);
	gm_request_free(c->req);
	free(c);
}

static void conn_close(struct daemon *d, struct conn *c)
{
	if (c->dead)
		return;
	line_remove(d, c);
	if (c->lease)
		lease_end(d, c->lease);
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		d->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	d->out_total -= c->out_len;
	c->dead = 1;
	c->grave = d->dead_conns;
	d->dead_conns = c;
}

/* The end of a loop turn: nothing names them any more. */
static void bury(struct daemon *d)
{
	while (d->dead_conns) {
		struct conn *c = d->dead_conns;

		d->dead_conns = c->grave;
		conn_free(c);
	}
	while (d->ended_leases) {
		struct blease *l = d->ended_leases;

		d->ended_leases = l->grave;
		lease_free(l);
	}
}

static size_t conns_of(const struct daemon *d, unsigned uid)
{
	size_t n = 0;

	for (const struct conn *c = d->conns; c; c = c->next)
		n += c->uid == uid;
	return n;
}

static void accept_all(struct daemon *d)
{
	for (;;) {
		int fd = accept4(d->listener.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct ucred cred;
		socklen_t cl = sizeof cred;
		struct epoll_event ev;
		struct conn *c;

		if (fd < 0)
			return;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
			close(fd);
			continue;
		}
		if (conns_of(d, cred.uid) >= MAX_CONNS_PER_USER) {
			/* Bounded: one user's flood cannot take every descriptor. */
			close(fd);
			continue;
		}
		c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			continue;
		}
		c->kind = EV_CONN;
		c->fd = fd;
		c->uid = cred.uid;
		c->pid = cred.pid;
		c->state = CONN_NEW;
		c->opened_ms = monotonic_ms();
		c->next = d->conns;
		if (d->conns)
			d->conns->prev = c;
		d->conns = c;
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.ptr = c;
		epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev);
	}
}

/* ---- the admin's limits ------------------------------------------------- */

/* Read gpuman.conf again if it changed since (or was never read).  A file
 * that no longer parses keeps the limits read before it.  0, or -1 when
 * there are none to go by. */
static int config_fresh(struct daemon *d)
{
	const char *env = getenv("GPUMAN_CONFIG");
	struct config cfg;
	struct stat st;
	char err[GM_ERRBUF_SIZE];
	int exists = stat(env && *env ? env : CONFIG_SYSTEM_PATH, &st) == 0;

	if (d->cfg_read && exists && st.st_mtim.tv_sec == d->cfg_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == d->cfg_mtim.tv_nsec)
		return 0;
	if (d->cfg_read && !exists && !d->cfg_mtim.tv_sec && !d->cfg_mtim.tv_nsec)
		return 0;
	if (config_load(&cfg, 0, err, sizeof err) != GM_OK) {
		say("%s (%s)", err, d->cfg_read ? "keeping the limits read before" : "no limits");
		return d->cfg_read ? 0 : -1;
	}
	if (d->cfg_read)
		config_release(&d->cfg);
	d->cfg = cfg;
	d->cfg_read = 1;
	d->cfg_mtim = exists ? st.st_mtim : (struct timespec){0, 0};
	return 0;
}

/* GPUs that uid's leases and reservations hold. */
static unsigned held_by(const struct daemon *d, unsigned uid)
{
	unsigned n = 0;

	for (const struct blease *l = d->leases; l; l = l->next)
		n += l->uid == uid ? (unsigned)l->n : 0;
	return n;
}

/* The reservation c asks inside of, if it is its user's and lives. */
static const struct blease *within_of(const struct daemon *d, const struct conn *c)
{
	for (const struct blease *l = d->leases; c->within[0] && l; l = l->next)
		if (l->reservation && l->uid == c->uid && !strcmp(l->id, c->within))
			return l;
	return NULL;
}

/* Reservations whose time is up end; returns the next expiry (wall clock
 * ms), or -1 for none. */
static int64_t expire(struct daemon *d)
{
	int64_t now = now_ms(), next = -1;

	for (struct blease *l = d->leases, *n; l; l = n) {
		n = l->next;
		if (!l->reservation)
			continue;
		if (l->expires_ms <= now) {
			say("reservation %s of %s expired", l->id, l->user);
			lease_end(d, l);
		} else if (next < 0 || l->expires_ms < next) {
			next = l->expires_ms;
		}
	}
	return next;
}

/* ---- placement ------------------------------------------------------------ */

static struct gm_snapshot *snapshot(struct daemon *d, int fresh)
{
	int64_t now = monotonic_ms();
	struct gm_snapshot *snap;
	char err[GM_ERRBUF_SIZE];

	if (d->snap && !fresh && now - d->snap_at < SNAPSHOT_REUSE_MS)
		return d->snap;
	if (gm_snapshot_take(d->ctx, &snap, err, sizeof err) != GM_OK) {
		say("cannot read the GPUs: %s", err);
		return d->snap; /* the last one, if any */
	}
	gm_snapshot_free(d->snap);
	d->snap = snap;
	d->snap_at = now;
	return snap;
}

/* The leases as the policy sees them, GPU by GPU (as registry.c's
 * attempt_run does for lease files). */
struct placed {
	struct policy_lease *pl;
	char (*holders)[80];
	size_t count;
};

static int placed_build(struct placed *p, const struct daemon *d, const struct gm_snapshot *snap,
                        const struct blease *skip)
{
	struct proctree tree = PROCTREE_INIT;
	size_t total = 0, i = 0;
	int need_tree = 0;

	free(p->pl);
	free(p->holders);
	memset(p, 0, sizeof *p);
	for (const struct blease *l = d->leases; l; l = l->next) {
		total += l->n;
		need_tree |= !l->exclusive;
	}
	p->pl = calloc(total + 1, sizeof *p->pl);
	p->holders = calloc(d->lease_count + 1, sizeof *p->holders);
	if (!p->pl || !p->holders || (need_tree && proctree_read(&tree) < 0))
		return -1;
	for (const struct blease *l = d->leases; l; l = l->next, i++) {
		int job = l->job_pid ? l->job_pid : l->pid;

		if (l == skip)
			continue;
		if (l->reservation)
			snprintf(p->holders[i], sizeof p->holders[i],
			         "%s (reservation, %llds left)", l->user,
			         (long long)((l->expires_ms - now_ms()) / 1000));
		else
			snprintf(p->holders[i], sizeof p->holders[i], "%s (pid %d)", l->user, job);
		for (size_t g = 0; g < l->n; g++) {
			struct policy_lease *x = &p->pl[p->count++];
			const struct gm_gpu *gpu = gm_snapshot_find(snap, l->uuids[g]);
			uint64_t used = 0;

			x->uuid = l->uuids[g];
			x->mig = l->migs[g][0] ? l->migs[g] : NULL;
			x->exclusive = l->exclusive;
			x->share_mib = l->share_mib;
			x->holder = p->holders[i];
			/* What the job's own processes already hold counts as
			 * used memory in the snapshot, not as pending. */
			for (size_t k = 0; !l->exclusive && gpu && k < snap->proc_count; k++) {
				const struct gm_proc *pr = &snap->procs[k];

				if (pr->gpu == gpu->index && pr->has_mem &&
				    proctree_within(&tree, job, (int)pr->pid))
					used += pr->used_mib;
			}
			x->pending_mib = x->share_mib > used ? x->share_mib - used : 0;
		}
	}
	proctree_release(&tree);
	return 0;
}

/* Per snapshot position, what c's inherited allocation lets it use. */
static unsigned char *usable_for(const struct conn *c, const struct gm_snapshot *snap)
{
	unsigned char *u;

	if (!c->usable)
		return NULL;
	u = calloc(snap->gpu_count + 1, 1);
	for (size_t i = 0; u && i < snap->gpu_count; i++)
		u[i] = (unsigned char)json_integer_value(
		    json_object_get(c->usable, snap->gpus[i].uuid));
	return u;
}

/* Per slice (snap->migs), the same. */
static unsigned char *mig_usable_for(const struct conn *c, const struct gm_snapshot *snap)
{
	unsigned char *u;

	if (!c->usable_migs)
		return NULL;
	u = calloc(snap->mig_count + 1, 1);
	for (size_t i = 0; u && i < snap->mig_count; i++)
		u[i] = (unsigned char)json_integer_value(
		    json_object_get(c->usable_migs, snap->migs[i].uuid));
	return u;
}

static void grant(struct daemon *d, struct conn *c, const struct gm_snapshot *snap,
                  const struct policy_result *res)
{
	struct blease *l = calloc(1, sizeof *l);
	json_t *m, *gpus;

	if (l) {
		l->indices = calloc(res->count + 1, sizeof *l->indices);
		l->uuids = calloc(res->count + 1, sizeof *l->uuids);
		l->migs = calloc(res->count + 1, sizeof *l->migs);
	}
	if (!l || !l->indices || !l->uuids || !l->migs) {
		if (l)
			lease_free(l);
		line_remove(d, c);
		refuse(d, c, GM_ERR_NOMEM, "the lease broker is out of memory", NULL);
		return;
	}
	l->kind = EV_PIDFD;
	l->pidfd = -1;
	snprintf(l->id, sizeof l->id, "%lld-%d-", (long long)now_ms(), c->pid);
	random_hex(l->id + strlen(l->id), 4);
	random_hex(l->token, 16);
	l->uid = c->uid;
	user_name(c->uid, l->user, sizeof l->user);
	l->pid = c->pid;
	l->pid_start = proc_start(c->pid);
	str_copy(l->command, sizeof l->command, c->command);
	l->start_ms = now_ms();
	l->exclusive = !c->req->share;
	l->n = res->count;
	m = json_object();
	gpus = json_array();
	for (size_t i = 0; i < res->count; i++) {
		/* A slice: the lease names its GPU, exclusive, and the slice,
		 * as the registry's lease files do. */
		const struct gm_mig *mig = res->mig ? &snap->migs[res->chosen[i]] : NULL;
		const struct gm_gpu *g = mig ? &snap->gpus[snapshot_position(snap, mig->gpu)]
		                             : &snap->gpus[res->chosen[i]];
		uint64_t share = c->req->share ? size_mib(&c->req->mem, g->mem_total_mib) : 0;
		json_t *jg = json_object();

		l->indices[i] = g->index;
		str_copy(l->uuids[i], sizeof l->uuids[i], g->uuid);
		if (mig) {
			str_copy(l->migs[i], sizeof l->migs[i], mig->uuid);
			json_object_set_new(jg, "mig_uuid", json_string(mig->uuid));
		}
		/* One number for the lease: the smallest GPU's share. */
		if (c->req->share && (!l->share_mib || share < l->share_mib))
			l->share_mib = share;
		json_object_set_new(jg, "index", json_integer(g->index));
		json_object_set_new(jg, "uuid", json_string(g->uuid));
		json_object_set_new(jg, "total_mib", json_integer((json_int_t)g->mem_total_mib));
		json_array_append_new(gpus, jg);
	}
	line_remove(d, c);
	c->state = CONN_LEASED;
	c->lease = l;
	l->conn = c;
	if (c->reserve_ms > 0) {
		l->reservation = 1;
		l->expires_ms = l->start_ms + c->reserve_ms;
	}
	lease_add(d, l);
	json_object_set_new(m, "op", json_string("granted"));
	json_object_set_new(m, "id", json_string(l->id));
	json_object_set_new(m, "token", json_string(l->token));
	json_object_set_new(m, "share_mib", json_integer((json_int_t)l->share_mib));
	json_object_set_new(m, "gpus", gpus);
	/* On record before the caller hears of it: a broker killed right
	 * after still knows the lease when it starts again. */
	persist(d);
	if (l->reservation) {
		/* Nobody holds it: the connection ends, the reservation lasts. */
		c->lease = NULL;
		l->conn = NULL;
		conn_finish(d, c, m);
		return;
	}
	if (conn_send(d, c, m) < 0)
		conn_close(d, c); /* ends the lease */
}

static void tell_queued(struct daemon *d, struct conn *c, size_t position, const char *why)
{
	json_t *m = json_object();

	c->told = 1;
	json_object_set_new(m, "op", json_string("queued"));
	json_object_set_new(m, "position", json_integer((json_int_t)position));
	json_object_set_new(m, "why", json_string(why ? why : ""));
	if (conn_send(d, c, m) < 0)
		conn_close(d, c);
}

/*
 * Serve the line, first come first served: each waiter in arrival order is
 * placed if the policy finds it GPUs among those no earlier waiter could
 * use; one that does not fit holds back its candidate GPUs from everybody
 * behind it.  Once every GPU is held back, nobody further back can be
 * placed, so the walk stops there: a pass costs the few waiters at the
 * head, not the length of the line.
 */
static void serve_line(struct daemon *d, int fresh)
{
	struct gm_snapshot *snap;
	struct placed placed = {0}, mine = {0};
	const char **held_for = NULL, **barred = NULL;
	char(*held_text)[160] = NULL, (*barred_text)[160] = NULL;
	size_t position = 0, held = 0;
	struct conn *c, *next;
	char user[33];

	d->dirty = 0;
	if (!d->line_head)
		return;
	snap = snapshot(d, fresh);
	if (!snap)
		return;
	config_fresh(d);
	held_for = calloc(snap->gpu_count + 1, sizeof *held_for);
	held_text = calloc(snap->gpu_count + 1, sizeof *held_text);
	barred = calloc(snap->gpu_count + 1, sizeof *barred);
	barred_text = calloc(snap->gpu_count + 1, sizeof *barred_text);
	if (!held_for || !held_text || !barred || !barred_text ||
	    placed_build(&placed, d, snap, NULL) < 0)
		goto done;
	for (c = d->line_head; c; c = next) {
		struct policy_result res = POLICY_RESULT_INIT;
		struct policy_input in = {.snap = snap,
		                          .leases = placed.pl,
		                          .lease_count = placed.count,
		                          .held_for = held_for};
		const struct blease *within;
		unsigned char *usable, *mig_usable = NULL;
		char *why, limit[200];
		int over;

		next = c->lnext;
		position++;
		/* Over its cap, it is not served and holds nothing back: first
		 * come, first served within what each user may have. */
		within = within_of(d, c);
		over = caps_over(&d->cfg, c->uid,
		                 held_by(d, c->uid) - (within ? (unsigned)within->n : 0),
		                 c->req->count, limit, sizeof limit);
		if (over == 2 || (over && !c->wait)) {
			refuse(d, c, over == 2 ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE,
			       over == 2 ? "no GPU of this machine can ever meet the request"
			                 : "no GPU meets the request now",
			       limit);
			position--;
			continue;
		}
		if (over) {
			if (!c->told)
				tell_queued(d, c, position, limit);
			continue;
		}
		usable = usable_for(c, snap);
		mig_usable = mig_usable_for(c, snap);
		in.usable = usable;
		if (caps_barred(&d->cfg, c->uid, snap, barred, barred_text))
			in.barred = barred;
		/* Inside its own reservation: those GPUs are not taken from it. */
		if (within && placed_build(&mine, d, snap, within) == 0) {
			in.leases = mine.pl;
			in.lease_count = mine.count;
		}
		in.mig_usable = mig_usable;
		if (held == snap->gpu_count) {
			/* Everything is held for earlier requests. */
			if (!c->wait)
				refuse(
				    d, c, GM_ERR_UNAVAILABLE, "no GPU meets the request now",
				    "every GPU it could use is held for earlier requests in line");
			else if (!c->told)
				tell_queued(d, c, position,
				            "every GPU it could use is held for "
				            "earlier requests in line");
			free(usable);
			free(mig_usable);
			continue;
		}
		if (policy_choose(&in, c->req, &res) < 0) {
			free(usable);
			free(mig_usable);
			break;
		}
		if (res.outcome == POLICY_OK) {
			grant(d, c, snap, &res);
			position--;
			if (placed_build(&placed, d, snap, NULL) < 0) {
				policy_result_release(&res);
				free(usable);
				free(mig_usable);
				break;
			}
			in.leases = placed.pl;
			in.lease_count = placed.count;
		} else if (res.outcome == POLICY_NEVER || !c->wait) {
			why = pick_explain(snap, &res, c->req->count);
			refuse(d, c,
			       res.outcome == POLICY_NEVER ? GM_ERR_NEVER : GM_ERR_UNAVAILABLE,
			       res.outcome == POLICY_NEVER
			           ? "no GPU of this machine can ever meet the request"
			           : "no GPU meets the request now",
			       why);
			free(why);
		} else {
			if (!c->told) {
				why = pick_explain(snap, &res, c->req->count);
				tell_queued(d, c, position, why);
				free(why);
			}
			for (size_t pos = 0; pos < snap->gpu_count; pos++) {
				if (held_for[pos] || !policy_candidate(&in, c->req, pos))
					continue;
				user_name(c->uid, user, sizeof user);
				snprintf(held_text[pos], sizeof held_text[pos],
				         "queued for an earlier request: %.32s's %.64s (pid %d)",
				         user, c->summary, c->pid);
				held_for[pos] = held_text[pos];
				held++;
			}
		}
		policy_result_release(&res);
		free(usable);
		free(mig_usable);
	}
done:
	free(placed.pl);
	free(placed.holders);
	free(mine.pl);
	free(mine.holders);
	free(held_for);
	free(held_text);
	free((void *)barred);
	free(barred_text);
}

/* ---- requests ------------------------------------------------------------ */

static const char *summary_of(const struct gm_request *req, char *buf, size_t len)
{
	char size[32];

	if (req->mig[0])
		snprintf(buf, len, "1 MIG slice %s", req->mig);
	else if (req->share)
		snprintf(buf, len, "%u GPU%s, %s share", req->count, req->count == 1 ? "" : "s",
		         size_format(&req->mem, size, sizeof size));
	else
		snprintf(buf, len, "%u GPU%s exclusive", req->count, req->count == 1 ? "" : "s");
	return buf;
}

static void on_acquire(struct daemon *d, struct conn *c, json_t *msg)
{
	json_t *r = json_object_get(msg, "request"), *v, *usable = json_object_get(msg, "usable");
	json_t *usable_migs = json_object_get(msg, "usable_migs");
	const char *key, *cmd = json_string_value(json_object_get(msg, "command"));
	char err[GM_ERRBUF_SIZE];
	struct gm_snapshot *snap;
	struct policy_input in = {0};
	unsigned char *u, *mu;

	c->req = gm_request_new();
	if (!c->req || !json_is_object(r) || (usable && !json_is_object(usable)) ||
	    (usable_migs && !json_is_object(usable_migs))) {
		refuse(d, c, GM_ERR_INVALID, "malformed request", NULL);
		return;
	}
	json_object_foreach(r, key, v)
	{
		/* The same parser as the command line and the C API: what a
		 * user cannot ask for there, they cannot ask for here. */
		if (!json_is_string(v) || !strcmp(key, "wait") ||
		    gm_request_set(c->req, key, json_string_value(v), err, sizeof err) != GM_OK) {
			refuse(d, c, GM_ERR_INVALID,
			       json_is_string(v) && strcmp(key, "wait") ? err : "malformed request",
			       NULL);
			return;
		}
	}
	c->wait = json_is_true(json_object_get(msg, "wait"));
	c->reserve_ms = json_integer_value(json_object_get(msg, "reserve_ms"));
	str_copy(c->within, sizeof c->within,
	         json_string_value(json_object_get(msg, "within")) ?: "");
	config_fresh(d);
	if (c->reserve_ms < 0 ||
	    (c->reserve_ms > 0 &&
	     caps_reserve_ok(&d->cfg, c->uid, c->reserve_ms, err, sizeof err) < 0)) {
		refuse(d, c, GM_ERR_INVALID, c->reserve_ms < 0 ? "malformed request" : err, NULL);
		return;
	}
	c->usable = json_incref(usable);
	c->usable_migs = json_incref(usable_migs);
	if (cmd)
		str_copy(c->command, sizeof c->command, cmd);
	else
		proc_command(c->pid, c->command, sizeof c->command);
	summary_of(c->req, c->summary, sizeof c->summary);
	c->since_ms = now_ms();
	c->seq = ++d->next_seq;
	/* The GPUs it could ever use: what it holds back while it waits,
	 * and what status shows. */
	snap = snapshot(d, 0);
	if (!snap) {
		refuse(d, c, GM_ERR_NVML, "the lease broker cannot read the GPUs", NULL);
		return;
	}
	u = usable_for(c, snap);
	mu = mig_usable_for(c, snap);
	in.snap = snap;
	in.usable = u;
	in.mig_usable = mu;
	{
		const char **barred = calloc(snap->gpu_count + 1, sizeof *barred);
		char(*text)[160] = calloc(snap->gpu_count + 1, sizeof *text);

		if (barred && text && caps_barred(&d->cfg, c->uid, snap, barred, text))
			in.barred = barred;
		c->cand = calloc(snap->gpu_count + 1, sizeof *c->cand);
		for (size_t pos = 0; c->cand && pos < snap->gpu_count; pos++)
			if (policy_candidate(&in, c->req, pos))
				str_copy(c->cand[c->cand_count++], sizeof c->cand[0],
				         snap->gpus[pos].uuid);
		free((void *)barred);
		free(text);
	}
	free(u);
	free(mu);
	c->state = CONN_WAITING;
	c->in_line = 1;
	c->lprev = d->line_tail;
	if (d->line_tail)
		d->line_tail->lnext = c;
	else
		d->line_head = c;
	d->line_tail = c;
	d->line_len++;
	d->dirty = 1;
}

static void on_job(struct daemon *d, struct conn *c, json_t *msg)
{
	int pid = (int)json_integer_value(json_object_get(msg, "pid"));
	long uid = pid > 0 ? proc_uid(pid) : -1;

	/* Only a process of the lease's own user can keep it alive across a
	 * restart of the broker. */
	if (!c->lease || uid < 0 || (c->uid != 0 && (unsigned)uid != c->uid))
		return;
	c->lease->job_pid = pid;
	c->lease->job_start = proc_start(pid);
	d->changed = 1;
}

static void on_release(struct daemon *d, struct conn *c, json_t *msg)
{
	const char *id = json_string_value(json_object_get(msg, "id"));
	const char *token = json_string_value(json_object_get(msg, "token"));
	json_t *m = json_object();

	json_object_set_new(m, "op", json_string("released"));
	if (c->lease) {
		lease_end(d, c->lease);
		conn_finish(d, c, m);
		return;
	}
	for (struct blease *l = d->leases; id && !token && l; l = l->next)
		if (l->reservation && !strcmp(l->id, id)) {
			char why[160];

			/* The kernel says who asks: the owner, or root. */
			if (l->uid == c->uid || c->uid == 0) {
				say("reservation %s of %s released", l->id, l->user);
				lease_end(d, l);
				conn_finish(d, c, m);
				return;
			}
			json_decref(m);
			snprintf(why, sizeof why,
			         "reservation '%.64s' is %s's: only they (or root) can release it",
			         id, l->user);
			refuse(d, c, GM_ERR_INVALID, why, NULL);
			return;
		}
	if (id && !token) {
		char why[200];

		json_decref(m);
		snprintf(why, sizeof why,
		         "no reservation '%.64s' (it may have expired; gpuman status lists the "
		         "live ones)",
		         id);
		refuse(d, c, GM_ERR_INVALID, why, NULL);
		return;
	}
	for (struct blease *l = d->leases; id && token && l; l = l->next)
		if (!strcmp(l->id, id)) {
			/* The kernel says who asks; the token proves the lease was
			 * given to them. */
			if (l->uid == c->uid && strlen(token) == strlen(l->token) &&
			    !strcmp(l->token, token)) {
				if (l->conn)
					l->conn->lease = NULL;
				lease_end(d, l);
				conn_finish(d, c, m);
				return;
			}
			break;
		}
	json_decref(m);
	refuse(d, c, GM_ERR_INVALID, "no such lease of yours", NULL);
}

static void on_view(struct daemon *d, struct conn *c)
{
	json_t *m = json_object(), *leases = json_array(), *waiters = json_array();
	char user[33], limit[200];

	for (struct blease *l = d->leases; l; l = l->next)
		json_array_append_new(leases, lease_json(l, 0));
	for (struct conn *w = d->line_head; w; w = w->lnext) {
		json_t *o = json_object(), *cand = json_array();
		char name[64];

		snprintf(name, sizeof name, "wait.%020llu", (unsigned long long)w->seq);
		user_name(w->uid, user, sizeof user);
		json_object_set_new(o, "name", json_string(name));
		json_object_set_new(o, "uid", json_integer(w->uid));
		json_object_set_new(o, "user", json_string(user));
		json_object_set_new(o, "pid", json_integer(w->pid));
		json_object_set_new(o, "command", json_string(w->command));
		json_object_set_new(o, "since_ms", json_integer(w->since_ms));
		json_object_set_new(o, "summary", json_string(w->summary));
		if (caps_over(&d->cfg, w->uid, held_by(d, w->uid), w->req->count, limit,
		              sizeof limit))
			json_object_set_new(o, "limit", json_string(limit));
		for (size_t i = 0; i < w->cand_count; i++)
			json_array_append_new(cand, json_string(w->cand[i]));
		json_object_set_new(o, "candidates", cand);
		json_array_append_new(waiters, o);
	}
	json_object_set_new(m, "op", json_string("view"));
	json_object_set_new(m, "leases", leases);
	json_object_set_new(m, "waiters", waiters);
	conn_finish(d, c, m);
}

/* One message from c.  Returns 0, or -1 when c is gone. */
static int on_message(struct daemon *d, struct conn *c, json_t *msg)
{
	const char *op = json_string_value(json_object_get(msg, "op"));

	if (c->state == CONN_NEW && !strcmp(op, "acquire"))
		on_acquire(d, c, msg);
	else if (c->state == CONN_NEW && !strcmp(op, "view"))
		on_view(d, c);
	else if ((c->state == CONN_NEW || c->state == CONN_LEASED) && !strcmp(op, "release"))
		on_release(d, c, msg);
	else if (c->state == CONN_LEASED && !strcmp(op, "job"))
		on_job(d, c, msg);
	else
		refuse(d, c, GM_ERR_INVALID, "unexpected message", NULL);
	return c->dead || c->state == CONN_CLOSING ? -1 : 0;
}

static void conn_readable(struct daemon *d, struct conn *c)
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
		refuse(d, c, GM_ERR_INVALID,
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
static int64_t drop_silent(struct daemon *d)
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

/* ---- start-up ------------------------------------------------------------- */

static int check_state_dir(const char *path)
{
	char dir[PATH_MAX];
	struct stat st;
	char *slash;

	str_copy(dir, sizeof dir, path);
	slash = strrchr(dir, '/');
	if (!slash)
		str_copy(dir, sizeof dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		say("cannot create '%s': %s", dir, strerror(errno));
		return -1;
	}
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		say("the state directory '%s' must be a directory of yours that nobody else can "
		    "write (the leases in it are trusted)",
		    dir);
		return -1;
	}
	return 0;
}

/* Leases of the broker that ran before: kept while the process they were
 * tied to lives. */
static void restore(struct daemon *d)
{
	json_t *doc = json_load_file(d->state_path, 0, NULL), *arr, *o;
	size_t i, kept = 0, ended = 0;

	if (!doc)
		return;
	arr = json_object_get(doc, "leases");
	json_array_foreach(arr, i, o)
	{
		struct blease *l = calloc(1, sizeof *l);
		json_t *gpus = json_object_get(o, "gpus"), *g;
		size_t k;
		int watch;
		uint64_t start;

		if (!l)
			break;
		l->kind = EV_PIDFD;
		l->pidfd = -1;
		str_copy(l->id, sizeof l->id, json_string_value(json_object_get(o, "id")) ?: "");
		str_copy(l->token, sizeof l->token,
		         json_string_value(json_object_get(o, "token")) ?: "");
		l->uid = (unsigned)json_integer_value(json_object_get(o, "uid"));
		str_copy(l->user, sizeof l->user,
		         json_string_value(json_object_get(o, "user")) ?: "");
		l->pid = (int)json_integer_value(json_object_get(o, "pid"));
		l->pid_start = (uint64_t)json_integer_value(json_object_get(o, "pid_start"));
		l->job_start = (uint64_t)json_integer_value(json_object_get(o, "job_start"));
		l->job_pid =
		    l->job_start ? (int)json_integer_value(json_object_get(o, "job_pid")) : 0;
		str_copy(l->command, sizeof l->command,
		         json_string_value(json_object_get(o, "command")) ?: "");
		l->start_ms = json_integer_value(json_object_get(o, "start_ms"));
		l->exclusive =
		    !strcmp(json_string_value(json_object_get(o, "kind")) ?: "", "exclusive");
		l->share_mib = (uint64_t)json_integer_value(json_object_get(o, "share_mib"));
		l->n = json_array_size(gpus);
		l->indices = calloc(l->n + 1, sizeof *l->indices);
		l->uuids = calloc(l->n + 1, sizeof *l->uuids);
		l->migs = calloc(l->n + 1, sizeof *l->migs);
		if (!l->indices || !l->uuids || !l->migs) {
			lease_free(l);
			break;
		}
		json_array_foreach(gpus, k, g)
		{
			l->indices[k] = (unsigned)json_integer_value(json_object_get(g, "index"));
			str_copy(l->uuids[k], sizeof l->uuids[k],
			         json_string_value(json_object_get(g, "uuid")) ?: "");
			str_copy(l->migs[k], sizeof l->migs[k],
			         json_string_value(json_object_get(g, "mig_uuid")) ?: "");
		}
		if (json_is_true(json_object_get(o, "reservation"))) {
			/* Held by nobody: kept until it expires. */
			l->reservation = 1;
			l->expires_ms = json_integer_value(json_object_get(o, "expires_ms"));
			if (l->expires_ms <= now_ms()) {
				lease_free(l);
				ended++;
				continue;
			}
			lease_add(d, l);
			kept++;
			continue;
		}
		/* The job, if it was started; else whoever asked. */
		watch = l->job_pid ? l->job_pid : l->pid;
		start = l->job_pid ? l->job_start : l->pid_start;
		if (watch > 0 && start && proc_start(watch) == start)
			l->pidfd = pidfd_open_(watch);
		/* Opened after the check: the process may have ended between. */
		if (l->pidfd < 0 || proc_start(watch) != start) {
			if (l->pidfd >= 0)
				close(l->pidfd);
			lease_free(l);
			ended++;
			continue;
		}
		{
			struct epoll_event ev = {EPOLLIN, {.ptr = l}};

			epoll_ctl(d->epfd, EPOLL_CTL_ADD, l->pidfd, &ev);
		}
		lease_add(d, l);
		kept++;
	}
	json_decref(doc);
	if (kept || ended)
		say("restored %zu lease%s of the broker before me (%zu ended meanwhile)", kept,
		    kept == 1 ? "" : "s", ended);
	persist(d);
}

/* systemd's socket activation, else our own socket at path. */
static int listen_on(const char *path)
{
	const char *lpid = getenv("LISTEN_PID"), *lfds = getenv("LISTEN_FDS");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd;

	if (lpid && lfds && atol(lpid) == (long)getpid() && atoi(lfds) >= 1) {
		fd = 3;
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_FDNAMES");
		return fd;
	}
	if (strlen(path) >= sizeof sa.sun_path) {
		say("socket path '%s' is too long", path);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		int probe;

		if (!S_ISSOCK(st.st_mode)) {
			say("'%s' exists and is not a socket; remove it", path);
			return -1;
		}
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
			close(probe);
			say("another broker already serves '%s'", path);
			return -1;
		}
		if (probe >= 0)
			close(probe);
		unlink(path); /* a dead broker's */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(path, 0666) < 0 ||
	    listen(fd, 4096) < 0) {
		say("cannot listen on '%s': %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

struct daemon_args {
	const char *socket_path;
	const char *state_path;
};

enum { OPT_SOCKET = OPT_CMD_BASE, OPT_STATE };

static int daemon_option(struct cli *cli, int opt, const char *arg, void *data)
{
	struct daemon_args *a = data;

	(void)cli;
	if (opt == OPT_SOCKET)
		a->socket_path = arg;
	else if (opt == OPT_STATE)
		a->state_path = arg;
	else
		return -1;
	return CLI_CONTINUE;
}

static int daemon_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS,
	                                         {"socket", required_argument, NULL, OPT_SOCKET},
	                                         {"state", required_argument, NULL, OPT_STATE},
	                                         {NULL, 0, NULL, 0}};
	struct daemon_args args = {BROKER_DEFAULT_SOCKET, DEFAULT_STATE};
	struct daemon *d;
	struct sigaction sa;
	struct rlimit rl;
	char err[GM_ERRBUF_SIZE];
	int rc, status = EXIT_FAIL;

	rc = cli_parse(cli, &cmd_daemon, argc, argv, "", longopts, daemon_option, &args);
	if (rc != CLI_CONTINUE)
		return rc;
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	d = calloc(1, sizeof *d);
	if (!d)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	d->epfd = -1;
	d->listener.fd = -1;
	d->listener.kind = EV_LISTEN;
	d->state_path = args.state_path;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* One descriptor per waiter and lease. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (gm_open(&d->ctx, err, sizeof err) != GM_OK) {
		status = cli_error(cli, EXIT_FAIL, "%s", err);
		goto done;
	}
	if (check_state_dir(d->state_path) < 0)
		goto done;
	if (config_fresh(d) < 0)
		goto done;
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (d->epfd < 0)
		goto done;
	restore(d);
	d->listener.fd = listen_on(args.socket_path);
	if (d->listener.fd < 0)
		goto done;
	{
		struct epoll_event ev = {EPOLLIN, {.ptr = &d->listener}};

		epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->listener.fd, &ev);
	}
	say("serving '%s' (state in '%s', %zu lease%s)", args.socket_path, d->state_path,
	    d->lease_count, d->lease_count == 1 ? "" : "s");
	while (!stopping) {
		struct epoll_event evs[64];
		int64_t now = monotonic_ms(), next_silent = drop_silent(d), until = -1;
		int64_t next_expiry = expire(d);
		int timeout = -1, n, recheck = 0;

		if (d->line_head)
			until = d->snap_at + RECHECK_MS;
		if (next_silent >= 0 && (until < 0 || next_silent < until))
			until = next_silent;
		/* Wall clock to monotonic: a reservation ends on the loop's timer. */
		if (next_expiry >= 0 && (until < 0 || now + (next_expiry - now_ms()) < until))
			until = now + (next_expiry - now_ms());
		if (until >= 0)
			timeout = until > now ? (int)(until - now) : 0;
		n = epoll_wait(d->epfd, evs, 64, timeout);
		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			enum ev_kind *kind = evs[i].data.ptr;

			if (*kind == EV_LISTEN) {
				accept_all(d);
			} else if (*kind == EV_PIDFD) {
				struct blease *l = (struct blease *)kind;

				/* A restored lease's process ended. */
				if (!l->ended)
					lease_end(d, l);
			} else {
				struct conn *c = (struct conn *)kind;

				if (c->dead)
					continue;
				if (evs[i].events & EPOLLOUT)
					conn_flush(d, c);
				if (!c->dead &&
				    (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
					conn_readable(d, c);
			}
		}
		expire(d);
		if (d->line_head && monotonic_ms() - d->snap_at >= RECHECK_MS)
			recheck = 1;
		if (d->dirty || recheck)
			serve_line(d, recheck);
		if (d->changed)
			persist(d);
		bury(d);
	}
	status = EXIT_OK;
	say("stopping; %zu lease%s kept in '%s' for the next start", d->lease_count,
	    d->lease_count == 1 ? "" : "s", d->state_path);
done:
	if (d->epfd >= 0 && d->listener.fd >= 0)
		persist(d);
	while (d->conns) {
		/* Closing would end their leases in the state file: the next
		 * broker restores them instead. */
		struct conn *c = d->conns;

		d->conns = c->next;
		close(c->fd);
		conn_free(c);
	}
	bury(d);
	while (d->leases) {
		struct blease *l = d->leases;

		d->leases = l->next;
		if (l->pidfd >= 0)
			close(l->pidfd);
		lease_free(l);
	}
	if (d->listener.fd >= 0)
		close(d->listener.fd);
	if (d->epfd >= 0)
		close(d->epfd);
	gm_snapshot_free(d->snap);
	gm_close(d->ctx);
	if (d->cfg_read)
		config_release(&d->cfg);
	free(d);
	return status;
}

const struct cmd_entry cmd_daemon = {
    "daemon",
    "the lease broker for a machine shared by several users (run by root)",
    "usage: gpuman daemon [--socket PATH] [--state FILE] [--sim FILE]\n"
    "\n"
    "The one arbiter of GPU leases on a machine shared by several users: every\n"
    "gpuman run, batch, queue and library call of every user asks it over its\n"
    "Unix socket (GPUMAN_BROKER, default " BROKER_DEFAULT_SOCKET "), first come\n"
    "first served, instead of locking files in a shared directory.  It knows\n"
    "callers by the kernel's word (SO_PEERCRED); a lease is the caller's\n"
    "connection, inherited by the job, and ends when the job's last process\n"
    "ends.  Run it as root, from contrib/gpuman.socket and gpuman.service.\n"
    "\n"
    "  --socket PATH  where to listen (default " BROKER_DEFAULT_SOCKET "); with\n"
    "                 systemd's socket activation, the socket systemd passes\n"
    "  --state FILE   its leases, kept across restarts: a broker killed and\n"
    "                 started again keeps the leases whose jobs still run\n"
    "                 (default " DEFAULT_STATE "; its directory must be\n"
    "                 yours and writable by nobody else)\n"
    "  --sim FILE     use the NVML simulator with this scenario\n"
    "\n"
    "The admin's gpuman.conf (GPUMAN_CONFIG, default " CONFIG_SYSTEM_PATH ") binds\n"
    "every grant: max_gpus, max_reserve, keep_out and GPUs kept for a group,\n"
    "as in the daemonless registry; it is read again when it changes.\n"
    "\n"
    "Runs until SIGINT, SIGTERM or SIGHUP (exit status 0; the leases stay in\n"
    "the state file for the next start), 1 if it cannot start (the socket is\n"
    "served already, the state directory is unsafe, no driver).\n",
    daemon_exec,
};
