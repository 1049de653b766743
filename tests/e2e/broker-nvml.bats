#!/usr/bin/env bats
# One NVML session per machine: where a broker (gpuman daemon) runs, it
# holds the driver open and answers every client's snapshot; clients never
# load NVML.  Its reading is read off its event loop, so a driver that takes
# seconds delays nobody's grant, release or answer; what it tells a caller
# about other users' processes is what the caller's own /proc shows.

load helpers
load helpers/broker

setup() {
	gm_setup
	broker_setup bnvml
}

teardown() {
	[ -z "${NS_PID:-}" ] || kill -9 "$NS_PID" 2>/dev/null || true
	broker_teardown
}

# machine JSON-OF-GPUS [LATENCY] - a scenario every user can read
machine() {
	printf '{ %s "gpus": [ %s ] }\n' "${2:+\"latency\": $2,}" "$1" >"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM=$SHARED/gpus.json
}

gpu() { echo "{\"name\":\"g\",\"memory_total_mib\":16000${1:+,$1}}"; }

bg() { # bg NAME USER CMD... - as broker.bats's bg
	local name=$1 user=$2; shift 2
	if [ "$user" = - ]; then
		sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/$name" "$@" &
	else
		as_user "$user" sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/$name" "$@" &
	fi
	wait_for "[ -s '$SHARED/pids/$name' ]"
}

ms() { date +%s%3N; }

@test "broker NVML: clients load no NVML where a broker runs (status, pick, run, submit, Python)" {
	machine "$(gpu),$(gpu)"
	start_daemon
	export GPUMAN_NVML=$SHARED/no-such-libnvidia-ml.so
	# Without the broker the missing library is fatal: proof nothing else reads the GPUs.
	GPUMAN_BROKER=off run -1 gpuman pick
	[[ "$output" == *"no-such-libnvidia-ml.so"* ]]
	run -0 gpuman status --json
	[ "$(jqr '.gpus | length')" = 2 ]
	[ "$(jqr '.reading.by')" = broker ]
	run -0 gpuman pick
	[ "$output" = 0 ]
	run -0 gpuman run -- sh -c 'echo "gpus=$GPUMAN_GPUS"'
	[[ "$output" == *"gpus=0"* ]]
	run -0 gpuman ps
	run -0 gpuman info 1
	run -0 py_gpuman -c 'import gpuman
s = gpuman.snapshot()
print(len(gpuman.devices()), len(s["gpus"]), gpuman.pick())'
	[[ "$output" == "2 2 "* ]]
	# submit checks its request against the broker's reading: a job no GPU
	# can ever take is refused, one that fits is queued and runs
	GPUMAN_QUEUE_DIR=$BATS_TEST_TMPDIR/q run -75 gpuman submit -n 3 -- true
	[[ "$output" == *"can ever meet the request; the job was not queued"* ]]
	GPUMAN_QUEUE_DIR=$BATS_TEST_TMPDIR/q run -0 gpuman submit -- touch "$BATS_TEST_TMPDIR/queued-ran"
	[ "$output" = 1 ]
	GPUMAN_QUEUE_DIR=$BATS_TEST_TMPDIR/q run -0 gpuman wait 1
	[ -e "$BATS_TEST_TMPDIR/queued-ran" ]
	# A real user too: the broker answers whoever asks.
	gm_user bob
	run -0 as_user bob env GPUMAN_NVML="$GPUMAN_NVML" gpuman pick -n 2
	[ "$output" = 0,1 ]
}

@test "broker NVML: a reading is at most 500 ms old, and status says how old" {
	machine "$(gpu),$(gpu)"
	start_daemon
	sleep 1.2
	run -0 gpuman status --json
	[ "$(jqr '.reading.by')" = broker ]
	[ "$(jqr '.reading.age_ms')" -le 500 ]
	[ "$(jqr '.notes | length')" = 0 ]
	run -0 gpuman status
	[[ "${lines[0]}" == *"read by the broker "*" ms ago"* ]]
	# Memory taken since the last reading shows at once: a new reading.
	bg job - gpuman run -- gpuman-simload --mem 3G --util 10 --seconds 30
	wait_for '[ "$(gpuman status --json | jq ".gpus[0].memory_used_mib")" = 3072 ]'
	# Without the broker, status reads the GPUs itself.
	GPUMAN_BROKER=off run -0 gpuman status --json
	[ "$(jqr '.reading.by')" = self ]
}

# connects CMD...: run CMD under strace (what it printed: $BATS_TEST_TMPDIR/out);
# how many connections it made to the broker, nothing if it failed
connects() {
	strace -f -e trace=connect -o "$BATS_TEST_TMPDIR/calls" "$@" >"$BATS_TEST_TMPDIR/out" || return 1
	grep -cF "\"$GPUMAN_BROKER\"" "$BATS_TEST_TMPDIR/calls"
}

