#!/bin/sh
# waiters.sh BUILD - the two lease transports under a long line, on 8
# simulated GPUs (all alike, 16000 MiB; the simulator of GPUMAN_SIM): the
# lease broker (gpuman daemon) and the daemonless registry
# (GPUMAN_BROKER=off), side by side.
#
#   burst     N `gpuman run --wait` launches at once of 0.05 s jobs
#             (gpuman-simload), mixed with 40 queued jobs of another user
#             (gmtest-bob, when run as root; else of this user) submitted
#             just before, for N = 50, 200 and 500, on each transport.
#             Double bookings by the jobs' own --record lines (target 0);
#             total time as a ratio of the ideal, the summed job time over
#             8 GPUs (targets: broker <= 1.2x; registry <= 1.3x at 200,
#             <= 1.5x at 500); the hand-off cost, the GPU time lost between
#             one job's end and the next one's start; and the floor: the
#             same jobs by xargs -P 8 with no leases.  For each, the
#             machine's busy CPU, in core-seconds and per job.
#   idle      500 waiters behind 8 long jobs, on each transport: their
#             summed CPU (and the broker's) over 10 s (target < 1 % of one
#             core); then the 8 GPUs freed at once, and how fast the line
#             drains.
#   handoff   one GPU; milliseconds from a release (or a kill -9 of the
#             holder) to the next waiter holding it (bench/inproc wakeup,
#             through the broker; target <= 50 ms); then from the end of
#             another user's job to the start of the next queued job, and
#             of batch's next task, by the jobs' records.
#
# WAITERS_LINES changes the lines' lengths ("50 200 500"; "none": no burst), WAITERS_RUNS the
# idle line's 500 (0: no idle part), WAITERS_SETTLE the 5 s it is left to settle before it
# is measured, WAITERS_QUEUED the 40; WAITERS_TRANSPORTS="broker" or
# "registry" runs one only.  WAITERS_LATENCY=1 gives the simulated GPUs
# the H200 latency profile (examples/h200-latency.json's "latency":
# the driver's start-up and per-call costs, measured).  Run as root, the
# broker fences each job in a cgroup (gpuman-trust(7)): each job then starts
# one kernel grace period later; WAITERS_FENCE=off measures without, and the
# broker's placement line is printed either way; WAITERS_FENCE_TRACE=1 adds,
# for each broker line, what its placements took, step by step (and
# WAITERS_KEEP_LOG=FILE keeps the broker's whole log there);
# WAITERS_SLOW_MOVES=MS shows, where this machine's moves are cheap, a
# kernel whose move into a cgroup waits an MS ms grace period that moves
# within MS ms of one another share (GPUMAN_FENCE_MOVE_DELAY_MS=MS:shared;
# 7 is Linux 6.18's lone move without favordynmods).  Run as root, the broker runs
# at nice -10, as contrib/gpuman.service starts it.  Prints the load average:
# the numbers mean little on a machine that other work keeps busy.
set -eu
build=$(cd "${1:?usage: waiters.sh BUILD}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/gpuman-waiters.XXXXXX)
chmod 1777 "$work"
# The broker's state file and the registry's directory where real ones
# are: in memory (/run is a tmpfs wherever systemd runs, and the registry
# is /run/gpuman there; Debian 13's /tmp, its other home, is a tmpfs too).
# WAITERS_STATE_ON=/tmp puts both on a disk, where each hand-off also
# creates and renames a file, and each read of the registry walks a
# directory that never shrinks after a long line.
state=$(mktemp -d "${WAITERS_STATE_ON:-/dev/shm}/gpuman-waiters-state.XXXXXX" 2>/dev/null) ||
	state="$work/broker"
reg=$(mktemp -d "${WAITERS_STATE_ON:-/dev/shm}/gpuman-waiters-registry.XXXXXX" 2>/dev/null) ||
	reg="$work/registry"
mkdir -p "$reg"
chmod 755 "$reg"
daemon=
cleanup() {
	[ -z "$daemon" ] || kill "$daemon" 2>/dev/null || true
	wait 2>/dev/null || true
	[ -z "${WAITERS_KEEP_LOG:-}" ] || cp "$work/daemon.log" "$WAITERS_KEEP_LOG" 2>/dev/null || true
	rm -rf "$work" "$state" "$reg"
}
trap cleanup EXIT
export PATH="$build:$PATH" GPUMAN_SIM_STATE="$work/sim" GPUMAN_BROKER="$work/gpuman.sock"
export GPUMAN_STATE_DIR="$reg/state"
unset CUDA_VISIBLE_DEVICES GPUMAN_NVML
mkdir -m 1777 "$work/sim" "$reg/state"
install -m 666 /dev/null "$work/sim/lock"
install -m 666 /dev/null "$work/rec"
gpus() { # gpus N FILE
	i=0 list=
	while [ $i -lt "$1" ]; do
		list="$list${list:+,}{\"name\":\"g$i\",\"memory_total_mib\":16000}"
		i=$((i + 1))
	done
	lat=
	[ "${WAITERS_LATENCY:-0}" = 0 ] ||
		lat=$(python3 -c 'import json, sys; print("\"latency\": %s," % json.dumps(json.load(open(sys.argv[1]))["latency"]))' \
			"$root/examples/h200-latency.json")
	echo "{ $lat \"gpus\": [ $list ] }" >"$2"
	chmod 644 "$2"
}
gpus 8 "$work/eight.json"
gpus 1 "$work/one.json"
export GPUMAN_SIM="$work/eight.json"

broker_nice=
[ "$(id -u)" != 0 ] || broker_nice="nice -n -10"
start_daemon() {
	[ -z "$daemon" ] || { kill "$daemon"; wait "$daemon" 2>/dev/null || true; }
	rm -f "$GPUMAN_BROKER"
	${WAITERS_SLOW_MOVES:+env GPUMAN_FENCE_MOVE_DELAY_MS=$WAITERS_SLOW_MOVES:shared} \
		$broker_nice gpuman daemon --socket "$GPUMAN_BROKER" --state "$state/leases.json" \
		2>>"$work/daemon.log" &
	daemon=$!
	# Its socket, or its death said (a build half linked, a bad option):
	# never a silent wait.
	i=0
	while [ ! -S "$GPUMAN_BROKER" ]; do
		if ! kill -0 "$daemon" 2>/dev/null || [ $i -ge 1000 ]; then
			echo "waiters.sh: the broker did not start (gpuman daemon --socket $GPUMAN_BROKER); its log:" >&2
			tail -n 5 "$work/daemon.log" >&2
			exit 1
		fi
		sleep 0.01
		i=$((i + 1))
	done
}

# Another user for the queued jobs, as the tests make them (root only).
other=
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	id -u gmtest-bob >/dev/null 2>&1 ||
		useradd --system --no-create-home --shell /usr/sbin/nologin gmtest-bob 2>/dev/null || true
	id -u gmtest-bob >/dev/null 2>&1 && other=gmtest-bob
fi
as_other() {
	if [ -n "$other" ]; then
		setpriv --reuid=$other --regid=$other --clear-groups env HOME=/tmp PATH="$PATH" "$@"
	else
		"$@"
	fi
}
ms() { echo $(($(date +%s%N) / 1000000)); }
cpu_ticks() { # summed utime+stime of the pids given (all their threads) and their children, in clock ticks
	for p in "$@"; do
		for c in $p $(cat /proc/$p/task/*/children 2>/dev/null); do
			[ -r "/proc/$c/stat" ] && sed 's/.*) //' "/proc/$c/stat" | awk '{print $12 + $13}'
		done
	done | awk '{s += $1} END {print s + 0}'
}

# The whole machine's busy CPU, in clock ticks (user, nice, system, irq,
# softirq): the burst keeps both cores busy, so its time is its CPU work
# over the cores, and the CPU a job costs says what a ratio to the ideal
# can be here at all.
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
# cpu_line T0_MS T1_MS TICKS0 TICKS1 JOBS - "CPU: ..." for a phase
cpu_line() {
	awk -v t0="$1" -v t1="$2" -v c0="$3" -v c1="$4" -v n="$5" -v hz="$(getconf CLK_TCK)" \
	    -v cores="$(nproc)" 'BEGIN {
		cpu = (c1 - c0) / hz; wall = (t1 - t0) / 1000
		printf "  CPU: %.1f core-s in %.1f s (%.0f %% of the %d cores), %.1f ms a job\n", cpu, wall, 100 * cpu / wall / cores, cores, 1000 * cpu / n
	}'
}

echo "waiters.sh: load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
echo "registry directory and broker state on $(stat -f -c %T "$reg") ($(dirname "$reg"); WAITERS_STATE_ON moves them)"

# ---- burst ------------------------------------------------------------------
runs=${WAITERS_RUNS:-500} queued=${WAITERS_QUEUED:-40} secs=0.05
lines=${WAITERS_LINES:-50 200 500} transports=${WAITERS_TRANSPORTS:-broker registry}
[ "$lines" != none ] || lines= # only the idle and hand-off parts
for n in $lines ${WAITERS_RUNS:-500} $queued; do
	case $n in
	'' | *[!0-9]*)
		echo "waiters.sh: WAITERS_LINES, WAITERS_RUNS and WAITERS_QUEUED take whole numbers, not '$n'" >&2
		exit 2
		;;
	esac
done
for n in $lines; do
	[ "$n" -gt 0 ] || { echo "waiters.sh: a line of 0 waiters measures nothing (WAITERS_LINES)" >&2; exit 2; }
done
: >"$work/summary"
burst() { # burst TRANSPORT N
	[ "$1" = broker ] || export GPUMAN_BROKER=off
	runs=$2
	: >"$work/rec"
	mkdir -m 1777 "$work/q$1$2"
	as_other mkdir -m 700 "$work/q$1$2/bob"
	logged=$(wc -l <"$work/daemon.log")
	c0=$(busy_ticks)
	t0=$(ms)
	# one after the other from one shell of that user's, as a loop typed
	# at a prompt would (a setpriv and an env per submit, as root's
	# stand-in for the user, would double each submit's cost here)
	GPUMAN_QUEUE_DIR="$work/q$1$2/bob" as_other sh -c 'i=0
		while [ $i -lt "$1" ]; do
			gpuman submit -- gpuman-simload --mem 1G --util 50 --seconds "$2" --record "$3" >/dev/null || exit
			i=$((i + 1))
		done' sh "$queued" "$secs" "$work/rec"
	t1=$(ms)
	pids=
	i=0
	while [ $i -lt $runs ]; do
		gpuman run --wait -- gpuman-simload --mem 1G --util 50 --seconds $secs \
			--record "$work/rec" >/dev/null 2>&1 &
		pids="$pids $!"
		i=$((i + 1))
	done
	t2=$(ms)
	wait $pids || true
	GPUMAN_QUEUE_DIR="$work/q$1$2/bob" as_other gpuman wait $(seq $queued) >/dev/null 2>&1 || true
	t3=$(ms)
	c1=$(busy_ticks)
	ran=$(grep -c '^end' "$work/rec" || true)
	burst_ms=$(($(awk '/^end/ {if ($4 > m) m = $4} END {printf "%.0f", m / 1000000}' "$work/rec") - t0))
	over=$(python3 "$root/tests/e2e/helpers/overlaps.py" "$work/rec" | awk '{print $4}')
	# makespan: from the first launch to the last job's end, by the records
	last=$(awk '/^end/ {if ($4 > m) m = $4} END {printf "%.0f", m / 1000000}' "$work/rec")
	awk -v l="$1" -v q=$queued -v n=$((runs + queued)) -v ran="$ran" -v over="$over" -v s=$secs \
	    -v t0="$t0" -v t1="$t1" -v t2="$t2" -v t3="$t3" -v last="$last" -v who="${other:-this user}" 'BEGIN {
		ideal = n * s / 8 * 1000
		total = last - t0
		printf "burst (%s): %d run --wait + %d queued jobs of %s, %.2f s each, on 8 GPUs\n", l, n - q, q, who, s
		printf "  ran %d of %d, double bookings %d (target 0)\n", ran, n, over
		printf "  total %.2f s, ideal %.2f s: %.2fx ideal\n", total / 1000, ideal / 1000, total / ideal
		printf "  where: submitting %.2f s, launching the %d runs %.2f s, all done %.2f s after the first launch\n", (t1 - t0) / 1000, n - q, (t2 - t1) / 1000, (t3 - t0) / 1000
	}'
	cpu_line "$t0" "$t3" "$c0" "$c1" $((runs + queued))
	# GPU time lost, by the jobs' records: before each GPU's first job,
	# between a job's end and the next start on its GPU (the hand-off,
	# with the next job's start-up), and after its last job.
	python3 - "$work/rec" "$t0" "$work/summary" "$1 $2 $over $ran $(((last - t0)))" <<'PY'
import collections, sys
t0 = int(sys.argv[2]) * 1000000
per = collections.defaultdict(list)
for line in open(sys.argv[1]):
    kind, pid, uuid, ns = line.split()
    per[uuid].append((int(ns), kind))
end = max(ns for evs in per.values() for ns, _ in evs)
head = gaps = tail = busy = 0
ngaps = 0
for evs in per.values():
    evs.sort()
    head += evs[0][0] - t0
    tail += end - evs[-1][0]
    last_end = None
    for ns, kind in evs:
        if kind == "start":
            if last_end is not None:
                gaps += ns - last_end
                ngaps += 1
            start = ns
        else:
            busy += ns - start
            last_end = ns
print("  GPU time: busy %.2f s; lost before the first job %.2f s, between jobs %.2f s "
      "(%.1f ms a hand-off), after the last %.2f s" % (busy / 1e9, head / 1e9, gaps / 1e9,
      gaps / max(ngaps, 1) / 1e6, tail / 1e9))
with open(sys.argv[3], "a") as out:
    out.write("%s %.1f\n" % (sys.argv[4], gaps / max(ngaps, 1) / 1e6))
PY
	[ "$1" != broker ] || [ "${WAITERS_FENCE_TRACE:-0}" != 1 ] ||
		tail -n +$((logged + 1)) "$work/daemon.log" | fence_trace
	unset GPUMAN_BROKER
	export GPUMAN_BROKER="$work/gpuman.sock"
}
# fence_trace - the broker's placements in a burst, from its log lines
# (GPUMAN_FENCE_TRACE=1): each kind's steps, median and max, and the
# first 8 placements at a grant one by one, from the first request on.
fence_trace() {
	python3 -c '
import re, statistics, sys
rows = []
for line in sys.stdin:
    m = re.search(r"fence trace: (\S+) pid \d+ at ([\d.]+) s: (.*)", line)
    if m:
        kind = m.group(1) + (" (cancelled)" if "cancelled" in m.group(3) else "")
        rows.append((kind, float(m.group(2)), [float(x) for x in re.findall(r"([\d.]+) ms", m.group(3))]))
if not rows:
    print("  fence trace: no placements logged (the fence is off, or the broker is older)")
    sys.exit()
first = min(t for _, t, _ in rows)
for kind in sorted({k for k, _, _ in rows}):
    mine = [v for k, _, v in rows if k == kind]
    names = ["filter", "queued"] if kind == "granted-placed" else ["queued", "cgroup and filter", "move", "until answered"]
    parts = ["%s %.1f / %.1f" % (n, statistics.median(col), max(col))
             for n, col in zip(names, zip(*mine)) if len(col) == len(mine)]
    print("  fence trace, %d %s (median / max ms): %s" % (len(mine), kind, ", ".join(parts)))
grants = sorted((t, k, v) for k, t, v in rows if k in ("grant", "grant-keeper"))[:8]
if grants:
    print("  the first %d placed at a grant, ms from the first request (a queue runner: *): %s" % (len(grants), "; ".join(
        "+%.1f%s: %s" % ((t - first) * 1e3, "*" if k == "grant-keeper" else "", "/".join("%.1f" % x for x in v)) for t, k, v in grants)))
'
}
# The floor: the same jobs with no gpuman and no leases, xargs -P 8 with a
# GPU pinned to each of its 8 slots (a sh per job sets it) -- what launching
# 540 processes costs on this machine, whatever arbitrates.
floor() { # floor N
	runs=$1
	: >"$work/rec"
	c0=$(busy_ticks)
	t0=$(ms)
	seq $((runs + queued)) | xargs -P 8 --process-slot-var=SLOT -n 1 sh -c \
		'CUDA_VISIBLE_DEVICES=$SLOT exec gpuman-simload --mem 1G --util 50 --seconds '$secs' --record "$1" >/dev/null' \
		sh "$work/rec"
	t1=$(ms)
	c1=$(busy_ticks)
	last=$(awk '/^end/ {if ($4 > m) m = $4} END {printf "%.0f", m / 1000000}' "$work/rec")
	cpu_line "$t0" "$t1" "$c0" "$c1" $((runs + queued)) >"$work/floor-cpu"
	echo $((last - t0))
}
[ "${WAITERS_FENCE:-on}" = on ] || export GPUMAN_FENCE=off
[ "${WAITERS_FENCE_TRACE:-0}" != 1 ] || export GPUMAN_FENCE_TRACE=1
start_daemon
echo "broker: $(grep -m1 'placement' "$work/daemon.log" | sed 's/^gpuman daemon: //')"
[ -z "${WAITERS_SLOW_MOVES:-}" ] ||
	echo "broker: each move into a cgroup made to wait a ${WAITERS_SLOW_MOVES} ms grace period, shared by moves within it (simulated)"
for n in $lines; do
	for t in $transports; do
		burst "$t" "$n"
	done
	f=$(floor "$n")
	echo "floor $n $f" >>"$work/summary"
	awk -v f="$f" -v n=$((n + queued)) -v s=$secs 'BEGIN {
		printf "floor: the same %d jobs by xargs -P 8, no leases, a GPU per slot: %.2f s = %.2fx ideal\n", n, f / 1000, f / (n * s / 8 * 1000)
	}'
	cat "$work/floor-cpu"
done
# side by side: ratio to the ideal and to the floor, hand-off cost
awk -v q=$queued -v s=$secs '
	$1 == "floor" { floor[$2] = $3; next }
	{ key = $1 " " $2; ratio[key] = $5 / (($2 + q) * s / 8 * 1000); hand[key] = $6
	  over[key] = $3; ran[key] = $4; total[key] = $5; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
	END {
		printf "side by side (%d queued jobs of another user in each line):\n", q
		printf "  %-5s | %-36s | %-36s | %s\n", "line", "broker: x ideal, x floor, hand-off", "registry: x ideal, x floor, hand-off", "floor"
		for (i = 1; i <= n; i++) {
			l = order[i]; b = "broker " l; r = "registry " l
			printf "  %-5d | ", l
			if (b in ratio) printf "%5.2fx  %5.2fx  %7.1f ms  %s dbl   | ", ratio[b], total[b] / floor[l], hand[b], over[b]; else printf "%-36s | ", "-"
			if (r in ratio) printf "%5.2fx  %5.2fx  %7.1f ms  %s dbl   | ", ratio[r], total[r] / floor[l], hand[r], over[r]; else printf "%-36s | ", "-"
			printf "%.2fx\n", floor[l] / 1000 / ((l + q) * s / 8)
		}
		printf "  targets: broker <= 1.2x; registry <= 1.3x at 200, <= 1.5x at 500; 0 double bookings\n"
	}' "$work/summary"

# ---- idle ---------------------------------------------------------------------
idle() { # idle TRANSPORT
[ "$1" = broker ] || export GPUMAN_BROKER=off
holders=
for i in 1 2 3 4 5 6 7 8; do
	gpuman run -- gpuman-simload --mem 1G --util 50 --seconds 900 >/dev/null 2>&1 &
	holders="$holders $!"
done
while [ "$(gpuman status --json | jq '.leases | length')" -lt 8 ]; do sleep 0.05; done
pids=
i=0
while [ $i -lt $runs ]; do
	gpuman run --wait -- true >/dev/null 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done
n=0
while [ "$n" -lt $runs ]; do
	sleep 0.2
	# status lists 256 waiters one by one and the rest as counts per user
	n=$(gpuman status --json | jq '(.waiters | length) + ([.waiters_more[]?.count] | add // 0)')
done
# the last to join are still starting (each reads the line and starts the
# two threads that wait on the tickets ahead): idle is measured from
# WAITERS_SETTLE s on
sleep "$settle"
c0=$(cpu_ticks $pids)
d0=$(cpu_ticks $daemon)
[ "$1" = broker ] || d0=0
sleep 10
c1=$(cpu_ticks $pids)
d1=$(cpu_ticks $daemon)
[ "$1" = broker ] || d1=0
rss=$(awk '/VmRSS/ {print $2}' /proc/$daemon/status)
hz=$(getconf CLK_TCK)
t0=$(ms)
kill $holders 2>/dev/null || true
wait $pids || true
t1=$(ms)
awk -v t="$1" -v settle="$settle" -v c=$((c1 - c0)) -v d=$((d1 - d0)) -v hz="$hz" -v n=$runs -v rss="$rss" -v drain=$((t1 - t0)) 'BEGIN {
	printf "idle (%s): %d waiters behind 8 long jobs, 10 s from %d s after the last joined\n", t, n, settle
	printf "  waiters: %.0f ms CPU in all = %.3f %% of one core (target < 1 %%)\n", c * 1000 / hz, c * 100 / hz / 10
	if (t == "broker") printf "  broker:  %.0f ms CPU = %.3f %% of one core, %.1f MiB resident\n", d * 1000 / hz, d * 100 / hz / 10, rss / 1024
	printf "  8 GPUs freed at once: the %d waiters (gpuman run -- true) done in %.2f s, %.1f ms each\n", n, drain / 1000, drain / n
}'
unset GPUMAN_BROKER
export GPUMAN_BROKER="$work/gpuman.sock"
}
runs=${WAITERS_RUNS:-500}
settle=${WAITERS_SETTLE:-5}
# 0 waiters: no idle part (a bare `wait` would wait for the broker too)
[ "$runs" = 0 ] || for t in $transports; do
	idle "$t"
done

# ---- handoff ------------------------------------------------------------------
export GPUMAN_SIM="$work/one.json"
start_daemon
# set -- of a failed command would leave $1 unset and stop the script with
# "parameter not set": say which program failed, and why, instead.
wake=$("$build/bench/inproc" wakeup 20) || {
	echo "waiters.sh: $build/bench/inproc wakeup failed (its message above): no handoff figures" >&2
	exit 1
}
set -- $wake
awk -v rm="$1" -v rx="$2" -v km="$3" -v kx="$4" 'BEGIN {
	printf "handoff through the broker, 20 rounds each:\n"
	printf "  after a release: median %.1f ms, max %.1f ms\n", rm, rx
	printf "  after kill -9:   median %.1f ms, max %.1f ms\n", km, kx
	printf "  target <= 50 ms: worst case %.2fx of the limit\n", (rx > kx ? rx : kx) / 50
}'
# ---- queue and batch ---------------------------------------------------------
# The same hand-off to the queue's next job and to batch's next task, which
# keep their place in the broker's line and wake on its answer: from the end
# of another user's job to the start of ours, by the jobs' own records.
: >"$work/rec"
mkdir -m 700 "$work/qh" "$work/bh"
printf 'gpuman-simload --mem 1G --util 50 --seconds 0.01 --record %s\n' "$work/rec" >"$work/bh/tasks"
i=1
while [ $i -le 5 ]; do
	for kind in queue batch; do
		as_other gpuman run -- gpuman-simload --mem 1G --util 50 --seconds 1 \
			--record "$work/rec" >/dev/null 2>&1 &
		holder=$!
		while [ "$(gpuman status --json | jq '.leases | length')" -lt 1 ]; do sleep 0.02; done
		if [ $kind = queue ]; then
			GPUMAN_QUEUE_DIR="$work/qh" gpuman submit -- gpuman-simload --mem 1G --util 50 \
				--seconds 0.01 --record "$work/rec" >/dev/null
			GPUMAN_QUEUE_DIR="$work/qh" gpuman wait $i >/dev/null 2>&1 || true
		else
			gpuman batch --log-dir "$work/bh/logs$i" "$work/bh/tasks" >/dev/null 2>&1 || true
		fi
		wait $holder || true
	done
	i=$((i + 1))
done
python3 - "$work/rec" <<'PY'
import sys
ev = sorted((int(ns), kind, pid) for kind, pid, _, ns in (l.split() for l in open(sys.argv[1])))
span = {}
for ns, kind, pid in ev:
    span[pid] = ns - span[pid] if kind == "end" else ns
holder = {pid for pid, d in span.items() if d > 500e6}  # the 1 s jobs
# from each holder's end to the start of ours after it: queue, batch, queue...
gaps = [(b[0] - a[0]) / 1e6 for a, b in zip(ev, ev[1:])
        if a[1] == "end" and a[2] in holder and b[1] == "start" and b[2] not in holder]
q, b = sorted(gaps[0::2]), sorted(gaps[1::2])
print("another user's release to the next queued job / batch task (5 rounds each):")
print("  queue: median %.1f ms, max %.1f ms; batch: median %.1f ms, max %.1f ms"
      % (q[len(q) // 2], q[-1], b[len(b) // 2], b[-1]))
PY
echo "waiters.sh: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
