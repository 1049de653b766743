#!/usr/bin/env bats
# Limits: durations out of range, a full disk.  Nothing overflows, hangs or
# records a false result.

load helpers

one_gpu() {
	scenario one <<'JSON'
{ "gpus": [ {"name":"only","memory_total_mib":16000} ] }
JSON
}

@test "a --wait too long to represent is refused at once, saying the limit" {
	one_gpu
	for cmd in "run" "batch" "submit"; do
		run -2 timeout 10 gpuman $cmd --wait=106751991167.9d -- true
		[[ "$output" == *"--wait '106751991167.9d': '106751991167.9d' is too long (at most 3650d)"* ]]
	done
	run -0 timeout 10 gpuman run --wait=3650d -- true
}

teardown() {
	[ -z "${SMALL:-}" ] || umount -l "$SMALL" 2>/dev/null || true
}

@test "a disk that fills up while a task runs: the task that succeeded is recorded done, once, never as a dead runner" {
	[ "$(id -u)" = 0 ] || skip "needs root to mount a small tmpfs (CI runs as root)"
	one_gpu
	cd "$BATS_TEST_TMPDIR"
	mkdir small
	mount -t tmpfs -o size=2m,mode=0700 tmpfs small || skip "cannot mount a tmpfs here"
	SMALL=$PWD/small
	# The task fills the disk of its log directory (and of the batch's
	# store and run files), then succeeds.
	echo "sh -c 'echo ran >>$PWD/runs; cat /dev/zero >$SMALL/logs/filler; exit 0'" >tasks.txt
	run timeout 60 gpuman batch --log-dir small/logs tasks.txt
	[[ "$output" != *"runner died"* ]]
	[ "$(df --output=avail "$SMALL" | tail -1 | tr -d " ")" = 0 ]
	# Whatever could not be recorded on the full disk is recorded once
	# there is room, from the result the runner kept; nothing runs again.
	rm "$SMALL/logs/filler"
	run -0 timeout 60 gpuman batch --resume --log-dir small/logs tasks.txt
	[ "$(jq -r '.tasks[0].state' small/logs/summary.json)" = done ]
	[ "$(jq -r '.tasks[0].exit_status' small/logs/summary.json)" = 0 ]
	[ "$(wc -l <runs)" = 1 ]
}

@test "a queued job whose lease cannot be written on a full disk says so in gpuman queue, once in the log, and starts once there is room" {
	[ "$(id -u)" = 0 ] || skip "needs root to mount a small tmpfs (CI runs as root)"
	one_gpu
	cd "$BATS_TEST_TMPDIR"
	mkdir small
	mount -t tmpfs -o size=1m tmpfs small || skip "cannot mount a tmpfs here"
	SMALL=$PWD/small
	export GPUMAN_STATE_DIR=$SMALL/state
	cat /dev/zero >"$SMALL/filler" 2>/dev/null || true
	run -0 gpuman submit -- sh -c "echo ran >$PWD/ran"
	wait_for "gpuman queue | grep -q 'waiting: cannot lease GPUs:'"
	run -0 gpuman queue
	[[ "$output" == *"the file system of the state directory is full"*"it starts once that is mended"* ]]
	[ "$(jq -r '.[0].state' <<<"$(gpuman queue --json)")" = queued ]
	# the dispatcher tries again each round, and says it once
	sleep 2.5
	[ "$(grep -c 'waiting: cannot lease GPUs' "$GPUMAN_QUEUE_DIR/dispatcher.log")" = 1 ]
	# room again: it runs, and its record no longer says it waits
	rm "$SMALL/filler"
	run -0 timeout 30 gpuman wait 1
	[ -e ran ]
	run -0 gpuman queue --all --json
	[ "$(jq -r '.[0].state' <<<"$output")" = done ]
	[ "$(jq -r '.[0].reason' <<<"$output")" = null ]
}
