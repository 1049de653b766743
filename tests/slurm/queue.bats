#!/usr/bin/env bats
# The queue on a real Slurm cluster: `gpuman submit --slurm` hands each job
# to Slurm as its own sbatch job.  queue shows the node and GPU it got,
# wait gives its outcome, cancel scancels it, and a dispatcher killed
# meanwhile loses nothing.  Proved from Slurm's side (squeue) and from what
# the jobs themselves printed.

load helpers
load ../e2e/helpers/queue

setup_file() { cluster_up; }
teardown_file() { cluster_down; }

setup() {
	cluster_setup
	export GPUMAN_QUEUE_DIR="$BATS_TEST_TMPDIR/queue"
}

teardown() {
	queue_teardown
	scancel --partition=gpu --quiet 2>/dev/null || true
}

@test "slurm queue: submit --slurm runs the job as its own Slurm job; queue shows its node and GPU; wait gives its outcome" {
	run -0 gpuman submit --slurm --gres=gpu:t4:1 -- \
		sh -c 'echo "on $(hostname) GPU $CUDA_VISIBLE_DEVICES"; sleep 2; exit 3'
	id=$output
	# a Slurm job named after it, in Slurm's queue
	for _ in $(seq 50); do
		[ -n "$(squeue -h -n "gpuman-$id" -o %i)" ] && break
		sleep 0.1
	done
	slurm_job=$(squeue -h -n "gpuman-$id" -o %i)
	[ -n "$slurm_job" ]
	# while it runs: its node and GPU (a T4: 2 or 3 on its node)
	for _ in $(seq 30); do
		run -0 gpuman --json queue
		[ "$(jqr '.[0].node // empty')" != "" ] && break
		sleep 0.1
	done
	[ "$(jqr '.[0].state')" = running ]
	node=$(jqr '.[0].node')
	[ "$node" = "$(squeue -h -j "$slurm_job" -o %N)" ]
	[[ "$(jqr '.[0].gpus[0].index')" == [23] ]]
	run -0 gpuman queue
	[[ "$output" == *"running     $node:"[23]* ]]
	[[ "$output" == *"Slurm job $slurm_job"* ]]
	# wait returns its outcome; the log is what the job printed there
	run -1 gpuman wait "$id"
	[[ "$output" == *"$id failed: exit status 3"* ]]
	run -0 gpuman logs "$id"
	[[ "$output" == "on $node GPU "[0-9]* ]]
	run -0 gpuman --json queue --all
	[ "$(jqr '.[0].exit_status')" = 3 ]
	[ "$(jqr '.[0].node')" = "$node" ]
	# a job that succeeds, and its peak memory measured on the node
	run -0 gpuman submit --slurm -- gpuman-simload --mem 2G --util 70 --seconds 1.5
	run -0 gpuman wait "$output"
	run -0 gpuman --json queue --all
	[ "$(jqr '.[1].state')" = done ]
	[ "$(jqr '.[1].peak_mem_mib')" = 2048 ]
}

@test "slurm queue: cancel scancels the Slurm job; Slurm's refusal is the job's reason" {
	run -0 gpuman submit --slurm -p gpu -- sleep 120
	id=$output
	for _ in $(seq 50); do
		run -0 gpuman --json queue
		[ "$(jqr '.[0].node // empty')" != "" ] && break
		sleep 0.1
	done
	slurm_job=$(squeue -h -n "gpuman-$id" -o %i)
	[ -n "$slurm_job" ]
	run -0 gpuman cancel "$id"
	[[ "$output" == *"$id cancelling (Slurm job $slurm_job on n"* ]]
	run -1 gpuman wait "$id"
	[[ "$output" == *"$id cancelled: Slurm job $slurm_job cancelled"* ]]
	[ -z "$(squeue -h -j "$slurm_job" -t PD,R 2>/dev/null)" ]
	# a partition that does not exist: sbatch's own words
	run -0 gpuman submit --slurm -p nosuch -- true
	run -1 gpuman wait "$output"
	[[ "$output" == *"sbatch refused it: "*"invalid partition"* ]]
	# options that cannot be kept with the job, and no command
	run -2 gpuman submit --slurm --sbatch-arg '--comment=two words' -- true
	[[ "$output" == *"--sbatch-arg: give one word"* ]]
	# GPUs are asked of Slurm, not chosen here
	run -2 gpuman submit --slurm -n 2 -- true
	[[ "$output" == *"-n does not apply under Slurm"*"--gres=gpu"* ]]
	run -2 gpuman submit --slurm --mem 4G -- true
	[[ "$output" == *"--mem does not apply under Slurm"* ]]
}

@test "slurm queue: a dispatcher killed while its Slurm jobs run loses none and runs none twice" {
	for i in 1 2 3; do
		run -0 gpuman submit --slurm -- sh -c "sleep 2; echo {} >>'$PWD/ran-$i'"
	done
	for _ in $(seq 50); do
		[ "$(squeue -h -n gpuman-1,gpuman-2,gpuman-3 -t R | wc -l)" -eq 3 ] && break
		sleep 0.1
	done
	d=$(dispatcher_pid)
	kill -9 "$d"
	# the next command starts a new one, which follows the same Slurm jobs
	run -0 gpuman wait 1 2 3
	[ "$(cat ran-1 ran-2 ran-3 | wc -l)" -eq 3 ]
	[ "$(dispatcher_pid)" != "$d" ] || dispatcher_gone
	run -0 gpuman --json queue --all
	[ "$(jqr '[.[] | select(.state == "done" and .attempts == 1)] | length')" = 3 ]
}

@test "slurm queue: --array with %K keeps K Slurm jobs at once; --after holds a job until the one before succeeds" {
	printf '%s\n' 'echo "s $(date +%s%3N)" >>"$1"; sleep 1; echo "e $(date +%s%3N) $2" >>"$1"' >job.sh
	run -0 gpuman submit --slurm --array 1-4%2 -- sh "$PWD/job.sh" "$PWD/t" '{task}'
	ids=$output
	run -0 gpuman submit --slurm -- sh -c 'sleep 1; exit 1'
	a=$output
	run -0 gpuman submit --slurm --after "$a" -- touch "$PWD/never"
	b=$output
	run -1 gpuman wait $ids "$a" "$b"
	[[ "$output" == *"$b cancelled: not started: job $a (--after) failed"* ]]
	[ ! -e never ]
	# every task once, never more than 2 at a time (from their own records)
	[ "$(awk '$1 == "e" { print $3 }' t | sort -n | paste -sd,)" = 1,2,3,4 ]
	most=$(sort -k2,2n -k1,1r t | awk '$1 == "s" { n++ } $1 == "e" { n-- } n > m { m = n } END { print m }')
	[ "$most" -le 2 ]
}
