#!/usr/bin/env bats
# The registry between users: real users (gmtest-alice, gmtest-bob and the
# hostile gmtest-mallory) share one state directory, as users of a lab
# machine share /run/gpuman.  Each attack must fail -- no GPU leased to
# somebody is given to somebody else, nobody's place in line is taken -- or
# be bounded with a message that names the culprit.  A control beside each
# attack shows that the honest version of the same thing does count.

load helpers
load helpers/registry_users

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	# processes started through as_user (a subshell: $! is not theirs)
	for f in "${SHARED:-/nonexistent}"/pids/*; do
		[ -f "$f" ] && kill_tree "${f##*/}"
	done
	# alice's queue: its dispatcher and job
	[ ! -d "${SHARED:-/nonexistent}/aliceq" ] ||
		as_user alice env GPUMAN_QUEUE_DIR="$SHARED/aliceq" gpuman cancel 1 >/dev/null 2>&1 || true
	kill_ours ${BG_PIDS:-}
	wait 2>/dev/null || true
	[ -z "${SHARED:-}" ] || rm -rf "$SHARED"
}

# shared - a state directory and simulator all three users reach, with one
# GPU (GPUS=N for more).
shared() {
	gm_user alice
	gm_user bob
	gm_user mallory
	SHARED=$(mktemp -d /tmp/gpuman-trust.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim" "$SHARED/pids" "$SHARED/out"
	install -m 666 /dev/null "$SHARED/sim/lock"
	python3 -c 'import json, sys
print(json.dumps({"gpus": [{"name": "g", "memory_total_mib": 16000}] * int(sys.argv[1])}))' \
		"${GPUS:-1}" >"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM=$SHARED/gpus.json GPUMAN_STATE_DIR=$SHARED/state GPUMAN_SIM_STATE=$SHARED/sim
	STATE=$SHARED/state
}

# bg USER NAME CMD... - run CMD as USER (under UMASK, default 022) in the
# background; its pid (the user's own process, CMD after exec) in
# $SHARED/pids/NAME
bg() {
	local user=$1 name=$2
	shift 2
	as_user "$user" sh -c 'umask "$1"; echo $$ >"$0"; shift; exec "$@"' \
		"$SHARED/pids/$name" "${UMASK:-022}" "$@" >"$SHARED/out/$name" 2>&1 3>&- &
	BG_PIDS="${BG_PIDS:-} $!"
	wait_for "[ -s '$SHARED/pids/$name' ]"
}

# hold USER NAME PATH - USER's process takes an exclusive flock on PATH (a
# file or a directory, opened read-only) and keeps it until the test ends
hold() {
	bg "$1" "$2" /usr/bin/python3 -c 'import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(300)' "$3"
	wait_for "grep -q locked '$SHARED/out/$2'"
}

# forge USER NAME FILE PID UID - USER writes FILE (a ticket asking for the
# first GPU, or with FILE=lease.* a lease of it) claiming PID and UID, and
# holds it locked as its writer would
forge() {
	local user=$1 name=$2 file=$STATE/$3 pid=$4 uid=$5 uuid
	uuid=$(gpuman status --json | jq -r '.gpus[0].uuid')
	case $3 in
	lease.*) printf '{"id":"%s","uid":%d,"pid":%d,"job_pid":%d,"command":"forged","kind":"exclusive","gpus":[{"index":0,"uuid":"%s"}]}' \
		"${3#lease.}" "$uid" "$pid" "$pid" "$uuid" ;;
	*) printf '{"uid":%d,"pid":%d,"command":"forged","summary":"1 GPU exclusive","candidates":["%s"]}' \
		"$uid" "$pid" "$uuid" ;;
	esac | as_user "$user" sh -c 'cat >"$0"' "$file"
	hold "$user" "$name" "$file"
}

# ticket_name [SECONDS_AGO] - a ticket's name for now, or for an earlier time
ticket_name() {
	printf 'wait.%020d.forged-%s' $(( $(date +%s%N) - ${1:-0} * 1000000000 )) "$RANDOM"
}

@test "leases and tickets are readable by every user whatever the umask: no double booking" {
	shared
	for mask in 077 0; do
		# alice holds the GPU under her umask, and queues for it again
		UMASK=$mask bg alice job gpuman run -- sleep 300
		wait_for '[ "$(leases)" = 1 ]'
		UMASK=$mask bg alice waiter gpuman run --wait -- true
		wait_for '[ "$(tickets)" = 1 ]'
		for f in "$STATE"/lease.* "$STATE"/wait.*; do
			[ "$(stat -c '%a %U' "$f")" = "644 gmtest-alice" ]
		done
		# bob reads both: the GPU is alice's, and alice is first in line
		run -75 as_user bob gpuman run -- true
		[[ "$output" == *"gmtest-alice"* ]]
		run -0 as_user bob gpuman status --json
		[ "$(jqr '.leases | length')" = 1 ]
		[ "$(jqr '.waiters[0].user')" = gmtest-alice ]
		kill_tree waiter
		kill_tree job
		rm -f "$STATE"/lease.* "$STATE"/wait.*
	done
}

