#!/usr/bin/env bats
# gpuman reserve / release: GPUs held for a user's interactive work with no
# process holding them, until released or expired -- against other real
# users (gmtest-*), in the daemonless registry and through the broker.  And
# the admin's policy bound where leases are granted: max_reserve, keep_out,
# GPUs kept for a group, max_gpus in the broker, [defaults].

load helpers

setup() {
	gm_setup
	SHARED=$(mktemp -d /tmp/gm-reserve.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim"
	install -m 666 /dev/null "$SHARED/sim/lock"
	export GPUMAN_STATE_DIR="$SHARED/state" GPUMAN_SIM_STATE="$SHARED/sim"
	export GPUMAN_CONFIG="$SHARED/gpuman.conf"
	install -m 644 /dev/null "$GPUMAN_CONFIG"
	# two empty GPUs every user can read
	echo '{ "gpus": [ {"name":"g0","memory_total_mib":16000}, {"name":"g1","memory_total_mib":16000} ] }' \
		>"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM="$SHARED/gpus.json"
	DAEMON=
}

teardown() {
	[ -z "$DAEMON" ] || kill_ours -TERM "$DAEMON"
	wait 2>/dev/null || true
	rm -rf "$SHARED"
}

# broker - the rest of the test goes through a broker of its own
broker() {
	export GPUMAN_BROKER=$SHARED/gpuman.sock
	gpuman daemon --socket "$GPUMAN_BROKER" --state "$BATS_TEST_TMPDIR/broker/leases.json" \
		2>>"$BATS_TEST_TMPDIR/daemon.log" &
	DAEMON=$!
	wait_for "grep -q serving '$BATS_TEST_TMPDIR/daemon.log' 2>/dev/null"
}

# holds_against_others - alice reserves both GPUs; bob is refused, cannot
# release it, and gets a GPU once alice releases it early
holds_against_others() {
	gm_user alice
	gm_user bob
	run -0 --separate-stderr as_user alice gpuman reserve -n 2 --for 60s
	[[ "$output" == *"export CUDA_VISIBLE_DEVICES=GPU-"*"export GPUMAN_RESERVATION="* ]]
	[[ "$stderr" == *"reserved for 1m"*"gpuman release "* ]]
	id=$(printf '%s\n' "$output" | sed -n 's/^export GPUMAN_RESERVATION=//p')
	# alice's shell takes the lines as they are
	run -0 as_user alice sh -c "eval \"\$(gpuman reserve --for 1s 2>/dev/null || true)\"; echo \"x\$GPUMAN_GPUS\""
	run -75 as_user bob gpuman run -- true
	[[ "$output" == *"gmtest-alice (reservation, "*"s left)"* ]]
	run -0 gpuman status --json
	[ "$(jqr '.leases[0].reservation')" = true ]
	[ "$(jqr '.leases[0].user')" = gmtest-alice ]
	[ "$(jqr "(.leases[0].expires_ms - $(date +%s%3N)) / 1000 | floor | . > 50 and . <= 60")" = true ]
	run -0 gpuman status
	[[ "$output" == *"[reserved: gmtest-alice, "*"s left]"* ]]
	[[ "$output" == *"reserved (gpuman release ID ends one early):"*"gmtest-alice, GPUs 0,1, "*"s left, id $id"* ]]
	run -1 as_user bob gpuman release "$id"
	[[ "$output" == *"reservation '$id' is gmtest-alice's: only they (or root) can release it"* ]]
	run -1 as_user bob gpuman reserve --release "$id"
	run -75 as_user bob gpuman run -- true
	run -0 as_user alice gpuman release "$id"
	run -0 as_user bob gpuman run -n 2 -- true
	run -1 as_user alice gpuman release "$id"
	[[ "$output" == *"no reservation '$id'"* ]]
}

# expires_on_time - a 2 s reservation ends by itself: bob, waiting, gets the
# GPUs about 2 s later, and none before
expires_on_time() {
	gm_user alice
	gm_user bob
	run -0 as_user alice gpuman reserve -n 2 --for 2s
	start=$(date +%s%3N)
	run -0 as_user bob gpuman run -n 2 --wait=10s -- true
	took=$(( $(date +%s%3N) - start ))
	echo "bob waited $took ms" >&3
	[ "$took" -ge 1500 ]
	[ "$took" -lt 4500 ]
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = 0 ]
}

