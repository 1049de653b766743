#!/usr/bin/env bats
# The lease broker (gpuman daemon): one arbiter that users cannot touch.
# Each test starts its own broker on a socket in a shared directory; the
# multi-user tests run as real users (gmtest-*, root only, skipped
# elsewhere) and judge by the jobs' own --record lines, not gpuman's word.

load helpers
load helpers/broker

setup() {
	gm_setup
	broker_setup broker
	install -m 666 /dev/null "$SHARED/rec"
}

teardown() {
	tmux -L "gm-broker-$$" kill-server 2>/dev/null || true
	broker_teardown
}

gpus() { # gpus N - a machine of N empty GPUs that every user can read
	local i list=
	for i in $(seq "$1"); do
		list="$list${list:+,}{\"name\":\"g$i\",\"memory_total_mib\":16000}"
	done
	echo "{ \"gpus\": [ $list ] }" >"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM=$SHARED/gpus.json
}

# bg NAME USER CMD... - run CMD as gmtest-USER (or as this user for "-") in
# the background; its pid goes to $SHARED/pids/NAME.
bg() {
	local name=$1 user=$2; shift 2
	if [ "$user" = - ]; then
		sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/$name" "$@" &
	else
		as_user "$user" sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/$name" "$@" &
	fi
	wait_for "[ -s '$SHARED/pids/$name' ]"
}

job() { # job SECONDS - a stand-in training job that records where it ran
	echo gpuman-simload --mem 1G --util 50 --seconds "$1" --record "$SHARED/rec"
}

leases() { gpuman status --json | jq -r "[.leases[] | $1] | join(\",\")"; }

@test "broker: run, status and pick go through it; a share is told its part; a lease is shown in the kernel's name for its user" {
	gpus 2
	start_daemon
	bg a - gpuman run -- $(job 30)
	wait_for '[ "$(leases .user)" = root ] || [ -n "$(leases .user)" ]'
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = 1 ]
	[ "$(jqr '.leases[0].user')" = "$(id -un)" ]
	[ "$(jqr '.leases[0].job_pid')" = "$(cat "$SHARED/pids/a")" ] ||
		[ "$(jqr '.leases[0].pid')" = "$(cat "$SHARED/pids/a")" ]
	# the other GPU is still free; the leased one is not offered
	run -0 gpuman pick
	[ "$output" != "$(leases '.gpus[0].index')" ]
	run -0 gpuman run -- true
	# a share is told its part of the GPU's memory, as without the broker
	run -0 gpuman run --mem 4G -- sh -c 'echo $XLA_CLIENT_MEM_FRACTION'
	[ "$output" = 0.256 ]
	# both GPUs leased: no --wait answers 75 at once, with the holder named
	bg b - gpuman run -- $(job 30)
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 2 ]'
	run -75 gpuman run -- true
	[[ "$output" == *"no GPU meets the request now"* ]]
	[[ "$output" == *"leased"* ]]
	# a request no GPU could ever meet ends at once
	run -75 gpuman run -n 3 -- true
	[[ "$output" == *"can ever meet"* ]]
	# a waiter is in the line that status shows
	bg w - gpuman run --wait -- true
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	run -0 gpuman status
	[[ "$output" == *"waiting (served in this order):"*"1 GPU exclusive"* ]]
}

