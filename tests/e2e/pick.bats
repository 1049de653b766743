#!/usr/bin/env bats
# pick: every policy and filter, on a machine whose numbers are written here.
# four_gpus (helpers.bash): free MiB 15000, 20000, 11500, 7000; totals
# 16000, 24000, 12000, 16000; utilization 10, 70, 0, 5; power 100/400,
# 300/350, 20/250, 60/400 W; speed 1, 2, 0.5, 1; processes on GPUs 1 and 3.

load helpers

@test "--by memory (default): most free MiB first" {
	four_gpus
	run -0 gpuman pick
	[ "$output" = 1 ]
	run -0 gpuman pick -n 4
	[ "$output" = "1,0,2,3" ]
}

@test "--by memory-rate, power, util and index order as documented" {
	four_gpus
	run -0 gpuman pick -n 4 --by memory-rate
	[ "$output" = "2,0,1,3" ]
	run -0 gpuman pick -n 4 --by power
	[ "$output" = "2,3,0,1" ]
	run -0 gpuman pick -n 4 --by util
	[ "$output" = "2,3,0,1" ]
	run -0 gpuman pick -n 4 --by index
	[ "$output" = "0,1,2,3" ]
}

@test "ties are broken by the lower index" {
	scenario twins <<'JSON'
{ "gpus": [ { "name": "T", "memory_total_mib": 8000, "memory_used_mib": 100 },
            { "name": "T", "memory_total_mib": 8000, "memory_used_mib": 0 },
            { "name": "T", "memory_total_mib": 8000, "memory_used_mib": 0 } ] }
JSON
	run -0 gpuman pick -n 3
	[ "$output" = "1,2,0" ]
}

@test "a GPU without power readings sorts after those with them" {
	scenario mixedpower <<'JSON'
{ "gpus": [ { "name": "no power", "memory_total_mib": 8000, "power_draw_w": null, "power_limit_w": null },
            { "name": "busy", "memory_total_mib": 8000, "power_draw_w": 200, "power_limit_w": 250 },
            { "name": "calm", "memory_total_mib": 8000, "power_draw_w": 30, "power_limit_w": 250 } ] }
JSON
	run -0 gpuman pick -n 3 --by power
	[ "$output" = "2,1,0" ]
}

@test "--min-free in MiB, units and percent; unmet requests explain each GPU and exit 75" {
	four_gpus
	run -0 gpuman pick -n 2 --min-free 12000
	[ "$output" = "1,0" ]
	run -0 gpuman pick -n 2 --min-free 14G
	[ "$output" = "1,0" ]
	run -0 gpuman pick -n 2 --min-free 90%
	[ "$output" = "0,2" ]
	run -75 gpuman pick -n 3 --min-free 12000
	[[ "$output" == *"GPU 2 (Test GPU C): only 11500 MiB free"* ]]
	[[ "$output" == *"GPU 3 (Test GPU D): only 7000 MiB free"* ]]
}

