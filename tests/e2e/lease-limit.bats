#!/usr/bin/env bats
# gpuman.conf max_lease: the longest one job may hold its GPUs.  The gpuman
# process that owns the job ends it whole at that age (`gpuman run`, the
# queue's runner, batch tasks), so nothing runs on a GPU whose lease is gone.

load helpers
load helpers/queue

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
	export GPUMAN_CONFIG=$BATS_TEST_TMPDIR/gpuman.conf
	export XDG_CONFIG_HOME=$BATS_TEST_TMPDIR/config
	# A child that names this test, so that pgrep finds only ours.
	printf '#!/bin/sh\nexec sleep 1000\n' >"$BATS_TEST_TMPDIR/child.sh"
	chmod +x "$BATS_TEST_TMPDIR/child.sh"
}

teardown() {
	[ -z "${holder:-}" ] || kill "$holder" 2>/dev/null || true
	[ -z "${DAEMON:-}" ] || kill_ours -TERM "$DAEMON"
	queue_teardown
	pkill -9 -f "$BATS_TEST_TMPDIR/child.sh" || true
}

children() {
	pgrep -f "$BATS_TEST_TMPDIR/child.sh" || true
}

no_leases() {
	[ -z "$(ls "$GPUMAN_STATE_DIR" | grep '^lease\.' || true)" ]
}

@test "run: a job past max_lease ends whole (children in their own session too), exit 124, the GPU free" {
	gpus 1
	printf '[limits]\nmax_lease = 2s\n' >"$GPUMAN_CONFIG"
	c=$BATS_TEST_TMPDIR/child.sh
	start=$(date +%s)
	run -124 gpuman run -- sh -c "$c & setsid $c & echo started; wait"
	end=$(date +%s)
	[ "${lines[0]}" = started ]
	[ "${lines[1]}" = "gpuman: job ended: lease limit 2s of $GPUMAN_CONFIG reached (max_lease in [limits]); its processes got SIGTERM" ]
	[ $((end - start)) -ge 2 ]
	[ $((end - start)) -lt 8 ]
	[ -z "$(children)" ]
	no_leases
	# a job within the limit is untouched
	run -0 gpuman run -- true
}

@test "run: a job that ignores SIGTERM at max_lease gets SIGKILL 10 s later; [user NAME] wins over [limits]" {
	gpus 1
	printf '[limits]\nmax_lease = 1h\n[user %s]\nmax_lease = 1s\n' "$(id -un)" >"$GPUMAN_CONFIG"
	run -124 gpuman run -- sh -c "trap '' TERM; $BATS_TEST_TMPDIR/child.sh"
	[[ "$output" == *"lease limit 1s of $GPUMAN_CONFIG reached (max_lease in [user $(id -un)]); its processes got SIGTERM, then SIGKILL 10 s later" ]]
	[ -z "$(children)" ]
	no_leases
}

@test "queue: a job without --time is ended at max_lease and recorded timeout with the reason; a shorter --time wins" {
	gpus 1
	printf '[limits]\nmax_lease = 2s\n' >"$GPUMAN_CONFIG"
	c=$BATS_TEST_TMPDIR/child.sh
	id=$(gpuman submit -- sh -c "$c & setsid $c & wait")
	run -1 gpuman wait "$id"
	[ "$output" = "$id timeout: lease limit 2s reached (max_lease in [limits] of $GPUMAN_CONFIG): ended with its processes" ]
	[ -z "$(children)" ]
	no_leases
	id=$(gpuman submit --time 1s -- "$c")
	run -1 gpuman wait "$id"
	[ "$output" = "$id timeout: time limit (1s) reached: ended with its processes" ]
	run -0 gpuman queue --state timeout
	[[ "$output" == *"lease limit 2s reached"* ]]
	dispatcher_gone
}

@test "batch: a task past max_lease is ended and reported timeout" {
	gpus 1
	printf '[limits]\nmax_lease = 1s\n' >"$GPUMAN_CONFIG"
	printf '%s\n' "$BATS_TEST_TMPDIR/child.sh" >tasks
	run gpuman batch tasks
	[ "$status" -ne 0 ]
	[[ "$output" == *"lease limit 1s reached (max_lease in [limits] of $GPUMAN_CONFIG)"* ]]
	[ -z "$(children)" ]
	no_leases
}

