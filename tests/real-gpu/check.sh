#!/bin/sh
# check.sh - gpuman on a real NVIDIA machine, against the tools people trust:
#   1. status --json against nvidia-smi --query-gpu and (if importable)
#      pynvml, GPU by GPU: UUID, name, bus id and total memory exactly;
#      used memory, utilization, power and temperature within a tolerance
#      (they move between the two readings);
#   2. info and ps run; pick answers;
#   3. two `gpuman run --mem` jobs of the CUDA twin (gpuman-cudaload) side by
#      side on GPU 0 and a third that must wait: checked from their --record
#      lines, not from gpuman's word;
#   4. a PyTorch job through `gpuman run` and through auto_choice, if
#      python3 has torch;
#   5. times: `gpuman pick` against `nvidia-smi --query-gpu` and a bare C
#      NVML query (nvmlquery.c), as ratios.
#   6. per-process utilization from the real driver: a busy CUDA job is
#      listed by `ps --json` with its memory and a non-zero utilization,
#      and `waste --json` answers.
#   7. one NVML session per machine: a broker of this check holds NVML;
#      `pick` and `status` through it against nvidia-smi --query-gpu and
#      the bare C query (the no-broker figures of step 5 are taken with the
#      system's broker stopped, as a broker holding NVML keeps the driver
#      warm for everybody); its snapshot against nvidia-smi as in step 1;
#      and the driver's per-call costs (nvmllatency.c) for the simulator's
#      profile, examples/h200-latency.json; `gpuman run -- true` and
#      Python's snapshot() with and without it.
#   8. the kernel's fence on the real driver: a job of the broker's lease is
#      in a cgroup of its own with a device filter, and PyTorch and JAX,
#      clients we did not write, still reach their leased GPU through it.
# Run from the source tree on the GPU machine: sh tests/real-gpu/check.sh
# Needs: the NVIDIA driver, cc, nvcc for the CUDA twin (step 3 is skipped,
# saying so, without it).  Prints "ok"/"FAIL" lines; exit 1 if any failed.
# GPUMAN_PREBUILT=1 uses build/ as it is (built elsewhere and carried: the
# GPU machine may lack the build dependencies, and then libinih, jansson and
# libmicrohttpd too: carry those and set LD_LIBRARY_PATH); REPORT=DIR keeps the raw
# outputs (status, info, ps, nvidia-smi) there.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GPUMAN_STATE_DIR="$tmp/state"
unset GPUMAN_SIM GPUMAN_NVML CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

if [ "${GPUMAN_PREBUILT:-0}" != 1 ]; then
	make -C "$root" -s all cudaload "$build/bench/runtime" >/dev/null || { echo "FAIL build"; exit 1; }
fi
report=${REPORT:-$tmp/report}
mkdir -p "$report"
gm="$build/gpuman"
# A build carried from another machine may need libraries this one lacks:
# say which, once, before the checks that load them fail one by one.
for so in "$build/libgpuman.so.1" "$build/gpuman-serve"; do
	missing=$(ldd "$so" 2>/dev/null | awk '/not found/ {printf "%s ", $1}')
	[ -z "$missing" ] || echo "note $(basename "$so") lacks ${missing}here: carry them and set LD_LIBRARY_PATH, or its checks below fail (Python) or are skipped (serve)"
done
command -v nvidia-smi >/dev/null || { echo "FAIL no nvidia-smi: not an NVIDIA machine"; exit 1; }

# The figures without a broker are the driver's cold cost: a broker that
# holds NVML (the system's gpuman.service) keeps it warm for everybody.
# Stop it for the check (root), start it again at the end.
export GPUMAN_BROKER=off
sysbroker=
if command -v systemctl >/dev/null && systemctl is-active --quiet gpuman.service 2>/dev/null; then
	echo "note stopping gpuman.service for the no-broker figures (started again at the end)"
	systemctl stop gpuman.service gpuman.socket && sysbroker=1
