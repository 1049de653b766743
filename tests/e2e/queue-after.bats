#!/usr/bin/env bats
# Chains and order in the queue: --after (a job starts once the jobs it
# names have succeeded; if one fails or is cancelled, it is cancelled with
# the reason, and so are the jobs after it) and --priority.

load helpers
load helpers/queue

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	touch "$BATS_TEST_TMPDIR/go"
	queue_teardown
}

@test "preprocess -> train -> evaluate with --after: each starts once the one before has succeeded" {
	gpus 4
	p=$(gpuman submit --name prep -- sh -c 'while [ ! -e go ]; do sleep 0.05; done; echo prep >>order')
	t=$(gpuman submit --name train --after "$p" -- sh -c 'sleep 0.3; echo train >>order')
	e=$(gpuman submit --name eval --after "$t" -- sh -c 'echo eval >>order')
	# with four GPUs free, nothing but --after keeps them apart
	run -0 gpuman queue --json
	[ "$(jqr '[.[] | "\(.id):\(.after | tostring)"] | join(" ")')" = "$p:[] $t:[$p] $e:[$t]" ]
	run -0 gpuman queue
	[[ "$output" == *"starts after job $p has succeeded"* ]]
	touch go
	run -0 gpuman wait "$e" "$p" "$t"
	[ "$(cat order)" = "$(printf 'prep\ntrain\neval')" ]
	run -0 gpuman queue --all --json
	[ "$(jqr '.[1].start_ms >= .[0].end_ms and .[2].start_ms >= .[1].end_ms')" = true ]
	dispatcher_gone
}

@test "a failed job cancels the jobs after it, and theirs, each with the reason; none of them runs" {
	gpus 2
	gpuman submit -- sh -c 'while [ ! -e go ]; do sleep 0.05; done; exit 3' >/dev/null
	gpuman submit --after 1 -- touch ran-2 >/dev/null
	gpuman submit --after 2 -- touch ran-3 >/dev/null
	gpuman submit -- true >/dev/null
	gpuman submit --after 1,4 -- touch ran-5 >/dev/null
	touch go
	run -1 gpuman wait 1 2 3 4 5
	[ "${lines[0]}" = "1 failed: exit status 3" ]
	[ "${lines[1]}" = "2 cancelled: not started: job 1 (--after) failed" ]
	[ "${lines[2]}" = "3 cancelled: not started: job 2 (--after) was cancelled" ]
	[ "${lines[3]}" = "4 done" ]
	[ "${lines[4]}" = "5 cancelled: not started: job 1 (--after) failed" ]
	[ ! -e ran-2 ]
	[ ! -e ran-3 ]
	[ ! -e ran-5 ]
	dispatcher_gone
}

@test "cancelling a job cancels the jobs that wait for it" {
	gpus 1
	gpuman submit -- sh -c 'touch started; while [ ! -e go ]; do sleep 0.05; done' >/dev/null
	gpuman submit -- true >/dev/null
	gpuman submit --after 2 -- touch ran-3 >/dev/null
	gpuman submit --after 1 -- touch ran-4 >/dev/null
	wait_for '[ -e started ]'
	run -0 gpuman cancel 2
	run -0 gpuman queue --all --json
	[ "$(jqr '.[2] | "\(.state) \(.reason)"')" = "cancelled not started: job 2 (--after) was cancelled" ]
	run -0 gpuman cancel 1
	run -1 gpuman wait 1 2 3 4
	[ "${lines[3]}" = "4 cancelled: not started: job 1 (--after) was cancelled" ]
	[ ! -e ran-3 ]
	[ ! -e ran-4 ]
}

@test "--after a job that does not exist or has failed, or no job id, is refused, naming it" {
	gpus 1
	gpuman submit -- sh -c 'exit 1' >/dev/null
	run -1 gpuman wait 1
	run -2 gpuman submit --after 99 -- true
	[[ "$output" == *"--after 99: no job 99 in your queue"* ]]
	run -2 gpuman submit --after 1 -- true
	[[ "$output" == *"--after 1: job 1 has failed; a job after it could never start"* ]]
	run -2 gpuman submit --after 1,x -- true
	[[ "$output" == *"--after '1,x': 'x' is not a job id"* ]]
	run -2 gpuman submit --after '' -- true
	run -2 gpuman submit --after 0 -- true
	run -0 gpuman queue --all --json
	[ "$(jqr length)" = 1 ]
}

@test "--priority: of the queued jobs, higher ones start first, equal ones first come, first served" {
	gpus 1
	gpuman submit -- sh -c 'touch started; while [ ! -e go ]; do sleep 0.05; done' >/dev/null
	wait_for '[ -e started ]'
	for p in 0 0 5 -1 5; do
		gpuman submit --priority "$p" -- sh -c 'echo $GPUMAN_JOB >>order' >/dev/null
	done
	run -0 gpuman queue --json
	[ "$(jqr '[.[].priority] | tostring')" = '[0,0,0,5,-1,5]' ]
	touch go
	run -0 gpuman wait 1 2 3 4 5 6
	[ "$(cat order | tr '\n' ' ')" = "4 6 2 3 5 " ]
	run -2 gpuman submit --priority high -- true
	[[ "$output" == *"--priority 'high': a whole number from -1000 to 1000"* ]]
	run -2 gpuman submit --priority 1001 -- true
}

