/*
 * cmd_pam_session.c - `gpuman pam-session`: the PAM session hook that keeps
 * a user's login session to the GPUs of her own leases, where the admin
 * set [fence] sessions = yes in gpuman.conf (contrib/pam/: pam_exec runs it
 * as root while the session opens, before the user's shell starts).
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "gpuman-internal.h"

enum { OPT_PID = OPT_CMD_BASE };

static int pam_option(struct cli *cli, int opt, const char *arg, void *data)
{
	int *pid = data;

	if (opt != OPT_PID)
		return -1;
	*pid = atoi(arg);
	if (*pid <= 1)
		return cli_usage(cli, "--pid '%s': not a process id", arg);
	return CLI_CONTINUE;
}

static int pam_session_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_COMMON_OPTIONS, {"pid", required_argument, NULL, OPT_PID}, {0}};
	const char *type = getenv("PAM_TYPE"), *user = getenv("PAM_USER");
	char path[PATH_MAX], err[GM_ERRBUF_SIZE];
	struct passwd *pw;
	int pid = 0, rc;

	rc = cli_parse(cli, &cmd_pam_session, argc, argv, "", longopts, pam_option, &pid);
	if (rc != CLI_CONTINUE)
		return rc;
	/* Only the opening of a session places anything; the rest is no-op. */
	if (!type || strcmp(type, "open_session"))
		return EXIT_OK;
	if (!user || !(pw = getpwnam(user)))
		return cli_error(cli, EXIT_FAIL, "PAM_USER '%s': no such user",
		                 user ? user : "(unset)");
	if (pw->pw_uid == 0 || !broker_wanted(path, sizeof path))
		return EXIT_OK; /* root is not fenced; no broker, no fence */
	/* pam_exec's parent is the process the session's shell comes from. */
	rc = broker_fence_session(path, (unsigned)pw->pw_uid, pid ? pid : (int)getppid(), err,
	                          sizeof err);
	if (rc < 0)
		return cli_error(cli, EXIT_FAIL, "login session of '%s' not fenced: %s", user, err);
	return EXIT_OK;
}

const struct cmd_entry cmd_pam_session = {
    "pam-session",
    NULL, /* plumbing for pam_exec, not for people: not listed in --help */
    "usage: gpuman pam-session [--pid PID]   (run by pam_exec, as root)\n"
    "\n"
    "With [fence] sessions = yes in gpuman.conf and the broker running as root,\n"
    "places the session that is opening (pam_exec's parent, or PID) in a cgroup\n"
    "whose device filter lets it open the GPU device nodes of its user's own\n"
    "live leases and reservations only, following them as they come and go.\n"
    "Root's sessions are not fenced.  In /etc/pam.d/sshd and /etc/pam.d/login:\n"
    "  session optional pam_exec.so quiet /usr/local/bin/gpuman pam-session\n"
    "(required instead of optional refuses a login that cannot be fenced).\n"
    "Reads PAM_TYPE and PAM_USER; does nothing but at open_session.\n",
    pam_session_exec,
    "pam-session is plumbing for pam_exec; gpuman status --json shows the fence",
};
