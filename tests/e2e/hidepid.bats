#!/usr/bin/env bats
# The daemonless registry where /proc is mounted with hidepid, as hardened
# machines mount it: a user sees none of another user's processes in /proc
# (hidepid=invisible, 2) or sees their numbers but cannot open them
# (noaccess, 1).  A lease's holder then cannot be looked up and its lock
# alone counts (registry_read.c's HOLDER_UNKNOWN); these tests show that
# this still gives no GPU twice, frees a GPU as soon as its holder ends or
# dies, keeps the line in order and names the users.  Every gpuman here runs
# as a real user (gmtest-*) in a private mount namespace whose /proc has the
# option; the machine's own /proc is left as it is.

load helpers
load helpers/registry_users

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	for f in "${SHARED:-/nonexistent}"/pids/*; do
		[ -f "$f" ] && kill_tree "${f##*/}"
	done
	kill_ours ${BG_PIDS:-} ${NS_PID:-}
	wait 2>/dev/null || true
	[ -z "${SHARED:-}" ] || rm -rf "$SHARED"
}

# shared MODE - a state directory and simulator that every user reaches,
# with GPUS GPUs (default 1), and a mount namespace whose /proc is mounted
# hidepid=MODE (invisible or noaccess; their numbers, 2 or 1, on kernels
# older than 5.8).  The test is skipped if no such /proc can be mounted.
shared() {
	local mode=$1 num
	gm_user alice
	gm_user bob
	gm_user mallory
	command -v unshare >/dev/null && command -v nsenter >/dev/null ||
		skip "needs unshare and nsenter (util-linux)"
	SHARED=$(mktemp -d /tmp/gpuman-hidepid.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim" "$SHARED/pids" "$SHARED/out"
	install -m 666 /dev/null "$SHARED/sim/lock"
	python3 -c 'import json, sys
print(json.dumps({"gpus": [{"name": "g", "memory_total_mib": 16000}] * int(sys.argv[1])}))' \
		"${GPUS:-1}" >"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM=$SHARED/gpus.json GPUMAN_STATE_DIR=$SHARED/state GPUMAN_SIM_STATE=$SHARED/sim
	STATE=$SHARED/state
	case $mode in invisible) num=2 ;; noaccess) num=1 ;; esac
	# unshare execs sh, and sh sleep: NS_PID is the namespace's process
	unshare -m --propagation private sh -c 'mount -t proc -o "hidepid=$1" proc /proc ||
		mount -t proc -o "hidepid=$2" proc /proc || exit 1
		echo mounted; exec sleep 600' sh "$mode" "$num" >"$SHARED/ns" 2>&1 3>&- &
	NS_PID=$!
	wait_for "grep -q mounted '$SHARED/ns' || ! kill -0 $NS_PID 2>/dev/null"
	grep -q mounted "$SHARED/ns" ||
		skip "cannot mount /proc with hidepid=$mode in a private mount namespace: $(cat "$SHARED/ns")"
}

# hp USER CMD... - run CMD as gmtest-USER (as_user does) inside the
# namespace with the hidepid /proc
hp() {
	local u="gmtest-$1"
	shift
	nsenter --target "$NS_PID" --mount -- setpriv --reuid="$u" --regid="$u" --clear-groups \
		env -u XDG_CONFIG_HOME HOME=/tmp PATH="$PATH" "$@"
}

# bg USER NAME CMD... - hp in the background; the user's own process (CMD
# after exec) has its pid in $SHARED/pids/NAME, its output in $SHARED/out/NAME
bg() {
	local user=$1 name=$2
	shift 2
	rm -f "$SHARED/pids/$name"
	hp "$user" sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/$name" "$@" \
		>"$SHARED/out/$name" 2>&1 3>&- &
	BG_PIDS="${BG_PIDS:-} $!"
	wait_for "[ -s '$SHARED/pids/$name' ]"
}

# The premise of every test: in the namespace, bob cannot read alice's
# processes (nor, with invisible, see them), and sees his own.
hidden_from_bob() {
	local pid=$1
	! hp bob cat "/proc/$pid/stat" >/dev/null 2>&1 || false
	[ "$MODE" = noaccess ] || ! hp bob test -e "/proc/$pid"
	hp bob sh -c 'test -r /proc/$$/stat'
	hp alice test -r "/proc/$pid/stat"
}

