/*
 * test_parse.c - the value syntaxes people type on the command line (SIZE,
 * DURATION, PERCENT, COUNT, LIST): what each spelling means, and that a
 * mistake is refused with a message that names it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "parse.h"

static char err[256];

static uint64_t size_ok(const char *s)
{
	struct gm_size sz;

	err[0] = '\0';
	if (parse_size(s, &sz, err, sizeof err) != 0)
		fail_msg("parse_size('%s') failed: %s", s, err);
	assert_false(sz.is_pct);
	return sz.mib;
}

/* Parse must fail, and its message must contain want. */
static void size_bad(const char *s, const char *want)
{
	struct gm_size sz;

	err[0] = '\0';
	if (parse_size(s, &sz, err, sizeof err) != -1)
		fail_msg("parse_size('%s') accepted it", s);
	if (!strstr(err, want))
		fail_msg("parse_size('%s'): message '%s' lacks '%s'", s, err, want);
}

static void test_size_plain_number_is_mib(void **state)
{
	(void)state;
	assert_int_equal(size_ok("8192"), 8192);
	assert_int_equal(size_ok("0"), 0);
	assert_int_equal(size_ok(" 512 "), 512);
}

static void test_size_binary_units_any_spelling(void **state)
{
	static const char *const eight_gib[] = {"8G",  "8GiB", "8gb",  "8g",
	                                        "8Gi", "8GB",  "8gib", "8 GiB"};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof eight_gib / sizeof eight_gib[0]; i++)
		assert_int_equal(size_ok(eight_gib[i]), 8192);
	assert_int_equal(size_ok("512M"), 512);
	assert_int_equal(size_ok("512MiB"), 512);
	assert_int_equal(size_ok("1T"), 1024 * 1024);
	assert_int_equal(size_ok("1tib"), 1024 * 1024);
	assert_int_equal(size_ok("2048K"), 2);
}

static void test_size_decimals_exact(void **state)
{
	(void)state;
	assert_int_equal(size_ok("1.5G"), 1536);
	assert_int_equal(size_ok("0.5T"), 512 * 1024);
	assert_int_equal(size_ok("1.1G"), 1127); /* 1126.4 MiB rounds up */
	assert_int_equal(size_ok("1.25"), 2);    /* 1.25 MiB rounds up */
}

static void test_size_sub_mib_rounds_up(void **state)
{
	(void)state;
	/* Asking for half a MiB must not turn into asking for nothing. */
	assert_int_equal(size_ok("512K"), 1);
	assert_int_equal(size_ok("1K"), 1);
	assert_int_equal(size_ok("1025K"), 2);
	assert_int_equal(size_ok("1024K"), 1);
}

static void test_size_percent(void **state)
{
	struct gm_size sz;
	char buf[32];

	(void)state;
	assert_int_equal(parse_size("50%", &sz, err, sizeof err), 0);
	assert_true(sz.is_pct);
	assert_int_equal(sz.pct, 50);
	assert_int_equal(size_mib(&sz, 24576), 12288);
	assert_int_equal(size_mib(&sz, 11), 5); /* rounds down */
	assert_string_equal(size_format(&sz, buf, sizeof buf), "50%");

	assert_int_equal(parse_size("0%", &sz, err, sizeof err), 0);
	assert_int_equal(size_mib(&sz, 24576), 0);
	assert_int_equal(parse_size("100%", &sz, err, sizeof err), 0);
	assert_int_equal(size_mib(&sz, 24576), 24576);

	size_bad("101%", "percentage must be between 0 and 100");
	size_bad("150%", "percentage must be between 0 and 100");
	size_bad("12.5%", "whole number");
}

static void test_size_errors_say_what_is_wrong(void **state)
{
	(void)state;
	size_bad("12Q", "unknown unit 'Q' (use K, M, G, T or %)");
	size_bad("8GX", "unknown unit 'GX'");
	size_bad("8B", "unknown unit 'B'");
	size_bad("abc", "'abc' is not a size (e.g. 8G, 8192, 50%)");
	size_bad("G", "'G' is not a size");
	size_bad("1.G", "is not a size");
	size_bad("", "empty size");
	size_bad("   ", "empty size");
	size_bad(NULL, "empty size");
	size_bad("-1G", "cannot be negative");
	size_bad("99999999999999999999", "too large");
	size_bad("99999999999999T", "too large");
}

