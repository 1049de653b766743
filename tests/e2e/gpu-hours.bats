#!/usr/bin/env bats
# gpuman.conf max_gpu_hours: GPU-hours a user may use a day, kept by the
# broker (a root daemon, its ledger in its own state file), as real users
# (gmtest-*, root only).  Without the broker it is not enforced, and status
# says so.

load helpers

setup() {
	gm_setup
	SHARED=$(mktemp -d /tmp/gm-hours.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim"
	install -m 666 /dev/null "$SHARED/sim/lock"
	export GPUMAN_STATE_DIR="$SHARED/state" GPUMAN_SIM_STATE="$SHARED/sim"
	export GPUMAN_CONFIG="$SHARED/gpuman.conf"
	# 0.0005 h: 1.8 GPU-seconds a day
	printf '[limits]\nmax_gpu_hours = 0.0005\n' >"$GPUMAN_CONFIG"
	chmod 644 "$GPUMAN_CONFIG"
	echo '{ "gpus": [ {"name":"g0","memory_total_mib":16000}, {"name":"g1","memory_total_mib":16000} ] }' \
		>"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM="$SHARED/gpus.json"
	DAEMON= WAITER=
}

teardown() {
	[ -z "$WAITER" ] || kill "$WAITER" 2>/dev/null || true
	[ -z "$DAEMON" ] || kill_ours -TERM "$DAEMON"
	wait 2>/dev/null || true
	rm -rf "$SHARED"
}

broker() {
	local n
	n=$(grep -c serving "$BATS_TEST_TMPDIR/daemon.log" 2>/dev/null || true)
	export GPUMAN_BROKER=$SHARED/gpuman.sock
	gpuman daemon --socket "$GPUMAN_BROKER" --state "$BATS_TEST_TMPDIR/broker/leases.json" \
		2>>"$BATS_TEST_TMPDIR/daemon.log" &
	DAEMON=$!
	wait_for "[ \"\$(grep -c serving '$BATS_TEST_TMPDIR/daemon.log' 2>/dev/null)\" -gt ${n:-0} ]"
}

@test "broker: a user past max_gpu_hours waits with the reason, blocks nobody, and a restart keeps the ledger" {
	gm_user alice
	gm_user bob
	broker
	run -0 as_user alice gpuman run -- sleep 2.2
	run -75 as_user alice gpuman run -- true
	[[ "$output" == *"daily GPU-hours used up: 0.000"*" of 0.0005 h (max_gpu_hours, [limits] in $GPUMAN_CONFIG); resets at 00:00"* ]]
	# another user is served
	run -0 as_user bob gpuman run -- true
	# a waiter shows why in status, and holds nothing back
	as_user alice gpuman run --wait -- true &
	WAITER=$!
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	run -0 gpuman status --json
	[[ "$(jqr '.waiters[0].limit')" == "daily GPU-hours used up: "*"; resets at 00:00" ]]
	run -0 gpuman status
	[[ "$output" == *"waits for its user's limit, not in the way of others"* ]]
	run -0 as_user bob gpuman run -- true
	kill "$WAITER"
	wait "$WAITER" || true
	WAITER=
	# the ledger is in the broker's state file: a restart keeps it
	kill "$DAEMON"
	wait "$DAEMON" || true
	broker
	run -75 as_user alice gpuman run -- true
	[[ "$output" == *"daily GPU-hours used up"* ]]
	run -0 as_user bob gpuman run -- true
	# a larger cap for alice lets her in (the file is read again when it changes)
	printf '[limits]\nmax_gpu_hours = 0.0005\n[user gmtest-alice]\nmax_gpu_hours = 1\n' >"$GPUMAN_CONFIG"
	touch -d '+2 seconds' "$GPUMAN_CONFIG"
	run -0 as_user alice gpuman run -- true
}

@test "broker: max_gpu_hours used up holds inside one's own reservation too (every limit counts every lease)" {
	gm_user alice
	broker
	# the reservation's own 1.8 GPU-seconds use up the day's allowance
	run -0 as_user alice sh -c '
		eval "$(gpuman reserve --for 60s 2>/dev/null)" || exit 9
		sleep 2.2
		gpuman run -- echo granted
		echo "rc $?"
		gpuman run --exclude "$GPUMAN_GPUS" -- echo granted outside
		echo "rc $?"'
	echo "$output" >&3
	[[ "$output" != *granted* ]]
	[[ "$output" == *"daily GPU-hours used up"* ]]
	[[ "$output" == *"rc 75"* ]]
}

@test "without the broker max_gpu_hours is not enforced, and status says so" {
	run -0 gpuman status
	[[ "$output" == *"note: max_gpu_hours (gpuman.conf) is not enforced: only the broker"* ]]
	printf '[limits]\nmax_gpu_hours = soon\n' >"$GPUMAN_CONFIG"
	run gpuman status
	[[ "$output" == *"$GPUMAN_CONFIG:2: max_gpu_hours = soon:"* ]]
}
