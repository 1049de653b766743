/*
 * safedir.c - a directory no other user can change (see safedir.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "safedir.h"

static const char *user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd *pw = getpwuid(uid);

	if (pw)
		snprintf(buf, len, "user '%s'", pw->pw_name);
	else
		snprintf(buf, len, "uid %u", (unsigned)uid);
	return buf;
}

/* mkdir -p: each missing directory with mode (batch's own are 0700). */
int make_dirs(const char *path, mode_t mode)
{
	char buf[PATH_MAX];

	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

/* May only root and we change the directory at path (links followed)? */
static int trusted_dir(const char *path, char *err, size_t errlen)
{
	struct stat st;
	char who[64];

	if (stat(path, &st) < 0) {
		snprintf(err, errlen, "'%s': %s", path, strerror(errno));
		return -1;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		snprintf(err, errlen,
		         "'%s', on the way to the log directory, belongs to %s, who could swap "
		         "the log directory for one of theirs (use --log-dir with a directory "
		         "under one only you and root can change)",
		         path, user_name(st.st_uid, who, sizeof who));
		return -1;
	}
	if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX)) {
		snprintf(err, errlen,
		         "'%s', on the way to the log directory, is writable by other users "
		         "(mode %04o) without the sticky bit: they could swap the log directory "
		         "for one of theirs (run 'chmod go-w' on it, or use --log-dir with a "
		         "directory under one only you and root can change)",
		         path, (unsigned)(st.st_mode & 07777));
		return -1;
	}
	return 0;
}

/* Links on the unresolved way: ours or root's, in directories as above. */
static int check_links(const char *lexical, char *err, size_t errlen)
{
	char buf[PATH_MAX], who[64];
	size_t len = strlen(lexical);

	if (len >= sizeof buf) {
		snprintf(err, errlen, "'%s': %s", lexical, strerror(ENAMETOOLONG));
		return -1;
	}
	memcpy(buf, lexical, len + 1);
	for (size_t i = 1; i <= len; i++) {
		struct stat st;

		if (i < len && buf[i] != '/')
			continue;
		buf[i] = '\0';
		if (lstat(buf, &st) == 0 && S_ISLNK(st.st_mode)) {
			char *slash = strrchr(buf, '/');

			if (st.st_uid != 0 && st.st_uid != geteuid()) {
				snprintf(err, errlen,
				         "'%s' is a symbolic link of %s: it could point your log "
				         "directory anywhere (remove it, or use --log-dir with a "
				         "directory of your own)",
				         buf, user_name(st.st_uid, who, sizeof who));
				return -1;
			}
			*slash = '\0';
			if (trusted_dir(slash == buf ? "/" : buf, err, errlen) < 0)
				return -1;
			*slash = '/';
		}
		if (i < len)
			buf[i] = '/';
	}
	return 0;
}

int safedir_open(const char *path, int owned, char *abs, size_t abslen, char *err, size_t errlen)
{
	char lexical[PATH_MAX + 8], real[PATH_MAX], who[64];
	struct stat st, fst;
	size_t len, ncomp = 0;
	int fd;

	if (make_dirs(path, 0700) < 0 || !realpath(path, real)) {
		snprintf(err, errlen, "log directory '%s': %s", path, strerror(errno));
		return -1;
	}
	if (path[0] == '/') {
		snprintf(lexical, sizeof lexical, "%s", path);
	} else {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof cwd)) {
			snprintf(err, errlen, "the working directory: %s", strerror(errno));
			return -1;
		}
		if (snprintf(lexical, sizeof lexical, "%s/%s", cwd, path) >= (int)sizeof lexical) {
			snprintf(err, errlen, "log directory '%s': %s", path,
			         strerror(ENAMETOOLONG));
			return -1;
		}
	}
	if (check_links(lexical, err, errlen) < 0)
		return -1;

	/* "/", then each longer prefix; the last `owned` must be ours. */
	len = strlen(real);
	for (size_t i = 1; i < len; i++)
		ncomp += real[i] == '/';
	ncomp += len > 1;
	for (size_t k = 0, i = 0; k <= ncomp; k++) {
		char prefix[PATH_MAX];

		if (k > 0)
			i += 1 + strcspn(real + i + 1, "/");
		snprintf(prefix, sizeof prefix, "%.*s", k ? (int)i : 1, real);
		if (k + (size_t)owned <= ncomp) {
			if (trusted_dir(prefix, err, errlen) < 0)
				return -1;
			continue;
		}
		errno = 0;
		if (lstat(prefix, &st) < 0 || !S_ISDIR(st.st_mode)) {
			snprintf(err, errlen, "log directory '%s': %s", prefix,
			         errno ? strerror(errno) : "not a directory");
			return -1;
		}
		if (st.st_uid != geteuid()) {
			snprintf(err, errlen,
			         "'%s' belongs to %s, not you: they could read your task logs or "
			         "plant links that make your tasks overwrite or run your files "
			         "(use --log-dir with a directory of your own, or have it removed)",
			         prefix, user_name(st.st_uid, who, sizeof who));
			return -1;
		}
		if (st.st_mode & 022) {
			snprintf(err, errlen,
			         "'%s' is writable by other users (mode %04o): they could plant "
			         "links that make your tasks overwrite or run your files (run "
			         "'chmod go-w %s', or use --log-dir)",
			         prefix, (unsigned)(st.st_mode & 07777), prefix);
			return -1;
		}
	}
	fd = open(real, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &fst) < 0 || lstat(real, &st) < 0 || fst.st_dev != st.st_dev ||
	    fst.st_ino != st.st_ino) {
		snprintf(err, errlen, "log directory '%s' changed while it was checked%s%s", real,
		         fd < 0 ? ": " : "", fd < 0 ? strerror(errno) : "");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	snprintf(abs, abslen, "%s", real);
	return fd;
}
