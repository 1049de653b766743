#!/usr/bin/env bats
# Nobody stalls everyone: a hostile user's volume against the lease broker
# (issue 23's attacks), as real users.  Each attack runs for a bounded time
# while another user's requests are timed: every one must be answered
# within VICTIM_MS (1 s on a 2-core machine shared with other work), and
# the broker's caps refuse with a message that names them.  The victim's
# latencies are printed (# lines) for the trust model's page.

load helpers
load helpers/broker

VICTIM_MS=${VICTIM_MS:-1000}
# the priority contrib/gpuman.service gives the broker
BROKER_NICE=${BROKER_NICE:--10}
E2E_MS=${E2E_MS:-3000}

setup() {
	gm_setup
	gm_user alice
	gm_user mallory
	broker_setup stall
	echo '{ "gpus": [ {"name":"g1","memory_total_mib":16000}, {"name":"g2","memory_total_mib":16000} ] }' \
		>"$SHARED/gpus.json"
	chmod 644 "$SHARED/gpus.json"
	export GPUMAN_SIM=$SHARED/gpus.json
	FLOOD="/usr/bin/python3 $BATS_TEST_DIRNAME/helpers/flood.py"
}

teardown() {
	broker_teardown
}

# wait_long CMD SECONDS - until CMD succeeds
wait_long() {
	local end=$((SECONDS + $2))
	until eval "$1"; do
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.1
	done
}

# bg NAME USER CMD... - CMD as gmtest-USER in the background, its pid in
# $SHARED/pids/NAME, its output in $SHARED/NAME.out
bg() {
	local name=$1 user=$2
	shift 2
	as_user "$user" sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/$name" "$@" \
		>"$SHARED/$name.out" 2>&1 &
	wait_for "[ -s '$SHARED/pids/$name' ]"
}

# victim WHAT CMD... - time alice's CMD (20 s at most), end to end: it fails
# past E2E_MS plus the worst of the baseline (the same requests before the
# attack).  The bound that is the broker's is answer's.  Times go to
# $SHARED/victims (or baseline).
victim() {
	local what=$1 t0 ms rc=0 limit
	shift
	t0=$(date +%s%N)
	timeout 20 setpriv --reuid=gmtest-alice --regid=gmtest-alice --clear-groups \
		env -u XDG_CONFIG_HOME HOME=/tmp PATH="$PATH" "$@" >"$SHARED/victim.out" 2>&1 || rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	echo "$what $ms" >>"$SHARED/${INTO:-victims}"
	limit=$((E2E_MS + $(worst baseline)))
	if [ "$rc" != 0 ] || [ "$ms" -gt "$limit" ]; then
		echo "alice's $what: $ms ms (limit $limit), exit $rc:" >&2
		cat "$SHARED/victim.out" >&2
		return 1
	fi
}

# answer OP - alice asks the broker (an acquire of one GPU, or a view) and
# times its answer, from her connect to its reply: at most VICTIM_MS.
answer() {
	local line out ms
	if [ "$1" = view ]; then
		line='{"v":1,"op":"view"}'
	else
		line='{"v":1,"op":"acquire","request":{"n":"1"},"wait":false}'
	fi
	out=$(timeout 25 setpriv --reuid=gmtest-alice --regid=gmtest-alice --clear-groups $FLOOD ask "$GPUMAN_BROKER" "$line")
	ms=${out%% *}
	echo "$1 $ms" >>"$SHARED/${INTO:-answers}"
	if [ "${out#* }" != "$( [ "$1" = view ] && echo view || echo granted)" ] || [ "$ms" -gt "$VICTIM_MS" ]; then
		echo "alice's $1: answered '${out#* }' in $ms ms (limit $VICTIM_MS)" >&2
		return 1
	fi
}

worst() { sort -k2n "$SHARED/$1" 2>/dev/null | tail -1 | cut -d' ' -f2 | grep . || echo 0; }
median() { sort -k2n "$SHARED/$1" | awk '{a[NR] = $2} END {print a[int((NR + 1) / 2)]}'; }

# baseline - alice's requests before any attack
baseline() {
	local i
	for i in 1 2 3; do
		INTO=baseline victim run gpuman run -- true
		INTO=baseline victim status gpuman status
		INTO=baseline-answers answer acquire
		INTO=baseline-answers answer view
	done
}

