/*
 * text.h - other people's text made safe to show on a terminal.
 *
 * Command lines, user names and lease or ticket fields come from other users
 * of the machine (argv is anybody's to set, registry files are written by
 * their owners).  Printed raw, an escape sequence in them would move the
 * cursor, rewrite what another user sees, retitle the window or hide itself.
 * Every human-readable view passes such text through text_printable().
 */
#ifndef GM_TEXT_H
#define GM_TEXT_H

#include <stddef.h>

/*
 * Copy src into dst (len bytes, len > 0) with every control character (C0,
 * DEL, C1), bidirectional override and byte that is not UTF-8 written as an
 * escape: \e \n \r \t, \xNN for other bytes, \u202e for overrides.  Valid
 * printable UTF-8 is kept.  Truncated between characters to fit, always
 * terminated.  src NULL is "".  Returns dst.
 */
char *text_printable(char *dst, size_t len, const char *src);

#endif
