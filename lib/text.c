/*
 * text.c - escape control characters in text shown to people (text.h).
 */
#include <stdio.h>
#include <string.h>
#include "text.h"

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if it is not one.
 * *cp gets its code point. */
static size_t utf8_seq(const unsigned char *s, unsigned *cp)
{
	unsigned c = s[0], min;
	size_t n, i;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2, *cp = c & 0x1F, min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3, *cp = c & 0x0F, min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4, *cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		*cp = *cp << 6 | (s[i] & 0x3F);
	}
	if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF))
		return 0;
	return n;
}

/* Code points that reorder or hide what follows them on screen. */
static int is_bidi_control(unsigned cp)
{
	return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E ||
	       cp == 0x200F || cp == 0x061C;
}

char *text_printable(char *dst, size_t len, const char *src)
{
	const unsigned char *s = (const unsigned char *)(src ? src : "");
	char esc[16];
	size_t o = 0, n, w;
	unsigned cp;

	while (*s) {
		n = utf8_seq(s, &cp);
		esc[0] = '\0';
		if (n == 0) {
			snprintf(esc, sizeof esc, "\\x%02X", *s);
			n = 1;
		} else if (cp == 0x1B) {
			strcpy(esc, "\\e");
		} else if (cp == '\n') {
			strcpy(esc, "\\n");
		} else if (cp == '\r') {
			strcpy(esc, "\\r");
		} else if (cp == '\t') {
			strcpy(esc, "\\t");
		} else if (cp < 0x20 || cp == 0x7F) {
			snprintf(esc, sizeof esc, "\\x%02X", cp);
		} else if (cp >= 0x80 && cp <= 0x9F) {
			snprintf(esc, sizeof esc, "\\u%04x", cp);
		} else if (is_bidi_control(cp)) {
			snprintf(esc, sizeof esc, "\\u%04x", cp);
		}
		w = esc[0] ? strlen(esc) : n;
		if (o + w >= len)
			break;
		memcpy(dst + o, esc[0] ? (const unsigned char *)esc : s, w);
		o += w;
		s += n;
	}
	dst[o] = '\0';
	return dst;
}
