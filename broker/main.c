/*
 * main.c - gpuman-broker, which `gpuman daemon` becomes: the lease broker
 * of a machine shared by several users (the protocol is in lib/broker_wire.h).
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
 * Leases are written to a state file owned by root after every change (a
 * journal, state.c); a broker that is killed and started again keeps the
 * leases whose job (or, without one, holder) still lives, watching it with a pidfd, and accepts
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
 *
 * This file: start-up and restoring the state file; lease.c the list of
 * leases; util.c small helpers; state.c the state file; conn.c the
 * connections and their requests; place.c the admin's limits and serving
 * the line; daemon.h what they share.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include "gpuman-internal.h"
#include "cmdline.h"
#include "daemon.h"
#include "protocol.h"

static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
	(void)sig;
	stopping = 1;
}

static int pidfd_open_(int pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
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
	/* 0755: the default state directory is the socket's too (the file
	 * itself is 0600) */
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		daemon_say("cannot create '%s': %s", dir, strerror(errno));
		return -1;
	}
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		daemon_say(
		    "the state directory '%s' must be a directory of yours that nobody else can "
		    "write (the leases in it are trusted)",
		    dir);
		return -1;
	}
	return 0;
}

/* Leases of the broker that ran before: kept while the process they were
 * tied to lives.  -1: its state file cannot be read (said). */
static int restore(struct daemon *d)
{
	int refuse;
	json_t *doc = daemon_state_load(d, &refuse), *arr, *o;
	size_t i, kept = 0, ended = 0;

	if (!doc)
		return refuse ? -1 : 0;
	daemon_hours_restore(d, json_object_get(doc, "gpu_hours"));
	arr = json_object_get(doc, "leases");
	json_array_foreach(arr, i, o)
	{
		struct blease *l = calloc(1, sizeof *l);
		int watch;
		uint64_t start;

		/* pid_start and job_start come beside the record (secret). */
		if (!l || record_lease_parse(o, &l->rec) < 0) {
			free(l);
			break;
		}
		l->kind = EV_PIDFD;
		l->pidfd = -1;
		str_copy(l->token, sizeof l->token,
		         json_string_value(json_object_get(o, "token")) ?: "");
		if (!l->rec.job_start)
			l->rec.job_pid = 0; /* the record showed its asker */
		if (l->rec.reservation) {
			/* Held by nobody: kept until it expires. */
			if (l->rec.expires_ms <= now_ms()) {
				daemon_lease_free(l);
				ended++;
				continue;
			}
			daemon_lease_add(d, l);
			kept++;
			continue;
		}
		/* The job, if it was started; else whoever asked. */
		watch = l->rec.job_pid ? l->rec.job_pid : l->rec.pid;
		start = l->rec.job_pid ? l->rec.job_start : l->rec.pid_start;
		if (watch > 0 && start && proctree_start(watch) == start)
			l->pidfd = pidfd_open_(watch);
		/* Opened after the check: the process may have ended between. */
		if (l->pidfd < 0 || proctree_start(watch) != start) {
			if (l->pidfd >= 0)
				close(l->pidfd);
			daemon_lease_free(l);
			ended++;
			continue;
		}
		daemon_lease_watch(d, l, l->pidfd);
		daemon_lease_add(d, l);
		kept++;
	}
	if (kept || ended)
		daemon_say("restored %zu lease%s of the broker before me (%zu ended meanwhile)",
		           kept, kept == 1 ? "" : "s", ended);
	daemon_places_restore(d, json_object_get(doc, "waiters"));
	json_decref(doc);
	daemon_persist(d); /* a snapshot: the first write always is */
	return 0;
}

/* The default socket's directory: root's, and writable by root alone, as
 * clients check (broker_wanted); made if missing. */
