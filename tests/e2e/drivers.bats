#!/usr/bin/env bats
# drivers: gpuman on each simulated driver branch (R390, R470, R535, R580),
# each a simulator library that exports exactly that branch's functions.
# The crux: before R510 NVML gives no core count, so CUDA's fastest-first
# numbering cannot be derived for mixed GPUs, and gpuman must never guess it.
# tests/fixtures/r470-mixed.json: CUDA order is NVML 1, 3, 2, 0.

load helpers

MIXED_UUIDS() {
	gpuman status --json | jq -r '.gpus[].uuid'
}

# the fixture with another driver version
as_driver() {
	scenario "$1" <"$GM_ROOT/tests/fixtures/r470-mixed.json"
	jq --arg v "$2" '.driver_version = $v' "$GM_ROOT/tests/fixtures/r470-mixed.json" >"$GPUMAN_SIM"
}

@test "status, info and ps work on every branch; gpuman loads the branch's library itself" {
	local v
	for v in 390.157 470.256.02 535.183.01 580.95.05; do
		as_driver "d${v%%.*}" "$v"
		run -0 gpuman status --json
		[ "$(jq -r '.driver_version' <<<"$output")" = "$v" ]
		[ "$(jq -r '[.gpus[].memory_total_mib] | join(",")' <<<"$output")" = "11178,24268,24220,24268" ]
		[ "$(jq -r '[.gpus[].state] | unique | join(",")' <<<"$output")" = ok ]
		run -0 gpuman info 1
		run -0 gpuman ps
	done
}

# the files a `gpuman pick` opened: "PATH = fd" or "PATH ENOENT", one a line
opened() {
	strace -f -e trace=openat -o "$BATS_TEST_TMPDIR/calls" gpuman pick >/dev/null || return 1
	sed -n 's/.*openat([^"]*"\([^"]*\)".*) = \(-1 \([A-Z]*\)\|\([0-9]*\)\).*/\1 \3\4/p' "$BATS_TEST_TMPDIR/calls"
}

@test "the scenario is read once where the newest library serves it, and an older branch's library is found after it refuses" {
	command -v strace >/dev/null || skip "strace is missing (scripts/ensure-deps check installs it)"
	# R580: only the library reads the scenario; gpuman does not parse it first
	as_driver d580 580.95.05
	run -0 opened
	[ "$(grep -c "^$GPUMAN_SIM " <<<"$output")" = 1 ]
	! grep -q '/r[0-9]*/libnvidia-ml.so.1 [0-9]' <<<"$output" || false
	# R470: the newest library refuses it (another version's driver), then
	# gpuman reads the driver's version and loads r470/
	as_driver d470 470.256.02
	run -0 opened
	grep -q '/r470/libnvidia-ml.so.1 [0-9]' <<<"$output"
	[ "$(grep -c "^$GPUMAN_SIM " <<<"$output")" = 3 ]
}

@test "before R510, mixed GPUs: CUDA's order is unknown, shown as such, never guessed" {
	as_driver r470 470.256.02
	run -0 gpuman status --json
	[ "$(jq -c '[.gpus[].cuda_index]' <<<"$output")" = "[null,null,null,null]" ]
	[ "$(jq -c '[.gpus[].cuda_index_pci_bus_order]' <<<"$output")" = "[0,1,2,3]" ]
	run -0 gpuman info 1
	[[ "$output" == *"unknown in the default order"*"1 (CUDA_DEVICE_ORDER=PCI_BUS_ID)"* ]]

	# R535 has the core count: the order is CUDA's
	as_driver r535 535.183.01
	run -0 gpuman status --json
	[ "$(jq -c '[.gpus[].cuda_index]' <<<"$output")" = "[3,0,2,1]" ]
}

@test "an inherited bare-index allocation on R470 is refused with how to fix it, never mapped by PCI order" {
	as_driver r470 470.256.02
	export CUDA_VISIBLE_DEVICES=0,1
	run -75 gpuman pick
	[[ "$output" == *"all 4 GPUs: CUDA_VISIBLE_DEVICES index: this driver hides CUDA's fastest-first order"* ]]
	[[ "$output" == *"use UUIDs or CUDA_DEVICE_ORDER=PCI_BUS_ID"* ]]
	run -75 gpuman run -- true
	[[ "$output" == *"hides CUDA's fastest-first order"* ]]

	# Said to be PCI order: certain, and used.
	CUDA_DEVICE_ORDER=PCI_BUS_ID run -0 gpuman pick -n 2 --by index --format cuda
	[ "$output" = "0,1" ]
	# UUIDs are certain on any driver.
	local uuids
	mapfile -t uuids < <(unset CUDA_VISIBLE_DEVICES; MIXED_UUIDS)
	CUDA_VISIBLE_DEVICES="${uuids[2]},${uuids[0]}" run -0 gpuman pick -n 2 --by index
	[ "$output" = "0,2" ]
}

@test "on R535 the same allocation is CUDA's devices 0 and 1: NVML 1 and 3, and the job lands there" {
	as_driver r535 535.183.01
	export CUDA_VISIBLE_DEVICES=0,1
	run -0 gpuman pick -n 2 --by index
	[ "$output" = "1,3" ]
	local uuids
	mapfile -t uuids < <(unset CUDA_VISIBLE_DEVICES; MIXED_UUIDS)
	# simload reads CUDA_VISIBLE_DEVICES as CUDA does (it knows the cores)
	run -0 gpuman run -n 2 -- gpuman-simload --mem 1 --util 0 --seconds 0
	[[ "$output" == *"on ${uuids[1]} (cuda device"* ]]
	[[ "$output" == *"on ${uuids[3]} (cuda device"* ]]
}

@test "before R510, GPUs of one model: CUDA's order is PCI order, and an index allocation works" {
	scenario same <<'JSON'
{ "driver_version": "470.256.02", "cuda_driver_version": 11040,
  "gpus": [
    { "name": "NVIDIA A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "speed": 1.6 },
    { "name": "NVIDIA A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 30000, "speed": 1.6 },
    { "name": "NVIDIA A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "speed": 1.6 } ] }
JSON
	local uuids
	mapfile -t uuids < <(gpuman status --json | jq -r '.gpus[].uuid')
	export CUDA_VISIBLE_DEVICES=2,1
	run -0 gpuman pick
	[ "$output" = 2 ]
	run -0 gpuman run -- gpuman-simload --mem 1 --util 0 --seconds 0
	[[ "$output" == *"on ${uuids[2]} (cuda device 0)"* ]]
}