# fake PROGRAM - a stand-in for notify-send or sendmail on PATH that
# records its arguments, stdin and DBUS_SESSION_BUS_ADDRESS in PROGRAM.out
fake() {
	mkdir -p "$BATS_TEST_TMPDIR/bin"
	cat >"$BATS_TEST_TMPDIR/bin/$1" <<SH
#!/bin/sh
{ printf '%s|' "\$@"; echo; echo "bus=\$DBUS_SESSION_BUS_ADDRESS"; [ "$1" != sendmail ] || cat; } >>"$BATS_TEST_TMPDIR/$1.out"
SH
	chmod +x "$BATS_TEST_TMPDIR/bin/$1"
	export PATH="$BATS_TEST_TMPDIR/bin:$PATH"
}

@test "--notify: a desktop notification from a desktop session, told to that session" {
	gpus 1
	fake notify-send
	DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1/bus run -0 gpuman submit --name train --notify -- true
	unset DBUS_SESSION_BUS_ADDRESS
	run -0 gpuman wait 1
	wait_for '[ -s notify-send.out ]'
	[[ "$(cat notify-send.out)" == "--app-name=gpuman|gpuman: job 1 (train) done|true"$'\n'"done after "*" on GPU 0|"* ]]
	[[ "$(cat notify-send.out)" == *"bus=unix:path=/run/user/1/bus"* ]]
	run -0 gpuman queue --all --json
	[ "$(jqr '.[0].notify')" = "desktop:$BATS_TEST_TMPDIR/bin/notify-send" ]
}

@test "--notify: a mail through sendmail without a desktop; exec:PROGRAM also for jobs cancelled after a failure" {
	gpus 1
	fake sendmail
	unset DBUS_SESSION_BUS_ADDRESS
	USER=tester gpuman submit --notify -- sh -c 'while [ ! -e go ]; do sleep 0.05; done; exit 3' >/dev/null
	cat >tell <<'SH'
#!/bin/sh
echo "$1 $2 $GPUMAN_JOB_NAME: $GPUMAN_JOB_REASON" >>"$(dirname "$0")/told"
SH
	chmod +x tell
	gpuman submit --name after --after 1 --notify=exec:./tell -- true >/dev/null
	touch go
	run -1 gpuman wait 1 2
	wait_for '[ -s told ] && [ -s sendmail.out ]'
	[ "$(cat told)" = "2 cancelled after: not started: job 1 (--after) failed" ]
	[ "$(head -1 sendmail.out)" = "-oi|--|tester|" ]
	grep -qx 'To: tester' sendmail.out
	grep -qx 'Subject: gpuman: job 1 failed' sendmail.out
	grep -q 'failed after .*: exit status 3' sendmail.out
	# each end is told once
	sleep 0.5
	[ "$(grep -c '^-oi' sendmail.out)" = 1 ]
	[ "$(wc -l <told)" = 1 ]
}

@test "--notify: what cannot be told is refused at submit, naming why" {
	gpus 1
	unset DBUS_SESSION_BUS_ADDRESS
	run -2 gpuman submit --notify=desktop -- true
	[[ "$output" == *"--notify=desktop: no desktop session here (DBUS_SESSION_BUS_ADDRESS is not set)"* ]]
	run -2 gpuman submit --notify=exec:no-such-program -- true
	[[ "$output" == *"--notify=exec:no-such-program: no program 'no-such-program'"* ]]
	run -2 gpuman submit --notify=pigeon -- true
	[[ "$output" == *"--notify=pigeon: use desktop, mail, mail:ADDRESS or exec:PROGRAM"* ]]
	run -2 gpuman submit --notify mail -- true
	[[ "$output" == *"--notify mail: write --notify=mail"* ]]
	run -2 gpuman submit --notify=mail:'a b' -- true
	run -0 gpuman queue --all --json
	[ "$(jqr length)" = 0 ]
}

@test "--notify with USER unset (cron, systemd, su) mails the user it runs as" {
	gpus 1
	fake sendmail
	unset DBUS_SESSION_BUS_ADDRESS
	run -0 env -u USER gpuman submit --notify -- true
	run -0 gpuman wait "$output"
	wait_for '[ -s sendmail.out ]'
	[ "$(head -1 sendmail.out)" = "-oi|--|$(id -un)|" ]
	run -0 gpuman queue --all --json
	[[ "$(jqr '.[0].notify')" == mail:*:"$(id -un)" ]]
}
