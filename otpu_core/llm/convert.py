"""Conversion of a checkpoint to the card's weight formats, once, cached on disk.

`convert(ckpt, fmt, target)` quantises every matrix with `formats.quantize` (the format
definitions of docs/formats.md) in the card format's layer and head formats, splits W_down into
its F-chunk column parts (each part quantised on its own, as the MLP kernel reads it; an
expert's down projection too), quantises a router in the head format (routing is where a few
bits matter most; llama.cpp leaves ffn_gate_inp unquantised), keeps the
norms (and a convolution's taps) as fp32, zero-pads heads narrower than the block to it
(`layout.card_config`; `pad_heads` places each half of a q/k head's dims at the start of a half
of the padded head, a V head's (and o_proj's input columns) at its start, and scales the q/k norms, or q itself without them, so scores keep the real
width's 1/sqrt(head_dim)), and makes the embedding table the card gathers from (`layout.embed_kind`: fp32
rows for a small table, else int8 rows, the head itself when it is tied and int8). Tensors are read one at a time and large ones quantised in row chunks,
and each result is appended to the cache file as soon as it exists, so memory stays near one
source tensor. A table the host serves row by row (Gemma 4's per-layer embeddings) is not
converted: it stays in the checkpoint's file in its own type (`checkpoint.RowTable`), each row
read and turned to float32 when the card asks for it.

Cache: `$OTPU_CACHE/models/convert/<key>/` with `tensors.bin` and `index.json`, key = SHA-256 of
the weight files' content hash, the format, the target's arch hash, the F-chunk and this
module's conversion version. A finished entry is renamed into place (a crash leaves no half
entry); later runs memory-map it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .. import formats, isa
from ..target import Target
from .checkpoint import Checkpoint, RowTable, models_cache
from .errors import ModelError
from .families import NORM_TENSORS
from .layout import CardFormat, card_config, card_format, embed_kind, f_chunk_for

CONVERT_VERSION = 5
ROW_CHUNK = 8192                   # rows quantised at once (bounds the float64 temporaries)
Progress = Callable[[int, int, str], None]   # (done, total, what)


@dataclass
class Converted:
    """A model in card formats: name -> PackedWeights, a list of them (column parts) or fp32 (1-D); a table the
    host serves row by row (Gemma's `ple`) is the checkpoint's own `RowTable`, not converted."""
    key: str
    fmt: CardFormat
    D: int
    f_chunk: int
    tensors: dict
    path: Path | None = None
    seconds: float = 0.0
    cached: bool = False

    def nbytes(self) -> int:
        total = 0
        for v in self.tensors.values():
            for p in (v if isinstance(v, list) else [v]):
                if isinstance(p, RowTable):
                    continue
                total += p.nbytes if isinstance(p, np.ndarray) else p.rows.nbytes + p.scales.nbytes
        return total


def _plan_tensors(ckpt: Checkpoint, fmt: CardFormat) -> list[tuple[str, str, int | None]]:
    """(output name, source name, weight format or None for fp32) in writing order."""
    cfg = ckpt.config
    out = []
    for i in range(cfg.layers):
        for name, k, _ in cfg.layer_names(i):
            wf = None if k in NORM_TENSORS else fmt.head_wf if k == "router" else fmt.layer_wf
            out.append((name, name, wf))
    for k in cfg.global_tensors():        # Gemma's PLE: the projection on the card (its table stays in the file)
        if k in ("plp", "pln"):
            out.append((k, k, fmt.layer_wf if k == "plp" else None))
    out.append(("final_norm", "final_norm", None))
    out.append(("head", "head", fmt.head_wf))
    kind = embed_kind(cfg, fmt)
    if kind != "head":
        out.append(("embed", "embed", isa.WF_INT8 if kind == "int8" else None))
    return out


def pad_heads(kind: str, w: np.ndarray, cfg) -> np.ndarray:
    """A head tensor of the model (real head_dim r) in the card's padded heads (cfg.head_dim P)."""
    r, P = cfg.real_head_dim, cfg.head_dim
    # q and k: each half of the real dims starts a half of the padded head (rotate-half RoPE pairs
    # dim i with i + P/2); V and o_proj's input columns: the real dims first, so a V^T append can
    # write the real half alone (QST HALF)
    rope_at = np.concatenate([np.arange(r // 2), P // 2 + np.arange(r - r // 2)])
    first_at = np.arange(r)

    def rows(a: np.ndarray, heads: int, at: np.ndarray) -> np.ndarray:
        out = np.zeros((heads, P) + a.shape[1:], np.float64)
        out[:, at] = a.reshape((heads, r) + a.shape[1:])
        return out.reshape((heads * P,) + a.shape[1:])
    if kind == "wq":
        out = rows(w, cfg.heads, rope_at)
        return out if cfg.qk_norm else out * np.sqrt(P / r)
    if kind == "wk":
        return rows(w, cfg.kv_heads, rope_at)
    if kind == "wv":
        return rows(w, cfg.kv_heads, first_at)
    if kind == "wo":
        return rows(w.T, cfg.heads, first_at).T
    return rows(w, 1, rope_at) * (np.sqrt(r / P) if kind == "kn" else 1.0)       # qn, kn


HEAD_TENSORS = ("wq", "wk", "wv", "wo", "qn", "kn")


def cache_key(ckpt: Checkpoint, fmt: CardFormat, target: Target, f_chunk: int) -> str:
    parts = (CONVERT_VERSION, ckpt.fingerprint(), fmt.name, fmt.layer_wf, fmt.head_wf, target.arch_hash(),
             target.config().D, f_chunk, embed_kind(ckpt.config, fmt),
             hashlib.sha256(Path(formats.__file__).read_bytes()).hexdigest())
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def quantize_rows(w: np.ndarray, wf: int, D: int) -> formats.PackedWeights:
    """formats.quantize over row chunks (every format quantises each row on its own)."""
    if w.shape[0] <= ROW_CHUNK:
        return formats.quantize(w, wf, D)
    parts = [formats.quantize(w[r:r + ROW_CHUNK], wf, D) for r in range(0, w.shape[0], ROW_CHUNK)]
    return formats.PackedWeights(wf, D, w.shape[0], w.shape[1], np.concatenate([p.rows for p in parts]),
                                 np.concatenate([p.scales for p in parts]))


def convert(ckpt: Checkpoint, fmt_name: str, target: Target, progress: Progress | None = None,
            cache: bool = True) -> Converted:
    fmt = card_format(fmt_name)
    D = target.config().D
    f_chunk = f_chunk_for(ckpt.config.ffn, D, wf=fmt.layer_wf)
    key = cache_key(ckpt, fmt, target, f_chunk)
    final = models_cache() / "convert" / key
    if cache and (final / "index.json").exists():
        return _host_tables(load(final, fmt, D), ckpt)
    t0 = time.perf_counter()
    todo = _plan_tensors(ckpt, fmt)
    card = card_config(ckpt.config, D)
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}."))
    index: dict = {"key": key, "format": fmt.name, "D": D, "f_chunk": f_chunk, "model": ckpt.config.name,
                   "source": str(ckpt.path), "tensors": {}}
    try:
        with open(work / "tensors.bin", "wb") as blob:
            for n, (name, src, wf) in enumerate(todo):
                if progress is not None:
                    progress(n, len(todo), name)
                w = ckpt.get(src)
                if card.real_head_dim and src.split(".")[0] in HEAD_TENSORS:
                    w = pad_heads(src.split(".")[0], w, card).astype(np.float32)
                if not np.isfinite(w).all():
                    bad = np.argwhere(~np.isfinite(w))[0]
                    raise ModelError(f"{ckpt.path}: tensor '{src}' holds {w[tuple(bad)]} at {list(bad)}; "
                                     "only finite weights can be converted")
                index["tensors"][name] = _write(blob, w, wf, D, f_chunk if name.startswith(("wd.", "ed.")) else 0)
                del w
        (work / "index.json").write_text(json.dumps(index))
        if progress is not None:
            progress(len(todo), len(todo), "done")
        if cache:
            try:
                os.replace(work, final)
            except OSError:          # another process finished the same key first: use theirs
                shutil.rmtree(work, ignore_errors=True)
            conv = load(final, fmt, D)
        else:
            conv = load(work, fmt, D)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    conv.seconds, conv.cached = time.perf_counter() - t0, False
    return _host_tables(conv, ckpt)


def _host_tables(conv: Converted, ckpt: Checkpoint) -> Converted:
    """The tables the host serves row by row, read from the checkpoint in its own type as they are asked for:
    a row the card receives is the float32 of the file's values, as `ckpt.get` gives them."""
    if "ple" in ckpt.config.global_tensors():
        conv.tensors["ple"] = RowTable(ckpt, "ple")
    return conv


def _write(blob, w: np.ndarray, wf: int | None, D: int, part: int) -> dict:
    if wf is None:
        off = blob.tell()
        blob.write(np.ascontiguousarray(w, np.float32).tobytes())
        return {"kind": "f32", "offset": off, "shape": list(w.shape)}
    if part:
        return {"kind": "parts", "parts": [_write(blob, w[:, c:c + part], wf, D, 0)
                                           for c in range(0, w.shape[1], part)]}
    p = quantize_rows(w, wf, D)
    off = blob.tell()
    blob.write(p.rows.tobytes())
    blob.write(p.scales.tobytes())
    return {"kind": "packed", "offset": off, "wf": wf, "n": p.n, "k": p.k, "rs": p.rs, "srs": p.srs}


def load(d: Path, fmt: CardFormat, D: int) -> Converted:
    index = json.loads((d / "index.json").read_text())
    mem = np.memmap(d / "tensors.bin", dtype=np.uint8, mode="r")

    def view(e):
        if e["kind"] == "f32":
            n = int(np.prod(e["shape"]))
            return mem[e["offset"]:e["offset"] + 4 * n].view(np.float32).reshape(e["shape"])
        if e["kind"] == "parts":
            return [view(p) for p in e["parts"]]
        rows = mem[e["offset"]:e["offset"] + e["n"] * e["rs"]].reshape(e["n"], e["rs"])
        at = e["offset"] + e["n"] * e["rs"]
        scales = mem[at:at + e["n"] * e["srs"]].reshape(e["n"], e["srs"])
        return formats.PackedWeights(e["wf"], D, e["n"], e["k"], rows, scales)

    tensors = {name: view(e) for name, e in index["tensors"].items()}
    return Converted(index["key"], fmt, D, index["f_chunk"], tensors, d, cached=True)


def cached_entries() -> list[dict]:
    """Every finished conversion in the cache: key, format, model, source, size."""
    root = models_cache() / "convert"
    out = []
    for d in sorted(root.glob("*")) if root.exists() else []:
        try:
            index = json.loads((d / "index.json").read_text())
        except (OSError, ValueError):
            continue
        out.append({"key": index["key"], "format": index["format"], "model": index["model"],
                    "source": index["source"], "bytes": (d / "tensors.bin").stat().st_size, "path": str(d)})
    return out
