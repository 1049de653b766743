/*
 * test_lease_files.c - the registry's file protocol, table by table: which
 * lease and ticket files registry_read believes (registry.h's rules: a live
 * flock, the uid the file names is its owner's, a holder that is a live,
 * running process of that owner, a ticket that does not claim to be older
 * than it is, no symbolic links) and the order of the wait line.
 *
 * Each case writes one file into a fresh state directory as another gpuman
 * (or a forger) would, holds its lock or not, and reads the registry.  The
 * holders are real processes: this one (root, running), a reaped child
 * (dead), a stopped child and a child running as user nobody.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "lease_api.h"

#define NOBODY 65534
#define MAX_HELD 24

static char top[] = "/tmp/gm-test-lease-files.XXXXXX";
static char state[300];
static int held[MAX_HELD], held_count;
static pid_t dead_pid, stopped_pid, nobody_pid;

/* Who a file names as its holder. */
enum who {
	ME,      /* this process: root and running */
	DEAD,    /* a child that has exited and been reaped */
	STOPPED, /* a child stopped by SIGSTOP */
	NOBODY_, /* a child running as user nobody */
	ZERO     /* pid 0 */
};

static int pid_of(enum who w)
{
	switch (w) {
	case ME:
		return (int)getpid();
	case DEAD:
		return (int)dead_pid;
	case STOPPED:
		return (int)stopped_pid;
	case NOBODY_:
		return (int)nobody_pid;
	default:
		return 0;
	}
}