# attacked - alice's requests under attack, 5 rounds
attacked() {
	local i
	for i in 1 2 3 4 5; do
		answer acquire
		answer view
		victim run gpuman run -- true
		victim status gpuman status
	done
}

# report ATTACK - the victim's latencies, for the trust model's page
report() {
	echo "# $1: the broker answered alice in median $(median answers) ms, worst" \
		"$(worst answers) ms (without the attack: $(median baseline-answers)," \
		"$(worst baseline-answers)); her gpuman run/status took median" \
		"$(median victims) ms, worst $(worst victims) ms (without: $(median baseline)," \
		"$(worst baseline))" >&3
}

@test "stall: connect-and-close in a loop does not keep the broker from answering others (attack 1)" {
	start_daemon
	baseline
	# three loops: faster than one broker can accept
	for i in 1 2 3; do
		bg "churn$i" mallory $FLOOD churn "$GPUMAN_BROKER" 60
	done
	sleep 1
	attacked
	kill -0 "$(cat "$SHARED/pids/churn1")" # still attacking
	report "attack 1 (connect-and-close loop)"
}

@test "stall: a long line of one user and views 64 at a time do not slow others (attacks 2 and 6)" {
	start_daemon
	# GPU 0 held by a job: the line waits for it; GPU 1 stays free
	bg holder mallory gpuman run --only 0 -- sleep 120
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	baseline
	cap=$(sed -n 's/.*caps: \([0-9]*\) connections a user.*/\1/p' "$BATS_TEST_TMPDIR/daemon.log")
	cap=${cap:-4096} # before the caps were logged: 4096 a user
	# WAITERS waiters in all (3,900 by default), from as many accounts as
	# the per-user cap needs
	want=${WAITERS:-3900}
	per=$((cap - 8))
	accounts=$(((want + per - 1) / per))
	for a in $(seq "$accounts"); do
		gm_user "flood$a"
		bg "w$a" "flood$a" $FLOOD wait "$GPUMAN_BROKER" "$per" 120 \
			'{"v":1,"op":"acquire","request":{"n":"1","only":"0"},"wait":true,"command":"'"$(head -c 200 /dev/zero | tr '\0' x)"'"}'
	done
	for a in $(seq "$accounts"); do
		wait_long "grep -q held '$SHARED/w$a.out'" 60
	done
	wait_long "[ \"\$(gpuman status --json | jq '(.waiters | length) + ([.waiters_more[]?.count] | add // 0)')\" -ge $((per * accounts)) ]" 60
	bg views mallory $FLOOD views "$GPUMAN_BROKER" 64 60
	sleep 1
	attacked
	victim status-json gpuman status --json
	# status shows the leases and the line, the line's tail summarised
	run -0 gpuman status
	[[ "$output" == *"waiting (served in this order):"* ]]
	[[ "$output" == *"... and "*" more from gmtest-flood"* ]]
	run -0 gpuman status --json
	[ "$(jqr '.leases | length')" = 1 ]
	[ "$(jqr '.waiters | length')" -le 256 ]
	report "attacks 2 and 6 ($((per * accounts)) waiting connections, views 64 at a time)"
}

# in_run_ns SCRIPT - SCRIPT (bash, with this file's functions and -e) in a
# private mount namespace whose /run is a fresh tmpfs owned by root (0755),
# as a machine's is: the default paths are tested for real without touching
# this machine's /run.
in_run_ns() {
	unshare -m --propagation private bash -ec 'mount -t tmpfs -o mode=755 gm-run /run
		mkdir -m 1777 /run/gpuman
		eval "$1"' in_run_ns "$1"
}

