/*
 * spell.h - "did you mean": the known word a mistyped one is a slip away
 * from.  One rule for every place that names what it does not know (the
 * commands and options of the command line, the keys of a scenario), so
 * that they suggest alike.
 *
 *   struct spell s = SPELL_INIT(word);
 *   for each known candidate: spell_offer(&s, candidate);
 *   const char *near = spell_best(&s);   NULL: nothing close enough
 *
 * The strings are the caller's; spell_best returns one of the candidates.
 */
#ifndef GM_SPELL_H
#define GM_SPELL_H

#include <stddef.h>
#include <stdint.h>

struct spell {
	const char *word;
	const char *best;
	size_t best_dist;
};
#define SPELL_INIT(w)                                                                              \
	{                                                                                          \
		(w), NULL, SIZE_MAX                                                                \
	}

void spell_offer(struct spell *s, const char *candidate);
/* The closest candidate offered, if it is near enough to be a typo of the
 * word (two edits, three for a word of ten or more characters, and fewer
 * edits than the word has characters); else NULL. */
const char *spell_best(const struct spell *s);

#endif
