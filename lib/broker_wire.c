/*
 * broker_wire.c - finding and trusting the lease broker's socket, and the
 * framing of its messages (broker_wire.h), for its clients and itself.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "broker_wire.h"
#include "util.h"

int broker_is_default(const char *path)
{
	return !strcmp(path, BROKER_DEFAULT_SOCKET);
}

int broker_wanted(char *buf, size_t len)
{
	const char *env = getenv("GPUMAN_BROKER");
	struct stat st;

	if (env && !strcasecmp(env, "off"))
		return 0;
	if (env && *env) {
		str_copy(buf, len, env);
		return 1;
	}
	str_copy(buf, len, BROKER_DEFAULT_SOCKET);
	/* Root's directory, writable by root alone: this machine's broker. */
	return lstat(BROKER_DIR, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
	       !(st.st_mode & (S_IWGRP | S_IWOTH));
}

enum gm_err lease_env_check(char *err, size_t len)
{
	const char *broker = getenv("GPUMAN_BROKER"), *dir = getenv("GPUMAN_STATE_DIR");
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];

	/* "no" or "0" meant off: said at once, not after waiting for a broker */
	if (broker && *broker && strcasecmp(broker, "off") && !strchr(broker, '/'))
		return gm_fail(GM_ERR_STATE, err, len,
		               "GPUMAN_BROKER='%s' is neither 'off' nor the path of a broker's "
		               "socket (such as %s)",
		               broker, BROKER_DEFAULT_SOCKET);
	/* Relative, it would be a registry a working directory: two jobs
	 * started from two directories would not see each other's leases. */
	if (dir && *dir && *dir != '/' && !broker_wanted(sock, sizeof sock))
		return gm_fail(GM_ERR_STATE, err, len,
		               "GPUMAN_STATE_DIR '%s' is a relative path, so each working "
		               "directory would have leases of its own; give an absolute path",
		               dir);
	return GM_OK;
}

/* What to do when nobody serves path. */
static void no_answer(const char *path, int error, char *err, size_t len)
{
	if (broker_is_default(path))
		gm_fail(GM_ERR_STATE, err, len,
		        "this machine's lease broker at '%s' does not answer: %s; start it "
		        "(systemctl start gpuman.socket); or, to retire the broker, root removes "
		        "'%s' (the leases it kept are then forgotten)",
		        path, strerror(error), BROKER_DIR);
	else
		gm_fail(GM_ERR_STATE, err, len,
		        "the lease broker at '%s' (GPUMAN_BROKER) does not answer: %s; start "
		        "gpuman daemon there, or unset GPUMAN_BROKER for this machine's own",
		        path, strerror(error));
}

/* When this process last gave up on the broker (0: never, or it answered
 * since): a connection soon after -- run asks for the GPUs' reading, then
 * for a lease -- tries once, rather than keep the user waiting again. */
static int64_t gave_up_ms;

void (*broker_waiting_hook)(const char *path, int error, int64_t patience_ms);

