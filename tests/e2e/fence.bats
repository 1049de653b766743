#!/usr/bin/env bats
# fence: under the broker (root), a job can open only its own GPUs, because
# the kernel says so (issue 21).  Each test mounts a tmpfs of its own (with
# device nodes allowed) holding nvidia0..3, nvidiactl and a node that is no
# GPU's; gpuman is told to look there (GPUMAN_DEV_DIR).  Those nodes have no
# driver behind them, so an open the cgroup's filter lets through fails with
# ENXIO and one it refuses with EPERM: the jobs, run as real users, report
# which (helpers/try-open.py).  Both mechanisms, cgroup v2 (a BPF device
# program) and v1 (the devices controller), are forced in turn.

load helpers
load helpers/broker # start_daemon, broker_stop

TRY="$BATS_TEST_DIRNAME/helpers/try-open.py"

setup() {
	gm_setup
	[ "$(id -u)" = 0 ] || skip "needs root: the broker places jobs in cgroups"
	gm_user alice
	gm_user bob
	SHARED=$(mktemp -d /tmp/gpuman-fence.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/sim" "$SHARED/out" "$SHARED/pids"
	install -m 666 /dev/null "$SHARED/sim/lock"
	mkdir "$SHARED/dev"
	mount -t tmpfs -o dev,mode=755 gpuman-fence "$SHARED/dev" ||
		skip "cannot mount a tmpfs with device nodes here"
	for i in 0 1 2 3; do mknod -m 666 "$SHARED/dev/nvidia$i" c 195 "$i"; done
	mknod -m 666 "$SHARED/dev/nvidiactl" c 195 255
	mknod -m 666 "$SHARED/dev/other" c 1 3 # /dev/null's numbers: not a GPU
	export GPUMAN_SIM_STATE=$SHARED/sim GPUMAN_BROKER=$SHARED/gpuman.sock
	export GPUMAN_DEV_DIR=$SHARED/dev
	STATE=$BATS_TEST_TMPDIR/broker/leases.json
	D=$SHARED/dev
	NODES="$D/nvidia2 $D/nvidia3 $D/nvidiactl $D/other"
}

teardown() {
	[ -n "${SHARED:-}" ] || return 0
	broker_stop
	umount "$SHARED/dev" 2>/dev/null || true
	# what the systemd stand-in made: the test's scopes, then its slices
	local m s
	for m in /sys/fs/cgroup/unified /sys/fs/cgroup/devices; do
		s=$m/$(slice_dir "$GPUMAN_FENCE_CGROUP")
		[ -d "$s" ] || continue
		find "$s" -depth -type d -exec rmdir {} + 2>/dev/null || true
		s=${s%/*}
		while [ "$s" != "$m" ] && rmdir "$s" 2>/dev/null; do s=${s%/*}; done
	done
	rm -rf "$SHARED"
}

gpus() { # gpus N - N GPUs, GPU i's device node /dev/nvidia<i>
	local i list=
	for i in $(seq 0 $(($1 - 1))); do
		list="$list${list:+,}{\"name\":\"g$i\",\"memory_total_mib\":16000,\"minor_number\":$i}"
	done
	echo "{ \"gpus\": [ $list ] }" >"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM=$SHARED/gpus.json
}

# The cgroups of leases that are still there (the suite's own folder:
# helpers.bash).  One goes once its job's last process has ended: beside
# the other suite of make check that took over 10 s, so the tests wait 30.
cgroups_left() {
	ls "/sys/fs/cgroup/unified/$GPUMAN_FENCE_CGROUP" "/sys/fs/cgroup/devices/$GPUMAN_FENCE_CGROUP" 2>/dev/null |
		grep -c '^[0-9]*-[0-9]*-[0-9a-f]*$' || true
}

# timed_status FILE SECONDS - (in the background) once FILE exists,
# SECONDS later: how long a gpuman status of root's takes, as "status N
# ms" in $SHARED/out/status
timed_status() {
	while [ ! -e "$1" ]; do sleep 0.01; done
	sleep "$2"
	local t0
	t0=$(date +%s%N)
	gpuman status --json >/dev/null
	echo "status $((($(date +%s%N) - t0) / 1000000)) ms" >"$SHARED/out/status"
}

# check OUT LABEL... - each LABEL's line: GPU 2 and nvidiactl reach the
# (absent) driver, GPU 3 is refused, the device that is no GPU opens
check() {
	local out=$1 label line; shift
	for label in "$@"; do
		line=$(grep "^$label " "$out") || { echo "no line for $label in:"; cat "$out"; return 1; }
		[ "$line" = "$label nvidia2=ENXIO nvidia3=EPERM nvidiactl=ENXIO other=OK" ] ||
			{ echo "$line"; return 1; }
	done
}

# a job that probes itself, a child, a double-forked grandchild and a
# setsid'd one; it waits for them
job_script() {
	cat >"$SHARED/job.sh" <<EOF
#!/bin/sh
out=\$1
"$TRY" "\$out" self $NODES
sh -c '"$TRY" "\$0" fork $NODES' "\$out"
sh -c '( "$TRY" "\$0" double $NODES & ) ; for i in \$(seq 200); do grep -qs "^double " "\$0" && break; sleep 0.05; done' "\$out"
setsid "$TRY" "\$out" setsid $NODES
EOF
	chmod 755 "$SHARED/job.sh"
}

fenced_run() { # the run test, under mechanism $1
	gpus 4
	start_daemon GPUMAN_FENCE="$1"
	grep -q "placement enforced by the kernel" "$BATS_TEST_TMPDIR/daemon.log"
	job_script
	run -0 as_user alice gpuman run --only 2 -- "$SHARED/job.sh" "$SHARED/out/run"
	check "$SHARED/out/run" self fork double setsid
	# before the fence, and outside it, the same user opens every GPU
	as_user alice "$TRY" "$SHARED/out/free" free $NODES
	grep -qx "free nvidia2=ENXIO nvidia3=ENXIO nvidiactl=ENXIO other=OK" "$SHARED/out/free"
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence v2: a job leased GPU 2 opens GPU 2 but not GPU 3, nor does anything it forks, double-forks or setsids" {
	[ -d /sys/fs/cgroup/unified ] || grep -q cgroup2 /proc/mounts || skip "no cgroup v2 hierarchy"
	fenced_run v2
	grep -q "cgroup v2 device program" "$BATS_TEST_TMPDIR/daemon.log"
}

@test "fence v1: the same with the devices controller" {
	[ -d /sys/fs/cgroup/devices ] || skip "no cgroup v1 devices controller"
	fenced_run v1
	grep -q "cgroup v1 devices controller" "$BATS_TEST_TMPDIR/daemon.log"
}

@test "fence v2: a run in a pid namespace of its own, as in a container, names its job by that namespace's number, and the broker places that job" {
	[ -d /sys/fs/cgroup/unified ] || grep -q cgroup2 /proc/mounts || skip "no cgroup v2 hierarchy"
	unshare -p -f --kill-child true 2>/dev/null || skip "needs unshare -p (root, pid namespaces)"
	gpus 4
	start_daemon GPUMAN_FENCE=v2
	job_script
	# gpuman run is pid 1 there and its job pid 2: numbers that name
	# other processes in the broker's namespace, never to be placed
	unshare -p -f --kill-child --mount-proc setpriv --reuid=gmtest-alice --regid=gmtest-alice \
		--clear-groups env -u XDG_CONFIG_HOME HOME=/tmp PATH="$PATH" sh -c \
		'echo "ns $$" >"$1/out/ns"; exec gpuman run --only 2 -- "$1/job.sh" "$1/out/run"' \
		sh "$SHARED"
	grep -qx "ns 1" "$SHARED/out/ns"
	check "$SHARED/out/run" self fork double setsid
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

# ---- a waiter's job, placed while it waits ---------------------------------

# hold_gpu2 - alice's job holds GPU 2 until $SHARED/out/go appears.  It
# waits its turn: the lease before may not be released yet when its
# cgroup is gone (the broker hears its connection close)
hold_gpu2() {
	rm -f "$SHARED/pids/holder"
	as_user alice gpuman run --only 2 --wait -- sh -c \
		"echo \$\$ >$SHARED/pids/holder; while [ ! -e $SHARED/out/go ]; do sleep 0.05; done" &
	wait_for "[ -s '$SHARED/pids/holder' ]"
}

# lease_cgroups MOUNT - the leases' cgroups under MOUNT: folders named by
# lease, or with SCOPES set, the cgroup "job" of each systemd scope
lease_cgroups() {
	if [ -n "${SCOPES:-}" ]; then
		ls -d "$1/$(slice_dir "$GPUMAN_FENCE_CGROUP")"/*.scope/job 2>/dev/null || true
	else
		ls -d "$1/$GPUMAN_FENCE_CGROUP"/*-*-* 2>/dev/null || true
	fi
}

# cgroup_lease DIR - the lease a cgroup of lease_cgroups is named after
cgroup_lease() {
	local name=${1%/job}
	name=${name##*/}
	name=${name#"$GPUMAN_FENCE_CGROUP"-}
	echo "${name%.scope}"
}

# waiting_cgroup MOUNT - the one lease cgroup under MOUNT that does not hold
# alice's job: the early job's of a waiter
waiting_cgroup() {
	local dir
	for dir in $(lease_cgroups "$1"); do
		# (cgroupfs files have no size: read them)
		[ -d "$dir" ] && ! grep -qx "$(cat "$SHARED/pids/holder")" "$dir/cgroup.procs" &&
			[ -n "$(cat "$dir/cgroup.procs")" ] && echo "$dir"
	done
}

placed_while_waiting() { # placed_while_waiting MECHANISM MOUNT (SCOPES: systemd's)
	gpus 4
	[ -z "${SCOPES:-}" ] || standin "$2"
	# as where the mount lacks favordynmods, whatever this machine's says
	start_daemon GPUMAN_FENCE="$1" GPUMAN_FENCE_PREPLACE=yes
	hold_gpu2
	as_user bob gpuman run --only 2 --wait -- sh -c \
		"echo \$GPUMAN_LEASE >$SHARED/out/lease; exec $TRY $SHARED/out/waited waited $NODES" &
	local bob=$! cg= job
	wait_for "cg=\$(waiting_cgroup $2); [ -n \"\$cg\" ]"
	# bob's job, forked as he started to wait, waits in a cgroup of its
	# own whose filter refuses every GPU: a probe put beside it is refused
	job=$(cat "$cg/cgroup.procs")
	[ "$(stat -c %U "/proc/$job")" = gmtest-bob ]
	sh -c "echo \$\$ >$cg/cgroup.procs && exec $TRY $SHARED/out/probe beside $NODES"
	grep -qx "beside nvidia2=EPERM nvidia3=EPERM nvidiactl=ENXIO other=OK" "$SHARED/out/probe"
	[ ! -e "$SHARED/out/waited" ] # it has not run
	touch "$SHARED/out/go"
	wait "$bob"
	# granted, the same process in the same cgroup opens its GPU, and the
	# lease is named after the cgroup
	check "$SHARED/out/waited" waited
	[ "$(cat "$SHARED/out/lease")" = "$(cgroup_lease "$cg")" ]
	wait_for "[ \$(lease_cgroups $2 | wc -l) = 0 ]" 30
	# a waiter that gives up leaves nothing behind: no cgroup, no process
	rm "$SHARED/out/go"
	hold_gpu2
	# (its own mark: other suites' bob may be running beside this one)
	local mark="gave-up-$BATS_TEST_NUMBER-$$"
	run as_user bob gpuman run --only 2 --wait=2s -- true "$mark"
	[ "$status" = 75 ]
	wait_for "[ \$(lease_cgroups $2 | wc -l) = 1 ]" 30
	! pgrep -u gmtest-bob -f "$mark" || false
	touch "$SHARED/out/go"
	wait_for "[ \$(lease_cgroups $2 | wc -l) = 0 ]" 30
}

@test "fence v2: a job that waits for its GPU is placed as it waits, refused every GPU, and opens its own once granted; a waiter that gives up leaves nothing" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy"
	placed_while_waiting v2 /sys/fs/cgroup/unified
	grep -q "cgroup v2 device program" "$BATS_TEST_TMPDIR/daemon.log"
}

@test "fence v1: the same with the devices controller (placed as it waits)" {
	[ -d /sys/fs/cgroup/devices ] || skip "no cgroup v1 devices controller"
	placed_while_waiting v1 /sys/fs/cgroup/devices
}

@test "fence scope v2: where systemd runs, a waiting job is placed as it waits in a scope of its lease-to-be, and the rest as above" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy"
	SCOPES=1 placed_while_waiting v2 /sys/fs/cgroup/unified
	# each scope was asked of systemd once: alice's twice, bob's twice
	[ "$(grep -c '"StartTransientUnit"' "$SHARED/calls")" = 4 ]
}

