#!/usr/bin/env bats
# sim.bats - the NVML simulator and gpuman-simload on their own, without the
# gpuman CLI: what an NVML client reads (through helpers/nvmlq.py, a ctypes
# client), how simload sees and takes GPUs as CUDA would, and the live state
# that joins them.  Every test has its own GPUMAN_SIM_STATE.
#
# not under ASan: the simulator and gpuman-simload are built without the
# sanitizers in either build (clients that carry none load them), so the
# ASan pass of make check would run this same code again.

bats_require_minimum_version 1.5.0

setup() {
	: "${GM_BUILD:=$BATS_TEST_DIRNAME/../../build}"
	export GM_BUILD
	ROOT="$BATS_TEST_DIRNAME/../.."
	SIMLOAD="$GM_BUILD/gpuman-simload"
	NVMLQ="$BATS_TEST_DIRNAME/helpers/nvmlq.py"
	export GPUMAN_SIM="$ROOT/examples/lab-8gpu.json"
	export GPUMAN_SIM_STATE="$BATS_TEST_TMPDIR/state"
	unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER
	BG_PIDS=()
}

teardown() {
	local pid
	for pid in "${BG_PIDS[@]}"; do
		stop 9 "$pid" || true
	done
}

# Send a signal to a background simload and reap it quietly; returns its
# exit status.
stop() {
	local st=0
	kill -"$1" "$2" 2>/dev/null || true
	wait "$2" 2>/dev/null || st=$?
	return "$st"
}

# UUIDs of examples/lab-8gpu.json by NVML index.
LAB=(GPU-3ceaaf30-8142-c8ea-91d9-3080f9b439fc GPU-9dfb369b-ab13-dfae-6276-55daa05f1119
	GPU-6301bbfc-a0c5-154e-0ff9-bb510944fe0c GPU-b120a366-f0bb-e9cf-42f2-dc05873f9bd0
	GPU-78b7d0ac-8477-3ce0-ce4c-da11b43c589b GPU-2330fcf1-562a-e4b8-4866-8d77e827062c
	GPU-c1acc990-6424-550a-e36b-f9b3ddcb369d GPU-8df08078-a22e-a180-c5c2-c2af3977a654)

nvmlq() {
	python3 "$NVMLQ" "$@"
}

# Every argument must be one whole line of $output.
has() {
	local line
	for line in "$@"; do
		if ! grep -Fxq -- "$line" <<<"$output"; then
			printf 'missing line: %s\n--- output:\n%s\n' "$line" "$output" >&2
			return 1
		fi
	done
}

# Poll (never a fixed sleep) until a command succeeds; 10 s at most.
wait_until() {
	local i
	for ((i = 0; i < 500; i++)); do
		"$@" && return 0
		sleep 0.02
	done
	echo "timed out waiting for: $*" >&2
	return 1
}

# Start simload in the background, its stdout in $BATS_TEST_TMPDIR/out.N;
# sets BG (its pid).  fd 3 is closed so that bats does not wait for it.
start_simload() {
	local out="$BATS_TEST_TMPDIR/out.${#BG_PIDS[@]}"
	"$SIMLOAD" "$@" >"$out" 2>&1 3>&- &
	BG=$!
	BG_PIDS+=("$BG")
	BG_OUT=$out
}

uuid_lines() {
	sed -n 's/^simload: pid [0-9]* on \(GPU-[0-9a-f-]*\) (cuda device \([0-9]*\)).*/\2 \1/p' <<<"$output"
}

@test "lab: NVML reports the scenario's memory, utilization, power and processes" {
	run nvmlq dump
	[ "$status" -eq 0 ]
	has count=8 driver_version=580.95.05 cuda_driver_version=13000 \
		"gpu0.name=NVIDIA GeForce GTX 1080 Ti" "gpu0.uuid=${LAB[0]}" \
		gpu0.pci.bus_id=00000000:01:00.0 gpu0.pci.bus_id_legacy=0000:01:00.0 \
		gpu0.memory.total_mib=11264 gpu0.memory.used_mib=11113 gpu0.memory.free_mib=151 \
		gpu0.memory.reserved_mib=0 gpu0.memory_v1=11264/11113/151 \
		gpu0.util.gpu=97 gpu0.util.memory=41 gpu0.power_mw=231400 gpu0.power_limit_mw=250000 \
		gpu0.temperature_c=83 gpu0.cc=6.1 gpu0.compute_mode=0 gpu0.mig=0/0 \
		gpu0.cores=3584 gpu0.max_sm_clock_mhz=1582 gpu0.minor=0 \
		gpu0.compute_v3=2028329:10625,3141592:485 gpu0.compute_v2=2028329:10625,3141592:485 \
		gpu0.compute=2028329:10625,3141592:485 gpu0.graphics_v3=
	# The idle GPU, the Xorg (graphics-only) process, a "both" process in
	# both lists, and a process whose memory the driver does not report.
	has gpu2.memory.used_mib=0 gpu2.util.gpu=0 gpu2.compute_v3= \
		gpu3.util.gpu=65 gpu3.compute_v3=3141592:14210 gpu3.graphics_v3=2201234:412 \
		gpu3.memory.used_mib=14628 \
		gpu5.compute_v3=2999871:8192,3141592:485 gpu5.graphics_v3=2999871:8192 \
		gpu6.compute_v3=2450012:NA,3141592:485 gpu6.memory.used_mib=3605 \
		gpu7.pci.bus_id=00000000:E1:00.0 gpu7.pci.bus=225
	# A v2 memory struct with version 2 instead of 0x02000028 is refused.
	has gpu0.memory.bad_version=FUNCTION_NOT_FOUND
}

