"""The on-disk program cache: compiled programs keyed by source, target arch hash and arguments.

Key = SHA-256 over the kernel's source (its module file), the compiler's and kernel library's
sources, the target's arch hash, the peephole switch and a canonical form of every argument
(layouts by their addresses, shapes and strides). Two processes may compile the same key at
once: each takes an exclusive flock on `<key>.lock` before looking, so the second one waits and
then reads what the first wrote; files are written to a temporary name and renamed into place,
so a reader never sees half a file. `OTPU_CACHE` overrides the directory.
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import inspect
import os
import pickle
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from .. import isa
from .affine import Affine
from .program import Program, Stats, compile_kernel, target_of

FORMAT = 2
_PKG = Path(__file__).resolve().parent


def cache_dir() -> Path:
    base = os.environ.get("OTPU_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"),
                                                        "otpu")
    return Path(base) / "ol"


@lru_cache(maxsize=None)
def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _compiler_digest() -> str:
    files = sorted(_PKG.glob("*.py")) + sorted((_PKG.parent / "kernels").glob("*.py")) + \
        [_PKG.parent / "isa.py", _PKG.parent / "target.py"]
    return hashlib.sha256("".join(_file_digest(str(f)) for f in files).encode()).hexdigest()


def _canon(v):
    if isinstance(v, Affine):
        return ("A", repr(v))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        # layouts (Tensor, QTensor, KVCache) and argument records (shapes, layer layouts)
        return (type(v).__qualname__,) + tuple((f.name, _canon(getattr(v, f.name))) for f in dataclasses.fields(v))
    if isinstance(v, (list, tuple)):
        return tuple(_canon(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _canon(x)) for k, x in v.items()))
    if isinstance(v, (int, float, str, bool, type(None))):
        return v
    raise TypeError(f"cannot key the program cache on a {type(v).__name__} argument")


def program_key(fn, target, peepholes: bool, args: dict) -> str:
    t, cfg = target_of(target)
    try:
        source = _file_digest(inspect.getsourcefile(fn))
    except (TypeError, OSError):
        source = fn.__qualname__
    parts = (FORMAT, source, fn.__module__, fn.__qualname__, _compiler_digest(), t.arch_hash(), repr(cfg),
             peepholes, _canon(args))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _dump(prog: Program) -> bytes:
    return pickle.dumps({"words": prog.words(), "waits": [w.pack() for w in prog.waits], "run_args": prog.run_args,
                         "stats": prog.stats.as_dict(), "arch_hash": prog.arch_hash,
                         "sources": prog.sources}, protocol=4)


def _load(data: bytes) -> Program:
    d = pickle.loads(data)
    instrs = [isa.Instr(tuple(int(x) for x in row)) for row in np.asarray(d["words"]).tolist()]
    stats = Stats(**d["stats"])
    stats.cached = True
    return Program(instrs, [isa.WaitEntry.unpack(w) for w in d["waits"]], d["run_args"], stats, d["arch_hash"],
                   d["sources"])


def cached_compile(fn, target=None, *, peepholes: bool = True, directory: Path | str | None = None, **args) -> Program:
    """compile_kernel through the on-disk cache (safe for concurrent processes)."""
    t0 = time.perf_counter()
    key = program_key(fn, target, peepholes, args)
    d = Path(directory) if directory is not None else cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{key}.prog"
    with open(d / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.exists():
                prog = _load(path.read_bytes())
                prog.stats.compile_s = time.perf_counter() - t0
                return prog
            prog = compile_kernel(fn, target, peepholes=peepholes, **args)
            fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(_dump(prog))
            os.replace(tmp, path)
            return prog
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
