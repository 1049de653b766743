#!/usr/bin/env bats
# Part of the machine and other formats: -i, -u, --format csv, ps's UTIL
# column and status --watch.

load helpers

@test "-i picks GPUs by index, range or UUID prefix in status and ps; a wrong one is a usage error" {
	four_gpus
	run -0 gpuman status -i 1,dddd
	[[ "$output" == *"Test GPU B"* && "$output" == *"Test GPU D"* ]]
	[[ "$output" != *"Test GPU A"* && "$output" != *"Test GPU C"* ]]
	run -0 gpuman ps -i 3 --json
	[ "$(jqr '[.[].pid] | join(",")')" = 3000002,3000003 ]
	run -2 gpuman ps -i 7
	[[ "$output" == *"-i '7': names no GPU"* ]]
	# ranges of indices
	run -0 gpuman status --json -i 1-2,dddd
	[ "$(jqr '[.gpus[].index] | join(",")')" = 1,2,3 ]
	run -2 gpuman ps -i 5-9
	[[ "$output" == *"-i '5-9': names no GPU"* ]]
	run -2 gpuman status -i 3-1
	[[ "$output" == *"-i '3-1': a range of indices runs upwards (1-3)"* ]]
	run -2 gpuman status -u no-such-user-here
	[[ "$output" == *"-u 'no-such-user-here': no such user"* ]]
}

@test "ps shows each process's own utilization; CSV with chosen columns" {
	four_gpus
	run -0 gpuman ps
	[[ "${lines[0]}" == *UTIL* ]]
	[[ "$output" == *"3000001"*"3.9G"*" 20%"* ]]
	[[ "$output" == *"3000002"*"8.8G"*"  0%"* ]]
	run -0 gpuman ps --format csv=pid,gpu,util_pct,memory_mib
	[ "${lines[0]}" = pid,gpu,util_pct,memory_mib ]
	[ "${lines[1]}" = 3000001,1,20,4000 ]
	[ "${lines[3]}" = 3000003,3,0, ]
	run -0 gpuman status --format csv=index,name,memory_free_mib,processes -i 1,3
	[ "$output" = $'index,name,memory_free_mib,processes\n1,Test GPU B,20000,1\n3,Test GPU D,7000,2' ]
	run -2 gpuman status --format csv=index,nope
	[[ "$output" == *"unknown column 'nope' (columns: index,uuid,name,"* ]]
	run -2 gpuman ps --format xml
	[[ "$output" == *"--format 'xml': use csv"* ]]
}

@test "-u shows only that user's processes, leases and GPUs" {
	four_gpus
	gpuman run --only 2 -- gpuman-simload --mem 1G --util 30 --seconds 60 &
	job=$!
	wait_for '[ "$(gpuman ps -u "$(id -un)" --json | jq length)" = 1 ]'
	run -0 gpuman ps -u "$(id -un)" --format csv=gpu,user,util_pct
	[ "$output" = "gpu,user,util_pct"$'\n'"2,$(id -un),30" ]
	run -0 gpuman status -u "$(id -u)"
	[[ "$output" == *"Test GPU C"*"[leased: $(id -un)]"* ]]
	[[ "$output" != *"Test GPU B"* ]]
	kill $job; wait $job || true
}

@test "status --watch prints the machine again every interval, and follows it" {
	four_gpus
	gpuman status --watch 0.2 >"$BATS_TEST_TMPDIR/watch" 2>&1 &
	w=$!
	wait_for '[ "$(grep -c "^---- " "$BATS_TEST_TMPDIR/watch")" -ge 2 ]'
	gpuman-simload --mem 2G --util 10 --seconds 60 >/dev/null 2>&1 &
	load=$!
	wait_for 'grep -q "pid $load\|$(id -un) $load" "$BATS_TEST_TMPDIR/watch"'
	kill $load; wait $load || true
	kill -INT $w
	# wait here, not under run: a subshell cannot wait for our child
	st=0
	wait $w || st=$?
	[ "$st" = 0 ]
	run -2 gpuman status --watch=0
	[[ "$output" == *"give 0.1 to 86400 seconds"* ]]
}

