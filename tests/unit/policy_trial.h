/*
 * policy_trial.h - what the policy tests (test_policy.c, test_policy_leases.c)
 * share: a request of one GPU by memory, sizes and GPU lists parsed or the
 * test fails, the fixture every test runs on (struct trial: a fake snapshot,
 * the policy's input, a request and a result, made by trial_setup and
 * released by trial_teardown, pass or fail), and the assertions on what
 * `gpuman pick` would answer.  Include after cmocka.h.
 */
#ifndef GM_TESTS_POLICY_TRIAL_H
#define GM_TESTS_POLICY_TRIAL_H

#include "policy.h"
#include "unit.h"

static inline struct gm_request request(void)
{
	struct gm_request req;

	memset(&req, 0, sizeof req);
	req.count = 1;
	req.by = GM_BY_MEMORY;
	req.wait_ms = -1;
	return req;
}

static inline void set_size(struct gm_size *size, const char *text)
{
	char err[128];

	if (parse_size(text, size, err, sizeof err) != 0)
		fail_msg("bad size '%s' in a test: %s", text, err);
}

static inline void set_list(struct gpu_list *list, const char *text)
{
	char err[128];

	if (gpu_list_parse(text, list, err, sizeof err) != 0)
		fail_msg("bad list '%s' in a test: %s", text, err);
}

static inline void release_request(struct gm_request *req)
{
	gpu_list_release(&req->only);
	gpu_list_release(&req->exclude);
}

/* The input for a snapshot with no leases, every GPU usable. */
static inline struct policy_input input(const struct gm_snapshot *snap)
{
	struct policy_input in;

	memset(&in, 0, sizeof in);
	in.snap = snap;
	return in;
}

/*
 * What almost every test works on: an empty fake snapshot, a request of one
 * GPU by memory and an empty result, made fresh before the test and
 * released after it, pass or fail.
 */
struct trial {
	struct gm_snapshot snap;
	struct policy_input in;
	struct gm_request req;
	struct policy_result res;
};

static inline int trial_setup(void **state)
{
	struct trial *t = calloc(1, sizeof *t);

	if (!t)
		return -1;
	fake_snapshot_init(&t->snap);
	t->in = input(&t->snap);
	t->req = request();
	t->res = (struct policy_result)POLICY_RESULT_INIT;
	*state = t;
	return 0;
}

static inline int trial_teardown(void **state)
{
	struct trial *t = *state;

	policy_result_release(&t->res);
	release_request(&t->req);
	fake_snapshot_release(&t->snap);
	free(t);
	return 0;
}

static inline struct policy_lease lease(const struct gm_snapshot *snap, unsigned index,
                                        int exclusive, uint64_t share_mib, uint64_t pending_mib,
                                        const char *holder)
{
	struct policy_lease l;
	size_t i;

	memset(&l, 0, sizeof l);
	for (i = 0; i < snap->gpu_count; i++)
		if (snap->gpus[i].index == index)
			l.uuid = snap->gpus[i].uuid;
	assert_non_null(l.uuid);
	l.exclusive = exclusive;
	l.share_mib = share_mib;
	l.pending_mib = pending_mib;
	l.holder = holder;
	return l;
}

static inline void choose(const struct policy_input *in, const struct gm_request *req,
                          struct policy_result *res)
{
	assert_int_equal(policy_choose(in, req, res), 0);
	assert_int_equal(res->gpu_count, in->snap->gpu_count);
	assert_non_null(res->why);
}

/* The chosen NVML indices, in order, must be exactly want[0..n). */
static inline void assert_chosen(const struct gm_snapshot *snap, const struct policy_result *res,
                                 const unsigned *want, size_t n)
{
	size_t i;

	assert_int_equal(res->outcome, POLICY_OK);
	assert_int_equal(res->count, n);
	for (i = 0; i < n; i++)
		if (snap->gpus[res->chosen[i]].index != want[i])
			fail_msg("choice %zu is GPU %u, expected GPU %u", i,
			         snap->gpus[res->chosen[i]].index, want[i]);
}

/* The reason given for the GPU at pos must mention each of the facts. */
static inline void assert_why(const struct policy_result *res, size_t pos, const char *fact1,
                              const char *fact2)
{
	if (!strstr(res->why[pos], fact1))
		fail_msg("why[%zu] = '%s' does not mention '%s'", pos, res->why[pos], fact1);
	if (fact2 && !strstr(res->why[pos], fact2))
		fail_msg("why[%zu] = '%s' does not mention '%s'", pos, res->why[pos], fact2);
}

/* A test that runs on a fresh struct trial (*state). */
#define TRIAL(test) cmocka_unit_test_setup_teardown(test, trial_setup, trial_teardown)

#endif