@test "process lists follow NVML's ask-then-fetch protocol" {
	run nvmlq protocol 0
	[ "$status" -eq 0 ]
	has "ask=INSUFFICIENT_SIZE count=2" "small=INSUFFICIENT_SIZE count=2" \
		"fetch=SUCCESS count=2" null_count=INVALID_ARGUMENT
	run nvmlq protocol 2
	has "ask=SUCCESS count=0" "fetch=SUCCESS count=0"
}

@test "calls before init, foreign handles and NULL pointers are refused" {
	run nvmlq misuse
	[ "$status" -eq 0 ]
	has count_before_init=UNINITIALIZED shutdown_before_init=UNINITIALIZED \
		count_null=INVALID_ARGUMENT handle_out_of_range=INVALID_ARGUMENT \
		handle_null=INVALID_ARGUMENT bad_handle=INVALID_ARGUMENT null_handle=INVALID_ARGUMENT \
		name_small=INSUFFICIENT_SIZE temperature_bad_sensor=INVALID_ARGUMENT \
		clock_bad_type=INVALID_ARGUMENT "by_uuid=SUCCESS same=True" by_uuid_prefix=NOT_FOUND \
		after_one_of_two_shutdowns=SUCCESS after_shutdown=UNINITIALIZED
}

@test "nvmlInit without GPUMAN_SIM fails and gpumanSimError says why" {
	unset GPUMAN_SIM
	run nvmlq init
	has init=UNKNOWN
	[[ "$output" == *"sim_error=GPUMAN_SIM is not set"* ]]
	# Clients that know nothing of gpumanSimError see the reason too.
	[[ "$output" == *"error_string=Unknown Error (gpuman NVML simulator: GPUMAN_SIM is not set"* ]]
}

@test "scenario errors name the file and line:column or the key path" {
	GPUMAN_SIM="$ROOT/tests/fixtures/bad-syntax.json" run nvmlq init
	has init=UNKNOWN
	[[ "$output" == *"sim_error=$ROOT/tests/fixtures/bad-syntax.json:6:"* ]]

	GPUMAN_SIM="$ROOT/tests/fixtures/bad-key.json" run nvmlq init
	has "sim_error=$ROOT/tests/fixtures/bad-key.json: gpus[1]: unknown key 'memory_totl_mib' (did you mean 'memory_total_mib'?)"

	local f="$BATS_TEST_TMPDIR/wrong-type.json"
	sed 's/"memory_total_mib": 24576, "memory_used_mib": 0,/"memory_total_mib": "24G", "memory_used_mib": 0,/' \
		"$ROOT/examples/lab-8gpu.json" >"$f"
	GPUMAN_SIM="$f" run nvmlq init
	has "sim_error=$f: gpus[2].memory_total_mib: expected a number, got a string"

	printf '{"gpus": [{"name": "x", "memory_total_mib": 100, "processes": [{"pid": 5, "used_mib": 200}]}]}' >"$f"
	GPUMAN_SIM="$f" run nvmlq init
	[[ "$output" == *"sim_error=$f: gpus[0]: memory in use"*"exceeds memory_total_mib (100 MiB)"* ]]

	# A misspelt NVML error lists every name the simulator knows.
	jq '.init_error = "gpu_lost"' "$ROOT/examples/lab-8gpu.json" >"$f"
	GPUMAN_SIM="$f" run nvmlq init
	has "sim_error=$f: init_error: unknown NVML error 'gpu_lost' (use uninitialized, invalid_argument, not_supported, no_permission, not_found, insufficient_size, driver_not_loaded, library_not_found, function_not_found, gpu_is_lost, operating_system, lib_rm_version_mismatch or unknown)"

	# simload reports the same message.
	GPUMAN_SIM="$ROOT/tests/fixtures/bad-key.json" run "$SIMLOAD" --mem 1 --util 0 --seconds 0
	[ "$status" -eq 1 ]
	[[ "$output" == *"bad-key.json: gpus[1]: unknown key 'memory_totl_mib'"* ]]
}

@test "init_error makes nvmlInit fail with that NVML error" {
	GPUMAN_SIM="$ROOT/tests/fixtures/init-fail.json" run nvmlq init
	has init=DRIVER_NOT_LOADED "error_string=Driver Not Loaded"
	[[ "$output" == *"init_error 'driver_not_loaded'"* ]]
}

@test "a machine without GPUs initialises and counts none" {
	GPUMAN_SIM="$ROOT/examples/no-gpu.json" run nvmlq dump
	[ "$status" -eq 0 ]
	has init=SUCCESS count=0
}

