#!/bin/sh
# dispatch.sh BUILD - gpuman batch and the queue's dispatcher against their
# peers and targets (design.md, "Targets"), all in one run on this machine:
#
#   throughput  1000 trivial tasks (true) over 8 simulated GPUs: gpuman
#               batch against xargs -P8 (the fork/exec limit), task-spooler
#               (tsp -S 8) and GNU parallel -j8 where installed; target
#               1000 tasks/s.  Median of 3 runs each.
#   makespan    48 tasks of 1 s (gpuman-simload) on the mixed 8-GPU
#               workstation (examples/lab-8gpu.json, speeds 2.0/1.4/1.0/0.6)
#               against the greedy earliest-finish lower bound and a
#               static equal split, both computed from the speeds; target
#               at most 2 % above the bound.
#   dispatcher  the queue's dispatcher: resident memory (target <= 4 MiB)
#               and its CPU while it only waits for a running job (target:
#               no busy polling).
#
# Everything, peers included, works in one directory on tmpfs when there is
# one (/dev/shm): the registry's default, /run/gpuman, is tmpfs, and task
# output files (gpuman's logs, tsp's ts-out.*) then cost all tools alike.
set -u
build=$(cd "${1:?usage: dispatch.sh BUILD}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
base=/dev/shm
[ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
work=$(mktemp -d "$base/gpuman-bench.XXXXXX")
tsp_started=
cleanup() {
	[ -z "$tsp_started" ] || TS_SOCKET=$work/tsp.sock tsp -K >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

export PATH="$build:$PATH"
export GPUMAN_STATE_DIR=$work/state GPUMAN_SIM_STATE=$work/sim GPUMAN_QUEUE_DIR=$work/queue
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER GPUMAN_NVML
mkdir -p "$GPUMAN_SIM_STATE"
cd "$work"

N=1000
RUNS=3
now_ns() { date +%s%N; }

# rate NAME CMD... - run CMD RUNS times; print and remember its median
# tasks/s (N tasks each).
rate() {
	name=$1
	shift
	times=""
	for _ in $(seq $RUNS); do
		t0=$(now_ns)
		"$@" >/dev/null 2>&1
		t1=$(now_ns)
		times="$times $((t1 - t0))"
	done
	echo "$times" | tr ' ' '\n' | sed '/^$/d' | sort -n | sed -n "$(((RUNS + 1) / 2))p" |
		awk -v n=$N '{ printf "%.0f\n", n / ($1 / 1e9) }'
}

# ---- throughput ----------------------------------------------------------

python3 - <<'EOF' >eight.json
import json
print(json.dumps({"gpus": [{"name": "Sim GPU", "memory_total_mib": 16000, "memory_used_mib": 0,
                            "speed": 1.0} for _ in range(8)]}))
EOF
export GPUMAN_SIM=$work/eight.json
yes true | head -n $N >tasks.txt
seq $N >numbers.txt

gm_batch() { gpuman batch --log-dir "$work/logs" tasks.txt; }
xargs_p8() { xargs -P8 -n1 true <numbers.txt; }
tsp_s8() {
	TS_SOCKET=$work/tsp.sock TMPDIR=$work/tsp tsp -C
	while read -r _; do
		TS_SOCKET=$work/tsp.sock TMPDIR=$work/tsp tsp true
	done <numbers.txt
	while TS_SOCKET=$work/tsp.sock tsp -l | grep -qE 'running|queued'; do
		sleep 0.005
	done
}
parallel_j8() { parallel --will-cite -j8 true :::: numbers.txt; }

echo "throughput: $N trivial tasks (true) over 8 simulated GPUs, median of $RUNS runs"
gm=$(rate gpuman gm_batch)
if ! gpuman batch --log-dir "$work/logs" tasks.txt | grep -q "$N tasks: $N done"; then
	echo "  gpuman batch: not every task succeeded" >&2
	exit 1
fi
printf '  %-16s %6s tasks/s\n' "gpuman batch" "$gm"
xa=$(rate xargs xargs_p8)
printf '  %-16s %6s tasks/s   gpuman/xargs    %s\n' "xargs -P8" "$xa" \
	"$(awk -v a="$gm" -v b="$xa" 'BEGIN { printf "%.2f", a / b }')"
if command -v tsp >/dev/null; then
	mkdir -p "$work/tsp"
	TS_SOCKET=$work/tsp.sock TMPDIR=$work/tsp tsp -S 8 && tsp_started=1
	ts=$(rate tsp tsp_s8)
	printf '  %-16s %6s tasks/s   gpuman/tsp      %s\n' "tsp -S 8" "$ts" \
		"$(awk -v a="$gm" -v b="$ts" 'BEGIN { printf "%.2f", a / b }')"
else
	echo "  tsp (task-spooler) not installed"
fi
if command -v parallel >/dev/null && parallel --version 2>/dev/null | grep -q GNU; then
	pa=$(rate parallel parallel_j8)
	printf '  %-16s %6s tasks/s   gpuman/parallel %s\n' "parallel -j8" "$pa" \
		"$(awk -v a="$gm" -v b="$pa" 'BEGIN { printf "%.2f", a / b }')"
else
	echo "  GNU parallel not installed"
fi
ok=$(awk -v a="$gm" 'BEGIN { print (a >= 1000) ? "ok" : "BELOW TARGET" }')
printf '  gpuman/target (1000 tasks/s)     %s  %s\n' \
	"$(awk -v a="$gm" 'BEGIN { printf "%.2f", a / 1000 }')" "$ok"

# ---- makespan ------------------------------------------------------------

T=48
S=1
export GPUMAN_SIM=$root/examples/lab-8gpu.json
for _ in $(seq $T); do
	echo "gpuman-simload --mem 64M --util 80 --seconds $S"
done >sweep.txt
t0=$(now_ns)
gpuman batch --log-dir "$work/sweep" sweep.txt >sweep.out 2>&1
t1=$(now_ns)
echo
echo "makespan: $T tasks of ${S} s (at speed 1.0) on the mixed workstation (lab-8gpu.json)"
python3 - "$GPUMAN_SIM" "$T" "$S" "$((t1 - t0))" "$work/sweep/summary.json" <<'EOF'
import json, sys
scenario, tasks, secs, ns, summary = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
speeds = [g.get("speed", 1.0) for g in json.load(open(scenario))["gpus"]]
# greedy earliest finish: each task to the GPU where it ends first; for
# identical tasks this is the optimum, so no schedule can beat it
free = [0.0] * len(speeds)
for _ in range(tasks):
    g = min(range(len(speeds)), key=lambda i: free[i] + secs / speeds[i])
    free[g] += secs / speeds[g]
bound = max(free)
per = -(-tasks // len(speeds))
split = max((per if i < tasks % len(speeds) or tasks % len(speeds) == 0 else per - 1) * secs / s
            for i, s in enumerate(speeds))
fluid = tasks * secs / sum(speeds)
got = ns / 1e9
s = json.load(open(summary))
done = s["counts"]["done"]
ran = {g["index"]: g["tasks"] for g in s["gpus"]}
print("  speeds %s" % " ".join("%g" % x for x in speeds))
print("  greedy lower bound %.2f s (fluid %.2f s); static equal split %.2f s = %.2fx the bound"
      % (bound, fluid, split, split / bound))
print("  gpuman batch       %.2f s = %.3fx the bound (target <= 1.02: %s); %.2fx the equal split"
      % (got, got / bound, "ok" if got / bound <= 1.02 else "ABOVE TARGET", got / split))
print("  tasks per GPU      %s (%d of %d done)"
      % (" ".join("%d:%d" % (i, ran.get(i, 0)) for i in range(len(speeds))), done, tasks))
if done != tasks:
    sys.exit(1)
EOF

# ---- the dispatcher at rest ----------------------------------------------

echo
echo "dispatcher: the queue's, after 200 jobs, waiting 3 s for one running job"
export GPUMAN_SIM=$work/eight.json
gpuman submit -- gpuman-simload --mem 1G --util 50 --seconds 30 >/dev/null
for _ in $(seq 200); do
	gpuman submit -- true
done >ids.txt
gpuman wait $(cat ids.txt) >/dev/null
pid=$(cat "$GPUMAN_QUEUE_DIR"/dispatcher*.lock | head -1) # GPUMAN_SIM set: dispatcher-<machine>.lock
sleep 0.5
cpu() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
csw() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$pid/status"; }
c0=$(cpu)
w0=$(csw)
sleep 3
c1=$(cpu)
w1=$(csw)
rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
anon=$(awk '/^RssAnon/ { print $2 }' "/proc/$pid/status")
hz=$(getconf CLK_TCK)
awk -v rss="$rss" -v anon="$anon" -v c0="$c0" -v c1="$c1" -v w0="$w0" -v w1="$w1" -v hz="$hz" 'BEGIN {
	mib = rss / 1024
	printf "  RSS %.1f MiB = %.2fx the target of 4 MiB (%s); %.1f MiB of it private, the rest shared library pages\n",
		mib, mib / 4, mib <= 4 ? "ok" : "ABOVE TARGET", anon / 1024
	printf "  CPU %.1f ms per second, %.1f wake-ups per second (one NVML sample a second)\n",
		(c1 - c0) * 1000 / hz / 3, (w1 - w0) / 3
}'
gpuman cancel 1 >/dev/null
gpuman wait 1 >/dev/null 2>&1 || true   # it was cancelled: exit 1 expected
