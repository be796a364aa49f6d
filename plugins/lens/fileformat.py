"""The `.otpuprof` file: gzip-compressed JSON holding one or more profiles.

    {"format": "otpu-lens-profile", "version": 1, "created": ISO-8601, "tool": "otpu-lens X.Y",
     "profiles": [profile, ...]}

A profile is the dict `profile.build` makes (docs/lens.md lists every key). Plain JSON is read
too (gzip is told by its magic bytes 1f 8b). A file of another format, a newer version or one
that is not JSON is refused with a UsageError naming the file and what is wrong (exit 2).
Instruction and window columns are numpy arrays in memory and JSON lists on disk.
"""
from __future__ import annotations

import datetime as _dt
import gzip
import json
from pathlib import Path

import numpy as np

from otpu_core import __version__
from otpu_core.errors import UsageError

FORMAT, VERSION = "otpu-lens-profile", 1
SUFFIX = ".otpuprof"
GZIP_LEVEL = 3                   # the page decompresses it natively; level 3 writes 2-3x faster than 9


def _plain(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def document(profiles: list[dict]) -> dict:
    return {"format": FORMAT, "version": VERSION, "tool": f"otpu-lens {__version__}",
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "profiles": profiles}


def dumps(profiles: list[dict]) -> str:
    """The JSON text of a new document (no spaces: a million-instruction profile stays small)."""
    return dumps_document(document(profiles))


def dumps_document(doc: dict) -> str:
    return json.dumps(_plain(doc), separators=(",", ":"), allow_nan=False)


def encode(profiles: list[dict]) -> bytes:
    return gzip.compress(dumps(profiles).encode(), compresslevel=GZIP_LEVEL, mtime=0)


def load_bytes(data: bytes, name: str) -> dict:
    """A validated document from file bytes; columns become numpy arrays."""
    try:
        text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        doc = json.loads(text)
    except (OSError, EOFError, ValueError) as e:
        raise UsageError(f"{name}: not an otpu-lens profile (neither gzip JSON nor JSON: {e})") from None
    check(doc, name)
    for p in doc["profiles"]:
        cols = p.get("instrs", {}).get("data", {})
        for k, v in cols.items():
            cols[k] = np.asarray(v, dtype=np.int64)
        p["windows"] = [{k: np.asarray(v, dtype=np.int64) for k, v in w.items()} for w in p.get("windows", [])]
    return doc


def check(doc, name: str) -> None:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise UsageError(f"{name}: format {got!r} is not {FORMAT!r}", hint="record one with `otpu-lens record -o FILE`")
    version = doc.get("version")
    if not isinstance(version, int) or version < 1:
        raise UsageError(f"{name}: version {version!r} is not a profile version (1..{VERSION})")
    if version > VERSION:
        raise UsageError(f"{name}: version {version} is newer than this otpu-lens reads ({VERSION})",
                         hint="upgrade the openTPU tools to open it")
    profiles = doc.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        raise UsageError(f"{name}: key 'profiles' must be a non-empty list")
    for i, p in enumerate(profiles):
        for key in ("kind", "name", "cycles", "instrs", "programs", "sources", "notes", "config", "roofline"):
            if not isinstance(p, dict) or key not in p:
                raise UsageError(f"{name}: profile {i} has no key {key!r}")
        if p["kind"] not in ("sim", "hw", "board"):
            raise UsageError(f"{name}: profile {i} kind {p['kind']!r} is not sim, hw or board")


def read(path: Path) -> dict:
    if not path.is_file():
        raise UsageError(f"{path}: no such profile file")
    return load_bytes(path.read_bytes(), str(path))
