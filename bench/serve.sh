#!/bin/sh
# serve.sh BUILD - gpuman serve on the simulated 8-GPU workstation: /metrics
# requests per second and latency (bench/httpload, keep-alive), against
# running a `gpuman status --json` process per request (what a cron job or
# a naive exporter does); then its RSS and idle CPU against what
# dcgm-exporter users report (it publishes no latency figures).
# Targets: /metrics p99 <= 10 ms; idle CPU <= 5 ms a second.
set -eu
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
export GPUMAN_SIM="$root/examples/lab-8gpu.json" GPUMAN_STATE_DIR="$tmp/state" GPUMAN_SIM_STATE="$tmp/sim"
unset CUDA_VISIBLE_DEVICES GPUMAN_NVML
"$build/gpuman" serve --listen 127.0.0.1:0 --interval 5 2>"$tmp/log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q '(port ' "$tmp/log" && break; sleep 0.1; done
port=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$tmp/log")
bytes=$(curl -sf "http://127.0.0.1:$port/metrics" | wc -c)

set -- $("$build/bench/httpload" 127.0.0.1 "$port" /metrics 1 3000)
r1=$1 med1=$2 p99_1=$3 failed=$4
set -- $("$build/bench/httpload" 127.0.0.1 "$port" /metrics 8 8000)
r8=$1 med8=$2 p99_8=$3 failed=$((failed + $4))
set -- $("$build/bench/httpload" 127.0.0.1 "$port" / 1 1000)
rpage=$1 medpage=$2 failed=$((failed + $4))
set -- $("$build/bench/runtime" 100 "$build/gpuman" status --json)
st=$1

# RSS after the load, and CPU while idle (snapshots every 5 s) over 10 s.
rss=$(awk '/^VmRSS:/ { print $2 }' /proc/$pid/status)
cpu0=$(awk '{ print $14 + $15 }' /proc/$pid/stat)
sleep 10
cpu1=$(awk '{ print $14 + $15 }' /proc/$pid/stat)
hz=$(getconf CLK_TCK)

awk -v r1="$r1" -v m1="$med1" -v p1="$p99_1" -v r8="$r8" -v m8="$med8" -v p8="$p99_8" \
    -v rp="$rpage" -v mp="$medpage" -v st="$st" -v rss="$rss" -v c0="$cpu0" -v c1="$cpu1" \
    -v hz="$hz" -v bytes="$bytes" -v failed="$failed" 'BEGIN {
	printf "/metrics (%d bytes, 8 GPUs), 1 keep-alive connection: %.0f req/s, median %.0f us, p99 %.0f us\n", bytes, r1, m1, p1
	printf "  8 connections: %.0f req/s, median %.0f us, p99 %.0f us\n", r8, m8, p8
	printf "  target p99 <= 10 ms: %.3fx of the limit (%s)\n", p8 / 10000, p8 <= 10000 ? "met" : "MISSED"
	printf "  vs a gpuman status --json process per request (median %.2f ms): %.0fx less latency, %.0fx the rate\n", st / 1000, st / m1, r1 / (1e6 / st)
	printf "/ (the page), 1 connection: %.0f req/s, median %.0f us\n", rp, mp
	printf "RSS after the load: %.1f MiB; dcgm-exporter users report 71-253 MiB\n", rss / 1024
	printf "  (NVIDIA/gpu-monitoring-tools#133, NVIDIA/gpu-operator#340, NVIDIA/dcgm-exporter#311): %.0f-%.0fx less\n", 71 * 1024 / rss, 253 * 1024 / rss
	ms = (c1 - c0) * 1000 / hz / 10
	printf "idle CPU, one snapshot every 5 s: %.1f ms a second, %d ticks in 10 s (target <= 5: %s)\n", ms, c1 - c0, ms <= 5 ? "met" : "MISSED"
	printf "failed requests: %d (of 12000)\n", failed
	exit failed > 0
}'