@test "broker NVML: status, pick and run ask the broker once: the reading comes with its leases, a grant names its GPUs" {
	command -v strace >/dev/null || skip "strace is missing (scripts/ensure-deps check installs it)"
	machine "$(gpu),$(gpu)"
	start_daemon
	bg job - gpuman run -- sleep 300
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	for cmd in "pick" "status --json"; do
		[ "$(connects gpuman $cmd)" = 1 ]
	done
	# ... and the leases are the ones sent with the reading: GPU 0 is held.
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = 1 ]
	uuid1=$(jqr '.gpus[1].uuid')
	run -0 gpuman pick
	[ "$output" = 1 ]
	run -75 gpuman pick -n 2
	# run: the grant's UUIDs and indices are all the job needs.
	show='echo "$CUDA_VISIBLE_DEVICES $GPUMAN_GPUS"'
	[ "$(connects gpuman run -- sh -c "$show")" = 1 ]
	[ "$(cat "$BATS_TEST_TMPDIR/out")" = "$uuid1 1" ]
	# An inherited allocation is named as it was given: that needs a reading.
	[ "$(connects env CUDA_VISIBLE_DEVICES="$uuid1" gpuman run -- sh -c "$show")" = 2 ]
	[ "$(cat "$BATS_TEST_TMPDIR/out")" = "$uuid1 1" ]
}

@test "broker NVML: a driver that takes seconds (init_ms 5000) delays no other user's run, release or answer" {
	gm_user alice
	gm_user bob
	# 5 s to start the driver; each reading then takes about 3 s (two GPUs'
	# process lists), far over the broker's 1 s limit.
	machine "$(gpu),$(gpu)" '{"init_ms": 5000, "processes_ms": 500}'
	local t0 t
	t0=$(ms)
	start_daemon
	t=$(($(ms) - t0))
	[ "$t" -ge 5000 ] # the broker paid the start-up, once
	# (a job that shows on the GPU would keep showing in the slow driver's
	# last reading after it ends, until the next reading is in: here only
	# the broker's own answers are timed)
	bg hold alice gpuman run -- sleep 60
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	# Another user's whole run (grant, job, release) does not wait for the driver.
	for _ in 1 2 3; do
		t0=$(ms)
		run -0 as_user bob gpuman run -- true
		t=$(($(ms) - t0))
		echo "bob's run took $t ms" >&3
		[ "$t" -lt 1500 ]
	done
	# A release hands the GPU on at once: bob waits for both GPUs.
	bg wait bob gpuman run -n 2 --wait -- true
	sleep 0.3
	t0=$(ms)
	kill "$(cat "$SHARED/pids/hold")"
	wait_for '! kill -0 "$(cat "$SHARED/pids/wait")" 2>/dev/null'
	t=$(($(ms) - t0))
	echo "release to bob's grant and exit: $t ms" >&3
	[ "$t" -lt 1500 ]
	# status answers within the broker's limit, with the reading's age said.
	t0=$(ms)
	run -0 as_user bob gpuman status
	t=$(($(ms) - t0))
	echo "status took $t ms" >&3
	[ "$t" -lt 2500 ]
	[[ "$output" == *"read by the broker"* ]]
	[[ "$output" == *"the driver did not answer the lease broker within 1000 ms"* ]]
	# Without the broker every command pays the start-up itself.
	t0=$(ms)
	GPUMAN_BROKER=off run -0 gpuman pick
	[ $(($(ms) - t0)) -ge 5000 ]
}

@test "broker NVML: status says once where persistence mode is off, what it costs and the fix" {
	machine "$(gpu '"persistence_mode":0'),$(gpu '"persistence_mode":1'),$(gpu '"persistence_mode":0')" \
		'{"init_ms": 300, "attach_ms": 100}'
	start_daemon
	run -0 gpuman status
	[ "$(grep -c 'persistence mode is off' <<<"$output")" = 1 ]
	[[ "$output" == *"persistence mode is off on GPUs 0,2"* ]]
	[[ "$output" == *"nvidia-persistenced"* ]]
	# 300 ms + 100 ms for each of the two GPUs without it, measured by the broker
	[[ "$output" =~ nvmlInit\ took\ (5[0-9][0-9])\ ms\ in\ the\ lease\ broker ]]
	run -0 gpuman status --json
	[ "$(jqr '[.gpus[].persistence_mode] | map(tostring) | join(",")')" = false,true,false ]
	GPUMAN_BROKER=off run -0 gpuman status
	[[ "$output" == *"in this command, and every gpuman command pays it again"* ]]
	# All on: no word of it.
	machine "$(gpu '"persistence_mode":1')"
	GPUMAN_BROKER=off run -0 gpuman status
	[[ "$output" != *"persistence"* ]]
}

