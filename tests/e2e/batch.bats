#!/usr/bin/env bats
# gpuman batch on simulated machines.  What ran, where and when is proved
# by the tasks' own records (gpuman-simload --record, marker files the tasks
# write), not by what gpuman says about them.

load helpers

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	# A batch a failed test left running goes with it.
	[ -z "${pid:-}" ] || kill -9 -- -"$pid" 2>/dev/null || true
	[ -z "${SHARED:-}" ] || rm -rf "$SHARED"
}

# gpus FILE SPEED... - a scenario of identical 16000 MiB GPUs, one per
# speed, with UUIDs GPU-00000000-0000-0000-0000-00000000000<index>.
gpus() {
	local file=$1 i=0 sep=
	shift
	{
		printf '{ "driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": ['
		for s in "$@"; do
			printf '%s\n{ "name": "Sim %s", "uuid": "GPU-00000000-0000-0000-0000-00000000000%d", ' \
				"$sep" "$s" "$i"
			printf '"memory_total_mib": 16000, "memory_used_mib": 0, "utilization_gpu": 0, '
			printf '"speed": %s, "processes": [] }' "$s"
			sep=,
			i=$((i + 1))
		done
		printf '] }\n'
	} >"$file"
	export GPUMAN_SIM=$file
}

# no_overlap RECORD... - no two simload runs overlapped on one GPU (the
# records' "start PID UUID NS" / "end PID UUID NS" lines), and every start
# has its end.  Prints the number of runs.
no_overlap() {
	python3 - "$@" <<'EOF'
import sys, collections
runs = {}
for f in sys.argv[1:]:
    for line in open(f):
        what, pid, uuid, ns = line.split()
        runs.setdefault((f, pid, uuid), {})[what] = int(ns)
by_gpu = collections.defaultdict(list)
for (f, pid, uuid), r in runs.items():
    assert 'start' in r and 'end' in r, f"run {pid} on {uuid} has no start or end"
    by_gpu[uuid].append((r['start'], r['end'], pid))
for uuid, iv in by_gpu.items():
    iv.sort()
    for a, b in zip(iv, iv[1:]):
        assert a[1] <= b[0], f"{uuid}: pid {a[2]} and pid {b[2]} overlapped"
print(len(runs))
EOF
}

@test "a 40-task sweep on a mixed 8-GPU machine: each task once, no GPU shared, fast GPUs take more" {
	gpus mixed.json 2.0 1.4 1.0 0.6 2.0 1.4 1.0 0.6
	mkdir marks
	for i in $(seq 40); do
		echo "gpuman-simload --mem 1G --util 60 --seconds 0.3 --record rec.txt && echo {task} {gpu} {uuid} \$GPUMAN_GPUS > marks/{task}"
	done >sweep.txt
	echo '# a comment, and an empty line, are not tasks' >>sweep.txt
	echo >>sweep.txt
	run -0 gpuman batch sweep.txt
	[[ "$output" == *"40 tasks: 40 done"* ]]
	# each task ran exactly once, and saw its own number and GPU
	[ "$(ls marks | wc -l)" = 40 ]
	for i in $(seq 40); do
		read -r task gpu uuid env <"marks/$i"
		[ "$task" = "$i" ]
		[ "$env" = "$gpu" ]
		[ "$uuid" = "GPU-00000000-0000-0000-0000-00000000000$gpu" ]
	done
	# the records: 40 runs, never two at once on one GPU
	[ "$(no_overlap rec.txt)" = 40 ]
	# the fast GPUs (0 and 4, speed 2.0) each ran more tasks than the slow
	# ones (3 and 7, speed 0.6)
	for fast in 0 4; do
		for slow in 3 7; do
			nf=$(grep -c "^start .* GPU-00000000-0000-0000-0000-00000000000$fast " rec.txt)
			ns=$(grep -c "^start .* GPU-00000000-0000-0000-0000-00000000000$slow " rec.txt || true)
			[ "$nf" -gt "$ns" ]
		done
	done
	# the summary on disk agrees with the records
	[ "$(jq '.counts.done' gpuman-logs/sweep.txt/summary.json)" = 40 ]
	[ "$(jq '[.gpus[].tasks] | add' gpuman-logs/sweep.txt/summary.json)" = 40 ]
	for i in 1 17 40; do
		read -r task gpu uuid env <"marks/$i"
		[ "$(jq ".tasks[$((i - 1))].gpus[0].index" gpuman-logs/sweep.txt/summary.json)" = "$gpu" ]
	done
	[ -s gpuman-logs/sweep.txt/task-40.log ]
	# no lease is left behind
	[ -z "$(ls "$GPUMAN_STATE_DIR" | grep '^lease\.' || true)" ]
}

