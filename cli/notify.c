/*
 * notify.c - job-end notifications (see notify.h): notify-send, sendmail
 * or a program of the user's, started without a shell and not waited for.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "engine.h"
#include "notify.h"

extern char **environ;

/* name (a path, or looked up on PATH, then in extra) into out; 0 or -1. */
static int find_program(const char *name, const char *extra, char *out, size_t len)
{
	const char *path = getenv("PATH");
	char dirs[8192];

	if (strchr(name, '/')) {
		snprintf(out, len, "%s", name);
		return access(out, X_OK) == 0 ? 0 : -1;
	}
	snprintf(dirs, sizeof dirs, "%s:%s", path ? path : "/usr/bin:/bin", extra ? extra : "");
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d;
	     d = strtok_r(NULL, ":", &save)) {
		struct stat st;

		snprintf(out, len, "%s/%s", d, name);
		if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
			return 0;
	}
	return -1;
}

static int has_desktop(void)
{
	const char *bus = getenv("DBUS_SESSION_BUS_ADDRESS");

	return bus && *bus;
}

int notify_resolve(const char *how, char *out, size_t len, char *err, size_t errlen)
{
	char prog[4096];
	const char *user = getenv("USER");
	struct passwd *pw;

	/* USER is unset under cron, systemd units and su without -l: the
	 * user this runs as is the one to mail. */
	if ((!user || !*user) && (pw = getpwuid(geteuid())))
		user = pw->pw_name;

	if (!how || !strcmp(how, "desktop")) {
		if (has_desktop() && find_program("notify-send", NULL, prog, sizeof prog) == 0) {
			snprintf(out, len, "desktop:%s", prog);
			return 0;
		}
		if (how) {
			snprintf(
			    err, errlen, "--notify=desktop: %s",
			    has_desktop()
			        ? "notify-send is not installed (Debian: libnotify-bin)"
			        : "no desktop session here (DBUS_SESSION_BUS_ADDRESS is not set)");
			return -1;
		}
		how = "mail";
	}
	if (!strcmp(how, "mail") || !strncmp(how, "mail:", 5)) {
		const char *to = how[4] == ':' ? how + 5 : user;

		if (!to || !*to || strpbrk(to, " \t\n,;<>\"'\\")) {
			snprintf(err, errlen,
			         "--notify=%s: give one mail address (--notify=mail:ADDRESS)", how);
			return -1;
		}
		if (find_program("sendmail", "/usr/sbin:/usr/lib", prog, sizeof prog) < 0) {
			snprintf(err, errlen,
			         "--notify: %sno sendmail to mail with (install an MTA, or use "
			         "--notify=exec:PROGRAM)",
			         strcmp(how, "mail") || has_desktop() ? ""
			                                              : "no desktop session and ");
			return -1;
		}
		snprintf(out, len, "mail:%s:%s", prog, to);
		return 0;
	}
	if (!strncmp(how, "exec:", 5) && how[5]) {
		if (find_program(how + 5, NULL, prog, sizeof prog) < 0) {
			snprintf(err, errlen,
			         "--notify=%s: no program '%s' (a path, or a name on PATH)", how,
			         how + 5);
			return -1;
		}
		snprintf(out, len, "exec:%s", prog);
		return 0;
	}
	snprintf(err, errlen, "--notify=%s: use desktop, mail, mail:ADDRESS or exec:PROGRAM", how);
	return -1;
}

/* The job's recorded environment as an envp, plus extra; NULL-terminated. */
static char **job_envp(const struct job *job, char **extra, size_t nextra)
{
	size_t n = 0, k = 0;
	char **envp;

	for (size_t off = 0; job->env && off < job->env_len; off += strlen(job->env + off) + 1)
		n++;
	envp = calloc(n + nextra + 1, sizeof *envp);
	if (!envp)
		return NULL;
	for (size_t i = 0; i < nextra; i++)
		envp[k++] = extra[i];
	for (size_t off = 0; job->env && off < job->env_len; off += strlen(job->env + off) + 1) {
		const char *v = job->env + off;
		size_t eq = strcspn(v, "=");
		int shadowed = 0;

		for (size_t i = 0; i < nextra; i++)
			shadowed |= !strncmp(extra[i], v, eq + 1);
		if (!shadowed)
			envp[k++] = (char *)v;
	}
	return envp;
}