@test "fence v2: a job placed as it waited and killed meanwhile is replaced at the grant, and the run runs fenced" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy"
	gpus 4
	start_daemon GPUMAN_FENCE=v2 GPUMAN_FENCE_PREPLACE=yes
	hold_gpu2
	as_user bob gpuman run --only 2 --wait -- "$TRY" "$SHARED/out/waited" waited $NODES &
	local bob=$! cg=
	wait_for "cg=\$(waiting_cgroup /sys/fs/cgroup/unified); [ -n \"\$cg\" ]"
	kill -9 "$(cat "$cg/cgroup.procs")"
	touch "$SHARED/out/go"
	wait "$bob"
	check "$SHARED/out/waited" waited
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

# waiting_runner MOUNT - the early job of waiting_cgroup, when it is bob's
# queue runner (gpuman-runner, waiting for its lease and its go)
waiting_runner() {
	local cg pid
	cg=$(waiting_cgroup "$1") && [ -n "$cg" ] && pid=$(cat "$cg/cgroup.procs") &&
		[ "$(cat "/proc/$pid/comm")" = gpuman-runner ] &&
		[ "$(stat -c %U "/proc/$pid")" = gmtest-bob ] && echo "$pid"
}

@test "fence v2: a queued job that waits for its GPU has its runner placed as it waits: nothing moves at the grant, the job runs fenced; a cancel or a dead dispatcher leaves nothing in line" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy"
	gpus 4
	start_daemon GPUMAN_FENCE=v2 GPUMAN_FENCE_PREPLACE=yes GPUMAN_FENCE_TRACE=1
	mkdir -m 1777 "$SHARED/q"
	export GPUMAN_QUEUE_DIR=$SHARED/q/bob
	hold_gpu2
	as_user bob gpuman submit --only 2 -- "$TRY" "$SHARED/out/queued" queued $NODES 3>&-
	local runner=
	wait_for "runner=\$(waiting_runner /sys/fs/cgroup/unified)"
	[ ! -e "$SHARED/out/queued" ] # it has not run
	touch "$SHARED/out/go"
	wait_for "[ -s '$SHARED/out/queued' ]"
	check "$SHARED/out/queued" queued
	# its runner was placed as it waited, and the grant only changed the
	# filter: no runner of bob's was moved at the grant
	grep -q "fence trace: waiter pid $runner " "$BATS_TEST_TMPDIR/daemon.log"
	grep -q "fence trace: granted-placed pid $runner " "$BATS_TEST_TMPDIR/daemon.log"
	! grep -q "fence trace: grant-keeper pid $runner " "$BATS_TEST_TMPDIR/daemon.log" || false
	wait_for "[ \$(cgroups_left) = 0 ]" 30

	# cancelled as it waits: its runner and its place in line end with it
	rm "$SHARED/out/go"
	hold_gpu2
	as_user bob gpuman submit --only 2 -- "$TRY" "$SHARED/out/cancelled" cancelled $NODES 3>&-
	wait_for "runner=\$(waiting_runner /sys/fs/cgroup/unified)"
	run -0 as_user bob gpuman cancel 2
	wait_for "! kill -0 $runner 2>/dev/null"
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 0 ]'
	wait_for "[ \$(cgroups_left) = 1 ]" 30 # alice's

	# its dispatcher killed as it waits: the runner ends (no go will come),
	# nobody waits in line for it, the job stays queued and runs later
	as_user bob gpuman submit --only 2 -- "$TRY" "$SHARED/out/later" later $NODES 3>&-
	wait_for "runner=\$(waiting_runner /sys/fs/cgroup/unified)"
	local d
	d=$(cat "$GPUMAN_QUEUE_DIR"/dispatcher*.lock)
	tr '\0' ' ' <"/proc/$d/cmdline" | grep -q "dispatcher"
	kill -9 "$d"
	wait_for "! kill -0 $runner 2>/dev/null"
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 0 ]'
	run -0 as_user bob gpuman queue --json
	[ "$(jqr '.[] | select(.id == 3) | .state')" = queued ]
	touch "$SHARED/out/go"
	run -0 as_user bob gpuman wait 3
	check "$SHARED/out/later" later
	[ ! -e "$SHARED/out/cancelled" ]
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence: with slow moves, the queue hands a GPU on without a move: its next job's runner waits placed, and the one ending is not moved home on its way out" {
	# Each move made to wait 700 ms, as a lone move waits a grace period
	# where the mount lacks favordynmods.  The hand-off from one queued
	# job's end to the next one's start waited a move twice: the next
	# runner's, at its grant, and the ending runner's, home.
	gpus 1
	start_daemon GPUMAN_FENCE_MOVE_DELAY_MS=700
	mkdir -m 1777 "$SHARED/q"
	export GPUMAN_QUEUE_DIR=$SHARED/q/bob
	local i
	for i in 1 2 3; do
		as_user bob gpuman submit -- sh -c \
			"date +%s%N >>$SHARED/out/start; sleep 1.5; date +%s%N >>$SHARED/out/end" 3>&-
	done
	run -0 as_user bob gpuman wait 1 2 3
	# each hand-off: the end of one job to the start of the next
	paste -d' ' <(tail -n 2 "$SHARED/out/start") <(head -n 2 "$SHARED/out/end") |
		while read -r start end; do
			echo "hand-off $(((start - end) / 1000000)) ms"
			[ $(((start - end) / 1000000)) -lt 350 ]
		done
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence v2: GPUMAN_FENCE_TRACE=1 logs each placement's steps (at a grant, as a job waits, the grant's new filter); unset, none" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy"
	gpus 4
	start_daemon GPUMAN_FENCE=v2 GPUMAN_FENCE_PREPLACE=yes GPUMAN_FENCE_TRACE=1
	hold_gpu2
	as_user bob gpuman run --only 2 --wait -- true &
	local bob=$! n='[0-9]+[.][0-9]{3}'
	wait_for "[ -n \"\$(waiting_cgroup /sys/fs/cgroup/unified)\" ]"
	touch "$SHARED/out/go"
	wait "$bob"
	# alice's holder, placed at its grant; bob's job, placed as it waited,
	# then given its GPU on the worker
	grep -Eq "fence trace: grant pid [0-9]+ at $n+ s: $n ms queued, $n ms cgroup and filter, $n ms move, $n ms until answered$" \
		"$BATS_TEST_TMPDIR/daemon.log"
	grep -Eq "fence trace: waiter pid [0-9]+ at $n+ s: $n ms queued, $n ms cgroup and filter, $n ms move, $n ms until answered$" \
		"$BATS_TEST_TMPDIR/daemon.log"
	grep -Eq "fence trace: granted-placed pid [0-9]+ at $n+ s: $n ms filter, $n ms queued, on the worker$" \
		"$BATS_TEST_TMPDIR/daemon.log"
	# off unless asked
	broker_stop
	: >"$BATS_TEST_TMPDIR/daemon.log"
	start_daemon GPUMAN_FENCE=v2
	run -0 as_user alice gpuman run --only 2 -- true
	grep -q "placement enforced by the kernel" "$BATS_TEST_TMPDIR/daemon.log"
	! grep -q "fence trace" "$BATS_TEST_TMPDIR/daemon.log" || false
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence v2: a waiting job is placed early exactly where the mount lacks favordynmods (where moves wait a grace period)" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy"
	gpus 4
	start_daemon GPUMAN_FENCE=v2
	hold_gpu2
	as_user bob gpuman run --only 2 --wait -- true &
	local bob=$!
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	sleep 0.5 # long enough for an early placement
	if [[ ",$(awk '$2 == "/sys/fs/cgroup/unified" { print $4 }' /proc/mounts)," == *,favordynmods,* ]]; then
		[ -z "$(waiting_cgroup /sys/fs/cgroup/unified)" ]
	else
		[ -n "$(waiting_cgroup /sys/fs/cgroup/unified)" ]
	fi
	touch "$SHARED/out/go"
	wait "$bob"
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

