/*
 * caps.c - the admin's limits, one implementation for the registry and the
 * broker (see caps.h).
 */
#include <stdio.h>
#include "caps.h"
#include "parse.h"

int caps_over(const struct config *cfg, unsigned uid, unsigned held, unsigned count, char *why,
              size_t len)
{
	char from[96];
	unsigned cap = config_max_gpus(cfg, uid, from, sizeof from);

	if (why && len)
		why[0] = '\0';
	if (!cap)
		return 0;
	if (count > cap) {
		if (why)
			snprintf(why, len, "max_gpus: asks %u GPUs, the limit is %u (%s in %s)",
			         count, cap, from, cfg->system_path);
		return 2;
	}
	if (held + count <= cap)
		return 0;
	if (why)
		snprintf(why, len, "max_gpus: holds %u GPU%s already, the limit is %u (%s in %s)",
		         held, held == 1 ? "" : "s", cap, from, cfg->system_path);
	return 1;
}

size_t caps_barred(const struct config *cfg, unsigned uid, const struct gm_snapshot *snap,
                   const char **barred, char (*text)[160])
{
	size_t n = 0;

	for (size_t pos = 0; pos < snap->gpu_count; pos++) {
		const struct gm_gpu *g = &snap->gpus[pos];

		barred[pos] =
		    config_gpu_barred(cfg, uid, g->index, g->uuid, text[pos], sizeof text[pos]);
		n += barred[pos] != NULL;
	}
	return n;
}

int caps_reserve_ok(const struct config *cfg, unsigned uid, int64_t ms, char *why, size_t len)
{
	char from[96], max[32], asked[32];
	int64_t limit = config_max_reserve_ms(cfg, uid, from, sizeof from);

	if (!limit || ms <= limit)
		return 0;
	duration_text(max, sizeof max, limit);
	duration_text(asked, sizeof asked, ms);
	snprintf(why, len,
	         "max_reserve: --for %s is longer than the limit, %s (%s in %s); reserve for %s "
	         "or less",
	         asked, max, from, cfg->system_path, max);
	return -1;
}
