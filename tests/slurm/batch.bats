#!/usr/bin/env bats
# gpuman batch on a real Slurm cluster: 2 nodes x (2 fast A100 + 2 slow T4)
# in partition "gpu", one more node in partition "short" (1 minute limit).
# Every claim is proved from what the tasks themselves recorded
# (gpuman-simload --record: start/end, pid, the GPU's UUID, which differs
# per node), not from gpuman's summary alone.

load helpers

setup_file() {
	cluster_up
	# A job killed by its time limit takes over a minute (Slurm's limits
	# are minutes, checked every 30 s): start it now, on its own node, and
	# look at it in the last test.
	. "$GM_CLUSTER/env"
	mkdir -p "$GM_CLUSTER/tl"
	cd "$GM_CLUSTER/tl" || return 1
	printf 'sleep 300\n' >tl.txt
	# (bats runs this with errexit: the status must not end the subshell)
	(
		st=0
		gpuman batch --slurm -p short -t 1 --gres=gpu:1 tl.txt >out 2>&1 &
		echo $! >pid
		wait $! || st=$?
		echo $st >rc
	) 3>&- &
}

teardown_file() {
	# stopped like Ctrl-C, before the cluster goes: its srun would wait
	# for a controller that is gone
	if [ -s "$GM_CLUSTER/tl/pid" ] && kill -TERM "$(cat "$GM_CLUSTER/tl/pid")" 2>/dev/null; then
		for _ in $(seq 100); do [ -s "$GM_CLUSTER/tl/rc" ] && break; sleep 0.1; done
	fi
	cluster_down
}

setup() { cluster_setup; }

# An allocation a failed test left behind (gpuman killed before its
# scancel) must not hold the next test's sbatch pending for ever: cancel
# what ran in partition "gpu" (the time-limit job of setup_file runs in
# "short" and stays).
teardown() {
	scancel --partition=gpu --quiet 2>/dev/null || true
	[ -z "${SHARED:-}" ] || rm -rf "$SHARED" # the log-directory test's
}

# sweep N FILE - N tasks of 1 s (0.5 s on an A100) recording into rec
sweep() {
	for i in $(seq "$1"); do
		echo "gpuman-simload --mem 1G --util 50 --seconds 1 --record $PWD/rec; echo {task} >>$PWD/ran"
	done >"$2"
}

# The tasks' own records: each task once, no two at a time on one GPU,
# both nodes used, the A100s (GPU 0, 1) took more than the T4s (2, 3);
# with "even" as $2, at least as many (24 tasks are three rounds of 8:
# srun's start-up on a busy machine can even out a 0.5 s lead, as CI saw)
check_sweep() {
	[ "$(sort -n ran | uniq | wc -l)" -eq "$1" ]
	[ "$(wc -l <ran)" -eq "$1" ]
	run -0 python3 "$GM_ROOT/tests/e2e/helpers/overlaps.py" rec
	[ "$output" = "jobs $1 overlaps 0" ]
	uuids=$(awk '$1 == "start" { print $3 }' rec)
	[ "$(sed 's/^GPU-\([0-9a-f]*\)-.*/\1/' <<<"$uuids" | sort -u | wc -l)" -eq 2 ]   # 2 nodes
	fast=$(grep -c -- '-00000000000[01]$' <<<"$uuids")
	slow=$(grep -c -- '-00000000000[23]$' <<<"$uuids")
	echo "A100 $fast tasks, T4 $slow tasks" >&3
	if [ "${2:-}" = even ]; then [ "$fast" -ge "$slow" ]; else [ "$fast" -gt "$slow" ]; fi
}

@test "slurm batch: 40 tasks over 2 nodes x 4 mixed GPUs, each once, never two on a GPU, fast GPUs take more" {
	sweep 40 sweep.txt
	run -0 gpuman batch --slurm -N2 --gres=gpu:a100:2,gpu:t4:2 sweep.txt
	summary=$output
	[[ "$output" == *"40 tasks: 40 done"* ]]
	[[ "$output" == *"NODE:GPU"* ]]
	check_sweep 40
	# the summary names node and GPU per task, as the tasks saw them
	sum=gpuman-logs/sweep.txt/summary.json
	[ "$(jq '[.tasks[] | select(.state == "done")] | length' $sum)" -eq 40 ]
	[ "$(jq -r '[.tasks[].node] | unique | join(",")' $sum)" = "n1,n2" ]
	[ "$(jq -r '[.tasks[].gpus[].index] | unique | join(",")' $sum)" = "0,1,2,3" ]
	[ "$(jq '[.gpus[].tasks] | add' $sum)" -eq 40 ]
	[ -s gpuman-logs/sweep.txt/task-40.log ] || [ -f gpuman-logs/sweep.txt/task-40.log ]
	# peak memory and utilization, measured on the node beside each task
	# (gpuman slurm-sample): the 1 GiB at 50 % each task held; a task
	# shorter than the first sample (0.2 s in) on a loaded machine has none
	[ "$(jq '[.tasks[] | select(.peak_mem_mib != null)] | length' $sum)" -ge 20 ]
	[ "$(jq -r '[.tasks[] | select(.peak_mem_mib != null) | "\(.peak_mem_mib) \(.mean_util_pct)"] | unique | join(",")' $sum)" = "1024 50" ]
	[[ "$summary" == *" 1.0G   50% "* ]]
}

