#!/usr/bin/env python3
"""pick_ctypes.py LIBNVML - what the Python GPU pickers users run today do:
load NVML through ctypes, read every GPU's memory, print the index of the one
with the most free memory.  Run on the same simulator library as gpuman, for
a fair whole-process comparison with `gpuman pick`."""
import ctypes
import sys


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


nvml = ctypes.CDLL(sys.argv[1])
if nvml.nvmlInit_v2() != 0:
    sys.exit("nvmlInit failed")
count = ctypes.c_uint()
nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
best, best_free = None, -1
for i in range(count.value):
    handle = ctypes.c_void_p()
    if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
        continue
    mem = Memory()
    if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) != 0:
        continue
    if mem.free > best_free:
        best, best_free = i, mem.free
nvml.nvmlShutdown()
print(best)
