#!/usr/bin/env bats
# clients: NVML clients we did not write, pointed at the simulator, must see
# the machine gpuman sees.  The Rust nvml-wrapper crate (Debian's
# librust-nvml-wrapper-dev) loads libnvidia-ml.so with dlopen and looks each
# function up itself; tests/clients/nvml-wrapper/src/main.rs prints what it
# reads.  Built by `make clients` (part of `make check`).
# not under ASan: the probe is built once, in the plain build, and the
# simulator it loads carries no sanitizers in either build; the ASan pass
# would only repeat `gpuman status --json`, which status.bats runs there.

load helpers

setup() {
	gm_setup
	PROBE="$GM_BUILD/clients/nvmlw-probe"
	[ -x "$PROBE" ] || skip "nvml-wrapper probe not built in $GM_BUILD (needs cargo and librust-nvml-wrapper-dev; make clients)"
}

probe() {
	LD_LIBRARY_PATH="$1" "$PROBE"
}

@test "nvml-wrapper (Rust) reads the lab as gpuman does, nvtop's readings included" {
	export GPUMAN_SIM="$GM_ROOT/examples/lab-8gpu.json"
	run -0 probe "$GM_BUILD/sim"
	local got="$output" want
	run -0 gpuman status --json
	want=$(jq -r '
		.driver_version as $d | (.processes | group_by(.gpu)) as $p |
		"driver_version=\($d)", "count=\(.gpus | length)",
		(.gpus[] | "gpu\(.index).name=\(.name)", "gpu\(.index).uuid=\(.uuid)",
			"gpu\(.index).pci_bus_id=\(.pci_bus_id)",
			"gpu\(.index).memory_mib=\(.memory_total_mib)/\(.memory_used_mib)/\(.memory_free_mib)",
			"gpu\(.index).util_gpu=\(.utilization_gpu_pct)",
			"gpu\(.index).temperature_c=\(.temperature_c)",
			"gpu\(.index).power_limit_mw=\(.power_limit_w * 1000 | floor)")' <<<"$output")
	# every line gpuman can state, nvml-wrapper states identically
	local line
	while IFS= read -r line; do
		grep -Fxq -- "$line" <<<"$got" || { echo "nvml-wrapper lacks: $line"; echo "$got"; return 1; }
	done <<<"$want"
	# processes, by GPU, as gpuman lists them
	want=$(jq -r '.processes | group_by(.gpu)[] |
		"gpu\(.[0].gpu).compute=" + (map(select(.type != "graphics") | "\(.pid):\(.used_mib // "NA")") | join(","))' <<<"$output")
	while IFS= read -r line; do
		grep -Fxq -- "$line" <<<"$got" || { echo "nvml-wrapper lacks: $line"; echo "$got"; return 1; }
	done <<<"$want"
	# what nvtop reads, from the scenario (GPU 3, an RTX 3090 at work)
	for line in gpu3.pcie_gen=4 gpu3.pcie_max_width=16 gpu3.pcie_rx_kbps=187000 \
		gpu3.slowdown_c=95 gpu3.mem_clock_mhz=9751 gpu3.fan=56 gpu3.decoder=12; do
		grep -Fxq -- "$line" <<<"$got" || { echo "nvml-wrapper lacks: $line"; return 1; }
	done
	! grep -q "FailedToLoadSymbol\|Unknown" <<<"$got" || false
}

@test "nvml-wrapper on an R470 driver: what the branch has works, what it lacks is a clean error" {
	export GPUMAN_SIM="$GM_ROOT/tests/fixtures/r470-mixed.json"
	run -0 probe "$GM_BUILD/sim/r470"
	[[ "$output" == *"driver_version=470.256.02"* ]]
	[[ "$output" == *"gpu1.memory_mib=24268/3/24265"* ]]
	[[ "$output" == *"gpu1.pci_bus_id=00000000:21:00.0"* ]]
	# nvml-wrapper 0.9 lists processes with the _v3 function (R510+): on a
	# real R470 it fails the same way, by symbol, not by a crash
	[[ "$output" == *'gpu1.compute=FailedToLoadSymbol("'*'undefined symbol: nvmlDeviceGetComputeRunningProcesses_v3")'* ]]
	# and through the default (R580) library it is refused, as a real
	# library of another version than the driver is
	run -1 probe "$GM_BUILD/sim"
	[ "$output" = "init=LibRmVersionMismatch" ]
}