@test "a queued job (its dispatcher runs under umask 077) holds its GPU against other users" {
	shared
	install -d -o gmtest-alice -g gmtest-alice -m 700 "$SHARED/aliceq"
	cd "$SHARED" # the job's working directory: alice's to enter
	as_user alice env GPUMAN_QUEUE_DIR="$SHARED/aliceq" gpuman submit -- sleep 300 >/dev/null 3>&-
	wait_for '[ "$(leases)" = 1 ]'
	[ "$(stat -c '%a %U' "$STATE"/lease.*)" = "644 gmtest-alice" ]
	run -75 as_user bob gpuman run -- true
	[[ "$output" == *"gmtest-alice"* ]]
	as_user alice env GPUMAN_QUEUE_DIR="$SHARED/aliceq" gpuman cancel 1 >/dev/null
	wait_for '[ "$(leases)" = 0 ]'
}

@test "a forged ticket counts for nothing: another user's uid, another user's pid, a time before it existed" {
	shared
	alice=$(id -u gmtest-alice)
	mallory=$(id -u gmtest-mallory)
	bg alice alice-sleep sleep 300
	bg mallory m-sleep sleep 300
	# in alice's name (the file is mallory's)
	forge mallory t1 "$(ticket_name)" "$(pid_of m-sleep)" "$alice"
	# in her own name, held by alice's process
	forge mallory t2 "$(ticket_name)" "$(pid_of alice-sleep)" "$mallory"
	# her own and live, but named for an hour ago: jumping the line
	forge mallory t3 "$(ticket_name 3600)" "$(pid_of m-sleep)" "$mallory"
	[ "$(tickets)" = 3 ]
	run -0 as_user bob gpuman status --json
	[ "$(jqr '.waiters | length')" = 0 ]
	run -0 as_user bob gpuman run -- true
	# The control: the same ticket, honest (hers, her process, now) holds
	# the GPU back for her, as any waiter's does.
	forge mallory t4 "$(ticket_name)" "$(pid_of m-sleep)" "$mallory"
	run -0 as_user bob gpuman status --json
	[ "$(jqr '.waiters | length')" = 1 ]
	[ "$(jqr '.waiters[0].user')" = gmtest-mallory ]
	run -75 as_user bob gpuman run -- true
	# (the rules serve her first: her GPU is hers as soon as she takes it)
	[[ "$output" == *"leased exclusively by gmtest-mallory (pid "*", served first in line)"* ]]
	# A stopped waiter keeps its place but holds nothing back meanwhile.
	kill -STOP "$(pid_of m-sleep)"
	wait_for "grep -q '^State:.T' /proc/$(pid_of m-sleep)/status"
	run -0 as_user bob gpuman run -- true
	kill -CONT "$(pid_of m-sleep)"
	run -75 as_user bob gpuman run -- true
}

@test "a dead lease revived by another user's lock, or a lease in another's name, counts for nothing" {
	shared
	bg alice job gpuman run -- sleep 300
	wait_for '[ "$(leases)" = 1 ]'
	run -75 as_user bob gpuman run -- true
	lease=$(echo "$STATE"/lease.*)
	# alice's gpuman and job die at once; only alice (or root) may remove
	# the file from the sticky directory, and neither looks
	kill_tree job
	[ -e "$lease" ]
	hold mallory revive "$lease"
	run -0 as_user bob gpuman status --json
	[ "$(jqr '.leases | length')" = 0 ]
	run -0 as_user bob gpuman run -- true
	[ -e "$lease" ]
	# mallory's lease in alice's name, held by a live process of hers
	bg mallory m-sleep sleep 300
	forge mallory l1 lease.forged1 "$(pid_of m-sleep)" "$(id -u gmtest-alice)"
	run -0 as_user bob gpuman status --json
	[ "$(jqr '.leases | length')" = 0 ]
	run -0 as_user bob gpuman run -- true
	# The control: her own, honest, counts like any lease
	forge mallory l2 lease.forged2 "$(pid_of m-sleep)" "$(id -u gmtest-mallory)"
	run -75 as_user bob gpuman run -- true
	[[ "$output" == *"gmtest-mallory"* ]]
}