@test "slurm batch: plain 'gpuman batch' inside an sbatch allocation spreads over all its nodes" {
	sweep 24 sweep.txt
	run -0 sbatch --wait -N2 --ntasks-per-node=4 --gres=gpu:a100:2,gpu:t4:2 -o out.txt \
		--wrap "gpuman batch sweep.txt"
	cat out.txt
	grep -q "24 tasks: 24 done" out.txt
	grep -q "Slurm job" out.txt
	check_sweep 24 even
}

@test "slurm batch: a task out of memory on a T4 is requeued onto an A100" {
	# the A100 is busy first; the 40 GB task lands on the 15 GB T4, fails,
	# and must wait for the A100
	cat >oom.txt <<TXT
sleep 1.5
gpuman-simload --mem 40G --util 50 --seconds 0.2 --record $PWD/rec
TXT
	run -0 gpuman batch --slurm -N1 --gres=gpu:a100:1,gpu:t4:1 oom.txt
	sum=gpuman-logs/oom.txt/summary.json
	[ "$(jq -r '.tasks[1].state' $sum)" = done ]
	[ "$(jq -r '.tasks[1].attempts' $sum)" = 2 ]
	[ "$(jq -r '.tasks[1].oom_requeues' $sum)" = 1 ]
	[[ "$(jq -r '.tasks[1].reason' $sum)" == *"out of memory"*"of type t4"* ]]
	grep -q "out of memory" gpuman-logs/oom.txt/task-2.log
	# it ran to its end on an A100 (GPU 0 or 1 of its node)
	[ "$(grep -c '^end' rec)" -eq 1 ]
	grep '^end' rec | grep -q -- '-00000000000[01] '
}

@test "slurm batch: --resume runs only what did not succeed" {
	printf '%s\n' 'echo {task} >>ran' 'echo {task} >>ran; test -e fixed' 'echo {task} >>ran' >r.txt
	run -1 gpuman batch --slurm --gres=gpu:1 r.txt
	[[ "$output" == *"3 tasks: 2 done, "*"1 failed"* ]]
	touch fixed
	run -0 gpuman batch --slurm --gres=gpu:1 --resume r.txt
	[[ "$output" == *"(2 from an earlier run)"* ]]
	[ "$(sort -n ran | paste -sd,)" = "1,2,2,3" ]
}

@test "slurm batch: no Slurm, no controller, a bad partition or GPU type: each said clearly" {
	echo true >t.txt
	run -1 env PATH="$GM_BUILD" gpuman batch --slurm t.txt
	[[ "$output" == *"Slurm's 'salloc' is not on the PATH"* ]]
	# a controller that does not answer (a port nobody listens on)
	sed 's/^SlurmctldPort=.*/SlurmctldPort=9/' "$SLURM_CONF" >dead.conf
	run -1 env SLURM_CONF="$PWD/dead.conf" gpuman batch --slurm t.txt
	[[ "$output" == *"the Slurm controller does not answer"* ]]
	run -1 gpuman batch --slurm -p nosuch t.txt
	[[ "$output" == *"no such partition"* ]]
	[[ "$output" == *"gpu:a100:2,gpu:t4:2"* ]]     # what there is
	run -1 gpuman batch --slurm --gres=gpu:h100:1 t.txt
	[[ "$output" == *"no node can ever give what was asked"* ]]
	run -2 gpuman batch --slurm --mem 8G t.txt
	[[ "$output" == *"--mem does not apply under Slurm"* ]]
	# nothing was left behind
	[ -z "$(squeue -h -t PD,R -p gpu)" ]
}