@test "stall: a socket planted in the registry's directory turns nobody away; the broker's is root's (attack 3)" {
	unshare -m --propagation private true 2>/dev/null || skip "needs unshare -m (root, mount namespaces)"
	gm_user bob
	unset GPUMAN_BROKER GPUMAN_STATE_DIR
	export FLOOD SHARED
	export -f as_user wait_for
	# every wait bounded: a broker that dies (say, under UBSan) fails the
	# test, never hangs make check
	in_run_ns '
		# mallory plants a socket where gpuman looked for the broker,
		# and serves it
		as_user mallory /usr/bin/python3 -c "import socket, time
s = socket.socket(socket.AF_UNIX); s.bind(\"/run/gpuman/gpuman.sock\"); s.listen(8)
open(\"$SHARED/planted\", \"w\").close(); time.sleep(60)" &
		wait_for "[ -e \"$SHARED/planted\" ]" 30
		# alice leases through the daemonless registry as before
		as_user alice gpuman run -- sh -c "echo \$GPUMAN_GPUS" >"$SHARED/alice.out"
		as_user alice gpuman status --json | jq -e ".leases | length == 0"
		# nobody but root can make the broker'"'"'s directory
		! as_user mallory mkdir /run/gpuman-broker || false
		# root'"'"'s broker, on the default socket and state
		gpuman daemon 2>"$SHARED/daemon.log" &
		daemon=$!
		wait_for "grep -q serving \"$SHARED/daemon.log\"" 30 || { cat "$SHARED/daemon.log" >&2; false; }
		stat -c "%U %a" /run/gpuman-broker >"$SHARED/dir"
		stat -c "%U" /run/gpuman-broker/gpuman.sock >"$SHARED/sock"
		as_user bob gpuman run -- sleep 30 &
		wait_for "gpuman status --json | jq -e \".leases | length == 1\" >/dev/null" 30
		# the lease is the broker'"'"'s: no lease file in the registry
		[ -z "$(ls /run/gpuman | grep lease)" ]
		as_user alice gpuman status --json | jq -r ".leases[0].user" >"$SHARED/holder"
		# a broker that stops removes its socket; a client is told what
		# to do and does not fall back to the registry
		kill -TERM $daemon
		wait $daemon
		[ ! -e /run/gpuman-broker/gpuman.sock ]
		! as_user alice gpuman run -- true 2>"$SHARED/stopped.err" || false
		[ -z "$(ls /run/gpuman | grep lease)" ]
		# a socket there that nobody serves: the same
		/usr/bin/python3 -c "import socket; socket.socket(socket.AF_UNIX).bind(\"/run/gpuman-broker/gpuman.sock\")"
		! as_user alice gpuman run -- true 2>"$SHARED/stale.err" || false
		kill %1 %2 2>/dev/null || true
	'
	[ "$(cat "$SHARED/alice.out")" = 0 ]
	[ "$(cat "$SHARED/dir")" = "root 755" ]
	[ "$(cat "$SHARED/sock")" = root ]
	[ "$(cat "$SHARED/holder")" = gmtest-bob ]
	for f in stopped stale; do
		run cat "$SHARED/$f.err"
		[[ "$output" == *"'/run/gpuman-broker/gpuman.sock' does not answer"* ]]
		[[ "$output" == *"systemctl start gpuman.socket"*"root removes '/run/gpuman-broker'"* ]]
		[[ "$output" != *"GPUMAN_BROKER=off"* ]]
	done
}

@test "stall: every holding is capped per user, with a refusal that names the cap (item 2, attack 7)" {
	start_daemon
	cap=$(sed -n 's/.*caps: \([0-9]*\) connections a user.*/\1/p' "$BATS_TEST_TMPDIR/daemon.log")
	[ -n "$cap" ]
	[ "$cap" -ge 4 ]
	# connections: mallory holds her cap of waiting requests (for a GPU
	# held by a job of hers); one more is refused, naming the cap
	bg holder mallory gpuman run --only 0 -- sleep 120
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	bg waits mallory $FLOOD wait "$GPUMAN_BROKER" $((cap - 1)) 120 \
		'{"v":1,"op":"acquire","request":{"n":"1","only":"0"},"wait":true}'
	wait_long "grep -q held '$SHARED/waits.out'" 30
	wait_long '[ "$(gpuman status --json | jq ".waiters | length")" -ge 255 ]' 30
	run -75 as_user mallory gpuman run --wait -- true
	[[ "$output" == *"gmtest-mallory has $cap connections to the lease broker open, its cap"* ]]
	# and says what a sweep of many runs can do instead
	[[ "$output" == *"or give many tasks to one gpuman batch or gpuman submit, which wait in line once"* ]]
	# others are served meanwhile
	answer acquire
	answer view
	holder=$(cat "$SHARED/pids/holder")
	kill -9 "$(cat "$SHARED/pids/waits")" $(ps --ppid "$holder" -o pid=) "$holder"
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 0 ]'
	# reservations hold no connection: capped on their own (64 a user),
	# those asked for and those held alike
	run -0 as_user mallory $FLOOD reserve "$GPUMAN_BROKER" 70 \
		'{"v":1,"op":"acquire","request":{"n":"1","mem":"1","only":"1"},"reserve_ms":600000}'
	[ "${lines[1]}" = "granted 64 refused 6" ]
	[[ "${lines[0]}" == *"gmtest-mallory has 64 reservations (held or asked for), the cap of the lease broker (64 a user)"* ]]
	run -0 gpuman status --json
	[ "$(jqr '[.leases[] | select(.reservation)] | length')" = 64 ]
	answer acquire
	echo "# caps (a user at her connection cap, then 64 reservations): the broker" \
		"answered alice in median $(median answers) ms, worst $(worst answers) ms" >&3
}

@test "stall: durations and sizes are range-checked on the wire as on the command line (attack 8)" {
	start_daemon
	for bad in 9223372036854775807 -1 0 1.5 '"600000"' 315360000001; do
		run -0 as_user mallory $FLOOD ask "$GPUMAN_BROKER" \
			'{"v":1,"op":"acquire","request":{"n":"1"},"reserve_ms":'"$bad"'}'
		[ "$output" != "${output#* refused}" ] || { echo "reserve_ms $bad: $output"; false; }
	done
	run as_user mallory /usr/bin/python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		'{"v":1,"op":"acquire","request":{"n":"1"},"reserve_ms":9223372036854775807}'
	[[ "$output" == *'"op":"refused"'*"reserve_ms must be a whole number of milliseconds from 1 to 315360000000 (3650d)"* ]]
	# the same bound as --for; sizes and counts through the same parser
	run as_user mallory /usr/bin/python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		'{"v":1,"op":"acquire","request":{"n":"1","mem":"99999999T"},"wait":true}'
	[[ "$output" == *'"op":"refused"'*"too large"* ]]
	run as_user mallory /usr/bin/python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		'{"v":1,"op":"acquire","request":{"n":"99999999999"},"wait":true}'
	[[ "$output" == *'"op":"refused"'* ]]
	run -2 as_user mallory gpuman reserve --for 3651d
	[[ "$output" == *"too long (at most 3650d)"* ]]
	# a job pid out of range names no process (a grant on a loaded machine
	# can take more than the helper's usual 2 s)
	export BROKER_RAW_WAIT=10
	run as_user mallory /usr/bin/python3 "$BATS_TEST_DIRNAME/helpers/broker_raw.py" "$GPUMAN_BROKER" \
		'{"v":1,"op":"acquire","request":{"n":"1"}}' '-await:"op":"granted"' \
		'{"v":1,"op":"job","pid":9223372036854775807}'
	unset BROKER_RAW_WAIT
	[[ "$output" == *'"op":"granted"'* ]]
	# the broker is alive and well
	answer acquire
	kill -0 "$DAEMON"
}

@test "stall: a lease's descriptor passed to another user (SCM_RIGHTS) stays its owner's lease, and ends with the last holder" {
	gm_user bob
	start_daemon
	PASSFD="/usr/bin/python3 $BATS_TEST_DIRNAME/helpers/passfd.py"
	# alice takes a lease and hands its connection to bob's process
	bg take bob $PASSFD take "$SHARED/give.sock" 600
	wait_for "[ -S '$SHARED/give.sock' ]"
	run -0 as_user alice $PASSFD give "$GPUMAN_BROKER" "$SHARED/give.sock"
	[[ "$output" == granted* ]]
	wait_for "grep -q took '$SHARED/take.out'"
	# alice's process is gone; the lease lives in bob's hands, and is
	# still alice's: her limits count it, bob gains nothing by it
	run -0 gpuman status --json
	[ "$(jqr '[.leases[] | .user] | join(",")')" = gmtest-alice ]
	# bob cannot make it his own through a restart either: a job pid
	# must be of the lease's user (on_job), so the broker ties it to no
	# process of bob's; bob ends it by closing it, as any holder does
	kill -9 "$(cat "$SHARED/pids/take")"
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 0 ]'
	# a holder that was handed the lease may release it (it holds it)
	rm -f "$SHARED/give.sock"
	bg take2 bob $PASSFD take "$SHARED/give.sock" 0 release
	wait_for "[ -S '$SHARED/give.sock' ]"
	run -0 as_user alice $PASSFD give "$GPUMAN_BROKER" "$SHARED/give.sock"
	wait_for "grep -q released '$SHARED/take2.out'"
	[ "$(gpuman status --json | jq '.leases | length')" = 0 ]
}