fi
broker_pid=
trap '[ -z "$broker_pid" ] || kill "$broker_pid" 2>/dev/null
	[ -z "$sysbroker" ] || systemctl start gpuman.socket gpuman.service
	rm -rf "$tmp"' EXIT

# smi_csv FILE - nvidia-smi's reading of the fields compare_smi checks
smi_csv() {
	nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,utilization.gpu,power.draw,temperature.gpu,clocks.max.sm,clocks.max.mem,clocks.sm,clocks.mem \
		--format=csv,noheader,nounits >"$1" || bad "nvidia-smi --query-gpu"
}

# compare_smi GM_JSON SMI_CSV - identities and totals exactly, moving
# readings within a tolerance; pynvml too where importable
compare_smi() {
python3 - "$1" "$2" <<'PY' || fails=$((fails + 1))
import csv, json, sys
gm = json.load(open(sys.argv[1]))
rows = [[c.strip() for c in r] for r in csv.reader(open(sys.argv[2]))]
bad = 0
def num(s):
    try: return float(s)
    except ValueError: return None
for r in rows:
    g = next((g for g in gm["gpus"] if g["index"] == int(r[0])), None)
    if g is None:
        print("FAIL GPU %s: nvidia-smi has it, gpuman does not" % r[0]); bad += 1; continue
    exact = [("uuid", g["uuid"], r[1]), ("name", g["name"], r[2]),
             ("pci_bus_id", g["pci_bus_id"].upper(), r[3].upper()),
             ("memory_total_mib", g["memory_total_mib"], num(r[4])),
             ("max_clock_sm_mhz", g.get("max_clock_sm_mhz"), num(r[9])),
             ("max_clock_memory_mhz", g.get("max_clock_memory_mhz"), num(r[10]))]
    near = [("memory_used_mib", g["memory_used_mib"], num(r[5]), 256),
            ("utilization_gpu_pct", g["utilization_gpu_pct"], num(r[6]), 25),
            ("power_draw_w", g["power_draw_w"], num(r[7]), 40),
            ("temperature_c", g["temperature_c"], num(r[8]), 3),
            ("clock_sm_mhz", g.get("clock_sm_mhz"), num(r[11]), 300),
            ("clock_memory_mhz", g.get("clock_memory_mhz"), num(r[12]), 300)]
    for k, a, b in exact:
        if a != b and not (isinstance(b, float) and a == int(b)):
            print("FAIL GPU %s %s: gpuman %r nvidia-smi %r" % (r[0], k, a, b)); bad += 1
    for k, a, b, tol in near:
        if (a is None) != (b is None) or (a is not None and abs(a - b) > tol):
            print("FAIL GPU %s %s: gpuman %r nvidia-smi %r (tolerance %s)" % (r[0], k, a, b, tol)); bad += 1
print("%s status --json against nvidia-smi: %d GPUs, %d differences" % ("ok  " if not bad else "FAIL", len(rows), bad))
try:
    import pynvml
except ImportError:
    print("skip pynvml not importable: the pynvml comparison was not run")
    sys.exit(1 if bad else 0)
pynvml.nvmlInit()
for g in gm["gpus"]:
    h = pynvml.nvmlDeviceGetHandleByIndex(g["index"])
    u = pynvml.nvmlDeviceGetUUID(h)
    u = u.decode() if isinstance(u, bytes) else u
    m = pynvml.nvmlDeviceGetMemoryInfo(h)
    if u != g["uuid"] or m.total // 1048576 != g["memory_total_mib"]:
        print("FAIL GPU %d against pynvml: %s %d" % (g["index"], u, m.total // 1048576)); bad += 1
print("%s status --json against pynvml" % ("ok  " if not bad else "FAIL"))
sys.exit(1 if bad else 0)
PY
}

# 1. status against nvidia-smi
"$gm" status --json >"$tmp/gm.json" || bad "gpuman status --json"
smi_csv "$tmp/smi.csv"
compare_smi "$tmp/gm.json" "$tmp/smi.csv"
cp "$tmp/gm.json" "$tmp/smi.csv" "$report/" 2>/dev/null
"$gm" status >"$report/status.txt" 2>&1 && ok "status" || bad "status: $(tail -1 "$report/status.txt")"
"$gm" info >"$report/info.txt" 2>&1 && ok "info" || bad "info: $(tail -1 "$report/info.txt")"
"$gm" ps >"$report/ps.txt" 2>&1 && ok "ps" || bad "ps: $(tail -1 "$report/ps.txt")"
pick=$("$gm" pick) && ok "pick: $pick" || bad "pick"

# 3. two shares side by side, a third waits for room
if [ -x "$build/gpuman-cudaload" ]; then
	total=$(python3 -c "import json,sys; print(json.load(open('$tmp/gm.json'))['gpus'][0]['memory_free_mib'])")
	share=$((total * 2 / 5)) # two fit, a third does not
	rec="$tmp/record"
	for i in 1 2 3; do
		"$gm" run --only 0 --mem "$share" --wait=5m -- "$build/gpuman-cudaload" --mem $((share - 512)) \
			--util 50 --seconds 8 --record "$rec" >"$tmp/job$i.out" 2>&1 &
		sleep 1
	done
	wait
	python3 - "$rec" <<'PY' && ok "two --mem jobs ran together on GPU 0, the third waited" || bad "shares on a real GPU"
import sys
ev = sorted((int(l.split()[3]), l.split()[0], l.split()[1]) for l in open(sys.argv[1]))
live, most, ends = 0, 0, []
for t, what, pid in ev:
    live += 1 if what == "start" else -1
    most = max(most, live)
starts = [t for t, w, p in ev if w == "start"]
first_end = min(t for t, w, p in ev if w == "end")
sys.exit(0 if most == 2 and len(starts) == 3 and sorted(starts)[2] >= first_end else 1)
PY
else
	echo "skip no gpuman-cudaload (no nvcc): the side-by-side jobs were not run"
fi

# 6. per-process utilization: one busy job, seen by ps --json
if [ -x "$build/gpuman-cudaload" ]; then
	"$gm" run --only 0 -- "$build/gpuman-cudaload" --mem 1024 --util 90 --seconds 14 >"$tmp/busy.out" 2>&1 &
	sleep 9
	"$gm" ps --json >"$report/ps-busy.json" 2>&1
	"$gm" waste --json >"$report/waste.json" 2>&1
	wrc=$?
	wait
	python3 - "$report/ps-busy.json" <<'PY' && ok "ps --json: the busy job with its memory and utilization" || bad "per-process utilization on a real driver (see ps-busy.json)"
import json, sys
procs = json.load(open(sys.argv[1]))
busy = [p for p in procs if (p.get("command") or "").find("cudaload") >= 0]
print("     ps --json rows %d, cudaload rows %s" % (len(procs), [(p["used_mib"], p["utilization_pct"]) for p in busy]))
sys.exit(0 if busy and busy[0]["used_mib"] >= 1024 and (busy[0]["utilization_pct"] or 0) > 0 else 1)
PY
	[ "$wrc" = 0 ] || [ "$wrc" = 3 ] && ok "waste --json answered (exit $wrc)" || bad "waste --json exit $wrc"
fi

# 4. PyTorch through run and auto_choice
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
	"$gm" run -- python3 -c "import torch; x = torch.ones(1 << 20, device='cuda'); print(int(x.sum()))" \
		>"$tmp/torch.out" 2>&1 && grep -q 1048576 "$tmp/torch.out" && ok "PyTorch job through run" ||
		bad "PyTorch through run: $(tail -1 "$tmp/torch.out")"
	PYTHONPATH="$root/python" python3 -c "
import gpuman, torch
with gpuman.auto_choice(mem='2G') as dev:
    print(int(torch.ones(1024, device=dev).sum()))" >"$tmp/auto.out" 2>&1 &&
		grep -q 1024 "$tmp/auto.out" && ok "PyTorch through auto_choice" ||
		bad "PyTorch through auto_choice: $(tail -1 "$tmp/auto.out")"
else
	echo "skip python3 has no CUDA-enabled torch: the PyTorch jobs were not run"
fi

# 7. gpuman serve on the real driver: /metrics against status --json
if [ -x "$build/gpuman-serve" ] && ! ldd "$build/gpuman-serve" | grep -q 'not found'; then
	"$gm" serve --listen 127.0.0.1:19400 --interval 1 >"$report/serve.log" 2>&1 &
	sp=$!
	sleep 3
	python3 - "$tmp/gm.json" "$report/metrics.txt" <<'PY' && ok "serve /metrics agrees with status --json" || bad "serve /metrics (see metrics.txt, serve.log)"
import json, re, sys, urllib.request
gm = json.load(open(sys.argv[1]))
text = urllib.request.urlopen("http://127.0.0.1:19400/metrics", timeout=5).read().decode()
open(sys.argv[2], "w").write(text)
def metric(name, gpu):
    m = re.search(r'^%s\{[^}]*gpu="%d"[^}]*\} (\S+)$' % (name, gpu), text, re.M)
    return float(m.group(1)) if m else None
bad = 0
for g in gm["gpus"]:
    for name, want in (("DCGM_FI_DEV_FB_TOTAL", g["memory_total_mib"]),
                       ("DCGM_FI_DEV_MAX_SM_CLOCK", g.get("max_clock_sm_mhz")),
                       ("DCGM_FI_DEV_POWER_MGMT_LIMIT", None)):
        got = metric(name, g["index"])
        if got is None or (want is not None and got != want):
            print("FAIL GPU %d %s: /metrics %r, status --json %r" % (g["index"], name, got, want)); bad += 1
sys.exit(1 if bad else 0)
PY
	kill "$sp" 2>/dev/null
	wait "$sp" 2>/dev/null
else
	echo "skip gpuman-serve missing or its libraries absent here: /metrics not checked"
fi

# 5. times, as ratios
q=$build/real-gpu/nvmlquery
[ -x "$q" ] || { mkdir -p "$tmp/q" && q=$tmp/q/nvmlquery && cc -O2 -o "$q" "$root/tests/real-gpu/nvmlquery.c" -ldl; }
set -- $("$build/bench/runtime" 100 "$gm" pick); g=$1
set -- $("$build/bench/runtime" 30 nvidia-smi --query-gpu=index,memory.free,utilization.gpu --format=csv); s=$1
set -- $("$build/bench/runtime" 100 "$q"); c=$1
set -- $("$build/bench/runtime" 30 "$gm" run -- true); r=$1
awk -v g="$g" -v s="$s" -v c="$c" 'BEGIN {
	printf "time gpuman pick %.2f ms; nvidia-smi --query-gpu %.2f ms (gpuman takes %.2fx its time); bare C NVML query %.2f ms (gpuman %.2fx of it)\n",
		g / 1000, s / 1000, g / s, c / 1000, g / c }'
# pysnap - Python's snapshot(): the first call (which opens NVML or finds
# the broker) and the median of the next 20, in one process
pysnap() {
	PYTHONPATH="$root/python" python3 -c '
import gpuman, statistics, time
t = time.perf_counter(); gpuman.snapshot(); first = time.perf_counter() - t
rest = []
for _ in range(20):
    t = time.perf_counter(); gpuman.snapshot(); rest.append(time.perf_counter() - t)
print("%.2f %.2f" % (first * 1e3, statistics.median(rest) * 1e3))'
}
py=$(pysnap) || bad "python snapshot() without a broker"

# 8. the kernel's fence on the real driver (called with our broker running)
fence_check() {
	"$gm" status >"$report/status-broker.txt" 2>&1
	grep -i "placement" "$report/status-broker.txt" | head -2 | sed 's/^/     /'
	grep -i "placement enforced\|fence" "$tmp/bk/log" | head -2 | sed 's/^/     /'
	if ! grep -qi "placement enforced by the kernel" "$tmp/bk/log"; then
		echo "skip the broker cannot fence here (its log above): the fenced jobs were not run"
		return
	fi
	"$gm" run -- sh -c 'cat /proc/self/cgroup; exec python3 "$0"' "$root/tests/real-gpu/fenced.py" \
		>"$report/fenced.txt" 2>&1
	frc=$?
	sed 's/^/     /' "$report/fenced.txt"
	[ "$frc" = 0 ] && ok "fenced job: in its own cgroup, and PyTorch and JAX reach the leased GPU" ||
		bad "fenced job exit $frc (see fenced.txt)"
}

# 7. one NVML session per machine: a broker of our own holds the driver
mkdir -m 1777 "$tmp/bk"
"$gm" daemon --socket "$tmp/bk/gpuman.sock" --state "$tmp/bk/state/leases.json" 2>"$tmp/bk/log" &
broker_pid=$!
for _ in $(seq 200); do grep -q serving "$tmp/bk/log" && break; sleep 0.05; done
if grep -q serving "$tmp/bk/log"; then
	export GPUMAN_BROKER="$tmp/bk/gpuman.sock"
	set -- $("$build/bench/runtime" 200 "$gm" pick); bp=$1
	set -- $("$build/bench/runtime" 100 "$gm" status); bs=$1
	awk -v bp="$bp" -v bs="$bs" -v g="$g" -v s="$s" -v c="$c" 'BEGIN {
		printf "time through the broker: pick %.2f ms, status %.2f ms; pick without it %.2f ms (%.1fx); nvidia-smi --query-gpu %.2f ms: pick %.1fx faster (target >= 10x), status %.1fx; bare C NVML query %.2f ms: pick %.1fx faster\n",
			bp / 1000, bs / 1000, g / 1000, g / bp, s / 1000, s / bp, s / bs, c / 1000, c / bp }'
	set -- $("$build/bench/runtime" 30 "$gm" run -- true); br=$1
	bpy=$(pysnap) || bad "python snapshot() through the broker"
	awk -v r="$r" -v br="$br" -v py="$py" -v bpy="$bpy" 'BEGIN {
		printf "time gpuman run -- true: %.2f ms through the broker, %.2f ms without it (%.1fx)\n", br / 1000, r / 1000, r / br
		# a snapshot() that failed (FAIL above) has no figure
		if (split(py, a, " ") == 2 && split(bpy, b, " ") == 2)
			printf "time python snapshot(): first call %.2f ms and then %.2f ms through the broker, %.2f ms and %.2f ms without it\n",
				b[1], b[2], a[1], a[2] }'
	"$gm" status --json >"$tmp/gm-broker.json" || bad "status --json through the broker"
	smi_csv "$tmp/smi-broker.csv"
	[ "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["reading"]["by"])' "$tmp/gm-broker.json" 2>/dev/null)" = broker ] &&
		ok "status read the GPUs through the broker" || bad "status did not read through the broker"
	echo "the broker's snapshot against nvidia-smi:"
	compare_smi "$tmp/gm-broker.json" "$tmp/smi-broker.csv"
	cp "$tmp/gm-broker.json" "$report/" 2>/dev/null
	fence_check
	export GPUMAN_BROKER=off
else
	bad "gpuman daemon did not start: $(tail -1 "$tmp/bk/log")"
fi
kill "$broker_pid" 2>/dev/null
wait "$broker_pid" 2>/dev/null
broker_pid=
l=$build/real-gpu/nvmllatency
[ -x "$l" ] || { mkdir -p "$tmp/q" && l=$tmp/q/nvmllatency && cc -O2 -o "$l" "$root/tests/real-gpu/nvmllatency.c" -ldl; }
if lat=$("$l"); then
	echo "the driver's per-call costs (examples/h200-latency.json holds those of 2026-11-28): $lat"
	echo "$lat" >"$report/latency.json"
else
	bad "nvmllatency"
fi

[ "$fails" -eq 0 ] && echo "real-gpu check: all passed" || echo "real-gpu check: $fails failed"
[ "$fails" -eq 0 ]
