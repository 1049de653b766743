/*
 * util.c - the broker's small helpers: its messages, the table of the users
 * it serves (name, GPUs and reservations held), what /proc says of a
 * process, and random tokens.
 */
#include <fcntl.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "daemon.h"

void daemon_say(const char *fmt, ...)
{
	va_list ap;

	fputs("gpuman daemon: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void daemon_user_name(unsigned uid, char *out, size_t len)
{
	struct passwd pw, *res = NULL;
	char buf[1024];

	if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
		str_copy(out, len, pw.pw_name);
	else
		snprintf(out, len, "%u", uid);
}

static struct user_slot *slot_find(const struct daemon *d, unsigned uid)
{
	size_t mask = d->users_cap - 1, i;

	if (!d->users_cap)
		return NULL;
	for (i = (uid * 2654435761u) & mask;; i = (i + 1) & mask) {
		struct user_slot *s = &d->users[i];

		if (!s->used)
			return NULL;
		if (s->uid == uid)
			return s;
	}
}

struct user_slot *daemon_user(struct daemon *d, unsigned uid)
{
	struct user_slot *s = slot_find(d, uid);
	size_t mask, i;

	if (s)
		return s;
	if ((d->users_used + 1) * 2 > d->users_cap) {
		/* Grow: rehash every slot into a table twice the size. */
		size_t cap = d->users_cap ? d->users_cap * 2 : 64;
		struct user_slot *old = d->users, *grown = calloc(cap, sizeof *grown);
		size_t old_cap = d->users_cap;

		if (!grown)
			return NULL;
		d->users = grown;
		d->users_cap = cap;
		for (size_t k = 0; k < old_cap; k++) {
			if (!old[k].used)
				continue;
			for (i = (old[k].uid * 2654435761u) & (cap - 1); grown[i].used;
			     i = (i + 1) & (cap - 1))
				;
			grown[i] = old[k];
		}
		free(old);
	}
	mask = d->users_cap - 1;
	for (i = (uid * 2654435761u) & mask; d->users[i].used; i = (i + 1) & mask)
		;
	s = &d->users[i];
	memset(s, 0, sizeof *s);
	s->used = 1;
	s->uid = uid;
	daemon_user_name(uid, s->name, sizeof s->name);
	d->users_used++;
	return s;
}

const char *daemon_user_cached(struct daemon *d, unsigned uid)
{
	struct user_slot *s = daemon_user(d, uid);

	return s ? s->name : "?";
}

void shared_text_put(struct shared_text *t)
{
	if (t && --t->refs == 0)
		free(t);
}

int daemon_proc_status(int pid, int (*fn)(const char *line, void *data), void *data)
{
	char path[64], line[4096]; /* Groups: may be long */
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f) && !fn(line, data))
		;
	fclose(f);
	return 0;
}

static int uid_line(const char *line, void *data)
{
	if (strncmp(line, "Uid:", 4))
		return 0;
	*(long *)data = strtol(line + 4, NULL, 10);
	return 1;
}

/* The real uid of a process, or -1. */
long daemon_proc_uid(int pid)
{
	long uid = -1;

	daemon_proc_status(pid, uid_line, &uid);
	return uid;
}

void daemon_proc_command(int pid, char *out, size_t len)
{
	if (proctree_command(pid, out, len) <= 0)
		str_copy(out, len, "?");
}

void daemon_random_hex(char *buf, size_t bytes)
{
	unsigned char r[32];

	if (bytes > sizeof r)
		bytes = sizeof r;
	if (getrandom(r, bytes, 0) != (ssize_t)bytes)
		for (size_t i = 0; i < bytes; i++)
			r[i] = (unsigned char)(now_ms() >> (i % 8)) ^ (unsigned char)rand();
	for (size_t i = 0; i < bytes; i++)
		sprintf(buf + 2 * i, "%02x", r[i]);
}
