#!/usr/bin/env bats
# Limits: durations out of range, a full disk.  Nothing overflows, hangs or
# records a false result.

load helpers

one_gpu() {
	scenario one <<'JSON'
{ "gpus": [ {"name":"only","memory_total_mib":16000} ] }
JSON
}

@test "a --wait too long to represent is refused at once, saying the limit" {
	one_gpu
	for cmd in "run" "batch" "submit"; do
		run -2 timeout 10 gpuman $cmd --wait=106751991167.9d -- true
		[[ "$output" == *"--wait '106751991167.9d': '106751991167.9d' is too long (at most 3650d)"* ]]
	done
	run -0 timeout 10 gpuman run --wait=3650d -- true
}
