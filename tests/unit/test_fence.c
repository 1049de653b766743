/*
 * test_fence.c - the pure parts of the broker's kernel fence (lib/fence.c):
 * which device nodes a lease's job must not open, and the BPF device
 * program that refuses them, run here by a small interpreter of the few
 * instructions it uses, on every device a job could ask for.  The kernel
 * side (cgroups, bpf(2)) is tested as real users by tests/e2e/fence.bats.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <setjmp.h>
#include <cmocka.h>
#include <linux/bpf.h>
#include "fence.h"
#include "unit.h"

/* Run prog on one device access as the kernel would: its return value. */
static int64_t run(const struct bpf_insn *prog, size_t n, char type, unsigned major, unsigned minor)
{
	uint32_t ctx[3] = {(uint32_t)(BPF_DEVCG_ACC_READ << 16) |
	                       (type == 'b' ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR),
	                   major, minor};
	uint64_t reg[11] = {0};

	for (size_t pc = 0; pc < n; pc++) {
		const struct bpf_insn *i = &prog[pc];

		switch (i->code) {
		case BPF_LDX | BPF_MEM | BPF_W:
			assert_int_equal(i->src_reg, BPF_REG_1);
			assert_true(i->off >= 0 && i->off <= 8 && i->off % 4 == 0);
			reg[i->dst_reg] = ctx[i->off / 4];
			break;
		case BPF_ALU | BPF_AND | BPF_K:
			reg[i->dst_reg] = (uint32_t)(reg[i->dst_reg] & (uint32_t)i->imm);
			break;
		case BPF_ALU64 | BPF_MOV | BPF_K:
			reg[i->dst_reg] = (uint64_t)(int64_t)i->imm;
			break;
		case BPF_JMP | BPF_JNE | BPF_K:
			if (reg[i->dst_reg] != (uint64_t)(int64_t)i->imm)
				pc += (size_t)i->off;
			break;
		case BPF_JMP | BPF_JLT | BPF_K:
			if (reg[i->dst_reg] < (uint64_t)(int64_t)i->imm)
				pc += (size_t)i->off;
			break;
		case BPF_JMP | BPF_JGT | BPF_K:
			if (reg[i->dst_reg] > (uint64_t)(int64_t)i->imm)
				pc += (size_t)i->off;
			break;
		case BPF_JMP | BPF_EXIT:
			return (int64_t)reg[0];
		default:
			fail_msg("instruction %#x at %zu is not one the fence emits", i->code, pc);
		}
	}
	fail_msg("the program runs off its end");
	return -1;
}

/* Does r let the node open?  v2's program, run here, and v1's list
 * (fence_rule_refuses, which devices.deny and devices.allow follow) must
 * say the same. */
static int allowed(const struct fence_rule *r, char type, unsigned major, unsigned minor)
{
	size_t n = fence_bpf_program(r, NULL, 0);
	struct bpf_insn *prog = calloc(n, sizeof *prog);
	struct fence_dev d = {type, major, minor};
	int64_t v;

	assert_non_null(prog);
	assert_int_equal(fence_bpf_program(r, prog, n), n);
	v = run(prog, n, type, major, minor);
	free(prog);
	assert_true(v == 0 || v == 1);
	assert_int_equal(fence_rule_refuses(r, &d), !v);
	return (int)v;
}

static void test_gpu_lease_refuses_the_other_gpus_only(void **state)
{
	struct gm_snapshot snap;
	struct fence_machine m = FENCE_MACHINE_INIT;
	struct fence_rule r = FENCE_RULE_INIT;
	unsigned mine[] = {2};
	struct fence_grant g = {1, mine, 0, NULL};

	(void)state;
	fake_snapshot_init(&snap);
	for (unsigned i = 0; i < 8; i++) {
		struct gm_gpu *gpu = fake_gpu(&snap, i, NULL, 16000, 16000, 0, 0, 0, 0);

		gpu->minor = (int)i;
	}
	snap.gpus[7].minor = -1; /* NVML does not say: not guessed */
	/* a node the directory has that NVML does not list (7), one that is not
	 * a GPU's (nvidiactl) and a missing directory change nothing else */
	assert_int_equal(fence_machine_read(&m, &snap, "/nonexistent", "/nonexistent", NULL), 0);
	assert_int_equal(m.gpu_count, 7);
	assert_int_equal(m.caps_major, 0);
	assert_int_equal(fence_rule_build(&r, &m, &g), 0);
	assert_int_equal(r.count, 6);
	for (unsigned minor = 0; minor < 7; minor++)
		assert_int_equal(allowed(&r, 'c', 195, minor), minor == 2);
	/* what is not a GPU node opens as before: nvidiactl, nvidia-modeset,
	 * a GPU no reading named, the same numbers as a block device, null */
	assert_true(allowed(&r, 'c', 195, 255));
	assert_true(allowed(&r, 'c', 195, 254));
	assert_true(allowed(&r, 'c', 195, 7));
	assert_true(allowed(&r, 'b', 195, 3));
	assert_true(allowed(&r, 'c', 1, 3));
	assert_true(allowed(&r, 'c', 510, 0)); /* nvidia-uvm's dynamic major */
	fence_rule_release(&r);
	fence_machine_release(&m);
	fake_snapshot_release(&snap);
}