@test "fail: a lost GPU answers GPU_IS_LOST, a forbidden one refuses its handle" {
	GPUMAN_SIM="$ROOT/tests/fixtures/lost.json" run nvmlq dump
	has count=4 gpu2.handle=SUCCESS gpu2.name=GPU_IS_LOST gpu2.memory.used_mib=GPU_IS_LOST \
		gpu2.util.gpu=GPU_IS_LOST gpu2.compute_v3=GPU_IS_LOST gpu3.memory.used_mib=2
	GPUMAN_SIM="$ROOT/tests/fixtures/no-permission.json" run nvmlq dump
	has count=3 gpu0.handle=SUCCESS gpu1.handle=NO_PERMISSION gpu2.handle=SUCCESS
}

@test "null fields answer NOT_SUPPORTED" {
	GPUMAN_SIM="$ROOT/tests/fixtures/unsupported.json" run nvmlq dump
	has driver_version=NOT_SUPPORTED cuda_driver_version=NOT_SUPPORTED \
		gpu0.memory.used_mib=NOT_SUPPORTED gpu0.memory_v1=NOT_SUPPORTED \
		gpu0.util.gpu=NOT_SUPPORTED gpu0.power_mw=NOT_SUPPORTED gpu0.temperature_c=NOT_SUPPORTED \
		gpu0.cc=NOT_SUPPORTED gpu0.compute_mode=NOT_SUPPORTED gpu0.mig=NOT_SUPPORTED \
		gpu0.cores=NOT_SUPPORTED gpu0.max_sm_clock_mhz=NOT_SUPPORTED \
		gpu0.compute_v3=2500001:NA gpu1.memory.used_mib=512 gpu1.compute_v3=2500002:NA
	GPUMAN_SIM="$ROOT/examples/laptop.json" run nvmlq dump
	has gpu0.power_mw=NOT_SUPPORTED gpu0.power_limit_mw=NOT_SUPPORTED gpu0.temperature_c=46
}

@test "reserved memory, and a GPU lost before it gives a handle" {
	export GPUMAN_SIM="$ROOT/tests/fixtures/reserved-handle.json"
	run nvmlq dump
	has count=2 gpu0.memory.total_mib=40960 gpu0.memory.reserved_mib=574 \
		gpu0.memory.used_mib=9221 gpu0.memory.free_mib=31165 gpu0.memory_v1=40960/9795/31165 \
		gpu0.compute_v3=2700100:8192 \
		gpu1.handle=GPU_IS_LOST
	run "$GM_BUILD/gpuman" status --json
	[ "$status" -eq 0 ]
	[ "$(jq -r '.gpus[0].memory_free_mib, .gpus[1].state' <<<"$output")" = "$(printf '31165\nlost')" ]
	[[ "$(jq -r '.gpus[1].note' <<<"$output")" == *"GPU_IS_LOST"* ]]
}

@test "missing_symbols answer FUNCTION_NOT_FOUND" {
	local f="$BATS_TEST_TMPDIR/missing.json"
	jq '.missing_symbols = ["nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v2"]' \
		"$GPUMAN_SIM" >"$f"
	GPUMAN_SIM=$f run nvmlq dump
	has init=SUCCESS count=8 gpu0.memory.used_mib=FUNCTION_NOT_FOUND \
		gpu0.compute_v2=FUNCTION_NOT_FOUND gpu0.memory_v1=11264/11113/151 \
		gpu0.compute=2028329:10625,3141592:485
}

