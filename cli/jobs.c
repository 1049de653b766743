/*
 * jobs.c - opening the queue for a command, and jobs as table cells (see
 * jobs.h; the queue directory itself is engine/queue.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jobs.h"

int cli_queue_open(struct cli *cli, struct queue *q)
{
	char err[GM_ERRBUF_SIZE];

	if (queue_open(q, err, sizeof err) < 0)
		return cli_error(cli, EXIT_FAIL, "%s", err);
	return EXIT_OK;
}

char *fmt_duration(char *buf, size_t len, int64_t ms)
{
	if (ms < 0)
		snprintf(buf, len, "-");
	else if (ms < 60000)
		snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
	else if (ms < 3600000)
		snprintf(buf, len, "%lldm%02llds", (long long)(ms / 60000),
		         (long long)(ms % 60000 / 1000));
	else
		snprintf(buf, len, "%lldh%02lldm", (long long)(ms / 3600000),
		         (long long)(ms % 3600000 / 60000));
	return buf;
}

char *fmt_peak(char *buf, size_t len, const struct job *job)
{
	if (!job->has_peak)
		return strcpy(buf, "-");
	return fmt_mib(buf, len, (uint64_t)job->peak_mem_mib);
}

char *fmt_util(char *buf, size_t len, const struct job *job)
{
	if (!job->util_samples)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.0f%%", job->util_sum / job->util_samples);
	return buf;
}

int64_t parse_job_id(const char *s)
{
	char *end;
	long long v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v <= 0)
		return -1;
	return v;
}

int parse_id_range(const char *s, int64_t *lo, int64_t *hi)
{
	const char *dash = strchr(s, '-');
	char first[32];

	if (!dash) {
		*lo = *hi = parse_job_id(s);
		return *lo < 0 ? -1 : 0;
	}
	if ((size_t)(dash - s) >= sizeof first)
		return -1;
	snprintf(first, sizeof first, "%.*s", (int)(dash - s), s);
	*lo = parse_job_id(first);
	*hi = parse_job_id(dash + 1);
	return *lo < 0 || *hi < *lo || *hi - *lo >= 100000 ? -1 : 0;
}

void job_tell_held(struct cli *cli, const struct job *job, int gpus, char *said, size_t len)
{
	int blocked = job->reason && !strncmp(job->reason, JOB_BLOCKED, strlen(JOB_BLOCKED));

	if (job->state != JOB_QUEUED || !job->reason || !strcmp(said, job->reason))
		return;
	/* the GPUs' holders change at each hand-off: said once */
	if (blocked && (!gpus || !strncmp(said, JOB_BLOCKED, strlen(JOB_BLOCKED))))
		return;
	if (!blocked && strncmp(job->reason, JOB_WAITING, strlen(JOB_WAITING)))
		return;
	cli_error(cli, 0, "job %lld is queued, %s", (long long)job->id, job->reason);
	snprintf(said, len, "%s", job->reason);
}
