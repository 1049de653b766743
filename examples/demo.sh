#!/bin/sh
# demo.sh BUILD - what gpuman is for, in a few seconds, on a simulated lab
# workstation with eight mixed GPUs (examples/lab-8gpu.json).  On a machine
# with a real NVIDIA driver, GPUMAN_DEMO_REAL=1 runs the read-only part on it.
set -eu
build=$(cd "${1:-build}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
export PATH="$build:$PATH"
# A private registry and simulator state: the demo touches nothing else.
export GPUMAN_STATE_DIR="$tmp/state" GPUMAN_SIM_STATE="$tmp/sim"
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER GPUMAN_NVML
if [ "${GPUMAN_DEMO_REAL:-0}" != 1 ]; then
	export GPUMAN_SIM="$root/examples/lab-8gpu.json"
fi

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step gpuman status
gpuman status
step gpuman info 2
gpuman info 2
step gpuman ps
gpuman ps
step "gpuman pick                    # most free memory"
gpuman pick
step "gpuman pick --by power -n 2    # lowest power draw / limit"
gpuman pick --by power -n 2
step "gpuman pick --min-free 20G --max-util 10 --format uuid"
gpuman pick --min-free 20G --max-util 10 --format uuid
step "gpuman pick -n 4 --min-free 20G   # cannot be met: says why, exit 75"
gpuman pick -n 4 --min-free 20G || echo "(exit status $?)"
[ "${GPUMAN_DEMO_REAL:-0}" = 1 ] && exit 0

step "12 jobs launched in the same instant: gpuman run --wait --min-free 6G -- gpuman-simload ..."
for i in $(seq 12); do
	gpuman run --wait --min-free 6G -- gpuman-simload --mem 6G --util 90 --seconds 1.5 \
		--init-delay 0.3 --record "$tmp/jobs" >/dev/null 2>&1 &
done
sleep 0.8
step "gpuman status            # while they run: leases and the waiting line"
gpuman status
wait
echo
python3 "$root/tests/e2e/helpers/overlaps.py" "$tmp/jobs" |
	awk '{ printf "all %d jobs ran; GPUs shared by two jobs at once: %d (by the jobs'"'"' own records)\n", $2, $4 }'

if [ -f "$root/examples/sweep.txt" ] && gpuman batch --help >/dev/null 2>&1; then
	# Outside $tmp: the summary's last line names this directory, which
	# must still be there for the reader to look into.
	sweep=$(mktemp -d "${TMPDIR:-/tmp}/gpuman-demo-sweep.XXXXXX")
	step "gpuman batch examples/sweep.txt   # a sweep over whatever GPUs free up"
	gpuman batch --progress --log-dir "$sweep" "$root/examples/sweep.txt"
fi

step "gpuman waste     # the seed problem: who holds GPUs without using them, and what to do"
gpuman waste || true
[ -z "${sweep:-}" ] || echo "(the sweep's logs are kept for you to look at; remove them with: rm -r $sweep)"
