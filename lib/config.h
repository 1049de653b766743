/*
 * config.h - gpuman.conf: the admin's policy and the user's defaults, in INI
 * (parsed by libinih, Debian's libinih-dev).
 *
 *   /etc/gpuman/gpuman.conf     the admin's (GPUMAN_CONFIG names another):
 *                               [limits], [user NAME], [group NAME], [queue]
 *   ${XDG_CONFIG_HOME:-~/.config}/gpuman/config  (or gpuman.conf, the
 *                               older name; config wins if both exist)
 *                               the user's own: [queue] and [defaults]
 *                               only (limits are the admin's)
 *
 *   [queue]
 *   keep = 30d          finished jobs older than this are forgotten (and
 *                       their logs deleted); "forever" keeps them; default 90d
 *   [limits]
 *   max_gpus = 2        GPUs one user may hold at once (leases of run,
 *                       batch, the queue); default: no limit
 *   [group students]
 *   max_gpus = 1        for members of the group (the most generous of a
 *                       user's groups applies)
 *   max_reserve = 8h    the longest `gpuman reserve --for` (default: no limit)
 *   max_lease = 2d      the longest one job may hold its GPUs: run's job and
 *                       queue jobs are ended whole at it (default: no limit)
 *   max_gpu_hours = 8   GPU-hours one user may use a day (midnight to
 *                       midnight, local time); enforced by the broker only
 *   keep_out = 7        GPUs gpuman never hands out ([limits] only)
 *   [user alice]
 *   max_gpus = 4        for this user (wins over groups and [limits])
 *   [group vision]
 *   gpus = 2,3          GPUs only members of this group are given
 *   [defaults]
 *   policy = util       --by when none is given (memory, util, ...)
 *   wait = 10m          --wait when none is given (run, batch, reserve)
 *
 * Unknown sections and keys, and bad values, are errors naming the file and
 * line: a typo in a limit must not silently lift it.
 */
#ifndef GM_CONFIG_H
#define GM_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"

#define CONFIG_SYSTEM_PATH "/etc/gpuman/gpuman.conf"
#define CONFIG_KEEP_DEFAULT_MS (90LL * 86400 * 1000)

struct config_cap {
	char name[64];          /* user or group name */
	unsigned max_gpus;      /* 0: not set here */
	int64_t max_reserve_ms; /* 0: not set here */
	int64_t max_lease_ms;   /* 0: not set here */
	int64_t max_gpu_ms;     /* max_gpu_hours in ms; 0: not set here */
	char *gpus;             /* [group]: the GPUs kept for it (a LIST); NULL: none */
};

struct config {
	char system_path[4096]; /* the admin's file (read or not) */
	char user_path[4096];   /* the user's file read; "" if none */
	int64_t keep_ms;        /* [queue] keep; 0: forever */
	unsigned max_gpus;      /* [limits]; 0: no limit */
	int64_t max_reserve_ms; /* [limits]; 0: no limit */
	int64_t max_lease_ms;   /* [limits]; 0: no limit */
	int64_t max_gpu_ms;     /* [limits] max_gpu_hours in ms; 0: no limit */
	char *keep_out;         /* [limits] keep_out (a LIST); NULL: none */
	struct config_cap *users, *groups;
	size_t user_count, group_count;
	int default_by;          /* [defaults] policy (enum gm_policy); -1: not set */
	int has_default_wait;    /* [defaults] wait */
	int64_t default_wait_ms; /* -1: forever */
	/* Why the user's file was passed over (it cannot be read,
	 * e.g. HOME or XDG_CONFIG_HOME inherited from another user); "" if
	 * not.  Defaults only live there, so it is a note, not an error. */
	char user_note[4200];
	int fence_sessions; /* [fence] sessions = yes: login sessions are fenced */
};
#define CONFIG_INIT                                                                                \
	{                                                                                          \
		"", "", CONFIG_KEEP_DEFAULT_MS, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0, -1, 0, 0, "",  \
		    0                                                                              \
	}

/*
 * Read the admin's file, then (with_user) the user's.  A file that does not
 * exist is no error.  GM_ERR_STATE with "FILE:LINE: what" in errbuf for a
 * file that cannot be read or parsed.  Release with config_release.
 */
enum gm_err config_load(struct config *cfg, int with_user, char *errbuf, size_t errlen);
void config_release(struct config *cfg);

/*
 * The most GPUs uid may hold at once (0: no limit), and where that comes
 * from ("[user alice]", "[group students]", "[limits]") into from.
 */
unsigned config_max_gpus(const struct config *cfg, unsigned uid, char *from, size_t fromlen);

/* The longest reservation uid may take (0: no limit), and where from. */
int64_t config_max_reserve_ms(const struct config *cfg, unsigned uid, char *from, size_t fromlen);

/* The longest one job of uid's may hold its GPUs (0: no limit), and where
 * from.  Whoever runs the job ends it whole at this age (run, the queue). */
int64_t config_max_lease_ms(const struct config *cfg, unsigned uid, char *from, size_t fromlen);

/* uid's GPU-hours a day, in GPU-ms (0: no limit), and where from.  Only
 * the broker keeps the ledger it needs: a user could delete a file of
 * their own. */
int64_t config_max_gpu_ms(const struct config *cfg, unsigned uid, char *from, size_t fromlen);
/* Does the file set max_gpu_hours anywhere? */
int config_has_gpu_hours(const struct config *cfg);
/* Does it set max_gpus anywhere? */
int config_has_max_gpus(const struct config *cfg);

/*
 * May uid be given the GPU (index, uuid)?  NULL yes; else why not, for
 * people, in why: kept out of gpuman, or kept for groups uid is not in.
 */
const char *config_gpu_barred(const struct config *cfg, unsigned uid, unsigned index,
                              const char *uuid, char *why, size_t len);

#endif
