#!/bin/sh
# nvml-session.sh BUILD - one NVML session per machine: what `pick` and
# `status` cost through the lease broker, which holds NVML open, against
# `pick` without it, which opens NVML (and pays the driver's start-up) in
# every command.  Both run on the simulator WITH the latency profile of the
# lent H200 (examples/h200-latency.json: the driver's start-up, 24 ms, and
# its per-call costs, measured there by check.sh): these are simulator
# figures, compared only with each other, never with a real driver's
# (tests/real-gpu/check.sh measures those).
# Targets (issue 20): pick through the broker <= 1.5 ms median and >= 15x
# faster than without; status through it <= 3 ms; the broker's CPU < 1 % of
# a core at one status a second for each of 20 users.
set -eu
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
chmod 755 "$tmp"
daemon=
trap '[ -z "$daemon" ] || kill "$daemon" 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -m 1777 "$tmp/sim"
export GPUMAN_SIM="$root/examples/h200-latency.json" GPUMAN_STATE_DIR="$tmp/state" \
	GPUMAN_SIM_STATE="$tmp/sim" GPUMAN_CONFIG=/dev/null/none
unset CUDA_VISIBLE_DEVICES GPUMAN_NVML
sock=$tmp/gpuman.sock
users=${NVML_BENCH_USERS:-20} seconds=${NVML_BENCH_SECONDS:-20}

set -- $(GPUMAN_BROKER=off "$build/bench/runtime" 40 "$build/gpuman" pick)
off_med=$1
"$build/gpuman" daemon --socket "$sock" --state "$tmp/broker/leases.json" 2>"$tmp/daemon.log" &
daemon=$!
i=0
while ! grep -q serving "$tmp/daemon.log" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 200 ] || { cat "$tmp/daemon.log"; exit 1; }
	sleep 0.05
done
export GPUMAN_BROKER=$sock
# pick, status and the floor (a gpuman process that asks nothing: fork,
# exec, dynamic linking) in interleaved rounds, so that a machine whose
# speed drifts (a shared VM: the floor moved 1.2-1.7 ms between two runs)
# moves all three alike; each figure is the median of its rounds'.
rounds=${NVML_BENCH_ROUNDS:-6}
r=0
while [ $r -lt "$rounds" ]; do
	"$build/bench/runtime" 50 "$build/gpuman" pick >>"$tmp/pick"
	"$build/bench/runtime" 35 "$build/gpuman" status >>"$tmp/status"
	"$build/bench/runtime" 35 "$build/gpuman" --version >>"$tmp/floor"
	r=$((r + 1))
done
# median COLUMN FILE
median() { cut -d' ' -f"$1" "$2" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
on_med=$(median 1 "$tmp/pick") on_p90=$(median 2 "$tmp/pick")
st_med=$(median 1 "$tmp/status") st_p90=$(median 2 "$tmp/status")
floor=$(median 1 "$tmp/floor")
# The broker's part alone: one snapshot round trip in a process that is
# already running (Python's snapshot(), a long-lived program), which no
# fork and exec on a busy machine inflates.
rt=$("$build/bench/inproc" snapshot 500)

# The broker's CPU while USERS users each ask for status once a second.
# Run as an unprivileged user where we can: the broker checks a non-root
# caller's /proc (hidepid) on every answer, which root skips.
as=
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
	as="setpriv --reuid=nobody --regid=nogroup --clear-groups"
fi
ticks() { awk '{ print $14 + $15 }' "/proc/$daemon/stat"; }
# the NVML reader thread's share (every thread but the main one)
reader_ticks() {
	cat /proc/$daemon/task/*/stat | awk -v main="$daemon" '$1 != main { t += $14 + $15 } END { print t + 0 }'
}
hz=$(getconf CLK_TCK)
t0=$(ticks) r0=$(reader_ticks)
u=0 pids=
while [ $u -lt "$users" ]; do
	# each user: one status a second, started a little apart
	(
		sleep "0.0$u"
		end=$(($(date +%s) + seconds))
		while [ "$(date +%s)" -lt $end ]; do
			$as env GPUMAN_BROKER="$sock" "$build/gpuman" status >/dev/null 2>"$tmp/user$u.err" || echo "status failed ($?): $(tail -1 "$tmp/user$u.err")" >&2
			sleep 1
		done
	) &
	pids="$pids $!"
	u=$((u + 1))
done
for p in $pids; do wait "$p" || true; done
t1=$(ticks) r1=$(reader_ticks)
[ -z "${NVML_BENCH_DEBUG:-}" ] || echo "ticks $t0 -> $t1" >&2

awk -v off="$off_med" -v on="$on_med" -v on90="$on_p90" -v st="$st_med" -v st90="$st_p90" \
	-v rt="$rt" -v floor="$floor" -v cpu="$((t1 - t0))" -v rcpu="$((r1 - r0))" -v hz="$hz" -v secs="$seconds" -v users="$users" 'BEGIN {
	print "simulator with the measured H200 latency profile (nvmlInit 24 ms; per-call costs guessed), 8 GPUs:"
	printf "  pick without a broker (opens NVML each time): median %.2f ms\n", off/1000
	printf "  pick through the broker: median %.2f ms, p90 %.2f ms -> %.1fx faster (target >= 15x: %s)\n", on/1000, on90/1000, off/on, (off/on >= 15) ? "met" : "MISSED"
	printf "    target <= 1.5 ms: %.2fx of the limit (%s)\n", on/1500, on <= 1500 ? "met" : "MISSED"
	printf "  status through the broker: median %.2f ms, p90 %.2f ms; target <= 3 ms: %.2fx of the limit (%s)\n", st/1000, st90/1000, st/3000, st <= 3000 ? "met" : "MISSED"
	printf "  one snapshot through the broker, in a running process: median %.3f ms\n", rt/1000
	printf "  the floor, gpuman --version: median %.2f ms; above it: pick with the broker %.2f ms, without %.2f ms (%.1fx)\n", floor/1000, (on-floor)/1000, (off-floor)/1000, (on > floor) ? (off-floor)/(on-floor) : 0
	pct = 100 * cpu / hz / secs
	printf "  broker CPU, %d users x one status a second for %d s: %.2f %% of a core (target < 1 %%: %s), of which its NVML reader thread %.2f %%\n", users, secs, pct, pct < 1 ? "met" : "MISSED", 100 * rcpu / hz / secs
	print "  (simulated figures: compare with each other only; tests/real-gpu/check.sh measures a real driver)"
}'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (the whole-process figures mean little on a busy machine)"
