#!/bin/sh
# pick.sh BUILD - the cost of asking "which GPU is free?", on the simulated
# 8-GPU workstation: a whole `gpuman pick` process against a Python script
# doing the same through ctypes on the same NVML library (the way the Python
# tools users have today work).  Target: <= 2 ms median for gpuman pick.
# The simulator here has no latency profile: its nvmlInit costs nothing, so
# these figures are gpuman's own work and are never set beside a real
# driver's (nvidia-smi's); bench/nvml-session.sh compares with the measured
# H200 profile, and tests/real-gpu/check.sh on a real GPU.
set -eu
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GPUMAN_SIM="$root/examples/lab-8gpu.json" GPUMAN_STATE_DIR="$tmp/state" GPUMAN_SIM_STATE="$tmp/sim"
unset CUDA_VISIBLE_DEVICES GPUMAN_NVML
export GPUMAN_BROKER=off # the process reads NVML itself
n=300

set -- $("$build/bench/runtime" $n "$build/gpuman" pick)
g_med=$1 g_p90=$2
# The interpreter itself, not a version manager's shim that finds it (pyenv's
# chain of shell scripts adds about 0.3 s of CPU to every start here): the
# peer is Python's work, not this machine's PATH.
py=$(python3 -c 'import sys; print(sys.executable)')
set -- $("$build/bench/runtime" 50 "$py" "$root/bench/pick_ctypes.py" "$build/sim/libnvidia-ml.so.1")
p_med=$1
snap=$("$build/bench/inproc" snapshot 1000)

awk -v g="$g_med" -v g90="$g_p90" -v p="$p_med" -v s="$snap" -v py="$py" 'BEGIN {
	printf "gpuman pick, whole process, 8 simulated GPUs: median %.2f ms, p90 %.2f ms\n", g/1000, g90/1000
	printf "  target <= 2 ms: %.2fx of the limit (%s)\n", g/2000, g <= 2000 ? "met" : "MISSED"
	printf "  python3 + ctypes NVML picker, same library: median %.1f ms -> gpuman %.1fx faster\n", p/1000, p/g
	printf "  (the picker run by %s)\n", py
	printf "  (simulator without a latency profile: not comparable with a real driver or nvidia-smi)\n"
	printf "one snapshot in process (gm_snapshot_take, 8 GPUs): %.1f us\n", s
}'
