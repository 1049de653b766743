/*
 * config.c - gpuman.conf (see config.h), read with libinih.  The parser is
 * the library's; this file only knows which sections and keys mean what.
 */
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include "config.h"
#include "parse.h"
#include "policy.h"
#include "util.h"

struct loading {
	struct config *cfg;
	const char *path;
	FILE *file;
	int line;       /* lines read so far: the line of the entry at hand */
	int is_user;    /* the user's file: [queue] only */
	char err[8600]; /* the first problem, "FILE:LINE: what" */
};

static int fail_at(struct loading *l, int line, const char *fmt, const char *a, const char *b)
{
	char what[4400];

	snprintf(what, sizeof what, fmt, a, b);
	if (!l->err[0])
		snprintf(l->err, sizeof l->err, "%s:%d: %s", l->path, line, what);
	return 0; /* stop */
}

/* Debian's libinih passes handlers no line number: count lines as the
 * parser reads them (it calls the handler right after reading its line). */
static char *read_line(char *str, int num, void *data)
{
	struct loading *l = data;
	char *got = fgets(str, num, l->file);

	l->line += got != NULL;
	return got;
}

static struct config_cap *cap_for(struct config_cap **list, size_t *count, const char *name)
{
	struct config_cap *grown;

	for (size_t i = 0; i < *count; i++)
		if (!strcmp((*list)[i].name, name))
			return &(*list)[i];
	grown = realloc(*list, (*count + 1) * sizeof *grown);
	if (!grown)
		return NULL;
	*list = grown;
	memset(&grown[*count], 0, sizeof *grown);
	snprintf(grown[*count].name, sizeof grown[*count].name, "%s", name);
	return &grown[(*count)++];
}

static int parse_max_gpus(struct loading *l, int line, const char *value, unsigned *out)
{
	char err[128];

	if (parse_count(value, out, err, sizeof err) < 0)
		return fail_at(l, line, "max_gpus = %s: %s", value, err);
	return 1;
}

static int parse_positive_ms(struct loading *l, int line, const char *key, const char *value,
                             int64_t *out)
{
	char err[128] = "", what[160];

	if (parse_duration_ms(value, out, err, sizeof err) < 0 || *out <= 0) {
		snprintf(what, sizeof what, "%s = %%s: %%s (a duration such as 8h)", key);
		return fail_at(l, line, what, value, err[0] ? err : "must be more than 0");
	}
	return 1;
}

/* max_gpu_hours: GPU-hours, a decimal number (0.5, 8), kept in ms. */
static int parse_gpu_hours(struct loading *l, int line, const char *value, int64_t *out)
{
	char *end;
	double h;

	errno = 0;
	h = strtod(value, &end);
	if (end == value || *end || errno || !(h > 0) || h > 1e6)
		return fail_at(l, line,
		               "max_gpu_hours = %s: %s (GPU-hours a day, a number such as 8 or "
		               "0.5)",
		               value, "not a number of hours more than 0");
	*out = (int64_t)(h * 3600000.0 + 0.5);
	if (!*out)
		*out = 1;
	return 1;
}

/* A LIST of GPUs (as --only takes), kept as text: matched per GPU later. */
static int parse_gpus(struct loading *l, int line, const char *key, const char *value, char **out)
{
	struct gpu_list list = GPU_LIST_INIT;
	char err[128], what[160];

	if (gpu_list_parse(value, &list, err, sizeof err) < 0) {
		snprintf(what, sizeof what, "%s = %%s: %%s (GPU indices or UUIDs, e.g. 6,7)", key);
		return fail_at(l, line, what, value, err);
	}
	gpu_list_release(&list);
	free(*out);
	*out = strdup(value);
	return *out ? 1 : fail_at(l, line, "out of memory%s%s", "", "");
}