@test "pid reuse around a holder: a dead lease whose pids the kernel gave again to its user's processes, locked by another user, counts for nothing" {
	shared
	# both pids go to new processes of alice's, and mallory holds the
	# file's lock: owner, pid and lock all look as they did.  A pid that
	# something else took first cannot be had: a new lease, new pids.
	for try in 1 2 3; do
		bg alice job gpuman run -- sleep 300
		wait_for '[ "$(leases)" = 1 ]'
		lease=$(echo "$STATE"/lease.*)
		holder=$(jq .pid "$lease")
		job=$(jq .job_pid "$lease")
		[ "$holder" != "$job" ]
		kill_tree job
		take_pid "$holder" alice h2 && take_pid "$job" alice j2 && break
		[ "$try" -lt 3 ]
		[ ! -e "$SHARED/pids/h2" ] || kill_tree h2
		rm -f "$lease" "$SHARED/pids/h2" "$SHARED/pids/job"
	done
	[ "$(stat -c %U /proc/"$holder")" = gmtest-alice ]
	hold mallory revive "$lease"
	run -0 as_user bob gpuman status --json
	[ "$(jqr '.leases | length')" = 0 ]
	run -0 as_user bob gpuman run -- true
	# the same for a ticket: alice waits behind bob, dies, and her pid is
	# given again; bob's next request is not held behind the dead ticket
	bg bob bjob gpuman run -- sleep 300
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	for try in 1 2 3; do
		bg alice waiter gpuman run --wait -- true
		wait_for '[ "$(tickets)" = 1 ]'
		ticket=$(echo "$STATE"/wait.*)
		waiter=$(jq .pid "$ticket")
		kill_tree waiter
		take_pid "$waiter" alice w2 && break
		[ "$try" -lt 3 ]
		rm -f "$ticket" "$SHARED/pids/waiter"
	done
	hold mallory revive2 "$ticket"
	run -0 as_user bob gpuman status --json
	[ "$(jqr '.waiters | length')" = 0 ]
}

# The registry lock is the state directory itself: anyone can flock it, so
# a waiter waits as long as the holder gets on with it and gives up,
# naming the holder, only when the holder is stuck or the wait is over.

@test "a user who flocks the registry and stops: others give up after seconds, naming her pid, user and command" {
	shared
	hold mallory lock "$STATE"
	kill -STOP "$(pid_of lock)"
	SECONDS=0
	run -75 as_user bob gpuman run -- true
	[ "$SECONDS" -ge 4 ]
	[ "$SECONDS" -le 20 ]
	[[ "$output" == *"waiting: the registry lock ('$STATE') is held by pid $(pid_of lock) (user gmtest-mallory: /usr/bin/python3 -c import fcntl"* ]]
	[[ "$output" == *"held by pid $(pid_of lock) (user gmtest-mallory: "*"), which is stopped; not waiting for it"* ]]
	# --wait and --fallback cpu keep their promises
	SECONDS=0
	run -75 as_user bob gpuman run --wait=2s -- true
	[ "$SECONDS" -le 4 ]
	[[ "$output" == *"no GPU met the request within the wait: the registry lock ('$STATE') was held by pid $(pid_of lock) (user gmtest-mallory"* ]]
	run -0 as_user bob gpuman run --fallback cpu -- sh -c 'echo "on [$CUDA_VISIBLE_DEVICES]"'
	[[ "$output" == *"on []"* ]]
	# once she lets go, everything works at once
	kill_tree lock
	run -0 as_user bob gpuman run -- true
}

@test "a holder asleep on the registry lock is given up after seconds; one that works is waited for" {
	shared
	hold mallory lock "$STATE"
	SECONDS=0
	run -75 as_user bob gpuman run -- true
	[ "$SECONDS" -ge 9 ]
	[ "$SECONDS" -le 25 ]
	[[ "$output" == *"held by pid $(pid_of lock) (user gmtest-mallory: "*"), which sleeps without using the CPU; not waiting for it"* ]]
	kill_tree lock
	# A slow holder -- busy for 7 s, longer than a stopped one is given --
	# is waited for: slow is not stuck.
	bg alice busy /usr/bin/python3 -c 'import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
end = time.time() + 7
while time.time() < end:
    pass' "$STATE"
	wait_for "grep -q locked '$SHARED/out/busy'"
	SECONDS=0
	run -0 as_user bob gpuman run -- true
	[ "$SECONDS" -ge 5 ]
	[[ "$output" == *"waiting: the registry lock ('$STATE') is held by pid $(pid_of busy) (user gmtest-alice"* ]]
}

@test "a lock file planted and renamed away by another user changes nothing: no GPU is given twice" {
	GPUS=8 shared
	# mallory plants 'lock' as older gpumans used it, and keeps putting a
	# new one in its place, so that each launch would lock an inode of its own
	as_user mallory touch "$STATE/lock"
	bg mallory renamer /usr/bin/python3 -c 'import os, sys
lock = sys.argv[1] + "/lock"
while True:
    os.rename(lock, lock + ".away")
    os.close(os.open(lock, os.O_CREAT | os.O_RDONLY, 0o644))' "$STATE"
	rec=$SHARED/out/rec
	touch "$rec" && chmod 666 "$rec"
	for i in $(seq 60); do
		user=alice
		[ $((i % 2)) = 0 ] && user=bob
		as_user $user gpuman run --wait -- gpuman-simload --mem 1G --util 50 --seconds 0.2 \
			--init-delay 0.05 --record "$rec" >/dev/null 2>&1 3>&- &
		pids="${pids:-} $!"
	done
	wait $pids
	[ "$(grep -c '^end' "$rec")" -eq 60 ]
	run -0 python3 "$BATS_TEST_DIRNAME/helpers/overlaps.py" "$rec"
	[ "$output" = "jobs 60 overlaps 0" ]
}
