/*
 * config.c - gpuman.conf (see config.h), read with libinih.  The parser is
 * the library's; this file only knows which sections and keys mean what.
 */
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>
#include "config.h"
#include "parse.h"
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
	if (l->is_user)
		return fail_at(l, line, "[%s] is the admin's (%s); your file may only set [queue]",
		               section, cfg->system_path);
	if (strcmp(key, "max_gpus"))
		return fail_at(l, line, "unknown key '%s' in [%s] (known: max_gpus)", key, section);
	if (!strcmp(section, "limits"))
		return parse_max_gpus(l, line, value, &cfg->max_gpus);
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
		return parse_max_gpus(l, line, value, &cap->max_gpus);
	}
	return fail_at(l, line,
	               "unknown section [%s] (known: queue, limits, user NAME, group NAME)%s",
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
	if (xdg && *xdg == '/')
		snprintf(user_path, sizeof user_path, "%s/gpuman/gpuman.conf", xdg);
	else if (home && *home == '/')
		snprintf(user_path, sizeof user_path, "%s/.config/gpuman/gpuman.conf", home);
	if (!user_path[0])
		return GM_OK;
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
	free(cfg->users);
	free(cfg->groups);
	cfg->users = cfg->groups = NULL;
	cfg->user_count = cfg->group_count = 0;
}

unsigned config_max_gpus(const struct config *cfg, unsigned uid, char *from, size_t fromlen)
{
	struct passwd pw, *pwp = NULL;
	char buf[4096];
	gid_t groups[256];
	int ngroups = (int)(sizeof groups / sizeof *groups);
	unsigned best = 0;

	snprintf(from, fromlen, "[limits]");
	if (!cfg->user_count && !cfg->group_count)
		return cfg->max_gpus;
	if (getpwuid_r((uid_t)uid, &pw, buf, sizeof buf, &pwp) != 0 || !pwp)
		return cfg->max_gpus;
	for (size_t i = 0; i < cfg->user_count; i++)
		if (cfg->users[i].max_gpus && !strcmp(cfg->users[i].name, pw.pw_name)) {
			snprintf(from, fromlen, "[user %s]", pw.pw_name);
			return cfg->users[i].max_gpus;
		}
	if (!cfg->group_count || getgrouplist(pw.pw_name, pw.pw_gid, groups, &ngroups) < 0)
		return cfg->max_gpus;
	for (int g = 0; g < ngroups; g++) {
		struct group gr, *grp = NULL;
		char gbuf[8192];

		if (getgrgid_r(groups[g], &gr, gbuf, sizeof gbuf, &grp) != 0 || !grp)
			continue;
		for (size_t i = 0; i < cfg->group_count; i++)
			if (cfg->groups[i].max_gpus && !strcmp(cfg->groups[i].name, gr.gr_name) &&
			    cfg->groups[i].max_gpus > best) {
				best = cfg->groups[i].max_gpus;
				snprintf(from, fromlen, "[group %s]", gr.gr_name);
			}
	}
	if (!best)
		snprintf(from, fromlen, "[limits]");
	return best ? best : cfg->max_gpus;
}
