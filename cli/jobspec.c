/*
 * jobspec.c - what submit records about a job beyond its command: its time
 * limit (--time) and its array (--array) (see jobs.h).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "jobs.h"
#include "gpuman-internal.h"

/* Longest time limit: a year is a mistake, not a plan. */
#define LIMIT_MAX_S (366LL * 86400)

/* Whole non-negative number of at most 9 digits at *p; -1 if none. */
static long long number(const char **p)
{
	long long v = 0;
	int digits = 0;

	while (isdigit((unsigned char)**p) && digits < 10) {
		v = v * 10 + (**p - '0');
		(*p)++;
		digits++;
	}
	return digits && digits < 10 ? v : -1;
}

/* Slurm's forms: MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS. */
static int slurm_form(const char *s, long long *secs)
{
	long long f[3] = {0, 0, 0}, days = 0;
	const char *p = s;
	int n = 0, dash = 0;

	if (strchr(s, '-')) {
		days = number(&p);
		if (days < 0 || *p++ != '-')
			return -1;
		dash = 1;
	}
	for (;;) {
		if (n == 3 || (f[n] = number(&p)) < 0)
			return -1;
		n++;
		if (!*p)
			break;
		if (*p++ != ':')
			return -1;
	}
	if (n > 1)
		for (int i = 1; i < n; i++)
			if (f[i] > 59)
				return -1;
	if (dash) /* D-HH[:MM[:SS]] */
		*secs = days * 86400 + f[0] * 3600 + f[1] * 60 + f[2];
	else if (n == 2) /* MM:SS */
		*secs = f[0] * 60 + f[1];
	else if (n == 3) /* HH:MM:SS */
		*secs = f[0] * 3600 + f[1] * 60 + f[2];
	else
		return -1;
	return 0;
}

int parse_time_limit(const char *opt, const char *s, int bare_minutes, long long *secs, char *err,
                     size_t len)
{
	int64_t ms;
	char why[200];
	const char *p = s;

	*secs = 0;
	if (!*s) {
		snprintf(err, len, "%s '': give a limit such as 90s, 30m, 2h or 1-00:00:00", opt);
		return -1;
	}
	while (isdigit((unsigned char)*p))
		p++;
	if (!*p && bare_minutes) {
		if (p - s > 6) {
			snprintf(err, len, "%s '%s': at most 366 days", opt, s);
			return -1;
		}
		*secs = atoll(s) * 60;
	} else if (!*p) {
		/* Slurm reads a bare number as minutes, gpuman's other
		 * durations as seconds: a guess would be wrong for someone. */
		snprintf(err, len,
		         "%s '%s': say %ss or %sm (a bare number is minutes to Slurm but "
		         "seconds elsewhere in gpuman; -t %s is Slurm's minutes)",
		         opt, s, s, s, s);
		return -1;
	} else if (strchr(s, ':') || (isdigit((unsigned char)*s) && *p == '-')) {
		if (slurm_form(s, secs) < 0) {
			snprintf(err, len,
			         "%s '%s': not a time limit (Slurm's forms: MM:SS, HH:MM:SS, "
			         "D-HH, D-HH:MM, D-HH:MM:SS; or 90s, 30m, 2h, 1d)",
			         opt, s);
			return -1;
		}
	} else if (parse_duration_ms(s, &ms, why, sizeof why) < 0) {
		snprintf(err, len, "%s: %s", opt, why);
		return -1;
	} else {
		*secs = (ms + 999) / 1000; /* a started second counts */
	}
	if (*secs <= 0) {
		snprintf(err, len, "%s '%s': a limit must be at least 1s", opt, s);
		return -1;
	}
	if (*secs > LIMIT_MAX_S) {
		snprintf(err, len, "%s '%s': at most 366 days", opt, s);
		return -1;
	}
	return 0;
}

/* ---- submit --array ------------------------------------------------------ */

int parse_array_spec(const char *s, int **tasks, size_t *count, int *limit, char *err, size_t len)
{
	const char *p = s, *pct = strchr(s, '%');
	size_t n = 0;
	int *list = NULL;

	*tasks = NULL;
	*count = 0;
	*limit = 0;
	if (pct) {
		const char *q = pct + 1;
		long long k = number(&q);

		if (k < 1 || *q) {
			snprintf(err, len,
			         "--array '%s': after %% comes how many may run at once "
			         "(1-20%%4)",
			         s);
			return -1;
		}
		*limit = (int)(k < ARRAY_MAX ? k : ARRAY_MAX);
	}
	while (p < (pct ? pct : s + strlen(s))) {
		long long lo = number(&p), hi = lo, step = 1;

		if (*p == '-') {
			p++;
			hi = number(&p);
			if (*p == ':') {
				p++;
				step = number(&p);
			}
		}
		if (lo < 0 || hi < lo || step < 1 || hi > ARRAY_INDEX_MAX ||
		    (*p && *p != ',' && *p != '%')) {
			snprintf(err, len,
			         "--array '%s': not a list of task numbers (1-20, 0-30:10, 1,3,5, "
			         "1-20%%4; each 0..%d)",
			         s, ARRAY_INDEX_MAX);
			free(list);
			return -1;
		}
		for (long long t = lo; t <= hi; t += step) {
			if (n == ARRAY_MAX) {
				snprintf(err, len, "--array '%s': at most %d tasks", s, ARRAY_MAX);
				free(list);
				return -1;
			}
			if (!list && !(list = malloc(ARRAY_MAX * sizeof *list))) {
				snprintf(err, len, "out of memory");
				return -1;
			}
			list[n++] = (int)t;
		}
		p += *p == ',';
	}
	if (!n) {
		snprintf(err, len, "--array '%s': no task numbers (1-20, 1,3,5)", s);
		free(list);
		return -1;
	}
	*tasks = list;
	*count = n;
	return 0;
}

char *subst_task(const char *s, int task)
{
	char num[16];
	size_t nlen, need = strlen(s) + 1;
	char *out, *o;

	nlen = (size_t)snprintf(num, sizeof num, "%d", task);
	for (const char *p = strstr(s, "{task}"); p; p = strstr(p + 6, "{task}"))
		need += nlen;
	out = o = malloc(need);
	if (!out)
		return NULL;
	while (*s) {
		if (!strncmp(s, "{task}", 6)) {
			memcpy(o, num, nlen);
			o += nlen;
			s += 6;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
	return out;
}
