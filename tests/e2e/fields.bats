#!/usr/bin/env bats
# The GPU field table (lib/gpu_fields.c) drives every output: a reading added
# as one row there (fan speed, nvidia-smi's fan.speed) shows in the JSON,
# status's CSV and its --query-gpu spelling, info, serve's /metrics and its
# page, and crosses the broker's wire, with nothing else written for it.

load helpers

teardown() {
	local p
	for p in ${SERVE_PID:-} ${DAEMON:-}; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ -z "${SHARED:-}" ] || rm -rf "$SHARED"
	true
}

# fans - four_gpus with fans: A at 40 %, B at 65 %, C cooled by its chassis
# (no fan_pct: NVML answers NOT_SUPPORTED), D's fan stopped (0, a reading)
fans() {
	four_gpus
	jq '.gpus[0] += {fan_pct: 40, memory_utilization: 12} | .gpus[1] += {fan_pct: 65}
	  | .gpus[3] += {fan_pct: 0}' "$GPUMAN_SIM" >"$GPUMAN_SIM.new"
	mv "$GPUMAN_SIM.new" "$GPUMAN_SIM"
}

# status's CSV columns before the table gave them, in their order
OLD_COLUMNS=index,uuid,name,temperature_c,util_pct,memory_used_mib,memory_total_mib,memory_free_mib,power_w,power_limit_w,processes,leased_by,mig_devices,clock_sm_mhz,clock_memory_mhz,clock_graphics_mhz,max_clock_sm_mhz,max_clock_memory_mhz,max_clock_graphics_mhz,pci_bus_id

@test "fields: fan speed in the JSON of status and info: a number, 0 a reading, null where unreported" {
	fans
	run -0 gpuman status --json
	[ "$(jqr '[.gpus[].fan_speed_pct] | map(tostring) | join(",")')" = 40,65,null,0 ]
	run -0 gpuman info --json 2
	[ "$(jqr '.[0] | has("fan_speed_pct") and .fan_speed_pct == null')" = true ]
}

@test "fields: status's CSV has fan_speed_pct and util_memory_pct, after the columns it had, in their order" {
	fans
	run -0 gpuman status --format csv=index,fan_speed_pct,util_memory_pct
	[ "$output" = $'index,fan_speed_pct,util_memory_pct\n0,40,12\n1,65,0\n2,,0\n3,0,0' ]
	# every column with no list: the old ones first, where scripts read them
	run -0 gpuman status --format csv -i 0
	[ "${lines[0]}" = "$OLD_COLUMNS,util_memory_pct,fan_speed_pct" ]
	[[ "${lines[1]}" == 0,GPU-aaaaaaaa-0000-0000-0000-000000000000,"Test GPU A",40,10,*,12,40 ]]
	# each column once; the list an unknown one is refused with is the CSV's
	run -2 gpuman status --format csv=nope
	cols=$(sed -n "s/.*(columns: \(.*\))$/\1/p" <<<"$output")
	[ "$cols" = "$OLD_COLUMNS,util_memory_pct,fan_speed_pct" ]
	[ "$(tr , '\n' <<<"$cols" | sort | uniq -d)" = "" ]
	# --help names every column (a row added is documented)
	run -0 gpuman status --help
	for c in $(tr , ' ' <<<"$cols"); do
		[[ "$output" == *"$c"* ]] || { echo "status --help does not name the column $c"; false; }
	done
}