@test "a task that runs out of GPU memory is requeued on a GPU with more free memory" {
	cat >oom.json <<'JSON'
{ "gpus": [ { "name": "big", "uuid": "GPU-00000000-0000-0000-0000-00000000000a",
              "memory_total_mib": 24000, "memory_used_mib": 0, "speed": 1.0 },
            { "name": "small", "uuid": "GPU-00000000-0000-0000-0000-00000000000b",
              "memory_total_mib": 8000, "memory_used_mib": 0, "speed": 1.0 } ] }
JSON
	export GPUMAN_SIM=$PWD/oom.json
	# task 1 takes the big GPU (most free memory); task 2 gets the small
	# one, which lacks its 12 GiB, and must end up on the big one
	cat >tasks.txt <<'EOF'
gpuman-simload --mem 2G --util 10 --seconds 0.5 --record rec.txt
gpuman-simload --mem 12G --util 10 --seconds 0.1 --record rec.txt
EOF
	run -0 gpuman batch tasks.txt
	[ "$(no_overlap rec.txt)" = 2 ]
	[ "$(grep -c '^start .* GPU-00000000-0000-0000-0000-00000000000a ' rec.txt)" = 2 ]
	grep -q 'out of memory' gpuman-logs/tasks.txt/task-2.log
	grep -q 'attempt 2 on GPU 0' gpuman-logs/tasks.txt/task-2.log
	[ "$(jq -r '.tasks[1] | "\(.state) \(.attempts) \(.oom_requeues) \(.gpus[0].index)"' \
		gpuman-logs/tasks.txt/summary.json)" = "done 2 1 0" ]
}

@test "an out-of-memory task no GPU of the machine can ever hold fails, saying why" {
	gpus one.json 1.0
	echo "gpuman-simload --mem 20G --util 10 --seconds 0.1" >big.txt
	run -1 gpuman batch big.txt
	[[ "$output" == *"1 failed"* ]]
	[[ "$(jq -r '.tasks[0].reason' gpuman-logs/big.txt/summary.json)" == *"more free memory than any"* ]]
	[ "$(jq -r '.tasks[0].oom_requeues' gpuman-logs/big.txt/summary.json)" = 1 ]
}

@test "a request no GPU of the machine can ever meet: exit 75 at once, no task run, no log directory" {
	gpus "$BATS_TEST_TMPDIR/one.json" 1.0
	printf 'touch ran\n' >tasks.txt
	run -75 timeout 20 gpuman batch -n 2 tasks.txt
	[[ "$output" == *"no GPU of this machine can ever meet the request; no task was run"* ]]
	[[ "$output" == *"1 GPU fits, the request needs 2 (-n)"* ]]
	run -75 timeout 20 gpuman batch --min-free 20G tasks.txt
	printf '{ "gpus": [] }\n' >none.json
	run -75 env GPUMAN_SIM=none.json timeout 20 gpuman batch tasks.txt
	[ ! -e ran ]
	[ ! -e gpuman-logs ]
}

@test "--resume skips the tasks that succeeded, same number and same line" {
	gpus four.json 1.0 1.0 1.0 1.0
	for i in 1 2 3 4 5 6; do
		echo "test -e ok.{task} && echo {task} >>ran.txt"
	done >t.txt
	touch ok.1 ok.2 ok.4 ok.6
	run -1 gpuman batch t.txt
	[ "$(sort -n ran.txt | tr '\n' ' ')" = "1 2 4 6 " ]
	touch ok.3 ok.5
	run -0 gpuman batch --resume t.txt
	# every task ran exactly once over the two runs
	[ "$(sort -n ran.txt | tr '\n' ' ')" = "1 2 3 4 5 6 " ]
	[[ "$output" == *"(4 from an earlier run)"* ]]
	# a changed line is a new task: it runs again; the others do not
	sed -i '2s/$/ # changed/' t.txt
	run -0 gpuman batch --resume t.txt
	[ "$(sort -n ran.txt | tr '\n' ' ')" = "1 2 2 3 4 5 6 " ]
	# without --resume everything runs again
	run -0 gpuman batch t.txt
	[ "$(wc -l <ran.txt)" = 13 ]
}