static void test_size_large_but_valid(void **state)
{
	(void)state;
	/* 1 PiB: no overflow on the way to MiB */
	assert_int_equal(size_ok("1024T"), 1024ull * 1024 * 1024);
	assert_int_equal(size_ok("1000000T"), 1000000ull * 1024 * 1024);
}

static void test_size_format(void **state)
{
	struct gm_size sz = {0, 8192, 0};
	char buf[32];

	(void)state;
	assert_string_equal(size_format(&sz, buf, sizeof buf), "8 GiB");
	sz.mib = 1536;
	assert_string_equal(size_format(&sz, buf, sizeof buf), "1536 MiB");
	sz.mib = 0;
	assert_string_equal(size_format(&sz, buf, sizeof buf), "0 MiB");
	/* what size_format writes parses back to the same size */
	sz.mib = 3 * 1024;
	assert_int_equal(size_ok(size_format(&sz, buf, sizeof buf)), 3 * 1024);
}

static int64_t dur_ok(const char *s)
{
	int64_t ms = -42;

	err[0] = '\0';
	if (parse_duration_ms(s, &ms, err, sizeof err) != 0)
		fail_msg("parse_duration_ms('%s') failed: %s", s, err);
	return ms;
}

static void dur_bad(const char *s, const char *want)
{
	int64_t ms = -42;

	err[0] = '\0';
	if (parse_duration_ms(s, &ms, err, sizeof err) != -1)
		fail_msg("parse_duration_ms('%s') accepted it as %lld ms", s, (long long)ms);
	if (!strstr(err, want))
		fail_msg("parse_duration_ms('%s'): message '%s' lacks '%s'", s, err, want);
}

static void test_duration_forms(void **state)
{
	(void)state;
	assert_int_equal(dur_ok("90"), 90000);
	assert_int_equal(dur_ok("90s"), 90000);
	assert_int_equal(dur_ok("15m"), 15 * 60000);
	assert_int_equal(dur_ok("2h"), 2 * 3600000);
	assert_int_equal(dur_ok("1d"), 86400000);
	assert_int_equal(dur_ok("1h30m"), 90 * 60000);
	assert_int_equal(dur_ok("2m30s"), 150000);
	assert_int_equal(dur_ok("500ms"), 500);
	assert_int_equal(dur_ok("1m500ms"), 60500);
	assert_int_equal(dur_ok("0"), 0);
	assert_int_equal(dur_ok("1.5h"), 90 * 60000);
	assert_int_equal(dur_ok("15M"), 15 * 60000);
	assert_int_equal(dur_ok(" 1h 30m "), 90 * 60000);
	assert_int_equal(dur_ok(" 90 "), 90000);
	assert_int_equal(dur_ok("90 s"), 90000);
}

static void test_duration_limit(void **state)
{
	(void)state;
	assert_int_equal(dur_ok("3650d"), 3650LL * 86400000);
}

static void test_duration_errors(void **state)
{
	(void)state;
	dur_bad("15x", "unknown unit 'x' (use s, m, h, d)");
	dur_bad("1h30x", "unknown unit 'x'");
	dur_bad("", "empty duration");
	dur_bad(NULL, "empty duration");
	dur_bad("-5m", "cannot be negative");
	dur_bad("abc", "'abc' is not a duration");
	dur_bad("1h30", "missing unit after '30'");
	dur_bad("9999999999999999999d", "too long");
	dur_bad("999999999999d", "too long");
	/* Each part fits in 64 bits, their sum did not (undefined behaviour). */
	dur_bad("106751991167.9d", "too long (at most 3650d)");
	dur_bad("3650d 1ms", "too long");
}

