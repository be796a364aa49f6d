"""GGUF to FTTW: stream a checkpoint a block of 32-row strips at a time into the card's tile formats.

For each tensor the ledger picks format, layout and gate (`ledger`); the plan (`fttw.layout_plan`)
gives every tensor its file offset and DRAM place before any data moves. Then each 2-D matrix is
read in blocks of whole strips (at most `BLOCK_ELEMS` values), padded with zeros to whole tiles,
packed and written where its tiles go, with the tensor's CRC-32 kept as it goes; 1-D tensors are
copied as fp32. F32, F16 and BF16 matrices go through the C kernel (`tilepack`: the whole tensor
file to file, two threads, the source blocks mapped rather than copied); other source types, and
everything when the kernel is off (`OTPU_NATIVE=0`, no compiler), through numpy (`bfp.pack_strips`,
F16 and BF16 straight from their bits by `bfp16`), which defines the bytes both paths give.
Memory is a few strip-block buffers whatever the model's size. The output is written to
`OUT.partial`, its blocks allocated before any work (a full disk fails at once), and renamed over
OUT only when complete, so a failure (a NaN in a tensor, a full disk) leaves no half file and no
lost earlier OUT.
"""
from __future__ import annotations

import errno
import os
import time
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import UsageError
from ..gguf_source import GgufModel, SourceTensor, open_gguf
from . import bfp, bfp16, fttw, tilepack
from .ledger import NMAJOR, Ledger

BLOCK_ELEMS = 1 << 18            # source values per block of strips (a whole strip if larger)

Progress = Callable[[int, int, str], None]      # (source bytes done, total, tensor name)


@dataclass
class Converted:
    path: Path
    entries: list[fttw.Entry]
    source_bytes: int
    file_bytes: int
    seconds: float
    unused_rules: list[tuple[int, str]] = field(default_factory=list)

    def as_dict(self) -> dict:
        by_format: dict[str, dict] = {}
        for e in self.entries:
            row = by_format.setdefault(e.fmt.name, {"tensors": 0, "bytes": 0})
            row["tensors"] += 1
            row["bytes"] += e.nbytes
        return {"path": str(self.path), "tensors": len(self.entries), "source_bytes": self.source_bytes,
                "file_bytes": self.file_bytes, "seconds": round(self.seconds, 3), "by_format": by_format,
                "unused_ledger_rules": [{"rule": i, "match": m} for i, m in self.unused_rules]}


def plan(model: GgufModel, ledger: Ledger, default: bfp.TileFormat) -> list[fttw.Entry]:
    entries = []
    for t in model.tensors:
        if len(t.shape) == 1:
            e = fttw.entry_for(t.name, t.shape, bfp.FLOAT32, fttw.FLAT)
            e.min_pcc, e.max_abs = 1.0, 0.0
        else:
            choice = ledger.choose(t.name, default)
            e = fttw.entry_for(t.name, t.shape, choice.fmt, choice.layout)
            e.min_pcc, e.max_abs = choice.min_pcc, choice.max_abs
        e.source_type = t.type_code
        entries.append(e)
    return entries


