#!/usr/bin/env bats
# gpuman inside a Slurm job without a device cgroup: CUDA_VISIBLE_DEVICES
# and SLURM_*_GPUS both hold node-global indices; status, pick and run
# stay inside the job's GPUs.

load helpers

setup_file() { cluster_up GM_SLURM_CGROUP=0; }
teardown_file() { cluster_down; }
setup() { cluster_setup; }

@test "slurm: pick and status in a step see only its GPUs (global indices)" {
	run srun -N1 -n1 --gres=gpu:t4:2 sh -c 'echo "$CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"; gpuman status --json'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "2,3 2,3" ]
	output=${output#*$'\n'}
	[ "$(jqr '[.gpus[].index] | join(",")')" = "2,3" ]
	[ "$(jqr '.gpus[0].name')" = "Tesla T4" ]
	run srun -N1 -n1 --gres=gpu:a100:1 gpuman pick --by index
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^[01]$ ]]
	run srun -N1 -n1 --gres=gpu:a100:1 gpuman status
	[ "$status" -eq 0 ]
	[ "$(grep -c "NVIDIA A100" <<<"$output")" -eq 1 ]
	[[ "$output" != *"Tesla T4"* ]]
	# -i cannot step outside either
	run srun -N1 -n1 --gres=gpu:a100:1 gpuman status -i 3
	[ "$status" -eq 2 ]
	[[ "$output" == *"not a GPU of Slurm job"* ]]
}

@test "slurm: run in a batch job leases only the job's GPUs, never more" {
	# a 2-GPU job: gpuman run -n 3 can never be met there (75), -n 2 gets
	# exactly the job's two
	cat >job.sh <<'SH'
#!/bin/sh
echo "job $SLURM_JOB_GPUS"
gpuman run -n 3 -- true; echo "n3 $?"
gpuman run -n 2 -- sh -c 'echo "leased $GPUMAN_GPUS cvd $CUDA_VISIBLE_DEVICES"'
SH
	run sbatch --wait -N1 --gres=gpu:t4:1,gpu:a100:1 -o out.txt job.sh
	[ "$status" -eq 0 ]
	cat out.txt
	job=$(sed -n 's/^job //p' out.txt)
	grep -qx "n3 75" out.txt
	leased=$(sed -n 's/^leased \([^ ]*\) cvd.*/\1/p' out.txt)
	[ "$(tr , '\n' <<<"$leased" | sort -n | paste -sd,)" = "$(tr , '\n' <<<"$job" | sort -n | paste -sd,)" ]
	grep -q "cvd $job\$\|cvd ${job#*,},${job%,*}\$" out.txt
}