@test "slurm batch: --constraint, --salloc-arg and --srun-arg reach Slurm as given; a constraint no node meets is refused in Slurm's words" {
	echo true >t.txt
	run -1 gpuman batch --slurm --constraint=nvlink t.txt
	[[ "$output" == *"no node can ever give what was asked (Job submit/allocate failed: Invalid feature specification)"* ]]
	[[ "$output" == *"gpu:a100:2,gpu:t4:2"* ]]     # what there is
	# salloc's own option (a comment on the allocation) and each step's
	# (an environment variable for the task), as a user would pass them
	echo "squeue -h -j \$SLURM_JOB_ID -o %k >$PWD/comment; echo \"\$GM_PROBE\" >$PWD/probe" >p.txt
	run -0 gpuman batch --slurm --gres=gpu:1 --salloc-arg=--comment=gm-probe \
		--srun-arg=--export=ALL,GM_PROBE=from-srun p.txt
	[ "$(cat comment)" = gm-probe ]
	[ "$(cat probe)" = from-srun ]
	[ -z "$(squeue -h -t PD,R -p gpu)" ]
}

@test "slurm batch: the log directory passes the local batch's checks; logs 0600 in 0700 whatever the umask" {
	gm_user mallory
	# a shared directory like /tmp, where another user can plant things
	SHARED=$(mktemp -d /tmp/gm-shared.XXXXXX)
	chmod 1777 "$SHARED"
	cd "$SHARED"
	echo 'echo secret-{task}' >t.txt
	# mallory plants the directory gpuman would make: refused, nothing asked of Slurm
	as_user mallory mkdir -m 777 -p gpuman-logs/t.txt
	run -1 gpuman batch --slurm --gres=gpu:1 t.txt
	[[ "$output" == *"$SHARED/gpuman-logs' belongs to user 'gmtest-mallory', not you"*"--log-dir"* ]]
	[[ "$output" != *"salloc"* ]]
	[ -z "$(ls -A gpuman-logs/t.txt)" ]
	# ours but writable by others; a link of mallory's to a directory of ours
	mkdir -m 777 open
	run -1 gpuman batch --slurm --gres=gpu:1 --log-dir open t.txt
	[[ "$output" == *"'$SHARED/open' is writable by other users (mode 0777)"*"chmod go-w"* ]]
	mkdir -m 700 mine
	as_user mallory ln -s "$SHARED/mine" logs
	run -1 gpuman batch --slurm --gres=gpu:1 --log-dir logs t.txt
	[[ "$output" == *"'$SHARED/logs' is a symbolic link of user 'gmtest-mallory'"* ]]
	[ -z "$(ls -A mine)" ]
	[ -z "$(squeue -h -t PD,R -p gpu)" ]
	# a good one: the log (written through srun) and the node's record are private
	run sh -c 'umask 0; exec gpuman batch --slurm --gres=gpu:1 --log-dir priv t.txt'
	echo "$output"
	[ "$status" -eq 0 ]
	cat priv/task-1.log
	[ "$(cat priv/task-1.log)" = secret-1 ]
	[ "$(stat -c %a priv priv/task-1.log priv/.runs priv/jobs.db | paste -sd' ')" = "700 600 700 600" ]
	[ "$(stat -c %a priv/.runs/task-1.where)" = 600 ]
	run ! as_user mallory cat priv/task-1.log
	[[ "$output" != *secret* ]]
}

