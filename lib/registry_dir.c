/*
 * registry_dir.c - the daemonless registry's state directory: where it is
 * (GPUMAN_STATE_DIR, else /run/gpuman, else /tmp/gpuman), made shared and
 * sticky, refused when another user could redirect or remove everyone's
 * leases, and opened as the registry lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "broker_wire.h"
#include "registry_impl.h"
#include "util.h"

static enum gm_err check_dir(const char *dir, struct stat *out, char *err, size_t len)
{
	struct stat st;

	if (lstat(dir, &st) < 0)
		return gm_fail(GM_ERR_STATE, err, len, "state directory '%s': %s", dir,
		               strerror(errno));
	if (S_ISLNK(st.st_mode))
		return gm_fail(
		    GM_ERR_STATE, err, len,
		    "state directory '%s' is a symbolic link; refusing it (another user "
		    "could redirect everyone's leases); point GPUMAN_STATE_DIR at a real "
		    "directory",
		    dir);
	if (!S_ISDIR(st.st_mode))
		return gm_fail(GM_ERR_STATE, err, len, "state directory '%s' is not a directory",
		               dir);
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		struct passwd *pw = getpwuid(st.st_uid);

		return gm_fail(GM_ERR_STATE, err, len,
		               "state directory '%s' is owned by user '%s', who could remove "
		               "everyone's leases; for a registry shared by all users an admin "
		               "should run 'install -d -m 1777 /run/gpuman' (see "
		               "contrib/gpuman.tmpfiles.conf), or set GPUMAN_STATE_DIR to a "
		               "directory owned by root or by you",
		               dir, pw ? pw->pw_name : "?");
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
		return gm_fail(GM_ERR_STATE, err, len,
		               "state directory '%s' is writable by others without the sticky bit, "
		               "so anyone could remove your leases; fix it with 'chmod +t %s'",
		               dir, dir);
	*out = st;
	return GM_OK;
}

/* Shared by every user, so world-writable and sticky: each user may add
 * files but only remove their own. */
static enum gm_err make_shared_dir(const char *dir, char *err, size_t len)
{
	if (mkdir(dir, 01777) == 0) {
		if (chmod(dir, 01777) < 0) /* mkdir obeys the umask */
			return gm_fail(GM_ERR_STATE, err, len, "state directory '%s': chmod: %s",
			               dir, strerror(errno));
	} else if (errno != EEXIST) {
		return gm_fail(GM_ERR_STATE, err, len,
		               "cannot create state directory '%s': %s (set GPUMAN_STATE_DIR)", dir,
		               strerror(errno));
	}
	return GM_OK;
}

/* The state directory, made if need be, checked, and its lock opened. */
enum gm_err registry_dir_open(struct registry *reg, char *err, size_t len)
{
	const char *env = getenv("GPUMAN_STATE_DIR");
	struct stat st, fst;
	enum gm_err rc;

	rc = lease_env_check(err, len);
	if (rc != GM_OK)
		return rc;
	if (env && *env)
		snprintf(reg->dir, sizeof reg->dir, "%s", env);
	else if (stat("/run/gpuman", &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(reg->dir, sizeof reg->dir, "/run/gpuman");
	else
		snprintf(reg->dir, sizeof reg->dir, "/tmp/gpuman");
	rc = make_shared_dir(reg->dir, err, len);
	if (rc == GM_OK)
		rc = check_dir(reg->dir, &st, err, len);
	if (rc != GM_OK)
		return rc;
	/*
	 * The lock is the directory itself: nobody but its owner (root, or
	 * this user) can rename or replace it, unlike a file in it, which its
	 * creator could rename away so that later callers lock another inode.
	 * Read-only, like every flock here: it needs no write access.
	 */
	reg->lock_fd = open(reg->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (reg->lock_fd < 0 || fstat(reg->lock_fd, &fst) < 0)
		return gm_fail(GM_ERR_STATE, err, len, "cannot open state directory '%s': %s",
		               reg->dir, strerror(errno));
	if (fst.st_dev != st.st_dev || fst.st_ino != st.st_ino)
		return gm_fail(GM_ERR_STATE, err, len,
		               "state directory '%s' was replaced while it was opened; try again",
		               reg->dir);
	return GM_OK;
}
