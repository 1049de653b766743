#!/usr/bin/env python3
"""sliced.py NS CMD [ARG...] - run CMD with a time slice of NS nanoseconds
(sched_setattr's sched_runtime for SCHED_OTHER, Linux 6.12+), as a user who
tuned their own scheduling would.  Exits 77 where the kernel or this machine
cannot: the caller skips."""
import ctypes
import os
import struct
import sys

NUMBERS = {"x86_64": (314, 315), "aarch64": (274, 275)}  # setattr, getattr
FMT = "=IIQiIQQQII"  # struct sched_attr, 56 bytes


def main():
    ns, argv = int(sys.argv[1]), sys.argv[2:]
    nums = NUMBERS.get(os.uname().machine)
    if not nums:
        sys.exit(77)
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(struct.calcsize(FMT))
    if libc.syscall(nums[1], 0, buf, len(buf), 0) != 0:
        sys.exit(77)
    size, policy, flags, nice, prio, runtime, dl, period, umin, umax = struct.unpack(FMT, buf.raw)
    if policy != 0:
        sys.exit(77)
    buf = ctypes.create_string_buffer(
        struct.pack(FMT, struct.calcsize(FMT), 0, flags, nice, 0, ns, 0, 0, 0, 0))
    if libc.syscall(nums[0], 0, buf, 0) != 0:
        sys.exit(77)
    try:
        with open("/proc/self/sched") as f:
            if not any(l.startswith("se.slice") and l.split()[-1] == str(ns) for l in f):
                sys.exit(77)  # a kernel before custom slices ignores sched_runtime
    except OSError:
        sys.exit(77)
    os.execvp(argv[0], argv)


main()
