/*
 * line.h - the leasing rules, written once: given the GPUs (a snapshot),
 * the live leases and reservations, the line of waiters in arrival order
 * and the admin's limits, decide for each waiter whether it is granted
 * (which GPUs or which MIG slice), waits (why, behind whom) or can never
 * be served (why).  Both lease transports call it: the broker for its
 * whole line on every pass, the daemonless registry for the waiters ahead
 * of a caller and the caller itself.  Neither keeps a rule of its own.
 *
 * No I/O and no clock: the time, the process tree (which processes belong
 * to a share's job) and the GPU-hours ledger are inputs.  The admin's
 * limits are read through config.h, whose group lookups are the only
 * outside reads (NSS, as every config_* call does).
 *
 * The rules, in the order they apply to one waiter:
 *   1. inside its own live reservation (within): the reservation neither
 *      occupies its GPUs for this waiter nor counts against its cap, and
 *      the waiter is confined to the reservation's GPUs (slices): a
 *      reservation only ever narrows;
 *   2. max_gpus (caps_over): what its user holds -- every lease, every
 *      reservation, and the grants made to earlier waiters in this pass --
 *      plus what it asks; over it, the waiter waits (or never fits) and
 *      holds nothing back from those behind;
 *   3. max_gpu_hours, where a ledger is given: used up, it waits likewise;
 *   4. once every GPU is held back for earlier waiters, it waits behind
 *      them without a policy run (a pass costs what the head costs);
 *   5. the policy (policy.h) over the GPUs not held back for earlier
 *      waiters, less keep_out and group GPUs (caps_barred), less the
 *      GPUs outside its inherited CUDA_VISIBLE_DEVICES;
 *   6. granted: its GPUs count as leased for everyone behind it; waiting
 *      (with wait set): it holds back every GPU it could ever use
 *      (policy_candidate) from everyone behind it; without wait it holds
 *      nothing back (its caller answers "not now").
 */
#ifndef GM_LINE_H
#define GM_LINE_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "policy.h"
#include "proctree.h"
#include "snapshot_types.h"

/* A live lease or reservation.  The pointers are the caller's. */
struct line_lease {
	const char *id;
	unsigned uid;
	const char *user;
	int pid;     /* the process that asked */
	int job_pid; /* its job (a share's memory is counted there); 0 none */
	int reservation;
	int64_t expires_ms; /* reservations: wall clock */
	int exclusive;
	uint64_t share_mib; /* shares: per GPU */
	size_t gpu_count;
	const char (*uuids)[96]; /* the GPUs it holds */
	const char (*migs)[96];  /* per GPU: the slice it holds, "" whole; may be NULL */
};

/* A lease's one record (lease_view.h) as the rules read it, pointing
 * into it: the registry's lease files and the broker's leases alike. */
struct lease_info;
struct line_lease line_lease_of(const struct lease_info *li);

/* One waiter of the line, or a request that does not wait. */
struct line_waiter {
	unsigned uid;
	const char *user; /* named only to the waiters behind it */
	int pid;
	const struct gm_request *req;
	/* Per snapshot position (per slice): what its inherited
	 * CUDA_VISIBLE_DEVICES lets it use, as policy_input has it; NULL:
	 * everything. */
	const unsigned char *usable;
	const unsigned char *mig_usable;
	const char *within; /* asks inside its user's reservation of this id; NULL or "" not */
	int wait;           /* 1: it may wait; 0: answer now (holds nothing back) */
	/* 1: told "never" now if no GPU of the machine could ever meet it,
	 * even behind a line that holds back every GPU (a new arrival; one
	 * that does not wait always is).  Others wait on without a policy run. */
	int ask;
};

/* A waiter's one record (lease_view.h) as the rules read it, with what its
 * usable GPUs and slices come to on this snapshot (record_usable_from). */
struct waiter_info;
struct line_waiter line_waiter_of(const struct waiter_info *wi, const unsigned char *usable,
                                  const unsigned char *mig_usable, int wait, int ask);

struct line_input {
	const struct gm_snapshot *snap;
	const struct config *cfg; /* the admin's limits */
	int64_t now_ms;           /* wall clock */
	/* For a share's memory not yet allocated (its job's processes);
	 * NULL: every share counts whole as pending. */
	const struct proctree *tree;
	const struct line_lease *leases;
	size_t lease_count;
	const struct line_waiter *waiters; /* in arrival order */
	size_t waiter_count;
	/* max_gpu_hours: the GPU-ms uid has used today, live leases
	 * included (the broker's ledger); NULL: no ledger here, the cap is
	 * not applied (line_gpu_hours_here() says so to status). */
	int64_t (*gpu_ms_used)(void *data, unsigned uid);
	void *gpu_ms_data;
};

enum line_verdict {
	LINE_GRANT, /* res.chosen holds its GPUs (slice) */
	LINE_WAIT,  /* not now: wait, or without wait the answer "not now" */
	LINE_NEVER  /* no GPU of this machine can ever serve it */
};

struct line_decision {
	enum line_verdict verdict;
	/* The policy's answer, when it ran (ran = 1): the chosen GPUs of a
	 * grant, and per GPU why it was passed over. */
	int ran;
	struct policy_result res;
	/* One line for people when the policy did not run: the limit that
	 * keeps it waiting or refuses it, or that everything it could use is
	 * held for earlier requests; "" otherwise. */
	char why[256];
	int capped;      /* why is its user's own limit: it blocks nobody */
	size_t position; /* LINE_WAIT with wait: its place among those left waiting, from 1 */
};

/*
 * Decide for every waiter of in, in order; out has in->waiter_count
 * entries (released with line_decisions_release, also on failure).
 * Returns 0, or -1 when out of memory.
 */
int line_decide(const struct line_input *in, struct line_decision *out);
void line_decisions_release(struct line_decision *out, size_t count);

/* Per snapshot position (cand has snap->gpu_count entries): could waiter w
 * of in ever be given that GPU, whatever frees up?  What it holds back
 * while it waits, and what status shows.  0, or -1 out of memory. */
int line_candidates(const struct line_input *in, size_t w, unsigned char *cand);

/* Why d is not a grant, for people: per GPU when the policy ran, else its
 * one line.  Caller frees; NULL on out-of-memory. */
char *line_explain(const struct gm_snapshot *snap, const struct line_decision *d, unsigned wanted);

/* "2 GPUs exclusive", "1 GPU, 8 GiB share", "1 MIG slice 1g.10gb": a waiter
 * as status shows it, in either transport's line. */
const char *line_summary(const struct gm_request *req, char *buf, size_t len);

/* "alice (pid 42)", "alice (reservation, 300s left)": who holds a lease,
 * as reasons name it. */
void line_holder(const struct line_lease *l, int64_t now_ms, char *buf, size_t len);

/* The text a waiter that holds a GPU back gives those behind it. */
void line_held_text(const struct line_waiter *w, char *buf, size_t len);

#endif
