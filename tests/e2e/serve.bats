#!/usr/bin/env bats
# gpuman serve against real clients: curl, promtool, a real Prometheus
# scraping it, headless Chromium showing its page, and hostile clients.

load helpers

# serve_start [ARGS] - gpuman serve on a free loopback port, snapshots every
# 0.3 s; sets SERVE_PID and URL.
serve_start() {
	gpuman serve --listen 127.0.0.1:0 --interval 0.3 "$@" \
		2>"$BATS_TEST_TMPDIR/serve.log" 3>&- &
	SERVE_PID=$!
	wait_for "grep -q '(port [0-9]*)' '$BATS_TEST_TMPDIR/serve.log'" || {
		cat "$BATS_TEST_TMPDIR/serve.log"; return 1; }
	URL=http://127.0.0.1:$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$BATS_TEST_TMPDIR/serve.log")
}

teardown() {
	local p
	for p in ${SERVE_PID:-} ${PROM_PID:-} ${JOB_PIDS:-}; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	true
}

# four_gpus_clocked - four_gpus with clocks: A and B busy, C idle, D
# reporting none (so its series are left out, never 0)
four_gpus_clocked() {
	four_gpus
	jq '.gpus[0] += {clock_sm_mhz: 1410, clock_graphics_mhz: 1410, clock_memory_mhz: 1215,
	                 max_sm_clock_mhz: 1410, max_clock_memory_mhz: 1215}
	  | .gpus[1] += {clock_sm_mhz: 1860, clock_graphics_mhz: 1845, clock_memory_mhz: 9501,
	                 max_sm_clock_mhz: 1980, max_clock_memory_mhz: 9751}
	  | .gpus[2] += {clock_sm_mhz: 300, clock_graphics_mhz: 300, clock_memory_mhz: 405,
	                 max_sm_clock_mhz: 1770, max_clock_memory_mhz: 7000}
	  | .gpus[3] += {max_sm_clock_mhz: null}' "$GPUMAN_SIM" >"$GPUMAN_SIM.new"
	mv "$GPUMAN_SIM.new" "$GPUMAN_SIM"
}

