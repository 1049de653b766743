/*
 * test_caps.c - gpuman.conf's limits as the registry and the broker apply
 * them (lib/caps.c): max_gpus, max_reserve, keep_out and a group's GPUs,
 * with [user] over [group] over [limits]; and the user's own file, which
 * may set defaults only.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "caps.h"
#include "config.h"
#include "policy.h"
#include "unit.h"

static char dir[] = "/tmp/gm-test-caps.XXXXXX";

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Load an admin file with text (and a user file with user, if any). */
static enum gm_err load(struct config *cfg, const char *text, const char *user, char *err,
                        size_t len)
{
	char sys[128], home[128];

	snprintf(sys, sizeof sys, "%s/gpuman.conf", dir);
	snprintf(home, sizeof home, "%s/gpuman", dir);
	write_file(sys, text);
	setenv("GPUMAN_CONFIG", sys, 1);
	setenv("XDG_CONFIG_HOME", dir, 1);
	mkdir(home, 0755);
	snprintf(home, sizeof home, "%s/gpuman/config", dir);
	unlink(home);
	if (user)
		write_file(home, user);
	return config_load(cfg, 1, err, len);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static void test_limits_and_precedence(void **state)
{
	struct config cfg;
	struct passwd *pw = getpwuid(getuid());
	struct group *gr = getgrgid(getgid());
	char err[512], text[512], why[300];

	(void)state;
	assert_non_null(pw);
	assert_non_null(gr);
	snprintf(text, sizeof text,
	         "[limits]\nmax_gpus = 1\nmax_reserve = 1h\nmax_lease = 1d\n[group %s]\n"
	         "max_gpus = 3\nmax_reserve = 2h\nmax_lease = 2d\n",
	         gr->gr_name);
	assert_int_equal(load(&cfg, text, NULL, err, sizeof err), GM_OK);
	/* the group wins over [limits] */
	assert_int_equal(caps_over(&cfg, getuid(), 2, 1, why, sizeof why), 0);
	assert_int_equal(caps_over(&cfg, getuid(), 3, 1, why, sizeof why), 1);
	assert_non_null(strstr(why, "max_gpus: holds 3 GPUs already, the limit is 3 ([group "));
	assert_int_equal(caps_over(&cfg, getuid(), 0, 4, why, sizeof why), 2);
	assert_non_null(strstr(why, "asks 4 GPUs, the limit is 3"));
	assert_int_equal(caps_reserve_ok(&cfg, getuid(), 2 * 3600000LL, why, sizeof why), 0);
	assert_int_equal(caps_reserve_ok(&cfg, getuid(), 3 * 3600000LL, why, sizeof why), -1);
	assert_non_null(strstr(why, "--for 3h is longer than the limit, 2h ([group "));
	assert_int_equal(config_max_lease_ms(&cfg, getuid(), why, sizeof why), 2 * 86400000LL);
	assert_non_null(strstr(why, "[group "));
	assert_int_equal(config_max_lease_ms(&cfg, 4000000000u, why, sizeof why), 86400000LL);
	/* a uid nobody names gets [limits] */
	assert_int_equal(caps_over(&cfg, 4000000000u, 1, 1, why, sizeof why), 1);
	assert_non_null(strstr(why, "([limits] in "));
	config_release(&cfg);
	/* [user] wins over every group */
	snprintf(text, sizeof text, "[group %s]\nmax_gpus = 3\n[user %s]\nmax_gpus = 1\n",
	         gr->gr_name, pw->pw_name);
	assert_int_equal(load(&cfg, text, NULL, err, sizeof err), GM_OK);
	assert_int_equal(caps_over(&cfg, getuid(), 1, 1, why, sizeof why), 1);
	assert_int_equal(caps_reserve_ok(&cfg, getuid(), 1000LL * 86400 * 365, why, sizeof why), 0);
	assert_int_equal(config_max_lease_ms(&cfg, getuid(), why, sizeof why), 0); /* none */
	config_release(&cfg);
}

static void test_gpus_kept_out_and_for_groups(void **state)
{
	struct gm_snapshot snap;
	struct config cfg;
	struct group *gr = getgrgid(getgid());
	const char *barred[4];
	char err[512], text[256], why[4][160];

	(void)state;
	fake_snapshot_init(&snap);
	for (unsigned i = 0; i < 4; i++)
		fake_gpu_mem(&snap, i, 16000, 0);
	snprintf(text, sizeof text,
	         "[limits]\nkeep_out = 3\n[group %s]\ngpus = 1\n"
	         "[group gm-no-such-group]\ngpus = 2\n",
	         gr->gr_name);
	assert_int_equal(load(&cfg, text, NULL, err, sizeof err), GM_OK);
	assert_int_equal(caps_barred(&cfg, getuid(), &snap, barred, why), 2);
	assert_null(barred[0]);
	assert_null(barred[1]); /* kept for our own group */
	assert_non_null(barred[2]);
	assert_non_null(strstr(barred[2], "kept for group gm-no-such-group"));
	assert_non_null(strstr(barred[3], "kept out of gpuman by the admin (keep_out in "));
	config_release(&cfg);
	fake_snapshot_release(&snap);
}

static void test_user_file_sets_defaults_only(void **state)
{
	struct config cfg;
	char err[512];

	(void)state;
	assert_int_equal(load(&cfg, "[defaults]\npolicy = util\nwait = 5m\n",
	                      "[defaults]\npolicy = index\n", err, sizeof err),
	                 GM_OK);
	assert_int_equal(cfg.default_by, GM_BY_INDEX); /* the user's wins */
	assert_true(cfg.has_default_wait);
	assert_int_equal(cfg.default_wait_ms, 300000);
	config_release(&cfg);
	assert_int_equal(load(&cfg, "", "[limits]\nmax_gpus = 8\n", err, sizeof err), GM_ERR_STATE);
	assert_non_null(strstr(err, "gpuman/config:2: [limits] is the admin's"));
	assert_int_equal(load(&cfg, "[limits]\nkeep_out = 0,,1\n", NULL, err, sizeof err),
	                 GM_ERR_STATE);
	assert_non_null(strstr(err, "gpuman.conf:2: keep_out = 0,,1:"));
	assert_int_equal(load(&cfg, "[group x]\nmax_reserve = soon\n", NULL, err, sizeof err),
	                 GM_ERR_STATE);
	assert_non_null(strstr(err, "max_reserve = soon:"));
	assert_int_equal(load(&cfg, "[limits]\nmax_lease = 0\n", NULL, err, sizeof err),
	                 GM_ERR_STATE);
	assert_non_null(strstr(err, "gpuman.conf:2: max_lease = 0"));
	assert_int_equal(load(&cfg, "[user x]\ngpus = 1\n", NULL, err, sizeof err), GM_ERR_STATE);
	assert_non_null(strstr(err, "unknown key 'gpus' in [user x] (known: max_gpus, max_reserve, "
	                            "max_lease, max_gpu_hours)"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_limits_and_precedence),
	    cmocka_unit_test(test_gpus_kept_out_and_for_groups),
	    cmocka_unit_test(test_user_file_sets_defaults_only),
	};

	return cmocka_run_group_tests_name("caps", tests, setup, NULL);
}