# inside_own - with the lines reserve prints, alice's gpuman run leases
# inside her reservation; two runs there do not share a GPU; bob is refused
inside_own() {
	gm_user alice
	gm_user bob
	printf '[limits]\nmax_gpus = 1\n' >"$GPUMAN_CONFIG"
	run -0 as_user alice sh -c '
		eval "$(gpuman reserve --for 60s 2>/dev/null)" || exit 9
		gpuman run -- sh -c "echo in \$GPUMAN_GPUS; sleep 1" &
		sleep 0.5
		gpuman run -- true && echo shared
		wait
		echo "cvd $CUDA_VISIBLE_DEVICES"'
	[[ "$output" == *"in 0"* || "$output" == *"in 1"* ]]
	[[ "$output" != *shared* ]]
	[[ "$output" == *"cvd GPU-"* ]]
	run -75 as_user alice gpuman run -- true
	[[ "$output" == *"max_gpus: holds 1 GPU already"* ]]
	run -0 as_user bob gpuman run -- true
	run -75 as_user bob gpuman run -n 2 -- true
}

@test "registry: inside her own reservation, a user's gpuman run uses its GPUs; nobody else can" {
	inside_own
}

@test "broker: inside her own reservation, a user's gpuman run uses its GPUs; nobody else can" {
	broker
	inside_own
}

# narrows_only - a request inside one's own reservation gets only the
# reservation's GPUs (issue 23, attack 5): with max_gpus = 2 and both
# reserved, a run inside it (GPUMAN_RESERVATION alone, no inherited
# CUDA_VISIBLE_DEVICES) that excludes them is refused naming the
# reservation, never given the other two GPUs; one that fits runs there
narrows_only() {
	gm_user alice
	printf '[limits]\nmax_gpus = 2\n' >"$GPUMAN_CONFIG"
	run -0 as_user alice sh -c '
		eval "$(gpuman reserve -n 2 --for 60s 2>/dev/null)" || exit 9
		echo "reserved $GPUMAN_GPUS"
		unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER
		gpuman run -n 2 --exclude "$GPUMAN_GPUS" -- sh -c "echo granted beside \$GPUMAN_GPUS"
		echo "rc $?"
		gpuman run -n 2 --exclude "$GPUMAN_GPUS" --wait=1s -- sh -c "echo granted beside \$GPUMAN_GPUS"
		echo "rc $?"
		gpuman run --exclude "${GPUMAN_GPUS%%,*}" -- sh -c "echo inside \$GPUMAN_GPUS"
		gpuman status --json | jq -r ".leases | length"'
	echo "$output" >&3
	res=$(printf '%s\n' "$output" | sed -n 's/^reserved //p')
	[[ "$output" != *"granted beside"* ]]
	[[ "$output" == *"rc 75"* || "$output" == *"rc 1"* ]]
	[[ "$output" == *"GPU 2 (g2): outside reservation "*"inside which it asks"* ]]
	# the run that fits got the reservation's other GPU
	[[ "$output" == *"inside ${res#*,}"* ]]
	# nothing but the reservation is left, and nobody holds 4 GPUs
	[ "$(printf '%s\n' "$output" | tail -1)" = 1 ]
}

four_gpus() {
	echo '{ "gpus": [ {"name":"g0","memory_total_mib":16000}, {"name":"g1","memory_total_mib":16000},
		{"name":"g2","memory_total_mib":16000}, {"name":"g3","memory_total_mib":16000} ] }' \
		>"$SHARED/gpus.json"
}

@test "registry: a request inside one's own reservation gets only its GPUs, whatever it excludes (max_gpus holds)" {
	four_gpus
	narrows_only
}

@test "broker: a request inside one's own reservation gets only its GPUs, whatever it excludes (max_gpus holds)" {
	four_gpus
	broker
	narrows_only
}

@test "registry: a reservation holds GPUs against another user, who cannot release it; released early" {
	holds_against_others
	# a reservation is a plain file of its owner: nobody else may write it
	[ -z "$(find "$SHARED/state" -name 'resv.*' -perm /022)" ]
}

@test "registry: a reservation expires on time and its GPUs go to the waiter" {
	expires_on_time
}

