/*
 * test_line.c - the leasing rules (lib/line.c) case by case, as both the
 * broker and the daemonless registry apply them: grants within one pass,
 * the hold-back of later waiters, a waiter that does not wait, max_gpus
 * (counting grants of the same pass), keep_out, a reservation that only
 * narrows, max_gpu_hours from a ledger, a saturated line, shares with
 * memory not yet allocated, and MIG slices.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "config.h"
#include "line.h"
#include "policy_trial.h"

#define ALICE 60001u
#define BOB 60002u
#define NOW 1000000000000LL

static char dir[] = "/tmp/gm-test-line.XXXXXX";

struct fixture {
	struct gm_snapshot snap;
	struct config cfg;
	struct gm_request req[4];
	struct line_lease leases[4];
	struct line_waiter waiters[4];
	struct line_decision out[4];
	struct line_input in;
	char uuids[4][4][96];
	char migs[4][4][96];
};

static void limits(struct fixture *f, const char *text)
{
	char path[128], err[256];
	FILE *fp;

	snprintf(path, sizeof path, "%s/gpuman.conf", dir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
	setenv("GPUMAN_CONFIG", path, 1);
	config_release(&f->cfg);
	if (config_load(&f->cfg, 0, err, sizeof err) != GM_OK)
		fail_msg("config: %s", err);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	if (!f)
		return -1;
	if (strstr(dir, "XXXXXX") && !mkdtemp(dir))
		return -1;
	fake_snapshot_init(&f->snap);
	for (unsigned i = 0; i < 4; i++) {
		fake_gpu(&f->snap, i, NULL, 16000, 16000 - i, 0, 50000, 250000, i);
		f->req[i] = request();
	}
	f->in.snap = &f->snap;
	f->in.cfg = &f->cfg;
	f->in.now_ms = NOW;
	f->in.leases = f->leases;
	f->in.waiters = f->waiters;
	*state = f;
	limits(f, "");
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	line_decisions_release(f->out, f->in.waiter_count);
	for (size_t i = 0; i < 4; i++)
		release_request(&f->req[i]);
	config_release(&f->cfg);
	fake_snapshot_release(&f->snap);
	free(f);
	return 0;
}

/* Lease i of uid on the GPUs of indices ("0,1"); slice (may be NULL) on the
 * first. */
static void add_lease(struct fixture *f, unsigned uid, const char *user, const char *gpus,
                      int reservation, const char *slice)
{
	size_t i = f->in.lease_count++, n = 0;
	struct line_lease *l = &f->leases[i];

	for (const char *p = gpus; *p; p++)
		if (*p >= '0' && *p <= '9')
			fake_uuid(f->uuids[i][n++], 96, (unsigned)(*p - '0'));
	if (slice)
		snprintf(f->migs[i][0], 96, "%s", slice);
	*l = (struct line_lease){reservation ? "R1" : "L1",
	                         uid,
	                         user,
	                         (int)(100 + i),
	                         0,
	                         reservation,
	                         reservation ? NOW + 60000 : 0,
	                         1,
	                         0,
	                         n,
	                         (const char(*)[96])f->uuids[i],
	                         (const char(*)[96])f->migs[i]};
}

static struct line_waiter *add_waiter(struct fixture *f, unsigned uid, const char *user, int wait)
{
	size_t i = f->in.waiter_count++;

	f->waiters[i] =
	    (struct line_waiter){uid, user, (int)(10 + i), &f->req[i], NULL, NULL, NULL, wait, 0};
	return &f->waiters[i];
}

static void decide(struct fixture *f)
{
	assert_int_equal(line_decide(&f->in, f->out), 0);
}

/* The NVML indices a grant got, "0,2". */
static const char *granted(struct fixture *f, size_t w)
{
	static char buf[64];
	size_t used = 0;

	buf[0] = '\0';
	assert_int_equal(f->out[w].verdict, LINE_GRANT);
	for (size_t i = 0; i < f->out[w].res.count; i++)
		used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%u", i ? "," : "",
		                         f->snap.gpus[f->out[w].res.chosen[i]].index);
	return buf;
}

static void test_grants_in_one_pass_see_each_other(void **state)
{
	struct fixture *f = *state;

	add_waiter(f, ALICE, "alice", 1);
	add_waiter(f, BOB, "bob", 1);
	f->req[1].count = 2;
	decide(f);
	assert_string_equal(granted(f, 0), "0"); /* most free */
	assert_string_equal(granted(f, 1), "1,2");
}