static void test_percent(void **state)
{
	unsigned pct = 7;

	(void)state;
	assert_int_equal(parse_percent("0", &pct, err, sizeof err), 0);
	assert_int_equal(pct, 0);
	assert_int_equal(parse_percent("50", &pct, err, sizeof err), 0);
	assert_int_equal(pct, 50);
	assert_int_equal(parse_percent("50%", &pct, err, sizeof err), 0);
	assert_int_equal(pct, 50);
	assert_int_equal(parse_percent("100%", &pct, err, sizeof err), 0);
	assert_int_equal(pct, 100);

	assert_int_equal(parse_percent("101", &pct, err, sizeof err), -1);
	assert_non_null(strstr(err, "between 0 and 100"));
	assert_int_equal(parse_percent("-1", &pct, err, sizeof err), -1);
	assert_non_null(strstr(err, "between 0 and 100"));
	assert_int_equal(parse_percent("half", &pct, err, sizeof err), -1);
	assert_non_null(strstr(err, "'half' is not a percentage"));
	assert_int_equal(parse_percent("", &pct, err, sizeof err), -1);
	assert_int_equal(parse_percent("%", &pct, err, sizeof err), -1);
	assert_int_equal(pct, 100); /* untouched on error */
}

static void test_count(void **state)
{
	unsigned n = 7;

	(void)state;
	assert_int_equal(parse_count("1", &n, err, sizeof err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(parse_count("1024", &n, err, sizeof err), 0);
	assert_int_equal(n, 1024);

	assert_int_equal(parse_count("0", &n, err, sizeof err), -1);
	assert_non_null(strstr(err, "between 1 and 1024"));
	assert_int_equal(parse_count("1025", &n, err, sizeof err), -1);
	assert_non_null(strstr(err, "between 1 and 1024"));
	assert_int_equal(parse_count("-3", &n, err, sizeof err), -1);
	assert_int_equal(parse_count("two", &n, err, sizeof err), -1);
	assert_non_null(strstr(err, "'two' is not a count"));
	assert_int_equal(parse_count("2x", &n, err, sizeof err), -1);
	assert_int_equal(n, 1024);
}

static void test_list_parse(void **state)
{
	struct gpu_list list = GPU_LIST_INIT;

	(void)state;
	assert_int_equal(gpu_list_parse(" 0, 3 ,GPU-8f3a ", &list, err, sizeof err), 0);
	assert_int_equal(list.count, 3);
	assert_string_equal(list.items[0], "0");
	assert_string_equal(list.items[1], "3");
	assert_string_equal(list.items[2], "GPU-8f3a");
	gpu_list_release(&list);
	assert_null(list.items);
	assert_int_equal(list.count, 0);

	assert_int_equal(gpu_list_parse("5", &list, err, sizeof err), 0);
	assert_int_equal(list.count, 1);
	gpu_list_release(&list);
}

static void test_list_errors(void **state)
{
	struct gpu_list list = GPU_LIST_INIT;

	(void)state;
	assert_int_equal(gpu_list_parse("0,,3", &list, err, sizeof err), -1);
	assert_string_equal(err, "empty item in '0,,3'");
	assert_int_equal(list.count, 0);
	assert_null(list.items);

	assert_int_equal(gpu_list_parse("0,1,", &list, err, sizeof err), -1);
	assert_non_null(strstr(err, "empty item in '0,1,'"));
	assert_int_equal(gpu_list_parse(", 1", &list, err, sizeof err), -1);
	assert_non_null(strstr(err, "empty item"));
	assert_int_equal(gpu_list_parse("", &list, err, sizeof err), -1);
	assert_non_null(strstr(err, "empty list"));
	assert_int_equal(gpu_list_parse("0,gpu_1", &list, err, sizeof err), -1);
	assert_non_null(strstr(err, "'gpu_1'"));
	assert_int_equal(gpu_list_parse("0;1", &list, err, sizeof err), -1);
	assert_null(list.items);
}

#define UUID_A "GPU-8f3a1c2e-1111-2222-3333-444455556666"
#define UUID_B "GPU-8f3b0000-1111-2222-3333-444455556666"

static void test_spec_matches(void **state)
{
	(void)state;
	/* a number is an NVML index */
	assert_true(gpu_spec_matches("3", 3, UUID_A));
	assert_false(gpu_spec_matches("3", 2, UUID_A));
	assert_true(gpu_spec_matches("03", 3, UUID_A));
	assert_false(gpu_spec_matches("99999999999999999999999", 3, UUID_A));
	/* anything else a UUID prefix, with or without GPU-, any case */
	assert_true(gpu_spec_matches("8f3", 0, UUID_A));
	assert_true(gpu_spec_matches("GPU-8f3", 0, UUID_A));
	assert_true(gpu_spec_matches("gpu-8F3A", 0, UUID_A));
	assert_true(gpu_spec_matches("8F3A1C2E-1111", 0, UUID_A));
	assert_true(gpu_spec_matches(UUID_A, 0, UUID_A));
	assert_false(gpu_spec_matches("8f3a", 0, UUID_B));
	assert_false(gpu_spec_matches("9f3", 0, UUID_A));
	assert_false(gpu_spec_matches("3f8", 0, UUID_A)); /* prefix, not substring */
	/* "GPU-" alone names no GPU, nor does a prefix of an unreadable UUID */
	assert_false(gpu_spec_matches("GPU-", 0, UUID_A));
	assert_false(gpu_spec_matches("gpu-", 0, UUID_A));
	assert_false(gpu_spec_matches("8f3", 0, ""));
	assert_false(gpu_spec_matches("8f3", 0, NULL));
}

static void test_list_matches(void **state)
{
	struct gpu_list list = GPU_LIST_INIT;

	(void)state;
	assert_int_equal(gpu_list_parse("2,gpu-8F3B", &list, err, sizeof err), 0);
	assert_true(gpu_list_matches(&list, 2, UUID_A));
	assert_true(gpu_list_matches(&list, 0, UUID_B));
	assert_false(gpu_list_matches(&list, 0, UUID_A));
	gpu_list_release(&list);
	/* the empty list matches nothing */
	assert_false(gpu_list_matches(&list, 0, UUID_A));
}

/* "2-5" is indices 2 to 5; a UUID prefix with a dash stays a prefix. */
static void test_list_ranges(void **state)
{
	struct gpu_list list = GPU_LIST_INIT;

	(void)state;
	assert_int_equal(gpu_list_parse("2-4,7", &list, err, sizeof err), 0);
	assert_false(gpu_list_matches(&list, 1, UUID_A));
	assert_true(gpu_list_matches(&list, 2, UUID_A));
	assert_true(gpu_list_matches(&list, 3, UUID_A));
	assert_true(gpu_list_matches(&list, 4, UUID_A));
	assert_false(gpu_list_matches(&list, 5, UUID_A));
	assert_true(gpu_list_matches(&list, 7, UUID_A));
	gpu_list_release(&list);
	assert_int_equal(gpu_list_parse("3-3", &list, err, sizeof err), 0);
	assert_true(gpu_list_matches(&list, 3, UUID_A));
	assert_false(gpu_list_matches(&list, 2, UUID_A));
	gpu_list_release(&list);
	/* eight hex digits before the dash: a UUID's first group, not a range */
	assert_int_equal(gpu_list_parse("8f3a1c2e-1111", &list, err, sizeof err), 0);
	assert_true(gpu_list_matches(&list, 0, UUID_A));
	gpu_list_release(&list);
	assert_int_equal(gpu_list_parse("GPU-8f3a", &list, err, sizeof err), 0);
	assert_true(gpu_list_matches(&list, 0, UUID_A));
	gpu_list_release(&list);
	/* downwards is refused, naming the item and the range meant */
	assert_int_equal(gpu_list_parse("0,5-2", &list, err, sizeof err), -1);
	assert_string_equal(err, "'5-2': a range of indices runs upwards (2-5)");
	assert_int_equal(list.count, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_size_plain_number_is_mib),
	    cmocka_unit_test(test_size_binary_units_any_spelling),
	    cmocka_unit_test(test_size_decimals_exact),
	    cmocka_unit_test(test_size_sub_mib_rounds_up),
	    cmocka_unit_test(test_size_percent),
	    cmocka_unit_test(test_size_errors_say_what_is_wrong),
	    cmocka_unit_test(test_size_large_but_valid),
	    cmocka_unit_test(test_size_format),
	    cmocka_unit_test(test_duration_forms),
	    cmocka_unit_test(test_duration_errors),
	    cmocka_unit_test(test_duration_limit),
	    cmocka_unit_test(test_percent),
	    cmocka_unit_test(test_count),
	    cmocka_unit_test(test_list_parse),
	    cmocka_unit_test(test_list_errors),
	    cmocka_unit_test(test_spec_matches),
	    cmocka_unit_test(test_list_matches),
	    cmocka_unit_test(test_list_ranges),
	};

	return cmocka_run_group_tests_name("parse", tests, NULL, NULL);
}