@test "stall: pid reuse around a holder: a lease kept for its job ends with it, though the kernel gives the job's pid to its user again at once" {
	start_daemon
	# (each part starts again, with new pids, when something else took
	# the job's pid first: take_pid's status 2)
	for try in 1 2 3; do
		bg job alice gpuman run -- sleep 300
		wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
		job=$(gpuman status --json | jq '.leases[0].job_pid')
		[ "$job" != "$(cat "$SHARED/pids/job")" ]
		# gpuman dies first: the lease stays with its job (as kill -9 of run)
		kill -9 "$(cat "$SHARED/pids/job")"
		sleep 0.5
		[ "$(gpuman status --json | jq ".leases | length")" = 1 ]
		# then the job, whose pid goes to another of alice's processes
		kill -9 "$job"
		take_pid "$job" alice j2 && break
		[ "$try" -lt 3 ]
		wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 0 ]'
	done
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 0 ]'
	# and a restart does not take the new process for the job either
	for try in 1 2 3; do
		bg job2 alice gpuman run -- sleep 300
		wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
		job=$(gpuman status --json | jq '.leases[0].job_pid')
		kill -9 "$(cat "$SHARED/pids/job2")"
		kill -9 "$DAEMON"
		wait "$DAEMON" || true
		kill -9 "$job"
		restored=$(grep -c "restored 0 leases of the broker before me (1 ended meanwhile)" \
			"$BATS_TEST_TMPDIR/daemon.log" || true)
		took=0
		take_pid "$job" alice j3 || took=$?
		[ "$took" = 0 ] || [ "$took" = 2 ]
		start_daemon
		wait_for '[ "$(grep -c "restored 0 leases of the broker before me (1 ended meanwhile)" \
			"$BATS_TEST_TMPDIR/daemon.log")" -gt "$restored" ]'
		[ "$(gpuman status --json | jq ".leases | length")" = 0 ]
		[ "$took" = 2 ] || break
		[ "$try" -lt 3 ]
	done
}

