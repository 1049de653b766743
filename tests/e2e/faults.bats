#!/usr/bin/env bats
# Every fault the simulator can inject gives a clear message or a
# "not supported" field, never a crash or a wrong number.

load helpers

lost_scenario() {
	scenario lost <<'JSON'
{ "gpus": [ { "name": "Good 0", "memory_total_mib": 8000, "memory_used_mib": 1000 },
            { "name": "Good 1", "memory_total_mib": 8000 },
            { "name": "Fallen", "memory_total_mib": 8000, "fail": "gpu_is_lost" },
            { "name": "Good 3", "memory_total_mib": 8000, "memory_used_mib": 7000 } ] }
JSON
}

@test "a GPU that fell off the bus is shown as lost while the others still work" {
	lost_scenario
	run -0 gpuman status --json
	[ "$(jqr '.gpus[2].state')" = lost ]
	[ "$(jqr '.gpus[2].memory_free_mib')" = null ]
	[ "$(jqr '.gpus[1].state')" = ok ]
	[ "$(jqr '.gpus[1].memory_free_mib')" = 8000 ]
	run -0 gpuman status
	[[ "$output" == *"lost"* ]]
	run -0 gpuman pick -n 3
	[ "$output" = "1,0,3" ]
	run -75 gpuman pick -n 4
	# a lost GPU answers nothing, not even its name
	[[ "$output" == *"GPU 2 (unknown): lost"* ]]
}

@test "a GPU that refuses permission is skipped with a note, indices kept" {
	scenario noperm <<'JSON'
{ "gpus": [ { "name": "Mine", "memory_total_mib": 8000 },
            { "name": "Forbidden", "memory_total_mib": 8000, "fail": "no_permission" },
            { "name": "Also mine", "memory_total_mib": 9000 } ] }
JSON
	run -0 gpuman status --json
	[ "$(jqr '[.gpus[].index] | join(",")')" = "0,2" ]
	[[ "$(jqr '.notes[0]')" == *"GPU 1"*"permission"* ]]
	run -0 gpuman pick
	[ "$output" = 2 ]
}

@test "an older driver without the _v2 functions gives the same numbers" {
	four_gpus
	run -0 gpuman status --json
	want=$(jqr '[.gpus[] | .memory_free_mib, .memory_used_mib, .power_draw_w] | join(",")')
	jq '. + {"missing_symbols": ["nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
	     "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2",
	     "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
	     "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
	     "nvmlSystemGetCudaDriverVersion_v2"]}' "$GPUMAN_SIM" >"$BATS_TEST_TMPDIR/old.json"
	GPUMAN_SIM=$BATS_TEST_TMPDIR/old.json run -0 gpuman status --json
	[ "$(jqr '[.gpus[] | .memory_free_mib, .memory_used_mib, .power_draw_w] | join(",")')" = "$want" ]
	[ "$(jqr '.processes | length')" = 3 ]
}

@test "a driver library whose _v2 symbols do not exist at all (dlsym fails) still works" {
	four_gpus
	# An R390 driver: the simulator's r390 library has no memory or process
	# _v2, PCI _v3 or core count symbols at all.
	jq '.driver_version = "390.157"' "$GPUMAN_SIM" >"$BATS_TEST_TMPDIR/r390.json"
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/r390.json
	GPUMAN_NVML=$GM_BUILD/sim/r390/libnvidia-ml.so.1 run -0 gpuman status --json
	[ "$(jqr '[.gpus[] | .memory_free_mib] | join(",")')" = "15000,20000,11500,7000" ]
	[ "$(jqr '.processes | length')" = 3 ]
}

@test "no driver: one line naming the library and suggesting --sim, exit 1" {
	export GPUMAN_NVML=$BATS_TEST_TMPDIR/nowhere/libnvidia-ml.so.1
	run -1 gpuman status
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"nowhere/libnvidia-ml.so.1"* ]]
	[[ "$output" == *"--sim"* ]]
	run -1 gpuman pick
	run -1 gpuman ps
	run -1 gpuman info
}

@test "a driver that fails to initialise is reported, not a crash" {
	scenario initfail <<'JSON'
{ "init_error": "driver_not_loaded", "gpus": [] }
JSON
	run -1 gpuman status
	[[ "$output" == *"driver"*"not loaded"* ]]
}

@test "a malformed scenario names the file and line; a bad key names the key" {
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/broken.json
	printf '{ "gpus": [\n  { "name": "x", "memory_total_mib": 100, }\n] }\n' >"$GPUMAN_SIM"
	run -1 gpuman status
	[[ "$output" == *"broken.json"*":2"* ]]
	scenario typo <<'JSON'
{ "gpus": [ { "name": "x", "memory_totl_mib": 100 } ] }
JSON
	run -1 gpuman status
	[[ "$output" == *"typo.json"* ]]
	[[ "$output" == *"memory_totl_mib"* ]]
	# an invisible byte order mark is named, not left for jansson to trip on
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/bom.json
	printf '\xef\xbb\xbf{ "gpus": [ { "name": "x", "memory_total_mib": 100 } ] }\n' >"$GPUMAN_SIM"
	run -1 gpuman status
	[[ "$output" == *"bom.json: the file starts with a byte order mark (U+FEFF); save it as UTF-8 without one"* ]]
}

@test "a scenario file that does not exist is a usage error" {
	run -2 gpuman --sim "$BATS_TEST_TMPDIR/missing.json" status
	[[ "$output" == *"missing.json"* ]]
}

@test "processes in a container's view (pids not in /proc) show without user or command" {
	four_gpus
	run -0 gpuman ps --json
	[ "$(jqr '.[0].user')" = null ]
	[ "$(jqr '.[0].command')" = null ]
	run -0 gpuman ps
	[[ "${lines[1]}" == *"?"* ]]
}
