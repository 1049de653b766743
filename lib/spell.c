/*
 * spell.c - the known word closest to a mistyped one (spell.h): edit
 * distance (Levenshtein) with a bound that keeps suggestions to slips.
 */
#include <string.h>
#include "spell.h"

/* Levenshtein distance of two short strings; SIZE_MAX when either is long
 * (nobody mistypes a 33-character word into another). */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), prev[33], cur[33], i, j;

	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		prev[j] = j;
	for (i = 1; i <= la; i++) {
		cur[0] = i;
		for (j = 1; j <= lb; j++) {
			size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
			cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
		}
		memcpy(prev, cur, (lb + 1) * sizeof *cur);
	}
	return prev[lb];
}

void spell_offer(struct spell *s, const char *candidate)
{
	size_t d;

	if (!s->word || !candidate || !*candidate)
		return;
	d = edit_distance(s->word, candidate);
	if (d < s->best_dist) {
		s->best_dist = d;
		s->best = candidate;
	}
}

const char *spell_best(const struct spell *s)
{
	size_t len = s->word ? strlen(s->word) : 0;

	if (!s->best || s->best_dist == 0 || s->best_dist >= len)
		return NULL;
	if (s->best_dist <= 2 || (s->best_dist <= 3 && len >= 10))
		return s->best;
	return NULL;
}