@test "broker: a lease ends the instant its job dies (kill -9), and the next in line gets the GPU" {
	gpus 1
	start_daemon
	bg holder - gpuman run -- $(job 60)
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 1 ]'
	bg next - gpuman run --wait -- $(job 0.1)
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	# kill -9 gpuman run and its job: nobody releases anything
	job_pid=$(awk '/^start/ {print $2}' "$SHARED/rec")
	killed=$(date +%s%N)
	kill -9 "$(cat "$SHARED/pids/holder")" "$job_pid"
	wait_for '[ "$(grep -c ^end "$SHARED/rec")" = 1 ]'
	# the next job started after the kill, within a second of it
	started=$(awk '/^start/ {ns=$4} END {print ns}' "$SHARED/rec")
	[ "$started" -gt "$killed" ]
	[ $(( (started - killed) / 1000000 )) -lt 1000 ]
	# the job alone holds the lease too: gpuman run killed, job alive
	bg holder2 - gpuman run -- $(job 60)
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 3 ]'
	kill -9 "$(cat "$SHARED/pids/holder2")"
	sleep 0.3
	[ "$(leases .id | tr , '\n' | grep -c .)" = 1 ]
	run -75 gpuman run -- true
	kill -9 "$(awk '/^start/ {p=$2} END {print p}' "$SHARED/rec")"
	wait_for '[ -z "$(leases .id)" ]'
	run -0 gpuman run -- true
}

@test "broker: a waiter sleeps until a message or a signal, and a signal gives up at once" {
	gpus 1
	start_daemon
	bg holder - gpuman run -- $(job 60)
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 1 ]'
	gpuman run --wait -- true 2>"$BATS_TEST_TMPDIR/err" &
	waiter=$!
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	# idle: no timer wakes it (it looked every 2 s before: 2-3 polls in 5 s)
	if command -v strace >/dev/null; then
		timeout 5 strace -p "$waiter" -e trace=poll,ppoll -o "$BATS_TEST_TMPDIR/calls" || true
		[ "$(grep -c 'poll(' "$BATS_TEST_TMPDIR/calls")" -le 1 ]
	fi
	for sig in INT TERM; do
		sent=$(date +%s%N)
		kill -$sig "$waiter"
		wait "$waiter" || true
		took=$((($(date +%s%N) - sent) / 1000000))
		echo "# SIG$sig: the waiter gave up in $took ms" >&3
		[ "$took" -lt 1000 ]
		wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 0 ]'
		gpuman run --wait -- true 2>"$BATS_TEST_TMPDIR/err" &
		waiter=$!
		wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	done
	kill -INT "$waiter"
	wait "$waiter" || true
}

@test "broker: kill -9 of the daemon and a restart keep the live leases, and end them with their jobs" {
	gpus 2
	start_daemon
	bg a - gpuman run -- $(job 60)
	bg b - gpuman run -- gpuman-simload --mem 1G --util 50 --seconds 4 --record "$SHARED/rec"
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 2 ]'
	before=$(leases .id)
	kill -9 "$DAEMON"
	wait "$DAEMON" || true
	start_daemon
	grep -q "restored 2 leases" "$BATS_TEST_TMPDIR/daemon.log"
	[ "$(leases .id | tr , '\n' | sort)" = "$(echo "$before" | tr , '\n' | sort)" ]
	# while they live, nobody else gets their GPUs
	run -75 gpuman run -- true
	# b's job ends; its gpuman run releases with its token, and a waits on
	wait_for '[ "$(grep -c ^end "$SHARED/rec")" = 1 ]'
	wait_for '[ "$(leases .id | tr , "\n" | grep -c .)" = 1 ]'
	run -0 gpuman run -- true
	# a's job is killed with its gpuman run: the broker watched the job.
	# a's job is the one started and not ended (a and b start in either order)
	a_job=$(awk '/^start/ {s[$2] = 1} /^end/ {delete s[$2]} END {for (p in s) print p}' "$SHARED/rec")
	[ "$(echo "$a_job" | wc -w)" = 1 ]
	kill -9 "$(cat "$SHARED/pids/a")" "$a_job"
	wait_for '[ -z "$(leases .id)" ]'
	run -0 python3 "$BATS_TEST_DIRNAME/helpers/overlaps.py" "$SHARED/rec"
	[ "$output" = "jobs 3 overlaps 0" ] || [ "$output" = "jobs 2 overlaps 0" ]
}

