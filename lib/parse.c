/*
 * parse.c - the value syntaxes people type: SIZE, DURATION, PERCENT, COUNT
 * and LIST of GPUs.  The command line, gm_request_set() and the Python
 * binding all come through here, so one spelling means one thing
 * everywhere.  Arithmetic is exact (integers only), so "1.1G" suffers no
 * floating-point rounding; a size's fraction of a MiB rounds up ("512K"
 * asks for 1 MiB rather than silently for nothing), a duration's fraction
 * of a millisecond rounds down.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "parse.h"
#include "util.h"

/* At most this many digits after a decimal point count exactly; further
 * ones only nudge the value up.  Keeps fraction * unit within 64 bits. */
#define MAX_FRACTION_DIGITS 9

/* Sizes are capped so that callers may convert MiB to bytes in 64 bits. */
#define MAX_SIZE_MIB (UINT64_MAX >> 20)

/* Write a message for people into err and return -1. */
static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static const char *skip_blanks(const char *s)
{
	while (is_blank(*s))
		s++;
	return s;
}

/* Past the blanks at p, but not past end. */
static const char *skip_blanks_to(const char *p, const char *end)
{
	while (p < end && is_blank(*p))
		p++;
	return p;
}

/* Length of s without trailing blanks. */
static size_t trimmed_len(const char *s)
{
	size_t n = strlen(s);

	while (n && is_blank(s[n - 1]))
		n--;
	return n;
}

/* A decimal number "123" or "1.5": whole + frac / 10^frac_digits. */
struct decimal {
	uint64_t whole;
	uint64_t frac;
	unsigned frac_digits;
};

/* Scan a decimal at *p and advance *p past it.  Returns 0, -1 when there is
 * no number here, -2 when it does not fit in 64 bits. */
static int scan_decimal(const char **p, struct decimal *d)
{
	const char *s = *p;
	int sticky = 0;

	memset(d, 0, sizeof *d);
	if (!isdigit((unsigned char)*s))
		return -1;
	for (; isdigit((unsigned char)*s); s++) {
		if (__builtin_mul_overflow(d->whole, 10, &d->whole) ||
		    __builtin_add_overflow(d->whole, (uint64_t)(*s - '0'), &d->whole))
			return -2;
	}
	if (*s == '.') {
		if (!isdigit((unsigned char)s[1]))
			return -1;
		for (s++; isdigit((unsigned char)*s); s++) {
			if (d->frac_digits < MAX_FRACTION_DIGITS) {
				d->frac = d->frac * 10 + (uint64_t)(*s - '0');
				d->frac_digits++;
			} else if (*s != '0') {
				sticky = 1;
			}
		}
		d->frac += sticky;
	}
	*p = s;
	return 0;
}

static uint64_t pow10u(unsigned n)
{
	uint64_t r = 1;

	while (n--)
		r *= 10;
	return r;
}

/* KiB per unit of a size ("G", "GiB", "gb", "" for MiB); 0 if unknown. */
static uint64_t size_unit_kib(const char *unit, size_t len)
{
	static const struct {
		char letter;
		uint64_t kib;
	} units[] = {
	    {'k', 1},
	    {'m', 1024},
	    {'g', 1024 * 1024},
	    {'t', 1024ull * 1024 * 1024},
	};
	size_t i;

	if (len == 0)
		return 1024; /* a bare number is MiB */
	for (i = 0; i < ARRAY_SIZE(units); i++) {
		if (tolower((unsigned char)unit[0]) != units[i].letter)
			continue;
		if (len == 1 || (len == 2 && strchr("iIbB", unit[1])) ||
		    (len == 3 && strchr("iI", unit[1]) && strchr("bB", unit[2])))
			return units[i].kib;
		return 0;
	}
	return 0;
}