# What each driver branch must have and lack, from shared/nvml-reference.md
# (memory _v2 from R510, process lists _v2 from R455) and issue 9 (_v2 names
# since about 2014, nvmlDeviceGetMigMode from R450, nvmlDeviceGetNumGpuCores
# from R510).
@test "driver branches: each library exports exactly its branch's functions, nothing newer" {
	local b exported expected
	for b in 390 470 535 580; do
		exported=$(nm -D --defined-only "$GM_BUILD/sim/r$b/libnvidia-ml.so.1" | awk '{ print $3 }' | sort)
		expected=$({
			echo gpumanSimError
			echo nvmlErrorString
			if [ "$b" = 580 ]; then
				grep -v '^#' "$ROOT/sim/nvml-functions.txt"
			else
				awk -v b="$b" '$1 ~ /^[0-9]+$/ && $1 + 0 <= b + 0 { print $2 }' \
					"$ROOT/sim/driver-branches.txt"
			fi
		} | sort -u)
		[ "$exported" = "$expected" ]
	done
	[ "$(readlink "$GM_BUILD/sim/libnvidia-ml.so.1")" = r580/libnvidia-ml.so.1 ]

	local names="nvmlInit_v2 nvmlDeviceGetCount_v2 nvmlDeviceGetHandleByIndex_v2
		nvmlDeviceGetPciInfo_v2 nvmlDeviceGetPciInfo_v3 nvmlDeviceGetMemoryInfo_v2
		nvmlDeviceGetComputeRunningProcesses_v2 nvmlDeviceGetComputeRunningProcesses_v3
		nvmlDeviceGetMigMode nvmlDeviceGetNumGpuCores nvmlDeviceGetAddressingMode
		nvmlDeviceGetCurrPcieLinkGeneration"
	run nvmlq --lib "$GM_BUILD/sim/r390/libnvidia-ml.so.1" symbols $names
	has nvmlInit_v2=present nvmlDeviceGetCount_v2=present nvmlDeviceGetHandleByIndex_v2=present \
		nvmlDeviceGetPciInfo_v2=present nvmlDeviceGetPciInfo_v3=absent \
		nvmlDeviceGetMemoryInfo_v2=absent nvmlDeviceGetComputeRunningProcesses_v2=absent \
		nvmlDeviceGetMigMode=absent nvmlDeviceGetNumGpuCores=absent \
		nvmlDeviceGetCurrPcieLinkGeneration=present
	run nvmlq --lib "$GM_BUILD/sim/r470/libnvidia-ml.so.1" symbols $names
	has nvmlDeviceGetPciInfo_v3=present nvmlDeviceGetComputeRunningProcesses_v2=present \
		nvmlDeviceGetMigMode=present nvmlDeviceGetNumGpuCores=absent \
		nvmlDeviceGetMemoryInfo_v2=absent nvmlDeviceGetComputeRunningProcesses_v3=absent
	run nvmlq --lib "$GM_BUILD/sim/r535/libnvidia-ml.so.1" symbols $names
	has nvmlDeviceGetNumGpuCores=present nvmlDeviceGetMemoryInfo_v2=present \
		nvmlDeviceGetComputeRunningProcesses_v3=present nvmlDeviceGetAddressingMode=absent
	run nvmlq symbols $names
	has nvmlDeviceGetAddressingMode=present
}

@test "a scenario runs on its own branch's library only, as a real driver's" {
	export GPUMAN_SIM="$ROOT/tests/fixtures/r470-mixed.json"
	run nvmlq init
	has init=LIB_RM_VERSION_MISMATCH
	[[ "$output" == *"driver_version '470.256.02' is branch R470 but this simulator library is R580: use $GM_BUILD/sim/r470/libnvidia-ml.so.1"* ]]

	run nvmlq --lib "$GM_BUILD/sim/r470/libnvidia-ml.so.1" dump
	has init=SUCCESS driver_version=470.256.02 count=4 gpu1.cores=ABSENT gpu1.mig=0/0 \
		gpu1.memory_v1=24268/3/24265 gpu1.max_sm_clock_mhz=1695
	# a driver older than every simulated branch gets the oldest
	jq '.driver_version = "384.111"' "$GPUMAN_SIM" >"$BATS_TEST_TMPDIR/384.json"
	GPUMAN_SIM="$BATS_TEST_TMPDIR/384.json" run nvmlq --lib "$GM_BUILD/sim/r390/libnvidia-ml.so.1" init
	has init=SUCCESS
}

@test "the R390 library lacks the newer names outright; their old names tell the same story" {
	local old="$GM_BUILD/sim/r390/libnvidia-ml.so.1"
	GPUMAN_SIM="$ROOT/tests/fixtures/old-driver.json" run nvmlq --lib "$old" dump
	[ "$status" -eq 0 ]
	has init=SUCCESS count=2 driver_version=390.157 cuda_driver_version=9010 \
		gpu0.memory_v1=11178/6202/4976 gpu0.compute=2301100:6200 gpu1.graphics=2301101:310 \
		gpu0.pci.bus_id_legacy=0000:02:00.0 gpu0.cores=ABSENT gpu0.mig=ABSENT
	! grep -q "memory.total_mib\|compute_v2\|compute_v3" <<<"$output" || false
}

@test "MIG: slices by index and by UUID, with their instance ids, memory and processes" {
	export GPUMAN_SIM="$ROOT/examples/mig-a100.json"
	run nvmlq mig
	[ "$status" -eq 0 ]
	has gpu0.max_mig=7 gpu1.max_mig=0 gpu0.mig4=NOT_FOUND \
		"gpu0.mig0=MIG-3a000000-1111-4000-8000-000000000001|NVIDIA A100-SXM4-80GB MIG 3g.40gb|mig=1|gi=1|ci=0|mem=40192/30733|parent=True|by_uuid=True|procs=2500301:30720!instance" \
		"gpu0.mig3=MIG-1d000000-1111-4000-8000-000000000004|NVIDIA A100-SXM4-80GB MIG 1g.10gb|mig=1|gi=14|ci=0|mem=9728/6|parent=True|by_uuid=True|procs=" \
		"gpu0.procs=2500301:30720@1/0,2500302:2048@13/0" gpu1.procs=
	# the GPU holds its slices' memory; a MIG-enabled GPU has no utilization
	run nvmlq dump
	has gpu0.memory.used_mib=32804 gpu0.util.gpu=NOT_SUPPORTED gpu0.mig=1/1
	# slices need MIG mode
	jq '.gpus[0].mig_mode = 0' "$GPUMAN_SIM" >"$BATS_TEST_TMPDIR/bad.json"
	GPUMAN_SIM="$BATS_TEST_TMPDIR/bad.json" run nvmlq init
	has "sim_error=$BATS_TEST_TMPDIR/bad.json: gpus[0].mig_devices: MIG devices need \"mig_mode\": 1"
}

