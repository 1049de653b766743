#!/usr/bin/env bats
# Jobs die whole: whatever way a job ends (its runner killed with kill -9,
# cancel, its command exiting), every process it started ends before its
# lease is released and its end recorded, and --resume never runs a task
# beside what is left of its last run.  Proved by the pids the jobs record.

load helpers

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
	# job.sh N - a job that forks: a background child, a grandchild in a
	# subshell, and a child in a session of its own (out of the job's
	# process group), recording every pid.  With ./quick it only records
	# how many processes of earlier runs are still alive, and ends.
	cat >job.sh <<'SH'
#!/bin/sh
d=$(dirname "$0")
if [ -e "$d/quick" ]; then
	alive=0
	for p in $(cat "$d/pids"); do
		s=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -c1)
		[ -n "$s" ] && [ "$s" != Z ] && alive=$((alive + 1))
	done
	echo "quick $1 alive=$alive" >>"$d/runs"
	exit 0
fi
echo "run $1 $$" >>"$d/runs"
sleep 1000 & echo $! >>"$d/pids"
(sleep 1000 & echo $! >>"$d/pids"; wait) & echo $! >>"$d/pids"
setsid sleep 1000 & echo $! >>"$d/pids"
echo $$ >>"$d/pids"
wait
SH
	printf 'sh %s/job.sh {task}\n' "$PWD" "$PWD" >tasks.txt
	scenario two <<'JSON'
{ "gpus": [ {"name":"a","memory_total_mib":16000}, {"name":"b","memory_total_mib":16000} ] }
JSON
}

teardown() {
	[ -z "${pid:-}" ] || kill -9 "$pid" 2>/dev/null || true
	[ ! -e pids ] || kill -9 $(cat pids) 2>/dev/null || true
}

leases() {
	gpuman status --json | jq '.leases | length'
}

# alive - how many recorded pids still run (a zombie has ended: it waits
# for whoever inherited it to reap it)
alive() {
	local n=0 p s
	for p in $(cat pids); do
		s=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -c1)
		[ -n "$s" ] && [ "$s" != Z ] && n=$((n + 1))
	done
	echo "$n"
}

@test "kill -9 of the runners of jobs that fork: no process of a job survives its record, no lease outlives it" {
	gpuman batch tasks.txt >out.txt 2>&1 &
	pid=$!
	wait_lines 10 pids
	[ "$(alive)" = 10 ]
	runners=$(pgrep -P "$pid" -x gpuman-runner)
	[ "$(echo "$runners" | wc -w)" = 2 ]
	kill -9 $runners
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" = 1 ]
	# The batch has recorded both tasks: by then every process is gone.
	[ "$(alive)" = 0 ]
	grep -q '2 tasks: 0 done, 2 failed' out.txt
	[ "$(jq -r '[.tasks[].reason] | unique[]' gpuman-logs/tasks.txt/summary.json)" = \
		"runner died: its supervisor was killed before it recorded a result (the job was killed with it)" ]
	[ "$(leases)" = 0 ]
}

@test "batch and its runners killed: --resume ends the survivors before it runs the tasks again, once each" {
	setsid gpuman batch tasks.txt >out.txt 2>&1 &
	pid=$!
	wait_lines 10 pids
	runners=$(pgrep -P "$pid" -x gpuman-runner)
	kill -9 "$pid" $runners
	# Nobody is left to end the jobs' processes: they live on.
	sleep 0.2
	[ "$(alive)" -ge 6 ]
	touch quick
	run -0 timeout 60 gpuman batch --resume tasks.txt
	[ "$(alive)" = 0 ]
	[ "$(grep -c '^quick' runs)" = 2 ]
	[ "$(grep -c 'alive=0' runs)" = 2 ]
	[ "$(leases)" = 0 ]
}

@test "cancel ends a queued job's whole tree, its own session included" {
	gpuman submit -- sh "$PWD/job.sh" 1 >/dev/null
	wait_lines 5 pids
	run -0 gpuman cancel 1
	run -1 timeout 30 gpuman wait 1
	[ "$(alive)" = 0 ]
	[ "$(leases)" = 0 ]
}

@test "gpuman run: what the command leaves running ends with it, before the GPU is free again" {
	run -0 gpuman run -- sh -c 'setsid sleep 1000 & echo $! >pids; sleep 1000 & echo $! >>pids'
	[ "$(alive)" = 0 ]
	[ "$(leases)" = 0 ]
}

@test "Ctrl-C of a batch ends its tasks' whole trees before it records them interrupted" {
	# its own process group, signalled whole, as a terminal does
	setsid gpuman batch tasks.txt >out.txt 2>&1 &
	pid=$!
	wait_lines 10 pids
	kill -INT -- -"$pid"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" = 130 ]
	[ "$(alive)" = 0 ]
	[ "$(jq -r '[.tasks[].state] | join(" ")' gpuman-logs/tasks.txt/summary.json)" = \
		"interrupted interrupted" ]
	[ "$(leases)" = 0 ]
}
