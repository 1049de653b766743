#!/usr/bin/env bats
# The daemonless registry's line (issue 19 item 5): a release wakes only
# the waiters next to the head, so a waiter must still be served when
# those it sleeps behind stop (Ctrl-Z) or die (kill -9) in the middle of
# the line.

load helpers
load helpers/queue

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
	scenario one <<'JSON'
{ "gpus": [ {"name":"only","memory_total_mib":16000} ] }
JSON
}

teardown() {
	[ -z "${FREEZER:-}" ] || freeze 0 2>/dev/null || true
	for p in ${BG_PIDS:-}; do
		kill -CONT "$p" 2>/dev/null || true
		# its job first: a gpuman run killed with -9 leaves it running,
		# and bats waits for it (a holder's sleep 300) before it ends
		pkill -9 -P "$p" 2>/dev/null || true
		kill -9 "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	[ -z "${FREEZER:-}" ] || rmdir "$FREEZER" 2>/dev/null || true
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

# served N SECONDS - wait until N waiters have written ./order, or SECONDS pass
served() {
	for _ in $(seq $(($2 * 2))); do
		[ "$(grep -c . order 2>/dev/null)" = "$1" ] && return
		sleep 0.5
	done
}

@test "two stopped waiters in the middle of the line hold back nobody behind them" {
	line 5
	kill -STOP "$W2" "$W3"
	kill "$HOLDER"
	# 1, then 4 and 5 behind the stopped pair: within the pair's recheck
	# (10 s), not when the pair resumes
	served 3 30
	[ "$(tr '\n' ' ' <order)" = "1 4 5 " ]
	kill -CONT "$W2" "$W3"
	wait "$W2" "$W3"
	[ "$(tr '\n' ' ' <order)" = "1 4 5 2 3 " ]
}

@test "a waiter whose far blocker is served and whose near one stops is served within seconds" {
	line 3
	# 3 sleeps behind 2 and 1; 1 served, it reads nothing and waits on 2
	# alone, which it looks at every second: stopped, 2 holds nothing back
	kill -STOP "$W2"
	kill "$HOLDER"
	served 2 5
	[ "$(tr '\n' ' ' <order)" = "1 3 " ]
	kill -CONT "$W2"
	wait "$W2"
	[ "$(tr '\n' ' ' <order)" = "1 3 2 " ]
}

@test "a waiting arrival queues while another process holds the registry lock, and is served after" {
	gpuman run -- sleep 300 &
	HOLDER=$!
	BG_PIDS="$HOLDER"
	wait_for 'ls "$GPUMAN_STATE_DIR" | grep -q "^lease\."'
	# The registry lock is a flock of the directory itself.
	flock "$GPUMAN_STATE_DIR" sleep 6 &
	LOCKER=$!
	BG_PIDS="$BG_PIDS $LOCKER"
	sleep 0.3
	gpuman run --wait -- sh -c 'echo served >> order' &
	W=$!
	BG_PIDS="$BG_PIDS $W"
	# Its place is taken while the lock is still held (a read without the
	# lock shows that it must wait), not after the lock is given up.
	wait_for 'test "$(tickets)" = 1' 3
	kill -0 "$LOCKER"
	kill "$HOLDER"
	wait "$W"
	[ "$(cat order)" = served ]
}

@test "arrivals that find a GPU free but the registry lock held take their places first, and are served in order" {
	gpuman run -- true # makes the state directory
	flock "$GPUMAN_STATE_DIR" sleep 3 &
	LOCKER=$!
	BG_PIDS="$LOCKER"
	sleep 0.3
	for i in 1 2 3; do
		gpuman run --wait -- sh -c 'echo "$1" >> order; sleep 0.2' sh "$i" 2>err$i &
		eval "W$i=$!"
		BG_PIDS="$BG_PIDS $!"
		# In line while the lock is still held: no queue on the lock,
		# where the kernel would wake them in any order.
		wait_for "test \"\$(tickets)\" = $i" 3
	done
	kill -0 "$LOCKER"
	# Without --wait an arrival takes no place: it waits for the lock,
	# then finds the line ahead of it.
	gpuman run -- true 2>nowait &
	NOWAIT=$!
	sleep 0.3
	[ "$(tickets)" = 3 ]
	wait "$W1" "$W2" "$W3"
	[ "$(cat order | tr '\n' ' ')" = "1 2 3 " ]
	run wait "$NOWAIT"
	[ "$status" = 75 ]
	grep -q 'held for earlier requests in line' nowait
	# The first was served once the lock was free: it was never told to
	# wait for GPUs.  The second found the first's job on the GPU: it was.
	! grep -q 'waiting for GPUs' err1 || false
	grep -q 'waiting for GPUs' err2
}

@test "an arrival that must wait never takes the registry lock, free or not, to queue" {
	command -v strace >/dev/null || skip "strace is missing (scripts/ensure-deps check installs it)"
	gpuman run -- sleep 300 &
	HOLDER=$!
	BG_PIDS="$HOLDER"
	wait_for 'ls "$GPUMAN_STATE_DIR" | grep -q "^lease\."'
	gpuman run --wait -- true &
	BG_PIDS="$BG_PIDS $!"
	wait_for 'test "$(tickets)" = 1'
	# Behind that waiter, the arrival sleeps until its wait runs out: it
	# never attempts under the lock, so it must never take it (in a burst
	# a holder preempted among hundreds of arrivals kept the hand-offs
	# waiting 15-30 ms a hold).
	run strace -f -e trace=openat,flock -o calls gpuman run --wait=1s -- true
	[ "$status" = 75 ]
	[[ "$output" == *"no GPU met the request within the wait"* ]]
	# The lock's descriptors: the state directory opened to be flocked
	# (a read of it opens it O_NONBLOCK, as opendir does).
	fds=$(grep -F "\"$GPUMAN_STATE_DIR\", O_" calls | grep O_DIRECTORY | grep -v O_NONBLOCK |
		sed -n 's/.*= \([0-9]*\)$/\1/p')
	[ -n "$fds" ]
	for fd in $fds; do
		run grep -E "flock\($fd, LOCK_EX" calls
		[ "$status" = 1 ]
	done
	grep -Eq 'flock\([0-9]+, LOCK_EX\|LOCK_NB\) += 0' calls # its ticket's own lock
}

@test "an arrival behind a line queues before it reads a lease, and a wait that runs out says why" {
	command -v strace >/dev/null || skip "strace is missing (scripts/ensure-deps check installs it)"
	line 2
	# A read of the line from its head cost each arrival of a burst about
	# a millisecond, and every hand-off waited behind the burst.
	run strace -e trace=openat -o calls gpuman run --wait=1s -- true
	[ "$status" = 75 ]
	[[ "$output" == *"held for earlier requests in line, the first"* ]]
	queued=$(grep -n '\.tmp\.wait\.' calls | head -1 | cut -d: -f1)
	first_lease=$(grep -n '"lease\.' calls | head -1 | cut -d: -f1)
	echo "ticket made at call $queued, first lease read at call $first_lease"
	[ -n "$queued" ] && [ -n "$first_lease" ]
	((queued < first_lease))
}

@test "an arrival that queues on sight of a line still takes at once a GPU nobody in it can use" {
	scenario two <<'JSON'
{ "gpus": [ {"name":"g0","memory_total_mib":16000}, {"name":"g1","memory_total_mib":16000} ] }
JSON
	gpuman run --only 0 -- sleep 300 &
	BG_PIDS="$!"
	wait_for 'ls "$GPUMAN_STATE_DIR" | grep -q "^lease\."'
	for i in 1 2; do
		gpuman run --only 0 --wait -- true 2>/dev/null &
		BG_PIDS="$BG_PIDS $!"
		wait_for "test \"\$(tickets)\" = $i"
	done
	run -0 timeout 10 gpuman run --wait -- sh -c 'echo "$GPUMAN_GPUS"'
	[ "${lines[-1]}" = 1 ]
	[ "$(tickets)" = 2 ]
}

@test "kill -9 of waiters in the middle of the line: those behind them are served in order" {
	line 5
	kill -9 "$W2" "$W3"
	kill "$HOLDER"
	wait "$W5"
	[ "$(tr '\n' ' ' <order)" = "1 4 5 " ]
}

# freezer DIR - a cgroup whose tasks can be frozen (v1 freezer or v2
# cgroup.freeze) into DIR's path; skips the test where there is none.
freezer() {
	local base
	if [ -w /sys/fs/cgroup/freezer/cgroup.procs ]; then
		base=/sys/fs/cgroup/freezer
	elif [ -f /sys/fs/cgroup/cgroup.controllers ] && [ -w /sys/fs/cgroup/cgroup.procs ]; then
		base=/sys/fs/cgroup
	else
		skip "no cgroup freezer here"
	fi
	FREEZER="$base/gm-line-$$-$BATS_TEST_NUMBER"
	mkdir "$FREEZER" || skip "cannot make a cgroup under $base"
}

freeze() { # freeze 1|0
	if [ -f "$FREEZER/freezer.state" ]; then
		if [ "$1" = 1 ]; then echo FROZEN; else echo THAWED; fi >"$FREEZER/freezer.state"
	else
		echo "$1" >"$FREEZER/cgroup.freeze"
	fi
}

@test "a head of the line that has not yet taken the GPUs freed for it keeps them from a newcomer" {
	scenario two <<'JSON'
{ "gpus": [ {"name":"g0","memory_total_mib":16000}, {"name":"g1","memory_total_mib":16000} ] }
JSON
	freezer
	gpuman run -- sleep 300 &
	h1=$!
	gpuman run -- sleep 300 &
	h2=$!
	BG_PIDS="$h1 $h2"
	wait_for 'test "$(ls "$GPUMAN_STATE_DIR" | grep -c "^lease\.")" = 2'
	# Two waiters, running but frozen: alive in line, too slow to take
	# what frees up.  A read that stops at the first (it alone holds back
	# both GPUs) would give the second's GPU to the newcomer.
	for i in 1 2; do
		sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$FREEZER" \
		    gpuman run --wait -- sh -c 'echo "$1" >> order' sh "$i" 2>/dev/null &
		BG_PIDS="$BG_PIDS $!"
		wait_for "test \"\$(tickets)\" = $i"
	done
	freeze 1
	kill "$h1" "$h2"
	wait_for 'test "$(ls "$GPUMAN_STATE_DIR" | grep -c "^lease\.")" = 0'
	run gpuman run -- sh -c 'echo new >> order'
	freeze 0
	[ "$status" -eq 75 ]
	[[ "$output" == *"served first in line"* ]]
	wait_for 'test "$(grep -c . order 2>/dev/null)" = 2'
	! grep -q new order || false
}

@test "a queued job keeps its place in line: run --wait arrivals after it are served after it" {
	gpuman run -- sleep 300 &
	HOLDER=$!
	BG_PIDS="$HOLDER"
	wait_for 'ls "$GPUMAN_STATE_DIR" | grep -q "^lease\."'
	gpuman submit -- sh -c 'echo queued >> "$1"' sh "$PWD/order" >/dev/null
	# Its dispatcher tried, was told "not now", and keeps a ticket.
	wait_for 'test "$(tickets)" = 1'
	for i in 1 2; do
		gpuman run --wait -- sh -c 'echo "$1" >> order' sh "$i" 2>/dev/null &
		BG_PIDS="$BG_PIDS $!"
		wait_for "test \"\$(tickets)\" = $((i + 1))"
	done
	kill "$HOLDER"
	wait_for 'test "$(grep -c . order 2>/dev/null)" = 3'
	[ "$(tr '\n' ' ' <order)" = "queued 1 2 " ]
	run -0 gpuman wait 1
}

@test "a queued job cancelled while it keeps its place gives the place up: those behind it are served" {
	scenario two <<'JSON'
{ "gpus": [ {"name":"g0","memory_total_mib":16000}, {"name":"g1","memory_total_mib":16000} ] }
JSON
	gpuman run --only 0 -- sleep 300 &
	HOLDER=$!
	BG_PIDS="$HOLDER"
	run -0 gpuman submit --only 1 -- sleep 300
	wait_for 'test "$(ls "$GPUMAN_STATE_DIR" | grep -c "^lease\.")" = 2'
	run -0 gpuman submit -- true
	wait_for 'test "$(tickets)" = 1'
	gpuman run --wait -- sh -c 'echo served >> order' 2>/dev/null &
	BG_PIDS="$BG_PIDS $!"
	wait_for 'test "$(tickets)" = 2'
	# its dispatcher still runs job 1, and gives job 2's place up
	run -0 gpuman cancel 2
	wait_for 'test "$(tickets)" = 1'
	kill "$HOLDER"
	wait_for 'grep -q served order'
	gpuman cancel 1 >/dev/null
	dispatcher_gone
}

@test "the queue's dispatcher held back by the line learns it still waits without the registry lock" {
	command -v strace >/dev/null || skip "strace is missing (scripts/ensure-deps check installs it)"
	line 1
	# The dispatcher wakes at every change of the registry and tries its
	# head job again; each try the line refused once took the lock.
	strace -ff -e trace=openat,flock -o "$BATS_TEST_TMPDIR/calls" \
		gpuman submit -- true >/dev/null &
	traced=$!
	BG_PIDS="$BG_PIDS $traced"
	# Its dispatcher up, without a command that would start one untraced
	# (`gpuman queue` starts one if it finds the job before submit does).
	wait_for 'dispatcher_pid >/dev/null'
	sleep 0.3 # its first try made
	# Eight changes it wakes on: arrivals that queue, give up and leave.
	for i in $(seq 8); do
		run -75 gpuman run --wait=0.2s -- true
	done
	kill "$HOLDER"
	wait "$W1"
	run -0 gpuman wait 1
	wait "$traced"
	# Its takes of the lock: flocks of the state directory's descriptors
	# (a read of it opens it O_NONBLOCK, as opendir does), process by
	# process.  One for the grant at the end, and one more for each read
	# that met a hand-off half done (the waiter served unlocks its ticket
	# before its lease is published); a try after each of the eight
	# arrivals left took one more each (11-15 on the build before).
	takes=0
	for f in "$BATS_TEST_TMPDIR"/calls.*; do
		fds=$(grep -F "\"$GPUMAN_STATE_DIR\", O_" "$f" | grep O_DIRECTORY |
			grep -v O_NONBLOCK | sed -n 's/.*= \([0-9]*\)$/\1/p')
		for fd in $fds; do
			takes=$((takes + $(grep -cE "flock\($fd, LOCK_EX" "$f" || true)))
		done
	done
	echo "the dispatcher and its runner took the registry lock $takes times"
	((takes >= 1 && takes <= 5))
}