static int group_setup(void **s)
{
	char path[400];
	int status;

	(void)s;
	if (!mkdtemp(top))
		return -1;
	snprintf(path, sizeof path, "%s/none.conf", top);
	setenv("GPUMAN_CONFIG", path, 1); /* no admin limits */
	setenv("GPUMAN_BROKER", "off", 1);
	dead_pid = fork();
	if (dead_pid == 0)
		_exit(0);
	waitpid(dead_pid, &status, 0);
	stopped_pid = fork();
	if (stopped_pid == 0) {
		raise(SIGSTOP);
		_exit(0);
	}
	waitpid(stopped_pid, &status, WUNTRACED);
	nobody_pid = fork();
	if (nobody_pid == 0) {
		if (setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			_exit(1);
		pause();
		_exit(0);
	}
	/* until it has dropped root, it is root's process */
	for (int i = 0; i < 200; i++) {
		struct stat st;

		snprintf(path, sizeof path, "/proc/%d", (int)nobody_pid);
		if (stat(path, &st) == 0 && st.st_uid == NOBODY)
			break;
		usleep(5000);
	}
	return 0;
}

static int group_teardown(void **s)
{
	char cmd[400];

	(void)s;
	kill(stopped_pid, SIGKILL);
	kill(nobody_pid, SIGKILL);
	waitpid(stopped_pid, NULL, 0);
	waitpid(nobody_pid, NULL, 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
	return system(cmd);
}

/* A fresh, empty state directory per case. */
static void fresh_state(const char *name)
{
	char cmd[700];

	snprintf(state, sizeof state, "%s/%s", top, name);
	for (char *p = state + strlen(top) + 1; *p; p++)
		if (*p == ' ' || *p == '\'' || *p == '/' || *p == ':')
			*p = '_';
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", state);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(mkdir(state, 0700), 0);
	setenv("GPUMAN_STATE_DIR", state, 1);
}

/* Write name (mode 0644, owned by owner) and hold its flock if asked, as
 * its holder would: the lock is held by this process's descriptor, which a
 * reader's own open cannot share. */
static void put(const char *name, const char *text, int locked, unsigned owner)
{
	char path[600];
	int fd;

	snprintf(path, sizeof path, "%s/%s", state, name);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchown(fd, owner, owner), 0);
	if (locked) {
		assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
		assert_true(held_count < MAX_HELD);
		held[held_count++] = fd;
	} else {
		close(fd);
	}
}

static void release_all(void)
{
	while (held_count)
		close(held[--held_count]);
}

static void read_view(struct registry_view *view)
{
	struct registry *reg;
	char err[GM_ERRBUF_SIZE];

	assert_int_equal(registry_open(&reg, err, sizeof err), GM_OK);
	assert_int_equal(registry_read(reg, view, err, sizeof err), GM_OK);
	registry_close(reg);
}

/* ---- leases ---------------------------------------------------------- */

struct lease_case {
	const char *what;
	enum who pid, job_pid;
	int uid;           /* the uid the file names; -1: none (an older gpuman's) */
	unsigned owner;    /* the file's owner */
	const char *pidns; /* "" : ours (absent); else the JSON value */
	int locked;
	const char *kind; /* "exclusive" or "share" */
	int believed;
};

static const struct lease_case lease_cases[] = {
    {"live holder, own uid", ME, DEAD, 0, 0, "", 1, "exclusive", 1},
    {"share lease", ME, DEAD, 0, 0, "", 1, "share", 1},
    {"no lock: its holder died", ME, DEAD, 0, 0, "", 0, "exclusive", 0},
    {"forged uid: names user 4242, owned by root", ME, DEAD, 4242, 0, "", 1, "exclusive", 0},
    {"no uid field (older gpuman): its owner's", ME, DEAD, -1, 0, "", 1, "exclusive", 1},
    {"dead holder and dead job, lock held by someone", DEAD, DEAD, 0, 0, "", 1, "exclusive", 0},
    {"dead holder, live job: the job keeps it", DEAD, ME, 0, 0, "", 1, "exclusive", 1},
    {"holder is another user's process", NOBODY_, DEAD, 0, 0, "", 1, "exclusive", 0},
    {"nobody's file naming root's process", ME, DEAD, NOBODY, NOBODY, "", 1, "exclusive", 0},
    {"nobody's file, nobody's holder", NOBODY_, DEAD, NOBODY, NOBODY, "", 1, "exclusive", 1},
    {"pid 0", ZERO, ZERO, 0, 0, "", 1, "exclusive", 0},
    {"another pid namespace: the lock alone", DEAD, DEAD, 0, 0, "1", 1, "exclusive", 1},
};

static void lease_text(const struct lease_case *c, char *buf, size_t len)
{
	char uid[32] = "", ns[32] = "";

	if (c->uid >= 0)
		snprintf(uid, sizeof uid, "\"uid\":%d,", c->uid);
	if (c->pidns[0])
		snprintf(ns, sizeof ns, "\"pidns\":%s,", c->pidns);
	snprintf(buf, len,
	         "{%s%s\"id\":\"L1\",\"pid\":%d,\"job_pid\":%d,\"command\":\"train\","
	         "\"start_ms\":5,\"kind\":\"%s\",\"share_mib\":%d,"
	         "\"gpus\":[{\"index\":3,\"uuid\":\"GPU-aaa\"}]}",
	         uid, ns, pid_of(c->pid), pid_of(c->job_pid), c->kind,
	         strcmp(c->kind, "share") ? 0 : 4096);
}

static void test_lease_table(void **s)
{
	(void)s;
	for (size_t i = 0; i < sizeof lease_cases / sizeof *lease_cases; i++) {
		const struct lease_case *c = &lease_cases[i];
		struct registry_view view;
		char text[512];

		fresh_state(c->what);
		lease_text(c, text, sizeof text);
		put("lease.L1", text, c->locked, c->owner);
		read_view(&view);
		release_all();
		if (view.lease_count != (size_t)c->believed)
			fail_msg("lease case '%s': %s, expected %s", c->what,
			         view.lease_count ? "believed" : "not believed",
			         c->believed ? "believed" : "not believed");
		if (c->believed) {
			const struct lease_info *l = &view.leases[0];

			assert_string_equal(l->id, "L1");
			assert_int_equal(l->uid, c->owner);
			assert_int_equal(l->gpu_count, 1);
			assert_string_equal(l->uuids[0], "GPU-aaa");
			assert_int_equal(l->indices[0], 3);
			assert_int_equal(l->exclusive, !strcmp(c->kind, "exclusive"));
			assert_int_equal(l->share_mib, l->exclusive ? 0 : 4096);
		}
		registry_view_release(&view);
	}
}

/* A symbolic link named like a lease is never followed, even to a live,
 * honest lease file: another user could point it anywhere. */
static void test_lease_symlink_not_followed(void **s)
{
	char text[512], target[600], link[600];
	struct registry_view view;

	(void)s;
	fresh_state("symlink");
	lease_text(&lease_cases[0], text, sizeof text);
	put("honest-file", text, 1, 0);
	snprintf(target, sizeof target, "%s/honest-file", state);
	snprintf(link, sizeof link, "%s/lease.L1", state);
	assert_int_equal(symlink(target, link), 0);
	read_view(&view);
	release_all();
	assert_int_equal(view.lease_count, 0);
	registry_view_release(&view);
}

/* A dead lease is removed by the reader (the directory is ours). */
static void test_dead_lease_removed(void **s)
{
	char text[512], path[600];
	struct registry_view view;

	(void)s;
	fresh_state("dead removed");
	lease_text(&lease_cases[0], text, sizeof text);
	put("lease.L1", text, 0, 0);
	read_view(&view);
	registry_view_release(&view);
	snprintf(path, sizeof path, "%s/lease.L1", state);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(errno, ENOENT);
}

/* ---- tickets --------------------------------------------------------- */

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct ticket_case {
	const char *what;
	enum who pid;
	int uid;
	unsigned owner;
	long long claim_s; /* the name's time, relative to now; 999: no time */
	int locked;
	int believed;
};

static const struct ticket_case ticket_cases[] = {
    {"honest ticket", ME, 0, 0, 0, 1, 1},
    {"claims 60 s before it was made: jumps the line", ME, 0, 0, -60, 1, 0},
    {"claims 10 s before (within the skew)", ME, 0, 0, -10, 1, 1},
    {"claims a later time: only goes to the back", ME, 0, 0, 3600, 1, 1},
    {"no time in the name", ME, 0, 0, 999, 1, 0},
    {"stopped holder holds nothing back", STOPPED, 0, 0, 0, 1, 0},
    {"dead holder", DEAD, 0, 0, 0, 1, 0},
    {"no lock", ME, 0, 0, 0, 0, 0},
    {"forged uid", ME, 4242, 0, 0, 1, 0},
    {"holder is another user's process", NOBODY_, 0, 0, 0, 1, 0},
};

static void ticket_name(long long ns, const char *id, char *buf, size_t len)
{
	snprintf(buf, len, "wait.%020lld.%s", ns, id);
}

static void ticket_text(int pid, int uid, const char *summary, char *buf, size_t len)
{
	snprintf(buf, len,
	         "{\"uid\":%d,\"pid\":%d,\"command\":\"run\",\"since_ms\":7,\"summary\":\"%s\","
	         "\"candidates\":[\"GPU-aaa\",\"GPU-bbb\"]}",
	         uid, pid, summary);
}

static void test_ticket_table(void **s)
{
	(void)s;
	for (size_t i = 0; i < sizeof ticket_cases / sizeof *ticket_cases; i++) {
		const struct ticket_case *c = &ticket_cases[i];
		struct registry_view view;
		char name[128], text[512];

		fresh_state(c->what);
		if (c->claim_s == 999)
			snprintf(name, sizeof name, "wait.soon.T1");
		else
			ticket_name(now_ns() + c->claim_s * 1000000000LL, "T1", name, sizeof name);
		ticket_text(pid_of(c->pid), c->uid, "1 GPU exclusive", text, sizeof text);
		put(name, text, c->locked, c->owner);
		read_view(&view);
		release_all();
		if (view.waiter_count != (size_t)c->believed)
			fail_msg("ticket case '%s': %s, expected %s", c->what,
			         view.waiter_count ? "believed" : "not believed",
			         c->believed ? "believed" : "not believed");
		if (c->believed) {
			assert_string_equal(view.waiters[0].name, name);
			assert_int_equal(view.waiters[0].cand_count, 2);
			assert_string_equal(view.waiters[0].cand[1], "GPU-bbb");
			assert_string_equal(view.waiters[0].summary, "1 GPU exclusive");
		}
		registry_view_release(&view);
	}
}

/* The line is served in the order the names give (arrival time), whatever
 * order the files were made or the directory lists them in (16 tickets:
 * no hashed directory order comes out sorted by chance); a ticket that
 * claims an earlier time than it may is left out, not put first. */
#define LINE 16

static void test_wait_line_order(void **s)
{
	long long base = now_ns();
	struct registry_view view;
	char name[128], text[512], id[16];

	(void)s;
	fresh_state("order");
	for (int k = 0; k < LINE; k++) {
		int i = (k * 7) % LINE; /* made out of order: 0, 7, 14, 5, ... */

		snprintf(id, sizeof id, "T%02d", i);
		ticket_name(base + (i + 1) * 100000000LL, id, name, sizeof name);
		ticket_text((int)getpid(), 0, id, text, sizeof text);
		put(name, text, 1, 0);
		if (k == LINE / 2) {
			ticket_name(base - 60000000000LL, "CHEAT", name, sizeof name);
			ticket_text((int)getpid(), 0, "CHEAT", text, sizeof text);
			put(name, text, 1, 0);
		}
	}
	read_view(&view);
	release_all();
	assert_int_equal(view.waiter_count, LINE);
	for (int i = 0; i < LINE; i++) {
		snprintf(id, sizeof id, "T%02d", i);
		if (strcmp(view.waiters[i].summary, id))
			fail_msg("wait line position %d: '%s', expected '%s'", i,
			         view.waiters[i].summary, id);
	}
	registry_view_release(&view);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lease_table),
	    cmocka_unit_test(test_lease_symlink_not_followed),
	    cmocka_unit_test(test_dead_lease_removed),
	    cmocka_unit_test(test_ticket_table),
	    cmocka_unit_test(test_wait_line_order),
	};

	if (geteuid() != 0) {
		/* files of another owner and a process of another user need root */
		printf("1..0 # SKIP needs root (chown, setuid)\n");
		return 0;
	}
	return cmocka_run_group_tests_name("lease_files", tests, group_setup, group_teardown);
}
