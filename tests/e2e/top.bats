#!/usr/bin/env bats
# gpuman top, driven through tmux as a person would: keys in, screen out.

load helpers

setup() {
	gm_setup
	command -v tmux >/dev/null || skip "tmux is missing (scripts/ensure-deps installs it)"
	TMUX_SOCK="gm-top-$$-$BATS_TEST_NUMBER"
	four_gpus
}

teardown() {
	tmux -L "$TMUX_SOCK" kill-server 2>/dev/null || true
	kill_ours -TERM ${BG_PIDS:-}
	wait 2>/dev/null || true
}

# top_start ARGS - gpuman top in a 120x30 terminal; after it exits the pane
# shows its status and the terminal modes, so we can see it left them sane.
top_start() {
	tmux -L "$TMUX_SOCK" new-session -d -x 120 -y 30 \
		"env PATH='$PATH' GPUMAN_SIM='$GPUMAN_SIM' GPUMAN_STATE_DIR='$GPUMAN_STATE_DIR' \
		 GPUMAN_SIM_STATE='$GPUMAN_SIM_STATE' GPUMAN_QUEUE_DIR='$GPUMAN_QUEUE_DIR' \
		 gpuman top $*; echo EXITED \$?; stty -a; sleep 60"
	wait_screen "${TOP_READY:-Test GPU D}"
}
screen() { tmux -L "$TMUX_SOCK" capture-pane -p; }
keys() { tmux -L "$TMUX_SOCK" send-keys "$@"; }
# wait_screen REGEX - until the screen shows it (10 s at most)
wait_screen() {
	wait_for "screen | grep -q -- \"$1\"" || { screen >&3; return 1; }
}

@test "top shows the GPUs with bars and their processes, follows a job that starts and ends" {
	top_start -d 0.3
	run screen
	[[ "$output" == *"Test GPU B"*"[|||"*"3.9G/23.4G]"*"70%]"* ]]
	[[ "$output" == *"3000001 ?"*"20%"*"3.9G"* ]]
	# 3000002 holds 8.8G computing nothing: marked; so are processes outside gpuman
	[[ "$output" == *"3000002 ?"*"0%"*"8.8G"*"hog"* ]]
	[[ "$output" == *"waste: 1 hog, 0 idle leases, 2 outside gpuman"* ]]
	gpuman run --only 2 -- gpuman-simload --mem 1G --util 40 --seconds 60 &
	BG_PIDS=$!
	wait_screen "^  2 .*$(id -un) .* 40% .*1.0G [0-9]"
	kill $BG_PIDS
	wait_for '! screen | grep -q "^  2 .* 40% "'
}

@test "s sorts, / filters, q quits and leaves the terminal sane" {
	top_start -d 0.3
	[[ "$(screen | grep -m1 '^ *[0-9]  *[0-9]\{7\}')" == *3000001* ]]
	keys s
	wait_screen 'sort: util'
	# the busiest process first (20% beats 0%)
	[[ "$(screen | grep -m1 '^ *[0-9]  *[0-9]\{7\}')" == *3000001* ]]
	keys s
	wait_screen 'sort: memory'
	[[ "$(screen | grep -m1 '^ *[0-9]  *[0-9]\{7\}')" == *3000002* ]]
	keys / 3000003 Enter
	wait_screen 'filter: 3000003'
	[ "$(screen | grep -c '^ *[0-9]  *[0-9]\{7\}')" = 1 ]
	keys c
	wait_screen 'filter: -'
	keys q
	wait_screen 'EXITED 0'
	# then stty's flags, sane or not ("-icanon" matches too)
	wait_screen 'icanon'
	run screen
	[[ "$output" == *" icanon "* && "$output" == *" echo "* ]]
}

@test "k signals your own selected process; another user's is refused" {
	CUDA_VISIBLE_DEVICES=GPU-cccc gpuman-simload --mem 1G --util 5 --seconds 60 &
	BG_PIDS=$!
	top_start -d 0.3
	wait_screen " $BG_PIDS "
	keys / "$BG_PIDS" Enter
	wait_screen "filter: $BG_PIDS"
	keys k
	wait_screen "signal pid $BG_PIDS"
	keys t Enter
	wait_screen "sent SIGTERM to pid $BG_PIDS"
	st=0
	wait $BG_PIDS || st=$?
	[ "$st" = 143 ]
	# the scenario's processes have no owner here: not ours to signal
	keys c / 3000002 Enter
	wait_screen "filter: 3000002"
	keys k
	wait_screen "pid 3000002 is not yours: not signalled"
}