@test "max_lease: a bad value is refused naming the file and line" {
	gpus 1
	printf '[limits]\nmax_lease = soon\n' >"$GPUMAN_CONFIG"
	run -1 gpuman run -- true
	[[ "$output" == *"$GPUMAN_CONFIG:2"*"max_lease"* ]]
}

@test "status marks a library client's lease held past max_lease, naming its holder (text and --json)" {
	gpus 1
	printf '[limits]\nmax_lease = 1s\n' >"$GPUMAN_CONFIG"
	py_gpuman -c '
import sys, time, gpuman
lease = gpuman.select(n=1)
open(sys.argv[1], "w").close()
while True:
    time.sleep(1)
' "$BATS_TEST_TMPDIR/held" &
	holder=$!
	wait_for '[ -e held ]'
	run -0 gpuman status
	[[ "$output" != *"over its limit"* ]]
	sleep 1.2
	run -0 gpuman status
	[[ "$output" == *"[leased: $(id -un), pid $holder over its limit (max_lease 1s of [limits])]"* ]]
	run -0 gpuman status --json
	[ "$(jqr ".leases[0].over_limit_ms") $(jqr ".leases[0].pid")" = "1000 $holder" ]
	run -3 gpuman waste
	[[ "$output" == *"over-limit lease "*" of pid $holder ($(id -un), "*"over its limit (max_lease 1s of [limits])"* ]]
	run -3 gpuman waste --json
	[ "$(jqr '.waste[] | select(.kind == "over-limit") | "\(.pid) \(.gpus | join(","))"')" = "$holder 0" ]
	# and serve's /metrics counts it, with how long past the limit
	gpuman serve --listen 127.0.0.1:0 --interval 0.3 2>serve.log 3>&- &
	serve=$!
	wait_for "grep -q '(port [0-9]*)' serve.log"
	run -0 curl -sf "http://127.0.0.1:$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' serve.log)/metrics"
	kill "$serve"
	[[ "$output" == *'gpuman_waste_findings{kind="over-limit",'*'} 1'* ]]
	[[ "$output" == *'gpuman_waste_over_limit_seconds{lease="'*'",user="'"$(id -un)"'",gpus="0",'*'} 1.000'* ]]
	printf '%s\n' "$output" | promtool check metrics
	kill "$holder"
	wait "$holder" || true
}

@test "through the broker: run's job and a queue job are ended at max_lease, status marks a library lease" {
	gpus 1
	printf '[limits]\nmax_lease = 1s\n' >"$GPUMAN_CONFIG"
	export GPUMAN_BROKER=$BATS_TEST_TMPDIR/gpuman.sock
	gpuman daemon --socket "$GPUMAN_BROKER" --state "$BATS_TEST_TMPDIR/broker/leases.json" \
		2>>"$BATS_TEST_TMPDIR/daemon.log" &
	DAEMON=$!
	wait_for "grep -q serving '$BATS_TEST_TMPDIR/daemon.log' 2>/dev/null"
	run -124 gpuman run -- "$BATS_TEST_TMPDIR/child.sh"
	[[ "$output" == *"gpuman: job ended: lease limit 1s of $GPUMAN_CONFIG reached"* ]]
	[ -z "$(children)" ]
	id=$(gpuman submit -- "$BATS_TEST_TMPDIR/child.sh")
	run -1 gpuman wait "$id"
	[ "$output" = "$id timeout: lease limit 1s reached (max_lease in [limits] of $GPUMAN_CONFIG): ended with its processes" ]
	[ -z "$(children)" ]
	dispatcher_gone
	py_gpuman -c '
import sys, time, gpuman
lease = gpuman.select(n=1)
open(sys.argv[1], "w").close()
while True:
    time.sleep(1)
' "$BATS_TEST_TMPDIR/held" &
	holder=$!
	wait_for '[ -e held ]'
	sleep 1.2
	run -0 gpuman status
	[[ "$output" == *"pid $holder over its limit (max_lease 1s of [limits])]"* ]]
}
