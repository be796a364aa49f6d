"""Hugging Face model directories: config.json, safetensors weights read one tensor at a time.

Weights come through `safetensors.safe_open` (memory-mapped; `get_tensor` copies out only the
tensor asked for), from `model.safetensors` or the shards named by
`model.safetensors.index.json`. numpy has no bfloat16, so BF16 tensors are read from the same
memory map at the offsets the file's header gives and widened to float32 (a bf16 is the top
half of an fp32). The tokenizer is `tokenizer.json`; the chat template and its special tokens
come from `tokenizer_config.json` (or `chat_template.jinja`), the stop ids from
`generation_config.json`. A family whose RMSNorm weights are zero-centred (Qwen3.5's `1 + w`,
families.hf_norm_offset) gets them back as the multiplier every reference and the card use.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from . import config as config_mod
from . import families
from .checkpoint import Checkpoint, TokenizerSource, check_shapes, file_names
from .errors import ModelError

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


def _json(path: Path, required: bool = True) -> dict | None:
    if not path.exists():
        if required:
            raise ModelError(f"{path.parent}: no {path.name}", hint="a Hugging Face model directory has config.json")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: not valid JSON: {e}") from None


def _shard_files(d: Path) -> dict[str, Path]:
    """tensor name -> the safetensors file that holds it."""
    index = _json(d / "model.safetensors.index.json", required=False)
    if index is not None:
        wmap = index.get("weight_map")
        if not isinstance(wmap, dict):
            raise ModelError(f"{d / 'model.safetensors.index.json'}: missing key 'weight_map'")
        return {k: d / v for k, v in wmap.items()}
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{d}: no *.safetensors weights in the directory")
    out = {}
    for f in files:
        for name in _header(f):
            out[name] = f
    return out


def _header(f: Path) -> dict:
    """The safetensors header of f (name -> dtype, shape, data_offsets), checked against the file size."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(f), framework="numpy") as h:
            h.keys()
    except SafetensorError as e:
        raise ModelError(f"{f}: not a readable safetensors file: {e}", hint="download the file again") from None
    with open(f, "rb") as src:
        n = struct.unpack("<Q", src.read(8))[0]
        head = json.loads(src.read(n))
    head.pop("__metadata__", None)
    for name, info in head.items():
        info["start"] = 8 + n + info["data_offsets"][0]
    return head


class _Files:
    """Open safetensors files and their headers, kept for the checkpoint's lifetime."""

    def __init__(self, shards: dict[str, Path]):
        self.shards = shards
        self.headers = {f: _header(f) for f in dict.fromkeys(shards.values())}

    def info(self, name: str) -> dict | None:
        f = self.shards.get(name)
        return None if f is None else self.headers[f].get(name)

    def read(self, name: str) -> np.ndarray:
        f = self.shards[name]
        info = self.headers[f][name]
        dtype = info["dtype"]
        if dtype == "BF16":
            n = int(np.prod(info["shape"])) if info["shape"] else 1
            raw = np.memmap(f, dtype=np.uint16, mode="r", offset=info["start"], shape=(n,))
            wide = raw.astype(np.uint32)
            del raw
            wide <<= np.uint32(16)                   # in place: one float32-sized copy at a time
            return wide.view(np.float32).reshape(info["shape"])
        from safetensors import safe_open
        with safe_open(str(f), framework="numpy") as h:
            return h.get_tensor(name).astype(np.float32, copy=False)

    def read_rows(self, name: str, start: int, count: int) -> np.ndarray:
        """Rows of a 2-D tensor as float32, from a memory map of just those rows' bytes."""
        f = self.shards[name]
        info = self.headers[f][name]
        rows, cols = info["shape"][0], int(np.prod(info["shape"][1:]))
        if not (0 <= start and start + count <= rows):
            raise ValueError(f"rows {start}..{start + count} of {name} (it has {rows})")
        dtype = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[info["dtype"]]
        size = np.dtype(dtype).itemsize
        raw = np.array(np.memmap(f, dtype=dtype, mode="r", offset=info["start"] + start * cols * size,
                                 shape=(count, cols)))
        if info["dtype"] == "BF16":
            return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return raw.astype(np.float32)


def open_hf_dir(d: Path) -> Checkpoint:
    cfg_json = _json(d / "config.json")
    gen = _json(d / "generation_config.json", required=False)
    cfg = config_mod.from_hf(cfg_json, str(d / "config.json"), gen, name=d.name)
    files = _Files(_shard_files(d))
    names = file_names(cfg, gguf=False)
    prefix = cfg.spec.hf_text_prefix
    if prefix:                           # a multimodal file keeps the text model's tensors under its prefix
        nested = {c: prefix + n[len("model."):] for c, n in names.items() if n.startswith("model.")}
        names.update({c: n for c, n in nested.items() if n in files.shards and names[c] not in files.shards})
    scope = prefix if prefix and any(n.startswith(prefix) for n in files.shards) else ""   # not the vision tower
    for name in files.shards:
        if name.endswith(families.REFUSED_SUFFIXES) and name.startswith(scope):
            raise ModelError(f"{files.shards[name]}: tensor '{name}': biases are not part of a {cfg.family} "
                             "decoder this layer runs")
    shapes, types = {}, {}
    for canon, hname in names.items():
        info = files.info(hname)
        if info is None:
            continue
        if info["dtype"] not in DTYPES:
            raise ModelError(f"{files.shards[hname]}: tensor '{hname}' is stored as {info['dtype']}",
                             hint=f"supported: {', '.join(DTYPES)}")
        shape = tuple(info["shape"])
        if canon.split(".")[0] in families.DEPTHWISE_TENSORS and len(shape) == 3 and shape[1] == 1:
            shape = (shape[0], shape[2])         # nn.Conv1d's depthwise [d, 1, taps] is the [d, taps] of GGUF
        shapes[canon], types[canon] = shape, info["dtype"]
    if cfg.tied and "head" in shapes:
        cfg = cfg.with_(tied=False)      # a file with its own lm_head uses it, whatever the flag says
    check_shapes(cfg, shapes, names, str(d))
    tok_cfg = _json(d / "tokenizer_config.json", required=False) or {}
    template = tok_cfg.get("chat_template")
    if isinstance(template, list):       # named templates: the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), template[0]["template"])
    if template is None and (d / "chat_template.jinja").exists():
        template = (d / "chat_template.jinja").read_text(encoding="utf-8")
    special = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = tok_cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            special[key] = v
    tok_json = d / "tokenizer.json"
    weight_files = list(dict.fromkeys(files.shards.values())) + [d / "config.json"]
    offset = set(cfg.spec.hf_norm_offset)

    def read(canon: str) -> np.ndarray:
        w = files.read(names[canon])
        w = w.reshape(shapes[canon]) if canon in shapes else w
        return w + np.float32(1.0) if canon.split(".")[0] in offset else w    # zero-centred norms (Qwen3.5)

    def rows(canon: str, start: int, count: int) -> np.ndarray:
        kind = canon.split(".")[0]
        if kind in offset or kind in families.DEPTHWISE_TENSORS or len(shapes[canon]) != 2:
            return read(canon)[start:start + count]       # tensors `read` reshapes or offsets: whole
        return files.read_rows(names[canon], start, count)

    return Checkpoint(d, "safetensors", cfg, weight_files, read, types,
                      TokenizerSource(json_path=tok_json if tok_json.exists() else None), template, special, rows)
