"""select() and auto_choice(): leasing GPUs for this Python process.

The lease itself is libgpuman's (gm_acquire): a flock'd file in the
registry that dies with this process.  What this module adds is the part
that only the process can do for itself: put the lease into os.environ
before a framework starts CUDA, take it out again on release, and -- when
CUDA started first -- tell the framework which of its devices was chosen.
"""

import atexit
import ctypes
import os
import sys
import threading
import warnings
from typing import Iterable, Optional, Union

from . import _native
from ._native import GpumanError, InvalidArgument, NoDriver, Unavailable

# What the arguments of select() and friends accept.
Size = Union[int, float, str]          # 8192 (MiB), "8G", "50%"
Duration = Union[bool, int, float, str]  # True (forever), seconds, "15m"
GpuList = Union[int, str, Iterable[Union[int, str]]]  # 3, "0,3", [0, "GPU-8f3"]

CVD = "CUDA_VISIBLE_DEVICES"
# Framework knobs for a memory share (shared/nvml-reference.md, "Framework
# memory knobs"); a value the user set wins.
_KNOBS = ("TF_FORCE_GPU_ALLOW_GROWTH", "XLA_PYTHON_CLIENT_PREALLOCATE",
          "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
_MANAGED = (CVD, "GPUMAN_GPUS", "GPUMAN_LEASE") + _KNOBS

# Leases whose environment may be in force, oldest first.  The newest one's
# is; releasing any re-applies the newest remaining, and releasing the last
# restores _base.  Holding the leases here also keeps them for the life of
# the process when the caller drops its reference.
_lock = threading.RLock()
_active = []
_base = None  # the _MANAGED values before the first active lease (None: unset)


def _set_env(key, value):
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


def _apply_env():
    global _base
    if _active:
        env = _active[-1]._env
        for key in _MANAGED:
            _set_env(key, env.get(key, _base[key]))
    elif _base is not None:
        for key in _MANAGED:
            _set_env(key, _base[key])
        _base = None


def _activate(lease):
    global _base
    with _lock:
        if not _active:
            _base = {key: os.environ.get(key) for key in _MANAGED}
        for key, value in lease._knobs.items():
            if _base[key] is None:
                lease._env[key] = value
        _active.append(lease)
        _apply_env()


@atexit.register
def _release_all():
    with _lock:
        for lease in reversed(list(_active)):
            lease.release()


class Device(str):
    """The device to hand to a framework.  Its value is PyTorch's name for
    it ("cuda:0", or "cpu"); with several GPUs, the first of them.

    Attributes: torch ("cuda:0"), tf ("/gpu:0"), jax (index into
    jax.devices()), index (the framework's device index; None on the CPU),
    device_ids (framework indices of every leased GPU, e.g. for
    DataParallel), indices (NVML indices, as nvidia-smi numbers them),
    uuids, cpu (True on the CPU fallback).
    """

    def __new__(cls, value="cpu", **attrs):
        self = str.__new__(cls, value)
        self.cpu = value == "cpu"
        self.index = None if self.cpu else int(value.rpartition(":")[2] or 0)
        self.device_ids = attrs.get("device_ids", [] if self.cpu else [self.index])
        self.indices = attrs.get("indices", [])
        self.uuids = attrs.get("uuids", [])
        self.torch = str(value)
        self.tf = "/cpu:0" if self.cpu else "/gpu:%d" % self.index
        self.jax = 0 if self.cpu else self.index
        return self

    def __reduce__(self):
        return (_device, (str(self), self.device_ids, self.indices, self.uuids))


def _device(value, device_ids, indices, uuids):
    return Device(value, device_ids=device_ids, indices=indices, uuids=uuids)


class Lease:
    """GPUs leased to this process by select().

    Held until release() or the end of the process (the kernel frees it if
    the process dies).  While held, os.environ carries CUDA_VISIBLE_DEVICES,
    GPUMAN_GPUS and GPUMAN_LEASE for it, so frameworks started afterwards,
    and child processes, see only its GPUs.  Usable as a context manager.

    Attributes: id, indices (NVML), uuids, cuda_visible_devices,
    mem_fraction (of a memory share; 0 when exclusive), cpu (True for the
    CPU fallback), device (a Device for the frameworks), request (what was
    asked, as gpuman's command-line options: "-n 2 --mem 8G").
    """

    request = ""

    def __init__(self, handle=None, cpu_reason=None):
        L = _native.lib() if handle else None
        self._handle = handle
        self._pid = os.getpid()
        self._released = False
        self._knobs = {}
        self.cpu = handle is None
        self.reason = cpu_reason
        if self.cpu:
            self.id = None
            self.indices, self.uuids = [], []
            self.cuda_visible_devices = ""
            self.mem_fraction = 0.0
            self._env = {CVD: "", "GPUMAN_GPUS": ""}
            self.device = Device("cpu")
            return
        count = L.gm_lease_gpu_count(handle)
        self.id = _native.text(L.gm_lease_id(handle))
        self.indices = [L.gm_lease_gpu_index(handle, i) for i in range(count)]
        self.uuids = [_native.text(L.gm_lease_gpu_uuid(handle, i)) for i in range(count)]
        self.cuda_visible_devices = _native.text(L.gm_lease_cuda_visible(handle))
        self.mem_fraction = L.gm_lease_mem_fraction(handle)
        self._env = {CVD: self.cuda_visible_devices,
                     "GPUMAN_GPUS": _native.text(L.gm_lease_indices(handle)),
                     "GPUMAN_LEASE": self.id}
        if self.mem_fraction > 0:
            frac = "%.3f" % max(self.mem_fraction, 0.001)
            self._knobs = dict(zip(_KNOBS, ("true", "false", frac, frac)))
        self.device = Device("cuda:0", device_ids=list(range(count)), indices=self.indices,
                             uuids=self.uuids)

    def release(self):
        """Give the GPUs back and restore the environment as it was before
        select().  Idempotent."""
        with _lock:
            if self._released:
                return
            self._released = True
            # A forked child shares the lease's descriptor; releasing there
            # would unlink the parent's lease file, so only the process that
            # leased it releases it.
            if self._handle and os.getpid() == self._pid:
                _native.lib().gm_lease_release(self._handle)
            self._handle = None
            if self in _active:
                _active.remove(self)
                _apply_env()

    @property
    def released(self):
        return self._released

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def __repr__(self):
        if self.cpu:
            return "<gpuman.Lease cpu%s>" % (" released" if self._released else "")
        return "<gpuman.Lease %s GPU %s%s>" % (
            self.id, ",".join(str(i) for i in self.indices),
            " released" if self._released else "")


# ---- turning arguments into request options --------------------------------

def _number(value):
    if isinstance(value, bool):
        raise TypeError("expected a number or a string, got %r" % value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("%.3f" % value).rstrip("0").rstrip(".")
    return str(value)


def _gpu_list(value):
    if isinstance(value, (str, int)):
        return str(value)
    return ",".join(str(v) for v in value)


def _options(n, by, min_free, max_util, mem, wait, only, exclude, idle, mig=None):
    opts = [("n", _number(n)), ("by", str(by))]
    if min_free is not None:
        opts.append(("min-free", _number(min_free)))
    if max_util is not None:
        opts.append(("max-util", _number(max_util)))
    if mem is not None:
        opts.append(("mem", _number(mem)))
    if only is not None:
        opts.append(("only", _gpu_list(only)))
    if exclude is not None:
        opts.append(("exclude", _gpu_list(exclude)))
    if idle:
        opts.append(("idle", None))
    if mig is not None:
        opts.append(("mig", str(mig)))
    if wait is True:
        opts.append(("wait", None))  # forever
    elif wait is not None and wait is not False:
        opts.append(("wait", _number(wait)))
    return opts


# ---- acquiring -------------------------------------------------------------

class _Acquisition:
    """One gm_acquire call.  A waiting call runs in a helper thread so that
    Ctrl-C reaches Python (its signal handlers run in the main thread only,
    between bytecodes, never inside a C call).  When the caller gives up --
    KeyboardInterrupt or any other exception -- gm_cancel ends the wait at
    once, so that its ticket does not stay in line ahead of later requests;
    a lease won just before the cancel is released."""

    def __init__(self, ctx, req):
        self.ctx, self.req = ctx, req
        self.done = False
        self.abandoned = False
        self.rc, self.handle, self.message = None, None, ""
        self.lock = threading.Lock()
        # Not Thread.join: on Python 3.11 a join interrupted by Ctrl-C may
        # mark a thread that still runs as stopped (bpo-45274), and a
        # second join then returns at once.
        self.finished = threading.Event()

    def run(self):
        try:
            L = _native.lib()
            out = ctypes.c_void_p()
            err = ctypes.create_string_buffer(_native.ACQUIRE_ERRBUF_SIZE)
            rc = L.gm_acquire(self.ctx, self.req, ctypes.byref(out), err,
                              _native.ACQUIRE_ERRBUF_SIZE)
            with self.lock:
                self.rc, self.handle = rc, out.value
                self.message = _native.text(err.value).rstrip()
                self.done = True
                if self.abandoned:
                    self.free()
        finally:
            self.finished.set()

    def run_interruptibly(self):
        worker = threading.Thread(target=self.run, name="gpuman-wait", daemon=True)
        worker.start()
        try:
            while not self.finished.wait(0.2):
                pass
        except BaseException:
            # gm_cancel is the one call that is safe while gm_acquire runs
            # on the same context in another thread.
            _native.lib().gm_cancel(self.ctx)
            try:
                self.finished.wait()  # prompt: the wait polls the cancel descriptor
            finally:
                # A second Ctrl-C here leaves the helper to free what it
                # holds when its call returns.
                with self.lock:
                    if self.done:
                        self.free()
                    else:
                        self.abandoned = True
            raise

    def free(self):
        L = _native.lib()
        if self.handle:
            L.gm_lease_release(self.handle)
            self.handle = None
        L.gm_request_free(self.req)
        L.gm_close(self.ctx)


def _cuda_initialised():
    """Has a framework in this process already started CUDA?  Then CUDA has
    read CUDA_VISIBLE_DEVICES and changing it has no effect here."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _cuda_order(gpus, visible, pci_order):
    """UUIDs in the order this process's CUDA numbers its devices, given the
    CUDA_VISIBLE_DEVICES it read (None: unset) and CUDA_DEVICE_ORDER.  The
    rules are lib/visible.c's, which are CUDA's: entries are indices into
    CUDA's order or "GPU-" UUID prefixes, and the first entry that names no
    GPU (or one named before) ends the list."""
    key = "cuda_index_pci_bus_order" if pci_order else "cuda_index"
    by_cuda = {g[key]: g["uuid"] for g in gpus if g.get(key) is not None and g.get("uuid")}
    if visible is None:
        return [by_cuda[i] for i in sorted(by_cuda)]
    order = []
    for entry in visible.split(","):
        entry = entry.strip()
        uuid = None
        if entry.isdigit():
            uuid = by_cuda.get(int(entry))
        elif entry.startswith("GPU-") and len(entry) > 4:
            hits = [u for u in by_cuda.values() if u.startswith(entry)]
            uuid = hits[0] if len(hits) == 1 else None
        if uuid is None or uuid in order:
            break
        order.append(uuid)
    return order


def _map_to_initialised_cuda(ctx, uuids, seen):
    """Framework device indices of the leased GPUs for a process whose CUDA
    is already running with CUDA_VISIBLE_DEVICES=seen."""
    gpus = _native.snapshot_json(ctx).get("gpus", [])
    pci_order = os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    order = _cuda_order(gpus, seen, pci_order)
    return [order.index(u) if u in order else None for u in uuids]


def _cpu(reason, stacklevel):
    warnings.warn("gpuman: %s; running on the CPU (fallback='cpu')" % reason,
                  RuntimeWarning, stacklevel=stacklevel + 1)
    lease = Lease(cpu_reason=reason)
    _activate(lease)
    return lease


def select(*, n: int = 1, by: str = "memory", min_free: Optional[Size] = None,
           max_util: Optional[Union[int, float, str]] = None, mem: Optional[Size] = None,
           wait: Optional[Duration] = None, fallback: Optional[str] = None,
           only: Optional[GpuList] = None, exclude: Optional[GpuList] = None,
           idle: bool = False, mig: Optional[str] = None) -> Lease:
    """Lease GPUs for this process and point os.environ at them.

    n: GPUs; by: "memory" (most free first), "memory-rate", "power", "util"
    or "index"; min_free: SIZE each must have free (8192 = MiB, "8G",
    "50%"); max_util: busiest allowed, percent; mem: share a GPU, counting
    SIZE against its free memory, instead of taking it whole; wait: True
    (forever), seconds, or a duration such as "15m" -- queue first come,
    first served until GPUs fit (Ctrl-C leaves the line at once); only /
    exclude: NVML indices or UUID prefixes (list, or "0,3" or "0-3"); idle: only GPUs
    with no process at all; mig: one MIG slice of this profile ("1g.10gb",
    or "any") instead of a GPU, CUDA_VISIBLE_DEVICES=MIG-<uuid> (a GPU in
    MIG mode is never leased whole); fallback="cpu": instead of raising Unavailable
    or NoDriver, warn and return a CPU lease (CUDA_VISIBLE_DEVICES="").

    Sets CUDA_VISIBLE_DEVICES (full UUIDs), GPUMAN_GPUS, GPUMAN_LEASE and,
    with mem, the TensorFlow/JAX memory knobs you have not set yourself.
    Choose before any framework starts CUDA; if CUDA is already running in
    this process, gpuman warns and maps lease.device to the chosen GPU's
    index among the devices CUDA already sees.

    Returns a Lease, held until lease.release() or the end of the process.
    Raises Unavailable (busy, timed out, or never possible here), NoDriver,
    InvalidArgument (a ValueError; the message names the argument), or
    GpumanError.
    """
    return _select(n, by, min_free, max_util, mem, wait, fallback, only, exclude, idle, mig)


# Warnings name the line that called select() or entered auto_choice(): two
# frames above _select().
_STACKLEVEL = 3


def _select(n, by, min_free, max_util, mem, wait, fallback, only, exclude, idle, mig=None):
    if fallback not in (None, "cpu"):
        raise InvalidArgument("fallback %r: unknown value (use 'cpu' or None)" % (fallback,),
                              _native.ERR_INVALID)
    req = _native.request(_options(n, by, min_free, max_util, mem, wait, only, exclude, idle,
                                   mig))
    cuda_ready = _cuda_initialised()
    try:
        ctx = _native.open_context()
    except GpumanError as e:
        _native.lib().gm_request_free(req)
        # NVML_LOAD: no driver library; NVML at open: nvmlInit failed (the
        # kernel module is not loaded).  Either way there is no GPU here.
        if fallback == "cpu" and e.code in (_native.ERR_NVML_LOAD, _native.ERR_NVML):
            return _cpu("no usable NVIDIA driver (%s)" % e, _STACKLEVEL)
        raise
    job = _Acquisition(ctx, req)
    with _lock:
        seen = os.environ.get(CVD)
        # The library picks only among an inherited CUDA_VISIBLE_DEVICES, so
        # hand it the one that bounds this process: the user's own, not an
        # earlier lease's -- unless CUDA already read that earlier value.
        inherited = seen if cuda_ready or not _active else _base[CVD]
        _set_env(CVD, inherited)
    try:
        if wait is None or wait is False:
            job.run()
        else:
            job.run_interruptibly()
    finally:
        with _lock:
            _set_env(CVD, seen)
    try:
        if job.rc != _native.OK:
            message = job.message
            if job.rc == _native.ERR_NEVER and not _native.snapshot_json(ctx).get("gpus"):
                message += " (no NVIDIA GPU found)"
            e = _native.error_for(job.rc, message)
            if fallback == "cpu" and isinstance(e, Unavailable):
                return _cpu(message.replace(":\n", ": ").replace("\n", "; "), _STACKLEVEL)
            raise e
        lease = Lease(job.handle)
        job.handle = None  # the Lease owns it now
        lease.request = _native.request_text(req)
        if cuda_ready:
            try:
                _map_device(ctx, lease, seen)
            except BaseException:
                lease.release()
                raise
        _activate(lease)
        return lease
    finally:
        job.free()


def _map_device(ctx, lease, seen):
    """Point lease.device at the chosen GPU in the numbering of a CUDA that
    started before the choice, and say so."""
    ids = _map_to_initialised_cuda(ctx, lease.uuids, seen)
    if None in ids:
        raise GpumanError(
            "CUDA was initialised in this process before gpuman chose, and GPU %s is not "
            "among the devices it sees (CUDA_VISIBLE_DEVICES=%r); call gpuman before the "
            "first CUDA call" % (lease.indices[ids.index(None)], seen))
    lease.device = Device("cuda:%d" % ids[0], device_ids=ids, indices=lease.indices,
                          uuids=lease.uuids)
    warnings.warn(
        "gpuman: CUDA was initialised before gpuman chose, so setting CUDA_VISIBLE_DEVICES "
        "has no effect in this process; the device index is mapped instead: GPU %d (%s) is "
        "%s here" % (lease.indices[0], lease.uuids[0], lease.device.torch),
        RuntimeWarning, stacklevel=_STACKLEVEL + 1)


class auto_choice:
    """``with gpuman.auto_choice(...) as dev:`` leases like select() (same
    arguments) for the block and releases at its end, restoring the
    environment.  dev is a Device: "cuda:0" (dev.torch), dev.tf "/gpu:0",
    dev.index; "cpu" on the CPU fallback."""

    def __init__(self, *, n: int = 1, by: str = "memory", min_free: Optional[Size] = None,
                 max_util: Optional[Union[int, float, str]] = None, mem: Optional[Size] = None,
                 wait: Optional[Duration] = None, fallback: Optional[str] = None,
                 only: Optional[GpuList] = None, exclude: Optional[GpuList] = None,
                 idle: bool = False, mig: Optional[str] = None):
        self._args = (n, by, min_free, max_util, mem, wait, fallback, only, exclude, idle, mig)
        self.lease = None

    def __enter__(self) -> Device:
        self.lease = _select(*self._args)
        return self.lease.device

    def __exit__(self, *exc):
        self.lease.release()
        return False
