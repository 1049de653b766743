# helpers.bash - the real Slurm cluster of these tests (tests/slurm/cluster):
# started once per file as root, stopped after it.  Without root or without
# Slurm every test of the file is skipped, saying why.

bats_require_minimum_version 1.5.0

GM_BUILD=${GM_BUILD:-$BATS_TEST_DIRNAME/../../build}
GM_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
export PATH="$GM_BUILD:$PATH"

# cluster_up [KNOB=VALUE...] - start a cluster for this file (setup_file).
# Short paths: munged's socket path must fit in a sockaddr_un.
cluster_up() {
	local why
	why=$("$GM_ROOT/tests/slurm/cluster" why-not) || skip "no real Slurm cluster: $why"
	GM_CLUSTER=$(mktemp -d /tmp/gm-slurm.XXXXXX)
	export GM_CLUSTER
	env "$@" "$GM_ROOT/tests/slurm/cluster" up "$GM_CLUSTER" 3>&- ||
		{ "$GM_ROOT/tests/slurm/cluster" down "$GM_CLUSTER"; false; }
}

cluster_down() {
	[ -n "${GM_CLUSTER:-}" ] || return 0
	"$GM_ROOT/tests/slurm/cluster" down "$GM_CLUSTER" 3>&-
	rm -rf "$GM_CLUSTER"
}

# Every test: the cluster's client configuration, a clean gpuman
# environment (the nodes' own comes from the cluster's TaskProlog), and a
# working directory every node sees (one machine: any directory).
cluster_setup() {
	# shellcheck disable=SC1091
	. "$GM_CLUSTER/env"
	unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER GPUMAN_NVML NO_COLOR SLURM_JOB_ID \
		SLURM_JOB_GPUS SLURM_STEP_GPUS
	export GPUMAN_STATE_DIR="$BATS_TEST_TMPDIR/state"
	export GPUMAN_SIM_STATE="$BATS_TEST_TMPDIR/simstate"
	export GPUMAN_SIM="$GM_CLUSTER/etc/gpus-$(head -1 "$GM_CLUSTER/node-names").json"
	mkdir -p "$GPUMAN_SIM_STATE"
	cd "$BATS_TEST_TMPDIR" || return 1
}

# jqr EXPR - jq -r on $output
jqr() {
	printf '%s' "$output" | jq -r "$@"
}

# gm_user NAME - a real Unix user gmtest-NAME (as tests/e2e/helpers.bash)
gm_user() {
	local u="gmtest-$1"
	command -v useradd >/dev/null || skip "useradd is missing"
	for _ in $(seq 50); do
		id -u "$u" >/dev/null 2>&1 && return 0
		useradd --system --no-create-home --shell /usr/sbin/nologin "$u" 2>/dev/null && return 0
		sleep 0.1
	done
	id -u "$u" >/dev/null 2>&1
}

# as_user NAME CMD... - run CMD as gmtest-NAME
as_user() {
	local u="gmtest-$1"
	shift
	setpriv --reuid="$u" --regid="$u" --clear-groups env HOME=/tmp PATH="$PATH" "$@"
}