# alice holds the first GPU with a job that prints its CUDA_VISIBLE_DEVICES
# and runs until $SHARED/go exists
alice_holds() {
	bg alice job gpuman run -- sh -c 'echo "on $CUDA_VISIBLE_DEVICES"
		while [ ! -e "$0" ]; do sleep 0.05; done' "$SHARED/go"
	wait_for "grep -q '^on ' '$SHARED/out/job'"
	[ "$(hp alice gpuman status --json | jq '.leases | length')" = 1 ]
	hidden_from_bob "$(pid_of job)"
	hidden_from_bob "$(pgrep -P "$(pid_of job)")"
}

# 1: a live holder that bob cannot look up still holds its GPU
no_double_booking() {
	MODE=$1 GPUS=2 shared "$1"
	alice_holds
	alice_gpu=$(sed -n 's/^on //p' "$SHARED/out/job")
	# bob is given the other GPU, never alice's
	run -0 hp bob gpuman run -- sh -c 'echo "on $CUDA_VISIBLE_DEVICES"'
	[[ "$output" == *"on GPU-"* ]]
	[[ "$output" != *"on $alice_gpu"* ]]
	# and not both, not even by waiting: alice's is hers until she ends
	run -75 hp bob gpuman run -n 2 --wait=2s -- true
	[[ "$output" == *"gmtest-alice"* ]]
	run -75 hp mallory gpuman run --only "$alice_gpu" -- true
	[[ "$output" == *"gmtest-alice"* ]]
}

@test "hidepid=invisible: a lease whose holder another user cannot see still holds its GPU" {
	no_double_booking invisible
}

@test "hidepid=noaccess: a lease whose holder another user cannot read still holds its GPU" {
	no_double_booking noaccess
}

# only_waited NAME - bob's waiter NAME said it waits, and why: alice's
# lease, though he cannot see its holder; then ran, and nothing else
only_waited() {
	cat "$SHARED/out/$1"
	[ "$(sed -n 1p "$SHARED/out/$1")" = "gpuman run: waiting for GPUs for 'sh' (Ctrl-C to give up):" ]
	[[ "$(sed -n 2p "$SHARED/out/$1")" == *": leased exclusively by gmtest-alice (pid "* ]]
	[ "$(sed -n '3,$p' "$SHARED/out/$1" | grep -vc '^bob on GPU-')" = 0 ]
}

# 2 and 3: a lease ends with its job, or with the death of its holder and
# job, and the next user gets the GPU at once
lease_ends() {
	MODE=$1 shared "$1"
	alice_holds
	bg bob waiter gpuman run --wait=30s -- sh -c 'echo "bob on $CUDA_VISIBLE_DEVICES"'
	wait_for '[ "$(tickets)" = 1 ]'
	sleep 0.5
	[ "$(leases)" = 1 ] && kill -0 "$(pid_of waiter)"
	SECONDS=0
	touch "$SHARED/go" # alice's job ends
	wait_for "grep -q '^bob on GPU-' '$SHARED/out/waiter'"
	[ "$SECONDS" -le 3 ]
	wait_for '[ "$(leases)" = 0 ] && [ "$(tickets)" = 0 ]'
	run -0 hp bob gpuman run -- true

	# kill -9 of alice's gpuman alone: her job keeps the lease, as it
	# would if bob could see it
	rm -f "$SHARED/go"
	alice_holds
	job=$(pgrep -P "$(pid_of job)")
	kill -9 "$(pid_of job)"
	sleep 0.5
	kill -0 $job
	run -75 hp bob gpuman run --wait=1s -- true
	[[ "$output" == *"gmtest-alice"* ]]
	# then her job too (the holder is dead): bob gets the GPU in seconds
	bg bob waiter2 gpuman run --wait=30s -- sh -c 'echo "bob on $CUDA_VISIBLE_DEVICES"'
	wait_for '[ "$(tickets)" = 1 ]'
	SECONDS=0
	kill -9 $job
	wait_for "grep -q '^bob on GPU-' '$SHARED/out/waiter2'"
	[ "$SECONDS" -le 3 ]
	only_waited waiter2
	# alice's lease file stays (the sticky directory: only she may remove
	# it), dead: it counts for nobody
	wait_for "! kill -0 $(pid_of waiter2) 2>/dev/null"
	run -0 hp bob gpuman status --json
	[ "$(jqr '.leases | length')" = 0 ]
	run -0 hp mallory gpuman run -- true

	# kill -9 of her gpuman and job at once: the same
	alice_holds
	bg bob waiter3 gpuman run --wait=30s -- sh -c 'echo "bob on $CUDA_VISIBLE_DEVICES"'
	wait_for '[ "$(tickets)" = 1 ]'
	SECONDS=0
	kill_tree job
	wait_for "grep -q '^bob on GPU-' '$SHARED/out/waiter3'"
	[ "$SECONDS" -le 3 ]
	only_waited waiter3
}

