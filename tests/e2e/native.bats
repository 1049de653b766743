#!/usr/bin/env bats
# examples/native_gpu, a native program on the C API: it gets the freest GPU,
# sees it as CUDA device 0, and queues or gives up (exit 75) when another
# instance holds the only GPU that fits.

load helpers

setup() {
	gm_setup
	NATIVE=$GM_BUILD/examples/native_gpu
	# GPU 1 has the most free memory; only it can hold a 20 GiB share.
	export GPUMAN_SIM="$BATS_TEST_TMPDIR/machine.json"
	cat >"$GPUMAN_SIM" <<'JSON'
{ "driver_version": "580.95.05",
  "gpus": [
    { "name": "NVIDIA GeForce GTX 1080 Ti", "uuid": "GPU-0a0a0a0a-1111-2222-3333-000000000000",
      "memory_total_mib": 11264, "memory_used_mib": 2000, "utilization_gpu": 0,
      "power_draw_w": 55, "power_limit_w": 250, "speed": 1.0, "processes": [] },
    { "name": "NVIDIA TITAN RTX", "uuid": "GPU-1b1b1b1b-1111-2222-3333-000000000000",
      "memory_total_mib": 24576, "memory_used_mib": 0, "utilization_gpu": 0,
      "power_draw_w": 30, "power_limit_w": 280, "speed": 2.0,
      "processes": [ { "pid": 3100001, "used_mib": 1000 } ] },
    { "name": "NVIDIA GeForce RTX 2080", "uuid": "GPU-2c2c2c2c-1111-2222-3333-000000000000",
      "memory_total_mib": 8192, "memory_used_mib": 500, "utilization_gpu": 0,
      "power_draw_w": 20, "power_limit_w": 215, "speed": 1.5, "processes": [] }
  ] }
JSON
	FREEST=GPU-1b1b1b1b-1111-2222-3333-000000000000
}

teardown() {
	if [ -n "${FIRST:-}" ]; then
		kill "$FIRST" 2>/dev/null || true
		wait "$FIRST" 2>/dev/null || true
	fi
}

# start_holder ARGS... - run native_gpu ARGS in the background and return
# once it holds its lease ($FIRST is its pid, its output in first.out).
start_holder() {
	"$NATIVE" "$@" >"$BATS_TEST_TMPDIR/first.out" 2>&1 3>&- &
	FIRST=$!
	for _ in $(seq 100); do
		grep -q '^kernel:' "$BATS_TEST_TMPDIR/first.out" && return 0
		kill -0 "$FIRST" 2>/dev/null || break
		sleep 0.1
	done
	cat "$BATS_TEST_TMPDIR/first.out"
	return 1
}

# leases - the number of live leases, as `gpuman status` sees them
leases() {
	"$GM_BUILD/gpuman" status --json | jq '.leases | length'
}

@test "native_gpu leases the freest GPU, runs on CUDA device 0 and prints its UUID" {
	run "$NATIVE"
	[ "$status" -eq 0 ]
	[[ "$output" == *"leased GPU 1 ($FREEST)"* ]]
	[[ "$output" == *"kernel: running on CUDA device 0, $FREEST"* ]]
	# Released on the way out.
	[ "$(leases)" = 0 ]
}

@test "native_gpu holds its lease while it runs and lets it go when it ends" {
	start_holder --hold 30
	[ "$(leases)" = 1 ]
	[ "$("$GM_BUILD/gpuman" status --json | jq -r '.leases[0].gpus[0].uuid')" = "$FREEST" ]
	[ "$("$GM_BUILD/gpuman" status --json | jq -r '.leases[0].pid')" = "$FIRST" ]
	kill "$FIRST"
	wait "$FIRST" || true
	FIRST=
	[ "$(leases)" = 0 ]
}

@test "a second native_gpu without --wait exits 75 while the only GPU that fits is held" {
	start_holder --mem 20G --hold 30
	run "$NATIVE" --mem 20G
	[ "$status" -eq 75 ]
	[[ "$output" == *"no GPU meets the request now"* ]]
	[[ "$output" == *"add --wait"* ]]
	[[ "$output" != *"kernel:"* ]]
}

@test "a second native_gpu with --wait gets the GPU once the first ends" {
	start_holder --mem 20G --hold 2
	run "$NATIVE" --mem 20G --wait=60
	[ "$status" -eq 0 ]
	[[ "$output" == *"kernel: running on CUDA device 0, $FREEST"* ]]
	# It got the GPU only after the first let it go: the first has ended
	# (gone, or a zombie that this shell has not reaped yet).
	[ ! -e "/proc/$FIRST" ] || grep -q ') Z' "/proc/$FIRST/stat"
	wait "$FIRST"
	FIRST=
	grep -q "^kernel: running on CUDA device 0, $FREEST" "$BATS_TEST_TMPDIR/first.out"
}

@test "native_gpu --wait=1 gives up with 75 when the GPU stays held" {
	start_holder --mem 20G --hold 30
	run "$NATIVE" --mem 20G --wait=1
	[ "$status" -eq 75 ]
	[[ "$output" == *"within the wait"* ]]
}

@test "native_gpu names a bad option value and exits 2" {
	run "$NATIVE" --mem 12Q
	[ "$status" -eq 2 ]
	[[ "$output" == *"--mem '12Q'"* ]]
	run "$NATIVE" --hold soon
	[ "$status" -eq 2 ]
	[[ "$output" == *"--hold 'soon'"* ]]
}

@test "native_gpu without a driver says which library it could not load and exits 1" {
	export GPUMAN_NVML=/nonexistent/libnvidia-ml.so.1
	run "$NATIVE"
	[ "$status" -eq 1 ]
	[[ "$output" == *"/nonexistent/libnvidia-ml.so.1"* ]]
}

@test "libgpuman.so.1 exports only gm_ names and does not pull in SQLite" {
	run readelf -d "$GM_BUILD/libgpuman.so"
	[ "$status" -eq 0 ]
	# .so.1: 0.1.0's gpuman.h published the snapshot's layouts, which grew.
	[[ "$output" == *"Library soname: [libgpuman.so.1]"* ]]
	[[ "$output" == *libjansson* ]]
	[[ "$output" != *sqlite* ]]
	run nm -D --defined-only "$GM_BUILD/libgpuman.so"
	[ "$status" -eq 0 ]
	[[ "$output" == *" T gm_acquire"* ]]
	others=$(printf '%s\n' "$output" | awk '$2 ~ /^[TDBRVW]$/ && $3 !~ /^gm_/ { print $3 }')
	[ -z "$others" ] || { echo "exported besides gm_*: $others"; false; }
}
