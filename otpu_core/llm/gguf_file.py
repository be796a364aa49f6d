"""GGUF model files: llama.cpp tensor names and metadata as a `Checkpoint`.

The file is read through `otpu_core.gguf_source` (the one GGUF reader: gguf's `GGUFReader`,
the file's structure checked before any tensor is read, tensors dequantised on read with gguf's
own quants code). This layer accepts F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K and refuses any
other stored type by tensor name at open. Families whose llama.cpp
converter permuted the q/k rows for interleaved-pair RoPE (Llama, SmolLM3) are un-permuted back
to the rotate-half layout of the Hugging Face weights, so every later stage sees one layout.
Llama 3 rope scaling arrives as the `rope_freqs` tensor (per-frequency divisors).
Qwen3.5 (`qwen35`): `ssm_a` holds -exp(A_log) (read back as A_log), `ssm_dt.bias` is the
DeltaNet's dt_bias (a bias this layer does compute), and with more value heads than key heads
the value-head tensors are in llama.cpp's tiled order (`v_heads` puts them back in the grouped
order of the Hugging Face weights). A mixture of experts stores a layer's experts stacked ([experts, out, in]); the stack's shape is checked at
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


# per DeltaNet tensor kind: (axis of the value heads, width of one head's slice: "v" = lin_v_dim, else 1,
# whether the q and k channels come first and stay)
V_HEAD_TENSORS = {"gqkv": (0, "v", True), "gconv": (0, "v", True), "gz": (0, "v", False), "gb": (0, 1, False),
                  "ga": (0, 1, False), "galog": (0, 1, False), "gdt": (0, 1, False), "gout": (1, "v", False)}


def v_heads(kind: str, w: np.ndarray, cfg, tiled: bool) -> np.ndarray:
    """A DeltaNet tensor's value heads from grouped (value head h = key head h // r, then h % r) to
    llama.cpp's tiled order (h % Hk, then h // Hk) with `tiled`, or back without."""
    hk, hv = cfg.lin_k_heads, cfg.lin_v_heads
    if kind not in V_HEAD_TENSORS or hk == hv:
        return w
    axis, width, skip_qk = V_HEAD_TENSORS[kind]
    width = cfg.lin_v_dim if width == "v" else 1
    w = np.moveaxis(np.asarray(w), axis, 0)
    lead = 2 * hk * cfg.lin_k_dim if skip_qk else 0
    v = w[lead:]
    order = (hk, hv // hk) if tiled else (hv // hk, hk)
    v = v.reshape(order + (width,) + v.shape[1:]).swapaxes(0, 1).reshape(v.shape)
    return np.moveaxis(np.concatenate([w[:lead], v]), 0, axis)


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
    rope = tensors.get("rope_freqs.weight")
    factors = tuple(float(x) for x in src.read(rope).ravel()) if rope is not None else None
    tokens = meta.get("tokenizer.ggml.tokens")
    cfg = config_mod.from_gguf(meta, str(path), tied="output.weight" not in tensors, rope_factors=factors,
                               vocab=len(tokens) if tokens is not None else None,
                               name=str(meta.get("general.name") or path.stem))
    names = file_names(cfg, gguf=True)
    for gname in tensors:
        if gname.endswith(families.REFUSED_SUFFIXES) and gname not in names.values():
            raise ModelError(f"{path}: tensor '{gname}': biases are not part of a {fam.name} decoder this layer runs")
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
        if kind == "galog":
            w = np.log(-w.astype(np.float64))          # llama.cpp stores A = -exp(A_log)
        if fam.gguf_tiled_v:
            w = v_heads(kind, w, cfg, tiled=False)
        return np.ascontiguousarray(w, np.float32)

    def rows(canon: str, start: int, count: int) -> np.ndarray:
        kind = canon.split(".")[0]
        if kind in ("wq", "wk", "galog") or kind in V_HEAD_TENSORS or kind in families.EXPERT_TENSORS:
            return read(canon)[start:start + count]       # tensors `read` reorders or recomputes: whole
        return np.ascontiguousarray(src.read_rows(tensors[names[canon]], start, count), np.float32)

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
                      TokenizerSource(gguf=tok), meta.get("tokenizer.chat_template"), special, rows)
