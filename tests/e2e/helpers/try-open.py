#!/usr/bin/env python3
# try-open.py OUT LABEL PATH... - open(2) each PATH read-write and append one
# line to OUT: "LABEL name=ERRNO ..." (OK when it opened).  A character node
# of a driver that is not loaded answers ENXIO when the cgroup's device
# filter lets it through and EPERM when the filter refuses it, which is how
# tests/e2e/fence.bats tells a fenced job from a free one.
import errno
import os
import sys

out, label, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
words = [label]
for p in paths:
    try:
        os.close(os.open(p, os.O_RDWR))
        words.append(os.path.basename(p) + "=OK")
    except OSError as e:
        words.append(os.path.basename(p) + "=" + errno.errorcode.get(e.errno, str(e.errno)))
with open(out, "a") as f:
    f.write(" ".join(words) + "\n")
