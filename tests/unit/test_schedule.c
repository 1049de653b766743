/*
 * test_schedule.c - a round of placing (engine_schedule) against a scripted
 * placement: jobs start in order, a blocked head stops the round, a job
 * that must wait keeps its place while later ones start, -j and a full
 * placement stop it, and the in-memory queue keeps what is left in order.
 * A started job has its go before the next job is placed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "internal.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The script: what place() answers for job id (1..8), and what it saw. */
static enum place answer[9];
static int64_t tried[16];
static size_t ntried;
static size_t full_after; /* full() once this many started; 0 never */
static size_t started;
/* the started jobs' slots, and the reading ends of their go pipes */
static struct slot slot_of[8], *slots[8];
static int go_read[8], go_seen[8];
static size_t late_go; /* placements while an earlier start had no go yet */

static int fake_full(struct engine *e)
{
	(void)e;
	return full_after && started >= full_after;
}

static enum place fake_place(struct engine *e, int64_t id)
{
	int p[2];
	char byte;

	tried[ntried++] = id;
	for (size_t i = 0; i < e->nslots; i++) {
		if (go_seen[i])
			continue;
		if (slots[i]->go_fd >= 0 || read(go_read[i], &byte, 1) != 1)
			late_go++;
		go_seen[i] = 1;
	}
	if (answer[id] == PLACE_STARTED) {
		assert_int_equal(pipe(p), 0);
		memset(&slot_of[e->nslots], 0, sizeof slot_of[0]);
		slot_of[e->nslots].go_fd = p[1];
		go_read[e->nslots] = p[0];
		go_seen[e->nslots] = 0;
		slots[e->nslots] = &slot_of[e->nslots];
		e->slots = slots;
		started++;
		e->nslots++; /* what -j counts */
	}
	return answer[id];
}

static const struct placement fake = {.name = "fake", .full = fake_full, .place = fake_place};

static void test_rounds(void **state)
{
	static const struct {
		const char *what;
		const char *answers; /* per id 1..6: S started, K skipped, L later, B blocked */
		unsigned max_running;
		size_t full_after;
		const char *tried; /* ids place() was asked for, in order */
		const char *left;  /* the queue afterwards */
	} rows[] = {
	    {"all start", "SSSSSS", 0, 0, "123456", ""},
	    {"the head blocks: first come, first served", "SBSSSS", 0, 0, "12", "23456"},
	    {"one waits in its place, later ones start", "SLSSSS", 0, 0, "123456", "2"},
	    {"two wait, then a block", "LLSBSS", 0, 0, "1234", "12456"},
	    {"skipped jobs leave the queue", "KSKLKS", 0, 0, "123456", "4"},
	    {"-j 2", "SSSSSS", 2, 0, "12", "3456"},
	    {"-j 2 counts only started ones", "LSLSSS", 2, 0, "1234", "1356"},
	    {"the placement is full after 3", "SLSSSS", 0, 3, "1234", "256"},
	};

	(void)state;
	for (size_t r = 0; r < ARRAY_LEN(rows); r++) {
		struct engine_config cfg;
		struct engine e;
		int64_t queue[6] = {1, 2, 3, 4, 5, 6};
		char got[16] = "", left[16] = "";

		memset(&cfg, 0, sizeof cfg);
		memset(&e, 0, sizeof e);
		cfg.max_running = rows[r].max_running;
		e.cfg = &cfg;
		e.place = &fake;
		e.queue = queue;
		e.qcount = e.qcap = 6;
		for (size_t i = 0; i < 6; i++) {
			const char *c = "SKLB";

			answer[i + 1] = (enum place)(strchr(c, rows[r].answers[i]) - c);
		}
		ntried = 0;
		started = 0;
		late_go = 0;
		full_after = rows[r].full_after;
		engine_schedule(&e);
		for (size_t i = 0; i < e.nslots; i++)
			close(go_read[i]);
		for (size_t i = 0; i < ntried; i++)
			got[i] = (char)('0' + tried[i]);
		for (size_t i = e.qhead, k = 0; i < e.qcount; i++)
			left[k++] = (char)('0' + e.queue[i]);
		if (strcmp(got, rows[r].tried) || strcmp(left, rows[r].left) ||
		    e.counts.queued != strlen(rows[r].left) || late_go)
			fail_msg("%s: tried %s, left %s (%zu queued), %zu placed before a go",
			         rows[r].what, got, left, e.counts.queued, late_go);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rounds),
	};

	return cmocka_run_group_tests_name("schedule", tests, NULL, NULL);
}