@test "top redraws for a new terminal size" {
	top_start -d 5
	tmux -L "$TMUX_SOCK" resize-window -x 90 -y 20
	wait_for '[ "$(screen | head -1 | wc -c)" -le 91 ] && screen | head -1 | grep -q "q quit"'
	run screen
	[[ "$output" == *"Test GPU A"* ]]
}

@test "without a terminal top is status --watch" {
	# -k: once, under ASan, the exit's leak check never finished (its
	# tracer waited on a process that spun): a failure, never a hang
	run -0 timeout -k 10 --preserve-status -s INT 2 gpuman top -d 0.3
	[[ "$output" == *"---- "*"(every 0.3s; Ctrl-C stops) ----"*"Test GPU A"* ]]
	[ "$(grep -c '^---- ' <<<"$output")" -ge 2 ]
	run -2 gpuman top -d 0
	[[ "$output" == *"--delay '0'"* ]]
}

@test "timeline: top shows hogs develop live as the simulated machine changes" {
	cp "$GM_ROOT/examples/timeline.json" "$BATS_TEST_TMPDIR/timeline.json"
	export GPUMAN_SIM=$BATS_TEST_TMPDIR/timeline.json
	# 17 s into the minute: everyone computes, the training job stops on GPU 1 at 20 s
	touch -d "@$(($(date +%s) - 17))" "$GPUMAN_SIM"
	TOP_READY='RTX A5000' top_start -d 0.3
	run screen
	[[ "$output" == *"waste: 0 hogs, 0 idle leases, 2 outside gpuman"* ]]
	[[ "$output" =~ "  1  4100001 ?  "[^$'\n']*" 88% " ]]
	wait_screen 'waste: 2 hogs, 0 idle leases, 2 outside gpuman'
	run screen
	[[ "$output" =~ "  1  4100001 ?  "[^$'\n']*" 0% "[^$'\n']*"hog" ]]
	[[ "$output" =~ "  2  4100002 ?  "[^$'\n']*"hog" ]]
	# GPU 0's process computes: marked only as outside gpuman
	[[ "$output" =~ "  0  4100001 ?  "[^$'\n']*" 92% "[^$'\n']*"out " ]]
}

@test "top shows your queue: how many wait and run, and the next jobs" {
	# every GPU leased: submitted jobs wait
	gpuman run -n 4 -- sleep 60 3>&- >/dev/null 2>&1 &
	BG_PIDS=$!
	wait_for '[ "$(gpuman status --json | jq ".leases | length")" = 1 ]'
	gpuman submit --only 2 -- gpuman-simload --mem 1G --util 10 --seconds 1 >/dev/null
	gpuman submit -n 2 -- python3 train.py --epochs 3 >/dev/null
	gpuman submit -- true >/dev/null
	top_start -d 0.3
	wait_screen 'your queue: 3 queued, 0 running'
	run screen
	[[ "$output" == *"next 1. job 1: gpuman-simload --mem 1G --util 10 --seconds 1"* ]]
	[[ "$output" == *"next 2. job 2: python3 train.py --epochs 3"* ]]
	[[ "$output" != *"next 3."* ]]
	gpuman cancel 1 2 3 >/dev/null
	wait_for '! screen | grep -q "your queue"'
}

@test "top shows a MIG GPU's slices under it with their memory" {
	export GPUMAN_SIM="$GM_ROOT/examples/mig-a100.json"
	TOP_READY="A100" top_start -d 0.3
	run screen
	# the 3g.40gb slice: the training job's 30 GiB of 39.2 GiB
	[[ "$output" == *"3g.40gb  gi 1 "*"[|||"*"30.0G/39.2G]"* ]]
	[[ "$output" == *"1g.10gb  gi 14"*"6M/9.5G]"* ]]
	[ "$(printf '%s\n' "$output" | grep -c '^    [123]g\.')" = 4 ]
}
