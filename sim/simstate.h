/*
 * simstate.h - the simulated machine's live processes: what running
 * gpuman-simload jobs hold on each GPU, shared between simload (writer) and
 * the NVML simulator (reader) through a directory.
 *
 * The directory is $GPUMAN_SIM_STATE, or by default
 * ${TMPDIR:-/tmp}/gpuman-sim-<uid>-<hash of the scenario's real path>, so
 * that every process simulating one scenario file sees the same machine.
 * It holds one file per live simload, named "<pid>-<start time>.live" (the
 * start time is field 22 of /proc/PID/stat, so a recycled pid names another
 * file), with one line per GPU: "<uuid> <used_mib> <utilization>".  Files
 * of processes that are gone are ignored and unlinked by whoever sees them;
 * a file is written under a temporary name and renamed, so readers never see
 * half of one.  "lock" is flock()ed by simload around "check free memory,
 * then publish my entry", so two simloads cannot both take the last MiB.
 *
 * Calling sequence (simload):
 *
 *   struct simstate st = SIMSTATE_INIT;
 *   struct simstate_live live = SIMSTATE_LIVE_INIT;
 *   simstate_open(&st, sc->realpath, 1, err, sizeof err);
 *   simstate_lock(&st, err, sizeof err);
 *   simstate_read(&st, &live);  ... check free memory ...
 *   simstate_publish(&st, uses, n, err, sizeof err);
 *   simstate_unlock(&st);
 *   ... run ...
 *   simstate_withdraw(&st);
 *   simstate_live_release(&live);
 *   simstate_close(&st);
 *
 * The NVML simulator opens with create = 0 and only calls simstate_read.
 * Functions that fail return -1 with a message in err naming the path.
 */
#ifndef GM_SIM_SIMSTATE_H
#define GM_SIM_SIMSTATE_H

#include <dirent.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

struct simstate {
	char dir[PATH_MAX];
	DIR *dirp;      /* NULL while the directory does not exist */
	int lock_fd;    /* -1 unless locked */
	char entry[64]; /* our own entry's file name, "" if none */
};
#define SIMSTATE_INIT                                                                              \
	{                                                                                          \
		"", NULL, -1, ""                                                                   \
	}

/* One GPU's use by one live process. */
struct simstate_use {
	unsigned pid;
	char uuid[96];
	uint64_t used_mib;
	unsigned utilization; /* percent */
};

struct simstate_live {
	size_t count, alloc;
	struct simstate_use *uses; /* owned */
};
#define SIMSTATE_LIVE_INIT                                                                         \
	{                                                                                          \
		0, 0, NULL                                                                         \
	}

/*
 * Find the state directory for the scenario whose real path is given.  With
 * create, make it (mode 0700) if missing; the default directory under /tmp
 * must then be ours and private, or it is refused.  Without create a missing
 * directory is not an error: it simply has no live processes yet.
 */
int simstate_open(struct simstate *st, const char *scenario_realpath, int create, char *err,
                  size_t errlen);
void simstate_close(struct simstate *st);

/* Replace live's contents with the uses of the processes alive now.
 * Returns 0, or -1 when out of memory (live is then empty). */
int simstate_read(struct simstate *st, struct simstate_live *live);
void simstate_live_release(struct simstate_live *live);

/* Take / drop the directory's lock (blocking). */
int simstate_lock(struct simstate *st, char *err, size_t errlen);
void simstate_unlock(struct simstate *st);

/* Publish this process's entry (replacing an earlier one), or remove it. */
int simstate_publish(struct simstate *st, const struct simstate_use *uses, size_t count, char *err,
                     size_t errlen);
void simstate_withdraw(struct simstate *st);

/* Start time of pid (field 22 of /proc/PID/stat, clock ticks since boot);
 * -1 if the process does not exist or is a zombie. */
int simstate_start_time(unsigned pid, unsigned long long *start);

#endif
