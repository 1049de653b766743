#!/usr/bin/env bats
# status, info and ps against simulated machines: what a scenario says is
# what gpuman reports, unsupported fields are null, never 0.

load helpers

@test "status --json reports exactly the scenario's memory, utilization, power and processes" {
	four_gpus
	run -0 gpuman status --json
	[ "$(jqr '.gpus | length')" = 4 ]
	[ "$(jqr '.driver_version')" = 550.54.15 ]
	[ "$(jqr '.cuda_driver_version')" = 12.4 ]
	# used = driver's own use + processes' memory; free = total - used
	[ "$(jqr '[.gpus[] | .memory_used_mib] | join(",")')" = "1000,4000,500,9000" ]
	[ "$(jqr '[.gpus[] | .memory_free_mib] | join(",")')" = "15000,20000,11500,7000" ]
	[ "$(jqr '[.gpus[] | .memory_total_mib] | join(",")')" = "16000,24000,12000,16000" ]
	# utilization = GPU's own + its processes', capped at 100
	[ "$(jqr '[.gpus[] | .utilization_gpu_pct] | join(",")')" = "10,70,0,5" ]
	[ "$(jqr '.gpus[1].power_draw_w')" = 300 ]
	[ "$(jqr '.gpus[1].power_limit_w')" = 350 ]
	[ "$(jqr '.gpus[2].temperature_c')" = 30 ]
	[ "$(jqr '.gpus[1].compute_capability')" = 8.6 ]
	[ "$(jqr '.gpus[0].uuid')" = GPU-aaaaaaaa-0000-0000-0000-000000000000 ]
	[ "$(jqr '[.processes[] | "\(.gpu):\(.pid):\(.used_mib)"] | join(" ")')" = \
	  "1:3000001:4000 3:3000002:9000 3:3000003:null" ]
	[ "$(jqr '.processes[2].type')" = graphics ]
	# pids that do not exist here: no invented user or command
	[ "$(jqr '.processes[0].user')" = null ]
}

@test "status shows a table a person reads, with processes and no colour when piped" {
	four_gpus
	run -0 gpuman status
	[[ "$output" == *"Test GPU B"* ]]
	[[ "$output" == *"3000001"* ]]
	[[ "$output" != *$'\033['* ]]
	[ "${#lines[@]}" -ge 6 ]
}

@test "--sim FILE works on every command and is the same as GPUMAN_SIM" {
	four_gpus
	sim=$GPUMAN_SIM
	unset GPUMAN_SIM
	run -0 gpuman --sim "$sim" status --json
	[ "$(jqr '.gpus | length')" = 4 ]
	run -0 gpuman status --sim "$sim" --json
	[ "$(jqr '.gpus | length')" = 4 ]
	run -0 gpuman info --sim "$sim" 2
	[[ "$output" == *"Test GPU C"* ]]
	run -0 gpuman ps --sim "$sim"
	[[ "$output" == *3000002* ]]
	run -0 gpuman pick --sim "$sim"
	[ "$output" = 1 ]
}

@test "info shows every attribute, by index and by UUID prefix, and where CUDA numbers the GPU" {
	four_gpus
	run -0 gpuman info 1
	[[ "$output" == *"GPU 1: Test GPU B"* ]]
	[[ "$output" == *"GPU-bbbbbbbb-0000-0000-0000-000000000000"* ]]
	[[ "$output" == *"memory free"*"20000 MiB"* ]]
	[[ "$output" == *"compute capability"*"8.6"* ]]
	# GPU B is the fastest: CUDA's default order puts it first
	[[ "$output" == *"cuda index"*"0 (default order), 1 (CUDA_DEVICE_ORDER=PCI_BUS_ID)"* ]]
	run -0 gpuman info cccc --json
	[ "$(jqr '.[0].index')" = 2 ]
	[ "$(jqr '.[0].cuda_index')" = 3 ]
	run -0 gpuman info --json
	[ "$(jqr 'length')" = 4 ]
	[ "$(jqr '.[3].processes | length')" = 2 ]
}

