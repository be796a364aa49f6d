"""Verilator builds of the RTL (`rtl/`) and runs of the resulting simulators.

A build is keyed by everything that can change the executable: the content of every source
file, the top module, the parameters and defines, the Verilator flags and the Verilator version.
Executables live in `$OTPU_RTL_CACHE` (default `~/.cache/otpu/rtl`, shared by every process and
test: the key makes sharing safe) under `<top>-<key>/`, made through `buildcache` (a killed build
leaves no executable; concurrent builds of one configuration wait for the first). A simulator run dies with the Python process that started it
(PR_SET_PDEATHSIG on Linux, else a watcher thread on a pipe the child inherits).

Public API: `verilator_version()`, `available()`, `require()`, `Build` (`exe`, `key`, `built`),
`build(top, sources, params, defines, flags)`, `run(exe, plusargs, timeout)` and `RtlError`.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

from . import buildcache
from .errors import UsageError

RTL_DIR = Path(__file__).resolve().parent.parent / "rtl"
BUILD_TIMEOUT_S = 1800
# Verilator's C++ is built with -O2 (its default -Os makes a slower simulator); warnings are
# the lint job's, not the build's.
DEFAULT_FLAGS = ("--binary", "--timing", "-O3", "-Wno-fatal", "-Wno-lint", "-Wno-style",
                 "-MAKEFLAGS", "OPT_FAST=-O2", "-MAKEFLAGS", "OPT_SLOW=-O1")
INSTALL_HINT = "install it with: apt-get install -y verilator (Verilator 5 or newer)"


class RtlError(UsageError):
    """Verilator missing or too old, a build that failed, or a simulator run that failed."""


def cache_dir() -> Path:
    return buildcache.cache_root("OTPU_RTL_CACHE", "rtl")


@lru_cache(maxsize=None)
def _version_of(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RtlError(f"{path} --version failed: {e}", hint=INSTALL_HINT) from None
    return out


def verilator_version() -> str | None:
    """`Verilator 5.006 2023-01-22 ...`, or None when verilator is not on PATH."""
    path = shutil.which("verilator")
    return _version_of(path) if path else None


def _major(version: str) -> int:
    try:
        return int(version.split()[1].split(".")[0])
    except (IndexError, ValueError):
        return 0


def available() -> bool:
    v = verilator_version()
    return v is not None and _major(v) >= 5


def require() -> str:
    """The Verilator version string, or an RtlError saying how to install one."""
    v = verilator_version()
    if v is None:
        raise RtlError("verilator is not on PATH", hint=INSTALL_HINT)
    if _major(v) < 5:
        raise RtlError(f"{v} is too old: the RTL builds need Verilator 5 (--binary, --timing)", hint=INSTALL_HINT)
    return v


@dataclass(frozen=True)
class Build:
    top: str
    key: str
    exe: Path
    built: bool              # True when this call compiled it (False: found in the cache)
    seconds: float


def _define_args(params: Mapping[str, object], defines: Mapping[str, object]) -> list[str]:
    out = []
    for name, value in sorted(params.items()):
        v = int(value) if isinstance(value, bool) else value
        out.append(f"-G{name}={v}" if isinstance(v, int) else f'-G{name}="{v}"')
    for name, value in sorted(defines.items()):
        out.append(f"+define+{name}" if value is None or value is True else f"+define+{name}={value}")
    return out


def build_key(top: str, sources: Sequence[Path], params: Mapping[str, object], defines: Mapping[str, object],
              flags: Sequence[str], version: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"top": top, "params": {k: str(v) for k, v in sorted(params.items())},
                         "defines": {k: str(v) for k, v in sorted(defines.items())}, "flags": list(flags),
                         "version": version}, sort_keys=True).encode())
    for src in sources:
        h.update(src.name.encode())
        h.update(hashlib.sha256(src.read_bytes()).digest())
    return h.hexdigest()[:20]


def build(top: str, sources: Sequence[Path], params: Mapping[str, object] | None = None,
          defines: Mapping[str, object] | None = None, flags: Sequence[str] = DEFAULT_FLAGS,
          progress=None) -> Build:
    """The simulator executable of `top` over `sources` (built now, or found in the cache)."""
    version = require()
    params, defines = dict(params or {}), dict(defines or {})
    sources = [Path(s) for s in sources]
    for s in sources:
        if not s.is_file():
            raise RtlError(f"RTL source {s} does not exist")
    key = build_key(top, sources, params, defines, flags, version)
    t0 = time.monotonic()

    def make(keep: Path, tmp: Path) -> None:
        headers = [s for s in sources if s.suffix == ".svh"]     # hashed in the key, read through +incdir
        incdirs = sorted({f"+incdir+{h.parent}" for h in headers})
        cmd = ["verilator", *flags, "--top-module", top, "--Mdir", str(tmp / "obj"), "-o", str(tmp / top),
               *_define_args(params, defines), *incdirs, *[str(s) for s in sources if s.suffix != ".svh"]]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                  preexec_fn=_die_with_parent)
        except subprocess.TimeoutExpired:
            raise RtlError(f"verilator build of {top} took more than {BUILD_TIMEOUT_S} s") from None
        if proc.returncode != 0 or not (tmp / top).is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
            raise RtlError(f"verilator build of {top} failed (exit {proc.returncode}):\n{tail}")
        (tmp / top).rename(keep / top)
        (keep / "build.json").write_text(json.dumps({"top": top, "key": key, "version": version, "command": cmd},
                                                    indent=1))

    def announce() -> None:
        if progress:
            progress(f"building {top} with {version.split(' rev')[0]} (key {key}); this takes a minute or two")

    final, built = buildcache.obtain(cache_dir(), top, key, make, announce)
    return Build(top, key, final / top, built, time.monotonic() - t0 if built else 0.0)


# -- runs ------------------------------------------------------------------------------------------
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the parent dies (Linux); elsewhere `run` watches."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    os.setpgrp()            # its own process group: a timeout kills the simulator and nothing else


def run(exe: Path, plusargs: Mapping[str, object] | Sequence[str] = (), timeout: float = 600.0,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a simulator with +name=value arguments; RtlError when it fails or times out."""
    args = [f"+{k}={v}" for k, v in plusargs.items()] if isinstance(plusargs, Mapping) else list(plusargs)
    try:
        proc = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=cwd, preexec_fn=_die_with_parent)
    except OSError as e:
        raise RtlError(f"cannot start {exe}: {e.strerror}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RtlError(f"{exe.name} did not finish in {timeout:.0f} s") from None
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        tail = "\n".join((out + err).strip().splitlines()[-15:])
        raise RtlError(f"{exe.name} exited with {proc.returncode}:\n{tail}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
