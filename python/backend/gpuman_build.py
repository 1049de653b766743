"""A PEP 517 build backend for the gpuman binding, standard library only.

The binding is a few pure-Python modules plus, when `make` has built them,
libgpuman.so and the NVML simulator, which are copied into the package:

    gpuman/libgpuman.so               found by gpuman/_native.py
    gpuman/sim/libnvidia-ml.so.1      found by libgpuman beside itself

so that a pip-installed copy works without the source tree (GPUMAN_SIM
included).  The library is taken from $GM_BUILD, else ../build.  Without
it the wheel is pure Python and finds an installed libgpuman at run time.
setuptools is not used because this machine's, like many offline ones, has
no `wheel` package, without which it cannot build wheels.
"""

import base64
import hashlib
import io
import os
import re
import sys
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
NAME = "gpuman"
SUMMARY = "Choose and lease NVIDIA GPUs race-free (Python binding of libgpuman)"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _natives():
    """(path in the wheel, file on disk) for the built libraries."""
    build = os.environ.get("GM_BUILD") or os.path.join(os.path.dirname(HERE), "build")
    found = []
    for inner, outer in (("libgpuman.so", "libgpuman.so"),
                         ("sim/libnvidia-ml.so.1", "sim/libnvidia-ml.so.1")):
        path = os.path.join(build, outer)
        if os.path.isfile(path):
            found.append((NAME + "/" + inner, path))
    # The command itself, and what it finds relative to itself (bin/../lib/
    # gpuman, bin/../share/gpuman): pip puts .data/scripts on PATH and
    # .data/data under the environment's prefix.
    data = "%s-%s.data/" % (NAME, _version())
    for inner, outer in (("scripts/gpuman", "gpuman"), ("scripts/gpuman-serve", "gpuman-serve"),
                         ("scripts/gpuman-runner", "gpuman-runner"),
                         ("scripts/gpuman-simload", "gpuman-simload"),
                         ("data/lib/gpuman/libnvidia-ml.so.1", "sim/libnvidia-ml.so.1")):
        path = os.path.join(build, outer)
        if found and os.path.isfile(path):
            found.append((data + inner, path))
    # The simulator of older driver branches (sim/r390/ ...), beside the
    # default one, where gpuman looks for a scenario's branch.
    sims = os.path.join(build, "sim")
    if found and os.path.isdir(sims):
        newest = max((d for d in os.listdir(sims) if re.match(r"r\d+$", d)),
                     key=lambda d: int(d[1:]), default=None)
        for d in sorted(os.listdir(sims)):
            lib = os.path.join(sims, d, "libnvidia-ml.so.1")
            if re.match(r"r\d+$", d) and d != newest and os.path.isfile(lib):
                found.append((NAME + "/sim/" + d + "/libnvidia-ml.so.1", lib))
                found.append((data + "data/lib/gpuman/" + d + "/libnvidia-ml.so.1", lib))
    examples = os.path.join(os.path.dirname(HERE), "examples")
    if found and os.path.isdir(examples):
        found += [(data + "data/share/gpuman/examples/" + f, os.path.join(examples, f))
                  for f in sorted(os.listdir(examples)) if f.endswith((".json", ".txt"))]
    if not found:
        sys.stderr.write("gpuman_build: no %s/libgpuman.so (run make first?); building a "
                         "pure-Python wheel that needs libgpuman installed\n" % build)
    return found


def _sources():
    pkg = os.path.join(HERE, NAME)
    return [(NAME + "/" + f, os.path.join(pkg, f)) for f in sorted(os.listdir(pkg))
            if f.endswith(".py")]


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
            "Requires-Python: >=3.8\n" % (NAME, _version(), SUMMARY))


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode()


def _write_wheel(directory, files, pure):
    """files: [(path in the wheel, bytes, mode)]; returns the wheel's name."""
    tag = "py3-none-" + ("any" if pure else
                         sysconfig.get_platform().replace("-", "_").replace(".", "_"))
    dist_info = "%s-%s.dist-info" % (NAME, _version())
    files = list(files) + [
        (dist_info + "/METADATA", _metadata().encode(), 0o644),
        (dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: gpuman_build\n"
                                "Root-Is-Purelib: %s\nTag: %s\n"
                                % ("true" if pure else "false", tag)).encode(), 0o644),
        (dist_info + "/top_level.txt", (NAME + "\n").encode(), 0o644),
    ]
    record = "".join("%s,%s,%d\n" % (p, _digest(d), len(d)) for p, d, _ in files)
    record += dist_info + "/RECORD,,\n"
    files.append((dist_info + "/RECORD", record.encode(), 0o644))
    name = "%s-%s-%s.whl" % (NAME, _version(), tag)
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data, mode in files:
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    natives = _natives()
    files = [(p, _read(src), 0o644) for p, src in _sources()]
    files += [(p, _read(src), 0o644 if src.endswith((".json", ".txt")) else 0o755)
              for p, src in natives]
    return _write_wheel(wheel_directory, files, pure=not natives)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """An editable install: a .pth file that puts python/ on sys.path, so
    the package finds the source tree's build/libgpuman.so."""
    return _write_wheel(wheel_directory, [("gpuman_editable.pth", (HERE + "\n").encode(),
                                           0o644)], pure=True)


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    members = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
               ("backend/gpuman_build.py", os.path.abspath(__file__))] + _sources()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))
        for arc, path in members:
            tar.add(path, arcname=base + "/" + arc)
    return name