/* [defaults]: what a command does when its option is not given. */
static int on_default(struct loading *l, int line, const char *key, const char *value)
{
	struct config *cfg = l->cfg;
	char err[128] = "";

	if (!strcmp(key, "policy")) {
		int by = policy_from_name(value);

		if (by < 0)
			return fail_at(
			    l, line,
			    "policy = %s: unknown policy (use memory, memory-rate, power, "
			    "util or index)%s",
			    value, "");
		cfg->default_by = by;
		return 1;
	}
	if (!strcmp(key, "wait")) {
		if (!strcmp(value, "forever")) {
			cfg->default_wait_ms = -1;
		} else if (parse_duration_ms(value, &cfg->default_wait_ms, err, sizeof err) < 0) {
			return fail_at(l, line,
			               "wait = %s: %s (a duration such as 10m, or forever)", value,
			               err);
		}
		cfg->has_default_wait = 1;
		return 1;
	}
	return fail_at(l, line, "unknown key '%s' in [%s] (known: policy, wait)", key, "defaults");
}

static int on_entry(void *data, const char *section, const char *key, const char *value)
{
	struct loading *l = data;
	struct config *cfg = l->cfg;
	int line = l->line;

	if (!strcmp(section, "queue")) {
		char err[128];

		if (strcmp(key, "keep"))
			return fail_at(l, line, "unknown key '%s' in [%s] (known: keep)", key,
			               section);
		if (!strcmp(value, "forever")) {
			cfg->keep_ms = 0;
			return 1;
		}
		if (parse_duration_ms(value, &cfg->keep_ms, err, sizeof err) < 0 ||
		    cfg->keep_ms <= 0)
			return fail_at(l, line,
			               "keep = %s: %s (a duration such as 30d, or forever)", value,
			               err[0] ? err : "must be more than 0");
		return 1;
	}
	if (!strcmp(section, "defaults"))
		return on_default(l, line, key, value);
	if (l->is_user)
		return fail_at(l, line,
		               "[%s] is the admin's (%s); your file may only set [queue] and "
		               "[defaults]",
		               section, cfg->system_path);
	if (!strcmp(section, "fence") && !strcmp(key, "sessions")) {
		/* Users' login sessions open only their leases' GPUs (the
		 * broker's fence, through the PAM hook gpuman ships). */
		if (strcmp(value, "yes") && strcmp(value, "no"))
			return fail_at(l, line, "sessions = %s: %s", value, "yes or no");
		cfg->fence_sessions = !strcmp(value, "yes");
		return 1;
	}
	if (!strcmp(section, "limits")) {
		if (!strcmp(key, "max_gpus"))
			return parse_max_gpus(l, line, value, &cfg->max_gpus);
		if (!strcmp(key, "max_reserve"))
			return parse_positive_ms(l, line, key, value, &cfg->max_reserve_ms);
		if (!strcmp(key, "max_lease"))
			return parse_positive_ms(l, line, key, value, &cfg->max_lease_ms);
		if (!strcmp(key, "max_gpu_hours"))
			return parse_gpu_hours(l, line, value, &cfg->max_gpu_ms);
		if (!strcmp(key, "keep_out"))
			return parse_gpus(l, line, key, value, &cfg->keep_out);
		return fail_at(l, line,
		               "unknown key '%s' in [%s] (known: max_gpus, max_reserve, max_lease, "
		               "max_gpu_hours, keep_out)",
		               key, section);
	}
	if (!strncmp(section, "user ", 5) || !strncmp(section, "group ", 6)) {
		int user = section[0] == 'u';
		const char *name = section + (user ? 5 : 6);
		struct config_cap *cap;

		while (*name == ' ')
			name++;
		if (!*name)
			return fail_at(l, line, "[%s]: name the %s", section,
			               user ? "user" : "group");
		cap = user ? cap_for(&cfg->users, &cfg->user_count, name)
		           : cap_for(&cfg->groups, &cfg->group_count, name);
		if (!cap)
			return fail_at(l, line, "out of memory%s%s", "", "");
		if (!strcmp(key, "max_gpus"))
			return parse_max_gpus(l, line, value, &cap->max_gpus);
		if (!strcmp(key, "max_reserve"))
			return parse_positive_ms(l, line, key, value, &cap->max_reserve_ms);
		if (!strcmp(key, "max_lease"))
			return parse_positive_ms(l, line, key, value, &cap->max_lease_ms);
		if (!strcmp(key, "max_gpu_hours"))
			return parse_gpu_hours(l, line, value, &cap->max_gpu_ms);
		if (!user && !strcmp(key, "gpus"))
			return parse_gpus(l, line, key, value, &cap->gpus);
		return fail_at(
		    l, line,
		    user ? "unknown key '%s' in [%s] (known: max_gpus, max_reserve, max_lease, "
		           "max_gpu_hours)"
		         : "unknown key '%s' in [%s] (known: max_gpus, max_reserve, max_lease, "
		           "max_gpu_hours, gpus)",
		    key, section);
	}
	return fail_at(l, line,
	               "unknown section [%s] (known: queue, defaults, limits, user NAME, group "
	               "NAME)%s",
	               section, "");
}

