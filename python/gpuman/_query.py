"""pick(), leases(), waiters(), waiting_by_user() and request_text():
looking without leasing."""

import os
from typing import Dict, List, Optional, Union

from . import _lease, _native
from ._lease import CVD, Duration, GpuList, Size, _options


def _request(n, by, min_free, max_util, mem, wait, only, exclude, idle, mig=None):
    return _native.request(_options(n, by, min_free, max_util, mem, wait, only, exclude, idle,
                                    mig))


def pick(*, n: int = 1, by: str = "memory", min_free: Optional[Size] = None,
         max_util: Optional[Union[int, float, str]] = None, mem: Optional[Size] = None,
         only: Optional[GpuList] = None, exclude: Optional[GpuList] = None,
         idle: bool = False, mig: Optional[str] = None) -> List[int]:
    """The GPUs select() would lease now (same arguments, no wait), as NVML
    indices in policy order (with mig, the index of the slice's GPU),
    without leasing them: another process may take them first, so use
    select() to hold them.

    Raises Unavailable, whose message says per GPU why it was not chosen
    (.code 6: not now; 12: never on this machine), InvalidArgument, NoDriver.
    """
    req = _request(n, by, min_free, max_util, mem, None, only, exclude, idle, mig)
    try:
        with _native.context() as ctx:
            # Choose within what bounds this process, as select() does: the
            # user's CUDA_VISIBLE_DEVICES, not one of its own leases'.
            with _lease._lock:
                seen = os.environ.get(CVD)
                _lease._set_env(CVD, _lease._base[CVD] if _lease._active else seen)
                try:
                    rc, chosen, why = _native.pick(ctx, req)
                finally:
                    _lease._set_env(CVD, seen)
    finally:
        _native.lib().gm_request_free(req)
    if rc != _native.OK:
        text = {_native.ERR_UNAVAILABLE: "no GPU meets the request now",
                _native.ERR_NEVER: "no GPU of this machine can ever meet the request"}.get(rc)
        raise _native.error_for(rc, "%s:\n%s" % (text, why) if text and why else text or why)
    return chosen


def leases() -> List[dict]:
    """Every live lease of the machine, of every user: dicts with "id",
    "user", "uid", "pid", "job_pid", "command", "start_ms", "kind"
    ("exclusive" or "share"), "share_mib" and "gpus" ([{"index", "uuid"}]),
    as `gpuman status --json` lists them."""
    return _native.leases_json()["leases"]


def waiters() -> List[dict]:
    """The requests waiting for GPUs, first in line first: dicts with
    "position", "user", "uid", "pid", "command", "since_ms" and "request"
    ("2 GPUs exclusive").  The lease broker lists the first 256 of a
    longer line: waiting_by_user() counts them all."""
    return _native.leases_json()["waiters"]


def waiting_by_user() -> Dict[str, int]:
    """How many requests each user has waiting in line, the whole line
    counted (past the 256 the broker lists one by one too)."""
    line = _native.leases_json()
    counts: Dict[str, int] = {}
    for w in line["waiters"]:
        counts[w["user"]] = counts.get(w["user"], 0) + 1
    for m in line.get("waiters_more", []):
        counts[m["user"]] = counts.get(m["user"], 0) + m["count"]
    return counts


def request_text(*, n: int = 1, by: str = "memory", min_free: Optional[Size] = None,
                 max_util: Optional[Union[int, float, str]] = None,
                 mem: Optional[Size] = None, wait: Optional[Duration] = None,
                 only: Optional[GpuList] = None,
                 exclude: Optional[GpuList] = None, idle: bool = False,
                 mig: Optional[str] = None) -> str:
    """select()'s arguments as gpuman's command-line options, defaults left
    out, as the library reads them: request_text(n=2, mem=8192, wait="90")
    is "-n 2 --mem 8G --wait=1m30s".  Raises InvalidArgument."""
    req = _request(n, by, min_free, max_util, mem, wait, only, exclude, idle, mig)
    try:
        return _native.request_text(req)
    finally:
        _native.lib().gm_request_free(req)
