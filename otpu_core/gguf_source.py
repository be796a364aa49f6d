"""GGUF checkpoints as a source of fp32 rows: the one place the suite reads a GGUF file.

`open_gguf(path)` lists the tensors (name, numpy-order shape, GGML type, where the data is) and
the metadata (`GgufModel.metadata`: key -> decoded value) with gguf's own `GGUFReader`;
`GgufModel.read_rows(tensor, start, count)` returns `count` rows of a tensor as float32,
dequantised with `gguf.quants.dequantize` for the quantised types, and `read(tensor)` the whole
tensor in its numpy shape; `read_bits16` returns an F16 or BF16 tensor's rows as their raw 16-bit
patterns (`DECODE16` maps each pattern to its float32 value, exactly), for a consumer that works
on the bits. The Blackhole FTTW converter and the model layer (`llm/gguf_file.py`) both read
through it. A tensor's
rows are its last axis; leading axes are flattened (a 3-D expert stack of E matrices of N x K is
E * N rows of K). Rows are read with pread into fresh buffers, never through a mapping of the
whole file, so a process that walks a model a strip at a time stays at the size of its strips
(mapped file pages count as the reader's resident memory; the page cache does not).

Every problem with the file (not a GGUF, truncated, a type number gguf does not know) is a
`UsageError` naming the file, and the tensor where there is one; each tensor's extent is checked
against the file's size before gguf maps it, so a truncated download names the first tensor cut.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UsageError

FLOAT_TYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8")}
_PATTERNS = np.arange(1 << 16, dtype=np.uint32)
# every 16-bit pattern's float32 value: a lookup is three times faster than numpy's F16 astype
DECODE16 = {"F16": _PATTERNS.astype(np.uint16).view(np.float16).astype(np.float32),
            "BF16": (_PATTERNS << 16).view(np.float32)}


@dataclass(frozen=True)
class SourceTensor:
    name: str
    shape: tuple[int, ...]        # numpy order: outermost first (GGUF's ne reversed)
    ggml_type: str                # GGML type name: F32, F16, BF16, Q8_0, Q4_K, ...
    type_code: int                # GGML type number
    offset: int                   # where its data starts in the file
    nbytes: int

    @property
    def cols(self) -> int: return self.shape[-1] if self.shape else 1

    @property
    def rows(self) -> int: return math.prod(self.shape[:-1])

    @property
    def row_bytes(self) -> int: return self.nbytes // self.rows


class GgufModel:
    """An open GGUF file: its tensors, and their rows as float32."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.tensors, self.metadata = _read_directory(self.path)
        self._by_name = {t.name: t for t in self.tensors}
        self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

    @property
    def fd(self) -> int:
        """The open file (for a reader that preads tensor bytes itself, as the native converter does)."""
        return self._fd

    def tensor(self, name: str) -> SourceTensor | None:
        return self._by_name.get(name)

    def read_rows(self, t: SourceTensor, start: int, count: int) -> np.ndarray:
        """Rows start .. start + count of `t` as a new (count, cols) float32 array."""
        import gguf

        raw = self._read(t, start, count)
        dtype = FLOAT_TYPES.get(t.ggml_type)
        if dtype is not None:
            return raw.view(dtype).astype(np.float32, copy=dtype != np.float32)
        if t.ggml_type in DECODE16:
            return DECODE16[t.ggml_type].take(raw.view("<u2"))
        try:
            return np.asarray(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.type_code)), np.float32)
        except NotImplementedError:
            raise UsageError(f"{self.path}: tensor '{t.name}' is {t.ggml_type}, which gguf cannot dequantise",
                             hint="re-export the model in F16, BF16, F32 or a Q*_0/Q*_K type") from None

    def read_bits16(self, t: SourceTensor, start: int, count: int) -> np.ndarray | None:
        """Rows of an F16 or BF16 tensor as (count, cols) uint16 bit patterns; None for other types."""
        if t.ggml_type not in DECODE16:
            return None
        return self._read(t, start, count).view("<u2")

    def _read(self, t: SourceTensor, start: int, count: int) -> np.ndarray:
        if start < 0 or count < 0 or start + count > t.rows:
            raise ValueError(f"rows {start}..{start + count} of {t.name} (it has {t.rows})")
        nbytes = count * t.row_bytes
        buf = bytearray(nbytes)
        got = os.preadv(self._fd, [buf], t.offset + start * t.row_bytes)
        if got != nbytes:
            raise UsageError(f"{self.path}: tensor '{t.name}' is cut short (the file is truncated)")
        return np.frombuffer(buf, np.uint8).reshape(count, t.row_bytes)

    def read(self, t: SourceTensor) -> np.ndarray:
        """The whole tensor as float32, in its numpy-order shape."""
        return self.read_rows(t, 0, t.rows).reshape(t.shape)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "GgufModel": return self

    def __exit__(self, *exc) -> None: self.close()


def open_gguf(path: Path | str) -> GgufModel:
    return GgufModel(path)


def _metadata(reader) -> dict:
    out = {}
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            out[key] = fld.contents()
        except Exception:        # a field gguf cannot decode is one no user of this module reads either
            continue
    return out


def _checked_reader(path: Path):
    """gguf's reader, with each tensor's type and extent checked before gguf maps the tensor (gguf
    itself fails on a cut file with a reshape error that names nothing)."""
    import gguf

    class Reader(gguf.GGUFReader):
        def _build_tensors(self, start_offs, fields):
            size = int(self.data.size)
            for f in fields:
                _, name, _, dims, raw_type, offset = f.parts
                name = bytes(name).decode("utf-8", "replace")
                try:
                    qt = gguf.GGMLQuantizationType(int(raw_type[0]))
                except ValueError:
                    raise UsageError(f"{path}: tensor '{name}' has GGML type {int(raw_type[0])}, which gguf does "
                                     "not know") from None
                block, nbytes = gguf.GGML_QUANT_SIZES[qt]
                end = int(start_offs) + int(offset[0]) + int(np.prod(dims)) * nbytes // block
                if end > size:
                    raise UsageError(f"{path}: truncated: tensor '{name}' needs bytes up to {end} but the file has "
                                     f"{size}", hint="download the file again")
            super()._build_tensors(start_offs, fields)

    return Reader(path, "r")


def _read_directory(path: Path) -> tuple[list[SourceTensor], dict]:
    import gguf

    if not path.is_file():
        raise UsageError(f"{path}: no such GGUF file" if not path.exists() else f"{path}: not a file")
    try:
        reader = _checked_reader(path)
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, MemoryError, UnicodeDecodeError) as e:
        with open(path, "rb") as f:
            head = f.read(4)
        if head != b"GGUF":
            raise UsageError(f"{path}: not a GGUF file (it starts with {head!r}, a GGUF with b'GGUF')") from None
        raise UsageError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e}); its header may be cut "
                         f"short or damaged ({path.stat().st_size} bytes)", hint="download the file again") from None
    out = []
    for t in reader.tensors:
        kind = gguf.GGMLQuantizationType(int(t.tensor_type))
        if kind.name in ("I8", "I16", "I32", "I64"):
            raise UsageError(f"{path}: tensor '{t.name}' holds integers ({kind.name}); weights must be floating point")
        shape = tuple(int(d) for d in reversed(t.shape.tolist())) or (1,)
        out.append(SourceTensor(t.name, shape, kind.name, int(kind), int(t.data_offset), int(t.n_bytes)))
    meta = _metadata(reader)
    del reader
    return out, meta