# slow_moves_said MECHANISM MOUNT_TYPE: the broker says that each job's
# move waits a grace period exactly when the hierarchy it fences in is
# mounted without favordynmods on a kernel that offers it
slow_moves_said() {
	gpus 4
	start_daemon GPUMAN_FENCE="$1"
	local mnt opts
	if [ "$2" = cgroup2 ]; then
		read -r mnt opts < <(awk '$3 == "cgroup2" { print $2, $4; exit }' /proc/mounts)
	else
		read -r mnt opts < <(awk '$3 == "cgroup" && $4 ~ /(^|,)devices(,|$)/ { print $2, $4; exit }' /proc/mounts)
	fi
	[ -n "$mnt" ]
	if grep -qs favordynmods /sys/kernel/cgroup/features && [[ ",$opts," != *,favordynmods,* ]]; then
		grep -q "each job's start waits a kernel RCU grace period .*'$mnt' is mounted without favordynmods" \
			"$BATS_TEST_TMPDIR/daemon.log"
	else
		! grep -q "grace period" "$BATS_TEST_TMPDIR/daemon.log" || false
	fi
}

@test "fence v2: the broker says whether each job's start waits a kernel grace period, and what avoids it" {
	grep -q cgroup2 /proc/mounts || skip "no cgroup v2 hierarchy"
	slow_moves_said v2 cgroup2
}

@test "fence v1: the same for the devices controller's hierarchy" {
	[ -d /sys/fs/cgroup/devices ] || skip "no cgroup v1 devices controller"
	slow_moves_said v1 cgroup
}

@test "fence: status says placement is enforced, and by what" {
	gpus 4
	start_daemon
	run -0 gpuman status
	[[ "$output" == *"placement: enforced by the kernel (cgroup v"*"): a job opens only its leased GPUs"* ]]
	run -0 gpuman status --json
	[ "$(jqr .placement.enforced)" = true ]
}

@test "fence: a batch task and a queued job are fenced the same" {
	gpus 4
	start_daemon
	printf '%s %s task %s\n' "$TRY" "$SHARED/out/batch" "$NODES" >"$SHARED/tasks"
	chmod 644 "$SHARED/tasks"
	cd "$SHARED/out"
	run -0 as_user alice gpuman batch --only 2 "$SHARED/tasks"
	check "$SHARED/out/batch" task
	mkdir -m 1777 "$SHARED/q"
	run -0 as_user alice env GPUMAN_QUEUE_DIR="$SHARED/q/alice" \
		gpuman submit --only 2 -- "$TRY" "$SHARED/out/queue" queued $NODES 3>&-
	wait_for "[ -s '$SHARED/out/queue' ]"
	check "$SHARED/out/queue" queued
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence: when the lease ends nothing of the job is left, even with its supervisor killed -9" {
	gpus 4
	start_daemon
	# the job leaves a process behind that closed every descriptor (the
	# lease's too) and left its session: only the cgroup still knows it
	cat >"$SHARED/leave.sh" <<EOF
#!/bin/sh
python3 -c 'import os, time
os.closerange(3, 4096); os.setsid()
open("$SHARED/pids/left", "w").write(str(os.getpid()))
time.sleep(300)' </dev/null >/dev/null 2>&1 &
sleep 1.5
EOF
	chmod 755 "$SHARED/leave.sh"
	as_user alice gpuman run --only 2 -- "$SHARED/leave.sh" &
	local sup=$!
	wait_for "[ -s '$SHARED/pids/left' ]"
	left=$(cat "$SHARED/pids/left")
	kill -0 "$left"
	# the supervisor dies; the job goes on with its lease, then ends
	kill -9 "$sup"
	wait_for "! kill -0 $left 2>/dev/null"
	wait_for "[ \$(cgroups_left) = 0 ]" 30
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = 0 ]
}

