#!/usr/bin/env bats
# completion and man pages: both come from the command table and the
# commands' --help texts, so every command and option is covered.

load helpers

LAB=$GM_ROOT/examples/lab-8gpu.json

# complete WORD... - what bash completion offers for the last word.
complete_bash() {
	bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _gpuman
		printf "%s\n" "${COMPREPLY[@]}"' _ "$GM_ROOT/contrib/completion/gpuman.bash" "$@"
}

# The commands `gpuman --help` lists.
listed() { gpuman --help | awk '/^commands:/ { on = 1; next } on && NF == 0 { exit } on { print $1 }'; }

@test "bash: commands, options, option values, GPUs and job ids" {
	run -0 complete_bash gpuman st
	[ "$output" = status ]
	run -0 complete_bash gpuman ""
	[ "$(sort <<<"$output")" = "$( (listed; echo help) | sort)" ]
	run -0 complete_bash gpuman run --m
	[ "$(sort <<<"$output" | tr '\n' ' ')" = "--max-util --mem --mig --min-free " ]
	run -0 complete_bash gpuman pick --by po
	[ "$output" = power ]
	run -0 complete_bash gpuman --sim "$LAB" info ""
	[ "$(head -8 <<<"$output" | tr '\n' ' ')" = "0 1 2 3 4 5 6 7 " ]
	[[ "$output" == *GPU-b120a366-f0bb-e9cf-42f2-dc05873f9bd0* ]]
	run -0 complete_bash gpuman --sim "$LAB" run --only 0,GPU-b1
	[ "$output" = 0,GPU-b120a366-f0bb-e9cf-42f2-dc05873f9bd0 ]
	run -0 complete_bash gpuman run -- gpuman-sim
	[ "$(sort -u <<<"$output")" = gpuman-simload ] # PATH may name a directory twice
	export GPUMAN_SIM=$LAB
	run -0 gpuman submit -- sleep 30
	id=$output
	run -0 complete_bash gpuman cancel ""
	[ "$output" = "$id" ]
	gpuman cancel "$id"
}

@test "every option a command's --help names completes for that command" {
	for c in $(listed); do
		opts=$(complete_bash gpuman "$c" -)
		for o in $(gpuman "$c" --help | grep -oE '^ +--[a-z-]+' | tr -d ' '); do
			grep -qxF -- "$o" <<<"$opts" || { echo "$c: $o not completed"; false; }
		done
	done
}

@test "fish and zsh completions load and offer the commands" {
	command -v fish >/dev/null || skip "fish is not installed (apt-get install fish)"
	run -0 fish -c "source $GM_ROOT/contrib/completion/gpuman.fish; complete -C 'gpuman st'"
	[[ "$output" == status*"GPUs, their utilization"* ]]
	run -0 fish -c "source $GM_ROOT/contrib/completion/gpuman.fish; complete -C 'gpuman pick --by me'"
	[ "$(cut -f1 <<<"$output" | tr '\n' ' ')" = "memory memory-rate " ]
	command -v zsh >/dev/null || skip "zsh is not installed (apt-get install zsh)"
	run -0 zsh -n "$GM_ROOT/contrib/completion/_gpuman"
	zc() { zsh -f "$BATS_TEST_DIRNAME/helpers/zsh-complete.zsh" "$1" "$GM_ROOT/contrib/completion/_gpuman"; }
	run -0 zc "gpuman st"
	[ "$(head -1 <<<"$output")" = status ]
	run -0 zc "gpuman pick --by "
	[ "$(tr '\n' ' ' <<<"$output")" = "memory memory-rate power util index " ]
	run -0 zc "gpuman --sim $LAB info "
	[[ "$output" == *GPU-b120a366-f0bb-e9cf-42f2-dc05873f9bd0* ]]
	run -0 zc "gpuman run -- pyth"
	[ "$output" = "<normal:pyth>" ]
}

@test "a man page per command: its --help's synopsis, every option" {
	man=$BATS_TEST_TMPDIR/man
	sh "$GM_ROOT/scripts/mkman" "$man"
	[ -f "$man/gpuman.1" ]
	[ -f "$man/libgpuman.3" ]
	for c in $(listed); do
		page=$(MANWIDTH=200 man -l "$man/gpuman-$c.1" 2>/dev/null)
		usage=$(gpuman "$c" --help | head -1 | sed 's/^usage: //')
		[[ "$page" == *"$usage"* ]] || { echo "gpuman-$c.1 lacks: $usage"; false; }
		for o in $(gpuman "$c" --help | grep -oE '^ +--[a-z-]+' | tr -d ' '); do
			[[ "$page" == *"$o"* ]] || { echo "gpuman-$c.1 lacks $o"; false; }
		done
		grep -q "^\.SS \"gpuman $c\"" "$man/gpuman.1" || { echo "gpuman.1: no section for $c"; false; }
	done
	run -0 bash -c "MANWIDTH=100 man -l '$man/gpuman.1' | grep -A2 '^ENVIRONMENT'"
	[[ "$output" == *GPUMAN_NVML* ]]
}

@test "bash offers for an option only the values that command accepts: each one offered runs, status --format is not pick's" {
	export GPUMAN_SIM=$LAB
	run -0 complete_bash gpuman status --format ""
	[ "$output" = $'csv\ncsv,noheader\ncsv,nounits\ncsv,noheader,nounits' ]
	run -0 complete_bash gpuman pick --format ""
	[ "$output" = $'index\nuuid\ncuda' ]
	for c in $(listed); do
		opts=$(complete_bash gpuman "$c" -)
		for o in --format --by --fallback; do
			grep -qxF -- "$o" <<<"$opts" || continue
			for v in $(complete_bash gpuman "$c" "$o" ""); do
				case $c in
				run) args=(-- true) ;;
				submit | batch | reserve | top | serve | daemon | wait | logs | cancel) continue ;;
				*) args=() ;;
				esac
				run gpuman "$c" "$o" "$v" "${args[@]}"
				# waste exits 3 when it finds waste, as it does here
				[ "$status" = 0 ] || [ "$c$status" = waste3 ] || { echo "$c $o $v offered but refused: $output"; false; }
			done
		done
	done
	# and what a command refuses is not offered to it
	[ -z "$(gpuman complete values --fallback batch)" ]
	[ -z "$(complete_bash gpuman status --format in)" ]
}
