#!/usr/bin/env bats
# The persistent per-user queue: submit, queue, cancel, logs, wait, and its
# dispatcher, which may die at any moment without losing or repeating a job.
# What ran is proved by the jobs' own marker files and simload records.

load helpers
load helpers/queue

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() { queue_teardown; }

@test "submit records the working directory and environment; wait, logs and queue --json report the job" {
	gpus 2
	mkdir -p work/sub
	cd work/sub
	FOO=bar run -0 gpuman submit -- sh -c 'pwd >where.txt; echo "$FOO $GPUMAN_JOB $GPUMAN_GPUS"; echo to-stderr >&2'
	[ "$output" = 1 ]
	cd "$BATS_TEST_TMPDIR"
	run -0 gpuman wait 1
	[ "$output" = "1 done" ]
	[ "$(cat work/sub/where.txt)" = "$BATS_TEST_TMPDIR/work/sub" ]
	run -0 gpuman logs 1
	[[ "${lines[0]}" == "bar 1 "[01] ]]
	gpu=${lines[0]##* }
	[ "${lines[1]}" = to-stderr ]
	run -0 gpuman queue --all --json
	[ "$(jqr 'length')" = 1 ]
	[ "$(jqr '.[0] | "\(.id) \(.state) \(.exit_status) \(.attempts) \(.argv[0]) \(.cwd)"')" = \
		"1 done 0 1 sh $BATS_TEST_TMPDIR/work/sub" ]
	[ "$(jqr '.[0].gpus[0].index')" = "$gpu" ]
	[ "$(jqr '.[0].gpus[0].uuid')" = "GPU-00000000-0000-0000-0000-00000000000$gpu" ]
	[ "$(jqr '.[0] | (.submit_ms <= .start_ms and .start_ms <= .end_ms)')" = true ]
	[ -s "$(jqr '.[0].log')" ]
	# nothing is queued or running: the default listing says so
	run -0 gpuman queue
	[[ "$output" == *"no queued or running jobs"* ]]
	# the queue is its user's alone
	[ "$(stat -c %a "$GPUMAN_QUEUE_DIR")" = 700 ]
	[ "$(stat -c %a "$GPUMAN_QUEUE_DIR/jobs.db")" = 600 ]
	[ "$(stat -c %a "$GPUMAN_QUEUE_DIR/logs/1.log")" = 600 ]
	dispatcher_gone
}

@test "wait exits 1 when a job failed, 2 for an unknown id; queue --all says why" {
	gpus 1
	run -0 gpuman submit -- sh -c 'exit 3'
	run -1 gpuman wait 1
	[ "$output" = "1 failed: exit status 3" ]
	run -0 gpuman queue --all
	[[ "$output" == *"failed"*"exit status 3"* ]]
	run -2 gpuman wait 1 99
	run -2 gpuman wait abc
	run -2 gpuman logs 99
	run -2 gpuman cancel 99
	run -2 gpuman submit
}

@test "jobs start first come, first served as GPUs free up; one that no GPU can ever take fails" {
	gpus 1
	for i in 1 2 3 4; do
		gpuman submit -- sh -c 'echo $GPUMAN_JOB >>order.txt; exec gpuman-simload --mem 1G --util 10 --seconds 0.1 --record rec.txt' >/dev/null
	done
	run -0 gpuman submit -n 2 -- touch never-ran
	run -1 gpuman wait 1 2 3 4 5
	[ "$(tr '\n' ' ' <order.txt)" = "1 2 3 4 " ]
	[ "$(grep -c '^start ' rec.txt)" = 4 ]
	[[ "$output" == *"5 failed: no GPU of this machine can ever meet the request"* ]]
	[ ! -e never-ran ]
	# one GPU: the four runs followed each other
	python3 - <<'EOF'
runs = {}
for line in open('rec.txt'):
    what, pid, uuid, ns = line.split()
    runs.setdefault(pid, {})[what] = int(ns)
iv = sorted((r['start'], r['end']) for r in runs.values())
assert all(a[1] <= b[0] for a, b in zip(iv, iv[1:])), iv
EOF
}

@test "cancel: a queued job never starts; a running one is stopped and recorded as cancelled" {
	gpus 1
	gpuman submit -- gpuman-simload --mem 1G --util 10 --seconds 30 --record "$BATS_TEST_TMPDIR/rec.txt" >/dev/null
	gpuman submit -- touch b-ran >/dev/null
	wait_lines 1 rec.txt
	run -0 gpuman cancel 2
	[ "$output" = "2 cancelled" ]
	run -0 gpuman cancel 1
	[[ "$output" == "1 cancelling (running on GPU 0)" ]]
	run -1 gpuman wait 1 2
	[ "${lines[0]}" = "1 cancelled: cancelled" ]
	[[ "${lines[1]}" == "2 cancelled: cancelled before it started" ]]
	[ ! -e b-ran ]
	# the job got SIGTERM and ended (simload records its end)
	[ "$(grep -c '^end ' rec.txt)" = 1 ]
	run -0 gpuman queue --all --json
	[ "$(jqr '.[0].exit_status')" = 143 ]
	run -1 gpuman cancel 1
	[[ "$output" == *"already ended"* ]]
	# the GPU is free again
	run -0 gpuman pick
}

@test "concurrent submits start one dispatcher, which exits when the queue is empty" {
	gpus 4
	for i in $(seq 20); do
		gpuman submit -- sh -c 'echo $GPUMAN_JOB >>marks.txt' >>ids.txt &
	done
	wait
	[ "$(sort -n ids.txt | uniq | wc -l)" = 20 ]
	run -0 gpuman wait $(cat ids.txt)
	[ "$(sort -n marks.txt | tr '\n' ' ')" = "$(seq 20 | tr '\n' ' ')" ]
	dispatcher_gone
	# starting again later works as the first time did
	run -0 gpuman submit -- sh -c 'echo again >>marks.txt'
	run -0 gpuman wait 21
	[ "$(tail -1 marks.txt)" = again ]
}

@test "kill -9 of the dispatcher at random moments, 20 times, during a 300-job queue: every job ends exactly once" {
	gpus 8
	# Twenty rounds: queue 15 jobs (a submit starts a dispatcher if none
	# runs), then kill the dispatcher at a random moment while they are
	# being claimed, started, run or recorded.  The last job of a round
	# runs long enough that there is always a dispatcher to kill.
	kills=0
	for round in $(seq 20); do
		for i in $(seq 15); do
			secs=0.05
			[ "$i" != 15 ] || secs=0.3
			gpuman submit -- sh -c "echo \$GPUMAN_JOB >>marks.txt; exec gpuman-simload --mem 64M --util 10 --seconds $secs" >/dev/null
		done
		sleep "0.0$((RANDOM % 8 + 1))"
		# the dispatcher this round's submits started: on a loaded machine
		# (or under ASan) it may not hold its lock yet, so wait for it
		if wait_for 'd=$(dispatcher_pid)' && kill -9 "$d" 2>/dev/null; then
			kills=$((kills + 1))
		fi
	done
	[ "$kills" = 20 ]
	# wait starts a dispatcher again, as often as needed
	run -0 gpuman wait $(seq 300)
	# each job ran exactly once: its own marker says so ...
	[ "$(wc -l <marks.txt)" = 300 ]
	[ "$(sort -n marks.txt | uniq | wc -l)" = 300 ]
	# ... and the queue recorded each exactly once, as done, first attempt
	run -0 gpuman queue --all --json
	[ "$(jqr 'length')" = 300 ]
	[ "$(jqr '[.[] | select(.state == "done" and .exit_status == 0 and .attempts == 1)] | length')" = 300 ]
	[ -z "$(ls "$GPUMAN_STATE_DIR" | grep '^lease\.' || true)" ]
}

@test "a dead dispatcher is restarted by the next queue, wait or logs" {
	gpus 1
	gpuman submit -- gpuman-simload --mem 1G --util 10 --seconds 1 --record rec.txt >/dev/null
	gpuman submit -- sh -c 'echo ran >>b.txt' >/dev/null
	wait_lines 1 rec.txt
	d=$(dispatcher_pid)
	kill -9 "$d"
	run -0 gpuman logs -f 2
	[ "$(cat b.txt)" = ran ]
	run -0 gpuman wait 1 2
	[ "$(grep -c '^start ' rec.txt)" = 1 ]
	[ "$(grep -c '^end ' rec.txt)" = 1 ]
}

@test "a job whose runner is killed is recorded as failed, and its process goes with it" {
	gpus 1
	gpuman submit -- gpuman-simload --mem 1G --util 10 --seconds 30 --record rec.txt >/dev/null
	wait_lines 1 rec.txt
	job=$(awk '/^start/ {print $2}' rec.txt)
	runner=$(pgrep -f "gpuman-runner .*--lease-path=$GPUMAN_STATE_DIR/")
	kill -9 "$runner"
	run -1 gpuman wait 1
	[[ "$output" == "1 failed: runner died"* ]]
	for _ in $(seq 100); do
		kill -0 "$job" 2>/dev/null || break
		sleep 0.05
	done
	run ! kill -0 "$job"
	run -0 gpuman pick
}

@test "logs -f follows a job's output until it ends" {
	gpus 1
	gpuman submit -- sh -c 'echo one; sleep 0.5; echo two' >/dev/null
	run -0 gpuman logs -f 1
	[ "$output" = "$(printf 'one\ntwo')" ]
}