@test "stall: a fork bomb under a lease (RLIMIT_NPROC 64, in its own pid namespace) does not stall the broker, and its lease ends with it" {
	unshare -p -f --kill-child true 2>/dev/null || skip "needs unshare -p (root, pid namespaces)"
	# an account of its own: RLIMIT_NPROC counts every process of the user
	gm_user bomber
	start_daemon
	baseline
	# mallory's job forks without end; RLIMIT_NPROC bounds her processes,
	# the pid namespace lets the test end them all at once
	# (the namespace's init, by its pid here: killing it kills every
	# process of the namespace; setpriv's change of user clears the
	# parent-death signal of --kill-child).  SCHED_IDLE: the bomb's
	# processes run when nothing else wants a CPU, so that the suite beside
	# this one (make check runs two) is not starved for a minute; the
	# broker still meets 64 processes that fork without end
	chrt --idle 0 unshare -p -f --kill-child setpriv --reuid=gmtest-bomber --regid=gmtest-bomber \
		--clear-groups env HOME=/tmp PATH="$PATH" prlimit --nproc=64 \
		gpuman run -- sh -c 'b() { b | b & }; b; sleep 60' >/dev/null 2>&1 &
	unshare_pid=$!
	wait_for "ps --ppid $unshare_pid -o pid= | grep -q ."
	ps --ppid "$unshare_pid" -o pid= | tr -d ' ' >"$SHARED/pids/bombns"
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	sleep 3
	echo "# fork bomb: $(ps -u gmtest-bomber --no-headers | wc -l) processes of its user" >&3
	# The broker answers within the bound.  Her commands end to end are
	# timed, not judged: 64 processes that fork without end take the CPUs
	# of a 2-core machine from everybody, which no lease authority can
	# prevent (a job's cgroup with pids.max and cpu.max could).
	E2E_MS=600000 attacked
	[ "$(gpuman status --json | jq -r '.leases[0].user')" = gmtest-bomber ]
	# the namespace's end kills every process of the job: the lease ends
	kill -9 "$(cat "$SHARED/pids/bombns")"
	wait_long '[ "$(gpuman status --json | jq ".leases | length")" = 0 ]' 20
	report "fork bomb under a lease (RLIMIT_NPROC 64)"
}
