#!/usr/bin/env bats
# The queue as a lab uses it day to day: job names, cancel --all, listing by
# state, the tail of a log, clearing the history, and a store that has
# grown for months (100 000 finished jobs) costing no more to list.

load helpers
load helpers/queue

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	queue_teardown
	# what "cancel -u USER as root" made, even when it failed half-way
	# (left, it would make every later run skip that test)
	[ -z "${MADE_HOME:-}" ] || rm -rf "$MADE_HOME" "${SHARED:-}"
}

# rss_kib CMD... - run CMD (output discarded), print its peak RSS in KiB
# (at least the forking python's own: compare with a baseline, not a
# constant)
rss_kib() {
	python3 -c '
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
}

@test "submit --name: queue and queue --json show it; a bad name is refused, naming it" {
	gpus 1
	run -0 gpuman submit --name prep -- true
	[ "$output" = 1 ]
	run -0 gpuman submit -- true
	run -0 gpuman wait 1 2
	run -0 gpuman queue --all
	[[ "${lines[0]}" == *" NAME "*COMMAND ]]
	[[ "${lines[1]}" == *" prep "*true ]]
	[[ "${lines[2]}" == *" - "*true ]]
	run -0 gpuman queue --all --json
	[ "$(jqr '[.[].name] | tostring')" = '["prep",null]' ]
	run -2 gpuman submit --name 'two words' -- true
	[[ "$output" == *"--name 'two words': no spaces"* ]]
	run -2 gpuman submit --name "$(printf 'x%.0s' $(seq 65))" -- true
	[[ "$output" == *"too long (65 bytes; at most 64)"* ]]
	run -2 gpuman submit --name '' -- true
	run -0 gpuman queue --all --json
	[ "$(jqr 'length')" = 2 ]
}

@test "queue --state lists only those states; an unknown state is refused, naming it" {
	gpus 1
	gpuman submit -- true >/dev/null
	gpuman submit -- sh -c 'exit 3' >/dev/null
	run -1 gpuman wait 1 2
	run -0 gpuman queue --state failed --json
	[ "$(jqr '[.[].id] | tostring')" = '[2]' ]
	run -0 gpuman queue --state done,failed --json
	[ "$(jqr '[.[].id] | tostring')" = '[1,2]' ]
	run -0 gpuman queue --state running
	[ "$output" = "no jobs" ]
	run -2 gpuman queue --state done,finished
	[[ "$output" == *"--state 'finished': no such state"* ]]
}

@test "cancel --all cancels every queued and running job and leaves finished ones alone" {
	gpus 1
	gpuman submit -- true >/dev/null
	run -0 gpuman wait 1
	gpuman submit -- sh -c 'echo $$ >job.pid; echo started >started; exec sleep 60' >/dev/null
	gpuman submit -- touch ran-3 >/dev/null
	gpuman submit -- touch ran-4 >/dev/null
	wait_for '[ -e started ]'
	run -2 gpuman cancel --all 3
	[[ "$output" == *"--all or job ids, not both ('3')"* ]]
	run -0 gpuman cancel --all
	[[ "$output" == *"3 cancelled"* ]]
	[[ "$output" == *"4 cancelled"* ]]
	[[ "$output" == *"2 cancelling"* ]]
	run -1 gpuman wait 1 2 3 4
	[ "${lines[0]}" = "1 done" ]
	[[ "${lines[1]}" == "2 cancelled"* ]]
	[[ "${lines[2]}" == "3 cancelled"* ]]
	[[ "${lines[3]}" == "4 cancelled"* ]]
	[ ! -e ran-3 ]
	[ ! -e ran-4 ]
	# the running job's process is gone (its own pid: other suites may run sleep 60)
	! kill -0 "$(cat job.pid)" 2>/dev/null || false
	run -0 gpuman cancel --all
	[ "$output" = "no queued or running jobs to cancel" ]
}

