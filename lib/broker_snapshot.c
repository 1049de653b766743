/*
 * broker_snapshot.c - the GPUs read by the lease broker's NVML session
 * (the "snapshot" op of broker_wire.h), for a client that then never loads NVML
 * itself: one session per machine, its start-up (24 ms on an H200,
 * seconds without persistence mode) paid once by the broker.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "broker_snapshot.h"
#include "broker_wire.h"
#include "snapshot_types.h"
#include "snapshot_wire.h"
#include "util.h"

/* The longest answer we take (thousands of processes fit many times). */
#define MAX_REPLY_BYTES (64u << 20)

/*
 * The reply, however long: its first line parsed, and with want_view the
 * line after it (the view) copied to *view; the broker closes once both
 * are sent.
 */
static json_t *read_reply(int fd, int want_view, char **view)
{
	size_t cap = 65536, used = 0, lines = 0, ends[2] = {0, 0};
	char *text = malloc(cap);
	json_t *reply = NULL;
	ssize_t n;

	/* without the view, the first line is all */
	while (text && lines < (want_view ? 2u : 1u)) {
		n = recv(fd, text + used, cap - used - 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (size_t i = used; i < used + (size_t)n && lines < 2; i++)
			if (text[i] == '\n')
				ends[lines++] = i;
		used += (size_t)n;
		if (used + 1 >= cap) {
			char *grown = cap < MAX_REPLY_BYTES ? realloc(text, cap * 2) : NULL;

			if (!grown)
				break;
			text = grown;
			cap *= 2;
		}
	}
	if (text && lines) {
		text[ends[0]] = '\0';
		reply = json_loads(text, 0, NULL);
		if (want_view && lines == 2) {
			text[ends[1]] = '\0';
			*view = strdup(text + ends[0] + 1);
		}
	}
	free(text);
	return reply;
}

enum gm_err broker_snapshot(const char *path, long max_age_ms, int with_view,
                            struct gm_snapshot **out, char *err, size_t len)
{
	json_t *msg = json_object(), *reply = NULL;
	const char *op, *stale;
	char *view = NULL;
	enum gm_err rc = GM_OK;
	int fd;

	*out = NULL;
	fd = broker_request_start(path, msg, msg, "snapshot", &rc, err, len);
	if (fd < 0)
		goto done;
	json_object_set_new(msg, "max_age_ms", json_integer(max_age_ms));
	if (with_view)
		json_object_set_new(msg, "view", json_true());
	if (broker_send(fd, msg) < 0) {
		rc =
		    gm_fail(GM_ERR_STATE, err, len, "lease broker '%s': %s", path, strerror(errno));
		goto done;
	}
	reply = read_reply(fd, with_view, &view);
	op = json_string_value(json_object_get(reply, "op"));
	if (op && !strcmp(op, "refused")) {
		const char *e = json_string_value(json_object_get(reply, "error"));

		rc = (enum gm_err)json_integer_value(json_object_get(reply, "code"));
		rc = gm_fail(rc == GM_OK ? GM_ERR_NVML : rc, err, len, "%s",
		             e ? e : "the lease broker cannot read the GPUs");
		goto done;
	}
	if (!op || strcmp(op, "snapshot")) {
		rc = gm_fail(GM_ERR_STATE, err, len,
		             "the lease broker at '%s' sent no snapshot (an older broker? restart "
		             "gpuman.service after upgrading)",
		             path);
		goto done;
	}
	rc = snapshot_wire_decode(json_object_get(reply, "snapshot"), out, err, len);
	if (rc != GM_OK)
		goto done;
	(*out)->from_broker = 1;
	(*out)->age_ms = json_integer_value(json_object_get(reply, "age_ms"));
	stale = json_string_value(json_object_get(reply, "stale"));
	if (stale && *stale)
		snapshot_add_note(*out, "%s", stale);
	(*out)->view_text = view;
	(*out)->view_got_ms = monotonic_ms();
	view = NULL;
done:
	free(view);
	if (fd >= 0)
		close(fd);
	json_decref(msg);
	json_decref(reply);
	return rc;
}