static void test_mig_lease_gets_its_slice_caps_only(void **state)
{
	struct fence_machine m = FENCE_MACHINE_INIT;
	struct fence_rule r = FENCE_RULE_INIT;
	unsigned gpus[] = {0, 1};
	struct fence_slice slice = {0, 1, 0};
	struct fence_grant g = {0, NULL, 1, &slice};
	unsigned whole[] = {1};
	struct fence_grant w = {1, whole, 0, NULL};

	(void)state;
	m.gpu_minors = malloc(sizeof gpus);
	memcpy(m.gpu_minors, gpus, sizeof gpus);
	m.gpu_count = 2;
	m.caps_major = 240;
	assert_int_equal(fence_caps_parse(&m, "config 1\nmonitor 2\n"
	                                      "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
	                                      "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n"
	                                      "gpu1/gi1/access 66\ngpu1/gi1/ci0/access 67\n"
	                                      "garbage\n"),
	                 0);
	assert_int_equal(m.cap_count, 6);
	assert_int_equal(m.caps[1].ci, 0);
	assert_int_equal(m.caps[0].ci, -1);
	/* slice gi1/ci0 of GPU 0: its GPU's node, its two caps; not the
	 * neighbour slice's, not the other GPU's */
	assert_int_equal(fence_rule_build(&r, &m, &g), 0);
	assert_true(allowed(&r, 'c', 195, 0));
	assert_false(allowed(&r, 'c', 195, 1));
	assert_true(allowed(&r, 'c', 240, 12));
	assert_true(allowed(&r, 'c', 240, 13));
	assert_false(allowed(&r, 'c', 240, 21));
	assert_false(allowed(&r, 'c', 240, 22));
	assert_false(allowed(&r, 'c', 240, 66));
	assert_true(allowed(&r, 'c', 240, 1)); /* config and monitor: as before */
	assert_true(allowed(&r, 'c', 240, 2));
	/* a whole GPU's lease holds every slice of it */
	assert_int_equal(fence_rule_build(&r, &m, &w), 0);
	assert_false(allowed(&r, 'c', 195, 0));
	assert_true(allowed(&r, 'c', 195, 1));
	assert_true(allowed(&r, 'c', 240, 66));
	assert_true(allowed(&r, 'c', 240, 67));
	assert_false(allowed(&r, 'c', 240, 12));
	assert_int_equal(r.count, 5); /* sorted, each once */
	for (size_t i = 1; i < r.count; i++)
		assert_true(r.devs[i - 1].major < r.devs[i].major ||
		            (r.devs[i - 1].major == r.devs[i].major &&
		             r.devs[i - 1].minor < r.devs[i].minor));
	fence_rule_release(&r);
	fence_machine_release(&m);
}

static void test_program_size(void **state)
{
	struct fence_rule r = FENCE_RULE_INIT;

	(void)state;
	/* a few instructions: 4 to read the access, 5 a device, 6 a run of
	 * consecutive ones, 2 to allow */
	assert_int_equal(fence_bpf_program(&r, NULL, 0), 6);
	assert_true(allowed(&r, 'c', 195, 0));
	r.devs = calloc(5, sizeof *r.devs);
	r.count = 5;
	for (unsigned i = 0; i < 3; i++)
		r.devs[i] = (struct fence_dev){'c', 195, i};
	r.devs[3] = (struct fence_dev){'c', 195, 5};
	r.devs[4] = (struct fence_dev){'c', 196, 6}; /* the next minor, another major */
	assert_int_equal(fence_bpf_program(&r, NULL, 0), 6 + 6 + 5 + 5);
	for (unsigned minor = 0; minor < 9; minor++) {
		assert_int_equal(allowed(&r, 'c', 195, minor), minor > 2 && minor != 5);
		assert_int_equal(allowed(&r, 'c', 196, minor), minor != 6);
		assert_true(allowed(&r, 'b', 195, minor));
	}
	fence_rule_release(&r);
}

/* The driver's mig-minors lists every GPU it could have: on a real H200
 * with one GPU, 4,185 capabilities.  One per instruction block, the
 * kernel's verifier took 90 ms a grant; the rule keeps the machine's own
 * GPUs' and the program tests runs of them. */
