#!/bin/sh
# queue.sh BUILD - what the queue's commands cost when the store holds a
# long history, as ratios against an empty store (issue 12: "queue is as
# fast on day 300 as on day 1"):
#
#   queue        `gpuman queue` (nothing queued or running) and
#                `gpuman queue --all --json`: wall time (median of 15) and
#                peak RSS, empty store against 100 000 finished jobs, each
#                with a 2.5 KB environment as submit records it.  Before
#                issue 12: 0.15-0.3 s and 50 MB for `queue`, 1.5-5 s and
#                400 MB for `queue --all --json`.
#   submit       `gpuman submit -- true`, median of 10, same two stores: wall
#                time, and CPU time (user + system of submit and the children
#                it waits for), which a loaded machine disturbs far less.
#   wait         1000 trivial jobs (true) queued at once, timed to the end
#                by `gpuman wait` on the last id alone, then (a new queue)
#                on all 1000 ids: the queue's throughput and the waiter's
#                CPU time.  Before issue 12 the 1000-id waiter re-read all
#                1000 jobs at every event and halved the throughput.
#
# Peak RSS needs GNU time (/usr/bin/time); without it the column says so.
set -u
build=$(cd "${1:?usage: queue.sh BUILD}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
base=/dev/shm
[ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
work=$(mktemp -d "$base/gpuman-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM HUP PIPE
export PATH="$build:$PATH"
export GPUMAN_STATE_DIR=$work/state GPUMAN_SIM_STATE=$work/sim GPUMAN_QUEUE_DIR=$work/queue
export GPUMAN_SIM=$root/examples/lab-8gpu.json
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER GPUMAN_NVML
mkdir -p "$GPUMAN_SIM_STATE"
cd "$work"

# median_ms N CMD... - median wall time of N runs, in ms (output discarded)
median_ms() {
	python3 - "$@" <<'PY'
import statistics, subprocess, sys, time
n, cmd = int(sys.argv[1]), sys.argv[2:]
t = []
for _ in range(n):
    s = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    t.append((time.perf_counter() - s) * 1000)
print("%.1f" % statistics.median(t))
PY
}

# cpu_ms N CMD... - median CPU time (user + system) of N runs, in ms
cpu_ms() {
	python3 - "$@" <<'PY'
import os, statistics, sys
n, cmd = int(sys.argv[1]), sys.argv[2:]
t = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execvp(cmd[0], cmd)
    _, status, ru = os.wait4(pid, 0)
    t.append((ru.ru_utime + ru.ru_stime) * 1000)
print("%.1f" % statistics.median(t))
PY
}

# rss_kib CMD... - peak RSS in KiB of one run, or "n/a"
rss_kib() {
	if [ -x /usr/bin/time ]; then
		/usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -n 1
	else
		echo n/a
	fi
}

history() {
	python3 - "$GPUMAN_QUEUE_DIR/jobs.db" "$1" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
env = ("\0".join("VAR%d=%s" % (i, "x" * 40) for i in range(55))).encode()
rows = (("python train.py --seed %d" % i, '["python","train.py","--seed","%d"]' % i, env,
         1795000000000 + i) for i in range(int(sys.argv[2])))
db.executemany("INSERT INTO jobs (state, command, argv, cwd, env, request, submit_ms, "
               "start_ms, end_ms, gpus, uuids, exit_status, attempts) VALUES ('done', ?, ?, "
               "'/home/alice', ?, '{}', ?, 1, 2, '0', 'GPU-0', 0, 1)", rows)
db.commit()
PY
}

measure() {
	q_ms=$(median_ms 15 gpuman queue)
	q_kib=$(rss_kib gpuman queue)
	a_ms=$(median_ms 3 gpuman queue --all --json)
	a_kib=$(rss_kib gpuman queue --all --json)
	s_ms=$(median_ms 10 gpuman submit -- true)
	s_cpu=$(cpu_ms 10 gpuman submit -- true)
	gpuman wait $(seq "$1" $(($1 + 19))) >/dev/null
}

gpuman queue >/dev/null
measure 1
e_q_ms=$q_ms e_q_kib=$q_kib e_a_ms=$a_ms e_a_kib=$a_kib e_s_ms=$s_ms e_s_cpu=$s_cpu
gpuman queue --clear >/dev/null
history 100000
measure 100021
ratio() { python3 -c 'import sys; a, b = sys.argv[1:]; print("%.2f" % (float(b) / float(a)) if a != "n/a" else "n/a")' "$1" "$2"; }
printf '%-28s %12s %14s %8s\n' "" "empty store" "100000 ended" "ratio"
printf '%-28s %9s ms %11s ms %7sx\n' "queue, time" "$e_q_ms" "$q_ms" "$(ratio "$e_q_ms" "$q_ms")"
printf '%-28s %8s KiB %10s KiB %7sx\n' "queue, peak RSS" "$e_q_kib" "$q_kib" "$(ratio "$e_q_kib" "$q_kib")"
printf '%-28s %9s ms %11s ms %8s\n' "queue --all --json, time" "$e_a_ms" "$a_ms" "(lists all)"
printf '%-28s %8s KiB %10s KiB %7sx\n' "queue --all --json, RSS" "$e_a_kib" "$a_kib" "$(ratio "$e_a_kib" "$a_kib")"
printf '%-28s %9s ms %11s ms %7sx\n' "submit, time" "$e_s_ms" "$s_ms" "$(ratio "$e_s_ms" "$s_ms")"
printf '%-28s %9s ms %11s ms %7sx\n' "submit, CPU time" "$e_s_cpu" "$s_cpu" "$(ratio "$e_s_cpu" "$s_cpu")"
echo "before issue 12, at 100000 ended jobs: queue 150-300 ms and 50 MB; --all --json 1.5-5 s and 400 MB"

# wait_run one|all - "jobs/s waiter-cpu-s" for 1000 queued trivial jobs
wait_run() {
	rm -rf "$GPUMAN_QUEUE_DIR"
	# One job submitted as a user would: the 1000 get its machine (the
	# environment that names the GPUs and the registry), without which
	# they are the default machine's, whose dispatcher finds no GPUs here.
	gpuman submit -- true >/dev/null
	gpuman wait 1 >/dev/null
	python3 - "$GPUMAN_QUEUE_DIR/jobs.db" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
now = int(time.time() * 1000)
machine = db.execute("SELECT machine FROM jobs WHERE id = 1").fetchone()[0]
db.executemany("INSERT INTO jobs (state, command, argv, request, submit_ms, machine) "
               "VALUES ('queued', 'true', '[\"true\"]', '{}', ?, ?)",
               ((now, machine) for _ in range(1000)))
db.commit()
PY
	if [ "$1" = all ]; then set -- $(seq 2 1001); else set -- 1001; fi
	python3 - "$@" <<'PY'
import os, sys, time
s = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execvp("gpuman", ["gpuman", "wait"] + sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print("%.0f %.2f" % (1000 / (time.perf_counter() - s), ru.ru_utime + ru.ru_stime))
PY
}
one=$(wait_run one)
all=$(wait_run all)
printf '%-28s %12s %14s %8s\n' "1000 queued jobs" "wait 1 id" "wait 1000 ids" "ratio"
printf '%-28s %7s jobs/s %7s jobs/s %7sx\n' "queue throughput" "${one% *}" "${all% *}" "$(ratio "${one% *}" "${all% *}")"
printf '%-28s %10s s %12s s\n' "the waiter's CPU" "${one#* }" "${all#* }"
echo "before issue 12: wait on 1000 ids halved the queue's throughput (ratio 0.5)"
