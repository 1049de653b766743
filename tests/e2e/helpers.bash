# helpers.bash - shared set-up for the end-to-end tests: each test gets its
# own registry, simulator state and queue, and the build's programs first on
# PATH.  Load with `load helpers`.

bats_require_minimum_version 1.5.0

GM_BUILD=${GM_BUILD:-$BATS_TEST_DIRNAME/../../build}
GM_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
export PATH="$GM_BUILD:$PATH"

gm_setup() {
	export GPUMAN_STATE_DIR="$BATS_TEST_TMPDIR/state"
	export GPUMAN_SIM_STATE="$BATS_TEST_TMPDIR/simstate"
	export GPUMAN_QUEUE_DIR="$BATS_TEST_TMPDIR/queue"
	# no gpuman.conf, the admin's or the user's, unless a test writes one
	# (a path under /dev/null exists for no user; /nonexistent, the home of
	# system users, may exist, unreadable, and a file gpuman cannot read is
	# an error).  as_user's users have their own (HOME=/tmp: none).
	export GPUMAN_CONFIG=/dev/null/gpuman.conf XDG_CONFIG_HOME="$BATS_TEST_TMPDIR/config"
	unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER GPUMAN_NVML GPUMAN_SIM NO_COLOR
	# The daemonless registry, even on a machine whose broker (gpuman
	# daemon) serves /run/gpuman/gpuman.sock; broker.bats starts its own.
	export GPUMAN_BROKER=off
	# A root broker a test starts fences its jobs: in a cgroup folder of
	# this test's own, so that the suites make check runs side by side
	# (plain and ASan) never sweep or count each other's, nor a test the
	# cgroup of a job an earlier test's broker kept when it was stopped.
	export GPUMAN_FENCE_CGROUP="gpuman-test-${BATS_RUN_TMPDIR##*/}-${BATS_SUITE_TEST_NUMBER:-0}"
	mkdir -p "$GPUMAN_SIM_STATE"
}

setup() {
	gm_setup
}

# scenario NAME <<JSON - write a scenario file for this test and make it the
# simulated machine (GPUMAN_SIM).
scenario() {
	export GPUMAN_SIM="$BATS_TEST_TMPDIR/$1.json"
	cat >"$GPUMAN_SIM"
}

# four_gpus - a small machine with known numbers, written here so that the
# assertions do not depend on the example scenarios.
four_gpus() {
	scenario four <<'JSON'
{ "driver_version": "550.54.15", "cuda_driver_version": 12040,
  "gpus": [
    { "name": "Test GPU A", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
      "memory_total_mib": 16000, "memory_used_mib": 1000, "utilization_gpu": 10,
      "power_draw_w": 100, "power_limit_w": 400, "temperature_c": 40,
      "compute_capability": "8.0", "speed": 1.0, "processes": [] },
    { "name": "Test GPU B", "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000",
      "memory_total_mib": 24000, "memory_used_mib": 0, "utilization_gpu": 50,
      "power_draw_w": 300, "power_limit_w": 350, "temperature_c": 70,
      "compute_capability": "8.6", "speed": 2.0,
      "processes": [ { "pid": 3000001, "used_mib": 4000, "utilization": 20 } ] },
    { "name": "Test GPU C", "uuid": "GPU-cccccccc-0000-0000-0000-000000000000",
      "memory_total_mib": 12000, "memory_used_mib": 500, "utilization_gpu": 0,
      "power_draw_w": 20, "power_limit_w": 250, "temperature_c": 30,
      "compute_capability": "7.5", "speed": 0.5, "processes": [] },
    { "name": "Test GPU D", "uuid": "GPU-dddddddd-0000-0000-0000-000000000000",
      "memory_total_mib": 16000, "memory_used_mib": 0, "utilization_gpu": 5,
      "power_draw_w": 60, "power_limit_w": 400, "temperature_c": 35,
      "compute_capability": "8.0", "speed": 1.0,
      "processes": [ { "pid": 3000002, "used_mib": 9000, "utilization": 0 },
                     { "pid": 3000003, "used_mib": null, "utilization": 0, "type": "graphics" } ] }
  ] }
JSON
}

# ours PID - PID still runs for this test: its environment carries this
# test's GPUMAN_FENCE_CGROUP (gm_setup).  A teardown kills a pid it noted
# only if it is ours: the process may have ended and the kernel given its
# pid to a process of a test beside this one (make check runs several at
# once, and take_pid rewinds the kernel's pid counter).
ours() {
	tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qxF "GPUMAN_FENCE_CGROUP=$GPUMAN_FENCE_CGROUP"
}

# kill_ours [-SIGNAL] PID... - kill the PIDs that are ours (default SIGKILL)
kill_ours() {
	local sig=-9 p
	case ${1:-} in -*) sig=$1; shift ;; esac
	for p in "$@"; do
		ours "$p" && kill "$sig" "$p" 2>/dev/null
	done
	return 0
}

