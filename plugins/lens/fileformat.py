"""The `.otpuprof` file: gzip-compressed JSON holding one or more profiles.

    {"format": "otpu-lens-profile", "version": 1, "created": ISO-8601, "tool": "otpu-lens X.Y",
     "profiles": [profile, ...]}

A profile is the dict `profile.build` makes (docs/lens.md lists every key). Plain JSON is read
too (gzip is told by its magic bytes 1f 8b). A file of another format, a newer version or one
that is not JSON is refused with a UsageError naming the file and what is wrong (exit 2).

Instruction columns are numpy arrays in memory and, on disk, packed little-endian arrays in
base64: `{"dtype": "i1" | "i2" | "i4" | "f8", "delta": bool, "b64": "..."}` (the smallest integer
type that holds the column, "f8" past 32 bits; `delta`: stored as differences from the
previous value). Turning millions of integers
into decimal text is what made writing and parsing slow; the page maps these bytes straight
onto typed arrays. The activity windows' columns (one entry per 1024 cycles) are packed the
same way since version 2 (version 1 wrote them as JSON lists; both are read).
"""
from __future__ import annotations

import base64
import datetime as _dt
import gzip
import json
from pathlib import Path

import numpy as np

from otpu_core import __version__
from otpu_core.errors import UsageError

FORMAT, VERSION = "otpu-lens-profile", 2
SUFFIX = ".otpuprof"
GZIP_LEVEL = 1                   # the page decompresses it natively; level 1 writes several times faster than 9
DELTA_COLUMNS = ("d", "cycle")  # dispatch cycles, window ends: ever growing, small steps
INTS = (("i1", np.iinfo(np.int8)), ("i2", np.iinfo(np.int16)), ("i4", np.iinfo(np.int32)))   # smallest that fits


def pack_column(arr: np.ndarray, delta: bool = False) -> dict:
    a = np.asarray(arr, dtype=np.int64)
    if delta and a.size:
        a = np.diff(a, prepend=0)
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    dtype = next((name for name, info in INTS if info.min <= lo and hi <= info.max), "f8")
    raw = a.astype("<" + dtype).tobytes()
    return {"dtype": dtype, "delta": bool(delta), "b64": base64.b64encode(raw).decode("ascii")}


def unpack_column(col, name: str, key: str) -> np.ndarray:
    if isinstance(col, list):
        return np.asarray(col, dtype=np.int64)
    try:
        raw = base64.b64decode(col["b64"], validate=True)
        if col["dtype"] not in ("i1", "i2", "i4", "f8"):
            raise ValueError(f"type {col['dtype']!r} is not i1, i2, i4 or f8")
        a = np.frombuffer(raw, dtype="<" + col["dtype"]).astype(np.int64)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{name}: column {key!r} is not a packed column ({e})") from None
    return np.cumsum(a) if col.get("delta") else a


def _pack_columns(cols: dict) -> dict:
    return {k: pack_column(v, k in DELTA_COLUMNS) if isinstance(v, np.ndarray) else v for k, v in cols.items()}


def _pack_profile(p: dict) -> dict:
    instrs = p.get("instrs")
    if not instrs:
        return p
    return {**p, "instrs": {**instrs, "data": _pack_columns(instrs["data"])},
            "windows": [_pack_columns(w) for w in p.get("windows", [])]}


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
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "profiles": [_pack_profile(p) for p in profiles]}


def dumps(profiles: list[dict]) -> str:
    """The JSON text of a new document (no spaces: a million-instruction profile stays small)."""
    return dumps_document(document(profiles))


def dumps_document(doc: dict) -> str:
    """JSON text of a document; a document read back (columns as arrays) is packed again."""
    if any(isinstance(v, np.ndarray) for p in doc["profiles"] for v in p.get("instrs", {}).get("data", {}).values()):
        doc = {**doc, "version": VERSION, "profiles": [_pack_profile(p) for p in doc["profiles"]]}
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
            cols[k] = unpack_column(v, name, f"instrs.{k}")
        p["windows"] = [{k: unpack_column(v, name, f"windows.{k}") for k, v in w.items()} for w in p.get("windows", [])]
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