@test "broker: a user cannot release, revive or claim another user's lease" {
	gm_user alice
	gm_user mallory
	gpus 1
	start_daemon
	bg a alice gpuman run -- $(job 60)
	wait_for '[ "$(leases .user)" = gmtest-alice ]'
	id=$(leases .id)
	# the token is alice's secret; mallory guesses, then even uses the right one
	token=$(jq -s -r -f "$BATS_TEST_DIRNAME/helpers/state.jq" "$STATE" | jq -r '.leases[0].token')
	[ -n "$token" ]
	[ "$token" != null ]
	run as_user mallory python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		"{\"v\":1,\"op\":\"release\",\"id\":\"$id\",\"token\":\"0000\"}"
	[[ "$output" == *'"op":"refused"'*"no such lease of yours"* ]]
	run as_user mallory python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		"{\"v\":1,\"op\":\"release\",\"id\":\"$id\",\"token\":\"$token\"}"
	[[ "$output" == *"no such lease of yours"* ]]
	[ "$(leases .id)" = "$id" ]
	# the state file that holds the tokens is root's alone
	run ! as_user mallory cat "$STATE"
	# a request that claims to be alice's is mallory's: the kernel says who asks
	bg m mallory python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" --hold 30 "$GPUMAN_BROKER" \
		'{"v":1,"op":"acquire","request":{"n":"1"},"wait":true,"command":"alice train.py","uid":0,"user":"gmtest-alice"}'
	wait_for '[ "$(gpuman status --json | jq -r ".waiters[0].user")" = gmtest-mallory ]'
	# mallory cannot keep alice's GPU through a job pid of alice's either:
	# only the lease holder's connection may name its job
	run -75 as_user mallory gpuman run -- true
	[[ "$output" == *"no GPU meets the request now"* ]]
	# alice's job ends: her lease ends, mallory's waiting request gets it
	kill -9 "$(cat "$SHARED/pids/a")" "$(awk '/^start/ {print $2}' "$SHARED/rec")"
	wait_for '[ "$(leases .user)" = gmtest-mallory ]'
}

@test "broker: two users' bursts never share a GPU, by the jobs' own records" {
	gm_user alice
	gm_user bob
	gpus 2
	start_daemon
	for i in $(seq 15); do
		as_user alice gpuman run --wait -- $(job 0.05) >/dev/null 2>&1 &
		as_user bob gpuman run --wait -- $(job 0.05) >/dev/null 2>&1 &
	done
	wait_for '[ "$(grep -c ^end "$SHARED/rec")" = 30 ]'
	run -0 python3 "$BATS_TEST_DIRNAME/helpers/overlaps.py" "$SHARED/rec"
	[ "$output" = "jobs 30 overlaps 0" ]
	wait_for '[ -z "$(leases .id)" ]'
}

@test "broker: first come, first served across users" {
	gm_user alice
	gm_user bob
	gpus 1
	start_daemon
	install -m 666 /dev/null "$SHARED/order"
	bg holder - gpuman run -- $(job 60)
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 1 ]'
	n=1
	for who in alice bob alice bob; do
		bg "w$n" "$who" gpuman run --wait -- sh -c "echo $n-$who >>'$SHARED/order'"
		wait_for "[ \"\$(gpuman status --json | jq '.waiters | length')\" = $n ]"
		n=$((n + 1))
	done
	run -0 gpuman status --json
	[ "$(jqr '[.waiters[].user] | join(",")')" = gmtest-alice,gmtest-bob,gmtest-alice,gmtest-bob ]
	kill -9 "$(cat "$SHARED/pids/holder")" "$(awk '/^start/ {print $2}' "$SHARED/rec")"
	wait_lines 4 "$SHARED/order"
	[ "$(tr '\n' ' ' <"$SHARED/order")" = "1-alice 2-bob 3-alice 4-bob " ]
}