@test "broker: a reservation holds GPUs against another user, who cannot release it; released early" {
	broker
	holds_against_others
	[ -z "$(ls "$SHARED/state")" ]
}

@test "broker: a reservation expires on time, and survives a restart of the broker" {
	broker
	gm_user alice
	run -0 as_user alice gpuman reserve -n 1 --for 60s
	kill "$DAEMON"
	wait "$DAEMON" || true
	broker
	run -0 gpuman status --json
	[ "$(jqr '.leases[0].user')" = gmtest-alice ]
	[ "$(jqr '.leases[0].reservation')" = true ]
	run -0 gpuman release "$(jqr '.leases[0].id')" # root may
	expires_on_time
}

@test "reserve needs --for; a tampered reservation file of another user is not believed" {
	run -2 gpuman reserve -n 1
	[[ "$output" == *"--for DURATION"* ]]
	run -2 gpuman reserve --for 0s
	gm_user alice
	gm_user mallory
	run -0 as_user alice gpuman reserve -n 2 --for 60s
	f=$(ls "$SHARED"/state/resv.*)
	# a copy under another name, or a link, is not alice's reservation
	as_user mallory sh -c "cat '$f' >'$SHARED/state/resv.forged'; chmod 644 '$SHARED/state/resv.forged'"
	# (a hard link needs protected_hardlinks off for mallory: root makes it)
	ln "$f" "$SHARED/state/resv.linked"
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = 1 ]
	[ "$(jqr '.leases[0].user')" = gmtest-alice ]
	run -75 as_user mallory gpuman run -- true
	# mallory cannot remove alice's file (sticky directory)
	run -1 as_user mallory gpuman release "$(basename "$f" | cut -c6-)"
	[ -e "$f" ]
}

@test "max_reserve: a longer --for is refused, naming the limit and where it is set (registry and broker)" {
	printf '[limits]\nmax_reserve = 1h\n' >"$GPUMAN_CONFIG"
	run -2 gpuman reserve --for 2h
	[[ "$output" == *"max_reserve: --for 2h is longer than the limit, 1h ([limits] in $GPUMAN_CONFIG); reserve for 1h or less"* ]]
	run -0 gpuman reserve --for 1h
	broker
	run -2 gpuman reserve --for 90m
	[[ "$output" == *"max_reserve: --for 1h30m is longer than the limit, 1h"* ]]
}

@test "keep_out and [group] gpus: never handed to others, in the registry and through the broker" {
	gm_user alice
	printf '[limits]\nkeep_out = 1\n' >"$GPUMAN_CONFIG"
	run -0 gpuman run -- sh -c 'echo $GPUMAN_GPUS'
	[ "$output" = 0 ]
	run -75 gpuman run -n 2 -- true
	[[ "$output" == *"GPU 1 (g1): kept out of gpuman by the admin (keep_out in $GPUMAN_CONFIG)"* ]]
	printf '[limits]\nkeep_out = 1-3\n' >"$GPUMAN_CONFIG" # a range
	run -75 gpuman run -n 2 -- true
	[[ "$output" == *"GPU 1 (g1): kept out of gpuman by the admin"* ]]
	printf '[group root]\ngpus = 0\n' >"$GPUMAN_CONFIG"
	run -75 as_user alice gpuman run -n 2 -- true
	[[ "$output" == *"GPU 0 (g0): kept for group root ([group] gpus in $GPUMAN_CONFIG)"* ]]
	run -0 as_user alice gpuman run -- sh -c 'echo $GPUMAN_GPUS'
	[ "$output" = 1 ]
	run -0 gpuman run -n 2 -- true
	broker
	run -75 as_user alice gpuman run -n 2 -- true
	[[ "$output" == *"kept for group root"* ]]
	run -0 gpuman run --exclude 0-0 -- sh -c 'echo $GPUMAN_GPUS' # a range, on the wire
	[ "$output" = 1 ]
	run -0 as_user alice gpuman reserve --for 10s
	run -0 gpuman run -- sh -c 'echo $GPUMAN_GPUS'
	[ "$output" = 0 ]
}