@test "clocks: SM, memory and graphics, now and max, in status --json, CSV and info; unreported ones are null" {
	scenario clocks <<'JSON'
{ "gpus": [
    { "name": "Busy GPU", "memory_total_mib": 24576, "clock_sm_mhz": 1860, "clock_graphics_mhz": 1845,
      "clock_memory_mhz": 9501, "max_sm_clock_mhz": 1980, "max_clock_memory_mhz": 9751 },
    { "name": "Quiet GPU", "memory_total_mib": 24576, "clock_sm_mhz": 210, "clock_memory_mhz": null,
      "max_sm_clock_mhz": null } ] }
JSON
	run -0 gpuman status --json
	[ "$(jqr '[.gpus[0] | .clock_sm_mhz, .clock_memory_mhz, .clock_graphics_mhz] | join(",")')" = 1860,9501,1845 ]
	[ "$(jqr '[.gpus[0] | .max_clock_sm_mhz, .max_clock_memory_mhz, .max_clock_graphics_mhz] | join(",")')" = 1980,9751,1980 ]
	[ "$(jqr '.gpus[1].clock_sm_mhz')" = 210 ]
	[ "$(jqr '[.gpus[1] | .clock_memory_mhz, .clock_graphics_mhz, .max_clock_sm_mhz, .max_clock_memory_mhz] | map(tostring) | join(",")')" = null,null,null,null ]
	run -0 gpuman status --format csv=index,clock_sm_mhz,max_clock_sm_mhz,clock_memory_mhz
	[ "${lines[1]}" = 0,1860,1980,9501 ]
	[ "${lines[2]}" = 1,210,, ]
	run -0 gpuman info 0
	[[ "$output" == *"clock sm"*"1860 MHz (max 1980 MHz)"* ]]
	[[ "$output" == *"clock memory"*"9501 MHz (max 9751 MHz)"* ]]
	run -0 gpuman info 1
	[[ "$output" == *"clock sm"*"210 MHz (max not supported)"* ]]
	[[ "$output" == *"clock memory"*"not supported"* ]]
}

@test "info of a GPU that does not exist is a usage error naming it" {
	four_gpus
	run -2 gpuman info 7
	[[ "$output" == *"'7' names no GPU"* ]]
}

@test "ps lists every GPU process with its memory; unknown memory is '-'" {
	four_gpus
	run -0 gpuman ps
	[[ "${lines[1]}" == *" 1 "*"3000001"*"3.9G"* ]]
	[[ "$output" == *"3000003"*" - "* ]]
	run -0 gpuman ps --json
	[ "$(jqr 'length')" = 3 ]
}

# mps_gpus - GPU 0 runs one compute process, two graphics ones and two MPS
# clients: this test's shell ($$, so that /proc shows its user) in the MPS
# list only, and 3100002, which both process lists show.
mps_gpus() {
	scenario mps <<JSON
{ "driver_version": "550.54.15", "cuda_driver_version": 12040,
  "gpus": [
    { "name": "Test GPU A", "memory_total_mib": 16000, "memory_used_mib": 0, "utilization_gpu": 0,
      "processes": [ { "pid": 3100001, "used_mib": 4000, "utilization": 50 },
                     { "pid": $$, "used_mib": 1500, "utilization": 20, "type": "mps" },
                     { "pid": 3100002, "used_mib": 2000, "utilization": 10, "type": "compute+mps" },
                     { "pid": 3000001, "used_mib": 100, "utilization": 0, "type": "graphics" },
                     { "pid": 3000002, "used_mib": 100, "utilization": 0, "type": "graphics" } ] },
    { "name": "Test GPU B", "memory_total_mib": 16000, "memory_used_mib": 0, "utilization_gpu": 0,
      "processes": [] } ] }
JSON
}

