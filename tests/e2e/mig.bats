#!/usr/bin/env bats
# mig: GPUs split into MIG slices (examples/mig-a100.json: GPU 0 is an A100
# in MIG mode with slices 3g.40gb, 2g.20gb and two 1g.10gb, a job on the
# 3g.40gb slice and one on the first 1g.10gb; GPU 1 is whole).  gpuman shows
# the slices under their GPU and never hands a GPU in MIG mode out whole.

load helpers

MIG_SIM="$GM_ROOT/examples/mig-a100.json"
SLICE_3G=MIG-3a000000-1111-4000-8000-000000000001
SLICE_1C=MIG-1c000000-1111-4000-8000-000000000003
SLICE_1D=MIG-1d000000-1111-4000-8000-000000000004

setup() {
	gm_setup
	export GPUMAN_SIM="$MIG_SIM"
}

teardown() {
	kill_ours -TERM ${BG_PIDS:-}
	wait 2>/dev/null || true
}

@test "status --json lists each GPU's slices, and each process's slice" {
	run -0 gpuman status --json
	[ "$(jqr '[.gpus[0].mig_devices[].profile] | join(",")')" = "3g.40gb,2g.20gb,1g.10gb,1g.10gb" ]
	[ "$(jqr '.gpus[0].mig_devices[3].uuid')" = "$SLICE_1D" ]
	[ "$(jqr '.gpus[0].mig_devices[0].memory_total_mib')" = 40192 ]
	# the driver's 13 MiB plus the job's 30720
	[ "$(jqr '.gpus[0].mig_devices[0].memory_used_mib')" = 30733 ]
	[ "$(jqr '[.gpus[0].mig_devices[].gpu_instance_id] | join(",")')" = "1,5,13,14" ]
	[ "$(jqr '.gpus[0].mig_devices[2].pids | join(",")')" = 2500302 ]
	[ "$(jqr '.gpus[1].mig_devices | length')" = 0 ]
	[ "$(jqr '[.processes[] | "\(.pid)=\(.mig_uuid)"] | join(" ")')" = "2500301=$SLICE_3G 2500302=$SLICE_1C" ]
}

@test "status, info and ps show the slices under their GPU" {
	run -0 gpuman status
	[[ "${lines[2]}" == "  0  NVIDIA A100-SXM4-80GB"* ]]
	[[ "${lines[3]}" == *"MIG 3g.40gb MIG-3a000000"*"30.0G / 39.2G"*"pid 2500301 30.0G" ]]
	[[ "${lines[4]}" == *"MIG 2g.20gb MIG-2b000000"*" -" ]]
	[[ "${lines[5]}" == *"MIG 1g.10gb MIG-1c000000"*"pid 2500302 2.0G" ]]
	[[ "${lines[6]}" == *"MIG 1g.10gb MIG-1d000000"* ]]
	[[ "${lines[7]}" == "  1  NVIDIA A100-SXM4-80GB"* ]]

	run -0 gpuman status --format csv=index,mig_devices
	[ "${lines[1]}" = "0,3g.40gb:$SLICE_3G 2g.20gb:MIG-2b000000-1111-4000-8000-000000000002 1g.10gb:$SLICE_1C 1g.10gb:$SLICE_1D" ]
	[ "${lines[2]}" = "1," ]

	run -0 gpuman info 0
	[[ "$output" == *"mig mode              enabled"* ]]
	[[ "$output" == *"mig slice             1g.10gb $SLICE_1D: 6 / 9728 MiB, instance 14/0, 0 processes"* ]]
	run -0 gpuman info --json 0
	[ "$(jqr '.[0].mig_devices | length')" = 4 ]

	run -0 gpuman ps
	[[ "${lines[0]}" == "GPU MIG "*"PID"* ]]
	[[ "${lines[1]}" == "  0 3g.40gb   2500301 "* ]]
	[[ "${lines[2]}" == "  0 1g.10gb   2500302 "* ]]
	run -0 gpuman ps --format csv=pid,mig
	[ "${lines[1]}" = "2500301,$SLICE_3G" ]
	run -0 gpuman ps --json
	[ "$(jqr '.[1].mig_uuid')" = "$SLICE_1C" ]
}

