/*
 * http.c - the HTTP side of `gpuman serve`, on libmicrohttpd.
 *
 * Read-only: GET and HEAD of four paths, without a body; anything else is
 * refused before a byte of its body is read.  Every answer is a response object rendered by
 * the sampler; libmicrohttpd counts its references, so a new rendering
 * replaces the old while slow clients still receive the old one.  Memory is
 * bounded by the limits handed to libmicrohttpd: connections at once, bytes
 * of request line and headers per connection, and an idle timeout.
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <microhttpd.h>
#include "serve.h"

enum doc { DOC_METRICS, DOC_STATUS, DOC_HISTORY, DOC_PAGE, DOC_COUNT };

static const struct {
	const char *path, *type;
} docs[DOC_COUNT] = {
    [DOC_METRICS] = {"/metrics", "text/plain; version=0.0.4; charset=utf-8"},
    [DOC_STATUS] = {"/api/v1/status", "application/json"},
    [DOC_HISTORY] = {"/api/v1/history", "application/json"},
    [DOC_PAGE] = {"/", "text/html; charset=utf-8"},
};

struct serve_http {
	struct MHD_Daemon *daemon;
	pthread_mutex_t lock;                /* guards doc[] */
	struct MHD_Response *doc[DOC_COUNT]; /* NULL until the first sample */
	struct MHD_Response *not_found, *not_allowed, *not_ready, *no_body;
};

static struct MHD_Response *fixed(const char *text)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);

	if (r)
		MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
	return r;
}

/* Does the request announce a body?  Nothing here reads one. */
static int has_body(struct MHD_Connection *conn)
{
	const char *len =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);

	return (len && strspn(len, "0") != strlen(len)) ||
	       MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                   MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state)
{
	struct serve_http *http = cls;
	struct MHD_Response *r = NULL;
	enum MHD_Result rc;

	(void)version;
	(void)upload;
	/* Other methods are refused on the first call, before any body is
	 * read: libmicrohttpd then drops the rest and the connection. */
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, http->not_allowed);
	if (!*state && has_body(conn))
		return MHD_queue_response(conn, MHD_HTTP_CONTENT_TOO_LARGE, http->no_body);
	/* GET and HEAD are answered on the second call, once the request is
	 * complete, so the connection stays open for the next (keep-alive). */
	if (!*state) {
		*state = http;
		return MHD_YES;
	}
	*upload_size = 0;
	for (int d = 0; d < DOC_COUNT; d++) {
		if (strcmp(url, docs[d].path))
			continue;
		pthread_mutex_lock(&http->lock);
		r = http->doc[d];
		rc = r ? MHD_queue_response(conn, MHD_HTTP_OK, r) : MHD_NO;
		pthread_mutex_unlock(&http->lock);
		if (r)
			return rc;
		return MHD_queue_response(conn, MHD_HTTP_SERVICE_UNAVAILABLE, http->not_ready);
	}
	return MHD_queue_response(conn, MHD_HTTP_NOT_FOUND, http->not_found);
}

/* "127.0.0.1:9400", "[::1]:9400" -> a bound, listening socket; -2 when
 * addr is malformed, -1 when it cannot be had. */
static int listen_on(const char *addr, int *family, unsigned *port, char *err, size_t errlen)
{
	char host[256];
	const char *colon;
	struct addrinfo hints = {0}, *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	int fd = -1, one = 1, rc;

	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');

		colon = close && close[1] == ':' ? close + 1 : NULL;
		if (colon)
			snprintf(host, sizeof host, "%.*s", (int)(close - addr - 1), addr + 1);
	} else {
		colon = strrchr(addr, ':');
		if (colon)
			snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
	}
	if (!colon || !colon[1] || colon == addr) {
		snprintf(err, errlen,
		         "--listen '%s': use ADDRESS:PORT, such as 127.0.0.1:9400, "
		         "[::1]:9400 or 0.0.0.0:9400",
		         addr);
		return -2;
	}
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(host, colon + 1, &hints, &ai);
	if (rc) {
		snprintf(err, errlen,
		         "--listen '%s': %s (the address must be numeric, such as "
		         "127.0.0.1:9400)",
		         addr, gai_strerror(rc));
		return -2;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	*family = ai->ai_family;
	*port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
	                                 : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	freeaddrinfo(ai);
	return fd;
}

