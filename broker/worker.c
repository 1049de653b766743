/*
 * worker.c - the broker's slow kernel calls, off the event loop.
 *
 * Moving a process into a cgroup waits for an RCU grace period (the
 * kernel's cgroup_threadgroup_rwsem): measured on these machines, a lone
 * move takes 4-8 ms, and 20 ms under load, where everything else the loop
 * does for a hand-off takes well under one.  On the loop, each job's
 * placement delayed every other user's grant, release and answer by that
 * much.  Here one thread makes those calls in the order asked; the loop
 * goes on, and hears through an eventfd in its epoll that work is done.
 * Moves that queue up behind one another share a grace period, so a burst
 * of placements costs about one.
 *
 * A piece of work has a key (a lease's id): daemon_work_settle(key)
 * cancels what is still queued under it and waits for the one running, so
 * that a lease's end never overtakes its own placement.  An early piece (a
 * waiter's job placed as it waits) goes after all others; one of its key
 * that cannot wait (its grant's placement, its end) replaces it if it has
 * not begun, rather than waiting behind the whole line's early pieces.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "daemon.h"

struct daemon_worker {
	enum ev_kind kind; /* first: epoll's data points here (EV_WORKER) */
	int efd;
	pthread_t thread;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t wake; /* loop -> worker: work queued, or stop */
	pthread_cond_t ran;  /* worker -> a settling loop: one piece done */
	int stop;
	struct work *queue, *queue_tail; /* to run, in order */
	struct work *running;
	struct work *finished, *finished_tail; /* run or cancelled; done not yet called */
};

static void finish_locked(struct daemon_worker *w, struct work *job)
{
	job->next = NULL;
	if (w->finished_tail)
		w->finished_tail->next = job;
	else
		w->finished = job;
	w->finished_tail = job;
}

static void *worker_main(void *arg)
{
	struct daemon_worker *w = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		struct work *job;

		while (!w->queue && !w->stop)
			pthread_cond_wait(&w->wake, &w->mu);
		if (w->stop)
			break;
		job = w->queue;
		w->queue = job->next;
		if (!w->queue)
			w->queue_tail = NULL;
		w->running = job;
		pthread_mutex_unlock(&w->mu);
		job->run(job);
		pthread_mutex_lock(&w->mu);
		w->running = NULL;
		finish_locked(w, job);
		pthread_cond_broadcast(&w->ran);
		if (write(w->efd, &one, sizeof one) < 0) {
			/* The counter is full: the loop has a wake-up pending. */
		}
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int daemon_worker_start(struct daemon *d)
{
	struct daemon_worker *w = calloc(1, sizeof *w);
	struct epoll_event ev = {EPOLLIN, {.ptr = NULL}};

	if (!w)
		return -1;
	d->worker = w;
	w->kind = EV_WORKER;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->wake, NULL);
	pthread_cond_init(&w->ran, NULL);
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ev.data.ptr = w;
	if (w->efd < 0 || epoll_ctl(d->epfd, EPOLL_CTL_ADD, w->efd, &ev) < 0) {
		daemon_say("cannot watch the worker thread: %s", strerror(errno));
		return -1;
	}
	if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
		daemon_say("cannot start the worker thread");
		return -1;
	}
	w->started = 1;
	return 0;
}

void daemon_work_submit(struct daemon *d, struct work *job)
{
	struct daemon_worker *w = d->worker;
	struct work **at = &w->queue;
	uint64_t one = 1;
	int dropped = 0;

	job->next = NULL;
	job->cancelled = 0;
	pthread_mutex_lock(&w->mu);
	/* A piece that may not wait takes the place of its key's early one
	 * not begun yet (a waiter granted, or gone, before its job was placed
	 * early): that one's done is told it was cancelled. */
	for (struct work **pp = &w->queue; !job->early && *pp;) {
		struct work *q = *pp;

		if (!q->early || strcmp(q->key, job->key)) {
			pp = &q->next;
			continue;
		}
		*pp = q->next;
		q->cancelled = 1;
		finish_locked(w, q);
		dropped = 1;
	}
	/* After every piece that may not wait and every one of its own key
	 * (a lease's pieces run in order): a grant's placement is not queued
	 * behind the early placements of a whole line of waiters. */
	for (struct work **pp = &w->queue; *pp; pp = &(*pp)->next)
		if (job->early || !(*pp)->early || !strcmp((*pp)->key, job->key))
			at = &(*pp)->next;
	job->next = *at;
	*at = job;
	w->queue_tail = NULL;
	for (struct work *q = w->queue; q; q = q->next)
		w->queue_tail = q;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->mu);
	if (dropped && write(w->efd, &one, sizeof one) < 0) {
		/* The counter is full: the loop has a wake-up pending. */
	}
}

/* Call done for what is finished (all of it, or key's only), in order. */
static void call_done(struct daemon *d, const char *key)
{
	struct daemon_worker *w = d->worker;
	struct work *mine = NULL, **tail = &mine;

	pthread_mutex_lock(&w->mu);
	for (struct work **pp = &w->finished; *pp;) {
		struct work *job = *pp;

		if (key && strcmp(job->key, key)) {
			pp = &job->next;
			continue;
		}
		*pp = job->next;
		job->next = NULL;
		*tail = job;
		tail = &job->next;
	}
	w->finished_tail = NULL;
	for (struct work *job = w->finished; job; job = job->next)
		w->finished_tail = job;
	pthread_mutex_unlock(&w->mu);
	while (mine) {
		struct work *job = mine;

		mine = job->next;
		job->done(d, job);
	}
}

void daemon_worker_ready(struct daemon *d)
{
	uint64_t n;

	if (read(d->worker->efd, &n, sizeof n) < 0) {
		/* Nothing counted: a settle took it already. */
	}
	call_done(d, NULL);
}

void daemon_work_settle(struct daemon *d, const char *key)
{
	struct daemon_worker *w = d->worker;

	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	for (struct work **pp = &w->queue; *pp;) {
		struct work *job = *pp;

		if (strcmp(job->key, key)) {
			pp = &job->next;
			continue;
		}
		*pp = job->next;
		job->cancelled = 1;
		finish_locked(w, job);
	}
	w->queue_tail = NULL;
	for (struct work *job = w->queue; job; job = job->next)
		w->queue_tail = job;
	while (w->running && !strcmp(w->running->key, key))
		pthread_cond_wait(&w->ran, &w->mu);
	pthread_mutex_unlock(&w->mu);
	call_done(d, key);
}

void daemon_worker_stop(struct daemon *d)
{
	struct daemon_worker *w = d->worker;

	if (!w)
		return;
	if (w->started) {
		pthread_mutex_lock(&w->mu);
		/* What is queued is cancelled; the piece running ends first. */
		for (struct work *job = w->queue, *next; job; job = next) {
			next = job->next;
			job->cancelled = 1;
			finish_locked(w, job);
		}
		w->queue = w->queue_tail = NULL;
		w->stop = 1;
		pthread_cond_signal(&w->wake);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->thread, NULL);
	}
	call_done(d, NULL);
	d->worker = NULL;
	if (w->efd >= 0)
		close(w->efd);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->wake);
	pthread_cond_destroy(&w->ran);
	free(w);
}
