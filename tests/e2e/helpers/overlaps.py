#!/usr/bin/env python3
"""overlaps.py RECORD [LIMIT_MIB MEM_MIB] - read gpuman-simload --record lines
("start|end PID UUID NS") and check what the jobs themselves saw.

Without LIMIT: prints "jobs N overlaps K": K counts starts on a GPU while
another job was still on it (exclusive jobs must give 0).
With LIMIT and MEM: every job holds MEM MiB; prints "jobs N overbooked K
maxpack P": K counts moments where the jobs on one GPU held more than LIMIT,
P is the most jobs seen together on one GPU."""
import collections
import sys

events = collections.defaultdict(list)
jobs = 0  # runs, not pids: on a busy machine (pid_max 32768) pids are reused
for line in open(sys.argv[1]):
    kind, pid, uuid, ns = line.split()
    events[uuid].append((int(ns), 0 if kind == "end" else 1, pid))
    jobs += kind == "start"
bad = 0
maxpack = 0
for uuid, evs in events.items():
    evs.sort()
    live = set()
    for ns, is_start, pid in evs:
        if is_start:
            if len(sys.argv) == 2 and live:
                bad += 1
            live.add(pid)
            if len(sys.argv) > 2 and len(live) * int(sys.argv[3]) > int(sys.argv[2]):
                bad += 1
            maxpack = max(maxpack, len(live))
        else:
            live.discard(pid)
if len(sys.argv) == 2:
    print(f"jobs {jobs} overlaps {bad}")
else:
    print(f"jobs {jobs} overbooked {bad} maxpack {maxpack}")
