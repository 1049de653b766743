/*
 * protocol.c - the facts the engine, its runner and `gpuman run` share
 * (see protocol.h).  Only libc: the static runner links it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "protocol.h"
#include "spell.h"

#define RESULT_MAGIC "gpuman-run 1 "
#define GO_BYTE 'g'

static const char *const stop_names[] = {"none", "cancelled", "interrupted", "aborted", "timeout"};

int protocol_give_go(int fd)
{
	char byte = GO_BYTE;

	ssize_t n = send(fd, &byte, 1, MSG_NOSIGNAL);

	if (n < 0 && errno == ENOTSOCK)
		n = write(fd, &byte, 1);
	return n == 1 ? 0 : -1;
}

/* Sanity, not a quota: an environment or a runner's arguments. */
#define STRINGS_MAX_BYTES (4u << 20)

int protocol_send_strings(int fd, char *const *v)
{
	uint32_t head[2] = {0, 0};
	size_t total, off = sizeof head;
	char *blob;
	int rc = 0;

	for (char *const *p = v; *p; p++, head[0]++)
		head[1] += (uint32_t)strlen(*p) + 1;
	total = sizeof head + head[1];
	if (head[1] > STRINGS_MAX_BYTES || !(blob = malloc(total)))
		return -1;
	memcpy(blob, head, sizeof head);
	for (char *const *p = v; *p; p++) {
		memcpy(blob + off, *p, strlen(*p) + 1);
		off += strlen(*p) + 1;
	}
	for (size_t done = 0; done < total && rc == 0;) {
		ssize_t n = send(fd, blob + done, total - done, MSG_NOSIGNAL);

		if (n > 0)
			done += (size_t)n;
		else if (n < 0 && errno != EINTR)
			rc = -1;
	}
	free(blob);
	return rc;
}

char **protocol_receive_strings(int fd)
{
	uint32_t head[2];
	size_t have = 0, at = 0;
	char *blob, **v;
	ssize_t n;

	do
		n = read(fd, head, sizeof head);
	while (n < 0 && errno == EINTR);
	if (n != sizeof head || head[1] > STRINGS_MAX_BYTES || head[0] > head[1] ||
	    !(blob = malloc(head[1] + 1)))
		return NULL;
	if (!(v = calloc(head[0] + 1, sizeof *v))) {
		free(blob);
		return NULL;
	}
	while (have < head[1]) {
		n = read(fd, blob + have, head[1] - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(blob);
			free(v);
			return NULL;
		}
		have += (size_t)n;
	}
	blob[have] = '\0';
	if (!head[0])
		free(blob); /* nothing points into it */
	for (uint32_t i = 0; i < head[0] && at < have; i++) {
		v[i] = blob + at;
		at += strlen(blob + at) + 1;
	}
	return v;
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

const char *const protocol_placeholders[] = {"gpu", "uuid", "task", NULL};

/* A {word} at p that is no placeholder of known but a slip away from one
 * (or one in other case): 1 with err naming both; 0 otherwise. */
static int near_placeholder(const char *p, const char *const *known, char *err, size_t errlen)
{
	const char *const *all = protocol_placeholders;
	char word[40], cased[40];
	size_t n = strspn(p + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_");
	struct spell near;
	const char *best;
	size_t k;

	if (!n || n >= sizeof word || p[n + 1] != '}')
		return 0;
	memcpy(word, p + 1, n);
	word[n] = '\0';
	for (k = 0; known[k]; k++)
		if (!strcmp(known[k], word))
			return 0;
	for (k = 0; k <= n; k++)
		cased[k] =
		    (char)((word[k] >= 'A' && word[k] <= 'Z') ? word[k] - 'A' + 'a' : word[k]);
	near = (struct spell)SPELL_INIT(cased);
	for (k = 0; all[k]; k++)
		spell_offer(&near, all[k]);
	best = !strcmp(near.best ? near.best : "", cased) ? near.best : spell_best(&near);
	if (!best)
		return 0;
	for (k = 0; known[k] && strcmp(known[k], best); k++)
		;
	if (known[k])
		snprintf(err, errlen, "unknown placeholder '{%s}' (did you mean '{%s}'?)", word,
		         best);
	else
		snprintf(err, errlen,
		         "placeholder '{%s}' is not filled in here (batch fills {gpu}, {uuid} and "
		         "{task}; submit fills {task} with --array)",
		         word);
	return 1;
}

int protocol_check_line(const char *line, size_t len, const char *const *known, char *err,
                        size_t errlen)
{
	char quote = 0; /* ', " or ` while inside one */
	size_t opened = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];

		if (c == 0 || (c < 0x20 && c != '\t') || c == 0x7f) {
			char what[24] = "a NUL byte";

			if (c)
				snprintf(what, sizeof what, "a control byte 0x%02x", c);
			snprintf(err, errlen,
			         "%s at column %zu (a binary file? give a text file, one command "
			         "a line)",
			         what, i + 1);
			return -1;
		}
		/* ${gpus} is the shell's, outside single quotes */
		if (c == '{' && (quote == '\'' || i == 0 || line[i - 1] != '$') &&
		    near_placeholder(line + i, known, err, errlen))
			return -1;
		if (quote == '\'') {
			if (c == '\'')
				quote = 0;
			continue;
		}
		if (c == '\\') {
			if (i + 1 == len) {
				snprintf(err, errlen,
				         "a backslash ends the line (it escapes nothing)");
				return -1;
			}
			i++;
			continue;
		}
		if (quote) {
			if (c == (unsigned char)quote)
				quote = 0;
			continue;
		}
		if (c == '\'' || c == '"' || c == '`') {
			quote = (char)c;
			opened = i + 1;
		}
	}
	if (quote) {
		snprintf(err, errlen, "the %s opened at column %zu is never closed",
		         quote == '\''  ? "single quote"
		         : quote == '"' ? "double quote"
		                        : "backquote",
		         opened);
		return -1;
	}
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