@test "the library exports NVML's names and gpumanSimError only" {
	run nvmlq symbols nvmlInit_v2 nvmlDeviceGetComputeRunningProcesses_v3 gpumanSimError \
		scenario_load scenario_cuda_order simstate_read simstate_publish
	has nvmlInit_v2=present nvmlDeviceGetComputeRunningProcesses_v3=present \
		gpumanSimError=present scenario_load=absent scenario_cuda_order=absent \
		simstate_read=absent simstate_publish=absent
}

@test "simload: live memory, utilization and process appear, and vanish on kill -9" {
	export CUDA_VISIBLE_DEVICES=GPU-6301
	start_simload --mem 4G --util 30 --seconds 60
	wait_until grep -q "cuda device 0" "$BG_OUT"
	run cat "$BG_OUT"
	has "simload: pid $BG on ${LAB[2]} (cuda device 0): 4096 MiB, 30%"

	run nvmlq dump
	has gpu2.memory.used_mib=4096 gpu2.memory.free_mib=20480 gpu2.util.gpu=30 \
		"gpu2.compute_v3=$BG:4096" "gpu2.compute=$BG:4096" gpu2.graphics_v3= \
		gpu3.memory.used_mib=14628

	stop 9 "$BG" || true
	run nvmlq dump
	has gpu2.memory.used_mib=0 gpu2.util.gpu=0 gpu2.compute_v3=
	# The dead process's entry was cleaned away by the reader.
	run ls "$GPUMAN_SIM_STATE"
	[ "$output" = lock ]
}

@test "simload: a GPU without the memory fails like CUDA, exit 2" {
	CUDA_VISIBLE_DEVICES=GPU-3ceaaf30 run "$SIMLOAD" --mem 1G --util 50 --seconds 1
	[ "$status" -eq 2 ]
	[ "$output" = "simload: CUDA error: out of memory (tried to allocate 1024 MiB on GPU ${LAB[0]}, 151 MiB free)" ]
	# Its memory was never taken.
	run nvmlq dump
	has gpu0.memory.free_mib=151
}

@test "simload: eight jobs racing for room for three - exactly three win" {
	local i st alive=0 oom=0
	export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=4 # 11264 MiB free
	for i in 1 2 3 4 5 6 7 8; do
		start_simload --mem 3G --util 10 --seconds 60 --init-delay 0.05
	done
	settled() {
		[ "$(cat "$BATS_TEST_TMPDIR"/out.* | grep -c -e "out of memory" -e "cuda device 0")" -eq 8 ]
	}
	wait_until settled
	for i in "${!BG_PIDS[@]}"; do
		if grep -q "out of memory" "$BATS_TEST_TMPDIR/out.$i"; then
			st=0
			wait "${BG_PIDS[$i]}" || st=$?
			[ "$st" -eq 2 ] && oom=$((oom + 1))
		elif kill -0 "${BG_PIDS[$i]}"; then
			alive=$((alive + 1))
		fi
	done
	[ "$alive" -eq 3 ]
	[ "$oom" -eq 5 ]
	run nvmlq dump
	has gpu4.memory.used_mib=9216 gpu4.util.gpu=30
}

@test "simload: CUDA's order is fastest first, or PCI bus order on request" {
	run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$status" -eq 0 ]
	[ "$(uuid_lines)" = "$(printf '%s\n' "0 ${LAB[1]}" "1 ${LAB[7]}" "2 ${LAB[3]}" "3 ${LAB[5]}" \
		"4 ${LAB[2]}" "5 ${LAB[6]}" "6 ${LAB[0]}" "7 ${LAB[4]}")" ]

	CUDA_DEVICE_ORDER=PCI_BUS_ID run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$(uuid_lines)" = "$(for i in 0 1 2 3 4 5 6 7; do echo "$i ${LAB[$i]}"; done)" ]

	CUDA_VISIBLE_DEVICES=0 run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$(uuid_lines)" = "0 ${LAB[1]}" ]
	CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$(uuid_lines)" = "0 ${LAB[0]}" ]
}

@test "simload: CUDA_VISIBLE_DEVICES takes UUID prefixes and stops at the first bad entry" {
	CUDA_VISIBLE_DEVICES=0,2,-1,1 run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$(uuid_lines)" = "$(printf '%s\n' "0 ${LAB[1]}" "1 ${LAB[3]}")" ]

	CUDA_VISIBLE_DEVICES="GPU-c1acc, GPU-9dfb369b" run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$(uuid_lines)" = "$(printf '%s\n' "0 ${LAB[6]}" "1 ${LAB[1]}")" ]

	# A repeat, an unknown index, an ambiguous prefix each end the list.
	CUDA_VISIBLE_DEVICES=1,1,2 run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$(uuid_lines)" = "0 ${LAB[7]}" ]
	CUDA_VISIBLE_DEVICES=3,8,0 run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$(uuid_lines)" = "0 ${LAB[5]}" ]
	CUDA_VISIBLE_DEVICES=GPU-,0 run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$status" -eq 100 ]
}