@test "fence: a library lease fences its own process, which goes on after the release" {
	gpus 4
	start_daemon
	cat >"$SHARED/lib.py" <<EOF
import os, sys
sys.path.insert(0, "$GM_ROOT/python")
import gpuman
lease = gpuman.select(only="2")
os.system("$TRY $SHARED/out/lib leased $NODES")
lease.release()
os.system("$TRY $SHARED/out/lib after $NODES")
EOF
	chmod 644 "$SHARED/lib.py"
	local pre
	mapfile -t pre < <(py_env)
	run -0 as_user alice env "${pre[@]}" python3 "$SHARED/lib.py"
	check "$SHARED/out/lib" leased
	grep -qx "after nvidia2=ENXIO nvidia3=ENXIO nvidiactl=ENXIO other=OK" "$SHARED/out/lib"
}

@test "fence: a library caller that leases again at once after each release ends where it began, alive, and its leases' cgroups go" {
	# A lease's end moves its supervisor home on the broker's worker,
	# after the release is answered: the next lease of the same process is
	# asked for before it is home, and must still send it home, not into
	# the cgroup of the lease before (which ends, and would end it too).
	# Moves made slow, as where each waits a grace period, so that it is.
	gpus 4
	start_daemon GPUMAN_FENCE_MOVE_DELAY_MS=300
	cat >"$SHARED/again.py" <<EOF
import os, sys
sys.path.insert(0, "$GM_ROOT/python")
import gpuman
home = open("/proc/self/cgroup").read()
for i in range(4):
    lease = gpuman.select(only="2" if i % 2 == 0 else "3")
    lease.release()
os.system("$TRY $SHARED/out/again after $NODES")
print("home" if open("/proc/self/cgroup").read() == home else "moved: " + open("/proc/self/cgroup").read())
EOF
	chmod 644 "$SHARED/again.py"
	local pre
	mapfile -t pre < <(py_env)
	run -0 as_user alice env "${pre[@]}" python3 "$SHARED/again.py"
	[[ "$output" == *home* ]] || { echo "$output"; return 1; }
	grep -qx "after nvidia2=ENXIO nvidia3=ENXIO nvidiactl=ENXIO other=OK" "$SHARED/out/again" || { cat "$SHARED/out/again"; tail -20 "$BATS_TEST_TMPDIR/daemon.log"; return 1; }
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

# slow_end - alice's library lease of GPU 2 released, on a broker whose
# moves take 0.7 s: the release returns with her process home (it can open
# every GPU), and root's status asked meanwhile is answered at once
slow_end() {
	cat >"$SHARED/slow.py" <<EOF
import os, subprocess, sys, time
sys.path.insert(0, "$GM_ROOT/python")
import gpuman
# Started first: what the caller starts while it holds the lease ends with it.
other = subprocess.Popen([sys.executable, "-c", "import subprocess, time; import os; [time.sleep(0.01) for _ in range(1000) if not os.path.exists('$SHARED/out/releasing')]; time.sleep(0.2); t = time.monotonic(); env = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}; subprocess.run(['gpuman', 'status', '--json'], stdout=subprocess.DEVNULL, check=True, env=env); print('status %d ms' % ((time.monotonic() - t) * 1000))"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
lease = gpuman.select(only="2")
open("$SHARED/out/releasing", "w").close()
t0 = time.monotonic()
lease.release()
t1 = time.monotonic()
os.system("$TRY $SHARED/out/slow after $NODES")
print("release %d ms" % ((t1 - t0) * 1000), other.communicate()[0].strip())
EOF
	chmod 644 "$SHARED/slow.py"
	local pre
	mapfile -t pre < <(py_env)
	run -0 as_user alice env "${pre[@]}" python3 "$SHARED/slow.py"
	echo "$output"
	[[ "$output" =~ release\ ([0-9]+)\ ms\ status\ ([0-9]+)\ ms ]]
	# The release waits for the move (0.7 s); a status asked meanwhile
	# does not.
	[ "${BASH_REMATCH[1]}" -ge 600 ] && [ "${BASH_REMATCH[2]}" -lt 300 ]
	grep -qx "after nvidia2=ENXIO nvidia3=ENXIO nvidiactl=ENXIO other=OK" "$SHARED/out/slow"
}

@test "fence: a lease's end whose supervisor's move home is slow keeps nobody else waiting, and its release returns with it home" {
	# Where moves wait a grace period (and hold the kernel's cgroup lock
	# meanwhile), the broker's loop makes none at a lease's end: its
	# worker does, and the release is answered when it is done.
	gpus 4
	start_daemon GPUMAN_FENCE_MOVE_DELAY_MS=700
	slow_end
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence: a MIG job opens only its own slice's capability nodes" {
	mkdir -p "$SHARED/proc/driver/nvidia-caps"
	printf 'Character devices:\n  1 mem\n195 nvidia\n238 nvidia-caps\n\nBlock devices:\n  7 loop\n' \
		>"$SHARED/proc/devices"
	printf 'config 1\nmonitor 2\ngpu0/gi1/access 10\ngpu0/gi1/ci0/access 11\ngpu0/gi13/access 130\ngpu0/gi13/ci0/access 131\ngpu0/gi14/access 140\ngpu0/gi14/ci0/access 141\n' \
		>"$SHARED/proc/driver/nvidia-caps/mig-minors"
	for m in 1 10 11 130 131 140 141; do mknod -m 666 "$D/cap$m" c 238 "$m"; done
	cp "$GM_ROOT/examples/mig-a100.json" "$SHARED/mig.json"
	chmod 644 "$SHARED/mig.json"
	export GPUMAN_SIM=$SHARED/mig.json
	start_daemon GPUMAN_PROC_DIR="$SHARED/proc"
	run -0 as_user alice gpuman run --mig 1g.10gb -- sh -c \
		"\"$TRY\" '$SHARED/out/mig' slice $D/nvidia0 $D/nvidia1 $D/cap1 $D/cap10 $D/cap11 $D/cap130 $D/cap131 $D/cap140 $D/cap141; echo \$CUDA_VISIBLE_DEVICES >'$SHARED/out/which'"
	line=$(cat "$SHARED/out/mig")
	case $(cat "$SHARED/out/which") in
	MIG-1c*) mine=130 other=140 ;;
	MIG-1d*) mine=140 other=130 ;;
	*) echo "which slice? $(cat "$SHARED/out/which")"; return 1 ;;
	esac
	[[ "$line" == "slice nvidia0=ENXIO nvidia1=EPERM cap1=ENXIO cap10=EPERM cap11=EPERM "* ]]
	[[ "$line" == *"cap$mine=ENXIO cap$((mine + 1))=ENXIO"* ]]
	[[ "$line" == *"cap$other=EPERM cap$((other + 1))=EPERM"* ]]
}

