/*
 * test_waste.c - the waste finder on hand-made machines, one pattern per
 * test, and the escaping of other users' text (text_printable).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "text.h"
#include "waste.h"
#include "unit.h"

#define NOW 1700000000000LL
#define MIN 60000LL

/* pid on gpu with memory and (util < 0: not reported) utilization. */
static struct gm_proc *proc(struct gm_snapshot *snap, unsigned gpu, unsigned pid, long long mib,
                            int util)
{
	struct gm_proc *p = fake_proc(snap, gpu, pid, mib);

	p->has_util = util >= 0;
	p->util_pct = util >= 0 ? (unsigned)util : 0;
	return p;
}

static void machine(struct gm_snapshot *snap, unsigned gpus)
{
	fake_snapshot_init(snap);
	for (unsigned i = 0; i < gpus; i++)
		fake_gpu_mem(snap, i, 24576, 20000);
}

static unsigned idx[2][8];
static char uuids[2][8][96];
static char migs[2][8][96];

/* A lease of user on the GPUs listed, started age_ms ago, job job_pid. */
static void lease(struct registry_view *view, size_t pos, const char *user, int job_pid,
                  int64_t age_ms, size_t n, const unsigned *gpus)
{
	struct lease_info *l = &view->leases[pos];

	memset(l, 0, sizeof *l);
	snprintf(l->id, sizeof l->id, "lease-%zu", pos);
	snprintf(l->user, sizeof l->user, "%s", user);
	snprintf(l->command, sizeof l->command, "python sweep.py");
	l->pid = job_pid - 1;
	l->job_pid = job_pid;
	l->start_ms = NOW - age_ms;
	l->exclusive = 1;
	l->gpu_count = n;
	l->indices = idx[pos];
	l->uuids = uuids[pos];
	for (size_t i = 0; i < n; i++)
		idx[pos][i] = gpus[i];
	view->lease_count = pos + 1;
}

/* Make lease pos a lease of one MIG slice ("MIG-<tail>") of its GPU. */
static void lease_slice(struct registry_view *view, size_t pos, const char *tail)
{
	snprintf(migs[pos][0], sizeof migs[pos][0], "MIG-%s", tail);
	view->leases[pos].migs = migs[pos];
}

#define SLICE_A "a0000000-1111-4000-8000-000000000001"
#define SLICE_B "b0000000-1111-4000-8000-000000000002"

static struct waste_opts opts(void)
{
	struct waste_opts o = WASTE_OPTS_INIT;

	o.now_ms = NOW;
	return o;
}

static void test_hog_on_many_gpus_computing_on_one(void **state)
{
	struct gm_snapshot snap;
	struct registry_view view = REGISTRY_VIEW_INIT;
	struct waste_report rep;
	struct waste_opts o = opts();
	char text[1024];

	(void)state;
	machine(&snap, 4);
	proc(&snap, 0, 42, 485, 0);
	proc(&snap, 1, 42, 14000, 62);
	proc(&snap, 2, 42, 485, 0);
	proc(&snap, 3, 42, 485, 0);
	proc(&snap, 1, 77, 2000, 30);
	assert_int_equal(waste_find(&snap, &view, NULL, &o, &rep), 0);
	/* 42 is a hog and both are outside gpuman */
	assert_int_equal(rep.count, 3);
	assert_int_equal(rep.items[0].kind, WASTE_HOG);
	assert_int_equal(rep.items[0].pid, 42);
	assert_int_equal(rep.items[0].idle_gpus, 0xD);
	assert_int_equal(rep.items[0].busy_gpus, 0x2);
	assert_int_equal(rep.items[0].held_mib, 3 * 485);
	waste_what(&snap, &view, &o, &rep.items[0], text, sizeof text);
	assert_string_equal(text, "pid 42 (alice, python train.py) holds 1.4G on GPUs 0,2,3 but "
	                          "computes only on 1");
	waste_advice(&snap, &view, &rep.items[0], text, sizeof text);
	assert_non_null(strstr(text, "gpuman run --only 1 -- CMD"));
	assert_non_null(strstr(text, "CUDA_VISIBLE_DEVICES=GPU-00000001"));
	assert_int_equal(rep.items[1].kind, WASTE_UNLEASED);
	assert_int_equal(rep.items[2].kind, WASTE_UNLEASED);
	waste_report_release(&rep);
	fake_snapshot_release(&snap);
}