@test "broker: queued jobs wait in the same line as run --wait, and status shows their place" {
	gm_user alice
	gm_user bob
	gpus 1
	start_daemon
	install -m 666 /dev/null "$SHARED/order"
	as_user alice mkdir -m 700 "$SHARED/aq"
	bg holder - gpuman run -- $(job 60)
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 1 ]'
	# alice submits first, bob's run --wait comes after, alice's second after that
	GPUMAN_QUEUE_DIR=$SHARED/aq as_user alice gpuman submit -- sh -c "echo 1-alice-queued >>'$SHARED/order'"
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	# her queue says why it waits, as the broker tells it
	wait_for '[ "$(GPUMAN_QUEUE_DIR=$SHARED/aq as_user alice gpuman queue --json | jq -r ".[0].reason")" != null ]'
	[[ "$(GPUMAN_QUEUE_DIR=$SHARED/aq as_user alice gpuman queue --json | jq -r ".[0].reason")" == \
		"waiting for GPUs; GPU 0 "*"leased exclusively by $(id -un)"* ]]
	bg w bob gpuman run --wait -- sh -c "echo 2-bob-run >>'$SHARED/order'"
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 2 ]'
	run -0 gpuman status --json
	[ "$(jqr '[.waiters[].user] | join(",")')" = gmtest-alice,gmtest-bob ]
	# her queue is hers alone: the line shows her next job's place, not its command
	[ "$(jqr '.waiters[0].command')" = "its next queued job or batch task" ]
	kill -9 "$(cat "$SHARED/pids/holder")" "$(awk '/^start/ {print $2}' "$SHARED/rec")"
	wait_lines 2 "$SHARED/order"
	[ "$(tr '\n' ' ' <"$SHARED/order")" = "1-alice-queued 2-bob-run " ]
	run -0 env GPUMAN_QUEUE_DIR=$SHARED/aq setpriv --reuid=gmtest-alice --regid=gmtest-alice \
		--clear-groups env HOME=/tmp PATH="$PATH" gpuman wait 1
	[ "$(GPUMAN_QUEUE_DIR=$SHARED/aq as_user alice gpuman queue --all --json | jq -r ".[0].reason")" = null ]
}

