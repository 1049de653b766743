/*
 * broker.c - the client side of the lease broker: asking it for a lease
 * and waiting in its line, and releasing; reading its view of leases and
 * waiters for status is broker_view.c.  Finding its socket and the
 * protocol are broker_wire.h; the broker itself is broker/ (gpuman-broker).
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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
#include "parse.h"
#include "pick.h"
#include "policy.h"
#include "record.h"
#include "snapshot.h"
#include "transport.h"
#include "util.h"

/* A waiter whose broker goes away connects again and presents its place
 * token (the broker keeps its line across a restart); a broker that keeps
 * closing on it without a word is given up after this many tries. */
#define RECONNECT_TRIES 5
/*
 * poll(), after one look at *interrupted that no signal can slip past: the
 * signals stay blocked from the look until ppoll() waits, which unblocks
 * them as it starts.  An idle waiter then sleeps until a message, its
 * deadline or a signal (it looked every 2 s before: 500 idle waiters took
 * 10 % of a core on a 2-core VM).  -1 with EINTR when interrupted.
 */
static int poll_or_interrupt(struct pollfd *pfd, nfds_t n, int timeout,
                             volatile sig_atomic_t *interrupted)
{
	struct timespec ts, *tp = NULL;
	sigset_t all, old;
	int rc, saved;

	if (!interrupted)
		return poll(pfd, n, timeout);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	if (*interrupted) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		errno = EINTR;
		return -1;
	}
	if (timeout >= 0) {
		ts.tv_sec = timeout / 1000;
		ts.tv_nsec = (long)(timeout % 1000) * 1000000L;
		tp = &ts;
	}
	rc = ppoll(pfd, n, tp, &old);
	saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	return rc;
}

/* Block until the next message, the deadline (monotonic ms, -1 none), or
 * an interruption.  1 with *msg, 0 on time-out, -1 on end or error,
 * -2 when interrupted. */
