#!/usr/bin/env bats
# The daemonless registry flooded by one user (issue 23, attack 4): its
# directory is everyone's, so gmtest-mallory may fill it with dead lease
# and ticket files, or fill the file system's inodes.  Her files must slow
# another user's command by a bounded amount, and a full state directory
# must say so and whose files fill it.  (The registry cannot stop her
# taking the inodes: that needs the broker.)

load helpers

# What her files may add to a victim's command on this machine (2 cores,
# shared): the same command before the flood is the baseline.
VICTIM_MS=1000

setup() {
	gm_setup
	gm_user alice
	gm_user mallory
	# /run/gpuman is a tmpfs: so is the flooded directory here.
	FLOOD=$(mktemp -d /dev/shm/gpuman-flood.XXXXXX)
	chmod 755 "$FLOOD"
	mkdir -m 1777 "$FLOOD/state" "$FLOOD/sim"
	install -m 666 /dev/null "$FLOOD/sim/lock"
	scenario one <<'JSON'
{ "gpus": [ {"name":"only","memory_total_mib":16000} ] }
JSON
	install -m 644 "$GPUMAN_SIM" "$FLOOD/one.json"
	export GPUMAN_SIM=$FLOOD/one.json GPUMAN_STATE_DIR=$FLOOD/state GPUMAN_SIM_STATE=$FLOOD/sim
}

teardown() {
	[ -z "${FULL:-}" ] || { umount "$FULL" 2>/dev/null; rmdir "$FULL"; }
	[ -z "${FLOOD:-}" ] || rm -rf "$FLOOD"
}

# victim_ms COMMAND... - alice runs it; its wall time in ms on stdout
victim_ms() {
	local t0 t1
	t0=$(date +%s%N)
	as_user alice "$@" >/dev/null
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000000))
}

# victim_opens_few - alice's gpuman run opens the files one by one no
# more (fewer than 5000 openat, counted by strace; leak checks off: an
# ASan build's cannot work under ptrace)
victim_opens_few() {
	local opens
	command -v strace >/dev/null || skip "strace is missing: the time bound alone was checked"
	strace -f -c -e trace=openat -o "$BATS_TEST_TMPDIR/calls" \
		setpriv --reuid=gmtest-alice --regid=gmtest-alice --clear-groups \
		env HOME=/tmp PATH="$PATH" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
		gpuman run -- true
	opens=$(awk '$NF == "openat" {print $4}' "$BATS_TEST_TMPDIR/calls")
	echo "# opens: $opens" >&3
	[ "$opens" -lt 5000 ]
}

@test "100,000 dead lease and ticket files of one user slow another user's run and status by less than 1 s" {
	# the same commands before the flood: what the machine's load costs
	base_run=$(victim_ms gpuman run -- true)
	base_status=$(victim_ms gpuman status)
	# Dead files named like live ones, empty or with a forged lease in
	# them, and none of them locked; alice cannot remove them (sticky).
	as_user mallory sh -c 'cd "$1" &&
		seq 90000 | sed "s/^/lease.1795853720130-1-/" | xargs touch &&
		seq 10000 | sed "s/^/wait.01795853720498757587.1-1-/" | xargs touch &&
		for i in $(seq 50); do
			printf "{\"id\":\"f%s\",\"uid\":%s,\"pid\":1,\"kind\":\"exclusive\",\"gpus\":[]}" \
				$i "$(id -u)" >lease.forged-$i
		done' - "$GPUMAN_STATE_DIR"
	[ "$(ls -f "$GPUMAN_STATE_DIR" | grep -c '^lease\.')" -ge 90000 ]
	run_ms=$(victim_ms gpuman run -- true)
	status_ms=$(victim_ms gpuman status)
	# and a line that still works: alice waits behind her own lease
	as_user alice gpuman run -- sleep 1 &
	wait_for 'test "$(gpuman status --json | jq ".leases | length")" = 1'
	wait_ms=$(victim_ms gpuman run --wait=20s -- true)
	wait
	echo "# victim under 100,000 files: run $run_ms ms (before: $base_run), status $status_ms ms (before: $base_status), run --wait behind a 1 s lease $wait_ms ms" >&3
	[ $((run_ms - base_run)) -lt "$VICTIM_MS" ]
	[ $((status_ms - base_status)) -lt "$VICTIM_MS" ]
	[ $((wait_ms - base_run)) -lt $((1000 + VICTIM_MS)) ]
	# what bounds it: the dead files are never opened, one by one
	victim_opens_few
}

@test "100,000 reservation files of one user slow another user's run and status by less than 1 s" {
	base_run=$(victim_ms gpuman run -- true)
	base_status=$(victim_ms gpuman status)
	# A reservation is believed on its file alone (no process holds it):
	# hers are opened up to twice the cap (64 a user), the rest cost a stat.
	as_user mallory sh -c 'cd "$1" && seq 100000 | sed "s/^/resv.1795853720130-1-/" | xargs touch' \
		- "$GPUMAN_STATE_DIR"
	[ "$(ls -f "$GPUMAN_STATE_DIR" | grep -c '^resv\.')" -ge 100000 ]
	run_ms=$(victim_ms gpuman run -- true)
	status_ms=$(victim_ms gpuman status)
	echo "# victim under 100,000 reservation files: run $run_ms ms (before: $base_run), status $status_ms ms (before: $base_status)" >&3
	[ $((run_ms - base_run)) -lt "$VICTIM_MS" ]
	[ $((status_ms - base_status)) -lt "$VICTIM_MS" ]
	victim_opens_few
}

@test "the registry caps a user's reservations as the broker does (64), and says so" {
	scenario eight <<'JSON'
{ "gpus": [ {"name":"a","memory_total_mib":16000}, {"name":"b","memory_total_mib":16000} ] }
JSON
	install -m 644 "$GPUMAN_SIM" "$FLOOD/two.json"
	export GPUMAN_SIM=$FLOOD/two.json
	for i in $(seq 64); do
		as_user mallory gpuman reserve --for 10m --mem 1M --json >/dev/null
	done
	run -75 as_user mallory gpuman reserve --for 10m --mem 1M
	[[ "$output" == *"gmtest-mallory has 64 reservations, the cap (64 a user); release some (gpuman release ID)"* ]]
	# hers only: another user reserves as before
	run -0 as_user alice gpuman reserve --for 10m --mem 1M --json
	run -0 gpuman status --json
	[ "$(jqr '[.leases[] | select(.reservation and .user == "gmtest-mallory")] | length')" = 64 ]
}

@test "a state directory with no inodes left says so and whose files fill it" {
	FULL=$(mktemp -d /tmp/gpuman-full.XXXXXX)
	chmod 755 "$FULL"
	mount -t tmpfs -o nr_inodes=300,size=4m,mode=1777 gpuman-full "$FULL" ||
		skip "cannot mount a small tmpfs here"
	export GPUMAN_STATE_DIR=$FULL
	as_user mallory sh -c 'cd "$1"; i=0; while touch lease.x$i 2>/dev/null; do i=$((i + 1)); done' \
		- "$FULL"
	run as_user alice gpuman run -- true
	[ "$status" -ne 0 ]
	[[ "$output" == *"no inodes left"* ]]
	[[ "$output" == *"user 'gmtest-mallory' owns"* ]]
	[[ "$output" == *"-user gmtest-mallory -delete"* ]]
	# a waiter's ticket, too
	as_user alice gpuman status >/dev/null
}