@test "logs --tail N prints the last N lines; with -f it then follows" {
	gpus 1
	gpuman submit -- sh -c 'seq 1 100000; printf "no newline"' >/dev/null
	run -0 gpuman wait 1
	run -0 gpuman logs --tail 3 1
	[ "$output" = "$(printf '99999\n100000\nno newline')" ]
	run -0 gpuman logs --tail 0 1
	[ -z "$output" ]
	gpuman submit -- sh -c 'echo a; echo b; echo c' >/dev/null
	run -0 gpuman wait 2
	run -0 gpuman logs --tail 10 2
	[ "$output" = "$(printf 'a\nb\nc')" ]
	run -0 gpuman logs --tail 1 2
	[ "$output" = c ]
	gpuman submit -- sh -c 'echo one; echo two; while [ ! -e go ]; do sleep 0.05; done; echo three' >/dev/null
	wait_for '[ "$(gpuman logs 3)" = "$(printf "one\ntwo")" ]'
	gpuman logs -f --tail 1 3 >followed &
	sleep 0.3
	touch go
	wait
	[ "$(cat followed)" = "$(printf 'two\nthree')" ]
	run -2 gpuman logs --tail -1 1
	[[ "$output" == *"--tail '-1': give a number of lines"* ]]
	run -2 gpuman logs --tail 3x 1
	[[ "$output" == *"--tail '3x'"* ]]
}

@test "queue --clear forgets finished jobs and deletes their logs; queued and running jobs stay" {
	gpus 1
	gpuman submit -- echo first >/dev/null
	gpuman submit -- sh -c 'exit 1' >/dev/null
	run -1 gpuman wait 1 2
	[ -e "$GPUMAN_QUEUE_DIR/logs/1.log" ]
	[ -e "$GPUMAN_QUEUE_DIR/logs/1.json" ]
	gpuman submit -- sh -c 'echo started >started; while [ ! -e go ]; do sleep 0.05; done' >/dev/null
	gpuman submit -- true >/dev/null
	wait_for '[ -e started ]'
	run -0 gpuman queue --clear
	[ "$output" = "2 finished jobs cleared" ]
	[ ! -e "$GPUMAN_QUEUE_DIR/logs/1.log" ]
	[ ! -e "$GPUMAN_QUEUE_DIR/logs/1.json" ]
	[ ! -e "$GPUMAN_QUEUE_DIR/logs/2.log" ]
	run -0 gpuman queue --all --json
	[ "$(jqr '[.[] | "\(.id) \(.state)"] | join(",")')" = "3 running,4 queued" ]
	run -2 gpuman logs 1
	touch go
	run -0 gpuman wait 3 4
	run -0 gpuman queue --clear --json
	[ "$(jqr .cleared)" = 2 ]
	run -0 gpuman queue --all
	[ "$output" = "no jobs" ]
	# ids are never reused
	run -0 gpuman submit -- true
	[ "$output" = 5 ]
}

@test "100 000 finished jobs in the store: queue reads only the live ones, --all streams them" {
	gpus 1
	run -0 gpuman queue
	empty=$(rss_kib gpuman queue --all --json)
	history 100000
	gpuman submit -- sh -c 'while [ ! -e go ]; do sleep 0.05; done' >/dev/null
	run -0 gpuman queue --json
	[ "$(jqr '[.[].id] | tostring')" = '[100001]' ]
	# 50 MB more than on an empty store when every finished job was read
	# into memory; now the same as on an empty store
	# (make bench gives gpuman's own figures)
	kib=$(rss_kib gpuman queue)
	[ "$kib" -lt $((empty + 4096)) ]
	# every job, as a stream: 400 MB more before.  Under ASan its
	# quarantine would keep what the stream freed (16 MB and its
	# bookkeeping: 33 MB measured), so it keeps none for this command
	kib=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0" rss_kib gpuman queue --all --json)
	[ "$kib" -lt $((empty + 8192)) ]
	run -0 gpuman queue --state done
	[ "${#lines[@]}" = 100001 ]
	touch go
	run -0 gpuman wait 100001
	run -0 gpuman queue --clear
	[ "$output" = "100001 finished jobs cleared" ]
}