# metric NAME GPU - the value of NAME for one GPU in $output
metric() {
	printf '%s\n' "$output" | sed -n "s/^$1{gpu=\"$2\",.*} //p"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# hold_lease GPU CMD... - a job holding GPU through gpuman run, in the background
hold_lease() {
	local gpu=$1; shift
	gpuman run --only "$gpu" -- "$@" 3>&- >/dev/null 2>&1 &
	JOB_PIDS="${JOB_PIDS:-} $!"
	wait_for "gpuman status --json | jq -e '.leases | map(.gpus[].index) | index($gpu)' >/dev/null"
}

@test "serve: /metrics has dcgm-exporter's names with the scenario's values; promtool finds it clean" {
	four_gpus_clocked
	serve_start
	run -0 curl -sf "$URL/metrics"
	[ "$(metric DCGM_FI_DEV_FB_USED 1)" = 4000 ]
	[ "$(metric DCGM_FI_DEV_FB_FREE 3)" = 7000 ]
	[ "$(metric DCGM_FI_DEV_FB_TOTAL 0)" = 16000 ]
	[ "$(metric DCGM_FI_DEV_GPU_UTIL 1)" = 70 ]
	[ "$(metric DCGM_FI_DEV_POWER_USAGE 1)" = 300.000 ]
	[ "$(metric DCGM_FI_DEV_POWER_MGMT_LIMIT 1)" = 350.000 ]
	[ "$(metric DCGM_FI_DEV_GPU_TEMP 2)" = 30 ]
	[ "$(metric DCGM_FI_DEV_SM_CLOCK 1)" = 1860 ]
	[ "$(metric DCGM_FI_DEV_MEM_CLOCK 1)" = 9501 ]
	[ "$(metric DCGM_FI_DEV_MAX_SM_CLOCK 1)" = 1980 ]
	[ "$(metric DCGM_FI_DEV_MAX_MEM_CLOCK 1)" = 9751 ]
	[ "$(metric gpuman_gpu_graphics_clock_mhz 1)" = 1845 ]
	[ "$(metric gpuman_gpu_max_graphics_clock_mhz 1)" = 1980 ]
	[ "$(metric DCGM_FI_DEV_SM_CLOCK 2)" = 300 ]
	# GPU D reports no clock: no series, rather than a 0
	[[ "$output" != *'DCGM_FI_DEV_SM_CLOCK{gpu="3"'* && "$output" != *'DCGM_FI_DEV_MAX_SM_CLOCK{gpu="3"'* ]]
	[[ "$output" == *'DCGM_FI_DEV_FB_USED{gpu="0",uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000",'*'name="Test GPU A"'* ]]
	[[ "$output" == *'gpuman_snapshot_ok{hostname="'*'"} 1'* ]]
	# the waste finder: GPU D's process holds 9000 MiB there and computes nothing
	[[ "$output" == *'gpuman_waste_findings{kind="hog",hostname="'*'"} 1'* ]]
	[[ "$output" == *'gpuman_waste_findings{kind="idle-lease",hostname="'*'"} 0'* ]]
	[[ "$output" == *'gpuman_waste_held_mib{kind="hog",user="",pid="3000002",gpus="3",'*'} 9000'* ]]
	[[ "$output" == *'gpuman_nvml_errors_total{hostname="'*'"} 0'* ]]
	printf '%s\n' "$output" | promtool check metrics
	# HEAD: the headers without the body
	run -0 curl -sfI "$URL/metrics"
	[[ "$output" == *"text/plain; version=0.0.4"* ]]
}

@test "serve: MIG slices have series of their own with their profile; a GPU without slices has none" {
	export GPUMAN_SIM="$GM_ROOT/examples/mig-a100.json"
	serve_start
	run -0 curl -sf "$URL/metrics"
	slice() { printf '%s\n' "$output" | sed -n "s/^$1{gpu=\"0\",.*mig_uuid=\"$2\",.*} //p"; }
	# the training job's 30720 MiB plus the slice's own 13
	[ "$(slice gpuman_mig_fb_used MIG-3a000000-1111-4000-8000-000000000001)" = 30733 ]
	[ "$(slice gpuman_mig_fb_capacity MIG-3a000000-1111-4000-8000-000000000001)" = 40192 ]
	[ "$(slice gpuman_mig_fb_free MIG-1d000000-1111-4000-8000-000000000004)" = 9722 ]
	[[ "$output" == *'mig_uuid="MIG-1c000000-1111-4000-8000-000000000003",gpu_i_profile="1g.10gb",gpu_i_id="13"}'* ]]
	[ "$(printf '%s\n' "$output" | grep -c '^gpuman_mig_fb_used{')" = 4 ]
	[[ "$output" != *'gpuman_mig_fb_used{gpu="1"'* ]]
	printf '%s\n' "$output" | promtool check metrics
}

@test "serve: a lease and the waiting line appear in /metrics within an interval" {
	four_gpus
	serve_start
	hold_lease 2 sleep 60
	wait_for "curl -sf '$URL/metrics' | grep -q '^gpuman_gpu_leases{gpu=\"2\",.*} 1$'"
	run -0 curl -sf "$URL/metrics"
	[ "$(metric gpuman_gpu_leases 0)" = 0 ]
	[[ "$output" == *'gpuman_lease_gpus{lease="'*'",user="root",kind="exclusive",gpus="2",'*'} 1'* ]]
	[[ "$output" == *'gpuman_leases{kind="exclusive",hostname="'*'"} 1'* ]]
	# a second request for GPU 2 waits in line
	gpuman run --only 2 --wait -- true 3>&- >/dev/null 2>&1 &
	JOB_PIDS="$JOB_PIDS $!"
	wait_for "curl -sf '$URL/metrics' | grep -q '^gpuman_line_length{.*} 1$'"
	run -0 curl -sf "$URL/metrics"
	[[ "$output" == *'gpuman_line_requests{user="root",'*'} 1'* ]]
	[[ "$output" == *'gpuman_line_wait_seconds{position="1",user="root",'* ]]
}

@test "serve: the queue of the user it runs as, by state" {
	four_gpus
	# every GPU leased: submitted jobs wait
	gpuman run -n 4 -- sleep 60 3>&- >/dev/null 2>&1 &
	JOB_PIDS=$!
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	serve_start
	run -0 curl -sf "$URL/metrics"
	[[ "$output" == *'gpuman_queue_jobs{user="'"$(id -un)"'",state="queued",hostname="'*'"} 0'* ]]
	gpuman submit -- true >/dev/null
	gpuman submit -n 2 -- true >/dev/null
	wait_for "curl -sf '$URL/metrics' | grep -q '^gpuman_queue_jobs{.*state=\"queued\".*} 2$'"
	run -0 curl -sf "$URL/metrics"
	[[ "$output" == *'gpuman_queue_jobs{user="'"$(id -un)"'",state="running",hostname="'*'"} 0'* ]]
	gpuman cancel 1 2 >/dev/null
}

@test "serve: every metric the Grafana dashboard queries is served" {
	four_gpus_clocked
	hold_lease 2 sleep 60
	gpuman run --only 2 --wait -- true 3>&- >/dev/null 2>&1 &
	JOB_PIDS="$JOB_PIDS $!"
	serve_start
	wait_for "curl -sf '$URL/metrics' | grep -q '^gpuman_line_wait_seconds{'"
	run -0 curl -sf "$URL/metrics"
	metrics=$output
	names=$(jq -r '.panels[].targets[].expr, .templating.list[].definition // empty' \
		"$GM_ROOT/contrib/grafana-dashboard.json" | grep -oE '(DCGM_FI_[A-Z_]+|gpuman_[a-z_]+)' | sort -u)
	[ "$(echo "$names" | wc -l)" -ge 10 ]
	for n in $names; do
		[[ "$metrics" == *$'\n'"$n{"* ]] || { echo "dashboard queries $n, not served"; false; }
	done
}

@test "serve: the systemd unit passes systemd-analyze verify" {
	command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"
	# the unit as installed, pointing at this build's program
	sed "s#/usr/local/bin/gpuman#$GM_BUILD/gpuman#" "$GM_ROOT/contrib/gpuman-serve.service" \
		>"$BATS_TEST_TMPDIR/gpuman-serve.service"
	run systemd-analyze verify "$BATS_TEST_TMPDIR/gpuman-serve.service"
	echo "$output"
	[ "$status" = 0 ]
	[[ "$output" != *gpuman-serve.service* ]]
}

@test "serve: a real Prometheus scrapes it and returns every GPU's series with the scenario's values" {
	command -v prometheus >/dev/null || skip "prometheus is not installed (Debian package prometheus)"
	four_gpus_clocked
	serve_start
	local pport q
	pport=$(free_port)
	cat >"$BATS_TEST_TMPDIR/prometheus.yml" <<-EOF
	global: { scrape_interval: 1s, evaluation_interval: 1s }
	scrape_configs:
	  - job_name: gpuman
	    static_configs: [ { targets: [ "${URL#http://}" ] } ]
	EOF
	promtool check config "$BATS_TEST_TMPDIR/prometheus.yml" >/dev/null
	prometheus --config.file="$BATS_TEST_TMPDIR/prometheus.yml" \
		--storage.tsdb.path="$BATS_TEST_TMPDIR/tsdb" \
		--web.listen-address="127.0.0.1:$pport" >"$BATS_TEST_TMPDIR/prom.log" 2>&1 3>&- &
	PROM_PID=$!
	q="http://127.0.0.1:$pport/api/v1/query?query="
	# Prometheus starts, scrapes, and answers: 30 s at most on a loaded machine.
	for _ in $(seq 150); do
		[ "$(curl -sf "${q}DCGM_FI_DEV_FB_USED" | jq '.data.result | length')" = 4 ] && break
		sleep 0.2
	done
	run -0 curl -sf "${q}DCGM_FI_DEV_FB_USED"
	[ "$(jqr '[.data.result[] | "\(.metric.gpu)=\(.value[1])"] | sort | join(" ")')" = \
	  "0=1000 1=4000 2=500 3=9000" ]
	[ "$(jqr '[.data.result[] | .metric.uuid] | sort | .[1]')" = GPU-bbbbbbbb-0000-0000-0000-000000000000 ]
	run -0 curl -sf "${q}DCGM_FI_DEV_GPU_UTIL"
	[ "$(jqr '[.data.result[] | "\(.metric.gpu)=\(.value[1])"] | sort | join(" ")')" = "0=10 1=70 2=0 3=5" ]
	run -0 curl -sf "${q}DCGM_FI_DEV_POWER_USAGE"
	[ "$(jqr '[.data.result[] | "\(.metric.gpu)=\(.value[1])"] | sort | join(" ")')" = "0=100 1=300 2=20 3=60" ]
	run -0 curl -sf "${q}DCGM_FI_DEV_SM_CLOCK"
	[ "$(jqr '[.data.result[] | "\(.metric.gpu)=\(.value[1])"] | sort | join(" ")')" = "0=1410 1=1860 2=300" ]
	run -0 curl -sf "${q}DCGM_FI_DEV_MEM_CLOCK"
	[ "$(jqr '[.data.result[] | "\(.metric.gpu)=\(.value[1])"] | sort | join(" ")')" = "0=1215 1=9501 2=405" ]
	run -0 curl -sf "${q}up"
	[ "$(jqr '.data.result[0].value[1]')" = 1 ]
}

@test "serve: /api/v1/status is the status --json document" {
	four_gpus
	hold_lease 3 sleep 60
	serve_start
	run -0 curl -sf "$URL/api/v1/status"
	served=$output
	run -0 gpuman status --json
	[ "$(jq -S '.gpus' <<<"$served")" = "$(jqr -S '.gpus')" ]
	[ "$(jq -S '.leases | map(del(.command))' <<<"$served")" = "$(jqr -S '.leases | map(del(.command))')" ]
	[ "$(jq -r '.leases[0].user' <<<"$served")" = root ]
}

@test "serve: command lines show only the program, never its arguments" {
	four_gpus
	hold_lease 1 gpuman-simload --mem 1G --util 10 --seconds 60 --record "$BATS_TEST_TMPDIR/hunter2-secret"
	wait_for "gpuman status --json | jq -e '.processes | map(.command) | join(\" \") | test(\"hunter2\")' >/dev/null"
	# and one outside gpuman, idle: a hog and unleased, whose findings quote it
	# (a finding's sentence keeps the first 95 characters of a command line,
	# so the secret comes first: test 103's directory made it "hunter2-to")
	gpuman-simload --record "$BATS_TEST_TMPDIR/hunter2-too" --mem 1G --util 0 --seconds 60 3>&- &
	JOB_PIDS="$JOB_PIDS $!"
	wait_for "gpuman status --json | jq -e '.waste | map(.what) | join(\" \") | test(\"hunter2-too\")' >/dev/null"
	serve_start
	run -0 curl -sf "$URL/api/v1/status"
	[[ "$output" == *'"command":"gpuman-simload"'* ]]
	[[ "$(jqr '.waste | map(select(.kind == "unleased")) | length')" -ge 1 ]]
	[[ "$output" != *hunter2* ]]
	run -0 curl -sf "$URL/"
	[[ "$output" != *hunter2* ]]
	run -0 curl -sf "$URL/metrics"
	[[ "$output" != *hunter2* ]]
}

@test "serve: headless Chromium shows every GPU, a lease made during the test, and takes a screenshot" {
	command -v chromium >/dev/null || skip "chromium is not installed (Debian package chromium)"
	four_gpus_clocked
	serve_start
	hold_lease 2 sleep 60
	sleep 0.7 # one interval: the page is rendered with the lease
	local chrome=(chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage
		--user-data-dir="$BATS_TEST_TMPDIR/chrome")
	timeout 120 "${chrome[@]}" --dump-dom "$URL/" >"$BATS_TEST_TMPDIR/dom.html" 2>/dev/null
	run -0 cat "$BATS_TEST_TMPDIR/dom.html"
	for i in 0 1 2 3; do
		[[ "$output" == *"id=\"gpu-$i\""* ]]
	done
	[[ "$output" == *"GPU 1 · Test GPU B"* ]]
	[[ "$output" == *"3.9 GiB / 23.4 GiB"* ]]
	[[ "$output" == *"<span>SM 1860 / 1980 MHz</span><span>memory 9501 / 9751 MHz</span>"* ]]
	[[ "$output" == *"leased by root (exclusive"* ]]
	[[ "$output" == *"pid 3000001"* ]]
	# the waste finder's hog: GPU D's process holds 9000 MiB and computes nothing
	[[ "$output" == *"<td>hog</td><td>?</td><td>3000002</td><td>3</td><td>pid 3000002 (user unknown) holds 8.8G on GPU 3"* ]]
	# a phone-sized screenshot: a real PNG with something drawn on it
	timeout 120 "${chrome[@]}" --window-size=412,915 --screenshot="$BATS_TEST_TMPDIR/page.png" \
		"$URL/" >/dev/null 2>&1
	[ "$(head -c 8 "$BATS_TEST_TMPDIR/page.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ]
	[ "$(stat -c %s "$BATS_TEST_TMPDIR/page.png")" -gt 10000 ]
}

@test "serve: read-only: other methods get 405 with Allow, unknown paths 404" {
	four_gpus
	serve_start
	for m in POST PUT DELETE PATCH OPTIONS; do
		run -0 curl -s -o /dev/null -w '%{http_code}' -X "$m" "$URL/metrics"
		[ "$output" = 405 ]
	done
	run -0 curl -s -D - -o /dev/null -X POST -d x=1 "$URL/"
	[[ "$output" == *"Allow: GET, HEAD"* ]]
	run -0 curl -s -o /dev/null -w '%{http_code}' "$URL/nope"
	[ "$output" = 404 ]
	run -0 curl -s -o /dev/null -w '%{http_code}' "$URL/api/v1/history"
	[ "$output" = 200 ]
}

@test "serve: 1000 idle connections, slowloris, 10 MB requests, garbage: others still answered, memory bounded" {
	four_gpus
	serve_start
	run -0 python3 "$BATS_TEST_DIRNAME/helpers/hostile.py" "${URL##*:}" "$SERVE_PID"
	echo "# hostile clients: $output" >&3
	[ "$(jqr .idle_open)" = 1000 ]
	[ "$(jqr .good_ok)" = 20 ]
	[ "$(jqr .big_post)" = 405 ]
	[ "$(jqr '.big_post_s < 2')" = true ]
	[ "$(jqr .big_get_body)" = 413 ]
	# a 10 MB header is refused (431), or the connection dropped
	[[ "$(jqr .big_header)" =~ ^(431|413|400|null)$ ]]
	# 1000 connections of at most 16 KiB each, plus the documents: 40 MB
	[ "$(jqr '.rss_during_kb - .rss_before_kb < 40960')" = true ]
	# and it still answers once they are gone
	run -0 curl -sf -o /dev/null -w '%{http_code}' "$URL/metrics"
	[ "$output" = 200 ]
}

@test "serve: --max-connections caps the clients at once, --timeout closes the idle ones" {
	four_gpus
	# 10 idle clients at a cap of 10: one more waits until the idle ones
	# are closed, after the 2 s timeout (libmicrohttpd looks about once a second)
	serve_start --max-connections 10 --timeout 2
	run -0 python3 "$BATS_TEST_DIRNAME/helpers/conncap.py" "${URL##*:}" 10
	echo "# at the cap: $output" >&3
	[[ "${lines[0]}" =~ ^answered\ after\ (1\.[5-9]|[234]\.[0-9])\ s:\ HTTP/1.1\ 200\ OK$ ]]
	[[ "${lines[1]}" =~ ^idle\ closed\ after\ (1\.[89]|[234]\.[0-9])\ s$ ]]
	kill "$SERVE_PID"
	wait "$SERVE_PID" || true
	# under the cap it is answered at once
	serve_start --max-connections 20 --timeout 2
	run -0 python3 "$BATS_TEST_DIRNAME/helpers/conncap.py" "${URL##*:}" 10
	echo "# under it: $output" >&3
	[[ "${lines[0]}" =~ ^answered\ after\ 0\.[0-9]\ s:\ HTTP/1.1\ 200\ OK$ ]]
}

@test "serve: bad options are usage errors naming the culprit; a taken port fails" {
	four_gpus
	run -2 gpuman serve --listen nonsense
	[[ "$output" == *"--listen 'nonsense'"* ]]
	run -2 gpuman serve --listen localhost:9400
	[[ "$output" == *"numeric"* ]]
	run -2 gpuman serve --interval 0
	[[ "$output" == *"--interval '0'"* ]]
	serve_start
	run -1 gpuman serve --listen "${URL#http://}"
	[[ "$output" == *"cannot listen on"* ]]
}

@test "serve: SIGTERM stops it with status 0" {
	four_gpus
	serve_start
	kill -TERM "$SERVE_PID"
	rc=0
	wait "$SERVE_PID" || rc=$?
	SERVE_PID=
	[ "$rc" = 0 ]
	[[ "$(cat "$BATS_TEST_TMPDIR/serve.log")" == *"Terminated, stopping"* ]]
}

@test "serve: with no --listen it serves dcgm-exporter's port 9400 on loopback only" {
	four_gpus
	# 9400 in hex, listening (state 0A), in /proc/net/tcp's local address column
	if awk 'NR > 1 && $4 == "0A" {print $2}' /proc/net/tcp /proc/net/tcp6 | grep -qi ':24B8$'; then
		skip "port 9400 is taken on this machine (another gpuman serve or dcgm-exporter?)"
	fi
	gpuman serve --interval 0.3 2>"$BATS_TEST_TMPDIR/serve.log" 3>&- &
	SERVE_PID=$!
	wait_for "grep -q 'listen' '$BATS_TEST_TMPDIR/serve.log'"
	# make check runs this suite twice at once (plain and ASan builds)
	if grep -q 'Address already in use' "$BATS_TEST_TMPDIR/serve.log"; then
		skip "port 9400 was taken meanwhile (the other build's run of this suite?)"
	fi
	grep -q 'listening on 127.0.0.1:9400 ' "$BATS_TEST_TMPDIR/serve.log"
	kill -0 "$SERVE_PID"
	run -0 curl -sf http://127.0.0.1:9400/metrics
	[[ "$output" == *'DCGM_FI_DEV_FB_USED{gpu="0"'* ]]
	# bound to 127.0.0.1 (0100007F), never to every address
	run awk 'NR > 1 && $4 == "0A" {print $2}' /proc/net/tcp /proc/net/tcp6
	[[ "$output" == *"0100007F:24B8"* ]]
	[[ "$output" != *"00000000:24B8"* ]]
	[[ "$output" != *"00000000000000000000000000000000:24B8"* ]]
}