# The driver lists the capabilities of every GPU it could have, 32 of
# them: 4,320 nodes on a real H200 that has one GPU.  One test per node
# made the kernel's verifier take 90 ms a grant there; the program tests
# runs of minors, and only this machine's GPUs' capabilities.
@test "fence: with the driver's full list of MIG capabilities a job's device program stays small and still refuses the other GPUs' slices" {
	[ -d /sys/fs/cgroup/unified ] || grep -q cgroup2 /proc/mounts || skip "no cgroup v2 hierarchy"
	command -v bpftool >/dev/null || skip "no bpftool to read the job's program (make check installs it)"
	mkdir -p "$SHARED/proc/driver/nvidia-caps"
	printf 'Character devices:\n  1 mem\n195 nvidia\n238 nvidia-caps\n\nBlock devices:\n  7 loop\n' \
		>"$SHARED/proc/devices"
	awk 'BEGIN { print "config 1"; print "monitor 2"; m = 3
		for (g = 0; g < 32; g++) for (gi = 0; gi < 15; gi++) {
			printf "gpu%d/gi%d/access %d\n", g, gi, m++
			for (ci = 0; ci < 8; ci++) printf "gpu%d/gi%d/ci%d/access %d\n", g, gi, ci, m++ } }' \
		>"$SHARED/proc/driver/nvidia-caps/mig-minors"
	# GPU 2's first slice's node, GPU 3's, and GPU 9's (a GPU this machine lacks)
	for m in $((3 + 2 * 135)) $((3 + 3 * 135)) $((3 + 9 * 135)); do mknod -m 666 "$D/cap$m" c 238 "$m"; done
	gpus 4
	start_daemon GPUMAN_FENCE=v2 GPUMAN_PROC_DIR="$SHARED/proc"
	as_user alice gpuman run --only 2 -- sh -c \
		"cat /proc/self/cgroup >'$SHARED/out/cg'; \"$TRY\" '$SHARED/out/caps' caps $D/nvidia2 $D/nvidia3 $D/cap273 $D/cap408 $D/cap1218; while [ ! -e '$SHARED/out/go' ]; do sleep 0.05; done" 3>&- &
	job=$!
	wait_for "[ -s '$SHARED/out/caps' ]" 30 || { ls -la "$SHARED/out"; cat "$BATS_TEST_TMPDIR/daemon.log"; false; }
	cg=/sys/fs/cgroup/unified$(sed -n 's/^0:://p' "$SHARED/out/cg")
	[ -d "$cg" ] || cg=/sys/fs/cgroup$(sed -n 's/^0:://p' "$SHARED/out/cg")
	id=$(bpftool -j cgroup show "$cg" | jq '.[] | select(.attach_type == "cgroup_device") | .id')
	bytes=$(bpftool -j prog show id "$id" | jq .bytes_xlated)
	touch "$SHARED/out/go"
	wait "$job"
	echo "program: $bytes bytes; $(cat "$SHARED/out/caps")"
	# 3 other GPUs and 3 capabilities' runs: 14 tests at most, 8 bytes an
	# instruction (a test per node: over 3,000 instructions)
	[ "$bytes" -le 800 ]
	[ "$(cat "$SHARED/out/caps")" = "caps nvidia2=ENXIO nvidia3=EPERM cap273=ENXIO cap408=EPERM cap1218=ENXIO" ]
}

# held_job N GPU - as alice, a job on GPU that probes the nodes into
# out/pN and holds its lease until out/goN exists; its pid in JOB
held_job() {
	as_user alice gpuman run --only "$2" -- sh -c \
		"cat /proc/self/cgroup >'$SHARED/out/cg$1'; \"$TRY\" '$SHARED/out/p$1' p$1 $NODES; while [ ! -e '$SHARED/out/go$1' ]; do sleep 0.05; done" 3>&- &
	JOB=$!
	wait_for "[ -s '$SHARED/out/p$1' ]" 30 || { cat "$BATS_TEST_TMPDIR/daemon.log"; false; }
}

# program N - the id of the device program on held job N's cgroup
program() {
	local cg
	cg=/sys/fs/cgroup/unified$(sed -n 's/^0:://p' "$SHARED/out/cg$1")
	[ -d "$cg" ] || cg=/sys/fs/cgroup$(sed -n 's/^0:://p' "$SHARED/out/cg$1")
	bpftool -j cgroup show "$cg" | jq '.[] | select(.attach_type == "cgroup_device") | .id'
}

@test "fence: a job of the same GPUs as an earlier one attaches the program loaded for it, and is fenced the same" {
	[ -d /sys/fs/cgroup/unified ] || grep -q cgroup2 /proc/mounts || skip "no cgroup v2 hierarchy"
	command -v bpftool >/dev/null || skip "no bpftool to read the jobs' programs (make check installs it)"
	gpus 4
	start_daemon GPUMAN_FENCE=v2
	held_job 1 2
	first=$(program 1)
	touch "$SHARED/out/go1"
	wait "$JOB"
	held_job 2 2
	second=$(program 2)
	job2=$JOB
	# another GPU: another program
	held_job 3 3
	third=$(program 3)
	touch "$SHARED/out/go2" "$SHARED/out/go3"
	wait "$job2" "$JOB"
	echo "programs: $first $second $third"
	[ -n "$first" ]
	[ "$second" = "$first" ]
	[ "$third" != "$first" ]
	check "$SHARED/out/p1" p1
	check "$SHARED/out/p2" p2
	[ "$(cat "$SHARED/out/p3")" = "p3 nvidia2=EPERM nvidia3=ENXIO nvidiactl=ENXIO other=OK" ]
}

@test "fence: a broker without cgroup access works as before, and status says placement is advisory" {
	gpus 4
	mkdir -m 700 "$SHARED/alice-state"
	chown gmtest-alice "$SHARED/alice-state"
	# its pid for teardown: the daemon itself, not as_user's subshell
	as_user alice sh -c 'echo $$ >"$0"; exec gpuman daemon --socket "$1" --state "$2"' \
		"$SHARED/pids/alice-daemon" "$SHARED/alice-state/sock" "$SHARED/alice-state/l.json" \
		2>>"$BATS_TEST_TMPDIR/daemon.log" &
	wait_for "grep -q serving '$BATS_TEST_TMPDIR/daemon.log'" || { cat "$BATS_TEST_TMPDIR/daemon.log"; false; }
	grep -q "placement not enforced (advisory): the lease broker does not run as root" \
		"$BATS_TEST_TMPDIR/daemon.log"
	export GPUMAN_BROKER=$SHARED/alice-state/sock
	run -0 as_user alice gpuman run --only 2 -- "$TRY" "$SHARED/out/adv" job $NODES
	grep -qx "job nvidia2=ENXIO nvidia3=ENXIO nvidiactl=ENXIO other=OK" "$SHARED/out/adv"
	run -0 as_user alice gpuman status
	[[ "$output" == *"placement: advisory, not enforced by the kernel (the lease broker does not run as root): leases bind gpuman's users, not the driver"* ]]
	# and without a broker at all
	run -0 env GPUMAN_BROKER=off gpuman status
	[[ "$output" == *"placement: advisory, not enforced by the kernel (no lease broker"* ]]
}

@test "fence: a reserved shell and all it starts open only the reserved GPUs; the reservation's end ends them" {
	gpus 4
	start_daemon
	job_script
	cd "$SHARED/out"
	run -0 as_user alice gpuman reserve --for 10m --only 2 --shell -- "$SHARED/job.sh" "$SHARED/out/shell"
	check "$SHARED/out/shell" self fork double setsid
	# the reservation ended with its shell
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = 0 ]
	# and a reservation released from elsewhere takes its shell with it
	as_user alice gpuman reserve --for 10m --only 2 --shell -- sleep 300 2>/dev/null &
	local shell=$!
	wait_for '[ "$(gpuman status --json | jq -r ".leases[0].id // empty")" != "" ]'
	id=$(gpuman status --json | jq -r '.leases[0].id')
	wait_for "[ -n \"\$(ls /sys/fs/cgroup/*/$GPUMAN_FENCE_CGROUP/$id/cgroup.procs 2>/dev/null)\" ] && [ -n \"\$(cat /sys/fs/cgroup/*/$GPUMAN_FENCE_CGROUP/$id/cgroup.procs)\" ]"
	run -0 as_user alice gpuman release "$id"
	rc=0
	wait "$shell" || rc=$?
	[ "$rc" = 137 ] # the shell's status: SIGKILL
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence: a shell that evals gpuman reserve's lines opens only the reserved GPUs, as does all it starts; at the reservation's end it goes on, and what it started does not" {
	gpus 4
	start_daemon
	job_script
	cat >"$SHARED/evals.sh" <<EOF
