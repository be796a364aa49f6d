"""The per-tensor precision gate: an FTTW file against the GGUF checkpoint it came from.

Every tensor is unpacked a block of strips at a time (`bfp.unpack_strips`), cropped of its tile
padding and compared with the same rows of the fp32 source: PCC (Pearson correlation over every
element, from float64 moments merged block by block, so no block's rounding swamps the sums)
and max-abs error. A tensor passes when its PCC reaches the gate's least PCC (within 1e-9, the
moments' own rounding) and its max-abs error is within the gate's limit; it also fails when its
bytes do not match the directory's CRC-32, when the checkpoint lacks it, or when the shapes
differ. A tensor whose values are constant has no correlation: its PCC counts as 1 only when it
is reproduced exactly.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..gguf_source import open_gguf
from . import bfp, fttw
from .convert import BLOCK_ELEMS
from .ledger import NMAJOR

PCC_SLACK = 1e-9


@dataclass
class Moments:
    """Running count, means and centred second moments of a pair of series (Chan et al. merge)."""
    n: int = 0
    mx: float = 0.0
    my: float = 0.0
    sxx: float = 0.0
    syy: float = 0.0
    sxy: float = 0.0

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        x = x.astype(np.float64).ravel()
        y = y.astype(np.float64).ravel()
        n = x.size
        if n == 0:
            return
        mx, my = x.mean(), y.mean()
        dx, dy = x - mx, y - my
        sxx, syy, sxy = float(dx @ dx), float(dy @ dy), float(dx @ dy)
        total = self.n + n
        ddx, ddy = mx - self.mx, my - self.my
        w = self.n * n / total
        self.sxx += sxx + ddx * ddx * w
        self.syy += syy + ddy * ddy * w
        self.sxy += sxy + ddx * ddy * w
        self.mx += ddx * n / total
        self.my += ddy * n / total
        self.n = total

    def pcc(self, exact: bool) -> float:
        if self.sxx <= 0 or self.syy <= 0:
            return 1.0 if exact else 0.0
        return self.sxy / math.sqrt(self.sxx * self.syy)


@dataclass
class TensorCheck:
    name: str
    format: str
    layout: str
    pcc: float | None
    max_abs: float | None
    min_pcc: float
    max_abs_limit: float | None
    passed: bool
    problem: str = ""

    def as_dict(self) -> dict:
        return dict(vars(self))


def check(fttw_path: Path | str, gguf_path: Path | str,
          progress: Callable[[int, int, str], None] | None = None) -> list[TensorCheck]:
    results = []
    with fttw.FttwFile(fttw_path) as f, open_gguf(gguf_path) as model:
        total = sum(e.nbytes for e in f.entries)
        done = 0
        for e in f.entries:
            results.append(_check_one(f, model, e))
            done += e.nbytes
            if progress:
                progress(done, total, e.name)
    return results


def _check_one(f: fttw.FttwFile, model, e: fttw.Entry) -> TensorCheck:
    limit = None if math.isinf(e.max_abs) else e.max_abs

    def result(pcc, err, problem=""):
        passed = not problem and pcc >= e.min_pcc - PCC_SLACK and (limit is None or err <= limit)
        if not problem and not passed:
            problem = (f"PCC {pcc:.6f} under {e.min_pcc:g}" if pcc < e.min_pcc - PCC_SLACK
                       else f"max-abs {err:.3g} over {limit:g}")
        return TensorCheck(e.name, e.fmt.name, fttw.LAYOUT_TITLES[e.layout], pcc, err, e.min_pcc, limit, passed, problem)

    src = model.tensor(e.name)
    if src is None:
        return result(None, None, f"not in {model.path.name}")
    if tuple(src.shape) != tuple(e.shape):
        return result(None, None, f"shape {list(e.shape)} here, {list(src.shape)} in {model.path.name}")
    moments, err, crc = Moments(), 0.0, 0
    if e.layout == fttw.FLAT:
        data = f.read(e.offset, e.nbytes)
        crc = zlib.crc32(data)
        got = np.frombuffer(data, "<f4")[:e.cols]
        want = model.read_rows(src, 0, 1)[0]
        moments.add(want, got)
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if e.cols else 0.0
    else:
        cols_padded = e.tiles_per_strip * bfp.TILE
        strip_bytes = e.tiles_per_strip * e.fmt.tile_bytes
        per_block = max(1, BLOCK_ELEMS // (bfp.TILE * cols_padded))
        pos = e.offset
        for m in range(e.matrices):
            for s0 in range(0, e.strips, per_block):
                n_strips = min(per_block, e.strips - s0)
                data = f.read(pos, n_strips * strip_bytes)
                pos += len(data)
                crc = zlib.crc32(data, crc)
                r0 = s0 * bfp.TILE
                n_rows = min(n_strips * bfp.TILE, e.rows - r0)
                got = bfp.unpack_strips(np.frombuffer(data, np.uint8), e.fmt, e.layout == NMAJOR, cols_padded)
                got = got[:n_rows, :e.cols]
                want = model.read_rows(src, m * e.rows + r0, n_rows)
                moments.add(want, got)
                if got.size:
                    err = max(err, float(np.max(np.abs(got.astype(np.float64) - want))))
    if crc != e.crc32:
        return result(None, None, f"CRC-32 {crc:08x} does not match the directory's {e.crc32:08x}: the data is corrupt")
    return result(moments.pcc(err == 0.0), err)