@test "simload: an empty CUDA_VISIBLE_DEVICES means no device, exit 100" {
	CUDA_VISIBLE_DEVICES= run "$SIMLOAD" --mem 1 --util 0 --seconds 0
	[ "$status" -eq 100 ]
	[ "$output" = "simload: CUDA error: no CUDA-capable device is detected" ]
}

@test "simload: lost and forbidden GPUs are invisible to CUDA" {
	export CUDA_DEVICE_ORDER=PCI_BUS_ID GPUMAN_SIM="$ROOT/tests/fixtures/lost.json"
	run nvmlq dump
	local expect
	expect=$(sed -n 's/^gpu\([013]\)\.uuid=/\1 /p' <<<"$output" | awk '{ print NR - 1, $2 }')
	run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$status" -eq 0 ]
	[ "$(uuid_lines)" = "$expect" ]

	export GPUMAN_SIM="$ROOT/tests/fixtures/no-permission.json"
	run "$SIMLOAD" --mem 0 --util 0 --seconds 0
	[ "$(uuid_lines | wc -l)" -eq 2 ]
}

@test "simload: exclusive-process and prohibited GPUs refuse another context, exit 46" {
	export GPUMAN_SIM="$ROOT/tests/fixtures/exclusive-mode.json" CUDA_DEVICE_ORDER=PCI_BUS_ID
	CUDA_VISIBLE_DEVICES=0 run "$SIMLOAD" --mem 1 --util 0 --seconds 0
	[ "$status" -eq 46 ]
	[[ "$output" == *"busy or unavailable"*"exclusive_process compute mode and pid 2600100 uses it"* ]]
	CUDA_VISIBLE_DEVICES=2 run "$SIMLOAD" --mem 1 --util 0 --seconds 0
	[ "$status" -eq 46 ]
	[[ "$output" == *"prohibited compute mode"* ]]

	# The idle exclusive GPU takes one job, then refuses the next.
	export CUDA_VISIBLE_DEVICES=1
	start_simload --mem 1 --util 0 --seconds 60
	wait_until grep -q "cuda device 0" "$BG_OUT"
	run "$SIMLOAD" --mem 1 --util 0 --seconds 0
	[ "$status" -eq 46 ]
	[[ "$output" == *"and pid $BG uses it"* ]]
	run nvmlq dump
	has gpu0.compute_mode=3 gpu1.compute_mode=3 gpu2.compute_mode=2 gpu3.compute_mode=0
}

@test "simload: --record logs start and end; SIGTERM withdraws the entry, exit 143" {
	local rec="$BATS_TEST_TMPDIR/record"
	export CUDA_VISIBLE_DEVICES=GPU-6301,GPU-78b7
	start_simload --mem 2G --util 20 --seconds 60 --record "$rec"
	wait_until grep -q "cuda device 1" "$BG_OUT"
	run nvmlq dump
	has "gpu2.compute_v3=$BG:2048" "gpu4.compute_v3=$BG:2048"
	local st=0
	stop TERM "$BG" || st=$?
	[ "$st" -eq 143 ]
	run nvmlq dump
	has gpu2.compute_v3= gpu4.compute_v3=
	run cut -d' ' -f1-3 "$rec"
	[ "$output" = "$(printf '%s\n' "start $BG ${LAB[2]}" "start $BG ${LAB[4]}" \
		"end $BG ${LAB[2]}" "end $BG ${LAB[4]}")" ]
}

@test "simload: work takes seconds / speed of the slowest visible GPU; --exit sets the status" {
	local rec="$BATS_TEST_TMPDIR/record"
	export CUDA_DEVICE_ORDER=PCI_BUS_ID
	# 0.3 s of work: 0.15 s on an RTX 4090 (speed 2.0), 0.5 s on a 1080 Ti (0.6).
	CUDA_VISIBLE_DEVICES=7 run "$SIMLOAD" --mem 1 --util 0 --seconds 0.3 --record "$rec.fast" --exit 7
	[ "$status" -eq 7 ]
	CUDA_VISIBLE_DEVICES=7,4 run "$SIMLOAD" --mem 1 --util 0 --seconds 0.3 --record "$rec.slow"
	[ "$status" -eq 0 ]
	duration_ms() {
		awk '$1 == "start" { s = $4 } $1 == "end" { e = $4 } END { printf "%d", (e - s) / 1e6 }' "$1"
	}
	[ "$(duration_ms "$rec.slow")" -ge 495 ]
	[ "$(duration_ms "$rec.fast")" -ge 148 ]
	[ "$(duration_ms "$rec.fast")" -lt 450 ]
}

@test "simload: --help, and usage errors name the option" {
	run "$SIMLOAD" --help
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: gpuman-simload --mem SIZE"* ]]
	run "$SIMLOAD" --mem 12Q --util 0 --seconds 1
	[ "$status" -eq 1 ]
	[ "$output" = "simload: --mem '12Q': not a size (use MiB, or a number with K, M, G or T)" ]
	run "$SIMLOAD" --mem 1 --seconds 1
	[ "$output" = "simload: --util is required (see --help)" ]
	unset GPUMAN_SIM
	run "$SIMLOAD" --mem 1 --util 0 --seconds 0
	[ "$status" -eq 1 ]
	[[ "$output" == "simload: GPUMAN_SIM is not set"* ]]
}