# wait_for 'CONDITION' [SECONDS] - evaluate the shell condition until true
# (10 s at most, or SECONDS)
wait_for() {
	for _ in $(seq $((${2:-10} * 20))); do
		eval "$1" && return 0
		sleep 0.05
	done
	return 1
}

# wait_lines N FILE - until FILE has N lines (10 s at most)
wait_lines() {
	wait_for "[ \"\$(cat \"$2\" 2>/dev/null | wc -l)\" -ge $1 ]"
}

# jqr EXPR - jq -r on $output
jqr() {
	printf '%s' "$output" | jq -r "$@"
}

# Real Unix users for the multi-user tests.  Only root can make them (CI runs
# as root); elsewhere the test is skipped with the reason.  The users are
# shared by every suite and never deleted, so creation is idempotent and
# retried while another test run holds the passwd lock.
#   gm_user NAME          ensure gmtest-NAME exists (skips the test if not root)
#   as_user NAME CMD...   run CMD as gmtest-NAME with a clean group list,
#                         HOME=/tmp and the test's gpuman variables
GM_TEST_USERS="alice bob mallory"
gm_user() {
	local u="gmtest-$1" i
	[ "$(id -u)" = 0 ] || skip "needs root to create test users gmtest-* (CI runs as root)"
	command -v useradd >/dev/null || skip "useradd is missing"
	for i in $(seq 50); do
		id -u "$u" >/dev/null 2>&1 && return 0
		useradd --system --no-create-home --shell /usr/sbin/nologin "$u" 2>/dev/null && return 0
		sleep 0.1
	done
	id -u "$u" >/dev/null 2>&1 || { echo "could not create user $u" >&2; return 1; }
}
as_user() {
	local u="gmtest-$1"; shift
	setpriv --reuid="$u" --regid="$u" --clear-groups \
		env -u XDG_CONFIG_HOME HOME=/tmp PATH="$PATH" "$@"
}

# py_env - what python3 needs to load this build's binding, as words for
# env(1), one a line (read them with mapfile).  A sanitized libgpuman.so
# needs the ASan runtime loaded first (python3 has none), and Python's own
# leaks left out.
py_env() {
	echo "PYTHONPATH=$GM_ROOT/python"
	echo "GPUMAN_LIB=$GM_BUILD/libgpuman.so.1"
	if ldd "$GM_BUILD/libgpuman.so.1" | grep -q libasan; then
		echo "LD_PRELOAD=$(cc -print-file-name=libasan.so)"
		echo "ASAN_OPTIONS=detect_leaks=0"
	fi
}

# py_gpuman ARGS - python3 with this build's binding.  exec: use it with
# run or &, and the caller's $! is python's pid.
py_gpuman() {
	local e
	mapfile -t e < <(py_env)
	exec env "${e[@]}" python3 "$@"
}

# take_pid PID USER NAME - the kernel gives PID again, to a process of
# gmtest-USER's (sleep 300), its pid in $SHARED/pids/NAME (the trust suites'
# teardowns kill those).  ns_last_pid is root's lever; a fork elsewhere on
# the machine may take the pid first, so try again.  make check runs the
# suites side by side, two of them with this rewind: one at a time on the
# machine (a lock), and the counter put back after it, or the forks of
# everyone else would go on from PID and take pids just freed -- PID
# itself, once, before this test came to take it.
# Returns 2 when a process or thread of a suite beside this one took PID
# first and keeps it past 3 s (a daemon may, for minutes): the caller
# starts again with new pids.
take_pid() {
	local pid=$1 user=gmtest-$2 i last got
	wait_for "[ ! -e /proc/$pid ]" || { echo "pid $pid did not end" >&2; return 1; }
	exec 8>>"${TMPDIR:-/tmp}/gpuman-take-pid.lock"
	flock 8
	for i in $(seq 100); do
		# taken by another process or thread meanwhile: it may end soon
		if [ -e "/proc/$pid" ] && ! wait_for "[ ! -e /proc/$pid ]" 3; then
			echo "pid $pid was taken first, by: $(grep -E '^(Name|Tgid|Uid):' "/proc/$pid/status" | tr -s '\t\n' '  ')" >&2
			exec 8>&-
			return 2
		fi
		read -r last </proc/sys/kernel/ns_last_pid
		echo $((pid - 1)) >/proc/sys/kernel/ns_last_pid
		setpriv --reuid="$user" --regid="$user" --clear-groups sleep 300 8>&- &
		got=$!
		[ "$last" -le "$pid" ] || echo "$last" >/proc/sys/kernel/ns_last_pid
		BG_PIDS="${BG_PIDS:-} $got"
		if [ "$got" = "$pid" ]; then
			echo "$pid" >"$SHARED/pids/$3"
			exec 8>&-
			return 0
		fi
		kill -9 "$got"
		wait "$got" 2>/dev/null || true
	done
	exec 8>&-
	echo "could not have pid $pid given again; it is: $(ps -o user=,args= -p "$pid" || echo free)" >&2
	return 1
}
