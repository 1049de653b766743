/*
 * util.c - small helpers shared by the library's modules.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util.h"

enum gm_err gm_fail(enum gm_err err, char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (buf && len) {
		va_start(ap, fmt);
		vsnprintf(buf, len, fmt, ap);
		va_end(ap);
	}
	return err;
}

void str_copy(char *dst, size_t size, const char *src)
{
	size_t n;

	if (!size)
		return;
	n = strnlen(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t now_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}

int64_t monotonic_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

void snapshot_add_note(struct gm_snapshot *snap, const char *fmt, ...)
{
	char buf[512];
	char **notes;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	notes = realloc(snap->notes, (snap->note_count + 1) * sizeof *notes);
	if (!notes)
		return;
	snap->notes = notes;
	notes[snap->note_count] = strdup(buf);
	if (notes[snap->note_count])
		snap->note_count++;
}

char *read_text_file(const char *path)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return NULL;
	if (getdelim(&buf, &len, '\0', f) < 0) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int touch_watched(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	int rc = 0;

	if (fd < 0)
		return -1;
	if (pwrite(fd, "1", 1, 0) != 1)
		rc = -1; /* the close still wakes the watcher */
	close(fd);
	return rc;
}

const char *age_text(char *buf, size_t len, int64_t ms)
{
	int64_t s = ms > 0 ? ms / 1000 : 0;

	if (s < 60)
		snprintf(buf, len, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(buf, len, "%lldm", (long long)(s / 60));
	else
		snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600),
		         (long long)(s % 3600 / 60));
	return buf;
}
