#!/usr/bin/env bats
# gpuman waste (and the waste section of status): each pattern against a
# machine that has it, asserting the pid, user, GPUs and advice a person
# reads; and other users' text shown escaped in every view.

load helpers

lab() {
	export GPUMAN_SIM="$GM_ROOT/examples/lab-8gpu.json"
}

# two_gpus - an empty machine for live jobs (simload) and leases.
two_gpus() {
	scenario two <<'JSON'
{ "gpus": [
    { "name": "Test GPU A", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
      "memory_total_mib": 16000, "memory_used_mib": 0, "utilization_gpu": 0, "processes": [] },
    { "name": "Test GPU B", "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000",
      "memory_total_mib": 16000, "memory_used_mib": 0, "utilization_gpu": 0, "processes": [] } ] }
JSON
}

teardown() {
	# alice's gpuman (as_user runs in a subshell: $! is not her process)
	for f in "${SHARED:-/nonexistent}"/pids/*; do
		[ -f "$f" ] && kill_ours -TERM "$(cat "$f")"
	done
	kill_ours -TERM ${BG_PIDS:-}
	wait 2>/dev/null || true
	[ -z "${SHARED:-}" ] || rm -rf "$SHARED"
}

@test "waste finds the seed problem: one process holding memory on six GPUs, computing on one" {
	lab
	run -3 gpuman waste
	[[ "$output" == *"hog        pid 3141592"*"holds 2.4G on GPUs 0,1,5,6,7 but computes only on 3"* ]]
	[[ "$output" == *"advice: give it only the GPU it uses: gpuman run --only 3 -- CMD, or CUDA_VISIBLE_DEVICES=GPU-b120a366"* ]]
	[[ "$output" == *"allow_growth"* ]]
	# busy processes on one GPU each are not hogs, and Xorg (graphics) is not waste
	[[ "$output" != *"hog        pid 2028329"* ]]
	[[ "$output" != *"2201234"* ]]
	run -3 gpuman waste --json
	[ "$(jqr '[.waste[] | select(.kind == "hog")] | length')" = 1 ]
	[ "$(jqr '.waste[] | select(.kind == "hog") | .pid')" = 3141592 ]
	[ "$(jqr '.waste[] | select(.kind == "hog") | .gpus | join(",")')" = 0,1,5,6,7 ]
	[ "$(jqr '.waste[] | select(.kind == "hog") | .compute_gpus | join(",")')" = 3 ]
	[ "$(jqr '.waste[] | select(.kind == "hog") | .held_mib')" = 2425 ]
	[ "$(jqr '[.waste[] | select(.kind == "unleased") | .pid] | join(",")')" = \
	  2028329,2031002,2450012,2999871,3141592 ]
	# -i and -u keep what touches those GPUs and users
	run -0 gpuman waste -i 2
	run -3 gpuman waste -i 7 --json
	[ "$(jqr '[.waste[].kind] | join(",")')" = hog,unleased ]
	run -0 gpuman waste -u root
	# status says it too, in one short section, and in its JSON
	run -0 gpuman status
	[[ "${lines[-4]}" == "waste (gpuman waste for advice):" ]]
	[[ "${lines[-3]}" == *"hog"*"pid 3141592"*"computes only on 3"* ]]
	[[ "${lines[-2]}" == *"unleased"*"5 processes on GPUs outside gpuman"* ]]
	# then the placement line, last
	[[ "${lines[-1]}" == "placement: advisory"* ]]
	run -0 gpuman status --json
	[ "$(jqr '[.waste[].kind] | unique | join(",")')" = hog,unleased ]
	[ "$(jqr '.processes[] | select(.pid == 3141592 and .gpu == 3) | .utilization_pct')" = 62 ]
	[ "$(jqr '.processes[] | select(.pid == 3141592 and .gpu == 7) | .utilization_pct')" = 0 ]
}

@test "a healthy machine has nothing to report: exit 0" {
	two_gpus
	run -0 gpuman waste
	[[ "$output" == "no waste found on 2 GPUs"* ]]
	run -0 gpuman waste -i 1 # the GPUs -i looks at
	[[ "$output" == "no waste found on 1 GPU ("* ]]
	run -0 gpuman waste --json
	[ "$(jqr '.waste | length')" = 0 ]
	run -0 gpuman status
	[[ "$output" != *waste* ]]
}

@test "an idle lease names its holder, the lease and the idle GPU; its working GPU is not named" {
	two_gpus
	gpuman run -n 2 -- sh -c 'CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES%%,*} exec gpuman-simload --mem 2G --util 40 --seconds 60' &
	BG_PIDS=$!
	wait_for '[ "$(gpuman ps --json | jq length)" = 1 ]'
	# younger than the grace period: not yet waste
	run -0 gpuman waste
	run -3 gpuman waste --grace 0
	me=$(id -un)
	lease=$(gpuman status --json | jq -r '.leases[0].id')
	busy=$(gpuman ps --json | jq -r '.[0].gpu')
	idle=$((1 - busy))
	[[ "$output" == *"idle-lease lease $lease of pid "*"($me, sh -c"*"has held GPU $idle for "*"with none of its processes on it"* ]]
	[[ "$output" == *"advice: ask for fewer GPUs next time (-n)"* ]]
	# the job's own process is leased: not 'outside gpuman', not a hog
	[[ "$output" != *unleased* && "$output" != *hog* ]]
	run -3 gpuman waste --grace 0 --json
	[ "$(jqr '.waste[0].kind')" = idle-lease ]
	[ "$(jqr '.waste[0].user')" = "$me" ]
	[ "$(jqr '.waste[0].lease')" = "$lease" ]
	[ "$(jqr '.waste[0].gpus | join(",")')" = "$idle" ]
	run -2 gpuman waste --grace soon
	[[ "$output" == *"--grace 'soon'"* ]]
}

@test "a process outside gpuman on a leased GPU is named with the lease holder; an idle one is a hog" {
	two_gpus
	gpuman run --only 1 -- sleep 60 &
	BG_PIDS=$!
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	CUDA_VISIBLE_DEVICES=GPU-bbbbbbbb gpuman-simload --mem 3G --util 0 --seconds 60 &
	BG_PIDS="$BG_PIDS $!"
	pid=$!
	wait_for '[ "$(gpuman ps --json | jq length)" = 1 ]'
	me=$(id -un)
	run -3 gpuman waste
	[[ "$output" == *"hog        pid $pid ($me, gpuman-simload --mem 3G"*") holds 3.0G on GPU 1 and computed nothing in the last 10s"* ]]
	[[ "$output" == *"advice: if it is idle"*"end it (kill $pid)"* ]]
	[[ "$output" == *"unleased   pid $pid (GPU 1, leased to $me) outside gpuman"* ]]
	run -3 gpuman waste --json
	[ "$(jqr '.waste[] | select(.kind == "unleased") | .on_lease_of')" = "$me" ]
}

@test "per-process utilization missing from the driver: no hog is guessed, a note says why" {
	scenario nopu <<'JSON'
{ "missing_symbols": ["nvmlDeviceGetProcessUtilization"],
  "gpus": [ { "name": "Old", "memory_total_mib": 8000, "memory_used_mib": 0,
              "utilization_gpu": 0,
              "processes": [ { "pid": 3000009, "used_mib": 500, "utilization": 0 } ] } ] }
JSON
	run -3 gpuman waste
	[[ "$output" != *hog* ]]
	[[ "$output" == *"note: GPU 0: per-process utilization not available"*FUNCTION_NOT_FOUND* ]]
	run -0 gpuman status --json
	[ "$(jqr '.processes[0].utilization_pct')" = null ]
}

# Another user's command line and lease text reach every view escaped.
@test "another user's escape sequences are shown escaped in status, ps and waste" {
	gm_user alice
	SHARED=$(mktemp -d /tmp/gm-waste.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim" "$SHARED/pids"
	export GPUMAN_STATE_DIR="$SHARED/state" GPUMAN_SIM_STATE="$SHARED/sim"
	two_gpus
	cp "$GPUMAN_SIM" "$SHARED/two.json" && chmod 644 "$SHARED/two.json"
	export GPUMAN_SIM="$SHARED/two.json"
	evil=$'x\e]0;pwned\a\e[2J\e[31mred\r'
	as_user alice sh -c 'echo $$ >"$0"; umask 077; exec "$@"' "$SHARED/pids/job" gpuman run -- bash -c \
		'exec -a "$0" gpuman-simload --mem 1G --util 0 --seconds 60' "$evil" &
	BG_PIDS=$!
	wait_for '[ "$(gpuman ps --json | jq length)" = 1 ]'
	# and a waiting ticket of hers: both GPUs asked for, one is taken
	as_user alice sh -c 'echo $$ >"$0"; exec "$@"' "$SHARED/pids/waiter" \
		gpuman run -n 2 --wait -- sh -c true "$evil" 2>/dev/null &
	BG_PIDS="$BG_PIDS $!"
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	for view in status ps "waste --grace 0"; do
		run gpuman $view
		[[ "$output" != *$'\e'* && "$output" != *$'\a'* && "$output" != *$'\r'* ]]
		[[ "$output" == *'x\e]0;pwned\x07\e[2J\e[31mred\r'* ]]
		[[ "$output" == *gmtest-alice* ]]
	done
	run gpuman status
	[[ "$output" == *"1. gmtest-alice, 2 GPUs exclusive"*'sh -c true x\e]0;pwned'* ]]
	# JSON keeps the text as it is (jq escapes it)
	run -0 gpuman ps --json
	[ "$(jqr '.[0].command | startswith("x\u001b]0;pwned")')" = true ]
}

@test "timeline: hogs develop as the machine changes, and go; --format csv has each finding" {
	cp "$GM_ROOT/examples/timeline.json" "$BATS_TEST_TMPDIR/timeline.json"
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/timeline.json
	aged() { touch -d "@$(($(date +%s) - $1))" "$GPUMAN_SIM"; }
	aged 5 # everyone computes: only 'outside gpuman'
	run -3 gpuman waste --format csv=kind,pid,gpus
	[ "$output" = $'kind,pid,gpus\nunleased,4100001,0 1\nunleased,4100002,2' ]
	aged 25 # the training job idles on GPU 1, the notebook on GPU 2
	run -3 gpuman waste --format csv=kind,pid,gpus,compute_gpus,held_mib
	[[ "${lines[1]}" == hog,4100001,1,0,9000 && "${lines[2]}" == hog,4100002,2,,3000 ]]
	run -3 gpuman waste --format csv
	[ "${lines[0]}" = kind,user,pid,command,lease,gpus,compute_gpus,held_mib,held_s,on_lease_of,what,advice ]
	[[ "${lines[1]}" == hog,,4100001,,,1,0,9000,,,"pid 4100001 (user unknown) holds 8.8G on GPU 1 but computes only on 0,"* ]]
	[[ "${lines[1]}" == *'"give it only the GPU it uses: gpuman run --only 0 -- CMD, '* ]]
	aged 45 # the training job has ended; the notebook still idles
	run -3 gpuman waste --format csv=kind,pid
	[ "$output" = $'kind,pid\nhog,4100002\nunleased,4100002' ]
	# an idle lease develops as it ages past the grace period
	gpuman run --only 3 -- sleep 60 3>&- >/dev/null 2>&1 &
	BG_PIDS=$!
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	run -3 gpuman waste --grace 1h --format csv=kind,gpus
	[[ "$output" != *idle-lease* ]]
	wait_for 'gpuman waste --grace 2s --format csv=kind | grep -qx idle-lease'
	run -3 gpuman waste --grace 2s --format csv=kind,gpus,held_s
	[[ "$output" == *$'\nidle-lease,3,'[2-9]* ]]
	run -2 gpuman waste --format csv=kind,nope
	[[ "$output" == *"unknown column 'nope' (columns: kind,user,pid,"* ]]
}
