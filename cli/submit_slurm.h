/*
 * submit_slurm.h - the queue on Slurm: `gpuman submit --slurm [SLURM-OPTIONS]
 * -- CMD` queues a job that its machine's dispatcher hands to Slurm as its
 * own `sbatch` job (engine/sbatch.c); `gpuman cancel` scancels it.
 */
#ifndef GM_SUBMIT_SLURM_H
#define GM_SUBMIT_SLURM_H

#include "cli.h"
#include "jobs.h"

/* The variable of a machine key (queue_machine_key) that makes its
 * dispatcher hand jobs to Slurm: the sbatch options, space-separated. */
#define SUBMIT_SLURM_VAR "GPUMAN_SLURM_SBATCH"

/*
 * If argv (before "--") has --slurm: take it and the Slurm options out of
 * argv (-p/--partition, -A/--account, -t/--time, -C/--constraint, --qos,
 * --gres, --sbatch-arg ARG) and set *key to the lines to add to the job's
 * machine key; else *key = NULL.  CLI_CONTINUE, or an exit status after
 * a usage message.
 */
int submit_slurm_take(struct cli *cli, int *argc, char **argv, char **key);

/* Slurm chooses whole GPUs: the choosing and sharing options of the local
 * request (--mem, --by, ...; -n too unless n_ok) are a usage error, naming
 * the option and what to ask Slurm instead.  CLI_CONTINUE or its status. */
int slurm_request_check(struct cli *cli, int n_ok);

/* A running job of a Slurm machine: scancel its Slurm job.  1 done (said
 * on stdout), 0 not a Slurm job, -1 could not (err says why). */
int submit_slurm_cancel(const struct queue *q, const struct job *job, char *err, size_t len);

#endif