/* 0 read or absent; -1 with the message in l->err. */
static int load_file(struct loading *l)
{
	FILE *f = fopen(l->path, "re");
	int rc;

	l->file = f;
	l->line = 0;
	if (!f) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		if (l->is_user && errno == EACCES) {
			snprintf(l->cfg->user_note, sizeof l->cfg->user_note,
			         "%s: %s; personal defaults not read (is HOME or XDG_CONFIG_HOME "
			         "another user's?)",
			         l->path, strerror(errno));
			l->cfg->user_path[0] = '\0';
			return 0;
		}
		snprintf(l->err, sizeof l->err, "%s: %s", l->path, strerror(errno));
		return -1;
	}
	rc = ini_parse_stream(read_line, l, on_entry, l);
	fclose(f);
	if (l->err[0])
		return -1;
	if (rc != 0) {
		snprintf(l->err, sizeof l->err,
		         "%s:%d: not INI (expected [section] or key = value)", l->path, rc);
		return -1;
	}
	return 0;
}

enum gm_err config_load(struct config *cfg, int with_user, char *err, size_t len)
{
	const char *sys = getenv("GPUMAN_CONFIG"), *xdg = getenv("XDG_CONFIG_HOME"),
	           *home = getenv("HOME");
	char user_path[4096] = "";
	struct loading l;

	*cfg = (struct config)CONFIG_INIT;
	snprintf(cfg->system_path, sizeof cfg->system_path, "%s",
	         sys && *sys ? sys : CONFIG_SYSTEM_PATH);
	memset(&l, 0, sizeof l);
	l.cfg = cfg;
	l.path = cfg->system_path;
	if (load_file(&l) < 0)
		goto failed;
	if (!with_user)
		return GM_OK;
	/* "config" is the documented name; "gpuman.conf" was read before it. */
	for (int i = 0; i < 2 && !user_path[0]; i++) {
		const char *file = i ? "gpuman.conf" : "config";
		char path[4096];
		struct stat st;

		if (xdg && *xdg == '/')
			snprintf(path, sizeof path, "%s/gpuman/%s", xdg, file);
		else if (home && *home == '/')
			snprintf(path, sizeof path, "%s/.config/gpuman/%s", home, file);
		else
			return GM_OK;
		if (stat(path, &st) == 0 || i == 1)
			str_copy(user_path, sizeof user_path, path);
	}
	str_copy(cfg->user_path, sizeof cfg->user_path, user_path);
	l.path = user_path;
	l.is_user = 1;
	if (load_file(&l) < 0)
		goto failed;
	return GM_OK;
failed:
	config_release(cfg);
	return gm_fail(GM_ERR_STATE, err, len, "%s", l.err);
}