static void test_idle_holder_unknown_util_and_graphics(void **state)
{
	struct gm_snapshot snap;
	struct registry_view view = REGISTRY_VIEW_INIT;
	struct lease_info leases[1];
	long in_lease[3] = {0, 0, 0};
	struct waste_report rep;
	struct waste_opts o = opts();
	char text[1024];
	const unsigned g[] = {0, 1, 2};

	(void)state;
	machine(&snap, 3);
	view.leases = leases;
	lease(&view, 0, "bob", 50, 1 * MIN, 3, g);           /* young: not an idle lease */
	proc(&snap, 0, 50, 9000, 0);                         /* computes nothing */
	proc(&snap, 1, 51, 9000, -1);                        /* no reading: not judged */
	proc(&snap, 2, 52, 400, 0)->kind = GM_PROC_GRAPHICS; /* a display */
	assert_int_equal(waste_find(&snap, &view, in_lease, &o, &rep), 0);
	assert_int_equal(rep.count, 1);
	assert_int_equal(rep.items[0].kind, WASTE_HOG);
	assert_int_equal(rep.items[0].pid, 50);
	assert_int_equal(rep.items[0].busy_gpus, 0);
	assert_int_equal(rep.items[0].lease, 0);
	waste_what(&snap, &view, &o, &rep.items[0], text, sizeof text);
	assert_string_equal(text,
	                    "pid 50 (alice, python train.py) holds 8.8G on GPU 0 and computed "
	                    "nothing in the last 10s");
	waste_advice(&snap, &view, &rep.items[0], text, sizeof text);
	assert_non_null(strstr(text, "kill 50"));
	waste_report_release(&rep);
	fake_snapshot_release(&snap);
}

static void test_idle_lease_and_intruder(void **state)
{
	struct gm_snapshot snap;
	struct registry_view view = REGISTRY_VIEW_INIT;
	struct lease_info leases[2];
	long in_lease[2] = {0, -1};
	struct waste_report rep;
	struct waste_opts o = opts();
	char text[1024];
	const unsigned g0[] = {0, 1}, g1[] = {2};

	(void)state;
	machine(&snap, 3);
	view.leases = leases;
	lease(&view, 0, "bob", 60, 30 * MIN, 2, g0);
	lease(&view, 1, "carol", 70, 2 * 60 * MIN, 1, g1);
	proc(&snap, 0, 60, 8000, 90); /* bob's job works on GPU 0 only */
	proc(&snap, 2, 99, 1000, 50); /* someone outside gpuman on carol's GPU */
	assert_int_equal(waste_find(&snap, &view, in_lease, &o, &rep), 0);
	assert_int_equal(rep.count, 3);
	/* alice (the intruder's user), then bob, then carol */
	assert_int_equal(rep.items[0].kind, WASTE_UNLEASED);
	assert_int_equal(rep.items[0].pid, 99);
	assert_int_equal(rep.items[0].on_lease, 1);
	waste_what(&snap, &view, &o, &rep.items[0], text, sizeof text);
	assert_string_equal(text,
	                    "pid 99 (alice, python train.py) runs on GPU 2 outside gpuman, on "
	                    "a GPU leased to carol");
	assert_int_equal(rep.items[1].kind, WASTE_IDLE_LEASE);
	assert_string_equal(rep.items[1].user, "bob");
	assert_int_equal(rep.items[1].idle_gpus, 0x2);
	waste_what(&snap, &view, &o, &rep.items[1], text, sizeof text);
	assert_string_equal(text,
	                    "lease lease-0 of pid 59 (bob, python sweep.py) has held GPU 1 for "
	                    "30m with none of its processes on it");
	waste_advice(&snap, &view, &rep.items[1], text, sizeof text);
	assert_non_null(strstr(text, "fewer GPUs"));
	assert_int_equal(rep.items[2].kind, WASTE_IDLE_LEASE);
	assert_string_equal(rep.items[2].user, "carol");
	assert_int_equal(rep.items[2].idle_gpus, 0x4);
	assert_int_equal(rep.items[2].age_ms, 2 * 60 * MIN);
	waste_report_release(&rep);
	fake_snapshot_release(&snap);
}

/* A reservation has no process: it is used by its user's leases in it, and
 * flagged on the GPUs where nothing of theirs runs. */