int broker_connect(const char *path, char *err, size_t len)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int64_t now = monotonic_ms(), last = __atomic_load_n(&gave_up_ms, __ATOMIC_RELAXED);
	int64_t give_up = last > 0 && now - last < BROKER_CONNECT_PATIENCE_MS
	                      ? now
	                      : now + BROKER_CONNECT_PATIENCE_MS;
	int64_t tell_at = now + 1000;
	struct ucred cred;
	socklen_t cl = sizeof cred;
	struct stat st;
	int fd = -1;

	if (strlen(path) >= sizeof sa.sun_path) {
		gm_fail(GM_ERR_STATE, err, len, "broker socket path '%s' is too long", path);
		return -1;
	}
	if (lease_env_check(err, len) != GM_OK)
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	for (;;) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			gm_fail(GM_ERR_STATE, err, len, "socket: %s", strerror(errno));
			return -1;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
			break;
		if ((errno != ECONNREFUSED && errno != ENOENT && errno != EAGAIN) ||
		    monotonic_ms() >= give_up) {
			no_answer(path, errno, err, len);
			close(fd);
			__atomic_store_n(&gave_up_ms, monotonic_ms(), __ATOMIC_RELAXED);
			return -1;
		}
		if (broker_waiting_hook && tell_at && monotonic_ms() >= tell_at) {
			broker_waiting_hook(path, errno, give_up - now);
			tell_at = 0;
		}
		close(fd);
		nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 ||
	    (cred.uid != 0 && cred.uid != geteuid())) {
		gm_fail(GM_ERR_STATE, err, len,
		        "the lease broker at '%s' is served by uid %u, not by root; refusing it "
		        "(anybody could have put it there)",
		        path, (unsigned)cred.uid);
		close(fd);
		return -1;
	}
	/* This machine's broker: root's socket in root's directory. */
	if (broker_is_default(path) && (lstat(path, &st) < 0 || st.st_uid != 0 || cred.uid != 0)) {
		gm_fail(GM_ERR_STATE, err, len,
		        "the socket '%s' is not root's (or not served by root); refusing it", path);
		close(fd);
		return -1;
	}
	__atomic_store_n(&gave_up_ms, 0, __ATOMIC_RELAXED);
	return fd;
}

int broker_send(int fd, json_t *msg)
{
	char *text;
	size_t n, off = 0;
	int rc = 0;

	json_object_set_new(msg, "v", json_integer(BROKER_VERSION));
	text = json_dumps(msg, JSON_COMPACT);
	if (!text) {
		errno = ENOMEM;
		return -1;
	}
	n = strlen(text);
	text[n++] = '\n'; /* replaces the terminator: json_dumps's buffer */
	while (off < n) {
		ssize_t w = send(fd, text + off, n - off, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			rc = -1;
			break;
		}
		off += (size_t)w;
	}
	free(text);
	return rc;
}

enum gm_err broker_send_failed(int fd, const char *path, char *err, size_t len)
{
	int error = errno;
	struct broker_buf *b = calloc(1, sizeof *b);
	enum gm_err rc = GM_ERR_STATE;
	json_t *msg = NULL;
	ssize_t n = b ? recv(fd, b->data, sizeof b->data, MSG_DONTWAIT) : -1;

	if (n > 0) {
		b->len = (size_t)n;
		if (broker_take_line(b, &msg) == 1 &&
		    !strcmp(json_string_value(json_object_get(msg, "op")), "refused")) {
			const char *e = json_string_value(json_object_get(msg, "error"));

			rc = (enum gm_err)json_integer_value(json_object_get(msg, "code"));
			if (rc == GM_OK)
				rc = GM_ERR_STATE;
			gm_fail(rc, err, len, "%s", e ? e : "refused by the lease broker");
		}
	}
	if (!msg)
		gm_fail(rc, err, len, "lease broker '%s': %s", path, strerror(error));
	json_decref(msg);
	free(b);
	return rc;
}

int broker_take_line(struct broker_buf *b, json_t **msg)
{
	char *nl = memchr(b->data, '\n', b->len);
	size_t used;
	json_t *v;

	*msg = NULL;
	if (!nl)
		return b->len >= sizeof b->data ? -1 : 0;
	*nl = '\0';
	used = (size_t)(nl - b->data) + 1;
	*msg = json_loads(b->data, JSON_REJECT_DUPLICATES, NULL);
	memmove(b->data, b->data + used, b->len - used);
	b->len -= used;
	v = json_object_get(*msg, "v");
	if (!json_is_object(*msg) || json_integer_value(v) != BROKER_VERSION ||
	    !json_is_string(json_object_get(*msg, "op"))) {
		json_decref(*msg);
		*msg = NULL;
		return -1;
	}
	return 1;
}

int broker_request_start(const char *path, const void *buf, json_t *msg, const char *op,
                         enum gm_err *rc, char *err, size_t len)
{
	int fd;

	if (!buf || !msg) {
		*rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		return -1;
	}
	fd = broker_connect(path, err, len);
	if (fd < 0) {
		*rc = GM_ERR_STATE;
		return -1;
	}
	json_object_set_new(msg, "op", json_string(op));
	return fd;
}