@test "status --json honours -i and -u as the table and CSV do (GPUs, processes, leases, waste)" {
	four_gpus
	run -0 gpuman status --json -i 1,dddd
	[ "$(jqr '[.gpus[].index] | join(",")')" = 1,3 ]
	[ "$(jqr '[.processes[].pid] | join(",")')" = 3000001,3000002,3000003 ]
	run -0 gpuman status --json -i 2
	[ "$(jqr '[.gpus[].index] | join(",")')" = 2 ]
	[ "$(jqr '.processes | length')" = 0 ]
	gpuman run --only 2 -- gpuman-simload --mem 1G --util 30 --seconds 60 &
	job=$!
	wait_for '[ "$(gpuman ps -u "$(id -un)" --json | jq length)" = 1 ]'
	run -0 gpuman status --json -u "$(id -un)"
	[ "$(jqr '[.gpus[].index] | join(",")')" = 2 ]
	[ "$(jqr '[.processes[].gpu] | join(",")')" = 2 ]
	[ "$(jqr '[.leases[].user] | unique | join(",")')" = "$(id -un)" ]
	# the same GPUs as the CSV and the table show
	run -0 gpuman status -u "$(id -un)" --format csv=index
	[ "$output" = $'index\n2' ]
	# a lease on a GPU left out by -i is left out too
	run -0 gpuman status --json -i 0
	[ "$(jqr '.leases | length')" = 0 ]
	[ "$(jqr '[.gpus[].index] | join(",")')" = 0 ]
	kill $job; wait $job || true
}

@test "status --query-gpu=FIELDS --format=csv[,noheader][,nounits] (nvidia-smi's spelling) gives status's CSV in nvidia-smi's form" {
	four_gpus
	run -0 gpuman status --format csv=index,name,memory_used_mib,memory_total_mib,util_pct,power_w,temperature_c -i 1,3
	own=$output
	run -0 gpuman status --query-gpu=index,name,memory.used,memory.total,utilization.gpu,power.draw,temperature.gpu --format=csv,noheader,nounits -i 1,3
	# the same values, nvidia-smi's ", " between them, no header
	[ "$output" = "$(tail -n +2 <<<"$own" | sed 's/,/, /g')" ]
	[ "$output" = $'1, Test GPU B, 4000, 24000, 70, 300.0, 70\n3, Test GPU D, 9000, 16000, 5, 60.0, 35' ]
	run -0 gpuman status --query-gpu=index,memory.used,utilization.gpu,power.draw,uuid --format=csv -i 1
	[ "${lines[0]}" = "index, memory.used [MiB], utilization.gpu [%], power.draw [W], uuid" ]
	[ "${lines[1]}" = "1, 4000 MiB, 70 %, 300.0 W, GPU-bbbbbbbb-0000-0000-0000-000000000000" ]
	# nvidia-smi's other names and any case; pci.bus_id as status's pci_bus_id
	run -0 gpuman status --query-gpu=INDEX,gpu_name,pci.bus_id --format=csv,noheader -i 0
	[ "$output" = "$(gpuman status --format csv=index,name,pci_bus_id -i 0 | tail -1 | sed 's/,/, /g')" ]
	[[ "$output" == "0, Test GPU A, "*:* ]]
	# a field gpuman does not read is refused, naming it
	run -2 gpuman status --query-gpu=index,pstate --format=csv
	[[ "$output" == *"--query-gpu: 'pstate' is not a field gpuman reads"* ]]
	run -2 gpuman status --query-gpu=memory.usd --format=csv
	[[ "$output" == *"(did you mean 'memory.used'?)"* ]]
	# noheader on gpuman's own CSV, as in nvidia-smi; anything else after csv is refused
	run -0 gpuman status --format=csv,noheader -i 2
	[[ "$output" == 2,GPU-cccccccc-* ]]
	[ "${#lines[@]}" = 1 ]
	run -2 gpuman status --format=csv,fancy
	[[ "$output" == *"after csv only noheader and nounits"* ]]
}

@test "status -l SEC and --loop=SEC (nvidia-smi's) repeat as --watch does" {
	four_gpus
	for opt in "-l 0.2" "--loop=0.2"; do
		# shellcheck disable=SC2086
		gpuman status $opt --query-gpu=index,memory.used --format=csv,noheader -i 1 >"$BATS_TEST_TMPDIR/loop" 2>&1 &
		w=$!
		wait_for '[ "$(grep -c "^1, 4000 MiB" "$BATS_TEST_TMPDIR/loop")" -ge 2 ]'
		kill -INT $w
		st=0
		wait $w || st=$?
		[ "$st" = 0 ]
	done
	run -0 gpuman status --help
	[[ "$output" == *"not gpustat's"* ]]
}