static void test_idle_reservation(void **state)
{
	struct gm_snapshot snap;
	struct registry_view view = REGISTRY_VIEW_INIT;
	struct lease_info leases[2];
	long in_lease[1] = {1};
	struct waste_report rep;
	struct waste_opts o = opts();
	char text[1024];
	const unsigned g01[] = {0, 1}, g0[] = {0};

	(void)state;
	machine(&snap, 2);
	view.leases = leases;
	lease(&view, 0, "carol", 80, 20 * MIN, 2, g01);
	leases[0].reservation = 1;
	leases[0].uid = 1001;
	snprintf(leases[0].id, sizeof leases[0].id, "resv-0");
	lease(&view, 1, "carol", 90, 1 * MIN, 1, g0); /* a run inside it, young */
	leases[1].uid = 1001;
	proc(&snap, 0, 90, 8000, 90);
	assert_int_equal(waste_find(&snap, &view, in_lease, &o, &rep), 0);
	assert_int_equal(rep.count, 1);
	assert_int_equal(rep.items[0].kind, WASTE_IDLE_LEASE);
	assert_int_equal(rep.items[0].lease, 0);
	assert_int_equal(rep.items[0].idle_gpus, 0x2);
	waste_what(&snap, &view, &o, &rep.items[0], text, sizeof text);
	assert_string_equal(text, "reservation resv-0 of carol has held GPU 1 for 20m with nothing "
	                          "of theirs running on it");
	waste_advice(&snap, &view, &rep.items[0], text, sizeof text);
	assert_non_null(strstr(text, "gpuman release resv-0"));
	/* another user's lease on it would not count as its use */
	leases[1].uid = 1002;
	waste_report_release(&rep);
	assert_int_equal(waste_find(&snap, &view, in_lease, &o, &rep), 0);
	assert_int_equal(rep.items[0].idle_gpus, 0x3);
	waste_report_release(&rep);
	fake_snapshot_release(&snap);
}

static void test_healthy_machine(void **state)
{
	struct gm_snapshot snap;
	struct registry_view view = REGISTRY_VIEW_INIT;
	struct lease_info leases[1];
	long in_lease[2] = {0, 0};
	struct waste_report rep;
	struct waste_opts o = opts();
	const unsigned g[] = {0, 1};

	(void)state;
	machine(&snap, 2);
	view.leases = leases;
	lease(&view, 0, "bob", 60, 30 * MIN, 2, g);
	proc(&snap, 0, 60, 8000, 90);
	proc(&snap, 1, 61, 8000, 85);
	assert_int_equal(waste_find(&snap, &view, in_lease, &o, &rep), 0);
	assert_int_equal(rep.count, 0);
	waste_report_release(&rep);
	fake_snapshot_release(&snap);
}

/* GPU 0 in MIG mode: slice A holds bob's job, slice B is carol's lease, and
 * a process outside gpuman runs in B.  Per slice: bob's lease is used, the
 * intruder is on carol's slice (not bob's), and carol's lease is idle, named
 * by its slice.  (NVML has no per-process utilization on slices.) */
