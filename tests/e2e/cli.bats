#!/usr/bin/env bats
# cli: the command line as the README and the manual document it - option
# forms that are easy to get wrong, JSON errors, help, and the documents' own
# examples.

load helpers

LAB=$GM_ROOT/examples/lab-8gpu.json

@test "--wait 15m (a space) is refused with the '=' form as hint; nothing runs or is queued" {
	four_gpus
	for c in run submit; do
		run -2 gpuman "$c" --wait 15m -- touch "$BATS_TEST_TMPDIR/ran-$c"
		[[ "$output" == *"--wait 15m: write --wait=15m"* ]]
		[ ! -e "$BATS_TEST_TMPDIR/ran-$c" ]
		[ ! -e "$BATS_TEST_TMPDIR/15m" ]
	done
	run -0 gpuman queue --all
	[[ "$output" != *touch* ]]
	run -2 gpuman batch --wait 90 -- "$BATS_TEST_TMPDIR/none.txt"
	[[ "$output" == *"write --wait=90"* ]]
	# The unambiguous forms still work.
	run -0 gpuman run --wait=15m -- touch "$BATS_TEST_TMPDIR/eq"
	[ -e "$BATS_TEST_TMPDIR/eq" ]
	run -0 gpuman run --wait -- touch "$BATS_TEST_TMPDIR/bare"
	[ -e "$BATS_TEST_TMPDIR/bare" ]
	run -0 gpuman run --wait touch "$BATS_TEST_TMPDIR/word"
	[ -e "$BATS_TEST_TMPDIR/word" ]
}

@test "batch --dry-run -j 3 says 'at most 3 running'" {
	four_gpus
	printf 'echo a\necho b\n' >"$BATS_TEST_TMPDIR/t.txt"
	run -0 gpuman batch --dry-run -j 3 --log-dir "$BATS_TEST_TMPDIR/l" "$BATS_TEST_TMPDIR/t.txt"
	[[ "${lines[-1]}" == *"at most 3 running"* ]]
	[[ "$output" != *"-j running"* ]]
}

@test "pick --json and status --json print a JSON error object on stdout when they fail" {
	four_gpus
	run -75 --separate-stderr gpuman pick --json -n 4 --min-free 20G
	[ "$(jq -r .status <<<"$output")" = 75 ]
	[[ "$(jq -r .error <<<"$output")" == *"meet the request"* ]]
	[[ "$stderr" == *"meet the request"* ]]
	unset GPUMAN_SIM
	export GPUMAN_NVML=$BATS_TEST_TMPDIR/no-such-libnvidia-ml.so
	for c in status pick; do
		run -1 --separate-stderr gpuman "$c" --json
		[ "$(jq -r .status <<<"$output")" = 1 ]
		[[ "$(jq -r .error <<<"$output")" == *"cannot load the NVML library"* ]]
	done
	# A usage error, even one before --json on the line, is JSON too.
	run -2 --separate-stderr gpuman --sim "$LAB" pick --by nope --json
	[ "$(jq -r .status <<<"$output")" = 2 ]
	[[ "$(jq -r .error <<<"$output")" == *"nope"* ]]
}

@test "errors found before the command runs are JSON too with --json" {
	run -2 --separate-stderr gpuman nope --json
	[[ "$(jq -r .error <<<"$output")" == *"'nope' is not a command"* ]]
	[[ "$stderr" == *"'nope' is not a command"* ]]
	run -2 --separate-stderr gpuman --json --sim "$BATS_TEST_TMPDIR/none.json" status
	[[ "$(jq -r .error <<<"$output")" == *"none.json"* ]]
	GPUMAN_SIM=$BATS_TEST_TMPDIR/none.json run -2 --separate-stderr gpuman pick --json
	[ "$(jq -r .status <<<"$output")" = 2 ]
	# Without --json, stdout stays empty.
	run -2 --separate-stderr gpuman nope
	[ -z "$output" ]
}

@test "submit --json prints the id as JSON; wait --json the outcome" {
	four_gpus
	run -0 gpuman submit --json -- true
	id=$(jq -r .id <<<"$output")
	[ "$id" -ge 1 ]
	run -0 gpuman wait --json "$id"
	[ "$(jq -r '.[0].state' <<<"$output")" = done ]
}

@test "help COMMAND prints its usage; help nope exits 2 naming it" {
	run -0 gpuman help run
	[[ "$output" == "usage: gpuman run"* ]]
	run -2 --separate-stderr gpuman help nope
	[ -z "$output" ]
	[[ "$stderr" == *"'nope' is not a command"* ]]
}

