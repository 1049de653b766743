/*
 * lease_view.h - the leases and the line as either lease transport reads
 * them (transport.h): what status, serve, the queue and the rules (line.h)
 * are shown.  Their JSON codecs are record.h.
 */
#ifndef GM_LEASE_VIEW_H
#define GM_LEASE_VIEW_H

#include <stddef.h>
#include <stdint.h>
#include "gpuman.h"

struct json_t;

/* A live lease, as its file says (user from the file's owner). */
struct lease_info {
	char id[64];
	unsigned uid;
	char user[33];
	int pid;     /* the holder (gpuman run, or the API caller) */
	int job_pid; /* the job whose processes use the GPUs */
	/* Their start times (proctree_start; 0: not known): a pid reused by
	 * another process is not the holder. */
	unsigned long long pid_start, job_start;
	char command[256];
	int64_t start_ms;
	int exclusive;
	uint64_t share_mib; /* per GPU, for shares */
	size_t gpu_count;
	char (*uuids)[96];
	unsigned *indices;
	/* Per GPU: the MIG slice ("MIG-...") the lease holds on it, "" for
	 * the whole GPU.  The file names a slice's GPU in "uuid", as readers
	 * older than slices read it: for them the GPU is leased exclusively,
	 * so they never place a job on it. */
	char (*migs)[96];
	int reservation;    /* held by nobody until expires_ms (gpuman reserve) */
	int64_t expires_ms; /* wall clock; reservations only */
	/* The admin's max_lease for its user, where it has held its GPUs
	 * longer (a library client's lease: nobody else may end it); 0 not. */
	int64_t over_limit_ms;
	char limit_from[96]; /* with over_limit_ms: "[limits]", "[user alice]" */
};

/* A live waiting request. */
struct waiter_info {
	char name[128]; /* file name; sorts in arrival order */
	unsigned uid;
	char user[33];
	int pid;
	unsigned long long pid_start; /* proctree_start; 0: not known */
	char command[256];
	int64_t since_ms;
	char summary[128]; /* "2 GPUs exclusive", "1 GPU, 8 GiB share" */
	char limit[256];   /* why its user's max_gpus keeps it waiting now; "" if not */
	size_t cand_count; /* GPUs it may be placed on (UUIDs) */
	char (*cand)[96];
	/* What the rules (line.h) place it by, from its ticket (record.h);
	 * owned by the view.  NULL from the broker's view, which places its
	 * line itself. */
	struct gm_request *req;
	struct json_t *usable, *usable_migs; /* NULL: everything */
	char within[64];                     /* inside this reservation of its user's; "" not */
};

struct registry_view {
	struct lease_info *leases;
	size_t lease_count;
	struct waiter_info *waiters; /* in arrival order */
	size_t waiter_count;
	/* gpuman.conf sets max_gpu_hours, which only the broker enforces,
	 * and this view is the daemonless registry's. */
	int gpu_hours_unenforced;
	/* Does the kernel keep each job to its lease's GPUs (the broker's
	 * fence, lib/fence.h)?  placement: the mechanism, or why not. */
	int placement_enforced;
	char placement[256];
	/* The broker lists a long line's head and counts the rest per user
	 * (so that a view costs it the same however long the line): the
	 * waiters and leases past those above, in line order of users. */
	struct view_more *more_waiters, *more_leases;
	size_t more_waiter_count, more_lease_count;
};
struct view_more {
	unsigned uid;
	char user[33];
	size_t count; /* waiters, or leases */
	size_t gpus;  /* the leases' GPUs */
};
#define REGISTRY_VIEW_INIT                                                                         \
	{                                                                                          \
		NULL, 0, NULL, 0, 0, 0, "", NULL, NULL, 0, 0                                       \
	}

/* Free what a view holds (record.c), keep the struct: either transport's. */
void registry_view_release(struct registry_view *view);

#endif