static void test_a_waiter_holds_back_its_gpus_from_those_behind(void **state)
{
	struct fixture *f = *state;
	char *why;

	add_lease(f, 60009, "carol", "012", 0, NULL);
	f->req[add_waiter(f, ALICE, "alice", 1) - f->waiters].count = 2;
	set_list(&f->req[0].only, "2,3");
	add_waiter(f, BOB, "bob", 1);
	decide(f);
	assert_int_equal(f->out[0].verdict, LINE_WAIT);
	assert_int_equal(f->out[0].position, 1);
	assert_int_equal(f->out[1].verdict, LINE_WAIT);
	assert_int_equal(f->out[1].position, 2);
	why = line_explain(&f->snap, &f->out[1], 1);
	assert_non_null(
	    strstr(why, "GPU 3 (Fake GPU 3): held for an earlier waiter: queued for an earlier "
	                "request: alice's 2 "
	                "GPUs exclusive (pid 10)"));
	assert_non_null(strstr(why, "leased exclusively by carol (pid 100)"));
	free(why);
}

static void test_a_request_that_does_not_wait_holds_nothing_back(void **state)
{
	struct fixture *f = *state;

	add_lease(f, 60009, "carol", "012", 0, NULL);
	f->req[add_waiter(f, ALICE, "alice", 0) - f->waiters].count = 2;
	add_waiter(f, BOB, "bob", 1);
	decide(f);
	assert_int_equal(f->out[0].verdict, LINE_WAIT);
	assert_int_equal(f->out[0].position, 0);
	assert_string_equal(granted(f, 1), "3");
}

static void test_max_gpus_counts_leases_and_this_pass_and_blocks_nobody(void **state)
{
	struct fixture *f = *state;

	limits(f, "[limits]\nmax_gpus = 2\n");
	add_lease(f, ALICE, "alice", "0", 0, NULL);
	add_waiter(f, ALICE, "alice", 1); /* 1 + 1: granted */
	add_waiter(f, ALICE, "alice", 1); /* 2 held now: waits for her limit */
	f->req[add_waiter(f, ALICE, "alice", 1) - f->waiters].count = 3; /* never */
	add_waiter(f, BOB, "bob", 1);
	decide(f);
	assert_string_equal(granted(f, 0), "1");
	assert_int_equal(f->out[1].verdict, LINE_WAIT);
	assert_true(f->out[1].capped);
	assert_non_null(strstr(f->out[1].why, "max_gpus: holds 2 GPUs already, the limit is 2"));
	assert_int_equal(f->out[2].verdict, LINE_NEVER);
	assert_non_null(strstr(f->out[2].why, "max_gpus: asks 3 GPUs, the limit is 2"));
	/* the capped waiter held nothing back */
	assert_string_equal(granted(f, 3), "2");
}

static void test_keep_out_is_never_given(void **state)
{
	struct fixture *f = *state;
	char *why;

	limits(f, "[limits]\nkeep_out = 0\n");
	add_waiter(f, ALICE, "alice", 1);
	add_waiter(f, BOB, "bob", 1);
	set_list(&f->req[1].only, "0");
	decide(f);
	assert_string_equal(granted(f, 0), "1");
	assert_int_equal(f->out[1].verdict, LINE_NEVER);
	why = line_explain(&f->snap, &f->out[1], 1);
	assert_non_null(strstr(why, "kept out of gpuman by the admin"));
	free(why);
}

static void test_a_reservation_only_narrows(void **state)
{
	struct fixture *f = *state;
	char *why;

	limits(f, "[limits]\nmax_gpus = 2\n");
	add_lease(f, ALICE, "alice", "01", 1, NULL);
	/* inside it, excluding its GPUs: never the two others */
	add_waiter(f, ALICE, "alice", 1)->within = "R1";
	f->req[0].count = 2;
	set_list(&f->req[0].exclude, "0,1");
	/* inside it: its own GPUs, not counted twice against max_gpus */
	add_waiter(f, ALICE, "alice", 1)->within = "R1";
	f->req[1].count = 2;
	/* bob naming alice's reservation gains nothing */
	add_waiter(f, BOB, "bob", 1)->within = "R1";
	set_list(&f->req[2].only, "0");
	decide(f);
	assert_int_equal(f->out[0].verdict, LINE_NEVER);
	why = line_explain(&f->snap, &f->out[0], 2);
	assert_non_null(
	    strstr(why, "GPU 2 (Fake GPU 2): outside reservation R1, inside which it asks"));
	free(why);
	assert_string_equal(granted(f, 1), "0,1");
	assert_int_equal(f->out[2].verdict, LINE_WAIT);
	why = line_explain(&f->snap, &f->out[2], 1);
	assert_non_null(strstr(why, "alice (reservation, 60s left)"));
	free(why);
}

