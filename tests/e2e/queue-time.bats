#!/usr/bin/env bats
# Time limits in the queue (submit --time): a job that runs past its limit
# is ended whole -- every process it started -- and recorded as timeout.

load helpers
load helpers/queue

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
	# A child that names this test, so that pgrep finds only ours.
	printf '#!/bin/sh\nexec sleep 1000\n' >"$BATS_TEST_TMPDIR/child.sh"
	chmod +x "$BATS_TEST_TMPDIR/child.sh"
}

teardown() {
	queue_teardown
	pkill -9 -f "$BATS_TEST_TMPDIR/child.sh" || true
}

children() {
	pgrep -f "$BATS_TEST_TMPDIR/child.sh" || true
}

@test "a job past its --time ends whole: its children (one in its own session) are gone, the GPU is free, it is recorded timeout" {
	gpus 1
	c=$BATS_TEST_TMPDIR/child.sh
	id=$(gpuman submit --time 2s -- sh -c "$c & setsid $c & echo started; wait")
	for _ in $(seq 100); do [ "$(children | wc -l)" = 2 ] && break; sleep 0.05; done
	[ "$(children | wc -l)" = 2 ]
	run -1 gpuman wait "$id"
	[ "$output" = "$id timeout: time limit (2s) reached: ended with its processes" ]
	[ -z "$(children)" ]
	# its lease is gone: the GPU is free for the next job at once
	[ -z "$(ls "$GPUMAN_STATE_DIR" | grep '^lease\.' || true)" ]
	run -0 gpuman queue --state timeout
	[[ "$output" == *" $id  timeout "* ]]
	[[ "$output" == *"time limit (2s) reached"* ]]
	run -0 gpuman queue --all --json
	[ "$(jqr ".[] | select(.id == $id) | \"\(.state) \(.time_limit_s) \(.exit_status)\"")" = "timeout 2 143" ]
	run -0 gpuman logs "$id"
	[ "${lines[0]}" = started ]
	[ "${lines[1]}" = "gpuman: job $id reached its time limit (2s): SIGTERM to its processes; recorded as timeout" ]
	run -0 gpuman submit -- true
	run -0 gpuman wait "$output"
	dispatcher_gone
}

@test "a job that ignores SIGTERM at its limit gets SIGKILL 10 s later, and a job --after it is cancelled" {
	gpus 1
	c=$BATS_TEST_TMPDIR/child.sh
	id=$(gpuman submit --time 1s -- sh -c "trap '' TERM; $c; $c")
	after=$(gpuman submit --after "$id" -- touch ran)
	run -1 gpuman wait "$id" "$after"
	[ "${lines[0]}" = "$id timeout: time limit (1s) reached: ended with its processes" ]
	[ "${lines[1]}" = "$after cancelled: not started: job $id (--after) timed out" ]
	[ ! -e ran ]
	[ -z "$(children)" ]
	run -0 gpuman logs "$id"
	[[ "$output" == *"(1s): SIGTERM to its processes, SIGKILL 10 s later; recorded as timeout"* ]]
	run -0 gpuman queue --all --json
	[ "$(jqr ".[0].exit_status")" = 137 ]
	[ "$(jqr ".[0].duration_ms >= 11000")" = true ]
}

@test "the limit holds while the dispatcher is away: its runner keeps the time" {
	gpus 1
	id=$(gpuman submit --time 2s -- "$BATS_TEST_TMPDIR/child.sh")
	for _ in $(seq 100); do [ -n "$(children)" ] && break; sleep 0.05; done
	d=$(dispatcher_pid)
	kill -9 "$d"
	sleep 3
	[ -z "$(children)" ]
	run -1 gpuman wait "$id" # starts a dispatcher, which records the end
	[ "$output" = "$id timeout: time limit (2s) reached: ended with its processes" ]
}

@test "submit --time takes Slurm's forms and refuses what is not a limit (exit 2)" {
	gpus 1
	for t in 90s 30m 2h 1h30m 1d 01:30 1:00:00 1-0 1-00:30 1-00:00:05; do
		run -0 gpuman submit --time "$t" -- sleep 60
	done
	gpuman cancel --all >/dev/null
	run -0 gpuman queue --all --json
	[ "$(jqr '[.[].time_limit_s] | map(tostring) | join(" ")')" = "90 1800 7200 5400 86400 90 3600 86400 88200 86405" ]
	run -2 gpuman submit --time 90 -- true
	[ "$output" = "gpuman submit: --time '90': say 90s or 90m (a bare number is minutes to Slurm but seconds elsewhere in gpuman; -t 90 is Slurm's minutes)
(see 'gpuman submit --help')" ]
	run -2 gpuman submit --time 0s -- true
	[[ "$output" == *"--time '0s': a limit must be at least 1s"* ]]
	run -2 gpuman submit --time 1:75 -- true
	[[ "$output" == *"--time '1:75': not a time limit (Slurm's forms"* ]]
	run -2 gpuman submit --time soon -- true
	[[ "$output" == *"--time: 'soon' is not a duration"* ]]
	run -2 gpuman submit --time 400d -- true
	[[ "$output" == *"at most 366 days"* ]]
}
