# Helpers of the suites that start a lease broker of their own (broker*.bats,
# trust-broker.bats): each test has its broker on its own socket and state
# file, a shared directory every test user reaches, and the pids of the
# users' processes it started, which teardown kills.

# broker_setup NAME - $SHARED (/tmp/gpuman-NAME.*, mode 1777, with sim/ and
# pids/), the broker's socket (GPUMAN_BROKER) and state file ($STATE)
broker_setup() {
	SHARED=$(mktemp -d "/tmp/gpuman-$1.XXXXXX")
	chmod 1777 "$SHARED"
	mkdir -m 1777 "$SHARED/sim" "$SHARED/pids"
	install -m 666 /dev/null "$SHARED/sim/lock"
	export GPUMAN_SIM_STATE=$SHARED/sim GPUMAN_BROKER=$SHARED/gpuman.sock
	STATE=$BATS_TEST_TMPDIR/broker/leases.json
	DAEMON=
}

# broker_teardown - broker_stop, and remove $SHARED; fails as broker_stop
broker_teardown() {
	local rc=0
	broker_stop || rc=1
	rm -rf "$SHARED"
	return $rc
}

# broker_stop - kill the users' processes in $SHARED/pids, the broker and
# the jobs it kept fenced; fails, showing the broker's log, if the broker
# did not end with status 0 within 30 s of its SIGTERM
broker_stop() {
	local f rc=0
	for f in "$SHARED"/pids/*; do
		[ -f "$f" ] && kill_ours "$(cat "$f")"
	done
	# the dispatcher of a user's queue under $SHARED, left by a test that
	# failed before its queue emptied (it would keep bats waiting)
	kill_ours $(pgrep -f "gpuman dispatcher .*$SHARED/" || true)
	# a broker the test killed itself is not judged here
	if [ -n "${DAEMON:-}" ] && pid_runs "$DAEMON" && ours "$DAEMON" && kill "$DAEMON" 2>/dev/null; then
		daemon_end "$DAEMON" || rc=1
	fi
	wait 2>/dev/null || true
	broker_fence_clean
	return $rc
}

# pid_runs PID - PID runs (a zombie, dead but not yet waited for, does not)
pid_runs() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "${st%% *}" != Z ]
}

# daemon_end PID - the broker PID, sent SIGTERM, ends with status 0 within
# 30 s; under ASan (GM_DAEMON_ASAN_OPTIONS, tests/run-all) its exit is also
# a leak check: its leaks grow for as long as it serves, where a short
# command's vanish with it, so it is the one process whose leaks are sought
daemon_end() {
	local _ rc
	for _ in $(seq 300); do
		pid_runs "$1" || break
		sleep 0.1
	done
	if pid_runs "$1"; then
		echo "# the broker $1 is still there 30 s after its SIGTERM; where its threads are:" >&3
		broker_threads "$1" >&3
		kill -9 "$1" 2>/dev/null
		rc=137
	else
		wait "$1" 2>/dev/null
		rc=$?
	fi
	[ "$rc" -eq 0 ] && return 0
	echo "# the broker $1 ended with status $rc; its log:" >&3
	tail -n 40 "$BATS_TEST_TMPDIR/daemon.log" | sed 's/^/#   /' >&3
	return 1
}

# broker_threads PID - each thread's state, kernel wait channel and
# kernel stack (root), as comments: where a broker that does not stop is
broker_threads() {
	local t
	for t in /proc/"$1"/task/*; do
		echo "#   thread ${t##*/}: $(sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f1)" \
			"wchan $(cat "$t/wchan" 2>/dev/null)"
		sed 's/^/#     /' "$t/stack" 2>/dev/null | head -12
	done
	if command -v gdb >/dev/null; then
		timeout 20 gdb -p "$1" -batch -ex 'thread apply all bt 12' 2>/dev/null |
			grep -E '^(Thread|#[0-9])' | sed 's/^/#   /'
	fi
}

# broker_fence_clean - end what is left in this test's fence folder
# (helpers.bash), and the folder: a broker stopped while a lease lives
# keeps its job running in its cgroup for the next broker
# (gpuman-trust(7)); with no next broker such a job (a holder's sleep 120)
# outlived its test, and a later test of the run found its cgroup
broker_fence_clean() {
	local m d
	[ -n "${GPUMAN_FENCE_CGROUP:-}" ] || return 0
	for m in /sys/fs/cgroup/unified /sys/fs/cgroup/devices; do
		d=$m/$GPUMAN_FENCE_CGROUP
		[ -d "$d" ] || continue
		find "$d" -mindepth 2 -name cgroup.procs -exec cat {} + 2>/dev/null |
			xargs -r kill -9 2>/dev/null || true
		wait_for "! find '$d' -mindepth 2 -name cgroup.procs -exec cat {} + 2>/dev/null | grep -q ." 5 || true
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
}

# start_daemon [VAR=VALUE...] - a broker of this test, in that environment,
# at nice BROKER_NICE (0 unless set);
# returns once it serves (a killed one's socket file is still there: wait
# for the new one's word), fails showing its log if it does not within 20 s
start_daemon() {
	local n m _
	n=$(grep -c serving "$BATS_TEST_TMPDIR/daemon.log" 2>/dev/null || true)
	env ${GM_DAEMON_ASAN_OPTIONS:+ASAN_OPTIONS=$GM_DAEMON_ASAN_OPTIONS} "$@" \
		nice -n "${BROKER_NICE:-0}" gpuman daemon --socket "$GPUMAN_BROKER" --state "$STATE" \
		2>>"$BATS_TEST_TMPDIR/daemon.log" &
	DAEMON=$!
	for _ in $(seq 400); do
		m=$(grep -c serving "$BATS_TEST_TMPDIR/daemon.log" 2>/dev/null || true)
		[ "${m:-0}" -gt "${n:-0}" ] && return 0
		kill -0 "$DAEMON" 2>/dev/null || break
		sleep 0.05
	done
	cat "$BATS_TEST_TMPDIR/daemon.log" >&2
	return 1
}