static void test_mig_slices_judged_per_slice(void **state)
{
	struct gm_snapshot snap;
	struct registry_view view = REGISTRY_VIEW_INIT;
	struct lease_info leases[2];
	long in_lease[2] = {0, -1};
	struct waste_report rep;
	struct waste_opts o = opts();
	char text[1024];
	const unsigned g0[] = {0};

	(void)state;
	machine(&snap, 1);
	fake_mig(&snap, 0, "1g.10gb", SLICE_A, 9728, 700, 60);
	fake_mig(&snap, 0, "1g.10gb", SLICE_B, 9728, 8700, 99);
	view.leases = leases;
	lease(&view, 0, "bob", 60, 30 * MIN, 1, g0);
	lease_slice(&view, 0, SLICE_A);
	lease(&view, 1, "carol", 70, 2 * 60 * MIN, 1, g0);
	lease_slice(&view, 1, SLICE_B);
	proc(&snap, 0, 60, 9000, -1); /* bob's job, in slice A */
	proc(&snap, 0, 99, 1000, -1); /* outside gpuman, in slice B */
	assert_int_equal(waste_find(&snap, &view, in_lease, &o, &rep), 0);
	assert_int_equal(rep.count, 2);
	/* alice (the intruder's user), then carol; nothing of bob's */
	assert_int_equal(rep.items[0].kind, WASTE_UNLEASED);
	assert_int_equal(rep.items[0].pid, 99);
	assert_int_equal(rep.items[0].gpus, 0x1);
	assert_string_equal(rep.items[0].mig_uuid, "MIG-" SLICE_B);
	assert_int_equal(rep.items[0].on_lease, 1);
	waste_what(&snap, &view, &o, &rep.items[0], text, sizeof text);
	assert_string_equal(text,
	                    "pid 99 (alice, python train.py) runs on slice 1g.10gb "
	                    "MIG-b0000000 of GPU 0 outside gpuman, on a slice leased to carol");
	waste_advice(&snap, &view, &rep.items[0], text, sizeof text);
	assert_non_null(strstr(text, "gpuman run --mig 1g.10gb"));
	assert_int_equal(rep.items[1].kind, WASTE_IDLE_LEASE);
	assert_string_equal(rep.items[1].user, "carol");
	assert_int_equal(rep.items[1].lease, 1);
	assert_string_equal(rep.items[1].mig_uuid, "MIG-" SLICE_B);
	waste_what(&snap, &view, &o, &rep.items[1], text, sizeof text);
	assert_string_equal(text, "lease lease-1 of pid 69 (carol, python sweep.py) has held slice "
	                          "1g.10gb MIG-b0000000 of GPU 0 for 2h00m with none of its "
	                          "processes on it");
	waste_advice(&snap, &view, &rep.items[1], text, sizeof text);
	assert_non_null(strstr(text, "CUDA_VISIBLE_DEVICES=MIG-" SLICE_B));
	assert_non_null(strstr(text, "kill 69"));
	waste_report_release(&rep);
	fake_snapshot_release(&snap);
}

/* bob's lease holds slice A but his job runs in slice B: A is idle, and the
 * job is outside its lease in B, not counted as A's use. */
static void test_mig_job_in_another_slice(void **state)
{
	struct gm_snapshot snap;
	struct registry_view view = REGISTRY_VIEW_INIT;
	struct lease_info leases[1];
	long in_lease[1] = {0};
	struct waste_report rep;
	struct waste_opts o = opts();
	char text[1024];
	const unsigned g0[] = {0};

	(void)state;
	machine(&snap, 2);
	fake_mig(&snap, 0, "2g.20gb", SLICE_A, 19968, 19968, 0);
	fake_mig(&snap, 0, "1g.10gb", SLICE_B, 9728, 700, 60);
	view.leases = leases;
	lease(&view, 0, "bob", 60, 30 * MIN, 1, g0);
	lease_slice(&view, 0, SLICE_A);
	proc(&snap, 0, 60, 9000, -1);
	assert_int_equal(waste_find(&snap, &view, in_lease, &o, &rep), 0);
	assert_int_equal(rep.count, 2);
	assert_int_equal(rep.items[0].kind, WASTE_UNLEASED);
	assert_int_equal(rep.items[0].pid, 60);
	assert_int_equal(rep.items[0].lease, 0);
	assert_int_equal(rep.items[0].on_lease, -1);
	assert_string_equal(rep.items[0].mig_uuid, "MIG-" SLICE_B);
	waste_what(&snap, &view, &o, &rep.items[0], text, sizeof text);
	assert_string_equal(text, "pid 60 (alice, python train.py) runs on slice 1g.10gb "
	                          "MIG-b0000000 of GPU 0 outside its lease lease-0 (no lease "
	                          "holds the slice)");
	waste_advice(&snap, &view, &rep.items[0], text, sizeof text);
	assert_non_null(strstr(text, "CUDA_VISIBLE_DEVICES=MIG-" SLICE_A));
	assert_int_equal(rep.items[1].kind, WASTE_IDLE_LEASE);
	assert_int_equal(rep.items[1].idle_gpus, 0x1);
	assert_string_equal(rep.items[1].mig_uuid, "MIG-" SLICE_A);
	waste_what(&snap, &view, &o, &rep.items[1], text, sizeof text);
	assert_non_null(strstr(text, "has held slice 2g.20gb MIG-a0000000 of GPU 0 for 30m"));
	/* in its own slice, the job uses the lease: nothing to report */
	waste_report_release(&rep);
	snap.migs[0].pids = snap.migs[1].pids;
	snap.migs[0].pid_count = 1;
	snap.migs[1].pids = NULL;
	snap.migs[1].pid_count = 0;
	assert_int_equal(waste_find(&snap, &view, in_lease, &o, &rep), 0);
	assert_int_equal(rep.count, 0);
	waste_report_release(&rep);
	fake_snapshot_release(&snap);
}