@test "hidepid=invisible: a lease ends with its job, or its killed holder, and the next user gets the GPU at once" {
	lease_ends invisible
}

@test "hidepid=noaccess: a lease ends with its job, or its killed holder, and the next user gets the GPU at once" {
	lease_ends noaccess
}

# 4: waiters that cannot see each other are served in the order they came
line_in_order() {
	MODE=$1 shared "$1"
	alice_holds
	touch "$SHARED/order" && chmod 666 "$SHARED/order"
	n=0
	for user in bob mallory alice; do
		n=$((n + 1))
		bg $user w$n gpuman run --wait=30s -- sh -c 'echo "$0" >>"$1"; sleep 0.2' \
			"$user" "$SHARED/order"
		wait_for "[ \"\$(tickets)\" = $n ]"
		sleep 0.05 # distinct ticket times
	done
	# each of them sees the whole line, in order, under the right names
	for user in bob mallory alice; do
		run -0 hp $user gpuman status --json
		[ "$(jqr '[.waiters[].user] | join(",")')" = gmtest-bob,gmtest-mallory,gmtest-alice ]
	done
	# nobody jumps it: a free GPU would go to bob first
	run -75 hp mallory gpuman run -- true
	touch "$SHARED/go"
	wait_lines 3 "$SHARED/order"
	[ "$(paste -sd, "$SHARED/order")" = bob,mallory,alice ]
}

@test "hidepid=invisible: a line of three users who cannot see each other is served in order" {
	line_in_order invisible
}

@test "hidepid=noaccess: a line of three users who cannot read each other is served in order" {
	line_in_order noaccess
}

# 5: status names the holder's user, without errors
status_names() {
	MODE=$1 shared "$1"
	alice_holds
	run -0 --separate-stderr hp bob gpuman status
	[ -z "$stderr" ]
	[[ "$output" == *"gmtest-alice"* ]]
	run -0 --separate-stderr hp bob gpuman status --json
	[ -z "$stderr" ]
	[ "$(jqr '.leases | length')" = 1 ]
	[ "$(jqr '.leases[0].user')" = gmtest-alice ]
}

@test "hidepid=invisible: status shows another user's lease under her name, without errors" {
	status_names invisible
}

@test "hidepid=noaccess: status shows another user's lease under her name, without errors" {
	status_names noaccess
}

# The registry lock (an flock of the state directory) held by a process
# that bob cannot look up: he can neither tell that it works nor that it is
# stuck, so he waits for it as long as for an idle holder he could see
# (10 s), then gives up naming its pid and why he cannot say more.
lock_holder_hidden() {
	MODE=$1 shared "$1"
	bg alice busy /usr/bin/python3 -c 'import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
end = time.time() + 7
while time.time() < end:
    pass' "$STATE"
	wait_for "grep -q locked '$SHARED/out/busy'"
	hidden_from_bob "$(pid_of busy)"
	SECONDS=0
	run -0 hp bob gpuman run -- true
	[ "$SECONDS" -ge 5 ]
	[[ "$output" == *"waiting: the registry lock ('$STATE') is held by pid $(pid_of busy) (another user's"* ]]
	bg alice lock /usr/bin/python3 -c 'import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(300)' "$STATE"
	wait_for "grep -q locked '$SHARED/out/lock'"
	SECONDS=0
	run -75 hp bob gpuman run -- true
	[ "$SECONDS" -ge 9 ]
	[ "$SECONDS" -le 25 ]
	[[ "$output" == *"the registry lock ('$STATE') is held by pid $(pid_of lock) (another user's; /proc's hidepid hides it), which cannot be watched here and has held it 10 s; not waiting for it"* ]]
}

@test "hidepid=invisible: a registry lock holder that others cannot see is waited for while it may work, then named" {
	lock_holder_hidden invisible
}

@test "hidepid=noaccess: a registry lock holder that others cannot read is waited for while it may work, then named" {
	lock_holder_hidden noaccess
}