static int check_socket_dir(void)
{
	struct stat st;

	if (mkdir(BROKER_DIR, 0755) < 0 && errno != EEXIST) {
		daemon_say("cannot create '%s': %s", BROKER_DIR, strerror(errno));
		return -1;
	}
	if (lstat(BROKER_DIR, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		daemon_say("'%s' must be a directory of root's that nobody else can write (clients "
		           "trust the socket in it)",
		           BROKER_DIR);
		return -1;
	}
	if ((st.st_mode & 0555) != 0555 && chmod(BROKER_DIR, 0755) < 0) {
		daemon_say("cannot open '%s' to clients: %s", BROKER_DIR, strerror(errno));
		return -1;
	}
	return 0;
}

/* systemd's socket activation, else our own socket at path (which
 * d->bound_path then names, to be removed as the broker stops). */
static int listen_on(struct daemon *d, const char *path)
{
	mode_t mask;
	int bound;
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
		daemon_say("socket path '%s' is too long", path);
		return -1;
	}
	if (broker_is_default(path) && check_socket_dir() < 0)
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		int probe;

		if (!S_ISSOCK(st.st_mode)) {
			daemon_say("'%s' exists and is not a socket; remove it", path);
			return -1;
		}
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
			close(probe);
			daemon_say("another broker already serves '%s'", path);
			return -1;
		}
		if (probe >= 0)
			close(probe);
		unlink(path); /* a dead broker's */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	/* Born 0666: a waiter that reconnects after a restart the instant the
	 * socket appears must not be refused (EACCES) before the chmod. */
	mask = umask(0111);
	bound = fd >= 0 ? bind(fd, (struct sockaddr *)&sa, sizeof sa) : -1;
	umask(mask);
	if (bound < 0 || chmod(path, 0666) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
		daemon_say("cannot listen on '%s': %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	str_copy(d->bound_path, sizeof d->bound_path, path);
	if (lstat(path, &st) == 0)
		d->bound_ino = st.st_ino, d->bound_dev = st.st_dev;
	return fd;
}

/* A broker that stops removes the socket it made: a client then finds no
 * socket rather than one nobody serves (and for this machine's default
 * path, broker_connect says what to do). */
static void unbind(const struct daemon *d)
{
	const char *path = d->bound_path;
	struct stat st;

	/* Only the one listen_on made: someone may have removed it meanwhile
	 * and another broker bound the path since, whose socket it is now. */
	if (path[0] && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == d->bound_ino &&
	    st.st_dev == d->bound_dev)
		unlink(path);
}

/* For cli_parse: --help prints the usage gpuman's table shows. */
static const struct cmd_entry daemon_entry = {"daemon", NULL, cmdline_daemon_usage, NULL,
                                              cmdline_daemon_no_json};

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

static int daemon_run(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {CLI_COMMON_OPTIONS,
	                                         {"socket", required_argument, NULL, OPT_SOCKET},
	                                         {"state", required_argument, NULL, OPT_STATE},
	                                         {NULL, 0, NULL, 0}};
	struct daemon_args args = {BROKER_DEFAULT_SOCKET, BROKER_DEFAULT_STATE};
	struct daemon *d;
	struct sigaction sa;
	struct rlimit rl;
	int rc, status = EXIT_FAIL;

	rc = cli_parse(cli, &daemon_entry, argc, argv, "", longopts, daemon_option, &args);
	if (rc != CLI_CONTINUE)
		return rc;
	if (optind < argc)
		return cli_usage(cli, "unexpected argument '%s'", argv[optind]);
	d = calloc(1, sizeof *d);
	if (!d)
		return cli_error(cli, EXIT_FAIL, "out of memory");
	d->epfd = -1;
	d->listener.fd = -1;
	d->state.fd = -1;
	d->state.lock_fd = -1;
	d->listener.kind = EV_LISTEN;
	d->state_path = args.state_path;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* A hand-off waits on us: answer soon after a release wakes us. */
	protocol_sched_short(NULL);
	/* One descriptor per waiter and lease. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	daemon_conn_limits(d);
	if (check_state_dir(d->state_path) < 0 || daemon_state_lock(d) < 0)
		goto done;
	if (daemon_config_fresh(d) < 0)
		goto done;
	daemon_fence_init();
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (d->epfd < 0)
		goto done;
	/* The machine's NVML session, on a thread of its own. */
	if (daemon_reader_start(d) < 0)
		goto done;
	/* The fence's cgroup moves, on a thread of their own. */
	if (daemon_worker_start(d) < 0)
		goto done;
	if (restore(d) < 0)
		goto done;
	daemon_fence_restore(d);
	d->listener.fd = listen_on(d, args.socket_path);
	if (d->listener.fd < 0)
		goto done;
	{
		struct epoll_event ev = {EPOLLIN, {.ptr = &d->listener}};

		epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->listener.fd, &ev);
	}
	daemon_say("serving '%s' (state in '%s', %zu lease%s; caps: %zu connections a user, %zu "
	           "in all, %d reservations a user, %d in all)",
	           args.socket_path, d->state_path, d->lease_count, d->lease_count == 1 ? "" : "s",
	           d->max_conns_per_user, d->max_conns, MAX_RESERVATIONS_PER_USER,
	           MAX_RESERVATIONS);
	while (!stopping) {
		struct epoll_event evs[256];
		int64_t now = monotonic_ms(), next_silent = daemon_drop_silent(d), until = -1;
		int64_t next_expiry = daemon_expire(d), next_reading = daemon_reader_due(d);
		int64_t next_place = daemon_places_due(d), next_write = daemon_state_due(d);
		int timeout = -1, n, recheck = 0;

		if (d->line_head)
			until = d->snap_at + RECHECK_MS;
		if (next_silent >= 0 && (until < 0 || next_silent < until))
			until = next_silent;
		if (next_reading >= 0 && (until < 0 || next_reading < until))
			until = next_reading;
		if (next_place >= 0 && (until < 0 || next_place < until))
			until = next_place;
		if (next_write >= 0 && (until < 0 || next_write < until))
			until = next_write;
		/* Wall clock to monotonic: a reservation ends on the loop's timer. */
		if (next_expiry >= 0 && (until < 0 || now + (next_expiry - now_ms()) < until))
			until = now + (next_expiry - now_ms());
		if (until >= 0)
			timeout = until > now ? (int)(until - now) : 0;
		n = epoll_wait(d->epfd, evs, (int)ARRAY_SIZE(evs), timeout);
		if (n < 0 && errno != EINTR)
			break;
		d->turn++;
		for (int i = 0; i < n; i++) {
			enum ev_kind *kind = evs[i].data.ptr;

			if (*kind == EV_LISTEN) {
				daemon_accept_all(d);
			} else if (*kind == EV_READER) {
				daemon_reader_ready(d);
			} else if (*kind == EV_WORKER) {
				daemon_worker_ready(d);
			} else if (*kind == EV_PIDFD) {
				struct blease *l = (struct blease *)kind;
				struct pollfd p = {l->pidfd, POLLIN, 0};

				/* A restored lease's process ended: the one it
				 * watches now (this batch may still hold the end of
				 * one it watched before: daemon_lease_watch). */
				if (!l->ended && l->pidfd >= 0 && poll(&p, 1, 0) > 0)
					daemon_lease_end(d, l);
			} else {
				struct conn *c = (struct conn *)kind;
				struct user_slot *u = daemon_user(d, c->w.uid);

				if (c->dead)
					continue;
				/* Each user's share of a turn: the rest of its
				 * events are reported again next turn, behind
				 * other users' (epoll requeues them at the end). */
				if (u && u->turn != d->turn) {
					u->turn = d->turn;
					u->events = 0;
				}
				if (u && u->events++ >= EVENTS_PER_USER)
					continue;
				if (evs[i].events & EPOLLOUT)
					conn_flush(d, c);
				if (!c->dead &&
				    (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
					conn_readable(d, c);
			}
		}
		daemon_expire(d);
		if (d->line_head && monotonic_ms() - d->snap_at >= RECHECK_MS)
			recheck = 1;
		if (d->dirty || recheck)
			daemon_serve_line(d, recheck);
		if (d->changed)
			daemon_persist(d);
		daemon_bury(d);
	}
	status = EXIT_OK;
	daemon_say("stopping; %zu lease%s kept in '%s' for the next start", d->lease_count,
	           d->lease_count == 1 ? "" : "s", d->state_path);
done:
	/* Placements in flight are answered (or cancelled) first. */
	daemon_worker_stop(d);
	if (d->epfd >= 0 && d->listener.fd >= 0)
		daemon_persist(d);
	while (d->conns) {
		/* Closing would end their leases in the state file: the next
		 * broker restores them instead. */
		struct conn *c = d->conns;

		d->conns = c->next;
		close(c->fd);
		conn_free(c);
	}
	daemon_bury(d);
	while (d->leases) {
		struct blease *l = d->leases;

		d->leases = l->next;
		if (l->pidfd >= 0)
			close(l->pidfd);
		daemon_lease_free(l);
	}
	if (d->listener.fd >= 0) {
		unbind(d);
		close(d->listener.fd);
	}
	shared_text_put(d->view);
	free(d->users);
	if (d->epfd >= 0)
		close(d->epfd);
	daemon_reader_stop(d);
	gm_snapshot_free(d->snap);
	if (d->cfg_read)
		config_release(&d->cfg);
	free(d->hours);
	daemon_state_close(d);
	free(d);
	return status;
}

int main(int argc, char **argv)
{
	struct cli cli = {0};
	int rc;

	cli.cmd = "daemon";
	cli.req = gm_request_new();
	if (!cli.req)
		return cli_error(&cli, EXIT_FAIL, "out of memory");
	rc = daemon_run(&cli, argc, argv);
	gm_request_free(cli.req);
	return rc;
}