@test "--mem 0% is refused like --mem 0" {
	four_gpus
	run -2 gpuman pick --mem 0
	[[ "$output" == *"reserves nothing"* ]]
	run -2 gpuman pick --mem 0%
	[[ "$output" == *"--mem '0%'"*"reserves nothing"* ]]
	run -0 gpuman pick --mem 1%
}

@test "the README's and manual's GPU names, UUID prefixes and pick results are the shipped scenario's" {
	docs=("$GM_ROOT/README.md" "$GM_ROOT"/docs/*.md)
	run ! grep -nwE 'alice|bob|carol' "${docs[@]}"
	for prefix in $(cat "${docs[@]}" | grep -oE 'GPU-[0-9a-f]{4}\b' | sort -u); do
		run -0 gpuman --sim "$LAB" info "$prefix"
	done
	cat "${docs[@]}" | grep -q 'gpuman info GPU-b120'
	run -0 gpuman --sim "$LAB" pick
	grep -qF "gpuman pick                      # the GPU with most free memory: $output " "$GM_ROOT/docs/gpuman-pick.1.md"
	run -0 gpuman --sim "$LAB" pick -n 2 --by power
	grep -qF "gpuman pick -n 2 --by power      # $output" "$GM_ROOT/docs/gpuman-pick.1.md"
}

@test "the demo's last line names a directory that still exists" {
	export TMPDIR=$BATS_TEST_TMPDIR
	run -0 sh "$GM_ROOT/examples/demo.sh" "$GM_BUILD"
	dir=$(grep -oE "$BATS_TEST_TMPDIR/[^ )]+" <<<"${lines[-1]}" | head -1)
	[ -n "$dir" ]
	[ -f "$dir/summary.json" ]
}

@test "a mistyped command or option names the one meant (did you mean), as scenario keys do" {
	run -2 --separate-stderr gpuman stauts
	[[ "$stderr" == *"'stauts' is not a command (did you mean 'status'?"* ]]
	run -2 --separate-stderr gpuman help sumbit
	[[ "$stderr" == *"did you mean 'submit'?"* ]]
	run -2 --separate-stderr gpuman --sim "$LAB" status --jsn
	[[ "$stderr" == *"unknown option '--jsn' (did you mean '--json'?)"* ]]
	run -2 --separate-stderr gpuman --sim "$LAB" ps --usr=root
	[[ "$stderr" == *"unknown option '--usr' (did you mean '--user'?)"* ]]
	run -2 --separate-stderr gpuman --sim "$LAB" run --exlcusive -- true
	[[ "$stderr" == *"did you mean '--exclusive'?"* ]]
	# nothing near: no guess; a missing value says so
	run -2 --separate-stderr gpuman xyzzy
	[[ "$stderr" != *"did you mean"* ]]
	run -2 --separate-stderr gpuman --sim "$LAB" status --format
	[[ "$stderr" == *"option '--format' needs a value"* ]]
}

@test "--json on a command without JSON output (serve, daemon, top) is refused, naming what to use; it never starts serving" {
	for c in serve daemon top; do
		case $c in
		serve) opts=(--listen 127.0.0.1:0) ;;
		daemon) opts=(--socket "$BATS_TEST_TMPDIR/b.sock" --state "$BATS_TEST_TMPDIR/b.state") ;;
		top) opts=() ;;
		esac
		run -2 --separate-stderr timeout 10 gpuman --sim "$LAB" "$c" --json "${opts[@]}"
		[[ "$stderr" == *"--json: $c has no JSON output ("*"status"*"--json"* ]]
		[ -z "$output" ]
	done
	# before the command too, and gpuman-serve itself
	run -2 --separate-stderr timeout 10 gpuman --json --sim "$LAB" serve --listen 127.0.0.1:0
	[[ "$stderr" == *"serve has no JSON output"* ]]
	run -2 --separate-stderr timeout 10 gpuman-serve --sim "$LAB" --json --listen 127.0.0.1:0
	[[ "$stderr" == *"serve has no JSON output"* ]]
}

@test "every --help fits an 80-column terminal" {
	local c long=
	for c in "" $(gpuman --help | awk '/^commands:/ { on = 1; next } on && NF == 0 { exit } on { print $1 }'); do
		long+=$(gpuman $c --help | awk -v c="gpuman $c" 'length > 80 { print c ": " $0 }')$'\n'
	done
	for c in gpuman-runner gpuman-simload; do
		long+=$("$c" --help 2>&1 | awk -v c="$c" 'length > 80 { print c ": " $0 }')$'\n'
	done
	[ -z "${long//$'\n'/}" ] || { echo "$long"; false; }
}
