# The broker's state file (broker/state.c: a snapshot line, then one
# change a line) folded into the one document a snapshot is, as the
# broker reads it back: jq -s -f state.jq STATE.
reduce .[] as $r ({gpu_hours: [], leases: [], waiters: []};
	if $r.lease then .leases = [(.leases[] | select(.id != $r.lease.id)), $r.lease]
	elif $r.end then .leases = [.leases[] | select(.id != $r.end)]
	elif $r.place then .waiters = [(.waiters[] | select(.place != $r.place.place)), $r.place]
	elif $r.unplace then .waiters = [.waiters[] | select(.place != $r.unplace)]
	elif $r.hours then .gpu_hours = [(.gpu_hours[] | select(.uid != $r.hours.uid)), $r.hours]
	else {gpu_hours: ($r.gpu_hours // []), leases: ($r.leases // []), waiters: ($r.waiters // [])}
	end)
| .waiters |= sort_by(.seq)