static void test_real_mig_minors(void **state)
{
	struct fence_machine m = FENCE_MACHINE_INIT;
	struct fence_rule r = FENCE_RULE_INIT;
	unsigned mine[] = {3};
	struct fence_grant g = {1, mine, 0, NULL};
	char *text = calloc(32 * 136, 40), *p = text;
	unsigned minor = 3, first[33];
	size_t n;

	(void)state;
	assert_non_null(text);
	p += sprintf(p, "config 1\nmonitor 2\n");
	for (unsigned gpu = 0; gpu < 32; gpu++) {
		first[gpu] = minor;
		for (unsigned gi = 0; gi < 15; gi++) {
			p += sprintf(p, "gpu%u/gi%u/access %u\n", gpu, gi, minor++);
			for (unsigned ci = 0; ci < 8; ci++)
				p +=
				    sprintf(p, "gpu%u/gi%u/ci%u/access %u\n", gpu, gi, ci, minor++);
		}
	}
	first[32] = minor;
	m.caps_major = 237;
	assert_int_equal(fence_caps_parse(&m, text), 0);
	assert_int_equal(m.cap_count, 32 * 135);
	m.gpu_minors = malloc(8 * sizeof *m.gpu_minors);
	for (unsigned i = 0; i < 8; i++)
		m.gpu_minors[i] = i;
	m.gpu_count = 8;
	assert_int_equal(fence_rule_build(&r, &m, &g), 0);
	assert_int_equal(r.count, 7 + 7 * 135);
	n = fence_bpf_program(&r, NULL, 0);
	assert_true(n <= 6 + 4 * 6); /* GPUs 0-2, 4-7, their caps before and after GPU 3's */
	for (unsigned x = 0; x < minor + 8; x++) {
		/* the other GPUs' capabilities refused; GPU 3's and those of
		 * GPUs the machine lacks open as before */
		int other = x >= first[0] && x < first[8] && !(x >= first[3] && x < first[4]);

		assert_int_equal(allowed(&r, 'c', 237, x), !other);
	}
	for (unsigned x = 0; x < 10; x++)
		assert_int_equal(allowed(&r, 'c', 195, x), x == 3 || x > 7);
	free(text);
	fence_rule_release(&r);
	fence_machine_release(&m);
}

static void write_to(const char *dir, const char *name, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* The driver's capability table is read once per driver load (its major):
 * a later reading carries it over, and a new major reads it again. */
static void test_caps_table_read_once(void **state)
{
	char proc[] = "/tmp/gm-fence-proc.XXXXXX", path[512];
	const char *two = "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n";
	struct fence_machine first = FENCE_MACHINE_INIT, second = FENCE_MACHINE_INIT,
	                     third = FENCE_MACHINE_INIT;

	(void)state;
	assert_non_null(mkdtemp(proc));
	snprintf(path, sizeof path, "%s/driver", proc);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/driver/nvidia-caps", proc);
	assert_int_equal(mkdir(path, 0755), 0);
	write_to(proc, "devices",
	         "Character devices:\n195 nvidia\n237 nvidia-caps\n\nBlock devices:\n");
	write_to(proc, "driver/nvidia-caps/mig-minors", two);
	assert_int_equal(fence_machine_read(&first, NULL, "/nonexistent", proc, NULL), 0);
	assert_int_equal(first.caps_major, 237);
	assert_int_equal(first.cap_count, 2);
	/* the same major: the table is not read again (this one would add a
	 * line) */
	write_to(proc, "driver/nvidia-caps/mig-minors", "gpu1/gi1/access 66\n");
	assert_int_equal(fence_machine_read(&second, NULL, "/nonexistent", proc, &first), 0);
	assert_int_equal(second.cap_count, 2);
	assert_int_equal(second.caps[1].minor, 13);
	assert_ptr_not_equal(second.caps, first.caps); /* its own copy */
	/* a reloaded driver (another major): read again */
	write_to(proc, "devices",
	         "Character devices:\n195 nvidia\n238 nvidia-caps\n\nBlock devices:\n");
	assert_int_equal(fence_machine_read(&third, NULL, "/nonexistent", proc, &second), 0);
	assert_int_equal(third.caps_major, 238);
	assert_int_equal(third.cap_count, 1);
	assert_int_equal(third.caps[0].minor, 66);
	fence_machine_release(&first);
	fence_machine_release(&second);
	fence_machine_release(&third);
	snprintf(path, sizeof path, "rm -rf '%s'", proc);
	assert_int_equal(system(path), 0);
}

/* systemd.slice(5): each dash opens a slice inside the one before. */
static void test_slice_path(void **state)
{
	char out[256];

	(void)state;
	assert_int_equal(fence_slice_path("gpuman.slice", out, sizeof out), 0);
	assert_string_equal(out, "gpuman.slice");
	assert_int_equal(fence_slice_path("gpuman-test-ab9.slice", out, sizeof out), 0);
	assert_string_equal(out, "gpuman.slice/gpuman-test.slice/gpuman-test-ab9.slice");
	/* no valid slice: gpuman falls back to its own */
	assert_int_equal(fence_slice_path("-a.slice", out, sizeof out), -1);
	assert_int_equal(fence_slice_path("a--b.slice", out, sizeof out), -1);
	assert_int_equal(fence_slice_path("a/b.slice", out, sizeof out), -1);
	assert_int_equal(fence_slice_path("a.scope", out, sizeof out), -1);
	assert_int_equal(fence_slice_path("a-b-c-d.slice", out, 20), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gpu_lease_refuses_the_other_gpus_only),
	    cmocka_unit_test(test_mig_lease_gets_its_slice_caps_only),
	    cmocka_unit_test(test_program_size),
	    cmocka_unit_test(test_real_mig_minors),
	    cmocka_unit_test(test_caps_table_read_once),
	    cmocka_unit_test(test_slice_path),
	};

	return cmocka_run_group_tests_name("fence", tests, NULL, NULL);
}