# hidepid_ns MODE - a mount namespace whose /proc is mounted hidepid=MODE
# (NS_PID its process); skips where it cannot be made.
hidepid_ns() {
	command -v unshare >/dev/null && command -v nsenter >/dev/null ||
		skip "needs unshare and nsenter (util-linux)"
	unshare -m --propagation private sh -c 'mount -t proc -o "hidepid=$1" proc /proc ||
		mount -t proc -o "hidepid=$2" proc /proc || exit 1
		echo mounted; exec sleep 600' sh "$1" "$2" >"$SHARED/ns" 2>&1 3>&- &
	NS_PID=$!
	wait_for "grep -q mounted '$SHARED/ns' || ! kill -0 $NS_PID 2>/dev/null"
	grep -q mounted "$SHARED/ns" || skip "cannot mount /proc with hidepid=$1: $(cat "$SHARED/ns")"
}

hp() { # hp USER CMD... - as USER inside the hidepid namespace
	local u="gmtest-$1"; shift
	nsenter --target "$NS_PID" --mount -- setpriv --reuid="$u" --regid="$u" --clear-groups \
		env -u XDG_CONFIG_HOME HOME=/tmp PATH="$PATH" "$@"
}

proc_of() { # proc_of PID - status --json's entry for that process, from $output
	jqr --argjson p "$1" '.processes[] | select(.pid == $p) | "\(.user) \(.command)"'
}

@test "broker NVML: under hidepid the root broker hands out no other user's pids, names or commands" {
	gm_user alice
	gm_user bob
	machine "$(gpu)"
	start_daemon
	bg job alice gpuman run -- gpuman-simload --mem 2G --util 10 --seconds 60
	local pid
	wait_for '[ "$(gpuman status --json | jq ".processes | length")" = 1 ]'
	# root, and a /proc that hides nothing: all of it
	run -0 gpuman status --json
	pid=$(jqr '.processes[0].pid')
	[[ "$(proc_of "$pid")" == "gmtest-alice "*gpuman-simload* ]]
	run -0 as_user bob gpuman status --json
	[[ "$(proc_of "$pid")" == "gmtest-alice "*gpuman-simload* ]]

	hidepid_ns invisible 2
	# bob's /proc shows him nothing of alice's: neither does the broker,
	# though the GPU's memory stays counted
	run -0 hp bob gpuman status --json
	[ "$(jqr '.processes | length')" = 1 ]
	[ "$(jqr '.processes[0].pid')" = 0 ]
	[ "$(jqr '.processes[0].user')" = null ]
	[ "$(jqr '.processes[0].command')" = null ]
	[ "$(jqr '.gpus[0].memory_used_mib')" = 2048 ]
	# (the lease itself, alice's own word to the broker, is another matter:
	# status shows leases under their holder's name, as without hidepid)
	[[ "$(jqr '.processes')" != *simload* && "$(jqr '.processes')" != *"$pid"* ]]
	run -0 hp bob gpuman ps
	[[ "$output" != *simload* && "$output" != *" $pid "* ]]
	# alice sees her own
	run -0 hp alice gpuman status --json
	[[ "$(proc_of "$pid")" == "gmtest-alice "*gpuman-simload* ]]
	kill -9 "$NS_PID"
	NS_PID=

	hidepid_ns noaccess 1
	# noaccess: the owner shows (stat works), the command does not
	run -0 hp bob gpuman status --json
	[ "$(proc_of "$pid")" = "gmtest-alice null" ]
}

@test "broker NVML: gpuman serve reads the GPUs from the broker (one NVML session per machine)" {
	command -v curl >/dev/null || skip "needs curl"
	[ -x "$GM_BUILD/gpuman-serve" ] || skip "gpuman-serve not built (libmicrohttpd missing)"
	machine "$(gpu),$(gpu),$(gpu)"
	start_daemon
	GPUMAN_NVML=$SHARED/no-such-libnvidia-ml.so gpuman serve --listen 127.0.0.1:0 --interval 0.3 \
		2>"$BATS_TEST_TMPDIR/serve.log" 3>&- &
	echo $! >"$SHARED/pids/serve"
	wait_for "grep -q '(port [0-9]*)' '$BATS_TEST_TMPDIR/serve.log'" || {
		cat "$BATS_TEST_TMPDIR/serve.log"; false; }
	local url=http://127.0.0.1:$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$BATS_TEST_TMPDIR/serve.log")
	run -0 curl -sf "$url/api/v1/status"
	[ "$(jqr '.gpus | length')" = 3 ]
	[ "$(jqr '.reading.by')" = broker ]
	run -0 curl -sf "$url/metrics"
	[[ "$output" == *'gpu="2"'* ]]
}