int parse_size(const char *s, struct gm_size *out, char *err, size_t errlen)
{
	const char *p, *unit;
	size_t len, unit_len;
	struct decimal d;
	uint64_t kib_per_unit, mib, rest, scale;
	int rc;

	s = skip_blanks(s ? s : "");
	len = trimmed_len(s);
	if (len == 0)
		return bad(err, errlen, "empty size (e.g. 8G, 8192, 50%%)");
	if (*s == '-')
		return bad(err, errlen, "'%.*s': a size cannot be negative", (int)len, s);
	p = s;
	rc = scan_decimal(&p, &d);
	if (rc == -1)
		return bad(err, errlen, "'%.*s' is not a size (e.g. 8G, 8192, 50%%)", (int)len, s);
	if (rc == -2)
		return bad(err, errlen, "'%.*s' is too large", (int)len, s);
	unit = skip_blanks_to(p, s + len); /* "8 GiB", as size_format writes it */
	unit_len = len - (size_t)(unit - s);

	if (unit_len == 1 && *unit == '%') {
		if (d.frac)
			return bad(err, errlen, "'%.*s': percentage must be a whole number",
			           (int)len, s);
		if (d.whole > 100)
			return bad(err, errlen, "percentage must be between 0 and 100");
		out->is_pct = 1;
		out->pct = (unsigned)d.whole;
		out->mib = 0;
		return 0;
	}

	kib_per_unit = size_unit_kib(unit, unit_len);
	if (!kib_per_unit)
		return bad(err, errlen, "unknown unit '%.*s' (use K, M, G, T or %%)", (int)unit_len,
		           unit);

	/*
	 * Whole MiB from the integer part; then the remainder (KiB left over
	 * from "K", plus the fraction, counted in KiB / 10^digits) rounds up
	 * to a whole MiB.
	 */
	scale = pow10u(d.frac_digits);
	if (kib_per_unit >= 1024) {
		if (__builtin_mul_overflow(d.whole, kib_per_unit / 1024, &mib))
			goto too_large;
		rest = 0;
	} else {
		mib = d.whole / 1024;
		rest = d.whole % 1024 * scale;
	}
	rest += d.frac * kib_per_unit;
	if (__builtin_add_overflow(mib, (rest + 1024 * scale - 1) / (1024 * scale), &mib) ||
	    mib > MAX_SIZE_MIB)
		goto too_large;
	out->is_pct = 0;
	out->pct = 0;
	out->mib = mib;
	return 0;

too_large:
	return bad(err, errlen, "'%.*s' is too large", (int)len, s);
}

uint64_t size_mib(const struct gm_size *size, uint64_t total_mib)
{
	if (!size->is_pct)
		return size->mib;
	/* total * pct / 100, rounded down, without overflowing */
	return total_mib / 100 * size->pct + total_mib % 100 * size->pct / 100;
}

char *size_format(const struct gm_size *size, char *buf, size_t len)
{
	if (!buf || !len)
		return buf;
	if (size->is_pct)
		snprintf(buf, len, "%u%%", size->pct);
	else if (size->mib && size->mib % 1024 == 0)
		snprintf(buf, len, "%llu GiB", (unsigned long long)(size->mib / 1024));
	else
		snprintf(buf, len, "%llu MiB", (unsigned long long)size->mib);
	return buf;
}

/* Milliseconds per duration unit; 0 if unknown. */
static int64_t duration_unit_ms(const char *unit, size_t len)
{
	if (len == 2 && strncasecmp(unit, "ms", 2) == 0)
		return 1;
	if (len != 1)
		return 0;
	switch (tolower((unsigned char)*unit)) {
	case 's':
		return 1000;
	case 'm':
		return 60 * 1000;
	case 'h':
		return 60 * 60 * 1000;
	case 'd':
		return 24 * 60 * 60 * 1000;
	}
	return 0;
}

/*
 * One or more NUMBER UNIT parts ("1h30m", "1h 30m"), or one bare NUMBER of
 * seconds.  A bare number after a unit ("1h30") is an error rather than a
 * guess.
 */
