/*
 * queue_others.c - `gpuman queue -u USER` and `-u all`: what one user may
 * see of another's jobs.
 *
 * Each user's queue is a private file (0600 in a 0700 directory): nobody
 * else can read what is queued there, and gpuman does not copy it anywhere
 * others could.  What every user sees already -- `gpuman status` shows it
 * to all -- is the lease registry: each running job's lease (user, GPUs,
 * since when, the command) and the waiting line (the head of each
 * dispatcher's queue, a run --wait).  So that is what -u shows of others:
 * their work that holds or waits for GPUs, not their queue.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpuman-internal.h"
#include "jobs.h"

static json_t *lease_json(const struct lease_info *r)
{
	json_t *gpus = json_array();

	for (size_t g = 0; g < r->gpu_count; g++)
		json_array_append_new(gpus, json_integer(r->indices[g]));
	return json_pack("{s:s,s:s,s:o,s:I,s:s,s:i}", "user", r->user, "state", "running", "gpus",
	                 gpus, "since_ms", (json_int_t)r->start_ms, "command", r->command, "pid",
	                 r->pid);
}

static json_t *waiter_json(const struct waiter_info *w, size_t place)
{
	return json_pack("{s:s,s:s,s:I,s:s,s:I,s:s,s:i}", "user", w->user, "state", "waiting",
	                 "place", (json_int_t)place, "request", w->summary, "since_ms",
	                 (json_int_t)w->since_ms, "command", w->command, "pid", w->pid);
}

int queue_show_others(struct cli *cli, const char *user, unsigned me)
{
	struct registry *reg = NULL;
	struct registry_view view = REGISTRY_VIEW_INIT;
	char err[GM_ERRBUF_SIZE], age[32], who[CLI_SAFE_SIZE], cmd[CLI_SAFE_SIZE],
	    what[CLI_SAFE_SIZE];
	json_t *list = cli->json ? json_array() : NULL;
	size_t shown = 0;

	if (registry_open(&reg, err, sizeof err) != GM_OK ||
	    registry_read(reg, &view, err, sizeof err) != GM_OK) {
		registry_close(reg);
		json_decref(list);
		return cli_error(cli, EXIT_FAIL, "%s", err);
	}
	for (size_t i = 0; i < view.lease_count; i++) {
		const struct lease_info *r = &view.leases[i];
		char gpus[256] = "";
		size_t used = 0;

		/* Reservations are status's (and nobody's job). */
		if (r->reservation || r->uid == me || (user && strcmp(r->user, user)))
			continue;
		if (list) {
			json_array_append_new(list, lease_json(r));
			continue;
		}
		if (!shown++)
			printf("%s%-12s %-8s %-9s %8s  %s%s\n", c_bold(cli), "USER", "STATE", "GPU",
			       "SINCE", "COMMAND", c_reset(cli));
		for (size_t g = 0; g < r->gpu_count && used < sizeof gpus; g++)
			used += (size_t)snprintf(gpus + used, sizeof gpus - used, "%s%u",
			                         g ? "," : "", r->indices[g]);
		printf("%-12s %s%-8s%s %-9s %8s  %s\n", cli_safe(who, r->user), c_green(cli),
		       "running", c_reset(cli), gpus, fmt_age(age, sizeof age, r->start_ms),
		       cli_safe(cmd, r->command));
	}
	for (size_t i = 0; i < view.waiter_count; i++) {
		const struct waiter_info *w = &view.waiters[i];

		if (w->uid == me || (user && strcmp(w->user, user)))
			continue;
		if (list) {
			json_array_append_new(list, waiter_json(w, i + 1));
			continue;
		}
		if (!shown++)
			printf("%s%-12s %-8s %-9s %8s  %s%s\n", c_bold(cli), "USER", "STATE", "GPU",
			       "SINCE", "COMMAND", c_reset(cli));
		printf("%-12s %s%-8s%s %-9s %8s  %s  %s(%zu. in the line: %s)%s\n",
		       cli_safe(who, w->user), c_yellow(cli), "waiting", c_reset(cli), "-",
		       fmt_age(age, sizeof age, w->since_ms), cli_safe(cmd, w->command), c_dim(cli),
		       i + 1, cli_safe(what, w->summary), c_reset(cli));
	}
	/* A long line's tail, which the broker counts per user after its head. */
	for (size_t i = 0; i < view.more_waiter_count; i++) {
		const struct view_more *m = &view.more_waiters[i];

		if (m->uid == me || (user && strcmp(m->user, user)))
			continue;
		if (list) {
			json_array_append_new(list,
			                      json_pack("{s:s,s:s,s:I}", "user", m->user, "state",
			                                "waiting", "count", (json_int_t)m->count));
			continue;
		}
		if (!shown++)
			printf("%s%-12s %-8s %-9s %8s  %s%s\n", c_bold(cli), "USER", "STATE", "GPU",
			       "SINCE", "COMMAND", c_reset(cli));
		printf("%-12s %s%-8s%s %-9s %8s  %s%zu more, further back in the line%s\n",
		       cli_safe(who, m->user), c_yellow(cli), "waiting", c_reset(cli), "-", "-",
		       c_dim(cli), m->count, c_reset(cli));
	}
	registry_view_release(&view);
	registry_close(reg);
	if (list)
		return cli_print_json(list);
	if (!shown)
		printf("%s holds or waits for no GPU\n",
		       user ? cli_safe(who, user) : "nobody else");
	printf("%s%s%s queued jobs are private (a queue is a file only its user can read): "
	       "shown are running jobs' leases and requests in the waiting line, as gpuman "
	       "status shows them to everyone%s\n",
	       c_dim(cli), user ? cli_safe(who, user) : "other users", user ? "'s" : "'",
	       c_reset(cli));
	return EXIT_OK;
}