@test "broker: a line longer than status lists is counted per user after its head: status, queue -u, the library, top, /metrics and the page" {
	gm_user bob
	gpus 1
	start_daemon
	bg holder - gpuman run -- $(job 600)
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 1 ]'
	# in line: all waiters, listed or counted
	total() { gpuman status --json | jq '(.waiters | length) + ([.waiters_more[]?.count] | add // 0)'; }
	# 300 of ours, then 20 of bob's once ours are all in line: the broker
	# lists the first 256 and counts the rest per user, in the order met
	for i in $(seq 300); do
		sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/w$i" gpuman run --wait -- true >/dev/null 2>&1 &
	done
	wait_for '[ "$(total)" = 300 ]' 120
	for i in $(seq 20); do
		as_user bob sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/b$i" gpuman run --wait -- true >/dev/null 2>&1 &
	done
	wait_for '[ "$(total)" = 320 ]' 60
	run -0 gpuman status --json
	[ "$(jqr '.waiters | length')" = 256 ]
	[ "$(jqr '[.waiters[].user] | unique | join(",")')" = "$(id -un)" ]
	[ "$(jqr '[.waiters_more[] | "\(.user) \(.count)"] | join(",")')" = "$(id -un) 44,gmtest-bob 20" ]
	run -0 gpuman status
	[[ "$output" == *"... and 44 more from $(id -un)"* ]]
	[[ "$output" == *"... and 20 more from gmtest-bob"* ]]
	# -u shows that user's part of the tail alone, in the table and the JSON
	run -0 gpuman status -u gmtest-bob
	[[ "$output" == *"... and 20 more from gmtest-bob"* ]]
	[[ "$output" != *"more from $(id -un)"* ]]
	run -0 gpuman status --json -u gmtest-bob
	[ "$(jqr '.waiters | length')" = 0 ]
	[ "$(jqr '[.waiters_more[] | "\(.user) \(.count)"] | join(",")')" = "gmtest-bob 20" ]
	# what others wait for: bob's requests, all in the tail
	run -0 gpuman queue -u gmtest-bob
	[[ "$output" == *"gmtest-bob"*"waiting"*"20 more, further back in the line"* ]]
	[[ "$output" != *"waits for no GPU"* ]]
	run -0 gpuman queue -u gmtest-bob --json
	[ "$(jqr -c '[.[] | select(.state == "waiting")]')" = '[{"user":"gmtest-bob","state":"waiting","count":20}]' ]
	# the C library's gm_leases_json and the Python binding count it whole
	run -0 py_gpuman -c 'import gpuman, json; print(len(gpuman.waiters()), json.dumps(gpuman.waiting_by_user(), sort_keys=True))'
	[ "$output" = "256 {\"gmtest-bob\": 20, \"$(id -un)\": 300}" ]
	# serve: the whole line in /metrics, and the tail on the page
	gpuman serve --listen 127.0.0.1:0 --interval 0.3 2>"$BATS_TEST_TMPDIR/serve.log" 3>&- &
	echo $! >"$SHARED/pids/serve"
	wait_for "grep -q '(port [0-9]*)' '$BATS_TEST_TMPDIR/serve.log'"
	local url=http://127.0.0.1:$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$BATS_TEST_TMPDIR/serve.log")
	wait_for "curl -sf '$url/metrics' | grep -q '^gpuman_line_length{.*} 320$'"
	run -0 curl -sf "$url/metrics"
	[[ "$output" == *"gpuman_line_requests{user=\"$(id -un)\","*"} 300"* ]]
	[[ "$output" == *'gpuman_line_requests{user="gmtest-bob",'*'} 20'* ]]
	[ "$(grep -c '^gpuman_line_wait_seconds{' <<<"$output")" = 256 ]
	# top: three waiters shown, the 317 others counted
	command -v tmux >/dev/null || skip "tmux is missing (scripts/ensure-deps installs it): top unchecked"
	tmux -L "gm-broker-$$" new-session -d -x 120 -y 30 \
		"env PATH='$PATH' GPUMAN_SIM='$GPUMAN_SIM' GPUMAN_SIM_STATE='$GPUMAN_SIM_STATE' \
		 GPUMAN_BROKER='$GPUMAN_BROKER' gpuman top -d 0.3; sleep 60"
	wait_for "tmux -L gm-broker-$$ capture-pane -p | grep -q '+317 more waiting'" ||
		{ tmux -L "gm-broker-$$" capture-pane -p; false; }
	command -v chromium >/dev/null || skip "chromium is not installed (Debian package chromium): the page's tail unchecked"
	timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
		--user-data-dir="$BATS_TEST_TMPDIR/chrome" --dump-dom "$url/" >"$BATS_TEST_TMPDIR/dom.html" 2>/dev/null
	run -0 cat "$BATS_TEST_TMPDIR/dom.html"
	[[ "$output" == *"<td>…</td><td>$(id -un)</td><td>44 more</td>"* ]]
	[[ "$output" == *"<td>…</td><td>gmtest-bob</td><td>20 more</td>"* ]]
}

@test "broker: a queued job cancelled while it keeps its place gives the place up" {
	gpus 2
	start_daemon
	install -m 666 /dev/null "$SHARED/order"
	bg holder - gpuman run --only 0 -- $(job 60)
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 1 ]'
	run -0 gpuman submit --only 1 -- sleep 300
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 2 ]'
	run -0 gpuman submit -- true
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	bg w - gpuman run --wait -- sh -c "echo served >>'$SHARED/order'"
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 2 ]'
	# the dispatcher still runs job 1: it must not keep job 2's place
	run -0 gpuman cancel 2
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	kill -9 "$(cat "$SHARED/pids/holder")" "$(awk '/^start/ {print $2}' "$SHARED/rec")"
	wait_for 'grep -q served "$SHARED/order"'
	gpuman cancel 1 >/dev/null
}