@test "a store of the first schema is upgraded in place: its jobs are kept, new ids follow them" {
	gpus 1
	mkdir -m 700 "$GPUMAN_QUEUE_DIR"
	python3 - "$GPUMAN_QUEUE_DIR/jobs.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("""
CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL,
 command TEXT NOT NULL, argv TEXT, cwd TEXT, env BLOB, request TEXT, log TEXT,
 submit_ms INTEGER NOT NULL, start_ms INTEGER, end_ms INTEGER, gpus TEXT, uuids TEXT,
 exit_status INTEGER, reason TEXT, attempts INTEGER NOT NULL DEFAULT 0,
 retries INTEGER NOT NULL DEFAULT 0, ooms INTEGER NOT NULL DEFAULT 0,
 min_free_mib INTEGER NOT NULL DEFAULT 0, placed_free_mib INTEGER, peak_mem_mib INTEGER,
 util_samples INTEGER NOT NULL DEFAULT 0, util_sum REAL NOT NULL DEFAULT 0,
 runner_pid INTEGER, run_slot INTEGER);
CREATE INDEX jobs_by_state ON jobs (state, id);
INSERT INTO jobs (state, command, submit_ms, start_ms, end_ms, exit_status, attempts)
 VALUES ('done', 'old job', 1000, 1100, 1200, 0, 1);
