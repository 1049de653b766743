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

@test "jobs start first come, first served as GPUs free up; one that no GPU can ever take is refused, or fails where the machine changed under it" {
	gpus 1
	for i in 1 2 3 4; do
		gpuman submit -- sh -c 'echo $GPUMAN_JOB >>order.txt; exec gpuman-simload --mem 1G --util 10 --seconds 0.3 --record rec.txt' >/dev/null
	done
	# refused at once, nothing queued
	run -75 gpuman submit -n 2 -- touch never-ran
	[[ "${lines[0]}" == "gpuman submit: no GPU of this machine can ever meet the request; the job was not queued" ]]
	[[ "$output" == *"GPU 0 (Sim)"* ]]
	run -75 gpuman submit --array 1-3 -n 2 -- touch never-ran
	[[ "$output" == *"can ever meet the request; no task was queued"* ]]
	run -0 gpuman queue --all --json
	[ "$(jqr length)" = 4 ]
	# the machine changes under the running dispatcher: a submit that sees
	# two GPUs queues the job, which the dispatcher (its simulator read one
	# GPU when it started, 1.2 s of jobs ago) fails, and runs the rest
	gpus 2
	run -0 gpuman submit -n 2 -- touch never-ran
	[ "$output" = 5 ]
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

@test "a submit like one queued in the last minute trusts its check; once such a job failed, or from another environment, it checks again" {
	# Without a broker the check loads the driver (24 ms of a real H200's
	# start-up): a sweep's submits of one request check once a minute.
	gpus 2
	run -0 gpuman submit -n 2 -- true
	run -0 gpuman wait 1
	dispatcher_gone
	gpus 1
	# another environment: checked, refused
	FOO=other run -75 gpuman submit -n 2 -- touch never-ran
	[[ "$output" == *"can ever meet the request; the job was not queued"* ]]
	# the same request and environment: queued; the dispatcher (which read
	# one GPU) fails it, saying why
	run -0 gpuman submit -n 2 -- touch never-ran
	[ "$output" = 2 ]
	run -1 gpuman wait 2
	[ "$output" = "2 failed: no GPU of this machine can ever meet the request; 1 GPU fits, the request needs 2 (-n)" ]
	# its failure undoes the check: the next like it is refused at once
	run -75 gpuman submit -n 2 -- touch never-ran
	[[ "$output" == *"can ever meet the request; the job was not queued"* ]]
	[ ! -e never-ran ]
	run -0 gpuman queue --all --json
	[ "$(jqr length)" = 2 ]
}

@test "the first queued job says why it waits, naming who holds the GPUs; the reason goes when it starts" {
	gpus 1
	gpuman submit -- sleep 60 >/dev/null
	gpuman submit -- true >/dev/null
	gpuman submit -- true >/dev/null
	wait_for '[ "$(gpuman queue --json | jq -r ".[1].reason")" != null ]'
	run -0 gpuman queue --json
	[[ "$(jqr '.[1].reason')" == "waiting for GPUs; GPU 0 (Sim): leased exclusively by $(id -un) (pid "*")" ]]
	# the job behind it waits for it, and says nothing of its own
	[ "$(jqr '.[2].reason')" = null ]
	run -0 gpuman queue
	[[ "${lines[3]}" == *"waiting for GPUs; GPU 0 (Sim): leased exclusively by"* ]]
	gpuman cancel 1
	run -0 gpuman wait 2 3
	run -0 gpuman queue --all --json
	[ "$(jqr '[.[] | select(.id > 1) | .reason] | unique | join(",")')" = "" ]
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

@test "kill -9 of the dispatcher at random moments, round after round of 15 queued jobs: every job ends exactly once" {
	gpus 8
	# Twenty rounds: queue 15 jobs (a submit starts a dispatcher if none
	# runs), then kill the dispatcher at a random moment while they are
	# being claimed, started, run or recorded.  The last job of a round
	# runs long enough that there is always a dispatcher to kill (0.3 s
	# was not, once, under a load average of 19: finding the dispatcher
	# takes several processes).
	# GM_ROUNDS: fewer under ASan (tests/run-all), where the 20 rounds
	# took six minutes of make check; the paths are the same each round.
	rounds=${GM_ROUNDS:-20}
	jobs=$((rounds * 15))
	kills=0
	for round in $(seq "$rounds"); do
		for i in $(seq 15); do
			secs=0.05
			[ "$i" != 15 ] || secs=1
			gpuman submit -- sh -c "echo \$GPUMAN_JOB >>marks.txt; exec gpuman-simload --mem 64M --util 10 --seconds $secs" >/dev/null
		done
		sleep "0.0$((RANDOM % 8 + 1))"
		# the dispatcher this round's submits started: on a loaded machine
		# (or under ASan) it may not hold its lock yet, so wait for it
		if wait_for 'd=$(dispatcher_pid)' && kill -9 "$d" 2>/dev/null; then
			kills=$((kills + 1))
		fi
	done
	# Most rounds find their dispatcher to kill; under ASan beside another
	# suite one in twenty or so has none (found in CI, not yet explained:
	# it is not the last job's length).  What is tested is what follows.
	echo "# dispatchers killed: $kills of $rounds" >&3
	[ "$((kills * 4))" -ge "$((rounds * 3))" ]
	# wait starts a dispatcher again, as often as needed
	run -0 gpuman wait $(seq "$jobs")
	# each job ran exactly once: its own marker says so ...
	[ "$(wc -l <marks.txt)" = "$jobs" ]
	[ "$(sort -n marks.txt | uniq | wc -l)" = "$jobs" ]
	# ... and the queue recorded each exactly once, as done, first attempt
	run -0 gpuman queue --all --json
	[ "$(jqr 'length')" = "$jobs" ]
	[ "$(jqr '[.[] | select(.state == "done" and .exit_status == 0 and .attempts == 1)] | length')" = "$jobs" ]
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

@test "a dispatcher that cannot start: wait and logs say why instead of hanging, queue shows it, the log once; mended, the jobs run" {
	gpus 1
	# the lease registry's directory is a file (a slip in a config): the
	# dispatcher cannot open it, which submit never needs to
	export GPUMAN_STATE_DIR=$BATS_TEST_TMPDIR/leases
	touch "$GPUMAN_STATE_DIR"
	gpuman submit -- sh -c 'echo ran >>a.txt' >/dev/null
	gpuman submit -- sh -c 'echo ran >>b.txt' >/dev/null
	run -124 timeout 5 gpuman wait 1 2
	[ "${#lines[@]}" = 1 ]
	[ "${lines[0]}" = "gpuman wait: job 1 is queued, waiting: the dispatcher cannot start: state directory '$GPUMAN_STATE_DIR' is not a directory; its jobs start once that is mended" ]
	run -124 timeout 4 gpuman logs -f 2
	[ "$output" = "gpuman logs: job 2 is queued, waiting: the dispatcher cannot start: state directory '$GPUMAN_STATE_DIR' is not a directory; its jobs start once that is mended" ]
	run -0 gpuman logs 2
	[ "${lines[1]}" = "gpuman logs: job 2 is queued, waiting: the dispatcher cannot start: state directory '$GPUMAN_STATE_DIR' is not a directory; its jobs start once that is mended" ]
	run -0 gpuman queue
	[[ "$output" == *"waiting: the dispatcher cannot start: state directory"* ]]
	run -0 gpuman queue --json
	[ "$(jq -r '[.[] | .state] | join(" ")' <<<"$output")" = "queued queued" ]
	[ "$(jq -r '[.[] | .reason | startswith("waiting: the dispatcher cannot start: ")] | all' <<<"$output")" = true ]
	# each wait started a dispatcher once a second; the log says it once
	[ "$(grep -c 'cannot start' "$GPUMAN_QUEUE_DIR/dispatcher.log")" = 1 ]
	[ ! -e a.txt ] && [ ! -e b.txt ]
	# mended: the next look starts a dispatcher that runs both, and the
	# reason goes
	rm "$GPUMAN_STATE_DIR"
	run -0 timeout 30 gpuman wait 1 2
	[ "$output" = "1 done
2 done" ]
	[ "$(cat a.txt b.txt)" = "ran
ran" ]
	run -0 gpuman queue --all --json
	[ "$(jq -r '[.[] | .reason] | unique | join(" ")' <<<"$output")" = "" ]
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

@test "submit \"A && B\" and --wrap run through /bin/sh -c as a batch line does; words after -- are exec'd as before" {
	gpus 1
	run -0 gpuman submit 'echo one && echo "two $GPUMAN_JOB" | tr a-z A-Z'
	id=$output
	run -0 gpuman wait "$id"
	[ "$output" = "$id done" ]
	run -0 gpuman logs "$id"
	[ "$output" = $'one\nTWO '"$id" ]
	run -0 gpuman submit --wrap 'test -n "$GPUMAN_GPUS" && echo wrapped'
	id=$output
	run -0 gpuman wait "$id"
	run -0 gpuman logs "$id"
	[ "$output" = wrapped ]
	# the queue shows the line itself, and argv says how it runs
	run -0 gpuman queue --all --json
	[ "$(jqr ".[] | select(.id == $id) | .command")" = 'test -n "$GPUMAN_GPUS" && echo wrapped' ]
	[ "$(jqr ".[] | select(.id == $id) | .argv | join(\"|\")")" = '/bin/sh|-c|test -n "$GPUMAN_GPUS" && echo wrapped' ]
	# after --: one argument is the program, exec'd without a shell
	run -0 gpuman submit -- 'echo no shell'
	id=$output
	run -1 gpuman wait "$id"
	# an array's {task} is filled in the line too
	run -0 gpuman submit --array 1-2 'echo task={task}'
	ids=$output
	run -0 gpuman wait $ids
	run -0 gpuman logs "${ids%% *}"
	[ "$output" = task=1 ]
}

@test "submit refuses a line that cannot run as written, when it is given: open quote, a slip of a placeholder, binary bytes" {
	gpus 1
	run -2 gpuman submit "echo 'unterminated"
	[[ "$output" == *"the command: the single quote opened at column 6 is never closed"* ]]
	run -2 gpuman submit --array 1-2 'echo {Task}'
	[[ "$output" == *"unknown placeholder '{Task}' (did you mean '{task}'?)"* ]]
	run -2 gpuman submit 'echo {gpu}'
	[[ "$output" == *"placeholder '{gpu}' is not filled in here"* ]]
	run -2 gpuman submit --wrap $'echo \x01\x02'
	[[ "$output" == *"--wrap: a control byte 0x01 at column 6"* ]]
	run -2 gpuman submit --wrap 'echo a' 'echo b'
	[[ "$output" == *"--wrap gives the command"* ]]
	# none of them was queued
	run -0 gpuman queue --all --json
	[ "$(jqr length)" = 0 ]
}

@test "submit takes Slurm's -J, -t (a bare number is minutes), --dependency=afterok and --gres=gpu:N, as gpuman's own options record them" {
	gpus 2
	run -0 gpuman submit -- true
	a=$output
	run -0 gpuman submit -- true
	b=$output
	run -0 gpuman wait "$a" "$b"
	run -0 gpuman submit --name sweep --time 90m --after "$a,$b" -n 2 -- sleep 0.2
	own=$output
	run -0 gpuman submit -J sweep -t 90 --dependency=afterok:"$a:$b" --gres=gpu:2 -- sleep 0.2
	slurm=$output
	run -0 gpuman submit --job-name sweep -t 1:30:00 --dependency afterok:"$a",afterok:"$b" -- sleep 0.2
	third=$output
	run -0 gpuman wait "$own" "$slurm" "$third"
	run -0 gpuman queue --all --json
	mine=$(jqr -c ".[] | select(.id == $own) | [.name, .time_limit_s, .after, .argv, (.gpus | length)]")
	[ "$mine" = '["sweep",5400,['"$a,$b"'],["sleep","0.2"],2]' ]
	[ "$(jqr -c ".[] | select(.id == $slurm) | [.name, .time_limit_s, .after, .argv, (.gpus | length)]")" = "$mine" ]
	[ "$(jqr -c ".[] | select(.id == $third) | [.name, .time_limit_s, .after]")" = '["sweep",5400,['"$a,$b"']]' ]
	# what means something else is refused, naming it
	run -2 gpuman submit --dependency=afterany:"$a" -- true
	[[ "$output" == *"'afterany' means something else"* ]]
	run -2 gpuman submit --dependency=afterok:"$a"?afterok:"$b" -- true
	[[ "$output" == *"'?' (any of them) has no equal"* ]]
	run -2 gpuman submit --gres=gpu:a100:1 -- true
	[[ "$output" == *"a GPU type is Slurm's to choose"* ]]
	run -2 gpuman submit -t 0 -- true
	[[ "$output" == *"-t '0': a limit must be at least 1s"* ]]
	# gpuman's -n is GPUs, and its help says Slurm's counts tasks
	run -0 gpuman submit --help
	[[ "$output" == *"Slurm's -n counts tasks"* ]]
}

@test "logs of a job that waits for GPUs says who holds them, once; wait does not" {
	gpus 1
	gpuman run -- sh -c 'while [ ! -e go ]; do sleep 0.05; done' &
	holder=$!
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	run -0 gpuman submit -- echo hello
	wait_for 'gpuman queue --json | jq -e ".[0].reason // \"\" | startswith(\"waiting for GPUs\")" >/dev/null'
	run -0 gpuman logs 1
	[ "${lines[0]}" = "gpuman logs: job 1 has not started yet" ]
	[[ "${lines[1]}" =~ ^"gpuman logs: job 1 is queued, waiting for GPUs; GPU 0 (Sim): leased exclusively by root (pid "[0-9]+")"$ ]]
	gpuman logs -f 1 >out.txt 2>err.txt &
	follow=$!
	timeout 5 gpuman wait 1 >wait.out 2>wait.err &
	sleep 1.5 # the holder stays: said once all the same
	touch go
	wait "$holder" "$follow"
	[ "$(cat out.txt)" = hello ]
	[ "$(grep -c 'waiting for GPUs' err.txt)" = 1 ]
	wait
	[ "$(cat wait.out)" = "1 done" ]
	[ ! -s wait.err ]
}