@test "broker: garbage, stalled and silent clients do not hold up anybody" {
	gm_user mallory
	gm_user alice
	gpus 1
	start_daemon
	# garbage is answered and dropped
	run as_user mallory python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		'GET / HTTP/1.0' '{"v":1,"op":"acquire"}'
	[[ "$output" == *'"op":"refused"'*"malformed"* ]]
	run as_user mallory python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		'{"v":1,"op":"acquire","request":{"n":"1","mem":"-5"},"wait":true}'
	[[ "$output" == *'"op":"refused"'*"--mem '-5'"* ]]
	head -c 100000 /dev/zero | tr '\0' x >"$SHARED/long"
	run as_user mallory python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		"-partial:$(cat "$SHARED/long")"
	[[ "$output" == *"malformed"* ]]
	# 100 connections that never finish a line, one that sent half of one;
	# held 15 s: past the last check below (at most 1 + 3 + 5 s), so that
	# the broker's fds fall only by its own doing
	for i in $(seq 100); do
		as_user mallory python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" --hold 15 \
			"$GPUMAN_BROKER" >/dev/null 2>&1 &
	done
	as_user mallory python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" --hold 15 \
		"$GPUMAN_BROKER" '-partial:{"v":1,"op":"acq' >/dev/null 2>&1 &
	sleep 1
	start=$(date +%s%N)
	run -0 as_user alice gpuman run -- true
	run -0 as_user alice gpuman status
	[ $(( ($(date +%s%N) - start) / 1000000 )) -lt 3000 ]
	# silent ones are dropped after 5 s: the broker holds nothing for them
	sleep 5
	[ "$(ls /proc/"$DAEMON"/fd | wc -l)" -lt 20 ]
}

@test "broker: a socket served by another user is refused, with the reason" {
	gm_user mallory
	gpus 1
	export GPUMAN_BROKER=$SHARED/squat.sock
	as_user mallory sh -c 'echo $$ >"$0"; exec gpuman daemon --socket "$1" --state /tmp/gm-squat-$$/l.json' \
		"$SHARED/pids/squat" "$GPUMAN_BROKER" 2>/dev/null &
	wait_for '[ -S "$GPUMAN_BROKER" ]'
	run -1 gpuman run -- true
	[[ "$output" == *"served by uid $(id -u gmtest-mallory), not by root; refusing it"* ]]
}

@test "broker: a second broker on the same state file or socket is refused; the first keeps its leases and its socket" {
	gpus 1
	start_daemon
	bg holder - gpuman run -- $(job 60)
	wait_for '[ "$(grep -c ^start "$SHARED/rec")" = 1 ]'
	before=$(cat "$STATE")
	# the same state on a socket of its own: two authorities over one set
	# of leases would grant the held GPU again
	run -1 timeout 20 gpuman daemon --socket "$SHARED/two.sock" --state "$STATE"
	[[ "$output" == *"another broker (pid $DAEMON) keeps its leases in '$STATE': stop it first"* ]]
	[ ! -e "$SHARED/two.sock" ]
	[ "$(cat "$STATE")" = "$before" ]
	# the same socket with a state of its own
	mkdir -m 700 "$BATS_TEST_TMPDIR/b2"
	run -1 timeout 20 gpuman daemon --socket "$GPUMAN_BROKER" --state "$BATS_TEST_TMPDIR/b2/leases.json"
	[[ "$output" == *"another broker already serves '$GPUMAN_BROKER'"* ]]
	[ "$(leases .id | tr , '\n' | grep -c .)" = 1 ]
	run -75 gpuman run -- true
	# the socket removed by hand and a second broker bound in its place:
	# the first, stopped, leaves the second's socket alone
	rm "$GPUMAN_BROKER"
	env ${GM_DAEMON_ASAN_OPTIONS:+ASAN_OPTIONS=$GM_DAEMON_ASAN_OPTIONS} gpuman daemon \
		--socket "$GPUMAN_BROKER" --state "$BATS_TEST_TMPDIR/b2/leases.json" 2>"$BATS_TEST_TMPDIR/b2.log" &
	second=$!
	wait_for '[ -S "$GPUMAN_BROKER" ] && grep -q serving "$BATS_TEST_TMPDIR/b2.log"'
	kill "$DAEMON"
	daemon_end "$DAEMON"
	[ -S "$GPUMAN_BROKER" ]
	run -0 gpuman status --json
	[ "$(jq '.leases | length' <<<"$output")" = 0 ]
	DAEMON=$second
}