static void test_a_reservation_occupies_for_its_owner_outside_it(void **state)
{
	struct fixture *f = *state;

	limits(f, "[limits]\nmax_gpus = 3\n");
	add_lease(f, ALICE, "alice", "01", 1, NULL);
	f->req[add_waiter(f, ALICE, "alice", 1) - f->waiters].count = 2; /* 2 + 2 > 3 */
	add_waiter(f, ALICE, "alice", 1);
	decide(f);
	assert_int_equal(f->out[0].verdict, LINE_WAIT);
	assert_true(f->out[0].capped);
	assert_string_equal(granted(f, 1), "2");
}

static int64_t used_up(void *data, unsigned uid)
{
	(void)data;
	return uid == ALICE ? 7200000 : 0;
}

static void test_gpu_hours_from_the_ledger_hold_inside_a_reservation_too(void **state)
{
	struct fixture *f = *state;

	limits(f, "[limits]\nmax_gpu_hours = 1\n");
	add_lease(f, ALICE, "alice", "0", 1, NULL);
	add_waiter(f, ALICE, "alice", 1)->within = "R1";
	add_waiter(f, ALICE, "alice", 0);
	add_waiter(f, BOB, "bob", 1);
	/* without a ledger (the registry) the cap is not applied */
	decide(f);
	assert_string_equal(granted(f, 0), "0");
	line_decisions_release(f->out, f->in.waiter_count);
	f->in.gpu_ms_used = used_up;
	decide(f);
	assert_int_equal(f->out[0].verdict, LINE_WAIT);
	assert_true(f->out[0].capped);
	assert_non_null(strstr(f->out[0].why, "daily GPU-hours used up: 2 of 1 h (max_gpu_hours"));
	assert_int_equal(f->out[1].verdict, LINE_WAIT);
	assert_int_equal(f->out[1].position, 0);
	assert_string_equal(granted(f, 2), "1");
}

/* Waiter w waits at position behind alice's 4-GPU request, which holds
 * every GPU back, without a policy run. */
static void waits_behind_alice(const struct fixture *f, size_t w, size_t position)
{
	assert_int_equal(f->out[w].verdict, LINE_WAIT);
	assert_false(f->out[w].ran);
	assert_int_equal(f->out[w].position, position);
	assert_string_equal(
	    f->out[w].why, "every GPU it could use is held for earlier requests in line, the first "
	                   "alice's 4 GPUs exclusive (pid 10)");
}

static void test_a_saturated_line_costs_no_policy_run(void **state)
{
	struct fixture *f = *state;

	add_lease(f, 60009, "carol", "0123", 0, NULL);
	f->req[add_waiter(f, ALICE, "alice", 1) - f->waiters].count = 4;
	add_waiter(f, BOB, "bob", 1);
	add_waiter(f, BOB, "bob", 0);
	decide(f);
	assert_true(f->out[0].ran);
	waits_behind_alice(f, 1, 2);
	assert_int_equal(f->out[2].verdict, LINE_WAIT);
	assert_int_equal(f->out[2].position, 0);
}

/* A request that no GPU of the machine could ever meet is told so when it
 * asks (a new arrival), not after waiting its turn behind a full line;
 * those already in line wait on without a policy run. */
