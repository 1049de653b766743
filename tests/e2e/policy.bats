#!/usr/bin/env bats
# gpuman.conf: the admin's caps (max_gpus per user, per group, for all),
# enforced where leases are granted, so run, batch and the queue's
# dispatcher all obey them; first come, first served still holds within
# what each user may have.  And the queue's history kept for [queue] keep.

load helpers
load helpers/queue

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
	export GPUMAN_CONFIG=$BATS_TEST_TMPDIR/gpuman.conf
	export XDG_CONFIG_HOME=$BATS_TEST_TMPDIR/config
	BG_PIDS=
}

teardown() {
	touch "$BATS_TEST_TMPDIR/go" "${SHARED:-$BATS_TEST_TMPDIR}/go" 2>/dev/null || true
	for p in $BG_PIDS; do
		wait "$p" 2>/dev/null || true
	done
	queue_teardown
	[ -z "${SHARED:-}" ] || rm -rf "$SHARED"
}

# hold NAME [DIR] - a job that holds one GPU until DIR/go exists
hold() {
	local dir=${2:-$BATS_TEST_TMPDIR}
	gpuman run -- sh -c 'touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done' \
		"$dir/$1" "$dir/go" &
	BG_PIDS="$BG_PIDS $!"
}

@test "max_gpus: a third GPU waits while two are held, -n 3 never fits; --wait runs it when one ends" {
	four_gpus
	printf '[limits]\nmax_gpus = 2   ; per user, at once\n' >"$GPUMAN_CONFIG"
	hold h1
	hold h2
	wait_for '[ -e h1 ] && [ -e h2 ]'
	run -75 gpuman run -- touch third
	[[ "$output" == *"max_gpus: holds 2 GPUs already, the limit is 2 ([limits] in $GPUMAN_CONFIG)"* ]]
	run -75 gpuman run -n 3 -- true
	[[ "$output" == *"max_gpus: asks 3 GPUs, the limit is 2"* ]]
	gpuman run --wait -- touch third &
	BG_PIDS="$BG_PIDS $!"
	sleep 0.5
	[ ! -e third ]
	touch go
	wait_for '[ -e third ]'
}

@test "max_gpus: [user NAME] wins over [group NAME], the most generous group over [limits]" {
	four_gpus
	printf '[limits]\nmax_gpus = 1\n[group %s]\nmax_gpus = 2\n[group nogroup]\nmax_gpus = 4\n' \
		"$(id -gn)" >"$GPUMAN_CONFIG"
	hold h1
	hold h2
	wait_for '[ -e h1 ] && [ -e h2 ]'
	run -75 gpuman run -- true
	[[ "$output" == *"the limit is 2 ([group $(id -gn)] in"* ]]
	printf '[user %s]\nmax_gpus = 3\n' "$(id -un)" >>"$GPUMAN_CONFIG"
	run -0 gpuman run -- true
}

@test "the queue's dispatcher obeys max_gpus: with max_gpus = 1 two jobs run one after the other" {
	four_gpus
	printf '[limits]\nmax_gpus = 1\n' >"$GPUMAN_CONFIG"
	gpuman submit -- sh -c 'sleep 0.5' >/dev/null
	gpuman submit -- sh -c 'sleep 0.5' >/dev/null
	run -0 gpuman wait 1 2
	run -0 gpuman queue --all --json
	[ "$(jqr '.[1].start_ms >= .[0].end_ms')" = true ]
}