int parse_duration_ms(const char *s, int64_t *ms, char *err, size_t errlen)
{
	const char *p, *unit, *end, *number;
	size_t len, unit_len;
	struct decimal d;
	int64_t total = 0, per, part;
	int rc;

	s = skip_blanks(s ? s : "");
	len = trimmed_len(s);
	end = s + len;
	if (len == 0)
		return bad(err, errlen, "empty duration (e.g. 90s, 15m, 1h30m)");
	if (*s == '-')
		return bad(err, errlen, "'%.*s': a duration cannot be negative", (int)len, s);
	for (p = s; p < end; p = skip_blanks_to(p, end)) {
		number = p;
		rc = scan_decimal(&p, &d);
		if (rc == -1)
			return bad(err, errlen, "'%.*s' is not a duration (e.g. 90s, 15m, 1h30m)",
			           (int)len, s);
		if (rc == -2 || d.whole > INT64_MAX)
			goto too_long;
		unit = skip_blanks_to(p, end);
		for (p = unit; p < end && !isdigit((unsigned char)*p) && !is_blank(*p); p++)
			;
		unit_len = (size_t)(p - unit);
		if (unit_len == 0 && number == s && p == end) {
			per = 1000; /* the whole value is a number: seconds */
		} else if (unit_len == 0) {
			return bad(err, errlen,
			           "'%.*s': missing unit after '%.*s' (use s, m, h, d)", (int)len,
			           s, (int)(unit - number), number);
		} else {
			per = duration_unit_ms(unit, unit_len);
			if (!per)
				return bad(err, errlen, "unknown unit '%.*s' (use s, m, h, d)",
				           (int)unit_len, unit);
		}
		if (__builtin_mul_overflow((int64_t)d.whole, per, &part))
			goto too_long;
		if (part > MAX_DURATION_MS)
			goto too_long;
		part += (int64_t)(d.frac * (uint64_t)per / pow10u(d.frac_digits));
		total += part;
		if (total > MAX_DURATION_MS)
			goto too_long;
	}
	*ms = total;
	return 0;

too_long:
	return bad(err, errlen, "'%.*s' is too long (at most %dd)", (int)len, s, MAX_DURATION_DAYS);
}

/* Only digits, len of them: 0 and *v; -1 if not a number; -2 if it does not
 * fit in 64 bits. */
static int scan_whole(const char *s, size_t len, uint64_t *v)
{
	size_t i;

	*v = 0;
	if (len == 0)
		return -1;
	for (i = 0; i < len; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -1;
		if (__builtin_mul_overflow(*v, 10, v) ||
		    __builtin_add_overflow(*v, (uint64_t)(s[i] - '0'), v))
			return -2;
	}
	return 0;
}

int parse_percent(const char *s, unsigned *pct, char *err, size_t errlen)
{
	size_t len, digits;
	uint64_t v;
	int rc;

	s = skip_blanks(s ? s : "");
	len = trimmed_len(s);
	digits = len && s[len - 1] == '%' ? len - 1 : len;
	if (digits && *s == '-')
		return bad(err, errlen, "percentage must be between 0 and 100");
	rc = scan_whole(s, digits, &v);
	if (rc == -1)
		return bad(err, errlen, "'%.*s' is not a percentage (0 to 100)", (int)len, s);
	if (rc == -2 || v > 100)
		return bad(err, errlen, "percentage must be between 0 and 100");
	*pct = (unsigned)v;
	return 0;
}

int parse_count(const char *s, unsigned *n, char *err, size_t errlen)
{
	size_t len;
	uint64_t v;
	int rc;

	s = skip_blanks(s ? s : "");
	len = trimmed_len(s);
	if (len && *s == '-')
		return bad(err, errlen, "count must be between 1 and 1024");
	rc = scan_whole(s, len, &v);
	if (rc == -1)
		return bad(err, errlen, "'%.*s' is not a count (1 to 1024)", (int)len, s);
	if (rc == -2 || v < 1 || v > 1024)
		return bad(err, errlen, "count must be between 1 and 1024");
	*n = (unsigned)v;
	return 0;
}

