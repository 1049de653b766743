#!/usr/bin/env bats
# The lease broker's state file is a journal (broker/state.c): a snapshot,
# then each loop turn's changes appended.  A restart after any number of
# them restores exactly what lived; a torn last line (a broker killed
# mid-append) is survived and said; a file of the brokers before the
# journal (one JSON document) is read; and what a grant writes does not
# grow with what the broker holds.  Real brokers on their own socket and
# state file, real users (gmtest-alice and gmtest-bob; root only).

load helpers
load helpers/broker

setup() {
	gm_setup
	broker_setup journal
	echo '{ "gpus": [ { "name": "g1", "memory_total_mib": 16000 } ] }' >"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM=$SHARED/gpus.json
	DAEMON= FULL=
}

teardown() {
	broker_teardown
	[ -z "${FULL:-}" ] || umount "$FULL" 2>/dev/null || true
}

crash() {
	kill -9 "$DAEMON"
	wait "$DAEMON" || true
	DAEMON=
}

# state - the state file folded as the broker reads it back
state() { jq -s -f "$BATS_TEST_DIRNAME/helpers/state.jq" "$STATE"; }

# what the live broker holds, in a form that survives a restart: leases by
# id (whoever holds them), waiters by pid
held() {
	gpuman status --json | jq -c '[([.leases[] | [.id, .user, .kind, .reservation,
		.expires_ms, .gpus[0].index]] | sort), ([.waiters[] | [.pid, .user]])]'
}

# bg NAME USER CMD... - CMD as gmtest-USER in the background, its pid in
# $SHARED/pids/NAME
bg() {
	local name=$1 user=$2; shift 2
	as_user "$user" sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/$name" "$@" &
	wait_for "[ -s '$SHARED/pids/$name' ]"
}

reserve() { as_user "$1" gpuman reserve --for 10m --mem 1M --json | jq -r .id; }

@test "broker journal: a restart after many grants and releases restores exactly the live leases, reservations, places and GPU-hours" {
	gm_user alice
	gm_user bob
	start_daemon
	# churn: leases granted and ended, each charged to its user's hours
	for i in $(seq 20); do
		user=alice
		[ $((i % 2)) = 0 ] && user=bob
		as_user "$user" gpuman run --mem 1M -- true
	done
	# reservations, one of them released
	a1=$(reserve alice)
	a2=$(reserve alice)
	b1=$(reserve bob)
	as_user alice gpuman release "$a1"
	# a lease whose job lives, and two waiters for the whole GPU behind it
	bg holder bob gpuman run --mem 1M -- sh -c "while [ -d '$SHARED' ]; do sleep 0.1; done"
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 3 ]'
	bg w1 alice gpuman run --wait -- true
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	bg w2 bob gpuman run --wait -- true
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 2 ]'
	before=$(held)
	echo "held before: $before"
	# the file is a journal: a snapshot and the changes after it
	[ "$(wc -l <"$STATE")" -gt 20 ]
	state >"$SHARED/before.json"
	[ "$(jq '.leases | length' "$SHARED/before.json")" = 3 ]
	[ "$(jq '.waiters | length' "$SHARED/before.json")" = 2 ]
	[ "$(jq '.gpu_hours | length' "$SHARED/before.json")" = 2 ]
	# a crash, and a new broker from the journal
	crash
	start_daemon
	cat "$BATS_TEST_TMPDIR/daemon.log"
	grep -q "restored 3 leases of the broker before me (0 ended meanwhile)" "$BATS_TEST_TMPDIR/daemon.log"
	grep -q "holding 2 places in line" "$BATS_TEST_TMPDIR/daemon.log"
	! grep -q "torn\|not a record" "$BATS_TEST_TMPDIR/daemon.log" || false
	# the waiters come back to their places
	wait_for '[ "$(held)" = "$before" ]'
	# it starts with a snapshot of what it restored: the same leases (records
	# and secrets), places and ledger, byte for byte
	state >"$SHARED/after.json"
	for part in '.leases | sort_by(.id)' '.gpu_hours | sort_by(.uid)' \
		'[.waiters[] | [.seq, .place, .uid, .pid, .pid_start, .since_ms, .request]]'; do
		[ "$(jq -cS "$part" "$SHARED/before.json")" = "$(jq -cS "$part" "$SHARED/after.json")" ]
	done
	grep -q "\"id\":\"$a2\"" "$STATE"
	! grep -q "\"id\":\"$a1\"" "$STATE" || false
	# and the line moves on from there
	holder=$(cat "$SHARED/pids/holder")
	kill -9 $(ps --ppid "$holder" -o pid=) "$holder"
	as_user alice gpuman release "$a2"
	as_user bob gpuman release "$b1"
	wait_for '[ "$(gpuman status --json | jq "(.leases | length) + (.waiters | length)")" = 0 ]'
	[ "$(state | jq '(.leases | length) + (.waiters | length)')" = 0 ]
}

