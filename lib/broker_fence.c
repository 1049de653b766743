/*
 * broker_fence.c - the client side of the broker's kernel fence: a job
 * started stopped is placed in its lease's cgroup before it runs anything
 * (broker_wire.h, "fence"; the broker's side is broker/fence.c).
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "broker_fence.h"
#include "broker_wire.h"
#include "lease.h"
#include "util.h"

/* Placing a process is a few system calls; a broker this slow is stuck. */
#define FENCE_PATIENCE_MS 10000

/* Send msg ({"op":"fence",...} for pid) on fd and read the answer: 1
 * placed, 0 no mechanism, -1 refused, -2 the broker went before it
 * answered. */
static int ask(int fd, json_t *msg, int pid, char *err, size_t len)
{
	struct broker_buf *buf = calloc(1, sizeof *buf);
	json_t *reply = NULL;
	int64_t give_up = monotonic_ms() + FENCE_PATIENCE_MS;
	const char *op;
	int rc = -1, got = 0;

	if (!buf || !msg) {
		gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		goto done;
	}
	if (broker_send(fd, msg) < 0) {
		gm_fail(GM_ERR_STATE, err, len, "lease broker: %s", strerror(errno));
		rc = -2;
		goto done;
	}
	while ((got = broker_take_line(buf, &reply)) == 0) {
		struct pollfd p = {fd, POLLIN, 0};
		int64_t left = give_up - monotonic_ms();
		ssize_t n;

		if (left <= 0 || (poll(&p, 1, (int)left) < 0 && errno != EINTR))
			break;
		if (!p.revents)
			continue;
		n = recv(fd, buf->data + buf->len, sizeof buf->data - buf->len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf->len += (size_t)n;
	}
	op = got == 1 ? json_string_value(json_object_get(reply, "op")) : NULL;
	if (!op) {
		gm_fail(GM_ERR_STATE, err, len,
		        "the lease broker did not answer the request to place pid %d", pid);
		rc = got == 0 ? -2 : -1;
	} else if (!strcmp(op, "fenced") && json_is_true(json_object_get(reply, "enforced"))) {
		rc = 1;
	} else if (!strcmp(op, "fenced")) {
		gm_fail(GM_OK, err, len, "%s",
		        json_string_value(json_object_get(reply, "why")) ?: "no mechanism");
		rc = 0;
	} else {
		gm_fail(GM_ERR_STATE, err, len, "%s",
		        json_string_value(json_object_get(reply, "error")) ?: "refused");
	}
done:
	json_decref(reply);
	free(buf);
	return rc;
}

static json_t *fence_msg(int pid)
{
	json_t *msg = json_object();

	json_object_set_new(msg, "op", json_string("fence"));
	json_object_set_new(msg, "pid", json_integer(pid));
	return msg;
}

int broker_fence(const struct gm_lease *lease, int pid, int keep, char *err, size_t len)
{
	json_t *msg = fence_msg(pid);
	int rc;

	if (keep)
		json_object_set_new(msg, "keep", json_true());
	rc = ask(lease->fd, msg, pid, err, len);
	json_decref(msg);
	/* The broker stopped between the grant and now (a restart): the next
	 * one restored the lease for this process, and places the job when
	 * asked on a new connection, by the lease's id. */
	if (rc == -2 && lease->broker)
		rc = broker_fence_reservation(lease->broker, lease->rec.id, pid, keep, err, len);
	return rc < 0 ? -1 : rc;
}

int broker_fence_session(const char *path, unsigned uid, int pid, char *err, size_t len)
{
	json_t *msg = json_object();
	int fd = broker_connect(path, err, len), rc = -1;

	json_object_set_new(msg, "op", json_string("session"));
	json_object_set_new(msg, "pid", json_integer(pid));
	json_object_set_new(msg, "uid", json_integer(uid));
	if (fd >= 0) {
		rc = ask(fd, msg, pid, err, len);
		close(fd);
	}
	json_decref(msg);
	return rc < 0 ? -1 : rc;
}

int broker_fence_reservation(const char *path, const char *id, int pid, int keep, char *err,
                             size_t len)
{
	json_t *msg = fence_msg(pid);
	int fd = broker_connect(path, err, len), rc = -1;

	json_object_set_new(msg, "id", json_string(id));
	if (keep)
		json_object_set_new(msg, "keep", json_true());
	if (fd >= 0) {
		rc = ask(fd, msg, pid, err, len);
		close(fd);
	}
	json_decref(msg);
	return rc < 0 ? -1 : rc;
}
