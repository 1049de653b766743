/*
 * outcome.c - what the end of a job means (see outcome.h).  Pure: no I/O.
 */
#include <stdio.h>
#include <string.h>
#include "outcome.h"

static const char *const kind_names[] = {"ok", "failed", "oom", "killed"};

enum outcome_kind outcome_classify(int status, int oom)
{
	if (status == 0)
		return OUTCOME_OK;
	if (oom)
		return OUTCOME_OOM;
	if (status < 0 || (status > 128 && status < 128 + 65))
		return OUTCOME_KILLED;
	return OUTCOME_FAILED;
}

const char *outcome_kind_name(enum outcome_kind kind)
{
	return (size_t)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : "?";
}

enum outcome_next outcome_next(enum outcome_kind kind, const struct outcome_counts *c,
                               int may_retry)
{
	if (kind == OUTCOME_OK)
		return OUTCOME_DONE;
	if (kind == OUTCOME_OOM && c->ooms < OUTCOME_MAX_OOM_REQUEUES)
		return OUTCOME_REQUEUE_OOM;
	/* Out-of-memory requeues are not retries: they are not its fault. */
	if (may_retry && c->attempts - c->ooms <= c->retries)
		return OUTCOME_RETRY;
	return OUTCOME_FAIL;
}

void outcome_reason(enum outcome_next next, const char *what, int oom,
                    const struct outcome_counts *c, char *buf, size_t len)
{
	const char *mem = oom ? " (CUDA out of memory)" : "";

	if (next == OUTCOME_RETRY)
		snprintf(buf, len, "%s%s; retry %d of %d", what, mem, c->attempts - c->ooms,
		         c->retries);
	else
		snprintf(buf, len, "%s%s", what, mem);
}

size_t outcome_tail_plan(size_t ng, const unsigned char *state, int64_t *avail_ms,
                         const int64_t *task_ms, size_t q, unsigned char *used)
{
	size_t free_known = 0, used_count = 0;

	for (size_t k = 0; k < ng; k++) {
		used[k] = 0;
		free_known += state[k] == 1 && task_ms[k] >= 0;
	}
	for (size_t t = 0; t < q && used_count < free_known; t++) {
		long best = -1;
		int64_t best_end = 0;

		for (size_t k = 0; k < ng; k++) {
			int64_t end;

			if (!state[k] || task_ms[k] < 0)
				continue;
			end = avail_ms[k] + task_ms[k];
			if (best < 0 || end < best_end) {
				best = (long)k;
				best_end = end;
			}
		}
		if (best < 0)
			break;
		if (state[best] == 1 && !used[best]) {
			used[best] = 1;
			used_count++;
		}
		avail_ms[best] = best_end;
	}
	return used_count;
}

void outcome_decide(const struct outcome_in *in, struct outcome *out)
{
	const struct job *job = in->job;
	const struct protocol_result *r = &in->r;
	struct outcome_counts c = {job->attempts, job->ooms, job->retries};
	const char *gpus = job->gpus ? job->gpus : "?";
	char what[128];

	memset(out, 0, sizeof *out);
	out->ooms = job->ooms;
	out->min_free_mib = job->min_free_mib;
	if (!in->have_result) {
		out->state = in->requeue_dead ? JOB_QUEUED : JOB_FAILED;
		snprintf(out->reason, sizeof out->reason, "%s",
		         in->requeue_dead ? "its runner died; queued again"
		                          : "runner died: its supervisor was killed before it "
		                            "recorded a result (the job was killed with it)");
		return;
	}
	if (r->stop == PROTOCOL_STOP_ABORTED) {
		/* It never ran: queued as it was. */
		out->state = JOB_QUEUED;
		out->uncount = 1;
		snprintf(out->reason, sizeof out->reason, "%s", job->reason ? job->reason : "");
		return;
	}
	out->has_exit = 1;
	if (r->stop == PROTOCOL_STOP_CANCELLED) {
		out->state = JOB_CANCELLED;
		snprintf(out->reason, sizeof out->reason, "cancelled");
		return;
	}
	if (r->stop == PROTOCOL_STOP_TIMEOUT) {
		char limit[32];

		out->state = JOB_TIMEOUT;
		if (in->limit_where && in->limit_where[0]) {
			protocol_format_limit(in->limit_s, limit, sizeof limit);
			snprintf(out->reason, sizeof out->reason,
			         "lease limit %s reached (%s): ended with its processes", limit,
			         in->limit_where);
			return;
		}
		protocol_format_limit(job->time_limit_s, limit, sizeof limit);
		snprintf(out->reason, sizeof out->reason,
		         "time limit (%s) reached: ended with its processes", limit);
		return;
	}
	if (r->stop == PROTOCOL_STOP_INTERRUPTED) {
		out->state = JOB_INTERRUPTED;
		snprintf(out->reason, sizeof out->reason, "interrupted (Ctrl-C)");
		return;
	}
	switch (outcome_next(outcome_classify(r->status, r->oom), &c, 1)) {
	case OUTCOME_DONE:
		out->state = JOB_DONE;
		/* Say why it took more than one start. */
		if (job->ooms && job->reason)
			snprintf(out->reason, sizeof out->reason, "%s", job->reason);
		break;
	case OUTCOME_REQUEUE_OOM:
		out->state = JOB_QUEUED;
		out->ooms = job->ooms + 1;
		/* Only a GPU with more free memory than this one had. */
		if (job->placed_free_mib >= 0 && job->placed_free_mib + 1 > out->min_free_mib)
			out->min_free_mib = job->placed_free_mib + 1;
		if (job->placed_free_mib >= 0)
			snprintf(
			    out->reason, sizeof out->reason,
			    "CUDA out of memory on GPU %s with %lld MiB free; requeued for a GPU "
			    "with more",
			    gpus, (long long)job->placed_free_mib);
		else
			snprintf(out->reason, sizeof out->reason,
			         "CUDA out of memory on GPU %s; requeued", gpus);
		break;
	case OUTCOME_RETRY:
		out->state = JOB_QUEUED;
		protocol_describe_status(r->status, what, sizeof what);
		outcome_reason(OUTCOME_RETRY, what, r->oom, &c, out->reason, sizeof out->reason);
		break;
	case OUTCOME_FAIL:
		out->state = JOB_FAILED;
		protocol_describe_status(r->status, what, sizeof what);
		outcome_reason(OUTCOME_FAIL, what, r->oom, &c, out->reason, sizeof out->reason);
		break;
	}
}
