#!/usr/bin/env bats
# gpuman inside a Slurm job with a device cgroup (ConstrainDevices=yes):
# Slurm renumbers CUDA_VISIBLE_DEVICES from 0 and only SLURM_STEP_GPUS /
# SLURM_JOB_GPUS name the physical GPU.  The cgroup is real: a task can
# open only its own fake GPU device.

load helpers

setup_file() {
	[ -d /sys/fs/cgroup/devices ] || skip "no cgroup v1 devices controller here"
	# node names of their own: the cgroup directories are named after them
	cluster_up GM_SLURM_CGROUP=1 GM_SLURM_PREFIX="cg$RANDOM"n
}
teardown_file() { cluster_down; }
setup() { cluster_setup; }

@test "slurm cgroup: a renumbered CUDA_VISIBLE_DEVICES still means the job's own GPU" {
	run srun -N1 -n1 --gres=gpu:t4:1 sh -c '
		echo "$CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"
		(exec 3<"'"$GM_CLUSTER"'/dev/$SLURMD_NODENAME/nvidia0") 2>/dev/null && echo open0 || echo denied0
		gpuman pick; gpuman status --json | jq -c "[.gpus[].index]"
		gpuman run -- sh -c "echo \$GPUMAN_GPUS \$CUDA_VISIBLE_DEVICES"'
	[ "$status" -eq 0 ]
	set -- ${lines[0]}
	[ "$1" = 0 ]                      # renumbered by Slurm
	[[ "$2" =~ ^[23]$ ]]              # the real T4
	[ "${lines[1]}" = denied0 ]       # the cgroup is enforced
	[ "${lines[2]}" = "$2" ]          # pick names the real GPU, not GPU 0
	[ "${lines[3]}" = "[$2]" ]
	[ "${lines[4]}" = "$2 0" ]        # leased the real one; the child reads it as 0
}