@test "simload: sizes are MiB or binary K/M/G/T" {
	export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=2
	local size expect
	for size in 1536:1536 1.5G:1536 2GiB:2048 512K:1 1t:1048576; do
		expect=${size#*:}
		if [ "$expect" -gt 24576 ]; then
			run "$SIMLOAD" --mem "${size%%:*}" --util 0 --seconds 0
			[ "$status" -eq 2 ]
		else
			run "$SIMLOAD" --mem "${size%%:*}" --util 0 --seconds 0
			[[ "$output" == *": $expect MiB, 0%" ]]
		fi
	done
}

@test "the default state directory is private, per user and per scenario" {
	unset GPUMAN_SIM_STATE
	export TMPDIR="$BATS_TEST_TMPDIR/tmp" CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=2
	mkdir -p "$TMPDIR"
	start_simload --mem 1G --util 5 --seconds 60
	wait_until grep -q "cuda device 0" "$BG_OUT"
	local dir
	dir=$(echo "$TMPDIR"/gpuman-sim-"$(id -u)"-*)
	[ -d "$dir" ]
	[ "$(stat -c %a "$dir")" = 700 ]
	# The library finds the same directory from the scenario's real path.
	GPUMAN_SIM="$ROOT/examples/../examples/lab-8gpu.json" run nvmlq dump
	has "gpu2.compute_v3=$BG:1024"
	stop 9 "$BG" || true

	# A directory others can write to is refused.
	chmod 777 "$dir"
	run "$SIMLOAD" --mem 1 --util 0 --seconds 0
	[ "$status" -eq 1 ]
	[[ "$output" == *"is not private to you"* ]]
}

# aged FILE SECONDS - FILE as if written SECONDS ago: its timeline is there.
aged() {
	touch -d "@$(($(date +%s) - $2))" "$1"
}

@test "timeline: phases change processes, utilization and memory as time passes, and repeat" {
	local f="$BATS_TEST_TMPDIR/timeline.json"
	cp "$ROOT/examples/timeline.json" "$f"
	export GPUMAN_SIM=$f
	aged "$f" 5 # 0-20 s: the training job computes on GPUs 0 and 1
	run -0 nvmlq dump
	has gpu1.util.gpu=88 gpu1.memory.used_mib=9002 gpu2.util.gpu=35
	aged "$f" 25 # 20-40 s: it keeps GPU 1's memory without computing there
	run -0 nvmlq dump
	has gpu0.util.gpu=92 gpu1.util.gpu=0 gpu1.memory.used_mib=9002 gpu2.util.gpu=0
	aged "$f" 45 # 40-60 s: it has ended
	run -0 nvmlq dump
	has gpu0.util.gpu=0 gpu0.memory.used_mib=2 gpu1.memory.used_mib=2 gpu2.memory.used_mib=3002
	aged "$f" 65 # repeat_s 60: from the start again
	run -0 nvmlq dump
	has gpu1.util.gpu=88
	# simload sees the phase's memory: 15000 MiB fit on GPU 1 only once the job has gone
	aged "$f" 25
	CUDA_VISIBLE_DEVICES=1 run "$SIMLOAD" --mem 16000 --util 10 --seconds 0
	[ "$status" -eq 2 ]
	aged "$f" 45
	CUDA_VISIBLE_DEVICES=1 run -0 "$SIMLOAD" --mem 16000 --util 10 --seconds 0
}

@test "timeline: mistakes name the phase and key" {
	local f="$BATS_TEST_TMPDIR/bad.json" gpus='"gpus": [ { "name": "x", "memory_total_mib": 1000 } ]'
	printf '{%s, "timeline": {"phases": [{"at_s": 5, "gpus": []}, {"at_s": 5, "gpus": []}]}}' "$gpus" >"$f"
	GPUMAN_SIM="$f" run nvmlq init
	has "sim_error=$f: timeline.phases[1].at_s: 5 is not after the phase before (5)"
	printf '{%s, "timeline": {"phases": [{"at_s": 1, "gpus": [{"gpu": 1}]}]}}' "$gpus" >"$f"
	GPUMAN_SIM="$f" run nvmlq init
	has "sim_error=$f: timeline.phases[0].gpus[0].gpu: 1: the scenario has 1 GPUs"
	printf '{%s, "timeline": {"phases": [{"at_s": 1, "gpus": [{"gpu": 0, "processes": [{"pid": 9, "used_mib": 2000}]}]}]}}' "$gpus" >"$f"
	GPUMAN_SIM="$f" run nvmlq init
	[[ "$output" == *"sim_error=$f: timeline.phases[0].gpus[0]: memory in use (2000 MiB with the processes') exceeds GPU 0's memory_total_mib (1000 MiB)"* ]]
	printf '{%s, "timeline": {"repeat_s": 10, "phases": [{"at_s": 10, "gpus": [], "utilisation": 1}]}}' "$gpus" >"$f"
	GPUMAN_SIM="$f" run nvmlq init
	[[ "$output" == *"sim_error=$f: timeline.phases[0]: unknown key 'utilisation'"* ]]
}

# lat_probe - nvmlInit_v2's time and one call of each cost family on GPU 0,
# in milliseconds, as "name=MS" lines (ctypes, the simulator library).
lat_probe() {
	python3 - "$GM_BUILD/sim/libnvidia-ml.so.1" <<'PY'
import ctypes, sys, time
L = ctypes.CDLL(sys.argv[1])
def t(f):
    t0 = time.monotonic(); rc = f(); return rc, (time.monotonic() - t0) * 1000
rc, ms = t(L.nvmlInit_v2)
print("init=%.1f rc=%d" % (ms, rc))
h = ctypes.c_void_p()
L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
buf = (ctypes.c_ulonglong * 4)()
n = ctypes.c_uint(0)
v = ctypes.c_uint(0)
for name, f in [("memory", lambda: L.nvmlDeviceGetMemoryInfo(h, buf)),
                ("utilization", lambda: L.nvmlDeviceGetUtilizationRates(h, buf)),
                ("processes", lambda: L.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None)),
                ("temperature", lambda: L.nvmlDeviceGetTemperature(h, 0, ctypes.byref(v)))]:
    print("%s=%.1f" % (name, t(f)[1]))
PY
}

