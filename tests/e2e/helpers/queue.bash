# Helpers for the queue suites (load helpers; load helpers/queue).

# The live dispatchers of this test's queue, one pid a line (one per
# machine: dispatcher.lock, dispatcher-<hash>.lock): the lock is held and
# the pid in it is a gpuman dispatcher of this queue.
dispatcher_pids() {
	local lock d found=1
	for lock in "$GPUMAN_QUEUE_DIR"/dispatcher*.lock; do
		[ -e "$lock" ] || continue
		flock -n "$lock" true && continue
		d=$(cat "$lock" 2>/dev/null)
		[ -n "$d" ] && tr '\0' ' ' <"/proc/$d/cmdline" 2>/dev/null |
			grep -q "dispatcher .*$GPUMAN_QUEUE_DIR" || continue
		echo "$d"
		found=0
	done
	return $found
}

# The live dispatcher (the first, if several machines have one).
dispatcher_pid() {
	local d
	d=$(dispatcher_pids) || return 1
	echo "${d%%$'\n'*}"
}

# queue_teardown - kill what a test left: its dispatcher and runners.
queue_teardown() {
	local d r
	for d in $(dispatcher_pids || true); do
		kill -9 "$d" 2>/dev/null || true
	done
	for r in $(pgrep -f "gpuman-runner .*--lease-path=$GPUMAN_STATE_DIR/" || true); do
		kill -9 "$r" 2>/dev/null || true
	done
}

# gpus N - N identical simulated GPUs (16000 MiB, speed 1).
gpus() {
	local sep=
	{
		printf '{ "gpus": ['
		for i in $(seq 0 $(($1 - 1))); do
			printf '%s{ "name": "Sim", "uuid": "GPU-00000000-0000-0000-0000-0000000000%02d", ' "$sep" "$i"
			printf '"memory_total_mib": 16000, "memory_used_mib": 0, "speed": 1.0 }'
			sep=,
		done
		printf '] }\n'
	} >"$BATS_TEST_TMPDIR/gpus.json"
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/gpus.json
}

# dispatcher_gone - the dispatcher exits once nothing is queued (5 s at most).
dispatcher_gone() {
	for _ in $(seq 100); do
		dispatcher_pids >/dev/null || return 0
		sleep 0.05
	done
	return 1
}

# history N [END_MS] - add N finished jobs (done, ended at END_MS, default
# now) to the queue's store, as months of use would leave them: each with a
# 2.5 KB environment, as submit records it.  The store must exist.
history() {
	python3 - "$GPUMAN_QUEUE_DIR/jobs.db" "$1" "${2:-$(($(date +%s) * 1000))}" <<'PY'
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n, end = int(sys.argv[2]), int(sys.argv[3])
env = ("\0".join("VAR%d=%s" % (i, "x" * 40) for i in range(55))).encode()
rows = ((("python train.py --seed %d" % i), '["python","train.py","--seed","%d"]' % i,
         env, end - 1000, end - 900, end) for i in range(n))
db.executemany("INSERT INTO jobs (state, command, argv, cwd, env, request, submit_ms, "
               "start_ms, end_ms, gpus, uuids, exit_status, attempts) VALUES ('done', ?, ?, "
               "'/home/alice', ?, '{}', ?, ?, ?, '0', 'GPU-0', 0, 1)", rows)
db.commit()
PY
}