@test "--max-util, --only, --exclude (indices and UUID prefixes), --idle" {
	four_gpus
	run -0 gpuman pick -n 2 --max-util 5
	[ "$output" = "2,3" ]
	run -0 gpuman pick --only 2,3
	[ "$output" = 2 ]
	run -0 gpuman pick --only bbbbbbbb
	[ "$output" = 1 ]
	run -0 gpuman pick --exclude GPU-bbbb
	[ "$output" = 0 ]
	run -0 gpuman pick -n 2 --idle
	[ "$output" = "0,2" ]
	run -75 gpuman pick -n 3 --idle
	[[ "$output" == *"GPU 1 (Test GPU B): "*"3000001"* ]]
	run -75 gpuman pick --only 3 --exclude 3
	[[ "$output" == *"excluded by --exclude"* ]]
	# ranges of indices, as taskset and Slurm write them
	run -0 gpuman pick -n 2 --only 1-2
	[ "$output" = "1,2" ]
	run -0 gpuman pick -n 2 --exclude 0-1
	[ "$output" = "2,3" ]
	run -0 gpuman pick --exclude 0-1,GPU-cccc --only 0-3
	[ "$output" = 3 ]
	run -2 gpuman pick --only 3-1
	[[ "$output" == *"--only '3-1': '3-1': a range of indices runs upwards (1-3)"* ]]
	# a reason every GPU shares is said once
	run -75 gpuman pick --exclude 0-3
	[ "$output" = "gpuman pick: no GPU of this machine can ever meet the request:
all 4 GPUs: excluded by --exclude" ]
	run -75 gpuman run --only 9 -- true
	[ "$output" = "gpuman run: no GPU of this machine can ever meet the request:
all 4 GPUs: not in --only, which names no GPU of this machine (gpuman status lists their indices and UUIDs)" ]
}

@test "--format uuid and cuda print what CUDA cannot misread; --json gives both" {
	four_gpus
	run -0 gpuman pick --format uuid
	[ "$output" = GPU-bbbbbbbb-0000-0000-0000-000000000000 ]
	run -0 gpuman pick --format cuda
	[ "$output" = GPU-bbbbbbbb-0000-0000-0000-000000000000 ]
	run -0 gpuman pick -n 2 --json
	[ "$(jqr '[.gpus[].index] | join(",")')" = "1,0" ]
	[ "$(jqr '.cuda_visible_devices')" = \
	  "GPU-bbbbbbbb-0000-0000-0000-000000000000,GPU-aaaaaaaa-0000-0000-0000-000000000000" ]
}

@test "an inherited CUDA_VISIBLE_DEVICES of indices is read in CUDA's fastest-first order" {
	four_gpus
	# CUDA's default order by speed: B(1) A(0) D(3) C(2); so "2,3" means D and C
	export CUDA_VISIBLE_DEVICES=2,3
	run -0 gpuman pick -n 2
	[ "$output" = "2,3" ]
	# the child gets the inherited entries, not NVML indices
	run -0 gpuman pick --format cuda
	[ "$output" = 3 ]
	run -75 gpuman pick -n 3
	[[ "$output" == *"GPU 1 (Test GPU B): outside CUDA_VISIBLE_DEVICES"* ]]
}

@test "with CUDA_DEVICE_ORDER=PCI_BUS_ID inherited indices are NVML's" {
	four_gpus
	export CUDA_VISIBLE_DEVICES=2,3 CUDA_DEVICE_ORDER=PCI_BUS_ID
	run -0 gpuman pick --format cuda
	[ "$output" = 2 ]
	run -0 gpuman pick -n 2
	[ "$output" = "2,3" ]
}

@test "inherited UUIDs, an empty list and a truncating entry are honoured" {
	four_gpus
	CUDA_VISIBLE_DEVICES=GPU-dddd run -0 gpuman pick --format cuda
	[ "$output" = GPU-dddd ]
	CUDA_VISIBLE_DEVICES=GPU-dddd run -0 gpuman pick
	[ "$output" = 3 ]
	CUDA_VISIBLE_DEVICES= run -75 gpuman pick
	# "0,-1,2": CUDA stops at -1, so only the fastest GPU (B) is visible
	CUDA_VISIBLE_DEVICES=0,-1,2 run -0 gpuman pick
	[ "$output" = 1 ]
	CUDA_VISIBLE_DEVICES=0,-1,2 run -75 gpuman pick -n 2
}

@test "bad options name the culprit and exit 2" {
	four_gpus
	run -2 gpuman pick --by nope
	[[ "$output" == *"--by 'nope': unknown policy"* ]]
	run -2 gpuman pick --min-free 12Q
	[[ "$output" == *"--min-free '12Q': unknown unit 'Q' (use K, M, G, T or %)"* ]]
	run -2 gpuman pick -n 0
	[[ "$output" == *"-n '0'"* ]]
	run -2 gpuman pick --only 1,,2
	run -2 gpuman pick --frobnicate
	[[ "$output" == *"--frobnicate"* ]]
	run -2 gpuman pick --format nvml
	run -2 gpuman pick extra
}

@test "a request no GPU can ever meet says so (exit 75)" {
	four_gpus
	run -75 gpuman pick -n 5
	[[ "$output" == *"can ever meet"* ]]
	run -75 gpuman pick --mem 100G
	[[ "$output" == *"can ever meet"* ]]
}

@test "--help answers for every command" {
	for cmd in status info ps pick run; do
		run -0 gpuman "$cmd" --help
		[[ "$output" == usage:* ]]
	done
	run -0 gpuman --help
	[[ "$output" == *pick* ]]
	run -0 gpuman --version
	[[ "$output" == "gpuman "* ]]
}