static void test_behind_a_full_line_never_is_said_to_those_who_ask(void **state)
{
	struct fixture *f = *state;

	add_lease(f, 60009, "carol", "0123", 0, NULL);
	f->req[add_waiter(f, ALICE, "alice", 1) - f->waiters].count = 4;
	add_waiter(f, BOB, "bob", 1)->ask = 1;
	f->req[1].count = 5;
	add_waiter(f, BOB, "bob", 1);
	f->req[2].count = 5;
	add_waiter(f, BOB, "bob", 1)->ask = 1;
	decide(f);
	assert_int_equal(f->out[1].verdict, LINE_NEVER);
	assert_true(f->out[1].ran);
	assert_int_equal(f->out[1].res.outcome, POLICY_NEVER);
	waits_behind_alice(f, 2, 2);
	waits_behind_alice(f, 3, 3);
}

static void test_a_share_not_yet_allocated_counts_as_pending(void **state)
{
	struct fixture *f = *state;

	add_lease(f, 60009, "carol", "0123", 0, NULL);
	f->leases[0].exclusive = 0;
	f->leases[0].share_mib = 12000;
	add_waiter(f, ALICE, "alice", 1);
	f->req[0].share = 1;
	set_size(&f->req[0].mem, "8G");
	decide(f);
	assert_int_equal(f->out[0].verdict, LINE_WAIT);
	line_decisions_release(f->out, f->in.waiter_count);
	f->req[0].mem.mib = 2048;
	add_waiter(f, BOB, "bob", 1);
	f->req[1] = f->req[0];
	f->req[1].only = (struct gpu_list)GPU_LIST_INIT;
	f->req[1].exclude = (struct gpu_list)GPU_LIST_INIT;
	decide(f);
	/* alice's share goes on the freest; bob's, behind her, sees it */
	assert_string_equal(granted(f, 0), "0");
	assert_string_equal(granted(f, 1), "1");
}

static void test_mig_slices(void **state)
{
	struct fixture *f = *state;

	fake_mig(&f->snap, 0, "1g.10gb", "a", 9984, 9984, 0);
	fake_mig(&f->snap, 0, "1g.10gb", "b", 9984, 9984, 0);
	add_lease(f, 60009, "carol", "0", 0, "MIG-a");
	add_waiter(f, ALICE, "alice", 1);
	snprintf(f->req[0].mig, sizeof f->req[0].mig, "1g.10gb");
	add_waiter(f, BOB, "bob", 1);
	snprintf(f->req[1].mig, sizeof f->req[1].mig, "1g.10gb");
	decide(f);
	assert_int_equal(f->out[0].verdict, LINE_GRANT);
	assert_true(f->out[0].res.mig);
	assert_string_equal(f->snap.migs[f->out[0].res.chosen[0]].uuid, "MIG-b");
	assert_int_equal(f->out[1].verdict, LINE_WAIT);
}

static void test_summary_and_holder_texts(void **state)
{
	struct fixture *f = *state;
	char buf[128];
	struct line_lease l = {0};

	(void)f;
	f->req[0].count = 2;
	assert_string_equal(line_summary(&f->req[0], buf, sizeof buf), "2 GPUs exclusive");
	f->req[0].count = 1;
	f->req[0].share = 1;
	set_size(&f->req[0].mem, "8G");
	assert_string_equal(line_summary(&f->req[0], buf, sizeof buf), "1 GPU, 8 GiB share");
	snprintf(f->req[0].mig, sizeof f->req[0].mig, "1g.10gb");
	assert_string_equal(line_summary(&f->req[0], buf, sizeof buf), "1 MIG slice 1g.10gb");
	l.user = "alice";
	l.pid = 4;
	l.job_pid = 5;
	line_holder(&l, NOW, buf, sizeof buf);
	assert_string_equal(buf, "alice (pid 5)");
	l.reservation = 1;
	l.expires_ms = NOW + 90500;
	line_holder(&l, NOW, buf, sizeof buf);
	assert_string_equal(buf, "alice (reservation, 90s left)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_grants_in_one_pass_see_each_other, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_a_waiter_holds_back_its_gpus_from_those_behind,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_request_that_does_not_wait_holds_nothing_back,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(
	        test_max_gpus_counts_leases_and_this_pass_and_blocks_nobody, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keep_out_is_never_given, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_reservation_only_narrows, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_reservation_occupies_for_its_owner_outside_it,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(
	        test_gpu_hours_from_the_ledger_hold_inside_a_reservation_too, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_saturated_line_costs_no_policy_run, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_behind_a_full_line_never_is_said_to_those_who_ask,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_share_not_yet_allocated_counts_as_pending, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_mig_slices, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_summary_and_holder_texts, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
