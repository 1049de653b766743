"""Loading libgpuman with ctypes, and the few helpers every call shares.

Everything real happens in the C library; this module only finds it,
declares the prototypes of include/gpuman.h that the binding uses, and turns
enum gm_err codes into exceptions.
"""

import contextlib
import ctypes
import json
import os
import threading

# enum gm_err (append-only in gpuman.h, so the numbers are stable).
OK = 0
ERR_INVALID = 2
ERR_NVML_LOAD = 3
ERR_NVML = 4
ERR_UNAVAILABLE = 6
ERR_TIMEOUT = 7
ERR_NEVER = 12

ERRBUF_SIZE = 4096  # GM_ERRBUF_SIZE
# gm_acquire's detail has a line per GPU; 512 bytes cut it off on 8 GPUs.
ACQUIRE_ERRBUF_SIZE = 16384

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
# The library's soname (the Makefile's SONAME): a binding of this version
# needs its layouts and functions.
_SONAME = "libgpuman.so.1"


class GpumanError(Exception):
    """A libgpuman call failed; str() is the library's message, .code its
    enum gm_err number."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class InvalidArgument(GpumanError, ValueError):
    """A bad argument value (an unknown policy, a SIZE such as "12Q"); the
    message names the argument and the value.  A ValueError, so code that
    checks values the usual way catches it."""


class Unavailable(GpumanError):
    """The request cannot be met: not now (no wait, or the wait timed out)
    or never on this machine."""


class NoDriver(GpumanError):
    """NVML could not be loaded: no NVIDIA driver (or simulator) here."""


def error_for(code, message):
    """The exception for an enum gm_err code and its detail text."""
    if not message:
        message = strerror(code)
    if code in (ERR_UNAVAILABLE, ERR_TIMEOUT, ERR_NEVER):
        return Unavailable(message, code)
    if code == ERR_NVML_LOAD:
        return NoDriver(message, code)
    if code == ERR_INVALID:
        return InvalidArgument(message, code)
    return GpumanError(message, code)


def _candidates():
    """Where libgpuman may be, in the order it is looked for."""
    env = os.environ.get("GPUMAN_LIB")
    if env:
        # An explicit choice is the only one: falling back silently would
        # hide a typo.
        return [env]
    found = []
    # The source tree: python/gpuman/ -> build/libgpuman.so.
    root = os.path.dirname(os.path.dirname(_PKG_DIR))
    if os.path.isfile(os.path.join(root, "include", "gpuman.h")):
        found.append(os.path.join(root, "build", "libgpuman.so"))
    # A copy bundled by `pip install` (see python/backend/).
    found.append(os.path.join(_PKG_DIR, "libgpuman.so"))
    # `make install` puts it in $PREFIX/lib, and this package in
    # $PREFIX/lib/python3/dist-packages/gpuman; ld.so's cache may not know
    # $PREFIX/lib (no ldconfig run), so look there first.
    found.append(os.path.normpath(os.path.join(_PKG_DIR, "..", "..", "..", _SONAME)))
    # Then by soname through ld.so (LD_LIBRARY_PATH, its cache); not
    # ctypes.util.find_library("gpuman"), which may name an older
    # libgpuman.so.0 left installed beside it.
    found.append(_SONAME)
    return found


_lib = None
_load_lock = threading.Lock()


def _declare(lib):
    c_void_p, c_char_p, c_int, c_size_t = (ctypes.c_void_p, ctypes.c_char_p,
                                           ctypes.c_int, ctypes.c_size_t)
    pvoid = ctypes.POINTER(c_void_p)
    protos = {
        "gm_strerror": (c_char_p, [c_int]),
        "gm_version": (c_char_p, []),
        "gm_version_number": (ctypes.c_uint, []),
        "gm_free": (None, [c_void_p]),
        "gm_open": (c_int, [pvoid, c_char_p, c_size_t]),
        "gm_close": (None, [c_void_p]),
        "gm_context_nvml_path": (c_char_p, [c_void_p]),
        "gm_snapshot_take": (c_int, [c_void_p, pvoid, c_char_p, c_size_t]),
        "gm_snapshot_free": (None, [c_void_p]),
        # Returns text that the caller frees with gm_free: keep the raw pointer.
        "gm_snapshot_json": (c_void_p, [c_void_p]),
        "gm_request_new": (c_void_p, []),
        "gm_request_free": (None, [c_void_p]),
        "gm_request_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]),
        "gm_request_text": (c_void_p, [c_void_p]),
        "gm_pick": (c_int, [c_void_p, c_void_p, c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint)),
                            ctypes.POINTER(c_size_t), ctypes.POINTER(c_void_p)]),
        "gm_leases_json": (c_int, [ctypes.POINTER(c_void_p), c_char_p, c_size_t]),
        "gm_acquire": (c_int, [c_void_p, c_void_p, pvoid, c_char_p, c_size_t]),
        "gm_cancel": (None, [c_void_p]),
        "gm_lease_release": (None, [c_void_p]),
        "gm_lease_id": (c_char_p, [c_void_p]),
        "gm_lease_gpu_count": (c_size_t, [c_void_p]),
        "gm_lease_gpu_index": (ctypes.c_uint, [c_void_p, c_size_t]),
        "gm_lease_gpu_uuid": (c_char_p, [c_void_p, c_size_t]),
        "gm_lease_cuda_visible": (c_char_p, [c_void_p]),
        "gm_lease_indices": (c_char_p, [c_void_p]),
        "gm_lease_mem_fraction": (ctypes.c_double, [c_void_p]),
        "gm_lease_fd": (c_int, [c_void_p]),
        # Reservations (0.4.0).
        "gm_reserve": (c_int, [c_void_p, c_void_p, c_char_p, pvoid, c_char_p, c_size_t]),
        "gm_reservation_free": (None, [c_void_p]),
        "gm_reservation_id": (c_char_p, [c_void_p]),
        "gm_reservation_gpu_count": (c_size_t, [c_void_p]),
        "gm_reservation_gpu_index": (ctypes.c_uint, [c_void_p, c_size_t]),
        "gm_reservation_gpu_uuid": (c_char_p, [c_void_p, c_size_t]),
        "gm_reservation_cuda_visible": (c_char_p, [c_void_p]),
        "gm_reservation_indices": (c_char_p, [c_void_p]),
        "gm_reservation_expires_ms": (ctypes.c_int64, [c_void_p]),
        "gm_release_reservation": (c_int, [c_char_p, c_char_p, c_size_t]),
        "gm_reservations_json": (c_int, [ctypes.POINTER(c_void_p), c_char_p, c_size_t]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def lib():
    """The loaded libgpuman (loaded on first use, so that `import gpuman`
    works everywhere and GPUMAN_LIB may be set after the import)."""
    global _lib
    with _load_lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append("%s (no such file)" % path)
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append(str(e))
                continue
            try:
                _declare(handle)
            except AttributeError as e:
                # An older libgpuman lacks a call this binding needs.
                tried.append("%s: %s" % (path, e))
                continue
            _lib = handle
            return _lib
        raise GpumanError(
            "libgpuman not found; build it with 'make' or set GPUMAN_LIB to its path "
            "(tried: %s)" % "; ".join(tried))


def strerror(code):
    text = lib().gm_strerror(code)
    return text.decode() if text else "error %d" % code


def text(value):
    return value.decode("utf-8", "replace") if value is not None else ""


def open_context():
    """A new gm_context, or the exception for why not.  libgpuman keeps NVML
    loaded and initialised for the life of the process, so opening one per
    call is cheap, and each reads GPUMAN_NVML / GPUMAN_SIM as they are now."""
    L = lib()
    ctx = ctypes.c_void_p()
    err = ctypes.create_string_buffer(ERRBUF_SIZE)
    rc = L.gm_open(ctypes.byref(ctx), err, ERRBUF_SIZE)
    if rc != OK:
        raise error_for(rc, text(err.value))
    return ctx


@contextlib.contextmanager
def context():
    """open_context() for the length of a with block."""
    ctx = open_context()
    try:
        yield ctx
    finally:
        lib().gm_close(ctx)


def snapshot_json(ctx):
    """Take a snapshot and return it parsed from gm_snapshot_json."""
    L = lib()
    snap = ctypes.c_void_p()
    err = ctypes.create_string_buffer(ERRBUF_SIZE)
    rc = L.gm_snapshot_take(ctx, ctypes.byref(snap), err, ERRBUF_SIZE)
    if rc != OK:
        raise error_for(rc, text(err.value))
    try:
        doc = owned_text(L.gm_snapshot_json(snap))
    finally:
        L.gm_snapshot_free(snap)
    return json.loads(doc)


def owned_text(raw):
    """The text at a pointer the library handed over, freed with gm_free."""
    if not raw:
        raise GpumanError("out of memory", 1)
    try:
        return ctypes.string_at(raw).decode("utf-8", "replace")
    finally:
        lib().gm_free(raw)


def request_text(req):
    """gm_request_text: the request as command-line options."""
    return owned_text(lib().gm_request_text(req))


def leases_json():
    """gm_leases_json parsed: {"leases": [...], "waiters": [...]}."""
    raw = ctypes.c_void_p()
    err = ctypes.create_string_buffer(ERRBUF_SIZE)
    rc = lib().gm_leases_json(ctypes.byref(raw), err, ERRBUF_SIZE)
    if rc != OK:
        raise error_for(rc, text(err.value))
    return json.loads(owned_text(raw.value))


def reservations_json():
    """gm_reservations_json parsed: {"reservations": [...]}."""
    raw = ctypes.c_void_p()
    err = ctypes.create_string_buffer(ERRBUF_SIZE)
    rc = lib().gm_reservations_json(ctypes.byref(raw), err, ERRBUF_SIZE)
    if rc != OK:
        raise error_for(rc, text(err.value))
    return json.loads(owned_text(raw.value))


def pick(ctx, req):
    """gm_pick on a fresh snapshot: (enum gm_err, NVML indices, explanation)."""
    L = lib()
    snap = ctypes.c_void_p()
    err = ctypes.create_string_buffer(ERRBUF_SIZE)
    rc = L.gm_snapshot_take(ctx, ctypes.byref(snap), err, ERRBUF_SIZE)
    if rc != OK:
        raise error_for(rc, text(err.value))
    indices = ctypes.POINTER(ctypes.c_uint)()
    count = ctypes.c_size_t()
    explain = ctypes.c_void_p()
    try:
        rc = L.gm_pick(ctx, snap, req, ctypes.byref(indices), ctypes.byref(count),
                       ctypes.byref(explain))
        chosen = [indices[i] for i in range(count.value)] if rc == OK else []
    finally:
        L.gm_free(ctypes.cast(indices, ctypes.c_void_p))
        L.gm_snapshot_free(snap)
    why = owned_text(explain.value).rstrip() if explain.value else ""
    return rc, chosen, why


def _as_argument(message, key):
    """The library's "--min-free '12Q': ..." as a Python caller wrote it:
    "min_free='12Q': ..."."""
    option = ("-" if len(key) == 1 else "--") + key
    if message.startswith(option + " "):
        return key.replace("-", "_") + "=" + message[len(option) + 1:]
    return message


def request(options):
    """A gm_request with options [(key, value or None)] set; the caller
    frees it with gm_request_free.  Raises InvalidArgument naming a bad
    argument by its Python name."""
    L = lib()
    req = L.gm_request_new()
    if not req:
        raise GpumanError("out of memory", 1)
    err = ctypes.create_string_buffer(ERRBUF_SIZE)
    for key, value in options:
        raw = None if value is None else value.encode()
        rc = L.gm_request_set(req, key.encode(), raw, err, ERRBUF_SIZE)
        if rc != OK:
            L.gm_request_free(req)
            raise error_for(rc, _as_argument(text(err.value), key))
    return req
