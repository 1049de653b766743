/*
 * protocol.c - the facts the engine, its runner and `gpuman run` share
 * (see protocol.h).  Only libc: the static runner links it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "protocol.h"

#define RESULT_MAGIC "gpuman-run 1 "
#define GO_BYTE 'g'

static const char *const stop_names[] = {"none", "cancelled", "interrupted", "aborted", "timeout"};

int protocol_give_go(int fd)
{
	char byte = GO_BYTE;

	return write(fd, &byte, 1) == 1 ? 0 : -1;
}

int protocol_await_go(int fd)
{
	char byte = 0;
	ssize_t n;

	do
		n = read(fd, &byte, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 && byte == GO_BYTE ? 0 : -1;
}

/* struct sched_attr of sched_setattr(2); glibc declares it only since 2.41. */
struct sched_attr_v1 {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
	uint32_t util_min, util_max;
};
/* The shortest slice the kernel allows (0.1 ms): a supervisor runs for
 * well under that at each wake-up. */
#define SHORT_SLICE_NS 100000

void protocol_sched_short(struct protocol_sched *saved)
{
	struct sched_attr_v1 a;

	_Static_assert(sizeof a <= sizeof saved->attr, "room for struct sched_attr");
	if (saved)
		saved->saved = 0;
	memset(&a, 0, sizeof a);
	/* Only the normal policy has slices; real-time and idle stay as set. */
	if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) < 0 || a.policy != 0 /* SCHED_OTHER */)
		return;
	a.size = sizeof a;
	if (saved) {
		memcpy(saved->attr, &a, sizeof a);
		saved->saved = 1;
	}
	a.runtime = SHORT_SLICE_NS;
	(void)syscall(SYS_sched_setattr, 0, &a, 0);
}

void protocol_sched_restore(const struct protocol_sched *saved)
{
	struct sched_attr_v1 a;

	if (!saved || !saved->saved)
		return;
	memcpy(&a, saved->attr, sizeof a);
	(void)syscall(SYS_sched_setattr, 0, &a, 0);
}

int protocol_exit_status(int wait_status)
{
	if (WIFSIGNALED(wait_status))
		return 128 + WTERMSIG(wait_status);
	return WEXITSTATUS(wait_status);
}

void protocol_describe_status(int status, char *buf, size_t len)
{
	if (status > 128 && status < 128 + 65)
		snprintf(buf, len, "killed by signal %d (%s)", status - 128,
		         strsignal(status - 128));
	else if (status == 127)
		snprintf(buf, len, "exit status 127 (command not found?)");
	else
		snprintf(buf, len, "exit status %d", status);
}

void protocol_format_limit(long long seconds, char *buf, size_t len)
{
	static const struct {
		long long secs;
		char unit;
	} units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof units / sizeof units[0] && used < len; i++) {
		long long n = seconds / units[i].secs;

		seconds %= units[i].secs;
		if (n)
			used +=
			    (size_t)snprintf(buf + used, len - used, "%lld%c", n, units[i].unit);
	}
	if (!buf[0])
		snprintf(buf, len, "0s");
}

const char *protocol_stop_name(enum protocol_stop stop)
{
	if ((size_t)stop >= sizeof stop_names / sizeof stop_names[0])
		return stop_names[0];
	return stop_names[stop];
}

void protocol_run_path(const char *run_dir, int slot, char *buf, size_t len)
{
	snprintf(buf, len, "%s/slot-%d.run", run_dir, slot);
}

int protocol_result_format(const struct protocol_result *r, char *buf, size_t len)
{
	int n =
	    snprintf(buf, len,
	             RESULT_MAGIC "job=%lld attempt=%d start_ms=%lld end_ms=%lld status=%d oom=%d "
	                          "stop=%s\n",
	             r->job, r->attempt, r->start_ms, r->end_ms, r->status, r->oom,
	             protocol_stop_name(r->stop));

	if (n < 0 || (size_t)n >= len || n > PROTOCOL_RESULT_ROOM)
		return -1;
	return n;
}

int protocol_result_parse(const char *text, struct protocol_result *r)
{
	char stop[32];

	if (strncmp(text, RESULT_MAGIC, strlen(RESULT_MAGIC)) || !strchr(text, '\n'))
		return -1;
	if (sscanf(text + strlen(RESULT_MAGIC),
	           "job=%lld attempt=%d start_ms=%lld end_ms=%lld status=%d oom=%d stop=%31s",
	           &r->job, &r->attempt, &r->start_ms, &r->end_ms, &r->status, &r->oom, stop) != 7)
		return -1;
	r->stop = PROTOCOL_STOP_NONE;
	for (size_t i = 0; i < sizeof stop_names / sizeof stop_names[0]; i++)
		if (!strcmp(stop, stop_names[i]))
			r->stop = (enum protocol_stop)i;
	return 0;
}

int protocol_says_oom(const char *text)
{
	static const char *const pats[] = {"out of memory", "CUDA_ERROR_OUT_OF_MEMORY",
	                                   "cudaErrorMemoryAllocation"};

	for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++)
		if (strcasestr(text, pats[p]))
			return 1;
	return 0;
}

int protocol_job_env(struct child_env *env, const struct protocol_job *job)
{
	char num[24];

	if (child_env_set(env, "CUDA_VISIBLE_DEVICES", job->cuda_visible, 1) ||
	    child_env_set(env, "GPUMAN_GPUS", job->gpus, 1))
		return -1;
	if (job->lease_id && child_env_set(env, "GPUMAN_LEASE", job->lease_id, 1))
		return -1;
	snprintf(num, sizeof num, "%lld", job->id);
	if (job->id_name && child_env_set(env, job->id_name, num, 1))
		return -1;
	if (job->share && !job->no_framework_env && child_env_framework(env, job->mem_fraction))
		return -1;
	return 0;
}

char *protocol_substitute(const char *line, const char *gpus, const char *uuids, long long task)
{
	char num[24];
	size_t cap = strlen(line) + 1, n = 0;
	char *out;

	snprintf(num, sizeof num, "%lld", task);
	if (!gpus)
		gpus = "{gpu}";
	if (!uuids)
		uuids = "{uuid}";
	for (const char *p = strchr(line, '{'); p; p = strchr(p + 1, '{'))
		cap += strlen(uuids) + strlen(gpus) + strlen(num);
	out = malloc(cap);
	if (!out)
		return NULL;
	for (const char *p = line; *p;) {
		const char *with = NULL;
		size_t skip = 0;

		if (!strncmp(p, "{gpu}", 5))
			with = gpus, skip = 5;
		else if (!strncmp(p, "{uuid}", 6))
			with = uuids, skip = 6;
		else if (!strncmp(p, "{task}", 6))
			with = num, skip = 6;
		if (with) {
			memcpy(out + n, with, strlen(with));
			n += strlen(with);
			p += skip;
		} else {
			out[n++] = *p++;
		}
	}
	out[n] = '\0';
	return out;
}