int serve_http_start(struct serve_http **out, const char *addr, const struct serve_limits *lim,
                     unsigned *port, char *err, size_t errlen)
{
	struct serve_http *http = calloc(1, sizeof *http);
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
	int fd, family = AF_INET;

	*out = NULL;
	if (!http) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	fd = listen_on(addr, &family, port, err, errlen);
	if (fd < 0) {
		free(http);
		return fd;
	}
	pthread_mutex_init(&http->lock, NULL);
	http->not_found = fixed("not found: try /, /metrics, /api/v1/status or /api/v1/history\n");
	http->not_allowed = fixed("gpuman serve is read-only: GET and HEAD only\n");
	http->not_ready = fixed("no snapshot yet, try again in a moment\n");
	http->no_body = fixed("gpuman serve takes no request body\n");
	if (http->not_allowed)
		MHD_add_response_header(http->not_allowed, "Allow", "GET, HEAD");
	if (family == AF_INET6)
		flags |= MHD_USE_IPv6;
	if (http->not_found && http->not_allowed && http->not_ready && http->no_body)
		http->daemon = MHD_start_daemon(
		    flags, 0, NULL, NULL, answer, http, MHD_OPTION_LISTEN_SOCKET, fd,
		    MHD_OPTION_CONNECTION_LIMIT, lim->max_connections,
		    MHD_OPTION_PER_IP_CONNECTION_LIMIT, lim->per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
		    lim->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, lim->conn_memory,
		    MHD_OPTION_STRICT_FOR_CLIENT, 1, MHD_OPTION_END);
	if (!http->daemon) {
		snprintf(err, errlen,
		         "cannot start the HTTP server on %s (libmicrohttpd refused "
		         "the limits or ran out of memory)",
		         addr);
		close(fd);
		serve_http_stop(http);
		return -1;
	}
	*out = http;
	return 0;
}

static struct MHD_Response *rendered(enum doc d, char *body, size_t len)
{
	struct MHD_Response *r;

	if (!body)
		return NULL;
	r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return NULL;
	}
	MHD_add_response_header(r, "Content-Type", docs[d].type);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	if (d == DOC_PAGE)
		/* Nothing but gpuman itself: no external scripts, fonts, beacons. */
		MHD_add_response_header(
		    r, "Content-Security-Policy",
		    "default-src 'none'; script-src 'unsafe-inline'; "
		    "style-src 'unsafe-inline'; connect-src 'self'; "
		    "img-src 'self' data:; base-uri 'none'; form-action 'none'");
	return r;
}

void serve_http_publish(struct serve_http *http, char *metrics, size_t metrics_len, char *status,
                        size_t status_len, char *history, size_t history_len, char *page,
                        size_t page_len)
{
	struct MHD_Response *fresh[DOC_COUNT] = {
	    [DOC_METRICS] = rendered(DOC_METRICS, metrics, metrics_len),
	    [DOC_STATUS] = rendered(DOC_STATUS, status, status_len),
	    [DOC_HISTORY] = rendered(DOC_HISTORY, history, history_len),
	    [DOC_PAGE] = rendered(DOC_PAGE, page, page_len),
	};
	struct MHD_Response *old[DOC_COUNT];

	pthread_mutex_lock(&http->lock);
	for (int d = 0; d < DOC_COUNT; d++) {
		old[d] = fresh[d] ? http->doc[d] : NULL;
		if (fresh[d])
			http->doc[d] = fresh[d];
	}
	pthread_mutex_unlock(&http->lock);
	/* Connections still sending an old one hold their own reference. */
	for (int d = 0; d < DOC_COUNT; d++)
		if (old[d])
			MHD_destroy_response(old[d]);
}

void serve_http_stop(struct serve_http *http)
{
	if (!http)
		return;
	if (http->daemon)
		MHD_stop_daemon(http->daemon);
	for (int d = 0; d < DOC_COUNT; d++)
		if (http->doc[d])
			MHD_destroy_response(http->doc[d]);
	if (http->not_found)
		MHD_destroy_response(http->not_found);
	if (http->not_allowed)
		MHD_destroy_response(http->not_allowed);
	if (http->not_ready)
		MHD_destroy_response(http->not_ready);
	if (http->no_body)
		MHD_destroy_response(http->no_body);
	pthread_mutex_destroy(&http->lock);
	free(http);
}
