"""GGUF model files: llama.cpp tensor names and metadata as a `Checkpoint`.

The file is read through `otpu_core.gguf_source` (the one GGUF reader: gguf's `GGUFReader`,
the file's structure checked before any tensor is read, tensors dequantised on read with gguf's
own quants code). This layer accepts F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K and refuses any
other stored type by tensor name at open. Families whose llama.cpp
converter permuted the q/k rows for interleaved-pair RoPE (Llama, SmolLM3) are un-permuted back
to the rotate-half layout of the Hugging Face weights, so every later stage sees one layout.
Llama 3 rope scaling arrives as the `rope_freqs` tensor (per-frequency divisors). A mixture of
experts stores a layer's experts stacked ([experts, out, in]); the stack's shape is checked at
open, and expert e is read as its own rows of the stack.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..gguf_source import GgufModel
from . import config as config_mod
from . import families
from .checkpoint import Checkpoint, TokenizerSource, check_shapes, file_names
from .errors import ModelError

SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's `permute(w, heads)`: rows (head, half, pair) back to (head, pair, half)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _open(path: Path) -> GgufModel:
    try:
        return GgufModel(path)
    except ModelError:
        raise
    except UsageError as e:           # the reader's message names the file and the tensor; the model layer's class
        raise ModelError(e.message, hint=e.hint) from None


def open_gguf(path: Path) -> Checkpoint:
    src = _open(path)
    tensors = {t.name: t for t in src.tensors}
    meta = src.metadata
    arch = str(meta.get("general.architecture", ""))
    fam = families.for_gguf(arch, str(path)) if arch else None
    if fam is None:
        raise ModelError(f"{path}: missing key 'general.architecture'")
    for gname in tensors:
        if gname.endswith(families.REFUSED_SUFFIXES):
            raise ModelError(f"{path}: tensor '{gname}': biases are not part of a {fam.name} decoder this layer runs")
    rope = tensors.get("rope_freqs.weight")
    factors = tuple(float(x) for x in src.read(rope).ravel()) if rope is not None else None
    tokens = meta.get("tokenizer.ggml.tokens")
    cfg = config_mod.from_gguf(meta, str(path), tied="output.weight" not in tensors, rope_factors=factors,
                               vocab=len(tokens) if tokens is not None else None,
                               name=str(meta.get("general.name") or path.stem))
    names = file_names(cfg, gguf=True)
    for gname in names.values():
        t = tensors.get(gname)
        if t is not None and t.ggml_type not in SUPPORTED_TYPES:
            raise ModelError(f"{path}: tensor '{gname}' is stored as {t.ggml_type}, which this loader does "
                             "not dequantise", hint=f"supported: {', '.join(SUPPORTED_TYPES)}")
    shapes = {canon: tensors[g].shape for canon, g in names.items()
              if g in tensors}
    for canon, want in cfg.tensor_shapes().items():
        if canon.split(".")[0] in families.EXPERT_TENSORS and canon in shapes:
            stacked = (cfg.experts,) + tuple(want)
            if tuple(shapes[canon]) != stacked:
                raise ModelError(f"{path}: tensor '{names[canon]}' has shape {list(shapes[canon])} but the config "
                                 f"needs {list(stacked)} ({cfg.experts} experts of width {cfg.ffn}, hidden {cfg.d})")
            shapes[canon] = tuple(want)
    check_shapes(cfg, shapes, names, str(path))

    def read(canon: str) -> np.ndarray:
        kind = canon.split(".")[0]
        if kind in families.EXPERT_TENSORS:
            t, n = tensors[names[canon]], tensors[names[canon]].shape[1]
            w = src.read_rows(t, int(canon.split(".")[2]) * n, n)
            return np.ascontiguousarray(w.reshape(t.shape[1:]), np.float32)
        w = src.read(tensors[names[canon]])
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
                      {canon: tensors[g].ggml_type for canon, g in names.items() if g in tensors},
                      TokenizerSource(gguf=tok), meta.get("tokenizer.chat_template"), special)
