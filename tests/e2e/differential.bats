#!/usr/bin/env bats
# differential: one scripted sequence -- three real users (gmtest-alice,
# bob, mallory), exclusive and shared requests, a MIG slice, a reservation
# refused and one granted, max_gpus, a waiter behind an earlier one,
# releases, a cancelled waiter and a kill -9'ed holder -- played through
# the daemonless registry and through the broker.  Both transports call the
# same rules (lib/line.c); what users observe at each step (exit status,
# GPUs granted, the reasons given, the line's order and limits, the leases)
# must be the same, line for line.

load helpers

setup() {
	gm_setup
	SHARED=$(mktemp -d /tmp/gm-diff.XXXXXX)
	chmod 755 "$SHARED"
	PIDS=()
	DAEMON=
}

teardown() {
	local p
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	[ -z "$DAEMON" ] || kill_ours -TERM "$DAEMON"
	wait 2>/dev/null || true
	rm -rf "$SHARED"
}

# fresh TRANSPORT - a new state directory, simulator state and config
fresh() {
	local d="$SHARED/$1"
	mkdir -m 755 "$d"
	mkdir -m 1777 "$d/state" "$d/sim" "$d/out"
	install -m 666 /dev/null "$d/sim/lock"
	export GPUMAN_STATE_DIR="$d/state" GPUMAN_SIM_STATE="$d/sim"
	export GPUMAN_CONFIG="$SHARED/gpuman.conf" # one path: reasons name it
	printf '[user gmtest-alice]\nmax_gpus = 2\n' >"$GPUMAN_CONFIG"
	chmod 644 "$GPUMAN_CONFIG"
	# GPU 0 split into two 1g.10gb slices; GPUs 1-3 whole and alike
	cat >"$d/gpus.json" <<'JSON'
{ "gpus": [
  { "name": "A100", "uuid": "GPU-d0000000-0000-0000-0000-000000000000", "memory_total_mib": 81920,
    "mig_mode": 1, "mig_devices": [
      { "profile": "1g.10gb", "uuid": "MIG-d1000000-0000-0000-0000-000000000001", "memory_total_mib": 9728,
        "gpu_instance_id": 13, "compute_instance_id": 0 },
      { "profile": "1g.10gb", "uuid": "MIG-d2000000-0000-0000-0000-000000000002", "memory_total_mib": 9728,
        "gpu_instance_id": 14, "compute_instance_id": 0 } ] },
  { "name": "g1", "uuid": "GPU-d0000001-0000-0000-0000-000000000000", "memory_total_mib": 16000 },
  { "name": "g2", "uuid": "GPU-d0000002-0000-0000-0000-000000000000", "memory_total_mib": 16000 },
  { "name": "g3", "uuid": "GPU-d0000003-0000-0000-0000-000000000000", "memory_total_mib": 16000 } ] }
JSON
	chmod 644 "$d/gpus.json"
	export GPUMAN_SIM="$d/gpus.json"
	OUT="$d/out" T="$d/transcript"
	: >"$T"
}

start_broker() {
	export GPUMAN_BROKER=$SHARED/$1/gpuman.sock
	gpuman daemon --socket "$GPUMAN_BROKER" --state "$SHARED/$1/broker/leases.json" \
		2>>"$SHARED/$1/daemon.log" &
	DAEMON=$!
	wait_for "grep -q serving '$SHARED/$1/daemon.log' 2>/dev/null"
}

# What differs between two correct runs: pids, times, ids; and the line
# of reserve that places the evaluating shell in the reservation's fence,
# which only the broker has (fence.bats tests it).
norm() {
	sed -E 's/pid [0-9]+/pid N/g; s/until [0-9:]+/until HH:MM:SS/g; s/[0-9]+s left/Ns left/g; s/[0-9]{13}-[0-9]+-[0-9a-f]+/ID/g' |
		grep -v "' reserve --enter ID \$\$\$" || true
}

note() { echo "## $*" >>"$T"; }

# obs USER CMD... - run it now, record its exit status and what it said
obs() {
	local u=$1 out rc
	shift
	out=$(as_user "$u" "$@" 2>&1) && rc=0 || rc=$?
	printf 'rc=%s\n%s\n' "$rc" "$out" | norm >>"$T"
}

