/*
 * select_help.h - the --help text of the SELECT and RESERVE options, shared
 * by every command that takes them.
 */
#ifndef GM_SELECT_HELP_H
#define GM_SELECT_HELP_H

#define SELECT_HELP                                                                                \
	"select:\n"                                                                                \
	"  -n N               GPUs per request (default 1)\n"                                      \
	"  --by POLICY        memory (most free MiB, default), memory-rate (free/total),\n"        \
	"                     power (draw/limit, lowest first), util (lowest first),\n"            \
	"                     index\n"                                                             \
	"  --min-free SIZE    only GPUs with at least SIZE free (8G, 8192 = MiB, 50%)\n"           \
	"  --max-util PCT     only GPUs at most PCT percent busy\n"                                \
	"  --only LIST        only these GPUs: NVML indices, ranges or UUID prefixes\n"            \
	"                     (0,3 or 0-3 or GPU-b120)\n"                                          \
	"  --exclude LIST     never these GPUs\n"                                                  \
	"  --mig PROFILE      one MIG slice of this profile (1g.10gb, 3g.40gb; any: any\n"         \
	"                     slice) instead of a GPU: CUDA_VISIBLE_DEVICES=MIG-<uuid>.\n"         \
	"                     A GPU in MIG mode is never handed out whole\n"                       \
	"A CUDA_VISIBLE_DEVICES already set (Slurm, a container) limits the candidates.\n"

#define RESERVE_HELP                                                                               \
	"reserve:\n"                                                                               \
	"  --exclusive        nobody else is placed on the GPU (default)\n"                        \
	"  --mem SIZE         share the GPU: SIZE counts against its free memory\n"                \
	"  --idle             only GPUs with no process at all\n"                                  \
	"  --wait[=DURATION]  wait until the request fits (90s, 15m, 2h; default forever)\n"       \
	"  --fallback cpu     no driver, no GPU or none in time: run on the CPU\n"

#endif
