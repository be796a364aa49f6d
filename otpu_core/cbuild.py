"""Native kernels: C sources shipped in the package, compiled at first use, loaded with ctypes.

A hot loop that numpy cannot express without large temporaries (a strip converter, an fp32
sequence evaluated per element) may have a C twin. The C file is compiled with the system C
compiler (`$CC`, else `cc`) into a shared library cached under `$OTPU_NATIVE_CACHE` (default
`~/.cache/otpu/native`), keyed by the source bytes, the flags and the compiler's version, built
through `buildcache` (atomic, one builder per key). Every native kernel has a numpy twin that
gives the same bytes: `load` returns None when there is no compiler, when `OTPU_NATIVE=0`, or when
the build fails (a one-line warning says why), and the caller takes the numpy path. Under
`OTPU_CI` a failed build is an error, so CI never measures or tests the fallback by accident.

The flags keep IEEE semantics (no -ffast-math, no contraction into FMA): kernels that emulate the
card's fp32 must round exactly as the numpy twin does.

`typed(name, source, declare)` is what a kernel's wrapper calls on every use: the library with
its ctypes signatures declared (once), or None. It reads `OTPU_NATIVE` on every call, so setting
it to 0 in a running process takes the numpy path from the next call on; the compiler lookup is
cached, which keeps a call cheap enough for once per simulated instruction.

Public API: `typed(name, source, declare)`, `load(name, source)`, `available()`, `NativeError`.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable

from . import buildcache
from .errors import UsageError

FLAGS = ("-std=c11", "-O3", "-fPIC", "-shared", "-pthread", "-ffp-contract=off", "-fno-fast-math")
BUILD_TIMEOUT_S = 300


class NativeError(UsageError):
    """A native kernel failed to build where a fallback is not allowed (CI)."""


def _compiler() -> str | None:
    return _which(os.environ.get("CC") or "cc")


@lru_cache(maxsize=None)
def _which(cc: str) -> str | None:
    return shutil.which(cc)


@lru_cache(maxsize=None)
def _compiler_version(path: str) -> str:
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def available() -> bool:
    """True when native kernels may be built here (a C compiler, and OTPU_NATIVE not 0)."""
    return os.environ.get("OTPU_NATIVE", "1").strip() != "0" and _compiler() is not None


def typed(name: str, source: Path, declare: Callable[[ctypes.CDLL], None]) -> ctypes.CDLL | None:
    """The library `load` gives with `declare` applied to it once, or None (native kernels off or
    unavailable: the caller runs the numpy twin)."""
    return _declared(name, source, declare) if available() else None


@lru_cache(maxsize=None)
def _declared(name: str, source: Path, declare: Callable[[ctypes.CDLL], None]) -> ctypes.CDLL | None:
    lib = load(name, source)
    if lib is not None:
        declare(lib)
    return lib


def _fallback(message: str) -> None:
    if os.environ.get("OTPU_CI"):
        raise NativeError(message)
    print(f"otpu: {message}; using the numpy path", file=sys.stderr)


@lru_cache(maxsize=None)
def load(name: str, source: Path) -> ctypes.CDLL | None:
    """The shared library built from `source` (cached), or None: the caller uses its numpy twin."""
    if not available():
        return None
    cc = _compiler()
    version = _compiler_version(cc)
    h = hashlib.sha256()
    h.update(source.read_bytes())
    h.update(repr((FLAGS, version, os.uname().machine)).encode())
    key = h.hexdigest()[:20]

    def make(out: Path, scratch: Path) -> None:
        cmd = [cc, *FLAGS, "-o", str(scratch / f"{name}.so"), str(source), "-lm"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise NativeError(f"building {source.name} took more than {BUILD_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            raise NativeError(f"building {source.name} failed (exit {proc.returncode}):\n{tail}")
        (scratch / f"{name}.so").rename(out / f"{name}.so")

    try:
        final, _ = buildcache.obtain(buildcache.cache_root("OTPU_NATIVE_CACHE", "native"), name, key, make)
        return ctypes.CDLL(str(final / f"{name}.so"))
    except (NativeError, OSError) as e:
        _fallback(f"native kernel {name} unavailable: {e}")
        return None
