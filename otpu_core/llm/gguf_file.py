"""GGUF files through the `gguf` package: metadata, llama.cpp tensor names, dequantisation.

Tensors are dequantised on read with gguf's own quants code (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
Q6_K); any other stored type is refused by tensor name at open. Families whose llama.cpp
converter permuted the q/k rows for interleaved-pair RoPE (Llama, SmolLM3) are un-permuted back
to the rotate-half layout of the Hugging Face weights, so every later stage sees one layout.
Llama 3 rope scaling arrives as the `rope_freqs` tensor (per-frequency divisors). The file's
structure is checked before any tensor is read: the magic, the header, and that every tensor's
bytes lie inside the file (a truncated download names the first tensor that is cut).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from . import config as config_mod
from . import families
from .checkpoint import Checkpoint, TokenizerSource, check_shapes
from .errors import ModelError

SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")


def _meta(reader) -> dict[str, Any]:
    out = {}
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            out[key] = fld.contents()
        except Exception:        # a field gguf cannot decode is one we do not read either
            continue
    return out


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's `permute(w, heads)`: rows (head, half, pair) back to (head, pair, half)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _reader(path: Path):
    """gguf's reader, checking each tensor's type and extent before it maps the tensor."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader

    class Reader(GGUFReader):
        def _build_tensors(self, start_offs, fields):
            size = int(self.data.size)
            for f in fields:
                _, name, _, dims, raw_type, offset = f.parts
                name = bytes(name).decode("utf-8", "replace")
                try:
                    qt = GGMLQuantizationType(int(raw_type[0]))
                except ValueError:
                    raise ModelError(f"{path}: tensor '{name}' has GGML type {int(raw_type[0])}, which this loader "
                                     "does not know", hint=f"supported: {', '.join(SUPPORTED_TYPES)}") from None
                block, nbytes = GGML_QUANT_SIZES[qt]
                end = int(start_offs) + int(offset[0]) + int(np.prod(dims)) * nbytes // block
                if end > size:
                    raise ModelError(f"{path}: truncated: tensor '{name}' needs bytes up to {end} but the file has "
                                     f"{size}", hint="download the file again")
            super()._build_tensors(start_offs, fields)

    size = path.stat().st_size
    try:
        return Reader(str(path))
    except ValueError as e:
        raise ModelError(f"{path}: not a readable GGUF file: {e}") from None
    except (IndexError, TypeError, OverflowError, MemoryError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: the GGUF header is cut short or damaged ({type(e).__name__}: {e}); "
                         f"the file has {size} bytes", hint="download the file again") from None


def open_gguf(path: Path) -> Checkpoint:
    reader = _reader(path)
    tensors = {t.name: t for t in reader.tensors}
    meta = _meta(reader)
    arch = str(meta.get("general.architecture", ""))
    fam = families.for_gguf(arch, str(path)) if arch else None
    if fam is None:
        raise ModelError(f"{path}: missing key 'general.architecture'")
    names: dict[str, str] = {}
    for canon, (_, gname) in families.GLOBAL_TENSORS.items():
        names[canon] = gname
    n_layers = int(meta.get(f"{arch}.block_count", 0))
    for i in range(n_layers):
        for canon, (_, gname) in families.LAYER_TENSORS.items():
            names[f"{canon}.{i}"] = gname.format(i=i)
    for canon, gname in names.items():
        t = tensors.get(gname)
        if t is not None and t.tensor_type.name not in SUPPORTED_TYPES:
            raise ModelError(f"{path}: tensor '{gname}' is stored as {t.tensor_type.name}, which this loader does "
                             "not dequantise", hint=f"supported: {', '.join(SUPPORTED_TYPES)}")
    for gname in tensors:
        if gname.endswith(families.REFUSED_SUFFIXES):
            raise ModelError(f"{path}: tensor '{gname}': biases are not part of a {fam.name} decoder this layer runs")
    rope = tensors.get("rope_freqs.weight")
    factors = tuple(float(x) for x in _dequant(rope)) if rope is not None else None
    tokens = meta.get("tokenizer.ggml.tokens")
    cfg = config_mod.from_gguf(meta, str(path), tied="output.weight" not in tensors, rope_factors=factors,
                               vocab=len(tokens) if tokens is not None else None,
                               name=str(meta.get("general.name") or path.stem))
    shapes = {canon: tuple(int(x) for x in reversed(tensors[g].shape.tolist())) for canon, g in names.items()
              if g in tensors}
    check_shapes(cfg, shapes, names, str(path))

    def read(canon: str) -> np.ndarray:
        t = tensors[names[canon]]
        w = _dequant(t)
        kind = canon.split(".")[0]
        if fam.gguf_permuted_qk and kind in ("wq", "wk"):
            w = _unpermute(w, cfg.heads if kind == "wq" else cfg.kv_heads)
        return np.ascontiguousarray(w, np.float32)

    tok = None
    if tokens is not None:
        tok = {"model": meta.get("tokenizer.ggml.model"), "pre": meta.get("tokenizer.ggml.pre"), "tokens": tokens,
               "merges": meta.get("tokenizer.ggml.merges"), "token_type": meta.get("tokenizer.ggml.token_type"),
               "add_bos": meta.get("tokenizer.ggml.add_bos_token")}
    special = {}
    for role in ("bos", "eos", "unknown", "padding"):
        idx = meta.get(f"tokenizer.ggml.{role}_token_id")
        if idx is not None and tokens is not None and 0 <= int(idx) < len(tokens):
            special[{"unknown": "unk_token", "padding": "pad_token"}.get(role, f"{role}_token")] = tokens[int(idx)]
    return Checkpoint(path, "gguf", cfg, [path], read,
                      {canon: tensors[g].tensor_type.name for canon, g in names.items() if g in tensors},
                      TokenizerSource(gguf=tok), meta.get("tokenizer.chat_template"), special)


def _dequant(t) -> np.ndarray:
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize
    data = np.asarray(t.data)
    if t.tensor_type == Q.F32:
        return data.astype(np.float32, copy=False)
    if t.tensor_type == Q.F16:
        return data.astype(np.float32)
    return dequantize(data, t.tensor_type).astype(np.float32, copy=False)
