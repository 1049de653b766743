/*
 * slurm.h - gpuman's Slurm back end: one allocation (made with
 * `salloc --no-shell`, or the one gpuman already runs in), tasks started in
 * it as `srun` steps that queue for free GPUs by themselves, and what Slurm
 * says when something goes wrong, in words people can act on.
 *
 * It drives Slurm's own commands (salloc, srun, scancel, squeue, scontrol,
 * sinfo) rather than its C API, so that gpuman builds and starts where
 * Slurm is not installed and works with any Slurm version whose commands
 * keep their options.
 *
 * Calling sequence:
 *
 *   struct slurm_alloc a = SLURM_ALLOC_INIT;
 *   slurm_preflight(err, len);                  commands on PATH, controller up
 *   slurm_allocate(args, &a, err, len)          or slurm_adopt(job_id, &a, ...)
 *   pid = slurm_step_spawn(&a, type, gpus, ...);   per task; reap with waitpid
 *   slurm_step_cause(log text) / slurm_job_end(&a, ...)   why a step died
 *   slurm_release(&a);                          scancel if we made it
 */
#ifndef GM_SLURM_H
#define GM_SLURM_H

#include <stddef.h>
#include <sys/types.h>

#define SLURM_MAX_TYPES 16

struct slurm_gpu_type {
	char name[32];  /* "a100"; "" for untyped GPUs */
	unsigned count; /* in the whole allocation */
};

struct slurm_alloc {
	char job_id[32];
	int own; /* made by slurm_allocate: cancelled by slurm_release */
	unsigned nodes;
	char node_list[256]; /* "n[1-2]" */
	size_t type_count;   /* the pools steps are started from: one per GPU type
	                        the job asked for, or one untyped pool */
	struct slurm_gpu_type types[SLURM_MAX_TYPES];
	unsigned gpus;  /* in the whole allocation */
	char gres[128]; /* what the job holds, for people: "gpu:a100:4,gpu:t4:4" */
};
#define SLURM_ALLOC_INIT                                                                           \
	{                                                                                          \
		"", 0, 0, "", 0, {{"", 0}}, 0, ""                                                  \
	}

/* Slurm's commands are on PATH and the controller answers (sinfo).  -1
 * with the reason and what to do. */
int slurm_preflight(char *err, size_t len);

/*
 * Make an allocation: salloc --no-shell ARGS...  (NULL-terminated; gpuman
 * adds --no-shell and a job name).  Waits while it is pending.  SIGINT should be blocked by the
 * caller: salloc, in our process group, gets Ctrl-C and withdraws the request.  -1 with Slurm's
 * reason (bad partition, unknown GRES type, ...) in words.
 */
int slurm_allocate(const char *const *args, struct slurm_alloc *a, char *err, size_t len);

/* Use an existing allocation (SLURM_JOB_ID inside salloc or sbatch). */
int slurm_adopt(const char *job_id, struct slurm_alloc *a, char *err, size_t len);

/*
 * Start one step: srun --jobid=J --exact -N1 -n1 -c1 --gres=gpu[:TYPE]:GPUS
 * [EXTRA...] CMD..., in a process group of its own (Ctrl-C reaches gpuman,
 * which decides), stdout and stderr to out_fd.  type NULL or "": any GPU.
 * Returns the srun pid, -1 with errno.
 */
pid_t slurm_step_spawn(const struct slurm_alloc *a, const char *type, unsigned gpus,
                       const char *name, const char *const *extra, const char *const *cmd,
                       int out_fd);

/*
 * Why Slurm ended a step or job, from srun's messages in its output
 * ("*** STEP 12.3 ON n1 CANCELLED AT ... DUE TO TIME LIMIT ***"): a short
 * phrase ("killed by Slurm: time limit") into buf, or "" when Slurm did not
 * say.  *requeueable: node failure and preemption are not the task's fault.
 */
void slurm_step_cause(const char *text, char *buf, size_t len, int *requeueable);

/* The allocation's state (squeue): 1 still running, 0 ended (buf says how:
 * "TIMEOUT (time limit)"), -1 unknown. */
int slurm_job_alive(const struct slurm_alloc *a, char *buf, size_t len);

/* Cancel the allocation if we made it (scancel); steps end with it. */
void slurm_release(struct slurm_alloc *a);

/* A job's GRES as `scontrol show job -d` says (JOB_GRES=gpu:a100:4,gpu:t4:4,
 * or gpu:8) into a's types and GPU total; other GRES are left out. */
void slurm_parse_gres(const char *gres, struct slurm_alloc *a);
/* Did the job ask for GPU types (TresPerNode "gres:gpu:a100:2" rather than
 * "gres:gpu:4")?  Only then may its steps ask for a type. */
int slurm_typed_request(const char *tres_per_node);
/* GPUs per node in a --gres value: "gpu:a100:2,gpu:t4:2" -> 4, "gpu" -> 1. */
unsigned slurm_gres_per_node(const char *gres);

/* ---- a sweep without size options: the partition's idle GPUs ------------ */

#define SLURM_MAX_NODES 256

struct slurm_node_free {
	char name[64];
	unsigned gpus;  /* not allocated to any job now */
	unsigned total; /* all of its GPUs */
	char gres[200]; /* as configured: "gpu:a100:2,gpu:t4:2" */
};

/*
 * The GPUs nobody holds now, per node of partition (NULL or "": the
 * default one, whose name goes to part_out), as `sinfo -N -O
 * NodeList,StateCompact,Gres,GresUsed` says; nodes that are down,
 * drained or fully allocated count none.  Up to max nodes, most free
 * first; 0 and *count, or -1 with Slurm's reason in err.
 */
int slurm_idle_gpus(const char *partition, char *part_out, size_t part_len,
                    struct slurm_node_free *nodes, size_t max, size_t *count, char *err,
                    size_t len);

/*
 * How many of those nodes (most free first, count of them) and GPUs on
 * each to ask for, so that an allocation of *nodes x *gpus holds as many
 * of the GPUs that `want` needs as possible (want: tasks x GPUs per task),
 * with the fewest nodes for the same; *gpus is a multiple of per_task.
 * 0, or -1 when no node has per_task free GPUs.
 */
int slurm_spread(const struct slurm_node_free *nodes, size_t count, unsigned want,
                 unsigned per_task, unsigned *nodes_out, unsigned *gpus_out);

#endif