# job USER NAME ARGS... - gpuman run ARGS in the background; its job writes
# what it was given to $OUT/NAME and runs until $OUT/NAME.stop exists
job() {
	local u=$1 name=$2
	shift 2
	# as_user's command line, without the function: $! is gpuman run
	setpriv --reuid="gmtest-$u" --regid="gmtest-$u" --clear-groups \
		env -u XDG_CONFIG_HOME HOME=/tmp PATH="$PATH" gpuman run "$@" -- sh -c "echo \"gpus=\$GPUMAN_GPUS cvd=\$CUDA_VISIBLE_DEVICES\" >$OUT/$name; echo \$\$ >$OUT/$name.pid; while [ ! -e $OUT/$name.stop ]; do sleep 0.05; done" \
		>>"$OUT/$name.log" 2>&1 &
	PIDS+=($!)
	eval "PID_$name=$!"
}

granted() {
	wait_for "[ -s $OUT/$1.pid ]" || { echo "$1 was never granted" >&2; return 1; }
	echo "$1 granted: $(cat "$OUT/$1")" >>"$T"
}

line_is() {
	wait_for "[ \"\$(gpuman status --json | jq '.waiters | length')\" = $1 ]" ||
		{ echo "the line never had $1 waiters" >&2; gpuman status >&2; return 1; }
}

status() {
	gpuman status --json | jq -c '
		{line: [.waiters[] | [.user, .request, .limit]],
		 leases: ([.leases[] | [.user, .kind, .share_mib, .reservation,
		   ([.gpus[] | "\(.index)\(if .mig_uuid then ":" + .mig_uuid else "" end)"] | join(","))]] | sort)}' |
		norm >>"$T"
}

script() {
	note "alice takes 2 GPUs exclusive: GPU 0 is in MIG mode, never whole"
	job alice A -n 2
	granted A
	note "bob shares a GPU"
	job bob S --mem 4G
	granted S
	note "mallory takes a MIG slice"
	job mallory M --mig 1g.10gb
	granted M
	note "mallory cannot reserve a whole GPU: none is free of shares"
	obs mallory gpuman reserve --for 60s
	note "bob waits for 2 GPUs exclusive"
	job bob W1 -n 2 --wait
	line_is 1
	note "alice waits, held back by her own max_gpus only"
	job alice W2 --wait
	line_is 2
	note "mallory waits behind bob"
	job mallory W3 --wait
	line_is 3
	status
	note "alice without --wait: her limit"
	obs alice gpuman run -- true
	note "mallory's share without --wait: held back for bob"
	obs mallory gpuman run --mem 1G -- true
	note "mallory cancels her wait"
	kill "$PID_W3"
	line_is 2
	status
	note "alice's holder and job are killed -9: bob is served"
	kill -9 "$PID_A" "$(cat "$OUT/A.pid")"
	granted W1
	line_is 1
	status
	note "bob's share ends: alice is served"
	touch "$OUT/S.stop"
	granted W2
	line_is 0
	status
	note "bob's 2 GPUs end: a reservation of both for mallory, then everything ends"
	touch "$OUT/W1.stop"
	wait_for "[ \"\$(gpuman status --json | jq '.leases | length')\" = 2 ]"
	obs mallory gpuman reserve -n 2 --for 60s
	status
	obs bob gpuman run -- true
	touch "$OUT/M.stop" "$OUT/W2.stop"
	wait_for "[ \"\$(gpuman status --json | jq '[.leases[] | select(.reservation | not)] | length')\" = 0 ]"
	status
}

@test "differential: one script through the registry and the broker gives the same grants, line and reasons" {
	gm_user alice
	gm_user bob
	gm_user mallory
	fresh registry
	script
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PIDS=()
	fresh broker
	start_broker broker
	script
	echo "--- registry" >&3
	cat "$SHARED/registry/transcript" >&3
	diff -u "$SHARED/registry/transcript" "$SHARED/broker/transcript" >&3
	# the script meant something: the grants and reasons it should show
	run cat "$SHARED/broker/transcript"
	[[ "$output" == *"A granted: gpus=1,2 "* ]]
	[[ "$output" == *"S granted: gpus=3 "* ]]
	[[ "$output" == *"M granted: gpus=0 cvd=MIG-d1000000"* ]]
	[[ "$output" == *"max_gpus: holds 2 GPUs already, the limit is 2 ([user gmtest-alice]"* ]]
	[[ "$output" == *"queued for an earlier request: gmtest-bob's 2 GPUs exclusive (pid N)"* ]]
	[[ "$output" == *"W1 granted: gpus=1,2 "* ]]
	[[ "$output" == *"W2 granted: gpus=3 "* ]]
	[[ "$output" == *'["gmtest-mallory","exclusive",null,true,"1,2"]'* ]]
	[[ "$output" == *"GPU 1 (g1): leased exclusively by gmtest-mallory (reservation, Ns left)"* ]]
}