@test "broker: nobody serving GPUMAN_BROKER is an error, never a silent fall-back" {
	gpus 1
	export GPUMAN_BROKER=$SHARED/nobody.sock
	run -1 gpuman run -- true
	[[ "$output" == *"'$GPUMAN_BROKER'"*"does not answer"*"start gpuman daemon there"* ]]
	# said while it waits for a restart; one wait a command, not one a connection
	[[ "$output" == *"does not answer (No such file or directory); waiting up to 5 s"* ]]
	[ "$(grep -c 'waiting up to' <<<"$output")" = 1 ]
	# never advice that would lease beside the broker's kept leases
	[[ "$output" != *"GPUMAN_BROKER=off"* ]]
	run -0 gpuman status
	[[ "$output" == *"warning: leases not shown"*"does not answer"* ]]
	# pick and Python's pick() name the socket too, not "the state directory"
	run -1 gpuman pick
	[[ "$output" == *"'$GPUMAN_BROKER'"*"does not answer"*"start gpuman daemon there"* ]]
	run -1 py_gpuman -c 'import gpuman; gpuman.pick()'
	[[ "$output" == *"'$GPUMAN_BROKER'"*"does not answer"* ]]
	# a word that is not 'off' is refused at once, not waited for as a socket
	for v in no 0 gpuman.sock; do
		GPUMAN_BROKER=$v run -1 timeout 2 gpuman run -- true
		[ "$output" = "gpuman run: GPUMAN_BROKER='$v' is neither 'off' nor the path of a broker's socket (such as /run/gpuman-broker/gpuman.sock)" ]
		# nor queued for a dispatcher to take as a path
		GPUMAN_BROKER=$v run -1 timeout 2 gpuman submit -- true
		[[ "$output" == *"GPUMAN_BROKER='$v' is neither 'off' nor the path"* ]]
	done
	# 'off' in any case is off
	GPUMAN_BROKER=Off run -0 gpuman run -- true
}

