#!/bin/sh
# slurm.sh BUILD - a 200-task sweep across the local test cluster (2 nodes x
# 2 A100 + 2 T4, simulated; tests/slurm/cluster) three ways, as ratios:
#   gpuman batch --slurm         (srun steps in one allocation)
#   sbatch --array=1-200         (a plain job array of the same lines)
#   the greedy lower bound       (all work spread over the GPUs' speeds)
# Makespan is measured from the tasks' own records (first start is not
# used: submit to last end).  Target: gpuman within 1.1x of the array.
# Needs root and Slurm (as `make check` does); says why and exits 0 if not.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
build=$(cd "${1:?usage: slurm.sh BUILD}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
N=${GM_BENCH_TASKS:-200}
SECS=${GM_BENCH_SECONDS:-0.5}   # per task on a T4; an A100 (speed 2) takes half
why=$("$here/tests/slurm/cluster" why-not) || { echo "slurm.sh: skipped: $why"; exit 0; }
dir=$(mktemp -d /tmp/gm-bench-slurm.XXXXXX)
trap '"$here/tests/slurm/cluster" down "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT
"$here/tests/slurm/cluster" up "$dir"
. "$dir/env"
export PATH="$build:$PATH"
cd "$dir"

now() { date +%s.%N; }
# lines: the same task N times, each recording its start and end
for i in $(seq "$N"); do
	echo "gpuman-simload --mem 1G --util 50 --seconds $SECS --record $dir/REC"
done >tasks.txt
makespan() {	# makespan T0 RECFILE: last end - T0, in seconds
	awk -v t0="$1" '$1 == "end" { if ($4 > m) m = $4 } END { printf "%.2f", m / 1e9 - t0 }' "$2"
}

# 1. gpuman: one allocation of both nodes' GPUs
sed "s#REC#rec-gpuman#" tasks.txt >g.txt
t0=$(now)
gpuman batch --slurm -N2 --gres=gpu:a100:2,gpu:t4:2 --log-dir glogs g.txt >/dev/null 2>g.err ||
	{ cat g.err; exit 1; }
g=$(makespan "$t0" rec-gpuman)

# 2. a plain job array of the same lines, one GPU each, on the same nodes
sed "s#REC#rec-array#" tasks.txt >a.txt
cat >a.sh <<SH
#!/bin/sh
exec sh -c "\$(sed -n "\${SLURM_ARRAY_TASK_ID}p" $dir/a.txt)"
SH
chmod +x a.sh
t0=$(now)
sbatch --wait --parsable -p gpu --array=1-"$N" --gres=gpu:1 -o /dev/null a.sh >/dev/null
a=$(makespan "$t0" rec-array)

# 3. the greedy lower bound: N tasks of SECS T4-seconds on 4 T4 (speed 1)
#    and 4 A100 (speed 2) working together
lb=$(awk -v n="$N" -v s="$SECS" 'BEGIN { printf "%.2f", n * s / (4 * 1 + 4 * 2) }')
done_g=$(grep -c '^end' rec-gpuman); done_a=$(grep -c '^end' rec-array)
awk -v g="$g" -v a="$a" -v lb="$lb" -v n="$N" -v dg="$done_g" -v da="$done_a" 'BEGIN {
	printf "%d tasks of %s T4-seconds on 2 nodes x (2 A100 + 2 T4), simulated\n", n, '"$SECS"'
	printf "  gpuman batch --slurm  makespan %6.2f s  %d done  %.2fx the array  %.2fx the lower bound\n", g, dg, g / a, g / lb
	printf "  sbatch --array        makespan %6.2f s  %d done  %.2fx the lower bound\n", a, da, a / lb
	printf "  greedy lower bound             %6.2f s\n", lb
	printf "  per-task overhead, GPU-seconds lost per task ((makespan - bound) x 8 / tasks): gpuman %.3f s, array %.3f s\n", (g * 8 - lb * 8) / n, (a * 8 - lb * 8) / n
	printf "  target: gpuman <= 1.1x the array: %s\n", g <= 1.1 * a ? "met" : "NOT met"
}'
