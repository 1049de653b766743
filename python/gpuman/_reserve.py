"""reserve(), release() and reservations(): GPUs held for interactive work.

A reservation is libgpuman's (gm_reserve): a lease that no process holds,
kept from every other user until it expires or is released -- it outlives
this process, unlike select()'s lease.  Nothing here touches os.environ:
the GPUs are for programs started afterwards, through Reservation.env.
"""

import ctypes
import os
import threading
import time
from typing import Dict, List, Optional, Union

from . import _lease, _native
from ._lease import Duration, GpuList, Size, _number, _options


class Reservation:
    """GPUs reserved by reserve(), until expires or release().

    Attributes: id, gpus (NVML indices, best first), uuids,
    cuda_visible_devices, expires (time.time() seconds at which it ends by
    itself), env (CUDA_VISIBLE_DEVICES, GPUMAN_GPUS and GPUMAN_RESERVATION
    for a program started in it: subprocess.run(cmd, env={**os.environ,
    **r.env}); there, gpuman's own leases go inside it).  Dropping the
    object ends nothing; as a context manager it releases at the block's
    end.
    """

    def __init__(self, handle):
        L = _native.lib()
        count = L.gm_reservation_gpu_count(handle)
        self.id = _native.text(L.gm_reservation_id(handle))
        self.gpus = [L.gm_reservation_gpu_index(handle, i) for i in range(count)]
        self.uuids = [_native.text(L.gm_reservation_gpu_uuid(handle, i)) for i in range(count)]
        self.cuda_visible_devices = _native.text(L.gm_reservation_cuda_visible(handle))
        self.expires_ms = L.gm_reservation_expires_ms(handle)
        self.expires = self.expires_ms / 1000.0
        self.env = {_lease.CVD: self.cuda_visible_devices,
                    "GPUMAN_GPUS": _native.text(L.gm_reservation_indices(handle)),
                    "GPUMAN_RESERVATION": self.id}
        self._released = False

    @property
    def remaining(self) -> float:
        """Seconds until it expires (0 once past)."""
        return max(0.0, self.expires - time.time())

    def release(self) -> None:
        """End the reservation now.  Idempotent here; one already expired
        or released elsewhere is no error."""
        if self._released:
            return
        self._released = True
        try:
            release(self.id)
        except _native.InvalidArgument:
            # Gone already (expired, or gpuman release): nothing to end.
            if any(r["id"] == self.id for r in reservations()):
                self._released = False
                raise

    @property
    def released(self) -> bool:
        return self._released

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def __repr__(self):
        return "<gpuman.Reservation %s GPU %s %s>" % (
            self.id, ",".join(str(i) for i in self.gpus),
            "released" if self._released else "%.0f s left" % self.remaining)


def reserve(*, n: int = 1, duration: Union[int, float, str], by: str = "memory",
            min_free: Optional[Size] = None, max_util: Optional[Union[int, float, str]] = None,
            mem: Optional[Size] = None, wait: Optional[Duration] = None,
            only: Optional[GpuList] = None, exclude: Optional[GpuList] = None,
            idle: bool = False) -> Reservation:
    """Reserve GPUs for duration (seconds, or "90m", "4h"), as `gpuman
    reserve --for DURATION` does: no other user's select(), run, batch,
    queue or reserve gets them until it expires or is released, whether or
    not this process still runs.  The other arguments choose as select()'s
    do (mig is not reservable).  The admin's max_reserve may refuse a long
    duration.

    Returns a Reservation.  Raises Unavailable (busy, timed out, or never
    possible here), InvalidArgument (a ValueError naming the argument:
    a bad duration, one over max_reserve), NoDriver, or GpumanError.
    """
    req = _native.request(_options(n, by, min_free, max_util, mem, wait, only, exclude, idle))
    L = _native.lib()
    text = None if duration is None else _number(duration).encode()
    try:
        with _native.context() as ctx:
            # Choose within what bounds this process, as select() does.
            with _lease._lock:
                seen = os.environ.get(_lease.CVD)
                _lease._set_env(_lease.CVD, _lease._base[_lease.CVD] if _lease._active else seen)
                try:
                    rc, handle, message = _call(ctx, req, text, wait not in (None, False))
                finally:
                    _lease._set_env(_lease.CVD, seen)
    finally:
        L.gm_request_free(req)
    if rc != _native.OK:
        raise _native.error_for(rc, message)
    try:
        return Reservation(handle)
    finally:
        L.gm_reservation_free(handle)


def _call(ctx, req, duration, waits):
    """gm_reserve: (enum gm_err, handle, message).  A waiting call runs in a
    helper thread so that Ctrl-C reaches Python, as select()'s does; giving
    up cancels the wait (gm_cancel), and a reservation granted just before
    the cancel is released."""
    L = _native.lib()
    result = {}
    # Not Thread.join, which Ctrl-C may leave believing a running thread
    # stopped (bpo-45274); see _lease._Acquisition.
    finished = threading.Event()

    def run():
        try:
            out = ctypes.c_void_p()
            err = ctypes.create_string_buffer(_native.ACQUIRE_ERRBUF_SIZE)
            rc = L.gm_reserve(ctx, req, duration, ctypes.byref(out), err,
                              _native.ACQUIRE_ERRBUF_SIZE)
            result.update(rc=rc, handle=out.value, message=_native.text(err.value).rstrip())
        finally:
            finished.set()

    if not waits:
        run()
        return result["rc"], result["handle"], result["message"]
    worker = threading.Thread(target=run, name="gpuman-reserve", daemon=True)
    worker.start()
    try:
        while not finished.wait(0.2):
            pass
    except BaseException:
        L.gm_cancel(ctx)
        finished.wait()
        if result.get("rc") == _native.OK:
            ident = _native.text(L.gm_reservation_id(result["handle"]))
            L.gm_reservation_free(result["handle"])
            L.gm_release_reservation(ident.encode(), None, 0)
        raise
    return result["rc"], result["handle"], result["message"]


def release(id: str) -> None:
    """End reservation id (yours; root: anyone's) now.  Raises
    InvalidArgument when there is no such live reservation or it is another
    user's, naming it."""
    err = ctypes.create_string_buffer(_native.ERRBUF_SIZE)
    rc = _native.lib().gm_release_reservation(str(id).encode(), err, _native.ERRBUF_SIZE)
    if rc != _native.OK:
        raise _native.error_for(rc, _native.text(err.value))


def reservations() -> List[Dict]:
    """Every live reservation of the machine, of every user: dicts as
    leases() gives them, with "expires_ms" (wall clock)."""
    return _native.reservations_json()["reservations"]
