#!/usr/bin/env bats
# The daemonless registry's line (issue 19 item 5): a release wakes only
# the waiters next to the head, so a waiter must still be served when
# those it sleeps behind stop (Ctrl-Z) or die (kill -9) in the middle of
# the line.

load helpers

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
	scenario one <<'JSON'
{ "gpus": [ {"name":"only","memory_total_mib":16000} ] }
JSON
}

teardown() {
	for p in ${BG_PIDS:-}; do
		kill -CONT "$p" 2>/dev/null || true
		kill -9 "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}

tickets() { ls "$GPUMAN_STATE_DIR" | grep -c '^wait\.' || true; }

# line N - a holder of the only GPU, then N waiters queued in order; each
# appends its number to ./order when served.  Sets HOLDER and W1..WN.
line() {
	gpuman run -- sleep 300 &
	HOLDER=$!
	BG_PIDS="$HOLDER"
	wait_for 'ls "$GPUMAN_STATE_DIR" | grep -q "^lease\."'
	for i in $(seq "$1"); do
		gpuman run --wait -- sh -c 'echo "$1" >> order' sh "$i" 2>/dev/null &
		eval "W$i=$!"
		BG_PIDS="$BG_PIDS $!"
		wait_for "test \"\$(tickets)\" = $i"
	done
}

@test "two stopped waiters in the middle of the line hold back nobody behind them" {
	line 5
	kill -STOP "$W2" "$W3"
	kill "$HOLDER"
	# 1, then 4 and 5 behind the stopped pair: within the pair's recheck
	# (10 s), not when the pair resumes
	for _ in $(seq 60); do
		[ "$(grep -c . order 2>/dev/null)" = 3 ] && break
		sleep 0.5
	done
	[ "$(tr '\n' ' ' <order)" = "1 4 5 " ]
	kill -CONT "$W2" "$W3"
	wait "$W2" "$W3"
	[ "$(tr '\n' ' ' <order)" = "1 4 5 2 3 " ]
}

@test "kill -9 of waiters in the middle of the line: those behind them are served in order" {
	line 5
	kill -9 "$W2" "$W3"
	kill "$HOLDER"
	wait "$W5"
	[ "$(tr '\n' ' ' <order)" = "1 4 5 " ]
}
