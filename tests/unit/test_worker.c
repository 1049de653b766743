/*
 * test_worker.c - the broker's worker thread (broker/worker.c): the order
 * in which it runs the kernel calls it is given.  A grant's placement must
 * not wait behind the early placements of a whole line of waiters, yet the
 * pieces of one lease run in the order asked (an early one not begun gives
 * way to its key's next); settling a key cancels what of it is still
 * queued.  The thread is held on a pipe while the queue is
 * built, so the order tested is the queue's, not the timing's.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>
#include "../../broker/daemon.h"

void daemon_say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static char ran[64];      /* names of the pieces run, in order (worker thread) */
static char finished[64]; /* names done was called for ('x' cancelled) */
static int hold[2];       /* the first piece waits on it */
static volatile int held; /* the first piece runs, and waits */

struct piece {
	struct work w;
	char name;
};

static void run_piece(struct work *job)
{
	struct piece *p = (struct piece *)job;
	char c;

	if (p->name == '0') {
		__atomic_store_n(&held, 1, __ATOMIC_SEQ_CST);
		if (read(hold[0], &c, 1) != 1)
			fail_msg("the held piece was not let go");
	}
	ran[strlen(ran)] = p->name;
}

static void done_piece(struct daemon *d, struct work *job)
{
	struct piece *p = (struct piece *)job;

	(void)d;
	finished[strlen(finished)] = job->cancelled ? 'x' : p->name;
}

static void submit(struct daemon *d, struct piece *p, char name, const char *key, int early)
{
	memset(p, 0, sizeof *p);
	p->name = name;
	snprintf(p->w.key, sizeof p->w.key, "%s", key);
	p->w.run = run_piece;
	p->w.done = done_piece;
	p->w.early = early;
	daemon_work_submit(d, &p->w);
}

/* Wait on the epoll as the broker's loop does until n pieces are done. */
static void drain(struct daemon *d, size_t n)
{
	for (int i = 0; i < 500 && strlen(finished) < n; i++) {
		struct epoll_event ev;

		if (epoll_wait(d->epfd, &ev, 1, 10) == 1)
			daemon_worker_ready(d);
	}
	assert_int_equal(strlen(finished), n);
}

static void start(struct daemon *d)
{
	memset(d, 0, sizeof *d);
	memset(ran, 0, sizeof ran);
	memset(finished, 0, sizeof finished);
	held = 0;
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	assert_true(d->epfd >= 0);
	assert_int_equal(pipe(hold), 0);
	assert_int_equal(daemon_worker_start(d), 0);
}

static void finish(struct daemon *d)
{
	daemon_worker_stop(d);
	close(d->epfd);
	close(hold[0]);
	close(hold[1]);
}

/* A queue to build: each piece's name, its key, and whether it is early. */
struct step {
	char name;
	const char *key;
	int early;
};

static void submit_all(struct daemon *d, struct piece *p, const struct step *steps, size_t n)
{
	for (size_t i = 0; i < n; i++)
		submit(d, &p[i], steps[i].name, steps[i].key, steps[i].early);
}

static void test_grants_before_early_placements(void **state)
{
	/* the held piece; early placements of waiters a and b; a grant's
	 * placement (lease g) goes before them all; lease a's grant takes the
	 * place of a's own early placement, not begun (cancelled), before b's;
	 * another waiter c; another grant after the grants before it */
	static const struct step steps[] = {{'0', "hold", 0}, {'a', "a", 1}, {'b', "b", 1},
	                                    {'g', "g", 0},    {'A', "a", 0}, {'c', "c", 1},
	                                    {'h', "h", 0}};
	struct daemon d;
	struct piece p[7];

	(void)state;
	start(&d);
	submit_all(&d, p, steps, 7);
	assert_int_equal(write(hold[1], "", 1), 1);
	drain(&d, 7);
	assert_string_equal(ran, "0gAhbc");
	assert_string_equal(finished, "x0gAhbc");
	finish(&d);
}

static void test_an_early_piece_begun_goes_on_before_its_keys_next(void **state)
{
	/* a's early placement runs (held) when its grant's comes: it is not
	 * cancelled, and the grant's runs after it, before b's early one */
	static const struct step steps[] = {{'0', "a", 1}, {'b', "b", 1}, {'A', "a", 0}};
	struct daemon d;
	struct piece p[3];

	(void)state;
	start(&d);
	submit(&d, &p[0], steps[0].name, steps[0].key, steps[0].early);
	for (int i = 0; i < 5000 && !__atomic_load_n(&held, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	submit_all(&d, p + 1, steps + 1, 2);
	assert_int_equal(write(hold[1], "", 1), 1);
	drain(&d, 3);
	assert_string_equal(ran, "0Ab");
	assert_string_equal(finished, "0Ab");
	finish(&d);
}

static void test_settle_cancels_the_keys_queued_pieces(void **state)
{
	static const struct step steps[] = {
	    {'0', "hold", 0}, {'a', "a", 1}, {'b', "b", 1}, {'A', "a", 0}};
	struct daemon d;
	struct piece p[4];

	(void)state;
	start(&d);
	submit_all(&d, p, steps, 4);
	/* a's lease ends: its queued pieces are cancelled, done called for
	 * them before settle returns; b's is untouched */
	daemon_work_settle(&d, "a");
	assert_string_equal(finished, "xx");
	assert_int_equal(write(hold[1], "", 1), 1);
	drain(&d, 4);
	assert_string_equal(ran, "0b");
	assert_string_equal(finished, "xx0b");
	finish(&d);
}

static void *let_go_later(void *arg)
{
	(void)arg;
	usleep(50 * 1000);
	if (write(hold[1], "", 1) != 1)
		abort();
	return NULL;
}

static void test_stop_cancels_what_is_queued(void **state)
{
	static const struct step steps[] = {{'0', "hold", 0}, {'a', "a", 1}, {'g', "g", 0}};
	struct daemon d;
	struct piece p[3];
	pthread_t later;

	(void)state;
	start(&d);
	submit_all(&d, p, steps, 3);
	for (int i = 0; i < 5000 && !__atomic_load_n(&held, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	/* the piece running ends first; the others never run */
	assert_int_equal(pthread_create(&later, NULL, let_go_later, NULL), 0);
	daemon_worker_stop(&d);
	pthread_join(later, NULL);
	assert_string_equal(ran, "0");
	assert_string_equal(finished, "xx0");
	finish(&d); /* a second stop does nothing */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_grants_before_early_placements),
	    cmocka_unit_test(test_an_early_piece_begun_goes_on_before_its_keys_next),
	    cmocka_unit_test(test_settle_cancels_the_keys_queued_pieces),
	    cmocka_unit_test(test_stop_cancels_what_is_queued),
	};

	return cmocka_run_group_tests_name("worker", tests, NULL, NULL);
}