# procs_are "GPU:PID:..." ... - .processes (sorted by pid) as jq's FIELDS says, in any order
procs_are() {
	local fields=$1
	shift
	[ "$(jqr "[.processes[] | $fields] | sort | join(\" \")")" = \
	  "$(printf '%s\n' "$@" | LC_ALL=C sort | paste -sd' ')" ]
}

@test "MPS clients (NVML's MPS list) are compute processes marked mps, once each, with user and memory" {
	mps_gpus
	run -0 gpuman status --json
	procs_are '"\(.gpu):\(.pid):\(.used_mib):\(.type):\(.mps):\(.utilization_pct)"' \
		0:3100001:4000:compute:false:50 0:3100002:2000:compute:true:10 0:$$:1500:compute:true:20 \
		0:3000001:100:graphics:false:0 0:3000002:100:graphics:false:0
	[ "$(jqr ".processes[] | select(.pid == $$) | .user")" = "$(id -un)" ]
	run -0 gpuman status
	[[ "$output" == *"$(id -un) $$ 1.5G"* ]]
	run -0 gpuman ps --json
	[ "$(jqr "[.[] | select(.mps) | .pid] | sort | join(\",\")")" = \
	  "$(printf '%s\n' 3100002 $$ | sort -n | paste -sd,)" ]
	run -0 gpuman ps
	[[ "$output" == *" $$ "*"1.5G"*" M+C "* ]]
	[[ "$output" == *" 3100001 "*" C "* ]]
	run -0 gpuman ps --format csv=pid,type
	[[ "$output" == *$'\n'"$$,M+C"* ]]
	# waste counts them as compute processes outside gpuman (exit 3: found)
	run -3 gpuman waste --json
	[ "$(jqr "[.waste[] | select(.pid == $$) | .kind] | join(\",\")")" = unleased ]
	# only the unversioned MPS call (16-byte entries): the same processes
	jq '.missing_symbols = ["nvmlDeviceGetMPSComputeRunningProcesses_v2"]' "$GPUMAN_SIM" \
		>"$BATS_TEST_TMPDIR/v1.json"
	GPUMAN_SIM=$BATS_TEST_TMPDIR/v1.json run -0 gpuman status --json
	procs_are '"\(.pid):\(.used_mib):\(.mps)"' 3100001:4000:false 3100002:2000:true $$:1500:true \
		3000001:100:false 3000002:100:false
}

@test "a driver without the MPS list (R390) still works: compute processes only, none marked mps" {
	mps_gpus
	jq '.driver_version = "390.157"' "$GPUMAN_SIM" >"$BATS_TEST_TMPDIR/r390.json"
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/r390.json
	GPUMAN_NVML=$GM_BUILD/sim/r390/libnvidia-ml.so.1 run -0 gpuman status --json
	procs_are '"\(.pid):\(.used_mib):\(.mps)"' 3100001:4000:false 3100002:2000:false \
		3000001:100:false 3000002:100:false
	[ "$(jqr '.notes | length')" = 0 ]
	GPUMAN_NVML=$GM_BUILD/sim/r390/libnvidia-ml.so.1 run -0 gpuman ps
	[[ "$output" != *"M+C"* ]]
}

@test "a laptop GPU without power management reads as not supported, not as zero" {
	scenario laptop <<'JSON'
{ "gpus": [ { "name": "Laptop GPU", "memory_total_mib": 4096, "memory_used_mib": 100,
              "utilization_gpu": 3, "power_draw_w": null, "power_limit_w": null,
              "temperature_c": 50 } ] }
JSON
	run -0 gpuman status --json
	[ "$(jqr '.gpus[0].power_draw_w')" = null ]
	[ "$(jqr '.gpus[0].power_limit_w')" = null ]
	[ "$(jqr '.gpus[0].memory_free_mib')" = 3996 ]
	run -0 gpuman info 0
	[[ "$output" == *"power draw"*"not supported"* ]]
	run -0 gpuman status
	[[ "$output" == *"Laptop GPU"* ]]
}

@test "every field of an old or limited driver can be unsupported without a crash" {
	scenario bare <<'JSON'
{ "gpus": [ { "name": "Bare GPU", "memory_total_mib": 8192, "utilization_gpu": null,
              "power_draw_w": null, "power_limit_w": null, "temperature_c": null,
              "compute_capability": null,
              "processes": [ { "pid": 3000010, "used_mib": null } ] } ] }
JSON
	run -0 gpuman status --json
	[ "$(jqr '.gpus[0].utilization_gpu_pct')" = null ]
	[ "$(jqr '.gpus[0].temperature_c')" = null ]
	[ "$(jqr '.gpus[0].compute_capability')" = null ]
	[ "$(jqr '.processes[0].used_mib')" = null ]
	run -0 gpuman info
	run -0 gpuman ps
	# a policy needing a missing reading says so
	run -75 gpuman pick --max-util 50
	[[ "$output" == *"utilization not reported"* ]]
}

@test "a driver with no GPU: status says so, pick exits 75" {
	scenario none <<'JSON'
{ "driver_version": "580.95.05", "gpus": [] }
JSON
	run -0 gpuman status
	[[ "$output" == *"no NVIDIA GPU"* ]]
	run -0 gpuman status --json
	[ "$(jqr '.gpus | length')" = 0 ]
	run -75 gpuman pick
}

# every_pid_in OUTPUT - each process of the lab scenario appears in it
lab_pids_in() {
	local pid
	for pid in 2028329 2031002 2201234 2999871 2450012 3141592; do
		[[ "$1" == *"pid $pid"* ]] || { echo "pid $pid is missing"; return 1; }
	done
}

@test "status fits the terminal's width (COLUMNS): processes continue under PROCESSES, narrower stacks, nothing is cut" {
	export GPUMAN_SIM=$GM_ROOT/examples/lab-8gpu.json
	# a pipe: one line per GPU, as scripts read it
	run -0 gpuman status
	[ "${lines[2]}" = "  0  NVIDIA GeForce GTX 1080 Ti   83C   97%   10.9G / 11.0G   98%  231 / 250 W  pid 2028329 10.4G, pid 3141592 485M" ]
	for w in 100 80 60 40; do
		COLUMNS=$w run -0 gpuman status
		long=$(printf '%s\n' "$output" | awk -v w="$w" 'length($0) > w')
		[ -z "$long" ] || { echo "COLUMNS=$w, longer lines: $long"; false; }
		lab_pids_in "$output"
		[[ "$output" == *"NVIDIA GeForce GTX 1080 Ti"* ]]
	done
	# 100: the second process goes on under the first
	COLUMNS=100 run -0 gpuman status
	[ "${lines[2]}" = "  0  NVIDIA GeForce GTX 1080 Ti   83C   97%   10.9G / 11.0G   98%  231 / 250 W  pid 2028329 10.4G," ]
	[ "${lines[3]}" = "$(printf '%80s' '')pid 3141592 485M" ]
	# 60: name, readings and processes each on their own lines; waste sentences wrap
	COLUMNS=60 run -0 gpuman status
	[ "${lines[1]}" = "(simulated: lab-8gpu.json)" ]
	[ "${lines[5]}" = "  0  NVIDIA GeForce GTX 1080 Ti" ]
	[ "${lines[6]}" = "       83C   97%   10.9G / 11.0G   98%  231 / 250 W" ]
	[ "${lines[7]}" = "     pid 2028329 10.4G, pid 3141592 485M" ]
	[[ "$output" == *$'holds 2.4G on GPUs\n             0,1,5,6,7 but computes only on 3'* ]]
	# 40 (a phone): the power goes under the other readings
	COLUMNS=40 run -0 gpuman status
	[ "${lines[7]}" = "       83C   97%   10.9G / 11.0G   98% " ]
	[ "${lines[8]}" = "      231 / 250 W" ]
	# COLUMNS that is not a number is ignored
	COLUMNS=wide run -0 gpuman status
	[ "${lines[2]}" = "  0  NVIDIA GeForce GTX 1080 Ti   83C   97%   10.9G / 11.0G   98%  231 / 250 W  pid 2028329 10.4G, pid 3141592 485M" ]
}

@test "a GPU name longer than the usual column is shown whole" {
	export GPUMAN_SIM=$GM_ROOT/examples/laptop.json
	run -0 gpuman status
	[[ "${lines[2]}" == "  0  NVIDIA GeForce RTX 3050 Laptop GPU   "* ]]
}
