/*
 * safedir.h - open a directory for a user's private files (batch's log
 * directory) only if no other user can change it or the way to it.
 *
 * In a shared directory another user could otherwise create the directory
 * first, or plant links in it, and make our tasks overwrite, run or delete
 * our own files.  The rule, in the manner of OpenSSH's StrictModes:
 *   - the last `owned` components of PATH are directories of the caller,
 *     not writable by group or others;
 *   - every other directory on the way (after resolving links) belongs to
 *     root or the caller and is not writable by group or others, unless it
 *     is sticky (/tmp);
 *   - a symbolic link on the way belongs to root or the caller and lies in
 *     such a directory.
 * Missing directories are created 0700.  Nobody else can then rename, swap
 * or fill any of them, so the path stays good for as long as we use it.
 */
#ifndef GM_SAFEDIR_H
#define GM_SAFEDIR_H

#include <stddef.h>
#include <sys/types.h>

/* mkdir -p PATH, each directory it creates with MODE; 0 or -1 with errno. */
int make_dirs(const char *path, mode_t mode);

/*
 * Create what is missing of PATH, check it as above and open it
 * (O_DIRECTORY, close-on-exec).  abs gets its absolute, resolved path.
 * Returns the descriptor, or -1 with a message in err that names the
 * culprit and says what to do.
 */
int safedir_open(const char *path, int owned, char *abs, size_t abslen, char *err, size_t errlen);

#endif