@test "broker journal: a torn last line is ignored and said; a bad line before it stops the start, naming it" {
	gm_user alice
	start_daemon
	r1=$(reserve alice)
	r2=$(reserve alice)
	r3=$(reserve alice)
	crash
	# the last change is r3's grant: cut it in the middle, as a broker
	# killed mid-append would
	tail -n 1 "$STATE" | grep -q "^{\"lease\":{\"id\":\"$r3\""
	truncate -s -40 "$STATE"
	start_daemon
	cat "$BATS_TEST_TMPDIR/daemon.log"
	grep -q "the state file '$STATE' ends in a torn line [0-9]* (.*); ignored" "$BATS_TEST_TMPDIR/daemon.log"
	grep -q "restored 2 leases" "$BATS_TEST_TMPDIR/daemon.log"
	run -0 gpuman status --json
	[ "$(jqr '[.leases[].id] | sort | join(" ")')" = "$(printf '%s\n' "$r1" "$r2" | sort | tr '\n' ' ' | sed 's/ $//')" ]
	# the torn line is gone from the file
	state >/dev/null
	# a line in the middle that is no record is not skipped silently: the
	# broker will not start without the leases it cannot read
	r4=$(reserve alice)
	crash
	sed -i '1a {"lease":{"id":"torn' "$STATE"
	run timeout 20 gpuman daemon --socket "$GPUMAN_BROKER" --state "$STATE"
	echo "$output"
	[ "$status" != 0 ]
	[[ "$output" == *"the state file '$STATE' line 2 is not a record of the broker's ("*"); its leases are running jobs: fix it, or move it aside to start without them"* ]]
	[[ "$output" != *serving* ]]
	# the file is as it was
	grep -q "\"id\":\"$r4\"" "$STATE"
	sed -i 2d "$STATE"
	start_daemon
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = 3 ]
}

@test "broker journal: a state file of the brokers before the journal (one JSON document) is read, and becomes a journal" {
	gm_user alice
	gm_user bob
	start_daemon
	r1=$(reserve alice)
	r2=$(reserve bob)
	bg w1 alice gpuman run --wait -- true
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	before=$(held)
	crash
	# the document they wrote: compact, on one line, no newline at its end
	state | jq -cj . >"$SHARED/old.json"
	cp "$SHARED/old.json" "$STATE"
	start_daemon
	cat "$BATS_TEST_TMPDIR/daemon.log"
	grep -q "restored 2 leases" "$BATS_TEST_TMPDIR/daemon.log"
	wait_for '[ "$(held)" = "$before" ]'
	# written as a journal from then on: a snapshot, then the changes
	as_user alice gpuman release "$r1"
	[ "$(head -n 1 "$STATE" | jq '.leases | length')" = 2 ]
	[ "$(tail -n 1 "$STATE")" = "{\"end\":\"$r1\"}" ]
	# and one written by hand over several lines too
	crash
	state | jq . >"$SHARED/pretty.json"
	cp "$SHARED/pretty.json" "$STATE"
	start_daemon
	run -0 gpuman status --json
	[ "$(jqr '[.leases[].id] | join(" ")')" = "$r2" ]
	[ "$(jqr '.waiters | length')" = 1 ]
}

@test "broker journal: a full disk is said once, loses nothing in memory, and the file is written whole once there is room" {
	gm_user alice
	FULL=$BATS_TEST_TMPDIR/full
	mkdir -p "$FULL"
	mount -t tmpfs -o size=256k,mode=0755 tmpfs "$FULL" || skip "cannot mount a tmpfs here"
	STATE=$FULL/leases.json
	start_daemon
	r1=$(reserve alice)
	# no room left: the next appends fail (the file's last page fills)
	dd if=/dev/zero of="$FULL/filler" bs=4k 2>/dev/null || true
	for i in $(seq 2 12); do
		reserve alice >>"$SHARED/ids"
	done
	cat "$BATS_TEST_TMPDIR/daemon.log"
	[ "$(grep -c "cannot write the state file '$STATE': No space left on device (leases would not survive a restart)" "$BATS_TEST_TMPDIR/daemon.log")" = 1 ]
	# the file holds no torn line meanwhile
	state >/dev/null
	# room again: within a second the file is written whole from memory
	rm "$FULL/filler"
	wait_for 'grep -q "the state file .$STATE. is written again" "$BATS_TEST_TMPDIR/daemon.log"'
	[ "$(state | jq '.leases | length')" = 12 ]
	crash
	start_daemon
	grep -q "restored 12 leases" "$BATS_TEST_TMPDIR/daemon.log"
	run -0 gpuman status --json
	[ "$(jqr '[.leases[].id] | sort | join(" ")')" = "$( (echo "$r1"; cat "$SHARED/ids") | sort | tr '\n' ' ' | sed 's/ $//')" ]
	kill "$DAEMON"
	wait "$DAEMON"
	DAEMON=
}

# grant_bytes - bytes the broker writes per grant (a lease and its end),
# over 50 runs: /proc/PID/io's wchar, every write() it makes
grant_bytes() {
	local w0 w1
	w0=$(awk '/^wchar/ {print $2}' "/proc/$DAEMON/io")
	for _ in $(seq 50); do
		gpuman run --mem 1M -- true
	done
	w1=$(awk '/^wchar/ {print $2}' "/proc/$DAEMON/io")
	echo $(((w1 - w0) / 50))
}

# with_reservations N - a state file that holds N reservations of alice's
# (copies of a real one, each its own id), restored by a new broker
with_reservations() {
	crash
	state | jq -c --argjson n "$1" --slurpfile l "$SHARED/r0.json" '
		.leases = [range($n) as $i | $l[0] | .id = "\(.id)-\($i)"
			| .token = "\(.token[0:24])\($i + 10000000)"]' >"$SHARED/many.json"
	cp "$SHARED/many.json" "$STATE"
	start_daemon
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = "$1" ]
}

@test "broker journal: the bytes a grant writes do not grow with the reservations held (100 vs 2000)" {
	gm_user alice
	start_daemon
	r0=$(reserve alice)
	state | jq -c ".leases[] | select(.id == \"$r0\")" >"$SHARED/r0.json"
	with_reservations 100
	small=$(grant_bytes)
	with_reservations 2000
	large=$(grant_bytes)
	size=$(stat -c %s "$STATE")
	echo "# bytes written per grant: $small at 100 reservations, $large at 2000 (state file $size bytes)" >&3
	# a whole state file per grant would be 20 times more
	[ "$large" -lt $((small * 3 / 2)) ]
	[ "$large" -lt $((size / 10)) ]
}