@test "a cap keeps one user's third request waiting while another user, who came later, is served" {
	gm_user alice
	gm_user bob
	SHARED=$(mktemp -d /tmp/gm-policy.XXXXXX)
	chmod 755 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim" "$SHARED/out"
	export GPUMAN_STATE_DIR="$SHARED/state" GPUMAN_SIM_STATE="$SHARED/sim"
	four_gpus
	cp "$GPUMAN_SIM" "$SHARED/four.json" && chmod 644 "$SHARED/four.json"
	export GPUMAN_SIM="$SHARED/four.json"
	printf '[limits]\nmax_gpus = 2\n' >"$SHARED/gpuman.conf"
	chmod 644 "$SHARED/gpuman.conf"
	export GPUMAN_CONFIG="$SHARED/gpuman.conf"
	for h in a1 a2; do
		as_user alice gpuman run -- sh -c 'touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done' \
			"$SHARED/out/$h" "$SHARED/go" &
		BG_PIDS="$BG_PIDS $!"
	done
	wait_for '[ -e "$SHARED/out/a1" ] && [ -e "$SHARED/out/a2" ]'
	as_user alice gpuman run --wait -- touch "$SHARED/out/a3" &
	BG_PIDS="$BG_PIDS $!"
	wait_for '[ "$(gpuman status --json | jq ".waiters | length")" = 1 ]'
	# alice is first in line, but her cap holds her there: bob, later, with
	# no --wait at all, gets a GPU at once
	run -0 as_user bob gpuman run -- touch "$SHARED/out/b1"
	[ -e "$SHARED/out/b1" ]
	[ ! -e "$SHARED/out/a3" ]
	run -0 gpuman status --json
	[ "$(jqr '.waiters[0].user')" = gmtest-alice ]
	[ "$(jqr '.waiters[0].limit')" = "max_gpus: holds 2 GPUs already, the limit is 2 ([limits] in $SHARED/gpuman.conf)" ]
	run -0 gpuman status
	[[ "$output" == *"1. gmtest-alice, 1 GPU exclusive"*"waits for its user's limit, not in the way of others: max_gpus: holds 2 GPUs"* ]]
	touch "$SHARED/go"
	wait_for '[ -e "$SHARED/out/a3" ]'
}

@test "a bad gpuman.conf is refused, naming the file, the line and what is wrong" {
	four_gpus
	printf '[limits]\nmax_gpu = 2\n' >"$GPUMAN_CONFIG"
	run -1 gpuman run -- true
	[[ "$output" == *"$GPUMAN_CONFIG:2: unknown key 'max_gpu' in [limits] (known: max_gpus, max_reserve, max_lease, max_gpu_hours, keep_out)"* ]]
	printf '[limits]\n\nmax_gpus = two\n' >"$GPUMAN_CONFIG"
	run -1 gpuman submit -- true
	[[ "$output" == *"$GPUMAN_CONFIG:3: max_gpus = two:"* ]]
	printf '[limit]\nmax_gpus = 2\n' >"$GPUMAN_CONFIG"
	run -1 gpuman run -- true
	[[ "$output" == *"$GPUMAN_CONFIG:2: unknown section [limit]"* ]]
	printf 'max_gpus = 2\n' >"$GPUMAN_CONFIG"
	run -1 gpuman run -- true
	[[ "$output" == *"unknown section []"* ]]
	printf '[queue]\nkeep = 3 weeks\n' >"$GPUMAN_CONFIG"
	run -1 gpuman submit -- true
	[[ "$output" == *"$GPUMAN_CONFIG:2: keep = 3 weeks:"*"a duration such as 30d, or forever"* ]]
	run -0 gpuman queue --all --json
	[ "$(jqr length)" = 0 ]
}

@test "[queue] keep: submit forgets finished jobs older than that, with their logs; forever keeps them" {
	gpus 1
	mkdir -p "$XDG_CONFIG_HOME/gpuman"
	run -0 gpuman queue
	history 3 $(( $(date +%s) * 1000 - 3 * 86400 * 1000 ))
	history 2 $(( $(date +%s) * 1000 - 3600 * 1000 ))
	touch "$GPUMAN_QUEUE_DIR/logs/1.log"
	printf '[queue]\nkeep = forever\n' >"$XDG_CONFIG_HOME/gpuman/gpuman.conf"
	run -0 gpuman submit -- true
	[ "$output" = 6 ]
	run -0 gpuman wait 6
	run -0 gpuman queue --all --json
	[ "$(jqr length)" = 6 ]
	# the admin's default is overridden by the user's own file
	printf '[queue]\nkeep = 90d\n' >"$GPUMAN_CONFIG"
	printf '[queue]\nkeep = 1d\n' >"$XDG_CONFIG_HOME/gpuman/gpuman.conf"
	run -0 gpuman submit -- true
	run -0 gpuman wait 7
	run -0 gpuman queue --all --json
	[ "$(jqr '[.[].id] | tostring')" = '[4,5,6,7]' ]
	[ ! -e "$GPUMAN_QUEUE_DIR/logs/1.log" ]
	# limits are the admin's alone
	printf '[limits]\nmax_gpus = 8\n' >"$XDG_CONFIG_HOME/gpuman/gpuman.conf"
	run -1 gpuman submit -- true
	[[ "$output" == *"$XDG_CONFIG_HOME/gpuman/gpuman.conf:2: [limits] is the admin's ($GPUMAN_CONFIG); your file may only set [queue]"* ]]
}