/* A hog that computes in a slice of GPU 0 and idles on whole GPU 1: the
 * advice names the slice; outside gpuman it is one finding per slice and
 * one for its whole GPUs. */
static void test_mig_hog_advice_names_the_slice(void **state)
{
	struct gm_snapshot snap;
	struct registry_view view = REGISTRY_VIEW_INIT;
	struct waste_report rep;
	struct waste_opts o = opts();
	char text[1024];

	(void)state;
	machine(&snap, 2);
	fake_mig(&snap, 0, "3g.40gb", SLICE_A, 40192, 10000, 42);
	proc(&snap, 0, 42, 30000, 70);
	proc(&snap, 1, 42, 500, 0);
	assert_int_equal(waste_find(&snap, &view, NULL, &o, &rep), 0);
	assert_int_equal(rep.count, 3);
	assert_int_equal(rep.items[0].kind, WASTE_HOG);
	assert_int_equal(rep.items[0].idle_gpus, 0x2);
	waste_advice(&snap, &view, &rep.items[0], text, sizeof text);
	assert_non_null(strstr(text, "gpuman run --mig 3g.40gb -- CMD, or "
	                             "CUDA_VISIBLE_DEVICES=MIG-" SLICE_A ";"));
	assert_int_equal(rep.items[1].kind, WASTE_UNLEASED);
	assert_int_equal(rep.items[1].gpus, 0x1);
	assert_string_equal(rep.items[1].mig_uuid, "MIG-" SLICE_A);
	assert_int_equal(rep.items[2].kind, WASTE_UNLEASED);
	assert_int_equal(rep.items[2].gpus, 0x2);
	assert_string_equal(rep.items[2].mig_uuid, "");
	waste_what(&snap, &view, &o, &rep.items[2], text, sizeof text);
	assert_string_equal(
	    text, "pid 42 (alice, python train.py) runs on GPU 1 outside gpuman (no lease)");
	waste_report_release(&rep);
	fake_snapshot_release(&snap);
}

static void test_text_printable(void **state)
{
	char buf[64];

	(void)state;
	assert_string_equal(text_printable(buf, sizeof buf, "python train.py --lr 0.1"),
	                    "python train.py --lr 0.1");
	assert_string_equal(text_printable(buf, sizeof buf, "a\033]0;x\007\033[2J\r\n\tb\177"),
	                    "a\\e]0;x\\x07\\e[2J\\r\\n\\tb\\x7F");
	/* UTF-8 stays; C1 controls, bidi overrides and broken bytes do not */
	assert_string_equal(text_printable(buf, sizeof buf, "caf\xc3\xa9 \xe2\x82\xac"),
	                    "caf\xc3\xa9 \xe2\x82\xac");
	assert_string_equal(text_printable(buf, sizeof buf,
	                                   "\xc2\x9b"
	                                   "2J"),
	                    "\\u009b2J");
	assert_string_equal(text_printable(buf, sizeof buf,
	                                   "ab\xe2\x80\xae"
	                                   "cd"),
	                    "ab\\u202ecd");
	assert_string_equal(text_printable(buf, sizeof buf, "\xff\xc3(\xc0\xaf"),
	                    "\\xFF\\xC3(\\xC0\\xAF");
	/* truncation never cuts an escape or a character in half */
	assert_string_equal(text_printable(buf, 6, "abcd\033"), "abcd");
	assert_string_equal(text_printable(buf, 5, "abc\xc3\xa9"), "abc");
	assert_string_equal(text_printable(buf, sizeof buf, NULL), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hog_on_many_gpus_computing_on_one),
	    cmocka_unit_test(test_idle_holder_unknown_util_and_graphics),
	    cmocka_unit_test(test_idle_lease_and_intruder),
	    cmocka_unit_test(test_idle_reservation),
	    cmocka_unit_test(test_healthy_machine),
	    cmocka_unit_test(test_mig_slices_judged_per_slice),
	    cmocka_unit_test(test_mig_job_in_another_slice),
	    cmocka_unit_test(test_mig_hog_advice_names_the_slice),
	    cmocka_unit_test(test_text_printable),
	};

	return cmocka_run_group_tests_name("waste", tests, NULL, NULL);
}