@test "broker: max_gpus counts leases and reservations; a capped waiter shows why and blocks nobody" {
	gm_user alice
	gm_user bob
	printf '[limits]\nmax_gpus = 1\n' >"$GPUMAN_CONFIG"
	broker
	run -0 as_user alice gpuman reserve --for 60s
	run -75 as_user alice gpuman run -- true
	[[ "$output" == *"max_gpus: holds 1 GPU already, the limit is 1 ([limits] in $GPUMAN_CONFIG)"* ]]
	run -75 as_user alice gpuman reserve -n 2 --for 1s
	[[ "$output" == *"max_gpus: asks 2 GPUs, the limit is 1"* ]]
	as_user alice gpuman run --wait -- true &
	waiter=$!
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	run -0 gpuman status --json
	[ "$(jqr '.waiters[0].limit')" = "max_gpus: holds 1 GPU already, the limit is 1 ([limits] in $GPUMAN_CONFIG)" ]
	run -0 gpuman status
	[[ "$output" == *"waits for its user's limit, not in the way of others"* ]]
	# bob came later and is served at once
	run -0 as_user bob gpuman run -- true
	run -0 gpuman release "$(gpuman status --json | jq -r '.leases[0].id')"
	wait "$waiter"
}

@test "[defaults] and the personal ~/.config/gpuman/config: defaults only, never the admin's limits" {
	mkdir -p "$XDG_CONFIG_HOME/gpuman"
	printf '[defaults]\npolicy = index\nwait = 5s\n' >"$XDG_CONFIG_HOME/gpuman/config"
	run -0 gpuman reserve --for 2s --json
	[ "$(jqr '.gpus[0].index')" = 0 ]
	# wait = 5s: the next one waits for the first to expire, and so does run
	run -0 gpuman reserve -n 2 --for 1s --json
	run -0 gpuman run -n 2 -- true
	# an option given wins over the default
	run -0 gpuman reserve -n 2 --for 1s
	run -75 gpuman run -n 2 --wait=0s -- true
	printf '[limits]\nmax_gpus = 8\n' >"$XDG_CONFIG_HOME/gpuman/config"
	run -1 gpuman reserve --for 1s
	[[ "$output" == *"$XDG_CONFIG_HOME/gpuman/config:2: [limits] is the admin's ($GPUMAN_CONFIG); your file may only set [queue] and [defaults]"* ]]
	# the older name still works; config wins when both exist
	rm "$XDG_CONFIG_HOME/gpuman/config"
	printf '[defaults]\npolicy = nope\n' >"$XDG_CONFIG_HOME/gpuman/gpuman.conf"
	run -1 gpuman reserve --for 1s
	[[ "$output" == *"gpuman.conf:2: policy = nope: unknown policy"* ]]
}

@test "waste flags a reservation whose GPUs stay idle, and says how to give them back" {
	gm_user alice
	run -0 as_user alice gpuman reserve -n 2 --for 60s
	id=$(gpuman status --json | jq -r '.leases[0].id')
	run -3 gpuman waste --grace 0s
	[[ "$output" == *"reservation $id of gmtest-alice has held GPUs 0,1 for "*"with nothing of theirs running on them"* ]]
	[[ "$output" == *"gpuman release $id"* ]]
	run -3 gpuman waste --grace 0s --json
	[ "$(jqr '[.waste[] | select(.kind == "idle-lease")] | length')" = 1 ]
	run -0 gpuman waste --grace 1h
	[[ "$output" != *"reservation $id"* ]]
}

@test "reserve --wait says why it waits, as run does, and reserves once the GPUs free" {
	gpuman run -n 2 -- sh -c "while [ ! -e '$SHARED/go' ]; do sleep 0.05; done" &
	holder=$!
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	gpuman reserve --for 5s --wait >"$SHARED/env" 2>"$SHARED/err" &
	rsv=$!
	wait_for "grep -q 'leased exclusively' '$SHARED/err'"
	touch "$SHARED/go"
	wait "$holder" "$rsv"
	[ "$(sed -n 1p "$SHARED/err")" = "gpuman reserve: waiting for GPUs (Ctrl-C to give up):" ]
	[[ "$(sed -n 2p "$SHARED/err")" =~ ^"both GPUs: leased exclusively by root (pid "[0-9]+")"$ ]]
	grep -q '^export GPUMAN_RESERVATION=' "$SHARED/env"
}