@test "an MPS client in a slice is one of its processes, marked mps, once even in both lists" {
	scenario mps < <(jq '.gpus[0].mig_devices[1].processes =
		[{"pid": 2500303, "used_mib": 1000, "utilization": 0, "type": "mps"}]
		| .gpus[0].mig_devices[2].processes +=
		[{"pid": 2500304, "used_mib": 500, "utilization": 0, "type": "compute+mps"}]' "$MIG_SIM")
	run -0 gpuman status --json
	[ "$(jqr '.gpus[0].mig_devices[1].pids | join(",")')" = 2500303 ]
	[ "$(jqr '.gpus[0].mig_devices[2].pids | join(",")')" = 2500302,2500304 ]
	[ "$(jqr '[.processes[] | "\(.pid)=\(.mig_uuid):\(.used_mib):\(.mps)"] | join(" ")')" = \
	  "2500301=$SLICE_3G:30720:false 2500302=$SLICE_1C:2048:false 2500303=MIG-2b000000-1111-4000-8000-000000000002:1000:true 2500304=$SLICE_1C:500:true" ]
	run -0 gpuman ps
	[[ "$output" == *"  0 2g.20gb   2500303 "*" M+C "* ]]
}

@test "a GPU without MIG mode has no MIG column in ps and no slice rows" {
	run -0 gpuman --sim "$GM_ROOT/examples/lab-8gpu.json" ps
	[[ "${lines[0]}" != *MIG* ]]
	run -0 gpuman --sim "$GM_ROOT/examples/lab-8gpu.json" status --json
	[ "$(jqr '[.gpus[].mig_devices | length] | add')" = 0 ]
}

@test "a driver without the MIG calls (R390) shows no slices and nothing fails" {
	scenario r390 < "$MIG_SIM"
	jq '.driver_version = "390.157"' "$MIG_SIM" >"$GPUMAN_SIM"
	run -0 gpuman status --json
	[ "$(jqr '[.gpus[].mig_devices | length] | add')" = 0 ]
	run -0 gpuman ps
}

@test "a whole-GPU request never gets the GPU in MIG mode, and says why" {
	# GPU 0 is idle as a whole (no utilization reading, 49 GiB free), but split
	run -0 gpuman pick --by index
	[ "$output" = "$(printf 'gpuman pick: note: GPU 0 is in MIG mode: never handed out whole (ask for a slice with --mig PROFILE)\n1')" ]
	run -75 gpuman pick -n 2
	[[ "$output" == *"GPU 0 (NVIDIA A100-SXM4-80GB): in MIG mode: never handed out whole (ask for a slice with --mig 3g.40gb|2g.20gb|1g.10gb)"* ]]
	run -75 gpuman pick --only 0
	[[ "$output" == *"can ever meet"*"in MIG mode"* ]]
	run -75 gpuman pick --mem 1G --only 0
	[[ "$output" == *"in MIG mode"* ]]
	run -75 gpuman run --only 0 -- true
	[[ "$output" == *"in MIG mode: never handed out whole"* ]]
	run -0 gpuman run -- true
	[ "$output" = "gpuman run: note: GPU 0 is in MIG mode: never handed out whole (ask for a slice with --mig PROFILE)" ]
	run -0 gpuman run --mig any -- true
	[ "$output" = "" ]
	cd "$BATS_TEST_TMPDIR"
	echo 'echo $GPUMAN_GPUS >>gpus.txt' >tasks.txt
	run -0 gpuman batch tasks.txt
	[[ "$output" == *"gpuman batch: note: GPU 0 is in MIG mode: never handed out whole"* ]]
	[ "$(cat gpus.txt)" = 1 ]

	# two whole-GPU jobs: the second waits for GPU 1, never takes GPU 0
	gpuman run -- gpuman-simload --mem 1G --util 50 --seconds 30 --record "$BATS_TEST_TMPDIR/rec" 3>&- &
	wait_lines 1 "$BATS_TEST_TMPDIR/rec"
	run -75 gpuman run -- true
	[[ "$output" == *"in MIG mode"* ]]
	grep -q "GPU-a1000000-5a5a-4c4c-8e8e-000000000001" "$BATS_TEST_TMPDIR/rec"
	kill %1
	wait
}

# Both 1g.10gb slices free: the example without its notebook.
two_free_slices() {
	scenario mig2 <"$MIG_SIM"
	jq 'del(.gpus[0].mig_devices[2].processes)' "$MIG_SIM" >"$GPUMAN_SIM"
}

# overlaps RECORD - "ok" when no two simload runs overlapped on one device
# (the records' "start|end PID UUID NS" lines) and every start has its end;
# else the first clash.
overlaps() {
	python3 - "$1" <<'PY'
import sys, collections
runs = {}
for line in open(sys.argv[1]):
    what, pid, uuid, ns = line.split()
    runs.setdefault((pid, uuid), {})[what] = int(ns)
by_dev = collections.defaultdict(list)
for (pid, uuid), r in runs.items():
    assert 'start' in r and 'end' in r, f"run {pid} on {uuid} has no start or end"
    by_dev[uuid].append((r['start'], r['end'], pid))
for uuid, iv in by_dev.items():
    iv.sort()
    for a, b in zip(iv, iv[1:]):
        if a[1] > b[0]:
            print(f"{uuid}: pid {a[2]} and pid {b[2]} overlapped"); sys.exit(0)
print("ok")
PY
}

@test "pick --mig prints the slice CUDA takes; a bad profile lists what exists" {
	run -0 gpuman pick --mig 1g.10gb
	[ "$output" = "$SLICE_1D" ]
	run -0 gpuman pick --mig 1g.10gb --json
	[ "$(jqr '.cuda_visible_devices')" = "$SLICE_1D" ]
	[ "$(jqr '.mig_device.profile')" = 1g.10gb ]
	[ "$(jqr '.gpus[0].index')" = 0 ]
	# any: by memory, the slice with most free
	run -0 gpuman pick --mig any
	[ "$output" = MIG-2b000000-1111-4000-8000-000000000002 ]

	run -75 gpuman pick --mig 1g.5gb
	[[ "${lines[0]}" == "gpuman pick: no GPU of this machine can ever meet the request:" ]]
	[[ "${lines[1]}" == "GPU 0 (NVIDIA A100-SXM4-80GB): no 1g.5gb slice (it has 3g.40gb|2g.20gb|1g.10gb)" ]]
	[[ "${lines[2]}" == "GPU 1 (NVIDIA A100-SXM4-80GB): not in MIG mode"* ]]
	run -75 gpuman run --mig 7g.80gb -- true
	[[ "$output" == *"no 7g.80gb slice (it has 3g.40gb|2g.20gb|1g.10gb)"* ]]
	run -2 gpuman pick --mig '1G'
	[[ "$output" == *"--mig '1G': not a MIG profile (e.g. 1g.10gb, 3g.40gb, or any)"* ]]
	run -2 gpuman pick --mig 1g.10gb --mem 2G
	[[ "$output" == *"--mem '2G': --mig takes a whole slice, never a share of it"* ]]
	run -2 gpuman run -n 2 --mig 1g.10gb -- true
	[[ "$output" == *"one slice per job"* ]]
	# a machine without MIG: said once for all its GPUs
	run -75 gpuman --sim "$GM_ROOT/examples/lab-8gpu.json" pick --mig 1g.10gb
	[ "${lines[1]}" = "all 8 GPUs: not in MIG mode (--mig asks for a slice of a GPU in MIG mode)" ]
	[ "${#lines[@]}" = 2 ]
}

@test "two jobs on two slices of one GPU, a third waits for a slice; each gets CUDA_VISIBLE_DEVICES=MIG-<uuid>" {
	two_free_slices
	local rec=$BATS_TEST_TMPDIR/rec job='echo "$CUDA_VISIBLE_DEVICES $GPUMAN_GPUS" >"$0"; exec gpuman-simload --mem 4G --util 50 --seconds "$1" --record "$2"'
	gpuman run --mig 1g.10gb -- sh -c "$job" "$BATS_TEST_TMPDIR/env1" 30 "$rec" 3>&- &
	gpuman run --mig 1g.10gb -- sh -c "$job" "$BATS_TEST_TMPDIR/env2" 30 "$rec" 3>&- &
	wait_lines 2 "$rec"
	# the two slices, one each; their GPU is GPU 0
	[ "$(cut -d' ' -f3 "$rec" | sort | tr '\n' ' ')" = "$SLICE_1C $SLICE_1D " ]
	[ "$(cat "$BATS_TEST_TMPDIR"/env1 "$BATS_TEST_TMPDIR"/env2 | sort | tr '\n' ' ')" = "$SLICE_1C 0 $SLICE_1D 0 " ]

	run -0 gpuman status --json
	[ "$(jqr '[.leases[].gpus[0].mig_uuid] | sort | join(" ")')" = "$SLICE_1C $SLICE_1D" ]
	# the lease file names the slice's GPU as exclusive: a reader older than
	# slices never places a job on the GPU
	[ "$(jqr '[.leases[] | "\(.kind) \(.gpus[0].uuid)"] | unique | join(",")')" = "exclusive GPU-a1000000-5a5a-4c4c-8e8e-000000000000" ]
	[ "$(jqr '[.processes[] | select(.mig_uuid == "'"$SLICE_1C"'") | .used_mib] | join(",")')" = 4096 ]
	run -0 gpuman status
	[[ "$output" == *"MIG 1g.10gb MIG-1c000000"*"4.0G / 9.5G"*"[leased: "* ]]

	# a third: none free now (75, saying who holds each) ...
	run -75 gpuman run --mig 1g.10gb -- true
	[[ "$output" == *"1g.10gb MIG-1c000000 leased by"*"1g.10gb MIG-1d000000 leased by"* ]]
	# ... so it waits, and runs on a slice as soon as one is free
	gpuman run --mig 1g.10gb --wait -- sh -c "$job" "$BATS_TEST_TMPDIR/env3" 0.2 "$rec" 3>&- &
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	run -0 gpuman status
	[[ "$output" == *"1. "*"1 MIG slice 1g.10gb"* ]]
	[ "$(wc -l <"$rec")" = 2 ]
	pkill -TERM -f "gpuman-simload --mem 4G --util 50 --seconds 30 --record $rec" || true
	wait
	[ "$(grep -c start "$rec")" = 3 ]
	[ "$(overlaps "$rec")" = ok ]
	[[ "$(cat "$BATS_TEST_TMPDIR/env3")" == MIG-1?000000-1111-4000-8000-00000000000?" 0" ]]
}

@test "batch and the queue hand out slices as units" {
	two_free_slices
	# batch's logs go under the working directory: this test's own, not
	# the checkout, which the ASan run of this suite shares at the same time
	cd "$BATS_TEST_TMPDIR"
	local rec=$BATS_TEST_TMPDIR/rec i
	for i in 1 2 3 4 5 6; do
		echo "gpuman-simload --mem 1G --util 10 --seconds 0.5 --record $rec"
	done >"$BATS_TEST_TMPDIR/tasks.txt"
	run -0 gpuman batch --mig 1g.10gb "$BATS_TEST_TMPDIR/tasks.txt"
	[ "$(grep -c start "$rec")" = 6 ]
	[ "$(cut -d' ' -f3 "$rec" | sort -u | tr '\n' ' ')" = "$SLICE_1C $SLICE_1D " ]
	[ "$(overlaps "$rec")" = ok ]

	: >"$rec"
	for i in 1 2 3; do
		gpuman submit --mig 1g.10gb -- gpuman-simload --mem 1G --util 10 --seconds 0.5 --record "$rec"
	done
	run -0 gpuman wait 1 2 3
	[ "$(grep -c start "$rec")" = 3 ]
	[ "$(cut -d' ' -f3 "$rec" | sort -u | tr '\n' ' ')" = "$SLICE_1C $SLICE_1D " ]
	[ "$(overlaps "$rec")" = ok ]
}

@test "two users never share a slice" {
	gm_user alice
	gm_user bob
	local shared
	shared=$(mktemp -d /tmp/gpuman-mig.XXXXXX)
	chmod 1777 "$shared"
	mkdir -m 1777 "$shared/state" "$shared/sim"
	install -m 666 /dev/null "$shared/sim/lock"
	install -m 644 "$MIG_SIM" "$shared/mig.json"
	export GPUMAN_SIM=$shared/mig.json GPUMAN_STATE_DIR=$shared/state GPUMAN_SIM_STATE=$shared/sim
	# one free 1g.10gb slice (1d): alice takes it
	as_user alice gpuman run --mig 1g.10gb -- sh -c 'echo $$ >"$1"; exec sleep 30' - "$shared/alice.pid" 3>&- &
	wait_for "[ -s '$shared/alice.pid' ]"
	run -75 as_user bob gpuman run --mig 1g.10gb -- true
	[[ "$output" == *"1g.10gb MIG-1d000000 leased by gmtest-alice"* ]]
	# other slices stay bob's to take
	run -0 as_user bob gpuman run --mig 2g.20gb -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
	[ "$output" = MIG-2b000000-1111-4000-8000-000000000002 ]
	kill "$(cat "$shared/alice.pid")"
	wait
	rm -rf "$shared"
}

# A GPU in MIG mode is judged per slice: a lease of a slice is used only by
# its processes in that slice, and a process outside gpuman is named with
# its slice, not counted against another slice's lease.
@test "waste judges a GPU in MIG mode per slice, naming the slice" {
	two_free_slices
	gpuman run --mig 1g.10gb -- gpuman-simload --mem 2G --util 50 --seconds 60 3>&- &
	BG_PIDS=$!
	gpuman run --mig 2g.20gb -- sleep 60 3>&- &
	BG_PIDS="$BG_PIDS $!"
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 2 ]'
	used=$(gpuman status --json | jq -r '.leases[] | .gpus[0].mig_uuid | select(startswith("MIG-1"))')
	free=$SLICE_1C
	[ "$used" != "$SLICE_1C" ] || free=$SLICE_1D
	CUDA_VISIBLE_DEVICES=$free gpuman-simload --mem 1G --util 50 --seconds 60 3>&- &
	outsider=$!
	BG_PIDS="$BG_PIDS $outsider"
	wait_for '[ "$(gpuman ps --json | jq length)" = 3 ]'
	me=$(id -un)
	run -3 gpuman waste --grace 0 --json
	# the job in its own slice uses its lease
	used_lease=$(gpuman status --json | jq -r '.leases[] | select(.gpus[0].mig_uuid == "'"$used"'") | .id')
	[ "$(jqr '[.waste[] | select(.lease == "'"$used_lease"'")] | length')" = 0 ]
	# the 2g.20gb lease idles: named by its slice
	[ "$(jqr '[.waste[] | select(.kind == "idle-lease") | .mig_uuid] | join(",")')" = MIG-2b000000-1111-4000-8000-000000000002 ]
	[ "$(jqr '.waste[] | select(.kind == "idle-lease") | .gpus | join(",")')" = 0 ]
	[[ "$(jqr '.waste[] | select(.kind == "idle-lease") | .what')" == *"has held slice 2g.20gb MIG-2b000000 of GPU 0 for"* ]]
	[[ "$(jqr '.waste[] | select(.kind == "idle-lease") | .advice')" == *"CUDA_VISIBLE_DEVICES=MIG-2b000000-1111-4000-8000-000000000002"* ]]
	# the process outside gpuman is in a slice nobody leased, not on my lease
	[ "$(jqr '.waste[] | select(.pid == '"$outsider"') | .kind')" = unleased ]
	[ "$(jqr '.waste[] | select(.pid == '"$outsider"') | .mig_uuid')" = "$free" ]
	[ "$(jqr '.waste[] | select(.pid == '"$outsider"') | .on_lease_of')" = null ]
	[[ "$(jqr '.waste[] | select(.pid == '"$outsider"') | .advice')" == *"gpuman run --mig 1g.10gb"* ]]
	# the simulated job on 3g.40gb is outside gpuman too, in its slice
	[ "$(jqr '.waste[] | select(.pid == 2500301) | .mig_uuid')" = "$SLICE_3G" ]
	run -3 gpuman waste --grace 0
	[[ "$output" == *"$outsider (slice 1g.10gb ${free:0:12} of GPU 0)"* ]]
	[[ "$output" == *"idle-lease lease "*"($me, sleep 60) has held slice 2g.20gb MIG-2b000000 of GPU 0"* ]]
}
