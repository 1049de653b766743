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

# broker_teardown - broker_stop, and remove $SHARED
broker_teardown() {
	broker_stop
	rm -rf "$SHARED"
}

# broker_stop - kill the users' processes in $SHARED/pids, the broker and
# the jobs it kept fenced
broker_stop() {
	local f
	for f in "$SHARED"/pids/*; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
	done
	[ -z "${DAEMON:-}" ] || kill "$DAEMON" 2>/dev/null || true
	wait 2>/dev/null || true
	broker_fence_clean
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
	env "$@" nice -n "${BROKER_NICE:-0}" gpuman daemon --socket "$GPUMAN_BROKER" --state "$STATE" \
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
