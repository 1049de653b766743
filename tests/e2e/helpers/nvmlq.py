#!/usr/bin/env python3
"""nvmlq - a small NVML client (ctypes, standard library only) for the
simulator's end-to-end tests.  It loads an NVML library (by default
$GM_BUILD/sim/libnvidia-ml.so.1) and prints what NVML answers as flat
"key=value" lines, so that shell tests can grep exact answers:

  nvmlq.py [--lib PATH] dump          every GPU, field by field
  nvmlq.py [--lib PATH] init          nvmlInit_v2's answer and gpumanSimError()
  nvmlq.py [--lib PATH] symbols NAME.. whether dlsym finds each NAME
  nvmlq.py [--lib PATH] mig           MIG slots, slices and their processes
  nvmlq.py [--lib PATH] protocol I    the process-list protocol on GPU I
  nvmlq.py [--lib PATH] misuse        calls before init, bad handles, NULLs
  nvmlq.py [--lib PATH] time N        N rounds of init + a full query of every GPU

An answer other than success prints NVML's error name (NOT_SUPPORTED, ...).
"""
import ctypes
import os
import sys
import time

ERRORS = {
    0: "SUCCESS", 1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED",
    4: "NO_PERMISSION", 6: "NOT_FOUND", 7: "INSUFFICIENT_SIZE", 9: "DRIVER_NOT_LOADED",
    12: "LIBRARY_NOT_FOUND", 13: "FUNCTION_NOT_FOUND", 15: "GPU_IS_LOST",
    17: "OPERATING_SYSTEM", 18: "LIB_RM_VERSION_MISMATCH", 25: "ARGUMENT_VERSION_MISMATCH",
    999: "UNKNOWN",
}
MIB = 1048576
ULLONG_MAX = 2**64 - 1


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class ProcV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcV2(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


assert ctypes.sizeof(MemoryV2) == 40 and ctypes.sizeof(PciInfo) == 68
assert ctypes.sizeof(ProcV1) == 16 and ctypes.sizeof(ProcV2) == 24


def load(path):
    lib = ctypes.CDLL(path)
    lib.nvmlErrorString.restype = ctypes.c_char_p
    if hasattr(lib, "gpumanSimError"):
        lib.gpumanSimError.restype = ctypes.c_char_p
    return lib


def name(rc):
    if rc is ABSENT:
        return "ABSENT"
    return ERRORS.get(rc, "ERROR_%d" % rc)


ABSENT = object()


def fn(lib, sym):
    """The function, or one answering ABSENT where dlsym finds no such
    symbol (a library of an older driver branch)."""
    if hasattr(lib, sym):
        return getattr(lib, sym)
    return lambda *args: ABSENT


def versioned(lib, syms, *args):
    """Call the first of syms that dlsym finds and that does not answer
    FUNCTION_NOT_FOUND (as an old driver's, or a scenario's missing_symbols)."""
    rc = 13
    for sym in syms:
        if hasattr(lib, sym):
            rc = getattr(lib, sym)(*args)
            if rc != 13:
                break
    return rc


def procs(lib, sym, dev, entry):
    """A process list read as a careful client does: ask, allocate, fetch."""
    f = getattr(lib, sym)
    count = ctypes.c_uint(0)
    rc = f(dev, ctypes.byref(count), None)
    if rc == 0:
        return ""
    if rc != 7:
        return name(rc)
    buf = (entry * (count.value + 4))()
    count = ctypes.c_uint(count.value + 4)
    rc = f(dev, ctypes.byref(count), buf)
    if rc != 0:
        return name(rc)
    out = []
    for p in buf[:count.value]:
        mem = "NA" if p.usedGpuMemory == ULLONG_MAX else str(p.usedGpuMemory // MIB)
        if entry is ProcV2 and (p.gpuInstanceId, p.computeInstanceId) != (0xFFFFFFFF, 0xFFFFFFFF):
            mem += "!instance"
        out.append("%d:%s" % (p.pid, mem))
    return ",".join(out)


def dump_gpu(lib, i, out):
    dev = ctypes.c_void_p()
    rc = versioned(lib, ("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"),
                   i, ctypes.byref(dev))
    out("gpu%d.handle" % i, name(rc))
    if rc != 0:
        return
    u = ctypes.c_uint()
    n = ctypes.c_int()
    m = ctypes.c_int()
    buf = ctypes.create_string_buffer(96)

    def get(key, rc, value):
        out("gpu%d.%s" % (i, key), value() if rc == 0 else name(rc))

    get("index", fn(lib, "nvmlDeviceGetIndex")(dev, ctypes.byref(u)), lambda: u.value)
    get("name", fn(lib, "nvmlDeviceGetName")(dev, buf, 96), lambda: buf.value.decode())
    get("uuid", fn(lib, "nvmlDeviceGetUUID")(dev, buf, 96), lambda: buf.value.decode())
    pci = PciInfo()
    rc = versioned(lib, ("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2",
                         "nvmlDeviceGetPciInfo"), dev, ctypes.byref(pci))
    get("pci.bus_id", rc, lambda: pci.busId.decode())
    get("pci.bus_id_legacy", rc, lambda: pci.busIdLegacy.decode())
    get("pci.bus", rc, lambda: pci.bus)
    get("minor", fn(lib, "nvmlDeviceGetMinorNumber")(dev, ctypes.byref(u)), lambda: u.value)
    if hasattr(lib, "nvmlDeviceGetMemoryInfo_v2"):
        mem2 = MemoryV2(version=0x02000028)
        rc = fn(lib, "nvmlDeviceGetMemoryInfo_v2")(dev, ctypes.byref(mem2))
        get("memory.total_mib", rc, lambda: mem2.total // MIB)
        get("memory.used_mib", rc, lambda: mem2.used // MIB)
        get("memory.free_mib", rc, lambda: mem2.free // MIB)
        get("memory.reserved_mib", rc, lambda: mem2.reserved // MIB)
        bad = MemoryV2(version=2)
        get("memory.bad_version", fn(lib, "nvmlDeviceGetMemoryInfo_v2")(dev, ctypes.byref(bad)),
            lambda: "accepted")
    mem = Memory()
    rc = fn(lib, "nvmlDeviceGetMemoryInfo")(dev, ctypes.byref(mem))
    get("memory_v1", rc, lambda: "%d/%d/%d" % (mem.total // MIB, mem.used // MIB,
                                                mem.free // MIB))
    util = Utilization()
    rc = fn(lib, "nvmlDeviceGetUtilizationRates")(dev, ctypes.byref(util))
    get("util.gpu", rc, lambda: util.gpu)
    get("util.memory", rc, lambda: util.memory)
    get("power_mw", fn(lib, "nvmlDeviceGetPowerUsage")(dev, ctypes.byref(u)), lambda: u.value)
    get("power_limit_mw", fn(lib, "nvmlDeviceGetEnforcedPowerLimit")(dev, ctypes.byref(u)),
        lambda: u.value)
    get("temperature_c", fn(lib, "nvmlDeviceGetTemperature")(dev, 0, ctypes.byref(u)), lambda: u.value)
    get("cc", fn(lib, "nvmlDeviceGetCudaComputeCapability")(dev, ctypes.byref(n), ctypes.byref(m)),
        lambda: "%d.%d" % (n.value, m.value))
    get("compute_mode", fn(lib, "nvmlDeviceGetComputeMode")(dev, ctypes.byref(n)), lambda: n.value)
    cur, pend = ctypes.c_uint(), ctypes.c_uint()
    get("mig", fn(lib, "nvmlDeviceGetMigMode")(dev, ctypes.byref(cur), ctypes.byref(pend)),
        lambda: "%d/%d" % (cur.value, pend.value))
    get("cores", fn(lib, "nvmlDeviceGetNumGpuCores")(dev, ctypes.byref(u)), lambda: u.value)
    get("max_sm_clock_mhz", fn(lib, "nvmlDeviceGetMaxClockInfo")(dev, 1, ctypes.byref(u)),
        lambda: u.value)
    for kind in ("Compute", "Graphics"):
        key = kind.lower()
        for suffix, entry in (("_v3", ProcV2), ("_v2", ProcV2), ("", ProcV1)):
            sym = "nvmlDeviceGet%sRunningProcesses%s" % (kind, suffix)
            if hasattr(lib, sym):
                out("gpu%d.%s%s" % (i, key, suffix), procs(lib, sym, dev, entry))


def dump(lib):
    lines = []

    def out(key, value):
        lines.append("%s=%s" % (key, value))

    rc = versioned(lib, ("nvmlInit_v2", "nvmlInit"))
    out("init", name(rc))
    if rc != 0:
        print("\n".join(lines))
        return 1
    buf = ctypes.create_string_buffer(80)
    rc = lib.nvmlSystemGetDriverVersion(buf, 80)
    out("driver_version", buf.value.decode() if rc == 0 else name(rc))
    v = ctypes.c_int()
    rc = versioned(lib, ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
                   ctypes.byref(v))
    out("cuda_driver_version", v.value if rc == 0 else name(rc))
    count = ctypes.c_uint()
    rc = versioned(lib, ("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"), ctypes.byref(count))
    out("count", count.value if rc == 0 else name(rc))
    for i in range(count.value):
        dump_gpu(lib, i, out)
    out("shutdown", name(lib.nvmlShutdown()))
    print("\n".join(lines))
    return 0


def init(lib):
    rc = versioned(lib, ("nvmlInit_v2", "nvmlInit"))
    print("init=%s" % name(rc))
    print("error_string=%s" % lib.nvmlErrorString(rc).decode())
    print("sim_error=%s" % lib.gpumanSimError().decode())
    return 0


def mig(lib):
    """The MIG view: each GPU's slots, and each slice's identity, memory and
    processes, reached by index and again by UUID."""
    assert lib.nvmlInit_v2() == 0
    count = ctypes.c_uint()
    lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    for i in range(count.value):
        dev = ctypes.c_void_p()
        lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev))
        n = ctypes.c_uint()
        rc = lib.nvmlDeviceGetMaxMigDeviceCount(dev, ctypes.byref(n))
        print("gpu%d.max_mig=%s" % (i, n.value if rc == 0 else name(rc)))
        if rc != 0:
            continue
        for k in range(n.value):
            m = ctypes.c_void_p()
            rc = lib.nvmlDeviceGetMigDeviceHandleByIndex(dev, k, ctypes.byref(m))
            if rc != 0:
                print("gpu%d.mig%d=%s" % (i, k, name(rc)))
                continue
            buf = ctypes.create_string_buffer(96)
            u, gi, ci = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
            lib.nvmlDeviceIsMigDeviceHandle(m, ctypes.byref(u))
            lib.nvmlDeviceGetGpuInstanceId(m, ctypes.byref(gi))
            lib.nvmlDeviceGetComputeInstanceId(m, ctypes.byref(ci))
            lib.nvmlDeviceGetUUID(m, buf, 96)
            uuid = buf.value
            lib.nvmlDeviceGetName(m, buf, 96)
            mem = Memory()
            rc = lib.nvmlDeviceGetMemoryInfo(m, ctypes.byref(mem))
            parent, by_uuid = ctypes.c_void_p(), ctypes.c_void_p()
            lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, ctypes.byref(parent))
            lib.nvmlDeviceGetHandleByUUID(uuid, ctypes.byref(by_uuid))
            print("gpu%d.mig%d=%s|%s|mig=%d|gi=%d|ci=%d|mem=%s|parent=%s|by_uuid=%s|procs=%s" % (
                i, k, uuid.decode(), buf.value.decode(), u.value, gi.value, ci.value,
                "%d/%d" % (mem.total // MIB, mem.used // MIB) if rc == 0 else name(rc),
                parent.value == dev.value, by_uuid.value == m.value,
                procs(lib, "nvmlDeviceGetComputeRunningProcesses_v3", m, ProcV2)))
        procs_raw = (ProcV2 * 16)()
        c = ctypes.c_uint(16)
        lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(c), procs_raw)
        print("gpu%d.procs=%s" % (i, ",".join("%d:%d@%d/%d" % (p.pid, p.usedGpuMemory // MIB,
              p.gpuInstanceId if p.gpuInstanceId != 0xFFFFFFFF else -1,
              p.computeInstanceId if p.computeInstanceId != 0xFFFFFFFF else -1)
              for p in procs_raw[:c.value])))
    lib.nvmlShutdown()
    return 0


def symbols(lib, names):
    for sym in names:
        print("%s=%s" % (sym, "present" if hasattr(lib, sym) else "absent"))
    return 0


def protocol(lib, index):
    """The process-list protocol: ask with 0/NULL, too small, exact, NULL count."""
    assert lib.nvmlInit_v2() == 0
    dev = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(dev)) == 0
    f = lib.nvmlDeviceGetComputeRunningProcesses_v3
    count = ctypes.c_uint(0)
    rc = f(dev, ctypes.byref(count), None)
    print("ask=%s count=%d" % (name(rc), count.value))
    total = count.value
    if total > 1:
        buf = (ProcV2 * 1)()
        count = ctypes.c_uint(1)
        rc = f(dev, ctypes.byref(count), buf)
        print("small=%s count=%d" % (name(rc), count.value))
    buf = (ProcV2 * (total + 1))()
    count = ctypes.c_uint(total + 1)
    rc = f(dev, ctypes.byref(count), buf)
    print("fetch=%s count=%d" % (name(rc), count.value))
    print("null_count=%s" % name(f(dev, None, buf)))
    lib.nvmlShutdown()
    return 0


def misuse(lib):
    dev = ctypes.c_void_p()
    count = ctypes.c_uint()
    print("count_before_init=%s" % name(lib.nvmlDeviceGetCount_v2(ctypes.byref(count))))
    print("shutdown_before_init=%s" % name(lib.nvmlShutdown()))
    assert lib.nvmlInit_v2() == 0
    print("count_null=%s" % name(lib.nvmlDeviceGetCount_v2(None)))
    lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    print("handle_out_of_range=%s" % name(
        lib.nvmlDeviceGetHandleByIndex_v2(count.value, ctypes.byref(dev))))
    print("handle_null=%s" % name(lib.nvmlDeviceGetHandleByIndex_v2(0, None)))
    u = ctypes.c_uint()
    bogus = ctypes.c_void_p(ctypes.addressof(u))
    print("bad_handle=%s" % name(lib.nvmlDeviceGetIndex(bogus, ctypes.byref(u))))
    print("null_handle=%s" % name(lib.nvmlDeviceGetIndex(None, ctypes.byref(u))))
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
    buf = ctypes.create_string_buffer(96)
    print("name_small=%s" % name(lib.nvmlDeviceGetName(dev, buf, 4)))
    print("temperature_bad_sensor=%s" % name(lib.nvmlDeviceGetTemperature(dev, 5, ctypes.byref(u))))
    print("clock_bad_type=%s" % name(lib.nvmlDeviceGetMaxClockInfo(dev, 9, ctypes.byref(u))))
    lib.nvmlDeviceGetUUID(dev, buf, 96)
    other = ctypes.c_void_p()
    rc = lib.nvmlDeviceGetHandleByUUID(buf.value, ctypes.byref(other))
    print("by_uuid=%s same=%s" % (name(rc), other.value == dev.value))
    print("by_uuid_prefix=%s" % name(lib.nvmlDeviceGetHandleByUUID(buf.value[:8],
                                                                   ctypes.byref(other))))
    # Two inits need two shutdowns.
    assert lib.nvmlInit_v2() == 0
    lib.nvmlShutdown()
    print("after_one_of_two_shutdowns=%s" % name(lib.nvmlDeviceGetCount_v2(ctypes.byref(count))))
    lib.nvmlShutdown()
    print("after_shutdown=%s" % name(lib.nvmlDeviceGetCount_v2(ctypes.byref(count))))
    return 0


def timing(lib, rounds):
    """What gpuman's snapshot does: init, then every field of every GPU."""
    best = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        dump_quiet(lib)
        best.append(time.perf_counter() - t0)
    best.sort()
    print("median_ms=%.3f min_ms=%.3f" % (best[len(best) // 2] * 1e3, best[0] * 1e3))
    return 0


def dump_quiet(lib):
    rc = lib.nvmlInit_v2()
    assert rc == 0, name(rc)
    count = ctypes.c_uint()
    lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    for i in range(count.value):
        dump_gpu(lib, i, lambda key, value: None)
    lib.nvmlShutdown()


def main(argv):
    build = os.environ.get("GM_BUILD", os.path.join(os.path.dirname(__file__), "../../../build"))
    path = os.path.join(build, "sim/libnvidia-ml.so.1")
    if len(argv) > 2 and argv[1] == "--lib":
        path = argv[2]
        argv = argv[:1] + argv[3:]
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    lib = load(path)
    cmd, args = argv[1], argv[2:]
    if cmd == "dump":
        return dump(lib)
    if cmd == "init":
        return init(lib)
    if cmd == "mig":
        return mig(lib)
    if cmd == "symbols":
        return symbols(lib, args)
    if cmd == "protocol":
        return protocol(lib, int(args[0]))
    if cmd == "misuse":
        return misuse(lib)
    if cmd == "time":
        return timing(lib, int(args[0]))
    sys.stderr.write("nvmlq: unknown command '%s'\n" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