@test "slurm batch: Ctrl-C stops the tasks and cancels the allocation it made" {
	printf 'sleep 60\nsleep 60\nsleep 60\n' >s.txt
	gpuman batch --slurm --gres=gpu:2 s.txt >out 2>&1 3>&- &
	pid=$!
	for _ in $(seq 300); do
		job=$(sed -n 's/^gpuman batch: Slurm job \([0-9]*\):.*/\1/p' out)
		[ -n "$job" ] && [ "$(squeue -h -s -j "$job" -o %j | grep -c gpuman-task)" -ge 2 ] && break
		sleep 0.1
	done
	[ "$(squeue -h -s -j "$job" -o %j | grep -c gpuman-task)" -eq 2 ]
	# the store has each running task's node and GPU (its own column),
	# read from the step within a second
	for _ in $(seq 30); do
		where=$(python3 -c 'import sqlite3, sys
for n, g in sqlite3.connect(sys.argv[1]).execute(
        "SELECT node, gpus FROM jobs WHERE state = ? ORDER BY id", ("running",)):
    print("%s:%s" % (n, g))' gpuman-logs/s.txt/jobs.db)
		[ "$(grep -c '^n1:[01]$' <<<"$where")" -eq 2 ] && break
		sleep 0.1
	done
	echo "$where"
	[ "$(grep -c '^n1:[01]$' <<<"$where")" -eq 2 ]
	kill -INT $pid
	status=0
	wait $pid || status=$?
	cat out
	[ "$status" -eq 130 ]
	cat out
	grep -q "interrupted" out
	for _ in $(seq 100); do
		[ -z "$(squeue -h -j "$job" -t PD,R,CG 2>/dev/null)" ] && break
		sleep 0.1
	done
	[ -z "$(squeue -h -j "$job" -t PD,R,CG 2>/dev/null)" ]
	[ -z "$(squeue -h -s -j "$job" -o %j 2>/dev/null)" ]
}

@test "slurm batch: a node failure is named; what did not run is left for --resume" {
	printf 'sleep 30\nsleep 30\necho {task} >>ran\necho {task} >>ran\n' >nf.txt
	gpuman batch --slurm -N2 --gres=gpu:1 nf.txt >out 2>&1 3>&- &
	pid=$!
	for _ in $(seq 300); do
		job=$(sed -n 's/^gpuman batch: Slurm job \([0-9]*\):.*/\1/p' out)
		[ -n "$job" ] && [ "$(squeue -h -s -j "$job" -o %j | grep -c gpuman-task)" -eq 2 ] && break
		sleep 0.1
	done
	node=$(squeue -h -s -j "$job" -o "%j %N" | awk '$1 == "gpuman-task-1" { print $2 }')
	scontrol update NodeName="$node" State=DOWN Reason=gpuman-test
	status=0
	wait $pid || status=$?
	cat out
	[ "$status" -eq 1 ]
	grep -q "killed by Slurm: node failure" out
	grep -q "ended (NodeDown)" out
	grep -q "2 not run (--resume runs them)" out
	# neither task 1 nor 2 finished: none is "done"
	[ "$(jq -r '[.tasks[0,1].state] | join(",")' gpuman-logs/nf.txt/summary.json)" = failed,failed ]
	# the node is back (ReturnToService=2); --resume runs the rest
	for _ in $(seq 100); do [ "$(sinfo -h -n "$node" -o %t)" = idle ] && break; sleep 0.1; done
	printf 'true\ntrue\necho {task} >>ran\necho {task} >>ran\n' >nf.txt
	run -0 gpuman batch --slurm -N2 --gres=gpu:1 --resume nf.txt
	[ "$(sort -n ran | paste -sd,)" = "3,4" ]
}

@test "slurm batch: a task killed by Slurm's time limit is named in the summary" {
	cd "$GM_CLUSTER/tl"
	for _ in $(seq 1500); do [ -s rc ] && break; sleep 0.1; done
	cat out
	[ -s rc ] || ps -ef | grep -v grep | grep -E "gpuman|salloc|srun|scancel"
	[ "$(cat rc)" = 1 ]
	grep -q "killed by Slurm: time limit" out
	grep -q "ended (TimeLimit)" out
}

@test "slurm batch: without -N or --gres a sweep takes the partition's idle GPUs (up to one per task) and says what it took" {
	sweep 24 sweep.txt
	run -0 gpuman batch --slurm sweep.txt
	echo "$output" | grep "gpuman batch:" >&3
	[[ "$output" =~ "no size given: taking idle GPUs of partition gpu: 2 nodes (n1,n2) x 4 GPUs for 24 tasks" ]]
	# whole idle nodes are asked for by type, as -N2 --gres=gpu:a100:2,gpu:t4:2 would
	[[ "$output" == *"salloc --no-shell --nodes=2 --nodelist=n1,n2 --partition=gpu --gres=gpu:a100:2,gpu:t4:2 "* ]]
	[[ "$output" != *"--gres=gpu:1 "* ]]
	[[ "$output" == *"24 tasks: 24 done"* ]]
	check_sweep 24 even
	# a small sweep takes no more than it can use: 3 tasks, 3 GPUs of one node
	rm -f ran rec
	sweep 3 small.txt
	run -0 gpuman batch --slurm small.txt
	[[ "$output" =~ "partition gpu: 1 node (n"[12]") x 3 GPUs for 3 tasks" ]]
	[ "$(sort -n ran | uniq | wc -l)" -eq 3 ]
	# -N or --gres still say the size
	run -0 gpuman batch --slurm --dry-run -N1 small.txt
	[[ "$output" != *"no size given"* ]]
}
