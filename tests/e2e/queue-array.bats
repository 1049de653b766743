#!/usr/bin/env bats
# Arrays in the queue (submit --array): one job per task number, {task}
# and GPUMAN_ARRAY_TASK_ID in each, at most K at once with %K.

load helpers
load helpers/queue

setup() {
	gm_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	queue_teardown
}

@test "--array 1-6%2: a job per task with {task} and GPUMAN_ARRAY_TASK_ID, named NAME_task, never more than 2 at once on 4 free GPUs" {
	gpus 4
	ids=$(gpuman submit --name sweep --array 1-6%2 -- sh -c 'echo {task} $GPUMAN_ARRAY_TASK_ID >out.{task}; sleep 0.4')
	[ "$(echo $ids | wc -w)" = 6 ]
	run -0 gpuman wait $ids
	for t in 1 2 3 4 5 6; do [ "$(cat out.$t)" = "$t $t" ]; done
	run -0 gpuman queue --all --json
	[ "$(jqr '[.[] | "\(.name):\(.array_task)"] | join(" ")')" = "sweep_1:1 sweep_2:2 sweep_3:3 sweep_4:4 sweep_5:5 sweep_6:6" ]
	# the most that ran at one time: 2 (each start against the others' spans)
	[ "$(jqr '[.[] as $a | [.[] | select(.start_ms <= $a.start_ms and .end_ms > $a.start_ms)] | length] | max')" = 2 ]
	dispatcher_gone
}

@test "--array without %K uses every free GPU; a list of tasks; queue shows ARRAY_TASK; cancel FIRST-LAST cancels the array" {
	gpus 2
	ids=$(gpuman submit --array 0-20:10,7 -- sh -c 'while [ ! -e go ]; do sleep 0.05; done')
	set -- $ids
	[ $# = 4 ]
	for _ in $(seq 100); do
		[ "$(gpuman queue --json | jq -r '[.[] | select(.state == "running")] | length')" = 2 ] && break
		sleep 0.05
	done
	run -0 gpuman queue
	[[ "$output" == *" $1  running "*" ${1}_0 "* ]]
	[[ "$output" == *" $4  queued "*" ${1}_7 "* ]]
	run -0 gpuman queue --json
	[ "$(jqr '[.[].array_task] | map(tostring) | join(" ")')" = "0 10 20 7" ]
	run -0 gpuman cancel "$1-$4"
	run -1 gpuman wait $ids
	[ "$(echo "$output" | grep -c cancelled)" = 4 ]
	run -2 gpuman cancel "$(($4 + 1))-$(($4 + 9))"
	[ "$output" = "gpuman cancel: no job of yours in $(($4 + 1))-$(($4 + 9))" ]
}

@test "submit --array refuses what is not a list of tasks (exit 2) and takes nothing in" {
	gpus 1
	run -2 gpuman submit --array 1-2000 -- true
	[[ "$output" == *"--array '1-2000': at most 1000 tasks"* ]]
	run -2 gpuman submit --array 5-1 -- true
	[[ "$output" == *"--array '5-1': not a list of task numbers"* ]]
	run -2 gpuman submit --array 1-4%0 -- true
	[[ "$output" == *"after % comes how many may run at once"* ]]
	run -2 gpuman submit --array '' -- true
	run -0 gpuman queue --all --json
	[ "$output" = "[]" ]
}

@test "wait FIRST-LAST waits for an array by its range, wait --all for whatever is queued or running" {
	gpus 2
	run -0 gpuman wait --all
	[ "$output" = "gpuman wait: no job of yours is queued or running" ]
	run -0 gpuman wait --all --json
	[ "$output" = "[]" ]
	gpuman submit -- true >/dev/null
	run -0 gpuman wait 1
	ids=$(gpuman submit --array 1-3 -- sh -c 'while [ ! -e go ]; do sleep 0.05; done; exit $(({task} - 1))')
	[ "$ids" = "2 3 4" ]
	# it waits: nothing has ended yet
	run -124 timeout 1 gpuman wait 2-4
	run -124 timeout 1 gpuman wait --all
	touch go
	run -1 gpuman wait 2-4
	[ "$output" = "2 done
3 failed: exit status 1
4 failed: exit status 2" ]
	# --all takes only what has not ended: job 5
	gpuman submit -- sh -c 'while [ ! -e go2 ]; do sleep 0.05; done' >/dev/null
	(sleep 1; touch go2) &
	run -0 gpuman wait -a --json
	[ "$(jqr '[.[] | "\(.id) \(.state)"] | join(",")')" = "5 done" ]
	# a range with none of mine, a range upside down, both at once
	run -2 gpuman wait 6-9
	[ "$output" = "gpuman wait: no job of yours in 6-9" ]
	run -2 gpuman wait 4-2
	[[ "$output" == *"'4-2' is not a job id or range of ids (17, 17-36)"* ]]
	run -2 gpuman wait --all 2
	[[ "$output" == *"--all or job ids, not both ('2')"* ]]
}