def convert(gguf_path: Path | str, out_path: Path | str, ledger: Ledger | None = None,
            default: bfp.TileFormat = bfp.BFP8_B, progress: Progress | None = None, jobs: int | None = None) -> Converted:
    """Convert `gguf_path` to the FTTW file `out_path` (see the module docstring).

    `jobs` threads pack blocks at once (in C, or numpy letting go of the GIL); default: up to 2
    cores. The bytes written do not depend on it, nor on which path packs them."""
    jobs = jobs or min(2, os.cpu_count() or 1)
    native = tilepack.library()
    t0 = time.perf_counter()
    out_path = Path(out_path)
    ledger = ledger or Ledger()
    with open_gguf(gguf_path) as model:
        entries = plan(model, ledger, default)
        header = fttw.layout_plan(entries)
        total = sum(t.nbytes for t in model.tensors)
        tmp = out_path.with_name(out_path.name + ".partial")
        try:
            with open(tmp, "wb") as out, ThreadPoolExecutor(jobs, thread_name_prefix="fttw") as pool:
                _reserve(out, header.file_bytes, out_path)
                done = 0
                for t, e in zip(model.tensors, entries):
                    out.seek(e.offset)
                    if native is not None and e.layout != fttw.FLAT and t.ggml_type in tilepack.KINDS:
                        out.flush()
                        e.crc32 = _native_tensor(native, model, t, e, out.fileno(), out_path, jobs)
                    else:
                        e.crc32 = _write_tensor(model, t, e, out, pool, jobs)
                    done += t.nbytes
                    if progress:
                        progress(done, total, t.name)
                directory = fttw.directory_bytes(entries)
                header.directory_crc = zlib.crc32(directory)
                out.seek(0)
                out.write(header.pack() + directory)
            os.replace(tmp, out_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return Converted(out_path, entries, total, header.file_bytes, time.perf_counter() - t0, ledger.unused())


def _reserve(out, nbytes: int, out_path: Path) -> None:
    """The output's blocks allocated before any work, so a full disk fails now, not near the end
    (and the writes skip delayed allocation); a file system without fallocate gets a sparse file."""
    try:
        os.posix_fallocate(out.fileno(), 0, nbytes)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise OSError(e.errno, f"{e.strerror}: the FTTW file needs {nbytes} bytes", str(out_path)) from None
        out.truncate(nbytes)


def _native_tensor(lib, model: GgufModel, t: SourceTensor, e: fttw.Entry, fd_out: int, out_path: Path, jobs: int) -> int:
    """One F32/F16/BF16 matrix (or stack) converted by the C kernel, file to file; its CRC-32."""
    per_block = _strips_per_block(e)
    try:
        return tilepack.convert_tensor(lib, model.fd, t.offset, t.ggml_type, e.rows, e.cols, e.matrices, e.fmt,
                                       e.layout == NMAJOR, fd_out, e.offset, per_block, jobs)
    except tilepack.NonFinite as bad:           # the numpy check names the value, row and column
        values = model.read_rows(t, bad.row, min(per_block * bfp.TILE, e.rows - bad.row % e.rows))
        _check_finite(model, t, values, bad.row)
        raise UsageError(f"{model.path}: tensor '{t.name}' has a non-finite value in rows {bad.row}..") from None
    except tilepack.KernelError as err:
        if err.stage == "read" and err.errno == 0:
            raise UsageError(f"{model.path}: tensor '{t.name}' is cut short (the file is truncated)") from None
        raise OSError(err.errno, err.strerror, str(out_path if err.stage == "write" else model.path)) from None


def _strips_per_block(e: fttw.Entry) -> int:
    return max(1, BLOCK_ELEMS // (bfp.TILE * e.tiles_per_strip * bfp.TILE))


def _write_tensor(model: GgufModel, t: SourceTensor, e: fttw.Entry, out, pool: ThreadPoolExecutor, jobs: int) -> int:
    """Write one tensor's bytes at the file's current position; returns their CRC-32."""
    if e.layout == fttw.FLAT:
        values = model.read_rows(t, 0, 1)
        _check_finite(model, t, values, 0)
        data = values.astype("<f4").tobytes().ljust(e.nbytes, b"\0")
        out.write(data)
        return zlib.crc32(data)
    cols_padded = e.tiles_per_strip * bfp.TILE
    per_block = _strips_per_block(e)

    def block(m: int, s0: int) -> np.ndarray:
        n_strips = min(per_block, e.strips - s0)
        row0 = m * e.rows + s0 * bfp.TILE
        n_rows = min(n_strips * bfp.TILE, e.rows - s0 * bfp.TILE)
        shape = (n_strips * bfp.TILE, cols_padded)
        bits = model.read_bits16(t, row0, n_rows)
        if bits is not None:            # F16, BF16: packed from the bits (the same bytes, faster)
            source = bfp16.SOURCES[t.ggml_type]
            try:
                return source.pack_strips(_padded(bits, shape), e.fmt, e.layout == NMAJOR)
            except bfp16.NonFinite:
                _check_finite(model, t, source.decode.take(bits), row0)
        values = model.read_rows(t, row0, n_rows)
        _check_finite(model, t, values, row0)
        return bfp.pack_strips(_padded(values, shape), e.fmt, e.layout == NMAJOR)

    crc = 0
    pending: deque = deque()
    for m in range(e.matrices):
        for s0 in range(0, e.strips, per_block):
            pending.append(pool.submit(block, m, s0))
            if len(pending) > jobs:                       # bounded: a few blocks in flight
                crc = _emit(pending.popleft().result(), out, crc)
    while pending:
        crc = _emit(pending.popleft().result(), out, crc)
    return crc


def _padded(a: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """`a` padded with zeros (+0.0 in every format) to whole tiles."""
    if a.shape == shape:
        return a
    padded = np.zeros(shape, a.dtype)
    padded[:a.shape[0], :a.shape[1]] = a
    return padded


def _emit(data: np.ndarray, out, crc: int) -> int:
    out.write(data)
    return zlib.crc32(data, crc)


def _check_finite(model: GgufModel, t: SourceTensor, values: np.ndarray, row0: int) -> None:
    finite = np.isfinite(values)
    if finite.all():
        return
    bad = np.argwhere(~finite)
    r, c = (int(v) for v in bad[0])
    where = f"row {row0 + r}, column {c}" if len(t.shape) > 1 else f"element {c}"
    raise UsageError(f"{model.path}: tensor '{t.name}' has {len(bad)} non-finite values (the first, {values[r, c]}, "
                     f"at {where}); the card's formats have no encoding for them", hint="the checkpoint is damaged; export it again")
