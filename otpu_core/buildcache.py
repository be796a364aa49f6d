"""Content-keyed build outputs shared by every process on the machine.

An output directory `<root>/<name>-<key>/` is made once: in a temporary directory beside its final
place, renamed there only when the build finished, so a killed build leaves nothing that looks
built. One `flock` per key makes concurrent builders of the same key wait for the first instead
of racing it. The key is the caller's: a hash of everything that changes the output.

Public API: `cache_root(env_var, sub)`, `obtain(root, name, key, make)`.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def cache_root(env_var: str, sub: str) -> Path:
    """`$env_var` when set, else `$XDG_CACHE_HOME/otpu/<sub>` (default `~/.cache/otpu/<sub>`)."""
    base = os.environ.get(env_var)
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "otpu" / sub


def obtain(root: Path, name: str, key: str, make: Callable[[Path, Path], None],
           on_build: Callable[[], None] | None = None) -> tuple[Path, bool]:
    """The finished directory for (`name`, `key`) and whether this call built it.

    `make(out, scratch)` writes the outputs into `out` (renamed into place afterwards) and may use
    `scratch` for anything else; both are removed if it raises. `on_build` is called once a build
    is going to run (to tell the user), never when the output is found in the cache.
    """
    final = root / f"{name}-{key}"
    if final.is_dir():
        return final, False
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # a second builder of this key waits here
        if final.is_dir():
            return final, False
        if on_build:
            on_build()
        scratch = Path(tempfile.mkdtemp(prefix=f".{name}-{key}-", dir=root))
        try:
            out = scratch / "keep"
            out.mkdir()
            make(out, scratch)
            os.rename(out, final)                  # atomic: the output appears whole or not at all
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return final, True