#!/bin/bash
eval "\$(gpuman reserve --for 10m --only 2 2>/dev/null)"
"$SHARED/job.sh" "$SHARED/out/eval"
sleep 300 >/dev/null 2>&1 &
echo \$! >"$SHARED/pids/bg"
# released from inside: this gpuman goes home with the shell
gpuman release "\$GPUMAN_RESERVATION" 2>/dev/null
echo "release \$?" >>"$SHARED/out/eval"
"$TRY" "$SHARED/out/eval" after $NODES
EOF
	chmod 755 "$SHARED/evals.sh"
	cd "$SHARED/out"
	run -0 as_user alice "$SHARED/evals.sh"
	cat "$SHARED/out/eval" # shown if what follows fails
	check "$SHARED/out/eval" self fork double setsid
	grep -qx "release 0" "$SHARED/out/eval"
	grep -qx "after nvidia2=ENXIO nvidia3=ENXIO nvidiactl=ENXIO other=OK" "$SHARED/out/eval"
	# what it started under the reservation ended with it
	wait_for "! kill -0 $(cat "$SHARED/pids/bg") 2>/dev/null"
	wait_for "[ \$(cgroups_left) = 0 ]" 30
	# --json is for programs, not for eval: nobody is placed
	run -0 as_user alice sh -c 'gpuman reserve --for 10m --only 2 --json >/dev/null; cat /proc/self/cgroup'
	[[ "$output" != *"$GPUMAN_FENCE_CGROUP"* ]]
}