void config_release(struct config *cfg)
{
	for (size_t i = 0; i < cfg->group_count; i++)
		free(cfg->groups[i].gpus);
	free(cfg->users);
	free(cfg->groups);
	free(cfg->keep_out);
	cfg->keep_out = NULL;
	cfg->users = cfg->groups = NULL;
	cfg->user_count = cfg->group_count = 0;
}

/* Who uid is, for the sections that name users and groups. */
struct who {
	int known;
	char name[256];
	size_t group_count;
	char groups[64][64];
};

/*
 * Users' names and groups, remembered for a few seconds: the broker asks
 * for every waiter at every pass over its line, and each look-up reads
 * /etc/passwd and /etc/group.
 */
#define WHO_CACHE_MS 5000

static void who_lookup(unsigned uid, struct who *w)
{
	struct passwd pw, *pwp = NULL;
	char buf[4096];
	gid_t gids[256];
	int ngroups = (int)(sizeof gids / sizeof *gids);

	memset(w, 0, sizeof *w);
	if (getpwuid_r((uid_t)uid, &pw, buf, sizeof buf, &pwp) != 0 || !pwp)
		return;
	w->known = 1;
	str_copy(w->name, sizeof w->name, pw.pw_name);
	if (getgrouplist(pw.pw_name, pw.pw_gid, gids, &ngroups) < 0)
		return;
	for (int g = 0; g < ngroups && w->group_count < ARRAY_SIZE(w->groups); g++) {
		struct group gr, *grp = NULL;
		char gbuf[8192];

		if (getgrgid_r(gids[g], &gr, gbuf, sizeof gbuf, &grp) == 0 && grp)
			str_copy(w->groups[w->group_count++], sizeof w->groups[0], gr.gr_name);
	}
}

static void who_is(const struct config *cfg, unsigned uid, struct who *w)
{
	static _Thread_local struct {
		unsigned uid;
		int64_t at_ms; /* monotonic; 0: empty */
		struct who who;
	} cache[8];
	static _Thread_local unsigned next;
	int64_t now;

	/* Nobody named: nothing to look up (and the 4 KiB of groups not
	 * cleared at every waiter of every pass of the broker's line). */
	w->known = 0;
	w->group_count = 0;
	if (!cfg->user_count && !cfg->group_count)
		return;
	now = monotonic_ms();
	memset(w, 0, sizeof *w);
	for (size_t i = 0; i < ARRAY_SIZE(cache); i++)
		if (cache[i].at_ms && cache[i].uid == uid && now - cache[i].at_ms < WHO_CACHE_MS) {
			*w = cache[i].who;
			return;
		}
	who_lookup(uid, w);
	cache[next].uid = uid;
	cache[next].at_ms = now;
	cache[next].who = *w;
	next = (next + 1) % ARRAY_SIZE(cache);
}

static int in_group(const struct who *w, const char *group)
{
	for (size_t i = 0; i < w->group_count; i++)
		if (!strcmp(w->groups[i], group))
			return 1;
	return 0;
}

/*
 * One limit for uid: its [user] section's, else the most generous of its
 * groups', else [limits]'s.  field picks the limit out of a config_cap.
 */
static int64_t cap_field(const struct config_cap *c, size_t field)
{
	return field == offsetof(struct config_cap, max_gpus)       ? (int64_t)c->max_gpus
	       : field == offsetof(struct config_cap, max_lease_ms) ? c->max_lease_ms
	       : field == offsetof(struct config_cap, max_gpu_ms)   ? c->max_gpu_ms
	                                                            : c->max_reserve_ms;
}

