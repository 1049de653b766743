/*
 * notify.h - telling a user that a queued job has ended (submit --notify).
 *
 * How is decided at submit, from the submitter's session, and recorded
 * with the job as one of:
 *
 *   desktop:PROGRAM        notify-send (libnotify): a desktop notification
 *                          on the session whose DBUS_SESSION_BUS_ADDRESS the
 *                          job recorded
 *   mail:PROGRAM:ADDRESS   the system's sendmail (any MTA provides one)
 *   exec:PROGRAM           PROGRAM ID STATE, with the job's environment plus
 *                          GPUMAN_JOB, GPUMAN_JOB_STATE, GPUMAN_JOB_NAME,
 *                          GPUMAN_JOB_REASON
 *
 * The dispatcher tells, once each job has ended and its end is committed;
 * it never waits for the program.
 */
#ifndef GM_NOTIFY_H
#define GM_NOTIFY_H

#include <stddef.h>
#include "jobstore.h"

/*
 * Resolve --notify (how NULL: the default) into out: "desktop" where the
 * session has a desktop bus and notify-send is installed, else "mail" to
 * $USER where sendmail is; how may be "desktop", "mail", "mail:ADDRESS" or
 * "exec:PROGRAM".  Programs are found on PATH now.  0, or -1 with a
 * message for people in err.
 */
int notify_resolve(const char *how, char *out, size_t len, char *err, size_t errlen);

/* Start telling how job (read with its env) ended; 0, or -1 with err. */
int notify_send(const struct job *job, char *err, size_t errlen);

#endif
