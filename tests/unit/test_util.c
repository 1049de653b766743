/*
 * test_util.c - lib/util.c's small helpers that other tests do not reach:
 * touch_watched, the nudge a dispatcher and `gpuman wait` watch for.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "util.h"

/* The name of the next IN_CLOSE_WRITE on ifd within a second ("" if none). */
static void next_close_write(int ifd, char *name, size_t len)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct pollfd p = {ifd, POLLIN, 0};
	ssize_t n;

	name[0] = '\0';
	if (poll(&p, 1, 1000) != 1 || (n = read(ifd, buf, sizeof buf)) <= 0)
		return;
	for (char *at = buf; at < buf + n;) {
		struct inotify_event *ev = (struct inotify_event *)at;

		if ((ev->mask & IN_CLOSE_WRITE) && ev->len) {
			snprintf(name, len, "%s", ev->name);
			return;
		}
		at += sizeof *ev + ev->len;
	}
}

static void test_touch_watched(void **state)
{
	char dir[] = "/tmp/gm-util-XXXXXX", path[PATH_MAX], name[256], text[8];
	struct stat first, again;
	int ifd, fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/wake", dir);
	ifd = inotify_init1(IN_CLOEXEC);
	assert_true(ifd >= 0);
	assert_true(inotify_add_watch(ifd, dir, IN_CLOSE_WRITE) >= 0);

	/* made if missing, and its watcher woken */
	assert_int_equal(touch_watched(path), 0);
	next_close_write(ifd, name, sizeof name);
	assert_string_equal(name, "wake");
	assert_int_equal(stat(path, &first), 0);
	assert_int_equal(first.st_size, 1);
	assert_int_equal(first.st_mode & 0777, 0600);

	/* again, over two bytes: woken again, the same file, written in
	 * place, never emptied (ext4 would write an emptied file out) */
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "xy", 2), 2);
	close(fd);
	next_close_write(ifd, name, sizeof name);
	assert_int_equal(touch_watched(path), 0);
	next_close_write(ifd, name, sizeof name);
	assert_string_equal(name, "wake");
	assert_int_equal(stat(path, &again), 0);
	assert_int_equal(again.st_ino, first.st_ino);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, text, sizeof text), 2);
	assert_memory_equal(text, "1y", 2);
	close(fd);

	/* a link planted in its place is not followed */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	assert_int_equal(touch_watched(path), -1);
	assert_int_equal(errno, ELOOP);
	assert_int_equal(unlink(path), 0);

	/* a directory that is gone: -1 with errno, nothing made */
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(touch_watched(path), -1);
	assert_int_equal(errno, ENOENT);
	close(ifd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_touch_watched),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