int gpu_index_range(const char *item, size_t len, unsigned *lo, unsigned *hi)
{
	const char *dash = memchr(item, '-', len);
	uint64_t a, b;
	size_t la, lb;

	if (!dash)
		return 0;
	la = (size_t)(dash - item);
	lb = len - la - 1;
	if (la < 1 || la > 4 || lb < 1 || lb > 4 || scan_whole(item, la, &a) ||
	    scan_whole(dash + 1, lb, &b))
		return 0;
	*lo = (unsigned)a;
	*hi = (unsigned)b;
	return 1;
}

void gpu_list_release(struct gpu_list *list)
{
	size_t i;

	for (i = 0; i < list->count; i++)
		free(list->items[i]);
	free(list->items);
	list->items = NULL;
	list->count = 0;
}

int gpu_list_parse(const char *s, struct gpu_list *out, char *err, size_t errlen)
{
	struct gpu_list list = GPU_LIST_INIT;
	const char *item, *end, *c;
	size_t len, n = 1;
	unsigned lo, hi;

	out->count = 0;
	out->items = NULL;
	if (!s)
		s = "";
	if (trimmed_len(skip_blanks(s)) == 0)
		return bad(err, errlen, "empty list (e.g. 0,3 or GPU-b120)");
	for (c = s; *c; c++)
		n += *c == ',';
	list.items = calloc(n, sizeof *list.items);
	if (!list.items)
		goto nomem;

	for (item = s;; item = end + 1) {
		end = strchr(item, ',');
		if (!end)
			end = item + strlen(item);
		item = skip_blanks(item);
		len = (size_t)(end - item);
		while (len && is_blank(item[len - 1]))
			len--;
		if (len == 0) {
			bad(err, errlen, "empty item in '%s'", s);
			goto done;
		}
		for (c = item; c < item + len; c++) {
			if (!isalnum((unsigned char)*c) && *c != '-') {
				bad(err, errlen, "'%.*s' is neither a GPU index nor a UUID prefix",
				    (int)len, item);
				goto done;
			}
		}
		if (gpu_index_range(item, len, &lo, &hi) && lo > hi) {
			bad(err, errlen, "'%.*s': a range of indices runs upwards (%u-%u)",
			    (int)len, item, hi, lo);
			goto done;
		}
		list.items[list.count] = strndup(item, len);
		if (!list.items[list.count])
			goto nomem;
		list.count++;
		if (!*end)
			break;
	}
	*out = list;
	return 0;

nomem:
	bad(err, errlen, "out of memory");
done:
	gpu_list_release(&list);
	return -1;
}

int gpu_spec_matches(const char *spec, unsigned index, const char *uuid)
{
	uint64_t v;
	size_t len;

	if (!spec)
		return 0;
	switch (scan_whole(spec, strlen(spec), &v)) {
	case 0:
		return v == index;
	case -2:
		return 0; /* a number too large for any index */
	}
	if (!uuid)
		return 0;
	if (strncasecmp(spec, "GPU-", 4) == 0)
		spec += 4;
	if (strncasecmp(uuid, "GPU-", 4) == 0)
		uuid += 4;
	len = strlen(spec);
	return len && strncasecmp(uuid, spec, len) == 0;
}

int gpu_list_matches(const struct gpu_list *list, unsigned index, const char *uuid)
{
	size_t i;
	unsigned lo, hi;

	for (i = 0; i < list->count; i++) {
		const char *item = list->items[i];

		if (gpu_index_range(item, strlen(item), &lo, &hi)
		        ? lo <= index && index <= hi
		        : gpu_spec_matches(item, index, uuid))
			return 1;
	}
	return 0;
}
