#!/usr/bin/env bats
# gpuman's supervisors (run, the runner of batch and the queue, the broker)
# ask for a short time slice so that a hand-off is not kept waiting behind a
# busy machine's runnable processes (engine/protocol.h); the job itself
# runs with exactly the scheduling its caller had: slice and nice.

load helpers

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
	scenario one <<'JSON'
{ "gpus": [ {"name":"a","memory_total_mib":16000} ] }
JSON
	# what a job reports: its slice and nice, and the slice of the gpuman
	# process above it (a task line runs under sh -c)
	cat >report.sh <<'SH'
#!/bin/sh
slice() { sed -n 's/^se\.slice *: *//p' "/proc/$1/sched"; }
echo "job $(slice $$) nice $(sed 's/.*) //' /proc/$$/stat | cut -d' ' -f17)"
p=$PPID
while [ "$p" -gt 1 ] && ! grep -q '^gpuman' "/proc/$p/comm"; do
	p=$(sed 's/.*) //' "/proc/$p/stat" | cut -d' ' -f2)
done
echo "supervisor $(cat /proc/$p/comm) $(slice $p)"
SH
	chmod +x report.sh
	[ -r /proc/self/sched ] && grep -q '^se\.slice' /proc/self/sched ||
		skip "this kernel shows no se.slice in /proc/PID/sched"
}

# sliced NS CMD... - run CMD with the caller's slice set to NS; skips where
# the kernel has no custom slices (before Linux 6.12).
sliced() {
	run python3 "$GM_ROOT/tests/e2e/helpers/sliced.py" "$@"
	[ "$status" -ne 77 ] || skip "this kernel has no custom time slices (Linux 6.12+)"
}

@test "run: the job keeps its caller's slice and nice; gpuman run itself runs on a short slice" {
	sliced 300000 nice -n 3 gpuman run -- ./report.sh
	[ "$status" -eq 0 ]
	[[ "$output" == *"job 300000 nice 3"* ]]
	[[ "$output" == *"supervisor gpuman 100000"* ]]
}

@test "run: a caller on the kernel's default slice gives the job the default" {
	default=$(sed -n 's/^se\.slice *: *//p' /proc/$$/sched)
	run gpuman run -- ./report.sh
	[ "$status" -eq 0 ]
	[[ "$output" == *"job $default nice "* ]]
}

@test "batch and queue: the runner runs on a short slice, the task with its caller's" {
	echo "$PWD/report.sh >$PWD/out.{task}" >tasks.txt
	sliced 300000 nice -n 2 gpuman batch tasks.txt
	[ "$status" -eq 0 ]
	grep -q 'job 300000 nice 2' out.1
	grep -q 'supervisor gpuman-runner 100000' out.1
	# the queue's dispatcher starts with the first submit, and its runners
	# with its settings: the submitter's
	sliced 400000 sh -c 'id=$(gpuman submit -- sh -c "$0/report.sh >$0/out.q") && gpuman wait "$id"' "$PWD"
	[ "$status" -eq 0 ]
	grep -q 'job 400000 nice 0' out.q
	grep -q 'supervisor gpuman-runner 100000' out.q
}

@test "the broker runs on a short slice" {
	export GPUMAN_BROKER=$BATS_TEST_TMPDIR/broker.sock
	mkdir -m 700 bstate
	gpuman daemon --socket "$GPUMAN_BROKER" --state bstate/leases.json 2>daemon.log &
	d=$!
	wait_for "[ -S '$GPUMAN_BROKER' ]"
	slice=$(sed -n 's/^se\.slice *: *//p' /proc/$d/sched)
	run gpuman run -- ./report.sh
	kill $d
	wait $d || true
	[ "$slice" = 100000 ]
	[ "$status" -eq 0 ]
	[[ "$output" == *"supervisor gpuman 100000"* ]]
}