@test "fields: --query-gpu=fan.speed,utilization.memory in nvidia-smi's form, [N/A] where unreported" {
	fans
	run -0 gpuman status --query-gpu=index,fan.speed,utilization.memory --format=csv
	[ "$output" = $'index, fan.speed [%], utilization.memory [%]\n0, 40 %, 12 %\n1, 65 %, 0 %\n2, [N/A], 0 %\n3, 0 %, 0 %' ]
	run -0 gpuman status --query-gpu=fan.speed,index --format=csv,noheader,nounits -i 1,2
	[ "$output" = $'65, 1\n[N/A], 2' ]
	# nvidia-smi's other name for the power limit, as power.limit shows it
	run -0 gpuman status --query-gpu=enforced.power.limit --format=csv,noheader -i 1
	[ "$output" = "350.0 W" ]
	# every nvidia-smi name gpuman reads is in --help
	run -2 gpuman status --query-gpu=pstate --format=csv
	names=$(sed -n "s/.*(it has: \(.*\))$/\1/p" <<<"$output")
	[[ "$names" == *", fan.speed"* && "$names" == *", utilization.memory"* ]]
	run -0 gpuman status --help
	help=$(tr -s ' \n' ' ' <<<"$output")
	for n in ${names//,/}; do
		[[ "$help" == *"$n"* ]] || { echo "status --help does not name $n"; false; }
	done
}

@test "fields: info has a fan speed line, 'not supported' where the GPU has no fan" {
	fans
	run -0 gpuman info 0 2 3
	[ "$(grep -c '^  fan speed ' <<<"$output")" = 3 ]
	[[ "$output" == *$'  temperature           40 C\n  fan speed             40 %\n'* ]]
	[[ "$output" == *"  fan speed             not supported"* ]]
	[[ "$output" == *"  fan speed             0 %"* ]]
}

@test "fields: serve has DCGM_FI_DEV_FAN_SPEED for GPUs with a fan, and the page a fan speed line" {
	fans
	gpuman serve --listen 127.0.0.1:0 --interval 0.3 2>"$BATS_TEST_TMPDIR/serve.log" 3>&- &
	SERVE_PID=$!
	wait_for "grep -q '(port [0-9]*)' '$BATS_TEST_TMPDIR/serve.log'"
	URL=http://127.0.0.1:$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$BATS_TEST_TMPDIR/serve.log")
	wait_for "curl -sf '$URL/metrics' | grep -q '^DCGM_FI_DEV_FAN_SPEED{'"
	run -0 curl -sf "$URL/metrics"
	[[ "$output" == *$'# HELP DCGM_FI_DEV_FAN_SPEED Fan speed (in %).\n# TYPE DCGM_FI_DEV_FAN_SPEED gauge\n'* ]]
	[ "$(sed -n 's/^DCGM_FI_DEV_FAN_SPEED{gpu="\([0-9]\)".*} /\1=/p' <<<"$output" | tr '\n' ' ')" = "0=40 1=65 3=0 " ]
	if command -v promtool >/dev/null; then
		promtool check metrics <<<"$output"
	fi
	run -0 curl -sf "$URL/api/v1/status"
	[ "$(jqr '[.gpus[].fan_speed_pct] | map(tostring) | join(",")')" = 40,65,null,0 ]
	run -0 curl -sf "$URL/"
	[[ "$output" == *'var GM_FIELDS=['*'{"key":"fan_speed_pct","label":"fan speed","unit":"%"}'* ]]
	command -v chromium >/dev/null || skip "chromium is not installed: the page's DOM is not checked"
	timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
		--user-data-dir="$BATS_TEST_TMPDIR/chrome" --dump-dom "$URL/" >"$BATS_TEST_TMPDIR/dom.html" 2>/dev/null
	run -0 cat "$BATS_TEST_TMPDIR/dom.html"
	[ "$(grep -o '<span>fan speed</span><span>[^<]*</span>' <<<"$output" | tr '\n' ' ')" = \
		"<span>fan speed</span><span>40 %</span> <span>fan speed</span><span>65 %</span> <span>fan speed</span><span>0 %</span> " ]
}

@test "fields: fan speed crosses the broker's wire: a client without NVML gets it" {
	[ "$(id -u)" = 0 ] || skip "the broker runs as root"
	fans
	SHARED=$(mktemp -d /tmp/gpuman-fields.XXXXXX)
	export GPUMAN_BROKER=$SHARED/gpuman.sock
	gpuman daemon --socket "$GPUMAN_BROKER" --state "$SHARED/leases.json" 2>"$BATS_TEST_TMPDIR/daemon.log" &
	DAEMON=$!
	wait_for "grep -q serving '$BATS_TEST_TMPDIR/daemon.log'" || { cat "$BATS_TEST_TMPDIR/daemon.log"; false; }
	export GPUMAN_NVML=$SHARED/no-such-libnvidia-ml.so
	run -0 gpuman status --json
	[ "$(jqr '.reading.by')" = broker ]
	[ "$(jqr '[.gpus[].fan_speed_pct] | map(tostring) | join(",")')" = 40,65,null,0 ]
	run -0 gpuman status --query-gpu=index,fan.speed --format=csv,noheader -i 0,2
	[ "$output" = $'0, 40 %\n2, [N/A]' ]
}