# ms_of NAME - the milliseconds lat_probe printed for NAME
ms_of() { sed -n "s/^$1=\([0-9.]*\).*/\1/p" <<<"$output" | cut -d. -f1; }

@test "latency: a scenario's latency profile makes NVML calls take real time, by family" {
	local f="$BATS_TEST_TMPDIR/slow.json"
	cat >"$f" <<'JSON'
{ "latency": { "init_ms": 400, "attach_ms": 150, "memory_ms": 60, "utilization_ms": 30,
               "processes_ms": 90, "query_ms": 10 },
  "gpus": [ { "name": "a", "memory_total_mib": 1000, "temperature_c": 40, "persistence_mode": 0 },
            { "name": "b", "memory_total_mib": 1000, "persistence_mode": 1 },
            { "name": "c", "memory_total_mib": 1000 } ] }
JSON
	GPUMAN_SIM=$f run -0 lat_probe
	echo "$output"
	# init: 400 ms, and 150 ms for the one GPU whose persistence mode is off
	[ "$(ms_of init)" -ge 550 ]
	[ "$(ms_of init)" -lt 1500 ]
	[ "$(ms_of memory)" -ge 60 ]
	[ "$(ms_of memory)" -lt 600 ]
	[ "$(ms_of utilization)" -ge 30 ]
	[ "$(ms_of utilization)" -lt 500 ]
	[ "$(ms_of processes)" -ge 90 ]
	[ "$(ms_of processes)" -lt 600 ]
	[ "$(ms_of temperature)" -ge 10 ]
	[ "$(ms_of temperature)" -lt 400 ]
	# the time is slept, not spun: seconds of NVML cost no second of CPU
	sed 's/"init_ms": 400/"init_ms": 2000/' "$f" >"$f.1" && mv "$f.1" "$f"
	local cpu
	cpu=$( { /usr/bin/time -f '%e %U %S' env GPUMAN_SIM="$f" GPUMAN_BROKER=off \
		"$GM_BUILD/gpuman" pick >/dev/null; } 2>&1 | tail -1)
	echo "wall user sys: $cpu"
	awk -v c="$cpu" 'BEGIN { split(c, a, " "); exit !(a[1] >= 2.1 && a[2] + a[3] < 0.5) }'
}

@test "latency: without a profile every call is free, and a mistyped key is refused with a suggestion" {
	run -0 lat_probe
	[ "$(ms_of init)" -lt 300 ]
	[ "$(ms_of processes)" -lt 50 ]
	local f="$BATS_TEST_TMPDIR/typo.json"
	echo '{ "latency": { "init_msec": 24 }, "gpus": [] }' >"$f"
	GPUMAN_SIM=$f run nvmlq init
	has "sim_error=$f: latency: unknown key 'init_msec' (did you mean 'init_ms'?)"
	echo '{ "latency": { "init_ms": -1 }, "gpus": [] }' >"$f"
	GPUMAN_SIM=$f run nvmlq init
	[[ "$output" == *"sim_error=$f: latency.init_ms:"* ]]
	echo '{ "latency": 24, "gpus": [] }' >"$f"
	GPUMAN_SIM=$f run nvmlq init
	[[ "$output" == *"sim_error=$f: latency: expected an object of milliseconds, got"* ]]
}

@test "latency: the shipped H200 profile costs what the H200 measured at start-up" {
	GPUMAN_SIM="$ROOT/examples/h200-latency.json" run -0 lat_probe
	echo "$output"
	[ "$(ms_of init)" -ge 24 ]
	[ "$(ms_of init)" -lt 200 ]
}
