"""A model file opened for reading: its config, its tensors (one at a time), tokenizer and chat template.

`open_checkpoint(path)` accepts a GGUF file or a Hugging Face directory (config.json plus
safetensors, one file or an index of shards) and returns a `Checkpoint`: `config`, the tensors
by canonical name (`get("wq.3")` reads, dequantises and returns one float32 array in Hugging
Face orientation, never the whole model; `read_rows(name, start, count)` a few rows of one
without the rest, and `RowTable` a table served that way), the tokenizer source, the chat
template and its special tokens, and `fingerprint()`, a SHA-256 of the weight files' contents (memoised per path,
size and modification time, so a 1 GB file is hashed once). Opening checks every tensor's
presence, type and shape against the config, so a file that disagrees with its config fails
before any work, naming the tensor, its shape and the shape the config needs.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .config import ModelConfig
from .errors import ModelError
from .families import GLOBAL_TENSORS, KIND_TENSORS

HASH_CHUNK = 16 << 20


@dataclass
class TokenizerSource:
    """Where the tokenizer comes from: a tokenizer.json file, or a GGUF vocabulary."""
    json_path: Path | None = None
    gguf: dict[str, Any] | None = None        # tokens, merges, token_type, model, pre


@dataclass
class Checkpoint:
    path: Path
    kind: str                                  # "gguf" or "safetensors"
    config: ModelConfig
    weight_files: list[Path]
    reader: Callable[[str], np.ndarray]        # canonical name -> float32 array
    raw_types: dict[str, str]                  # canonical name -> stored type name (F16, Q4_K, ...)
    tokenizer: TokenizerSource
    chat_template: str | None = None
    special: dict[str, str] = field(default_factory=dict)   # bos_token, eos_token, ... as the template sees them
    rows: Callable[[str, int, int], np.ndarray] | None = None   # (name, start, count) -> float32 rows, read alone

    def get(self, name: str) -> np.ndarray:
        """One tensor by canonical name (`embed`, `head`, `wq.0`, ...), float32, HF orientation."""
        if name == "head" and self.config.tied:
            name = "embed"
        return self.reader(name)

    def read_rows(self, name: str, start: int, count: int) -> np.ndarray:
        """Rows start .. start + count of a 2-D tensor as float32, the same values `get(name)` holds there, read
        from the file without the rest of the tensor."""
        if self.rows is None:
            return self.get(name)[start:start + count]
        return self.rows(name, start, count)

    def fingerprint(self) -> str:
        return content_hash(self.weight_files)

    @property
    def display(self) -> str: return str(self.path)


class RowTable:
    """A table kept in the checkpoint's file in its own type (BF16, F16, a quantised GGUF type), a row converted
    to float32 only when it is asked for: `table[i]`, `len(table)`. Gemma 4's per-layer embeddings (E2B's are
    9.4 GB as float32) are served to the card this way."""

    def __init__(self, ckpt: Checkpoint, name: str):
        self.ckpt, self.name = ckpt, name
        self.shape = tuple(ckpt.config.tensor_shapes()[name])
        self.stored = ckpt.raw_types.get(name, "F32")

    def __len__(self) -> int: return self.shape[0]

    def __getitem__(self, i) -> np.ndarray:
        i = int(i)
        if not 0 <= i < self.shape[0]:
            raise IndexError(f"row {i} of {self.name} (it has {self.shape[0]})")
        row = self.ckpt.read_rows(self.name, i, 1)[0]
        if not np.isfinite(row).all():
            j = int(np.argwhere(~np.isfinite(row))[0][0])
            raise ModelError(f"{self.ckpt.path}: tensor '{self.name}' holds {row[j]} at [{i}, {j}]; "
                             "only finite weights can be served")
        return row


def file_names(config: ModelConfig, gguf: bool) -> dict[str, str]:
    """Canonical name (layer tensors as `wq.3`, experts as `eg.3.5`) -> the tensor's name in a GGUF or
    Hugging Face file (GGUF: every expert of a layer names the layer's stacked tensor)."""
    fam = config.spec
    name = fam.gguf_name if gguf else fam.hf_name
    out = {canon: name(canon) for canon in GLOBAL_TENSORS}
    for i in range(config.layers):
        names = {canon: (kind, e) for canon, kind, e in config.layer_names(i)}
        for kind in KIND_TENSORS[config.kinds[i]]:       # the kind's others too (a shared layer's k, v)
            names.setdefault(f"{kind}.{i}", (kind, None))
        for canon, (kind, e) in names.items():
            out[canon] = name(kind).format(i=i, e=e)
    prefix = config.extra.get("hf_prefix")
    if prefix and not gguf:           # a multimodal wrapper's text decoder: model.X is model.language_model.X
        out = {k: prefix + v[len("model."):] if v.startswith("model.") else v for k, v in out.items()}
    return out


def check_shapes(config: ModelConfig, shapes: dict[str, tuple[int, ...]], names: dict[str, str], where: str) -> None:
    """Every tensor the config needs is present with its shape (`names`: canonical -> file name)."""
    for canon, want in config.tensor_shapes().items():
        got = shapes.get(canon)
        fname = names.get(canon, canon)
        if got is None:
            raise ModelError(f"{where}: missing tensor '{fname}'",
                             hint=f"a {config.family} model with {config.layers} layers needs it")
        if tuple(got) != tuple(want):
            raise ModelError(f"{where}: tensor '{fname}' has shape {list(got)} but the config needs {list(want)} "
                             f"(hidden {config.d}, heads {config.heads}x{config.head_dim}, KV heads {config.kv_heads}, "
                             f"ffn {config.ffn}, vocab {config.vocab})")


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: no such file or directory")
    if p.is_dir():
        from .safetensors_file import open_hf_dir
        return open_hf_dir(p)
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        from .gguf_file import open_gguf
        return open_gguf(p)
    if p.suffix == ".safetensors":
        raise ModelError(f"{p}: a safetensors file needs its config.json: give the directory that holds both")
    raise ModelError(f"{p}: not a GGUF file (magic {magic!r}, want b'GGUF') and not a model directory",
                     hint="give a .gguf file or a Hugging Face directory with config.json and *.safetensors")


# -- content hashes ------------------------------------------------------------------------------------

def models_cache() -> Path:
    """`$OTPU_CACHE/models` (conversions, content hashes), beside the program cache."""
    from ..ol.cache import cache_dir
    return cache_dir().parent / "models"


def _hash_index() -> Path:
    return models_cache() / "hashes.json"


def content_hash(files: list[Path]) -> str:
    """SHA-256 over the files' bytes in order, memoised by (path, size, mtime)."""
    index = _hash_index()
    try:
        known = json.loads(index.read_text())
    except (OSError, ValueError):
        known = {}
    h = hashlib.sha256()
    dirty = False
    for f in files:
        st = f.stat()
        key = f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        digest = known.get(key)
        if digest is None:
            fh = hashlib.sha256()
            with open(f, "rb") as src:
                while chunk := src.read(HASH_CHUNK):
                    fh.update(chunk)
            digest = known[key] = fh.hexdigest()
            dirty = True
        h.update(digest.encode())
    if dirty:
        try:
            index.parent.mkdir(parents=True, exist_ok=True)
            tmp = index.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known))
            os.replace(tmp, index)
        except OSError:
            pass       # a read-only cache only costs a re-hash next time
    return h.hexdigest()