@test "broker: MIG slices are leased one per job, the lease names its slice, and two users never share one" {
	gm_user alice
	gm_user bob
	local s1c=MIG-1c000000-1111-4000-8000-000000000003 s1d=MIG-1d000000-1111-4000-8000-000000000004
	# examples/mig-a100.json less one job: GPU 0's two 1g.10gb slices are free
	jq 'del(.gpus[0].mig_devices[2].processes)' "$GM_ROOT/examples/mig-a100.json" >"$SHARED/mig.json"
	chmod 644 "$SHARED/mig.json"
	export GPUMAN_SIM=$SHARED/mig.json
	start_daemon
	# each job runs until its stop file appears
	local job='echo "$CUDA_VISIBLE_DEVICES $GPUMAN_GPUS" >"$0"; while [ ! -e "$0.stop" ]; do sleep 0.05; done'
	bg a alice gpuman run --mig 1g.10gb -- sh -c "$job" "$SHARED/env-a"
	wait_for "[ -s '$SHARED/env-a' ]"
	bg b bob gpuman run --mig 1g.10gb -- sh -c "$job" "$SHARED/env-b"
	wait_for "[ -s '$SHARED/env-b' ]"
	# one slice each, named by its UUID; their GPU is GPU 0
	[ "$(cat "$SHARED/env-a" "$SHARED/env-b" | sort | tr '\n' ' ')" = "$s1c 0 $s1d 0 " ]
	# the leases name the GPU (exclusive, as the registry's do) and the slice
	run -0 gpuman status --json
	[ "$(jqr '[.leases[].gpus[0].mig_uuid] | sort | join(" ")')" = "$s1c $s1d" ]
	[ "$(jqr '[.leases[] | "\(.kind) \(.gpus[0].index)"] | unique | join(",")')" = "exclusive 0" ]
	[ "$(jqr '[.leases[].user] | sort | join(",")')" = gmtest-alice,gmtest-bob ]
	# and so does the state file, for a restarted broker
	[ "$(jq -s -f "$BATS_TEST_DIRNAME/helpers/state.jq" "$STATE" |
		jq -r '[.leases[].gpus[0].mig_uuid] | sort | join(" ")')" = "$s1c $s1d" ]
	# no third 1g.10gb slice now: 75, naming who holds each
	run -75 as_user bob gpuman run --mig 1g.10gb -- true
	[[ "$output" == *"1g.10gb MIG-1c000000 leased by gmtest-"*"1g.10gb MIG-1d000000 leased by gmtest-"* ]]
	# the other slices and the whole GPU 1 are still there to take
	run -0 as_user bob gpuman run --mig 2g.20gb -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
	[ "$output" = MIG-2b000000-1111-4000-8000-000000000002 ]
	run -0 gpuman run -- sh -c 'echo $GPUMAN_GPUS'
	[ "$output" = 1 ]
	# a waiter for a slice is in the line, and gets the slice alice frees
	bg w bob gpuman run --mig 1g.10gb --wait -- sh -c 'echo "$CUDA_VISIBLE_DEVICES" >"$0"' "$SHARED/env-w"
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	run -0 gpuman status
	[[ "$output" == *"1 MIG slice 1g.10gb"* ]]
	touch "$SHARED/env-a.stop"
	wait_for "[ -s '$SHARED/env-w' ]"
	[ "$(cat "$SHARED/env-w")" = "$(cut -d' ' -f1 "$SHARED/env-a")" ]
	touch "$SHARED/env-b.stop"
	wait_for '[ -z "$(leases .id)" ]'
}

@test "a waiter says why it waits: its GPU's holder, or the line ahead; through the broker and the registry" {
	gpus 1
	start_daemon
	local n=0 t
	for t in "$GPUMAN_BROKER" off; do
		n=$((n + 1))
		rm -f "$SHARED/go"
		GPUMAN_BROKER=$t bg hold$n - gpuman run -- sh -c "while [ ! -e '$SHARED/go' ]; do sleep 0.05; done"
		wait_for "[ \"\$(GPUMAN_BROKER=$t gpuman status --json | jq '.leases | length')\" = 1 ]"
		GPUMAN_BROKER=$t gpuman run --wait -- true 2>"$SHARED/first$n" &
		first=$!
		wait_for "[ \"\$(GPUMAN_BROKER=$t gpuman status --json | jq '.waiters | length')\" = 1 ]"
		GPUMAN_BROKER=$t gpuman run --wait -- true 2>"$SHARED/second$n" &
		second=$!
		wait_for "[ \"\$(GPUMAN_BROKER=$t gpuman status --json | jq '.waiters | length')\" = 2 ]"
		touch "$SHARED/go"
		wait "$first" "$second"
		run -0 cat "$SHARED/first$n"
		[ "${lines[0]}" = "gpuman run: waiting for GPUs for 'true' (Ctrl-C to give up):" ]
		[[ "${lines[1]}" =~ ^"GPU 0 (g1): leased exclusively by root (pid "[0-9]+")"$ ]]
		[ "${#lines[@]}" = 2 ]
		run -0 cat "$SHARED/second$n"
		[ "${lines[0]}" = "gpuman run: waiting for GPUs for 'true' (Ctrl-C to give up):" ]
		# the broker reads the line; the registry queues behind it unread
		if [ "$t" = off ]; then
			[ "${lines[1]}" = "behind earlier requests in line (gpuman status lists them)" ]
		else
			[[ "${lines[1]}" == "every GPU it could use is held for earlier requests in line, the first root's 1 GPU exclusive (pid "* ]]
		fi
	done
}