@test "--retries runs a failing task again, up to N times" {
	gpus two.json 1.0 1.0
	echo 'echo x >>n.{task}; test $(wc -l <n.{task}) -ge 3' >flaky.txt
	run -0 gpuman batch --retries 2 flaky.txt
	[ "$(wc -l <n.1)" = 3 ]
	[ "$(jq -r '.tasks[0] | "\(.state) \(.attempts)"' gpuman-logs/flaky.txt/summary.json)" = "done 3" ]
	rm n.1
	run -1 gpuman batch --retries 1 flaky.txt
	[ "$(wc -l <n.1)" = 2 ]
	[[ "$(jq -r '.tasks[0] | "\(.state) \(.attempts) \(.exit_status)"' \
		gpuman-logs/flaky.txt/summary.json)" == "failed 2 1" ]]
	[[ "$output" == *"exit status 1"* ]]
}

@test "Ctrl-C stops launching, stops the running tasks and records them; exit 130" {
	gpus two.json 1.0 1.0
	for i in 1 2 3 4 5; do
		echo "gpuman-simload --mem 1G --util 10 --seconds 30 --record $BATS_TEST_TMPDIR/rec.txt"
	done >long.txt
	# its own process group, signalled whole, as a terminal does
	setsid gpuman batch long.txt >out.txt 2>err.txt &
	pid=$!
	wait_lines 2 rec.txt
	kill -INT -- -"$pid"
	status=0
	wait "$pid" || status=$?
	[ "$status" = 130 ]
	# the two running tasks got SIGTERM and ended; nothing else started
	[ "$(grep -c '^start ' rec.txt)" = 2 ]
	[ "$(grep -c '^end ' rec.txt)" = 2 ]
	[ "$(jq -r '[.tasks[].state] | join(" ")' gpuman-logs/long.txt/summary.json)" = \
		"interrupted interrupted queued queued queued" ]
	[ -z "$(ls "$GPUMAN_STATE_DIR" | grep '^lease\.' || true)" ]
	[ -z "$(pgrep -f "gpuman-simload --mem 1G --util 10 --seconds 30 --record $BATS_TEST_TMPDIR" || true)" ]
}

@test "a second Ctrl-C kills tasks that ignore SIGTERM" {
	gpus one.json 1.0
	echo "trap '' TERM; echo up >>up.txt; while :; do sleep 0.1; done # stubborn $BATS_TEST_TMPDIR" >stubborn.txt
	setsid gpuman batch stubborn.txt >out.txt 2>err.txt &
	pid=$!
	wait_lines 1 up.txt
	kill -INT -- -"$pid"
	sleep 0.5
	# still there: it ignores SIGTERM
	pgrep -f "stubborn $BATS_TEST_TMPDIR" >/dev/null
	kill -INT -- -"$pid"
	status=0
	wait "$pid" || status=$?
	[ "$status" = 130 ]
	[ -z "$(pgrep -f "stubborn $BATS_TEST_TMPDIR" || true)" ]
	[ "$(jq -r '.tasks[0].state' gpuman-logs/stubborn.txt/summary.json)" = interrupted ]
}

@test "-j limits the tasks running at once; -n gives each task its GPUs; {gpu} names them" {
	gpus four.json 1.0 1.0 1.0 1.0
	for i in 1 2 3 4 5 6; do
		echo "gpuman-simload --mem 1G --util 10 --seconds 0.2 --record rec.txt && echo {gpu} >>gpus.txt"
	done >pairs.txt
	run -0 gpuman batch -n 2 pairs.txt
	# each task saw two GPUs; simload records one line per GPU
	[ "$(grep -c ',' gpus.txt)" = 6 ]
	[ "$(no_overlap rec.txt)" = 12 ]
	rm rec.txt
	run -0 gpuman batch -j 1 pairs.txt
	# one at a time: the runs do not overlap at all, whatever the GPU
	python3 - <<'EOF'
runs = {}
for line in open('rec.txt'):
    what, pid, uuid, ns = line.split()
    runs.setdefault(pid, {})[what] = int(ns)
iv = sorted((r['start'], r['end']) for r in runs.values())
assert len(iv) == 6
assert all(a[1] <= b[0] for a, b in zip(iv, iv[1:])), iv
EOF
}

