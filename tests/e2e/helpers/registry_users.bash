# registry_users.bash - for the multi-user tests of the daemonless registry
# (trust.bats, hidepid.bats): their background processes' pids, kept by each
# suite's bg() in $SHARED/pids/NAME, and the files in the shared state
# directory $STATE.  Load after helpers.

pid_of() {
	cat "$SHARED/pids/$1"
}

# kill_tree NAME - kill -9 the process and its children at once: the
# parent first, or it may see its child die and clean up
kill_tree() {
	local pid kids
	pid=$(pid_of "$1")
	ours "$pid" || return 0 # gone, and maybe given to another test's process
	kids=$(ps --ppid "$pid" -o pid=) || true
	kill -9 "$pid" $kids 2>/dev/null || return 0
	wait_for "! kill -0 $pid 2>/dev/null || grep -q '^State:.Z' /proc/$pid/status"
}

leases() {
	find "$STATE" -maxdepth 1 -name 'lease.*' | wc -l
}

tickets() {
	find "$STATE" -maxdepth 1 -name 'wait.*' | wc -l
}
