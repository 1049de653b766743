/*
 * util.h - small helpers shared by the library's modules.
 */
#ifndef GM_UTIL_H
#define GM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include "gpuman.h"
#include "snapshot_types.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Write a message into a caller's buffer; NULL or zero-length is allowed.
 * Returns err so that callers can `return gm_fail(GM_ERR_X, buf, len, ...)`. */
enum gm_err gm_fail(enum gm_err err, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Copy src into dst of size bytes, truncating; dst is always terminated. */
void str_copy(char *dst, size_t size, const char *src);

/* A small file's whole text (of /proc or /sys), NUL-ended, malloc'd; NULL
 * if it cannot be read. */
char *read_text_file(const char *path);

/* Wake whoever watches path with inotify (IN_CLOSE_WRITE): its one byte
 * written in place, never truncated -- ext4 writes a file truncated and
 * rewritten out at its close, a disk write for every nudge.  0, or -1
 * with errno. */
int touch_watched(const char *path);

/* An age at a glance, ms long: "42s", "5m", "1h05m" (negative: "0s").
 * Returns buf. */
const char *age_text(char *buf, size_t len, int64_t ms);

int64_t now_ms(void);       /* CLOCK_REALTIME, milliseconds */
int64_t monotonic_ms(void); /* CLOCK_MONOTONIC, milliseconds */

/* Append a printf-formatted note to snap->notes; ignores out-of-memory. */
void snapshot_add_note(struct gm_snapshot *snap, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