static int64_t limit_for(const struct config *cfg, unsigned uid, size_t field, int64_t all,
                         char *from, size_t fromlen)
{
	struct who w;
	int64_t best = 0;

#define FIELD(c) cap_field(&(c), field)
	snprintf(from, fromlen, "[limits]");
	who_is(cfg, uid, &w);
	if (!w.known)
		return all;
	for (size_t i = 0; i < cfg->user_count; i++)
		if (FIELD(cfg->users[i]) && !strcmp(cfg->users[i].name, w.name)) {
			snprintf(from, fromlen, "[user %s]", w.name);
			return FIELD(cfg->users[i]);
		}
	for (size_t i = 0; i < cfg->group_count; i++)
		if (FIELD(cfg->groups[i]) > best && in_group(&w, cfg->groups[i].name)) {
			best = FIELD(cfg->groups[i]);
			snprintf(from, fromlen, "[group %s]", cfg->groups[i].name);
		}
#undef FIELD
	return best ? best : all;
}

unsigned config_max_gpus(const struct config *cfg, unsigned uid, char *from, size_t fromlen)
{
	return (unsigned)limit_for(cfg, uid, offsetof(struct config_cap, max_gpus), cfg->max_gpus,
	                           from, fromlen);
}

int64_t config_max_reserve_ms(const struct config *cfg, unsigned uid, char *from, size_t fromlen)
{
	return limit_for(cfg, uid, offsetof(struct config_cap, max_reserve_ms), cfg->max_reserve_ms,
	                 from, fromlen);
}

int64_t config_max_lease_ms(const struct config *cfg, unsigned uid, char *from, size_t fromlen)
{
	return limit_for(cfg, uid, offsetof(struct config_cap, max_lease_ms), cfg->max_lease_ms,
	                 from, fromlen);
}

int64_t config_max_gpu_ms(const struct config *cfg, unsigned uid, char *from, size_t fromlen)
{
	return limit_for(cfg, uid, offsetof(struct config_cap, max_gpu_ms), cfg->max_gpu_ms, from,
	                 fromlen);
}

/* Is the limit field set anywhere: [limits] (all), a user or a group? */
static int limit_set(const struct config *cfg, size_t field, int64_t all)
{
	int any = all > 0;

	for (size_t i = 0; i < cfg->user_count; i++)
		any |= cap_field(&cfg->users[i], field) > 0;
	for (size_t i = 0; i < cfg->group_count; i++)
		any |= cap_field(&cfg->groups[i], field) > 0;
	return any;
}

int config_has_gpu_hours(const struct config *cfg)
{
	return limit_set(cfg, offsetof(struct config_cap, max_gpu_ms), cfg->max_gpu_ms);
}

int config_has_max_gpus(const struct config *cfg)
{
	return limit_set(cfg, offsetof(struct config_cap, max_gpus), cfg->max_gpus);
}

static int list_names(const char *list, unsigned index, const char *uuid)
{
	struct gpu_list l = GPU_LIST_INIT;
	int hit;

	if (!list || gpu_list_parse(list, &l, NULL, 0) < 0)
		return 0;
	hit = gpu_list_matches(&l, index, uuid);
	gpu_list_release(&l);
	return hit;
}

const char *config_gpu_barred(const struct config *cfg, unsigned uid, unsigned index,
                              const char *uuid, char *why, size_t len)
{
	char groups[256] = "";
	size_t used = 0;
	struct who w;
	int kept = 0;

	if (list_names(cfg->keep_out, index, uuid)) {
		snprintf(why, len, "kept out of gpuman by the admin (keep_out in %s)",
		         cfg->system_path);
		return why;
	}
	for (size_t i = 0; i < cfg->group_count; i++)
		if (list_names(cfg->groups[i].gpus, index, uuid)) {
			if (!kept++)
				who_is(cfg, uid, &w);
			if (in_group(&w, cfg->groups[i].name))
				return NULL;
			if (used < sizeof groups)
				used +=
				    (size_t)snprintf(groups + used, sizeof groups - used, "%s%s",
				                     used ? ", " : "", cfg->groups[i].name);
		}
	if (!kept)
		return NULL;
	snprintf(why, len, "kept for group %s ([group] gpus in %s)", groups, cfg->system_path);
	return why;
}