PRAGMA user_version = 1;
""")
db.commit()
PY
	chmod 600 "$GPUMAN_QUEUE_DIR/jobs.db"
	run -0 gpuman queue --all --json
	[ "$(jqr '.[0] | "\(.id) \(.state) \(.command) \(.name)"')" = "1 done old job null" ]
	run -0 gpuman submit --name new -- true
	[ "$output" = 2 ]
	run -0 gpuman wait 2
	[ "$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("PRAGMA user_version").fetchone()[0])' "$GPUMAN_QUEUE_DIR/jobs.db")" = 6 ]
}

# one_gpu NAME UUID-SUFFIX - a scenario file NAME.json with one GPU.
one_gpu() {
	printf '{ "gpus": [ { "name": "%s", "uuid": "GPU-00000000-0000-0000-0000-0000000000%s", "memory_total_mib": 16000, "memory_used_mib": 0, "speed": 1.0 } ] }\n' \
		"$1" "$2" >"$BATS_TEST_TMPDIR/$1.json"
}

@test "each job keeps its own machine: a later submit with another GPUMAN_SIM (or --sim) runs there, not on the first dispatcher's" {
	one_gpu lab aa
	one_gpu laptop bb
	cd "$BATS_TEST_TMPDIR"
	# the lab's only GPU stays busy: on the lab machine the next job would wait
	a=$(GPUMAN_SIM=lab.json gpuman submit -- sh -c 'echo "$CUDA_VISIBLE_DEVICES" >a.out; while [ ! -e go ]; do sleep 0.05; done')
	for _ in $(seq 100); do [ -s a.out ] && break; sleep 0.05; done
	b=$(GPUMAN_SIM=laptop.json gpuman submit -- sh -c 'echo "$CUDA_VISIBLE_DEVICES $GPUMAN_SIM" >b.out')
	c=$(GPUMAN_SIM=lab.json gpuman submit --sim laptop.json -- sh -c 'echo "$CUDA_VISIBLE_DEVICES" >c.out')
	run -0 timeout 10 gpuman wait "$b" "$c"
	[ "$(cat a.out)" = GPU-00000000-0000-0000-0000-0000000000aa ]
	[ "$(cat b.out)" = "GPU-00000000-0000-0000-0000-0000000000bb laptop.json" ]
	[ "$(cat c.out)" = GPU-00000000-0000-0000-0000-0000000000bb ]
	# one dispatcher per machine, each with its own lock and run files
	[ "$(ls "$GPUMAN_QUEUE_DIR" | grep -c '^dispatcher.*\.lock$')" = 2 ]
	touch go
	run -0 gpuman wait "$a"
	run -0 gpuman queue --all --json
	[ "$(jqr '[.[].gpus[0].uuid[-2:]] | join(" ")')" = "aa bb bb" ]
	dispatcher_gone
}

@test "a dispatcher started by another command (queue, wait) takes the job's machine, not that command's" {
	one_gpu lab aa
	one_gpu laptop bb
	cd "$BATS_TEST_TMPDIR"
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/laptop.json
	gpuman submit -- sh -c 'while [ ! -e go ]; do sleep 0.05; done' >/dev/null
	id=$(gpuman submit -- sh -c 'echo "$CUDA_VISIBLE_DEVICES" >out')
	for _ in $(seq 100); do d=$(dispatcher_pid) && break; sleep 0.05; done
	kill -9 "$d"
	# started again from the lab's environment, whose GPU is free: the
	# queued job still waits for the laptop's
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/lab.json
	run -0 gpuman queue
	sleep 1
	[ ! -e out ]
	run -0 gpuman queue --json
	[ "$(jqr '.[1].state')" = queued ]
	touch go
	run -0 gpuman wait "$id"
	[ "$(cat out)" = GPU-00000000-0000-0000-0000-0000000000bb ]
}

@test "queue -u: another user's running jobs and waiting requests as status shows them to all, never their queued jobs; -u all: mine, then theirs" {
	gm_user alice
	gm_user bob
	SHARED=$(mktemp -d /tmp/gpuman-qu.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim"
	install -m 666 /dev/null "$SHARED/sim/lock"
	echo '{ "gpus": [ { "name": "g", "memory_total_mib": 16000 } ] }' >"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	install -d -o gmtest-alice -g gmtest-alice -m 700 "$SHARED/aliceq"
	install -d -o gmtest-bob -g gmtest-bob -m 700 "$SHARED/bobq"
	export GPUMAN_SIM=$SHARED/gpus.json GPUMAN_STATE_DIR=$SHARED/state GPUMAN_SIM_STATE=$SHARED/sim
	cd "$SHARED"
	as_user alice env GPUMAN_QUEUE_DIR="$SHARED/aliceq" gpuman submit -- sleep 301 >/dev/null 3>&-
	as_user alice env GPUMAN_QUEUE_DIR="$SHARED/aliceq" gpuman submit -- echo secret-queued >/dev/null 3>&-
	for _ in $(seq 100); do ls "$SHARED/state" | grep -q '^lease\.' && break; sleep 0.05; done
	# her next job keeps its place in the line for the GPU, which shows
	# it waits, not what it runs
	for _ in $(seq 100); do ls "$SHARED/state" | grep -q '^wait\.' && break; sleep 0.05; done
	run -0 as_user bob env GPUMAN_QUEUE_DIR="$SHARED/bobq" gpuman queue -u gmtest-alice
	[[ "${lines[1]}" == "gmtest-alice running  0 "*"  sleep 301" ]]
	[[ "$output" == *"gmtest-alice's queued jobs are private"* ]]
	[[ "$output" != *secret-queued* ]]
	run -0 as_user bob env GPUMAN_QUEUE_DIR="$SHARED/bobq" gpuman queue -u "$(id -u gmtest-alice)" --json
	[ "$(jqr '[.[] | "\(.user) \(.state) \(.gpus) \(.command)"] | join(";")')" = "gmtest-alice running [0] sleep 301;gmtest-alice waiting null its next queued job or batch task" ]
	run -0 as_user bob env GPUMAN_QUEUE_DIR="$SHARED/bobq" gpuman queue -u all
	[ "${lines[0]}" = "your queue:" ]
	[[ "${lines[1]}" == "no queued or running jobs"* ]]
	[ "${lines[2]}" = "other users:" ]
	[[ "$output" == *"gmtest-alice running  0 "*"sleep 301"* ]]
	[[ "$output" != *secret-queued* ]]
	run -0 as_user bob env GPUMAN_QUEUE_DIR="$SHARED/bobq" gpuman queue -u all --json
	[ "$(jqr '"\(.jobs | length) \(.others | length)"')" = "0 2" ]
	# alice sees her own queue with -u herself, and nobody else's
	run -0 as_user alice env GPUMAN_QUEUE_DIR="$SHARED/aliceq" gpuman queue -u gmtest-alice
	[[ "$output" == *"secret-queued"* ]]
	run -2 gpuman queue -u gmtest-nosuchuser
	[[ "$output" == *"-u 'gmtest-nosuchuser': no such user (a name, a uid, or all)"* ]]
	as_user alice env GPUMAN_QUEUE_DIR="$SHARED/aliceq" gpuman cancel --all >/dev/null
	as_user alice env GPUMAN_QUEUE_DIR="$SHARED/aliceq" gpuman wait 1 2 >/dev/null || true
	rm -rf "$SHARED"
}

@test "a job submitted inside a reservation (GPUMAN_RESERVATION) runs on its GPU; one submitted outside waits for its release" {
	gpus 1
	eval "$(gpuman reserve -n 1 --for 1m 2>/dev/null)"
	[ -n "$GPUMAN_RESERVATION" ]
	inside=$(gpuman submit -- echo inside)
	out=$(env -u GPUMAN_RESERVATION gpuman submit -- echo outside)
	run -0 timeout 10 gpuman wait "$inside"
	run -0 gpuman queue --json
	[ "$(jqr '.[0].id') $(jqr '.[0].state')" = "$out queued" ]
	gpuman release "$GPUMAN_RESERVATION" 2>/dev/null
	run -0 timeout 10 gpuman wait "$out"
	dispatcher_gone
}

@test "cancel -n NAME and cancel -u USER (Slurm's scancel spellings): the jobs of that name, or all one's own, as cancel IDs does; another user's are refused" {
	gpus 1
	run -0 gpuman submit -- sleep 300
	blocker=$output
	wait_for '[ "$(gpuman queue --json | jq -r ".[0].state")" = running ]'
	a=$(gpuman submit --name keep -- true)
	b=$(gpuman submit --name drop -- true)
	c=$(gpuman submit -J drop -- true)
	run -0 gpuman cancel -n drop
	[ "$output" = "$b cancelled"$'\n'"$c cancelled" ]
	run -0 gpuman queue --json
	[ "$(jqr '[.[] | "\(.id):\(.state)"] | join(" ")')" = "$blocker:running $a:queued" ]
	run -0 gpuman cancel -n nothing-by-this-name
	[[ "$output" == *"no queued or running job named 'nothing-by-this-name'"* ]]
	# -u oneself: every live job, queued first, as cancel --all
	run -0 gpuman cancel -u "$(id -un)"
	[ "${lines[0]}" = "$a cancelled" ]
	[[ "${lines[1]}" == "$blocker cancelling (running on GPU 0)" ]]
	run -0 gpuman wait "$blocker" || true
	gm_user alice
	run -2 as_user alice env -u GPUMAN_SIM gpuman cancel -u root
	[[ "$output" == *"-u 'root': only your own jobs can be cancelled"* ]]
	run -2 gpuman cancel -n drop 7
	[[ "$output" == *"-n or job ids, not both ('7')"* ]]
}

@test "cancel -u USER as root cancels in that user's own queue, as that user" {
	gm_user alice
	[ ! -e /home/gmtest-alice ] || skip "/home/gmtest-alice exists: not ours to use"
	SHARED=$(mktemp -d /tmp/gpuman-cu.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim"
	install -m 666 /dev/null "$SHARED/sim/lock"
	echo '{ "gpus": [ { "name": "g", "memory_total_mib": 16000 } ] }' >"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	install -d -o gmtest-alice -g gmtest-alice -m 700 /home/gmtest-alice
	MADE_HOME=/home/gmtest-alice
	export GPUMAN_SIM=$SHARED/gpus.json GPUMAN_STATE_DIR=$SHARED/state GPUMAN_SIM_STATE=$SHARED/sim
	cd "$SHARED"
	alice() { as_user alice env -u GPUMAN_QUEUE_DIR HOME=/home/gmtest-alice "$@"; }
	alice gpuman submit -- sleep 300 >/dev/null 3>&-
	alice gpuman submit -- true >/dev/null 3>&-
	for _ in $(seq 100); do ls "$SHARED/state" | grep -q '^lease\.' && break; sleep 0.05; done
	run -0 gpuman cancel -u gmtest-alice
	[ "${lines[0]}" = "2 cancelled" ]
	[ "${lines[1]}" = "1 cancelling (running on GPU 0)" ]
	alice gpuman wait 1 2 >/dev/null 3>&- || true
	run -0 alice gpuman queue --all --json
	[ "$(jqr '[.[].state] | join(",")')" = cancelled,cancelled ]
	# root's own queue was not touched, nor made in alice's name
	[ "$(stat -c %U /home/gmtest-alice/.local/state/gpuman)" = gmtest-alice ]
}