static int next_message(int fd, struct broker_buf *b, int cancel_fd,
                        volatile sig_atomic_t *interrupted, int64_t deadline, json_t **msg)
{
	int last = 0; /* past the deadline: one look without waiting */

	for (;;) {
		struct pollfd pfd[2] = {{fd, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
		int rc = broker_take_line(b, msg), timeout = -1;
		ssize_t n;

		if (rc)
			return rc;
		if (interrupted && *interrupted)
			return -2;
		if (deadline >= 0) {
			int64_t left = deadline - monotonic_ms();

			if (left <= 0 && last)
				return 0;
			last = left <= 0;
			timeout = left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
		}
		rc = poll_or_interrupt(pfd, cancel_fd >= 0 ? 2 : 1, timeout, interrupted);
		if (rc < 0 && errno != EINTR)
			return -1;
		if (rc > 0 && pfd[1].revents)
			return -2;
		if (rc <= 0 || !pfd[0].revents)
			continue;
		n = recv(fd, b->data + b->len, sizeof b->data - b->len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		b->len += (size_t)n;
	}
}

/* The granted lease, told to us in msg, as the caller's gm_lease. */
/* CUDA_VISIBLE_DEVICES where none was inherited: the leased GPUs' UUIDs. */
static char *uuid_list(const struct gm_lease *l, size_t n)
{
	char *out = malloc(n * (sizeof l->rec.uuids[0] + 1) + 1), *p = out;

	for (size_t i = 0; out && i < n; i++)
		p += sprintf(p, "%s%s", i ? "," : "", l->rec.uuids[i]);
	return out;
}

/* The job started as the request waits (acquire_opts' prespawn), named to
 * the broker to place it: 1, or -1 (none; the grant starts one). */
static int preplace(const struct acquire_opts *opts, int fd)
{
	pid_t pid = opts->prespawn(opts->spawn_data, fd);
	json_t *msg;

	if (pid <= 0)
		return -1;
	msg = json_object();
	json_object_set_new(msg, "op", json_string("preplace"));
	json_object_set_new(msg, "pid", json_integer(pid));
	if (opts->prespawn_keeps)
		json_object_set_new(msg, "keep", json_true());
	broker_send(fd, msg);
	json_decref(msg);
	return 1;
}

/* The grant is the lease's one record (record.h), with its token and each
 * GPU's memory. */
static struct gm_lease *lease_from_grant(json_t *msg, const char *path, int fd,
                                         const struct pick_env *env, const struct gm_snapshot *snap,
                                         int exclusive)
{
	json_t *gpus = json_object_get(msg, "gpus");
	struct gm_lease *l = calloc(1, sizeof *l);
	struct lease_info got;
	size_t n = json_array_size(gpus), ilen = 1, *pos;
	uint64_t min_total = 0;

	if (!l)
		return NULL;
	if (record_lease_parse(msg, &got) < 0) {
		free(l);
		return NULL;
	}
	l->fd = fd;
	l->indices_text = calloc(n + 1, 12);
	l->broker = strdup(path);
	pos = calloc(n + 1, sizeof *pos);
	if (lease_gpus_alloc(l, n) < 0 || !l->indices_text || !l->broker || !pos || !n)
		goto failed;
	str_copy(l->rec.id, sizeof l->rec.id, got.id);
	str_copy(l->token, sizeof l->token, json_string_value(json_object_get(msg, "token")) ?: "");
	l->rec.exclusive = exclusive;
	l->rec.share_mib = exclusive ? 0 : got.share_mib;
	for (size_t i = 0; i < n; i++) {
		json_t *g = json_array_get(gpus, i);
		const char *uuid = got.uuids[i][0] ? got.uuids[i] : NULL;
		const char *mig = got.migs[i][0] ? got.migs[i] : NULL;
		const struct gm_gpu *gpu = uuid && snap ? gm_snapshot_find(snap, uuid) : NULL;
		uint64_t total = (uint64_t)json_integer_value(json_object_get(g, "total_mib"));

		/* Both sides see the same machine; a GPU we do not see is one
		 * we cannot tell a child how to reach. */
		if ((snap ? !gpu : !uuid || !json_is_integer(json_object_get(g, "index"))) ||
		    (mig && (n != 1 || strncmp(mig, "MIG-", 4))))
			goto failed;
		pos[i] = snap ? (size_t)(gpu - snap->gpus) : 0;
		l->rec.indices[i] = gpu ? gpu->index : got.indices[i];
		str_copy(l->rec.uuids[i], sizeof l->rec.uuids[i], gpu ? gpu->uuid : uuid);
		str_copy(l->rec.migs[i], sizeof l->rec.migs[i], mig ? mig : "");
		if (mig && !(l->cuda_visible = strdup(mig)))
			goto failed;
		ilen += (size_t)sprintf(l->indices_text + ilen - 1, "%s%u", i ? "," : "",
		                        l->rec.indices[i]);
		if (!min_total || total < min_total)
			min_total = total;
	}
	if (!l->cuda_visible)
		l->cuda_visible = snap ? pick_env_cuda_visible(env, snap, pos, n) : uuid_list(l, n);
	if (!l->cuda_visible)
		goto failed;
	l->mem_fraction =
	    !exclusive && min_total ? (double)l->rec.share_mib / (double)min_total : 0.0;
	record_lease_release(&got);
	free(pos);
	return l;
failed:
	record_lease_release(&got);
	free(pos);
	lease_free(l);
	return NULL;
}

/* A place kept in the broker's line for a request that did not fit. */
struct broker_place {
	int fd;
	char token[40]; /* the broker's place token, "" none yet */
	char *key;      /* the request and command it waits for */
	char *why;      /* what the broker last said it waits for */
	int prespawned; /* a job started early holds fd too (opts->prespawn) */
	struct broker_buf buf;
};

int broker_place_fd(const struct broker_place *place)
{
	return place->fd;
}

void broker_place_free(struct broker_place *place)
{
	if (!place)
		return;
	if (place->fd >= 0)
		close(place->fd);
	free(place->key);
	free(place->why);
	free(place);
}

enum gm_err broker_acquire(const char *path, struct broker_place **place, struct gm_context *ctx,
                           const struct gm_request *req, const struct acquire_opts *opts,
                           struct gm_lease **out, char **explain, char *err, size_t len)
{
	struct pick_env env = PICK_ENV_INIT;
	struct gm_snapshot *snap = NULL;
	struct broker_place *kept = NULL;
	struct broker_buf *buf = NULL;
	char *why = NULL;
	json_t *msg = NULL, *ask = NULL;
	char token_buf[40] = "", *token = token_buf;
	int keep = !req->has_wait && opts && opts->keep_place && place;
	int tries = 0;
	int64_t deadline = req->has_wait && req->wait_ms >= 0 ? monotonic_ms() + req->wait_ms : -1;
	enum gm_err rc = GM_OK;
	int fd = -1, told = 0, prespawned = 0; /* 1 started, -1 not to be */

	*out = NULL;
	if (explain)
		*explain = NULL;
	if (keep) {
		char *key = record_place_key(req, opts->command);

		if (!key)
			return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		/* Another request now heads the caller's line: give the place up. */
		if (*place && strcmp((*place)->key, key)) {
			broker_place_free(*place);
			*place = NULL;
		}
		kept = *place;
		*place = NULL;
		if (!kept) {
			kept = calloc(1, sizeof *kept);
			if (!kept) {
				free(key);
				return gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
			}
			kept->fd = -1;
			kept->key = key;
		} else {
			free(key);
		}
		/* Until the broker answers a new place; a kept one only looks. */
		deadline =
		    kept->fd >= 0 ? monotonic_ms() : monotonic_ms() + BROKER_CONNECT_PATIENCE_MS;
	}
	/* Our own snapshot: the broker chooses, but only we know how a
	 * child of ours must name the GPUs (an inherited allocation).  With
	 * none inherited, the grant's UUIDs and indices say all: no round
	 * trip for a reading. */
	if (opts && opts->snapshot) {
		snap = (struct gm_snapshot *)opts->snapshot;
	} else if (getenv("CUDA_VISIBLE_DEVICES")) {
		/* Only the GPUs' names matter here: any age will do. */
		rc = snapshot_take_aged(ctx, 0, 0, -1, &snap, err, len);
		if (rc != GM_OK) {
			snap = NULL;
			goto done;
		}
	}
	if (pick_env_init(&env, snap) < 0) {
		rc = gm_fail(GM_ERR_NOMEM, err, len, "out of memory");
		goto done;
	}
	if (kept)
		token = kept->token;
	if (kept && kept->fd >= 0) {
		fd = kept->fd;
		buf = &kept->buf;
		why = kept->why;
		kept->why = NULL;
		told = 1;
		prespawned = kept->prespawned;
	} else {
		buf = kept ? &kept->buf : calloc(1, sizeof *buf);
		msg = json_object();
		fd = broker_request_start(path, buf, msg, "acquire", &rc, err, len);
		if (fd < 0)
			goto done;
		json_object_set_new(msg, "request", record_request_json(req));
		json_object_set_new(msg, "wait", json_boolean(req->has_wait || keep));
		if (keep)
			json_object_set_new(msg, "queued_job", json_true());
		if (opts && opts->command)
			json_object_set_new(msg, "command", json_string(opts->command));
		if (env.usable)
			json_object_set_new(msg, "usable", record_usable_json(env.usable, snap));
		if (env.mig_usable)
			json_object_set_new(msg, "usable_migs",
			                    record_usable_migs_json(env.mig_usable, snap));
		if (opts && opts->reserve_ms > 0)
			json_object_set_new(msg, "reserve_ms", json_integer(opts->reserve_ms));
		/* Inside one's own reservation: its GPUs are ours (the broker
		 * checks that it is). */
		if (getenv("GPUMAN_RESERVATION") && *getenv("GPUMAN_RESERVATION"))
			json_object_set_new(msg, "within",
			                    json_string(getenv("GPUMAN_RESERVATION")));
		/* A place kept in a broker that has restarted since. */
		if (token[0])
			json_object_set_new(msg, "place", json_string(token));
		if (broker_send(fd, msg) < 0) {
			rc = broker_send_failed(fd, path, err, len);
			goto done;
		}
		ask = msg; /* asked again if the broker restarts */
		msg = NULL;
	}
	for (;;) {
		const char *op;
		int got = next_message(fd, buf, ctx->cancel_fd, opts ? opts->interrupted : NULL,
		                       deadline, &msg);

		if (got == 0 && keep && told) {
			/* Still in line: keep the place for the next try, and
			 * the job started early with it. */
			kept->fd = fd;
			kept->prespawned = prespawned;
			prespawned = 0;
			kept->why = why;
			why = NULL;
			*place = kept;
			kept = NULL;
			fd = -1;
			rc = gm_fail(GM_ERR_UNAVAILABLE, err, len, "no GPU meets the request now");
			if (explain && kept == NULL && (*place)->why)
				*explain = strdup((*place)->why);
			break;
		}
		if (got == 0) {
			char waited[32];

			duration_text(waited, sizeof waited, req->wait_ms);
			rc = gm_fail(GM_ERR_TIMEOUT, err, len,
			             "no GPU met the request within the wait (%s)", waited);
			break;
		}
		if (got == -2) {
			rc = gm_fail(GM_ERR_INTERRUPTED, err, len, "interrupted while waiting");
			break;
		}
		if (got < 0 && ask && req->has_wait && tries++ < RECONNECT_TRIES) {
			/* The broker went away (a crash, a restart, an upgrade): the
			 * one that follows kept our place; ask it with the token. */
			close(fd);
			buf->len = 0;
			fd = broker_connect(path, err, len);
			if (fd < 0) {
				rc = GM_ERR_STATE;
				break;
			}
			if (token[0])
				json_object_set_new(ask, "place", json_string(token));
			/* The early job held the old connection: it ends, and
			 * the grant starts one as without. */
			if (prespawned > 0 && opts->prespawn_drop)
				opts->prespawn_drop(opts->spawn_data);
			prespawned = -1;
			/* A connection the dying broker took into its backlog
			 * fails here, or on the next read: then we try again. */
			broker_send(fd, ask);
			continue;
		}
		if (got < 0 && keep) {
			/* The broker went away (it restarts): the next try asks
			 * again with the place's token, if we were told one. */
			rc = gm_fail(GM_ERR_UNAVAILABLE, err, len,
			             "the lease broker at '%s' restarts", path);
			kept->prespawned = 0; /* dropped below, with its connection */
			if (kept->token[0]) {
				close(fd);
				fd = -1;
				kept->fd = -1;
				kept->buf.len = 0;
				free(kept->why);
				kept->why = why;
				why = NULL;
				*place = kept;
				kept = NULL;
			}
			break;
		}
		if (got < 0) {
			rc = gm_fail(
			    GM_ERR_STATE, err, len,
			    "the lease broker at '%s' went away while we waited (it restarts "
			    "with its leases; try again)",
			    path);
			break;
		}
		op = json_string_value(json_object_get(msg, "op"));
		if (!strcmp(op, "queued")) {
			const char *w = json_string_value(json_object_get(msg, "why"));
			const char *t = json_string_value(json_object_get(msg, "place"));

			if (t)
				str_copy(token, sizeof token_buf, t);
			tries = 0;
			free(why);
			why = strdup(w ? w : "");
			if (!told && opts && opts->on_wait && !keep)
				opts->on_wait(opts->on_wait_data, why ? why : "");
			if (!prespawned && opts && opts->prespawn &&
			    json_is_true(json_object_get(msg, "preplace")))
				prespawned = preplace(opts, fd);
			told = 1;
			if (keep)
				deadline = monotonic_ms();
		} else if (!strcmp(op, "refused")) {
			const char *e = json_string_value(json_object_get(msg, "error"));
			const char *x = json_string_value(json_object_get(msg, "explain"));

			rc = (enum gm_err)json_integer_value(json_object_get(msg, "code"));
			if (rc == GM_OK)
				rc = GM_ERR_STATE;
			gm_fail(rc, err, len, "%s", e ? e : "refused by the lease broker");
			if (explain && x && *x)
				*explain = strdup(x);
			break;
		} else if (!strcmp(op, "granted")) {
			struct gm_lease *l =
			    lease_from_grant(msg, path, fd, &env, snap, !req->share);
			pid_t job_pid = 0;
			int sent;

			if (!l) {
				rc =
				    gm_fail(GM_ERR_NOMEM, err, len,
				            "the lease broker granted GPUs this process cannot see "
				            "or name (out of memory?)");
				break;
			}
			fd = -1; /* the lease's now */
			if (kept)
				kept->fd = -1;
			l->placed = prespawned > 0 && json_is_true(json_object_get(msg, "placed"));
			if (opts && opts->spawn &&
			    opts->spawn(opts->spawn_data, l, &job_pid, err, len) < 0) {
				broker_release(l);
				lease_free(l);
				rc = GM_ERR_IO;
				break;
			}
			if (job_pid > 0) {
				json_t *job = json_object();

				json_object_set_new(job, "op", json_string("job"));
				json_object_set_new(job, "pid", json_integer(job_pid));
				sent = broker_send(l->fd, job);
				json_decref(job);
				/* Placed as it waited, but the broker restarted since
				 * the grant: the next one learns of the job (and places
				 * it, as a restored lease's) on a new connection. */
				if (sent < 0 && l->placed &&
				    broker_fence(l, job_pid, 0, err, len) < 0) {
					broker_release(l);
					lease_free(l);
					rc = GM_ERR_STATE;
					break;
				}
			}
			/* A library caller's lease: the caller itself is placed,
			 * and goes home alive when the lease ends. */
			if (!opts && broker_fence(l, getpid(), 1, err, len) < 0) {
				broker_release(l);
				lease_free(l);
				rc = GM_ERR_STATE;
				break;
			}
			*out = l;
			rc = GM_OK;
			break;
		}
		json_decref(msg);
		msg = NULL;
	}
	if (rc == GM_ERR_TIMEOUT && explain && !*explain && why && *why)
		*explain = strdup(why);
done:
	/* Its copy of the connection would keep us in the line. */
	if (rc != GM_OK && prespawned > 0 && opts->prespawn_drop)
		opts->prespawn_drop(opts->spawn_data);
	if (fd >= 0)
		close(fd); /* leaves the line, or ends a lease granted meanwhile */
	if (kept) {
		kept->fd = -1;
		broker_place_free(kept);
	} else if (!keep) {
		free(buf);
	}
	json_decref(msg);
	json_decref(ask);
	free(why);
	pick_env_release(&env);
	if (!(opts && opts->snapshot))
		gm_snapshot_free(snap);
	return rc;
}

/* The release itself (broker_release()). */
static void release_on(struct gm_lease *lease)
{
	json_t *msg = json_object();
	int fd;

	json_object_set_new(msg, "op", json_string("release"));
	if (lease->fd >= 0 && broker_send(lease->fd, msg) == 0) {
		/* Wait for the broker to take it: a waiter it wakes must not
		 * find us still there, and our close alone would not end a
		 * lease that a child of ours still holds. */
		struct pollfd pfd = {lease->fd, POLLIN, 0};
		char c;

		if (poll(&pfd, 1, 1000) > 0 && recv(lease->fd, &c, 1, MSG_DONTWAIT) > 0) {
			json_decref(msg);
			return;
		}
	}
	/* The connection is dead: the broker was restarted and restored our
	 * lease.  Prove it is ours with the token. */
	fd = broker_connect(lease->broker, NULL, 0);
	if (fd >= 0) {
		struct broker_buf *buf = calloc(1, sizeof *buf);
		json_t *reply = NULL;

		json_object_set_new(msg, "id", json_string(lease->rec.id));
		json_object_set_new(msg, "token", json_string(lease->token));
		if (buf && broker_send(fd, msg) == 0)
			next_message(fd, buf, -1, NULL, monotonic_ms() + 1000, &reply);
		json_decref(reply);
		free(buf);
		close(fd);
	}
	json_decref(msg);
}

void broker_release(struct gm_lease *lease)
{
	release_on(lease);
	if (lease->fd >= 0)
		close(lease->fd);
	lease->fd = -1;
}

enum gm_err broker_release_id(const char *path, const char *id, char *err, size_t len)
{
	struct broker_buf *buf = calloc(1, sizeof *buf);
	json_t *msg = json_object(), *reply = NULL;
	enum gm_err rc = GM_OK;
	int fd = -1;

	fd = broker_request_start(path, buf, msg, "release", &rc, err, len);
	if (fd < 0)
		goto done;
	json_object_set_new(msg, "id", json_string(id));
	if (broker_send(fd, msg) < 0) {
		rc = broker_send_failed(fd, path, err, len);
		goto done;
	}
	if (next_message(fd, buf, -1, NULL, monotonic_ms() + BROKER_CONNECT_PATIENCE_MS, &reply) !=
	    1) {
		rc = gm_fail(GM_ERR_STATE, err, len, "the lease broker at '%s' did not answer",
		             path);
		goto done;
	}
	if (strcmp(json_string_value(json_object_get(reply, "op")) ?: "", "released"))
		rc = gm_fail((enum gm_err)json_integer_value(json_object_get(reply, "code"))
		                 ?: GM_ERR_INVALID,
		             err, len, "%s",
		             json_string_value(json_object_get(reply, "error")) ?: "refused");
done:
	if (fd >= 0)
		close(fd);
	json_decref(msg);
	json_decref(reply);
	free(buf);
	return rc;
}
