/*
 * broker_view.c - the lease broker's view for status: its leases and its
 * line, read over one connection into a registry_view, as registry_read
 * gives them without a broker.  The rest of the client is broker.c.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "broker.h"
#include "context.h"
#include "lease.h"
#include "pick.h"
#include "policy.h"
#include "record.h"
#include "lease_view.h"
#include "snapshot_types.h"
#include "util.h"

/* How long a view sent with a reading serves, from its arrival: as long as
 * the reading itself would (broker_wire.h). */
#define SENT_VIEW_MS BROKER_SNAPSHOT_MAX_AGE_MS

/* ---- the view, for status ---------------------------------------------- */

static const char *jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

/* The counts of what the broker did not list (see struct registry_view). */
static int view_more(json_t *a, struct view_more **out, size_t *count)
{
	json_t *o;
	size_t i;

	*count = 0;
	if (!json_array_size(a))
		return 0;
	*out = calloc(json_array_size(a), sizeof **out);
	if (!*out)
		return -1;
	json_array_foreach(a, i, o)
	{
		struct view_more *m = &(*out)[(*count)++];

		m->uid = (unsigned)json_integer_value(json_object_get(o, "uid"));
		str_copy(m->user, sizeof m->user, jstr(o, "user"));
		m->count = (size_t)json_integer_value(json_object_get(o, "count"));
		m->gpus = (size_t)json_integer_value(json_object_get(o, "gpus"));
	}
	return 0;
}

/* The view's answer (text, one line) into view. */
static enum gm_err view_parse(const char *path, const char *text, struct registry_view *view,
                              char *err, size_t len)
{
	json_t *reply = json_loads(text, JSON_DISABLE_EOF_CHECK, NULL), *a, *o;
	enum gm_err rc = GM_OK;
	size_t i;

	if (json_is_object(reply) && !strcmp(jstr(reply, "op"), "refused")) {
		/* one of its caps, named in its reason */
		rc = gm_fail(GM_ERR_STATE, err, len, "the lease broker at '%s' refused: %s", path,
		             jstr(reply, "error"));
		goto done;
	}
	if (!json_is_object(reply) || strcmp(jstr(reply, "op"), "view")) {
		rc = gm_fail(GM_ERR_STATE, err, len, "the lease broker at '%s' sent no view", path);
		goto done;
	}
	a = json_object_get(reply, "leases");
	view->leases = calloc(json_array_size(a) + 1, sizeof *view->leases);
	json_array_foreach(a, i, o) if (view->leases &&
	                                record_lease_parse(o, &view->leases[view->lease_count++]) <
	                                    0) rc = GM_ERR_NOMEM;
	a = json_object_get(reply, "placement");
	view->placement_enforced = json_is_true(json_object_get(a, "enforced"));
	str_copy(view->placement, sizeof view->placement,
	         jstr(a, view->placement_enforced ? "mechanism" : "why"));
	if (!view->placement[0])
		str_copy(view->placement, sizeof view->placement,
		         "the lease broker does not fence jobs (an older one)");
	a = json_object_get(reply, "waiters");
	view->waiters = calloc(json_array_size(a) + 1, sizeof *view->waiters);
	/* The one waiter record (record.h); the broker places its line
	 * itself and sends no request. */
	json_array_foreach(a, i,
	                   o) if (view->waiters &&
	                          record_waiter_parse(o, &view->waiters[view->waiter_count++]) < 0)
	    rc = GM_ERR_NOMEM;
	if (!view->leases || !view->waiters ||
	    view_more(json_object_get(reply, "more_waiters"), &view->more_waiters,
	              &view->more_waiter_count) < 0 ||
	    view_more(json_object_get(reply, "more_leases"), &view->more_leases,
	              &view->more_lease_count) < 0)
		rc = GM_ERR_NOMEM;
	if (rc != GM_OK) {
		registry_view_release(view);
		gm_fail(rc, err, len, "out of memory");
	}
done:
	json_decref(reply);
	return rc;
}

enum gm_err broker_read(const char *path, const struct gm_snapshot *with,
                        struct registry_view *view, char *err, size_t len)
{
	struct broker_buf *buf;
	json_t *msg;
	enum gm_err rc = GM_OK;
	char *text = NULL;
	int fd;

	*view = (struct registry_view)REGISTRY_VIEW_INIT;
	/* Sent with a reading just taken: as it stood then, without asking
	 * again.  A snapshot kept longer has its leases asked afresh. */
	if (with && with->view_text && monotonic_ms() - with->view_got_ms <= SENT_VIEW_MS)
		return view_parse(path, with->view_text, view, err, len);
	buf = calloc(1, sizeof *buf);
	msg = json_object();
	fd = broker_request_start(path, buf, msg, "view", &rc, err, len);
	if (fd < 0)
		goto done;
	/* The view can be long (a line of thousands): read until the broker
	 * closes, in a buffer that grows. */
	if (broker_send(fd, msg) < 0) {
		rc = broker_send_failed(fd, path, err, len);
		goto done;
	}
	{
		size_t cap = 65536, used = 0;
		ssize_t n;

		text = malloc(cap);
		while (text && (n = recv(fd, text + used, cap - used - 1, 0)) > 0) {
			used += (size_t)n;
			if (used + 1 >= cap) {
				char *grown = cap < (64u << 20) ? realloc(text, cap * 2) : NULL;

				if (!grown) {
					free(text);
					text = NULL;
					break;
				}
				text = grown;
				cap *= 2;
			}
		}
		if (text)
			text[used] = '\0';
	}
	rc = view_parse(path, text ? text : "", view, err, len);
done:
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(msg);
	free(buf);
	return rc;
}
