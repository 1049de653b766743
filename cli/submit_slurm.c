/*
 * submit_slurm.c - `gpuman submit --slurm`'s options and `gpuman cancel` of
 * a job on Slurm (submit_slurm.h).  The Slurm options travel in the job's
 * machine key, so that the queue runs one dispatcher for them (queue.h) and
 * that dispatcher hands each of its jobs to sbatch with them.
 */
#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "engine.h"
#include "submit_slurm.h"

static const struct {
	const char *shrt, *lng, *as; /* -p, --partition, --partition=%s */
} slurm_opts[] = {
    {"-p", "--partition", "--partition=%s"},
    {"-A", "--account", "--account=%s"},
    {"-t", "--time", "--time=%s"},
    {"-C", "--constraint", "--constraint=%s"},
    {NULL, "--qos", "--qos=%s"},
    {NULL, "--gres", "--gres=%s"},
    {NULL, "--sbatch-arg", "%s"},
};
#define NOPTS (sizeof slurm_opts / sizeof slurm_opts[0])

/* argv[*i] as a Slurm option (its value taken too); -1 not one. */
static int slurm_option(char **argv, int argc, int *i, char *buf, size_t len, const char **what)
{
	for (size_t k = 0; k < NOPTS; k++) {
		size_t ll = strlen(slurm_opts[k].lng);
		const char *a = argv[*i], *v = NULL;

		if (slurm_opts[k].shrt && !strcmp(a, slurm_opts[k].shrt))
			v = *i + 1 < argc ? argv[++*i] : "";
		else if (slurm_opts[k].shrt && !strncmp(a, slurm_opts[k].shrt, 2) && a[2])
			v = a + 2;
		else if (!strcmp(a, slurm_opts[k].lng))
			v = *i + 1 < argc ? argv[++*i] : "";
		else if (!strncmp(a, slurm_opts[k].lng, ll) && a[ll] == '=')
			v = a + ll + 1;
		if (!v)
			continue;
		*what = slurm_opts[k].lng;
		snprintf(buf, len, slurm_opts[k].as, v);
		return (int)k;
	}
	return -1;
}

int submit_slurm_take(struct cli *cli, int *argc, char **argv, char **key)
{
	char args[4096] = "", opt[1024], conf[PATH_MAX];
	const char *what, *sc = getenv("SLURM_CONF");
	int slurm = 0, out = 1, gres = 0, end = *argc;
	size_t used = 0;

	*key = NULL;
	for (int i = 1; i < *argc && strcmp(argv[i], "--"); i++)
		slurm |= !strcmp(argv[i], "--slurm");
	if (!slurm)
		return CLI_CONTINUE;
	for (int i = 1; i < *argc; i++) {
		int k;

		if (!strcmp(argv[i], "--")) {
			end = i;
			break;
		}
		if (!strcmp(argv[i], "--slurm"))
			continue;
		if ((k = slurm_option(argv, *argc, &i, opt, sizeof opt, &what)) < 0) {
			argv[out++] = argv[i];
			continue;
		}
		if (!opt[0] || strpbrk(opt, " \t\n") || opt[strlen(opt) - 1] == '=')
			return cli_usage(cli,
			                 "%s: give one word (no spaces: the options are kept "
			                 "with the queued job)",
			                 what);
		gres |= !strcmp(what, "--gres") || !strncmp(opt, "--gres", 6) ||
		        !strncmp(opt, "--gpus", 6) || !strncmp(opt, "-G", 2);
		if (used + strlen(opt) + 2 >= sizeof args)
			return cli_usage(cli, "too many Slurm options");
		used +=
		    (size_t)snprintf(args + used, sizeof args - used, "%s%s", used ? " " : "", opt);
	}
	for (int i = end; i < *argc; i++)
		argv[out++] = argv[i];
	argv[out] = NULL;
	*argc = out;
	if (!gres) /* one GPU, as a plain submit */
		used += (size_t)snprintf(args + used, sizeof args - used, "%s--gres=gpu:1",
		                         used ? " " : "");
	/* the dispatcher reads SLURM_CONF as submit did: the same cluster */
	if (sc && *sc && !realpath(sc, conf))
		snprintf(conf, sizeof conf, "%s", sc);
	if (asprintf(key, "%s=%s\n%s%s%s", SUBMIT_SLURM_VAR, args, sc && *sc ? "SLURM_CONF=" : "",
	             sc && *sc ? conf : "", sc && *sc ? "\n" : "") < 0) {
		*key = NULL;
		return cli_error(cli, EXIT_FAIL, "out of memory");
	}
	return CLI_CONTINUE;
}

int slurm_request_check(struct cli *cli, int n_ok)
{
	char *json = engine_request_json(cli->req, cli->no_framework_env);
	json_t *o = json ? json_loads(json, 0, NULL) : NULL;
	const char *key;
	json_t *v;
	int rc = CLI_CONTINUE;

	free(json);
	json_object_foreach(o, key, v)
	{
		if ((!strcmp(key, "n") &&
		     (n_ok || !json_is_string(v) || !strcmp(json_string_value(v), "1"))) ||
		    (!strcmp(key, "by") && !strcmp(json_string_value(v), "memory")))
			continue; /* the default policy */
		rc = cli_usage(cli,
		               "%s%s does not apply under Slurm: Slurm chooses each %s's GPUs "
		               "(whole GPUs; ask with --gres=gpu[:TYPE]:N)",
		               strcmp(key, "n") ? "--" : "-", key, n_ok ? "task" : "job");
		break;
	}
	json_decref(o);
	return rc;
}

int submit_slurm_cancel(const struct queue *q, const struct job *job, char *err, size_t len)
{
	char dir[PATH_MAX], path[PATH_MAX + 64], id[32] = "";
	FILE *f;
	pid_t pid;
	int st;

	if (!job->machine || !strstr(job->machine, SUBMIT_SLURM_VAR "="))
		return 0;
	queue_run_dir(q, job->machine, dir, sizeof dir);
	snprintf(path, sizeof path, "%s/slurm-%lld.job", dir, (long long)job->id);
	if (!(f = fopen(path, "r")) || fscanf(f, "%31s", id) != 1) {
		if (f)
			fclose(f);
		snprintf(err, len, "job %lld: its Slurm job is not known yet", (long long)job->id);
		return -1;
	}
	fclose(f);
	/* the dispatcher's word that the end was ours (squeue may already
	 * have forgotten the job when it looks) */
	snprintf(path, sizeof path, "%s/slurm-%lld.cancel", dir, (long long)job->id);
	close(open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
	pid = fork();
	if (pid == 0) {
		execlp("scancel", "scancel", id, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		snprintf(err, len, "job %lld: scancel %s failed%s", (long long)job->id, id,
		         pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 127
		             ? " (Slurm's scancel is not on the PATH)"
		             : "");
		return -1;
	}
	printf("%lld cancelling (Slurm job %s%s%s)\n", (long long)job->id, id,
	       job->node ? " on " : "", job->node ? job->node : "");
	return 1;
}