@test "--dry-run prints the tasks and runs nothing; usage errors exit 2" {
	gpus one.json 1.0
	printf 'echo a {task} >x\n# not a task\necho b {task} >x\n' >d.txt
	run -0 gpuman batch --dry-run d.txt
	[[ "$output" == *"1  echo a 1 >x"* ]]
	[[ "$output" == *"2  echo b 2 >x"* ]]
	[[ "$output" == *"2 tasks"* ]]
	[ ! -e x ]
	[ ! -e gpuman-logs ]
	run -2 gpuman batch
	run -2 gpuman batch nosuch.txt
	run -2 gpuman batch -j 0 d.txt
	run -2 gpuman batch --bogus d.txt
	# stdin: one task
	echo 'echo from-stdin >s.txt' | gpuman batch - >/dev/null
	[ "$(cat s.txt)" = from-stdin ]
	[ -s gpuman-logs/stdin/summary.json ]
}

@test "a state directory the user cannot write: each task fails saying so, at once, never a silent wait" {
	SHARED=$(mktemp -d /tmp/gpuman-2users.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 755 "$SHARED/state" # root's: nobody may not write a lease there
	install -d -o nobody -g nogroup -m 755 "$SHARED/nobody"
	gpus "$SHARED/one.json" 1.0
	chmod 644 "$SHARED/one.json"
	printf 'true\ntrue\n' >"$SHARED/nobody/tasks.txt"
	cd "$SHARED/nobody"
	run -1 env -u XDG_CONFIG_HOME HOME="$SHARED/nobody" GPUMAN_STATE_DIR="$SHARED/state" \
		GPUMAN_SIM="$SHARED/one.json" setpriv --reuid=nobody --regid=nogroup --clear-groups \
		timeout 20 "$GM_BUILD/gpuman" batch tasks.txt
	[[ "$output" == *"cannot lease GPUs: cannot write a lease in '$SHARED/state': Permission denied"* ]]
	[[ "$output" == *"2 tasks: 0 done, 2 failed"* ]]
	cd /
	rm -rf "$SHARED"
}

@test "two users' batches share the GPUs of one machine without collision" {
	# A directory both users can reach (the test's own is root's alone).
	SHARED=$(mktemp -d /tmp/gpuman-2users.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim"
	install -m 666 /dev/null "$SHARED/sim/lock"
	mkdir -m 755 "$SHARED/root"
	install -d -o nobody -g nogroup -m 755 "$SHARED/nobody"
	gpus "$SHARED/three.json" 1.0 1.0 1.0
	chmod 644 "$SHARED/three.json"
	for who in root nobody; do
		for i in $(seq 12); do
			echo "gpuman-simload --mem 1G --util 50 --seconds 0.2 --record $SHARED/$who/rec.txt"
		done >"$SHARED/$who/tasks.txt"
	done
	export GPUMAN_STATE_DIR=$SHARED/state GPUMAN_SIM_STATE=$SHARED/sim
	(cd "$SHARED/root" && gpuman batch tasks.txt >out.txt 2>&1) &
	root=$!
	(cd "$SHARED/nobody" && env -u XDG_CONFIG_HOME HOME="$SHARED/nobody" GPUMAN_QUEUE_DIR="$SHARED/nobody/q" \
		setpriv --reuid=nobody --regid=nogroup --clear-groups \
		"$GM_BUILD/gpuman" batch tasks.txt >"$SHARED/nobody/out.txt" 2>&1) &
	nobody=$!
	wait "$root"
	wait "$nobody"
	grep -q '12 tasks: 12 done' "$SHARED/root/out.txt"
	grep -q '12 tasks: 12 done' "$SHARED/nobody/out.txt"
	# 24 runs over both users' records, never two on one GPU at once
	[ "$(no_overlap "$SHARED/root/rec.txt" "$SHARED/nobody/rec.txt")" = 24 ]
	[ "$(stat -c %U "$SHARED/nobody/gpuman-logs/tasks.txt/jobs.db")" = nobody ]
}

@test "a line that cannot run as written is refused before anything runs, naming the file and line: open quote, a placeholder's slip, binary bytes" {
	gpus one.json 1.0
	printf 'touch ran-1\n# fine\necho "unterminated >x\n' >q.txt
	run -2 gpuman batch q.txt
	[[ "$output" == *"q.txt:3: the double quote opened at column 6 is never closed"* ]]
	printf 'touch ran-2\necho {gpus}\n' >p.txt
	run -2 gpuman batch p.txt
	[[ "$output" == *"p.txt:2: unknown placeholder '{gpus}' (did you mean '{gpu}'?)"* ]]
	printf 'echo {Task}\n' | { run -2 gpuman batch -; echo "$output" >stdin.out; }
	[[ "$(cat stdin.out)" == *"stdin:1: unknown placeholder '{Task}' (did you mean '{task}'?)"* ]]
	printf 'touch ran-3\necho a\0b\n' >n.txt
	run -2 gpuman batch n.txt
	[[ "$output" == *"n.txt:2: a NUL byte at column 7"* ]]
	cp "$(command -v gpuman)" prog.bin
	run -2 gpuman batch prog.bin
	[[ "$output" == *"prog.bin:1: a control byte"*"a binary file?"* ]]
	# refused as given: nothing ran, no log directory
	[ ! -e ran-1 ]
	[ ! -e ran-2 ]
	[ ! -e ran-3 ]
	[ ! -e x ]
	[ ! -e gpuman-logs ]
	# what the shell itself uses is left alone: ${VAR}, awk's braces, find's {}
	printf '%s\n' 'echo ${HOME} {gpu} {uuid} {task} >ok-{task}' "awk 'BEGIN{print 1}' >>ok-1" \
		'find . -name ok-1 -exec cat {} \; >/dev/null' >fine.txt
	run -0 gpuman batch fine.txt
	[ "$(head -1 ok-1)" = "$HOME 0 GPU-00000000-0000-0000-0000-000000000000 1" ]
}

@test "a task file saved by a Windows editor (a byte order mark, CRLF line ends) runs as written" {
	gpus one.json 1.0
	printf '\xef\xbb\xbfecho one >out-{task}\r\n# a comment\r\n\r\necho two >out-{task}\r\n' >win.txt
	run -0 gpuman batch --dry-run win.txt
	[[ "$output" == *"1  echo one >out-1"* ]]
	[[ "$output" == *"2 tasks"* ]]
	run -0 gpuman batch win.txt
	[ "$(cat out-1)" = one ]
	[ "$(cat out-2)" = two ]
	[ "$(jq -r '.tasks[0].command' gpuman-logs/win.txt/summary.json)" = "echo one >out-{task}" ]
	[ "$(jq -r '.tasks[1].command' gpuman-logs/win.txt/summary.json)" = "echo two >out-{task}" ]
}

@test "a batch none of whose tasks can start says why, once, and runs when the GPU frees" {
	gpus two.json 1.0 1.0
	gpuman run -n 2 -- sh -c 'while [ ! -e go ]; do sleep 0.05; done' &
	holder=$!
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	printf 'echo a\necho b\necho c\n' >three.txt
	gpuman batch three.txt 2>err.txt >/dev/null &
	batch=$!
	wait_for 'grep -q "no task can start" err.txt'
	sleep 0.5 # and it says so once
	touch go
	wait "$holder"
	wait "$batch"
	[ "$(grep -c 'no task can start' err.txt)" = 1 ]
	[ "$(sed -n 1p err.txt)" = "gpuman batch: no task can start; waiting for GPUs others hold:" ]
	[[ "$(sed -n 2p err.txt)" =~ ^"both GPUs: leased exclusively by root (pid "[0-9]+")"$ ]]
	[ "$(jq -r '[.tasks[].state] | unique | join(",")' gpuman-logs/three.txt/summary.json)" = done ]
	# a batch whose own tasks fill the GPUs is not blocked by others: no word
	printf 'sleep 0.2\nsleep 0.2\nsleep 0.2\nsleep 0.2\n' >four.txt
	run -0 --separate-stderr gpuman batch four.txt
	[[ "$stderr" != *"no task can start"* ]]
}
