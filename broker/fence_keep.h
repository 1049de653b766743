/*
 * fence_keep.h - what broker/fence.c (placing) and fence_end.c (ending)
 * share: the supervisors to move home at a lease's end ("keepers"), and
 * the record of the cgroups made, for a broker after this one.
 */
#ifndef GM_BROKER_FENCE_KEEP_H
#define GM_BROKER_FENCE_KEEP_H

#include <limits.h>
#include <stdint.h>
#include "daemon.h"

/* Supervisors to move back out of a lease's cgroup when it ends. */
struct keeper {
	char id[64];
	int pid;
	uint64_t start;
	char origin[PATH_MAX];
	struct keeper *next;
};

/* The keeper of pid (of that start, or any with start 0): one of a live
 * lease, or one on its way home. */
const struct keeper *fence_keeper_of(int pid, uint64_t start);
/* k (malloc'd; the list's now) placed in its lease's cgroup. */
void fence_keeper_add(struct keeper *k);
/* Lease (or waiter) id's cgroup made: on record; gone: off it. */
void fence_record_add(const struct daemon *d, const char *id);
void fence_record_drop(const struct daemon *d, const char *id);
/* c closes: the ends in flight answer nobody. */
void fence_end_forget(struct conn *c);
/* Lease id ends: its placements in flight are told (fence.c). */
void fence_placing_ended(const char *id);

#endif