int notify_send(const struct job *job, char *err, size_t errlen)
{
	char summary[512], body[2048], dur[32], when[64], *kind = NULL, *prog, *arg;
	char e_job[48], e_state[64], e_name[128], e_reason[1200];
	char *extra[] = {e_job, e_state, e_name, e_reason};
	char **envp = NULL;
	int64_t ms = job->start_ms && job->end_ms ? job->end_ms - job->start_ms : -1;
	posix_spawn_file_actions_t fa;
	int pipefd[2] = {-1, -1}, rc = -1;
	pid_t pid;

	kind = strdup(job->notify ? job->notify : "");
	if (!kind)
		goto done;
	prog = strchr(kind, ':');
	if (!prog) {
		snprintf(err, errlen, "unknown notification '%s'", kind);
		goto done;
	}
	*prog++ = '\0';
	arg = NULL;
	if (!strcmp(kind, "mail")) {
		arg = strrchr(prog, ':');
		if (!arg) {
			snprintf(err, errlen, "notification '%s' names no address", job->notify);
			goto done;
		}
		*arg++ = '\0';
	}
	if (ms < 0)
		snprintf(dur, sizeof dur, "-");
	else if (ms < 60000)
		snprintf(dur, sizeof dur, "%.1fs", (double)ms / 1000.0);
	else
		snprintf(dur, sizeof dur, "%lldm%02llds", (long long)(ms / 60000),
		         (long long)(ms % 60000 / 1000));
	snprintf(summary, sizeof summary, "gpuman: job %lld%s%s%s %s", (long long)job->id,
	         job->name ? " (" : "", job->name ? job->name : "", job->name ? ")" : "",
	         job_state_name(job->state));
	snprintf(when, sizeof when, "%s%s", job->gpus ? " on GPU " : "",
	         job->gpus ? job->gpus : "");
	snprintf(body, sizeof body, "%s\n%s after %s%s%s%s", job->command ? job->command : "",
	         job_state_name(job->state), dur, when, job->reason ? ": " : "",
	         job->reason ? job->reason : "");
	snprintf(e_job, sizeof e_job, "GPUMAN_JOB=%lld", (long long)job->id);
	snprintf(e_state, sizeof e_state, "GPUMAN_JOB_STATE=%s", job_state_name(job->state));
	snprintf(e_name, sizeof e_name, "GPUMAN_JOB_NAME=%s", job->name ? job->name : "");
	snprintf(e_reason, sizeof e_reason, "GPUMAN_JOB_REASON=%s", job->reason ? job->reason : "");
	envp = job_envp(job, extra, sizeof extra / sizeof *extra);
	if (!envp || posix_spawn_file_actions_init(&fa) != 0)
		goto done;
	/* Not ours to wait for: no terminal, no inherited descriptors but
	 * the message. */
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (!strcmp(kind, "desktop")) {
		char *argv[] = {prog, (char *)"--app-name=gpuman", summary, body, NULL};

		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
		rc = posix_spawn(&pid, prog, &fa, NULL, argv, envp);
	} else if (!strcmp(kind, "mail")) {
		char *argv[] = {prog, (char *)"-oi", (char *)"--", arg, NULL};
		char msg[4096];
		int n =
		    snprintf(msg, sizeof msg, "To: %s\nSubject: %s\n\n%s\n", arg, summary, body);

		/* The message fits the pipe: writing it never blocks. */
		if (pipe2(pipefd, O_CLOEXEC) < 0) {
			snprintf(err, errlen, "pipe: %s", strerror(errno));
			goto spawned;
		}
		posix_spawn_file_actions_adddup2(&fa, pipefd[0], 0);
		rc = posix_spawn(&pid, prog, &fa, NULL, argv, envp);
		if (rc == 0 && write(pipefd[1], msg,
		                     (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0)
			rc = errno;
	} else if (!strcmp(kind, "exec")) {
		char id[32], *argv[] = {prog, id, (char *)job_state_name(job->state), NULL};

		snprintf(id, sizeof id, "%lld", (long long)job->id);
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
		rc = posix_spawn(&pid, prog, &fa, NULL, argv, envp);
	} else {
		snprintf(err, errlen, "unknown notification '%s'", kind);
		rc = -1;
		goto spawned;
	}
	if (rc > 0) {
		snprintf(err, errlen, "cannot start '%s': %s", prog, strerror(rc));
		rc = -1;
	}
spawned:
	posix_spawn_file_actions_destroy(&fa);
done:
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	free(envp);
	free(kind);
	return rc == 0 ? 0 : -1;
}
