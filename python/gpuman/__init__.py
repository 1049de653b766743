"""gpuman: choose and lease NVIDIA GPUs from Python.

A thin ctypes binding of libgpuman (include/gpuman.h)::

    import gpuman
    with gpuman.auto_choice(mem="8G", wait="15m", fallback="cpu") as dev:
        model.to(dev)                  # "cuda:0", or "cpu"

    lease = gpuman.select(n=2)         # held until release() or exit
    gpuman.devices()                   # every GPU, with its processes
    gpuman.pick(min_free="8G")         # [3]: what select() would take now
    gpuman.leases()                    # every live lease, of every user
    with gpuman.reserve(n=1, duration="4h") as r:   # held with no process
        subprocess.run(["jupyter", "lab"], env={**os.environ, **r.env})

Arguments are keyword-only.  Errors are GpumanError subclasses: Unavailable,
NoDriver, and InvalidArgument, which is also a ValueError.

Choose before a framework starts CUDA: the lease reaches CUDA through
CUDA_VISIBLE_DEVICES, which CUDA reads once.  The library is found through
$GPUMAN_LIB, the source tree's build/, a copy bundled by pip, or the system.
"""

from . import _native
from ._native import GpumanError, InvalidArgument, NoDriver, Unavailable
from ._lease import Device, Lease, auto_choice, select
from ._query import leases, pick, request_text, waiters, waiting_by_user
from ._reserve import Reservation, release, reservations, reserve

__version__ = "0.4.0"

__all__ = ["Device", "GpumanError", "InvalidArgument", "Lease", "NoDriver", "Reservation",
           "Unavailable", "auto_choice", "devices", "leases", "pick", "release", "request_text",
           "reservations", "reserve", "select", "snapshot", "version", "waiters",
           "waiting_by_user"]


def snapshot() -> dict:
    """Every GPU, process and note at this instant: gm_snapshot_json as a
    dict ("gpus", "processes", "notes", "driver_version", ...).  A field a
    GPU does not report is None, never 0."""
    with _native.context() as ctx:
        return _native.snapshot_json(ctx)


def devices() -> list:
    """The GPUs (snapshot()["gpus"]), each with a "processes" list of its
    own processes added.  Indices are NVML's (nvidia-smi's); "cuda_index"
    is CUDA's default numbering of the same GPU."""
    snap = snapshot()
    procs = snap.get("processes", [])
    gpus = snap.get("gpus", [])
    for gpu in gpus:
        gpu["processes"] = [p for p in procs if p.get("gpu") == gpu.get("index")]
    return gpus


def version() -> str:
    """The version of the loaded libgpuman."""
    return _native.text(_native.lib().gm_version())
