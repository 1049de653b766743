/*
 * parse.h - the user-facing value syntaxes shared by the command line, the C
 * API (gm_request_set) and the Python binding: SIZE, DURATION, PERCENT and
 * GPU lists.  Pure functions; errors are one line for people, written to the
 * caller's buffer, without the option name (the caller prefixes it).
 */
#ifndef GM_PARSE_H
#define GM_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* A SIZE: an absolute amount, or a percentage of a GPU's total memory. */
struct gm_size {
	int is_pct; /* 1: pct of total; 0: mib */
	uint64_t mib;
	unsigned pct; /* 0..100 */
};

/*
 * "8192" (MiB), "8G", "8GiB", "8gb", "512M", "1.5G", "1T", "64K", "50%".
 * K/M/G/T are binary, with optional "i"/"iB"/"B" suffix, any case.
 * Returns 0, or -1 with a message such as "unknown unit 'Q' (use K, M, G, T or %)".
 */
int parse_size(const char *s, struct gm_size *out, char *err, size_t errlen);
/* The size in MiB on a GPU of total_mib (percentages round down). */
uint64_t size_mib(const struct gm_size *size, uint64_t total_mib);
/* "8 GiB", "512 MiB" or "50%", for messages; returns buf. */
char *size_format(const struct gm_size *size, char *buf, size_t len);

/* The longest duration anything accepts (ten years): far beyond any wait,
 * and far from overflowing a deadline (now + duration) or a timespec. */
#define MAX_DURATION_DAYS 3650
#define MAX_DURATION_MS ((int64_t)MAX_DURATION_DAYS * 24 * 60 * 60 * 1000)

/* "90", "90s", "15m", "2h", "1h30m", "1d", "500ms"; -1 with a message. */
int parse_duration_ms(const char *s, int64_t *ms, char *err, size_t errlen);
/* The other way: "1h30m", "90s", "1500ms" (defined in request.c). */
void duration_text(char *buf, size_t len, int64_t ms);
/* "0".."100", optionally followed by "%". */
int parse_percent(const char *s, unsigned *pct, char *err, size_t errlen);
/* A positive count ("1".."1024"). */
int parse_count(const char *s, unsigned *n, char *err, size_t errlen);

/* A LIST of GPUs: NVML indices, ranges of them or UUID prefixes ("0,3",
 * "0-3,6", "GPU-8f3,2"). */
struct gpu_list {
	size_t count;
	char **items; /* owned */
};
#define GPU_LIST_INIT                                                                              \
	{                                                                                          \
		0, NULL                                                                            \
	}

/* Empty items, characters other than [A-Za-z0-9-] and a range that runs
 * downwards ("5-2") are errors. */
int gpu_list_parse(const char *s, struct gpu_list *out, char *err, size_t errlen);
void gpu_list_release(struct gpu_list *list);
/*
 * Does one item of the list name the GPU with this NVML index and UUID?
 * A number names the index, "2-5" the indices 2 to 5; anything else is a
 * UUID prefix, matched with or without the "GPU-" and case-insensitively.
 */
int gpu_list_matches(const struct gpu_list *list, unsigned index, const char *uuid);
/* An item "2-5": indices 2 to 5, as taskset and Slurm write them.  At most
 * four digits a side, so that no UUID prefix (eight hex digits before its
 * first '-') reads as one.  1: a range, in *lo and *hi; 0: not one. */
int gpu_index_range(const char *item, size_t len, unsigned *lo, unsigned *hi);
/* Does the string name this GPU (the rules of one list item, but a range)? */
int gpu_spec_matches(const char *spec, unsigned index, const char *uuid);

#endif