@test "fence: a reservation released from inside its own shell, with slow moves, keeps nobody else waiting; the release returns with the shell and itself home" {
	# The release moves the releasing process home (it is in the
	# reservation's cgroup): on the worker, as the shell's own move, not
	# on the broker's loop, where it held every other user's answer.
	gpus 4
	start_daemon GPUMAN_FENCE_MOVE_DELAY_MS=700
	job_script
	cat >"$SHARED/evals.sh" <<EOF
#!/bin/bash
eval "\$(gpuman reserve --for 10m --only 2 2>/dev/null)"
touch "$SHARED/out/releasing"
t0=\$(date +%s%N)
gpuman release "\$GPUMAN_RESERVATION" 2>/dev/null
echo "release \$? \$(( (\$(date +%s%N) - t0) / 1000000 )) ms" >>"$SHARED/out/eval"
"$TRY" "$SHARED/out/eval" after $NODES
EOF
	chmod 755 "$SHARED/evals.sh"
	# a status, asked 0.2 s into the release
	timed_status "$SHARED/out/releasing" 0.2 &
	local observer=$!
	cd "$SHARED/out"
	run -0 as_user alice "$SHARED/evals.sh"
	wait "$observer"
	cat "$SHARED/out/eval" "$SHARED/out/status"
	[[ "$(cat "$SHARED/out/eval")" =~ release\ 0\ ([0-9]+)\ ms ]]
	# two moves home (the shell's and the release's own), 0.7 s each
	[ "${BASH_REMATCH[1]}" -ge 1300 ]
	[[ "$(cat "$SHARED/out/status")" =~ status\ ([0-9]+)\ ms ]]
	[ "${BASH_REMATCH[1]}" -lt 300 ]
	grep -qx "after nvidia2=ENXIO nvidia3=ENXIO nvidiactl=ENXIO other=OK" "$SHARED/out/eval"
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence: the lease's user's process on its GPU from outside its cgroup is named by waste and ended with the lease; another user's is not" {
	gpus 4
	start_daemon
	uuid=$(gpuman status --json | jq -r '.gpus[2].uuid')
	# as if handed a descriptor of GPU 2 over a socket: outside every lease
	as_user alice env CUDA_VISIBLE_DEVICES="$uuid" gpuman-simload --mem 1G --util 0 --seconds 300 &
	as_user bob env CUDA_VISIBLE_DEVICES="$uuid" gpuman-simload --mem 1G --util 0 --seconds 300 &
	wait_for "[ \"\$(gpuman status --json | jq '[.processes[] | select(.gpu == 2)] | length')\" = 2 ]"
	stray=$(gpuman status --json | jq -r '.processes[] | select(.user == "gmtest-alice") | .pid')
	other=$(gpuman status --json | jq -r '.processes[] | select(.user == "gmtest-bob") | .pid')
	echo "$stray" >"$SHARED/pids/stray"
	echo "$other" >"$SHARED/pids/other"
	as_user alice gpuman run --only 2 --mem 1G -- sleep 2 &
	local job=$!
	wait_for "[ \"\$(gpuman status --json | jq '.leases | length')\" = 1 ]"
	run gpuman waste --json
	[ "$(jqr "[.waste[] | select(.kind == \"unleased\") | .pid] | map(tostring) | index(\"$stray\") != null")" = true ]
	wait "$job"
	wait_for "! kill -0 $stray 2>/dev/null"
	grep -q "pid $stray still used GPU 2 from outside it; killed" "$BATS_TEST_TMPDIR/daemon.log"
	kill -0 "$other"
}

# ---- across a restart of the broker ---------------------------------------

# restart_daemon - kill -9 this test's broker and start another on its state
restart_daemon() {
	local n
	n=$(grep -c serving "$BATS_TEST_TMPDIR/daemon.log")
	kill -9 "$DAEMON"
	wait "$DAEMON" || true
	gpuman daemon --socket "$GPUMAN_BROKER" --state "$STATE" \
		2>>"$BATS_TEST_TMPDIR/daemon.log" &
	DAEMON=$!
	wait_for "[ \$(grep -c serving '$BATS_TEST_TMPDIR/daemon.log') -gt $n ]"
}

@test "fence restart: a library lease's own process still goes home alive at its release after the broker is killed -9" {
	gpus 4
	# Moves slow, as where each waits a grace period: the release by
	# token to the restarted broker still returns with the caller home.
	export GPUMAN_FENCE_MOVE_DELAY_MS=300
	start_daemon
	cat >"$SHARED/lib.py" <<EOF
import os, sys, time
sys.path.insert(0, "$GM_ROOT/python")
import gpuman
open("$SHARED/pids/py", "w").write(str(os.getpid()))  # for teardown
lease = gpuman.select(only="2")
os.system("$TRY $SHARED/out/lib leased $NODES")
while not os.path.exists("$SHARED/out/go"):
    time.sleep(0.05)
lease.release()
os.system("$TRY $SHARED/out/lib after $NODES")
EOF
	chmod 644 "$SHARED/lib.py"
	local pre
	mapfile -t pre < <(py_env)
	as_user alice env "${pre[@]}" python3 "$SHARED/lib.py" &
	local py=$!
	wait_for "grep -qs '^leased ' '$SHARED/out/lib'"
	check "$SHARED/out/lib" leased
	restart_daemon
	grep -q "restored 1 lease" "$BATS_TEST_TMPDIR/daemon.log"
	grep -q "fence: 1 supervisor of restored leases to move home at their end" \
		"$BATS_TEST_TMPDIR/daemon.log"
	touch "$SHARED/out/go"
	wait "$py" # alive to the end: moved home, not killed with the cgroup
	grep -qx "after nvidia2=ENXIO nvidia3=ENXIO nvidiactl=ENXIO other=OK" "$SHARED/out/lib"
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence restart: a waiter whose job was placed as it waited keeps its turn across a kill -9 of the broker, and its job runs fenced" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy"
	gpus 4
	export GPUMAN_FENCE_PREPLACE=yes # this broker and the next
	start_daemon GPUMAN_FENCE=v2
	hold_gpu2
	as_user bob gpuman run --only 2 --wait -- "$TRY" "$SHARED/out/waited" waited $NODES &
	local bob=$! cg=
	wait_for "cg=\$(waiting_cgroup /sys/fs/cgroup/unified); [ -n \"\$cg\" ]"
	restart_daemon
	# the next broker ends the early job's cgroup (no lease has its name);
	# bob's gpuman ends that job, and asks again with his place
	wait_for "[ ! -d '$cg' ]" 30
	grep -q "restored 1 lease" "$BATS_TEST_TMPDIR/daemon.log"
	touch "$SHARED/out/go"
	wait "$bob"
	check "$SHARED/out/waited" waited
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

@test "fence restart: what a job left in its cgroup is ended by the next broker when the job ended while none ran" {
	gpus 4
	start_daemon
	# the job leaves a process that closed every descriptor and left its
	# session, and ends once told, while the broker is down
	cat >"$SHARED/leave.sh" <<EOF
#!/bin/sh
python3 -c 'import os, time
os.closerange(3, 4096); os.setsid()
open("$SHARED/pids/left", "w").write(str(os.getpid()))
time.sleep(300)' </dev/null >/dev/null 2>&1 &
echo \$\$ >"$SHARED/pids/job"
while [ ! -e "$SHARED/out/go" ]; do sleep 0.05; done
EOF
	chmod 755 "$SHARED/leave.sh"
	as_user alice gpuman run --only 2 -- "$SHARED/leave.sh" &
	local sup=$!
	wait_for "[ -s '$SHARED/pids/left' ]"
	left=$(cat "$SHARED/pids/left")
	# the broker and the job's supervisor (gpuman run, a subreaper that
	# would end what the job left) die; then the job ends
	kill -9 "$DAEMON" "$(pgrep -f "^gpuman run --only 2 -- $SHARED/leave.sh")"
	wait "$DAEMON" "$sup" || true
	touch "$SHARED/out/go"
	wait_for "! kill -0 $(cat "$SHARED/pids/job") 2>/dev/null"
	kill -0 "$left" # no broker: nothing ended it yet
	n=$(grep -c serving "$BATS_TEST_TMPDIR/daemon.log")
	gpuman daemon --socket "$GPUMAN_BROKER" --state "$STATE" 2>>"$BATS_TEST_TMPDIR/daemon.log" &
	DAEMON=$!
	wait_for "[ \$(grep -c serving '$BATS_TEST_TMPDIR/daemon.log') -gt $n ]"
	grep -q "1 cgroup of leases that ended meanwhile ended" "$BATS_TEST_TMPDIR/daemon.log" ||
		{ cat "$BATS_TEST_TMPDIR/daemon.log"; false; }
	wait_for "! kill -0 $left 2>/dev/null"
	wait_for "[ \$(cgroups_left) = 0 ]" 30
}

# ---- where systemd is PID 1: the job's cgroup is a transient scope -------

# slice_dir NAME - the folder of slice NAME.slice (systemd.slice(5): each
# dash opens a slice inside the one before)
slice_dir() {
	local IFS=- part stem= dir=
	for part in $1; do
		stem=$stem${stem:+-}$part
		dir=$dir${dir:+/}$stem.slice
	done
	echo "$dir"
}

# standin MOUNT - systemd's manager as these machines lack it: a private bus
# daemon and helpers/systemd-standin.py on it, which records each call and
# does what systemd does for a scope (its cgroup under MOUNT, the PIDs moved
# there); gpuman is pointed at that bus (GPUMAN_SYSTEMD_BUS)
standin() {
	command -v dbus-daemon >/dev/null || skip "no dbus-daemon (Debian: dbus-daemon)"
	/usr/bin/python3 -c 'import dbus, gi' 2>/dev/null || skip "no python3-dbus, python3-gi"
	dbus-daemon --session --nofork --nopidfile --address="unix:path=$SHARED/bus" 3>&- &
	echo $! >"$SHARED/pids/dbus"
	wait_for "[ -S '$SHARED/bus' ]"
	DBUS_SESSION_BUS_ADDRESS="unix:path=$SHARED/bus" /usr/bin/python3 \
		"$BATS_TEST_DIRNAME/helpers/systemd-standin.py" "$SHARED/calls" "$1" "$SHARED/ready" \
		2>>"$BATS_TEST_TMPDIR/standin.log" 3>&- &
	echo $! >"$SHARED/pids/standin"
	wait_for "[ -e '$SHARED/ready' ]" || { cat "$BATS_TEST_TMPDIR/standin.log"; return 1; }
	export GPUMAN_SYSTEMD_BUS="unix:path=$SHARED/bus"
}

scoped_run() { # scoped_run MECHANISM MOUNT CONTROLLER-LINE-PATTERN
	local slice=$GPUMAN_FENCE_CGROUP.slice sdir unit id pid
	sdir=$2/$(slice_dir "$GPUMAN_FENCE_CGROUP")
	gpus 4
	standin "$2"
	start_daemon GPUMAN_FENCE="$1"
	grep -q "placement enforced by the kernel: .*each job in a systemd scope of $slice under '$sdir'" \
		"$BATS_TEST_TMPDIR/daemon.log"
	job_script
	as_user alice gpuman run --only 2 -- sh -c 'echo $$ >"$0.pid"; grep "$1" /proc/self/cgroup >"$0"
		"$2" "$3"; sleep 0.3' "$SHARED/out/where" "$3" "$SHARED/job.sh" "$SHARED/out/run" &
	local job=$!
	wait_for "[ -s '$SHARED/out/where' ]"
	id=$(gpuman status --json | jq -r '.leases[0].id')
	unit=$GPUMAN_FENCE_CGROUP-$id.scope
	pid=$(cat "$SHARED/out/where.pid")
	wait "$job"
	# the job ran in the cgroup "job" of its scope, fenced as before
	check "$SHARED/out/run" self fork double setsid
	[[ "$(cat "$SHARED/out/where")" == *":/${sdir#"$2"/}/$unit/job" ]]
	# what gpuman asked of systemd: Subscribe (its JobRemoved), then the
	# scope, with each property's D-Bus type
	run -0 jq -sc '.[] | .method' "$SHARED/calls"
	[ "$output" = "$(printf '"Subscribe"\n"StartTransientUnit"')" ]
	run -0 jq -c 'select(.method == "StartTransientUnit") | [.name, .mode, .aux]' "$SHARED/calls"
	[ "$output" = "[\"$unit\",\"fail\",0]" ]
	run -0 jq -c 'select(.method == "StartTransientUnit") | .properties[] | .[0:2]' "$SHARED/calls"
	[ "$output" = "$(printf '%s\n' '["Description","s"]' '["Slice","s"]' '["Delegate","b"]' \
		'["CollectMode","s"]' '["PIDs","au"]')" ] || { echo "$output"; false; }
	run -0 jq -c 'select(.method == "StartTransientUnit") | .properties | map({(.[0]): .[2]}) | add' \
		"$SHARED/calls"
	[ "$(jqr .Slice)" = "$slice" ]
	[ "$(jqr .Delegate)" = true ]
	[ "$(jqr .CollectMode)" = inactive-or-failed ]
	[ "$(jqr -c .PIDs)" = "[$pid]" ]
	[[ "$(jqr .Description)" == "gpuman lease $id of gmtest-alice: sh -c "* ]]
	# at the lease's end its cgroup is gone and nothing is left in the
	# scope, which systemd then stops (the stand-in leaves it: not systemd)
	wait_for "[ ! -e '$sdir/$unit/job' ]"
	[ -z "$(cat "$sdir/$unit/cgroup.procs")" ]
}

@test "fence scope v2: where systemd runs, a job's cgroup is a transient scope systemd delegates (asked of a stand-in on a private bus), the job fenced in it" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy at /sys/fs/cgroup/unified"
	scoped_run v2 /sys/fs/cgroup/unified '^0::'
}

@test "fence scope v1: the same with the devices controller" {
	[ -d /sys/fs/cgroup/devices ] || skip "no cgroup v1 devices controller"
	scoped_run v1 /sys/fs/cgroup/devices ':devices:'
}

@test "fence scope: a lease's end in its systemd scope, with slow moves, keeps nobody else waiting either" {
	# The same end on the broker's worker where systemd makes the scopes:
	# the loop neither moves the supervisor home nor waits for the scope's
	# cgroup to empty.
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy at /sys/fs/cgroup/unified"
	local sdir=/sys/fs/cgroup/unified/$(slice_dir "$GPUMAN_FENCE_CGROUP")
	gpus 4
	standin /sys/fs/cgroup/unified
	start_daemon GPUMAN_FENCE=v2 GPUMAN_FENCE_MOVE_DELAY_MS=700
	slow_end
	grep -q '"StartTransientUnit"' "$SHARED/calls"
	wait_for "[ -z \"\$(ls -d '$sdir'/*.scope/job 2>/dev/null)\" ]" 30
}

@test "fence scope: a systemd that does not answer refuses the job, which never runs unfenced" {
	gpus 4
	start_daemon GPUMAN_SYSTEMD_BUS="unix:path=$SHARED/no-bus"
	run -1 as_user alice gpuman run --only 2 -- touch "$SHARED/out/ran"
	[[ "$output" == *"cannot place pid "*": cannot reach systemd on unix:path=$SHARED/no-bus: "* ]] ||
		{ echo "$output"; false; }
	[ ! -e "$SHARED/out/ran" ]
	wait_for "[ \"\$(gpuman status --json | jq '.leases | length')\" = 0 ]"
}

@test "fence scope: a broker where libsystemd cannot be loaded starts, fences in plain folders, and says why" {
	[ -d /sys/fs/cgroup/unified ] || skip "no cgroup v2 hierarchy at /sys/fs/cgroup/unified"
	lib=$(ldconfig -p | awk '/libsystemd\.so\.0 .*x86-64/ { print $NF; exit }')
	[ -n "$lib" ] || lib=$(ldconfig -p | awk '/libsystemd\.so\.0 / { print $NF; exit }')
	[ -n "$lib" ] || skip "no libsystemd.so.0 here to hide"
	gpus 4
	# the broker's own mount namespace, where the library is an empty file
	GPUMAN_SYSTEMD_BUS="unix:path=$SHARED/bus" GPUMAN_FENCE=v2 unshare -m sh -c \
		'mount --bind /dev/null "$0" && exec gpuman daemon --socket "$1" --state "$2"' \
		"$lib" "$GPUMAN_BROKER" "$STATE" 2>>"$BATS_TEST_TMPDIR/daemon.log" &
	DAEMON=$!
	wait_for "grep -q serving '$BATS_TEST_TMPDIR/daemon.log'"
	grep -q "jobs' cgroups under '.*'; systemd runs, but cannot load libsystemd.so.0: " \
		"$BATS_TEST_TMPDIR/daemon.log" || { cat "$BATS_TEST_TMPDIR/daemon.log"; false; }
	job_script
	run -0 as_user alice gpuman run --only 2 -- "$SHARED/job.sh" "$SHARED/out/run"
	check "$SHARED/out/run" self fork double setsid
}

session_login() { # a broker fencing sessions (mechanism $1, then its env), and alice's login
	gpus 4
	printf '[fence]\nsessions = yes\n' >"$SHARED/gpuman.conf"
	chmod 644 "$SHARED/gpuman.conf"
	start_daemon GPUMAN_CONFIG="$SHARED/gpuman.conf" GPUMAN_FENCE="$1" "${@:2}"
	mkdir -m 1777 "$SHARED/ask"
	cat >"$SHARED/session.sh" <<EOF2
#!/bin/sh
# the user's login shell: probes the devices whenever asked
while :; do
	for f in "$SHARED"/ask/*; do
		[ -e "\$f" ] || continue
		rm -f "\$f"
		"$TRY" "$SHARED/out/session" "\${f##*/}" $NODES
	done
	sleep 0.05
done
EOF2
	chmod 755 "$SHARED/session.sh"
	# a login, as pam_exec does it: the hook (root) placing its parent,
	# which then becomes the user's shell
	sh -c 'echo $$ >"$0/pids/session"
		PAM_TYPE=open_session PAM_USER=gmtest-alice gpuman pam-session || exit 1
		exec setpriv --reuid=gmtest-alice --regid=gmtest-alice --clear-groups "$0/session.sh"' \
		"$SHARED" 2>"$SHARED/out/hook.err" &
}

probe() { # what alice's session opens now, asked as $1
	as_user alice touch "$SHARED/ask/$1"
	wait_for "grep -qs '^$1 ' '$SHARED/out/session'" || { cat "$SHARED/out/hook.err"; return 1; }
	grep -m1 "^$1 " "$SHARED/out/session"
}

session_test() { # the sessions test, under mechanism $1
	session_login "$1"
	run -0 probe none
	[ "$output" = "none nvidia2=EPERM nvidia3=EPERM nvidiactl=ENXIO other=OK" ]
	run -0 as_user bob gpuman reserve --for 10m --only 3
	run -0 probe bobs
	[ "$output" = "bobs nvidia2=EPERM nvidia3=EPERM nvidiactl=ENXIO other=OK" ]
	run -0 as_user alice gpuman reserve --for 10m --only 2 --json
	id=$(jqr .id)
	run -0 probe mine
	[ "$output" = "mine nvidia2=ENXIO nvidia3=EPERM nvidiactl=ENXIO other=OK" ]
	run -0 as_user alice gpuman release "$id"
	run -0 probe released
	[ "$output" = "released nvidia2=EPERM nvidia3=EPERM nvidiactl=ENXIO other=OK" ]
	# a session of root is not fenced
	PAM_TYPE=open_session PAM_USER=root gpuman pam-session
	! grep -q "$GPUMAN_FENCE_CGROUP/session" /proc/$$/cgroup || false
}

@test "fence sessions v2: a login session opens no GPU until its user holds a lease, then only that lease's; another user's lease changes nothing for her" {
	session_test v2
}

@test "fence sessions v1: the same with the devices controller" {
	[ -d /sys/fs/cgroup/devices ] || skip "no cgroup v1 devices controller"
	session_test v1
}

@test "fence sessions: where moves are slow, a session follows its user's reservation on the broker's worker: nobody else waits for the change, and she is answered once it is in" {
	# A filter's change waits for the kernel's cgroup lock, which a move
	# holds through its grace period (here 0.7 s, bob's job's).
	session_login v2 GPUMAN_FENCE_MOVE_DELAY_MS=700
	run -0 probe none
	[ "$output" = "none nvidia2=EPERM nvidia3=EPERM nvidiactl=ENXIO other=OK" ]
	as_user bob gpuman run --only 3 -- sleep 30 >/dev/null 2>&1 &
	local bobs=$!
	# its cgroup made: its move in is under way
	wait_for "ls -d /sys/fs/cgroup/unified/$GPUMAN_FENCE_CGROUP/[0-9]* >/dev/null 2>&1" 10
	timed_status "$SHARED/gpuman.conf" 0.1 &
	local observer=$!
	run -0 as_user alice gpuman reserve --for 10m --only 2 --json
	id=$(jqr .id)
	wait "$observer"
	cat "$SHARED/out/status"
	[[ "$(cat "$SHARED/out/status")" =~ status\ ([0-9]+)\ ms ]]
	[ "${BASH_REMATCH[1]}" -lt 300 ]
	# told once her session opens it
	run -0 probe mine
	[ "$output" = "mine nvidia2=ENXIO nvidia3=EPERM nvidiactl=ENXIO other=OK" ]
	run -0 as_user alice gpuman release "$id"
	run -0 probe released
	[ "$output" = "released nvidia2=EPERM nvidia3=EPERM nvidiactl=ENXIO other=OK" ]
	kill "$bobs"
	wait "$bobs" || true
}
