"""The short causal depthwise convolution over time (LFM2's `shortconv`), its state a ring in DRAM.

For `taps` = L and channel c: conv[p, c] = sum_k w[k, c] * u[p - (L-1) + k, c], with u = 0 before
position 0. A run over positions p0..p0+n-1 reads the inputs of the L-1 positions before p0
from the sequence's ring, keeps its own in TMEM and writes the last min(n, L) of them back.

The ring: `ring_rows(L)` = 4L-4 rows of d fp32, row r (counted from the middle row, r in
[-(2L-2), 2L-2)) always holding the newest position p with p = r (mod L). A run finds its rows
from one register, m0 = p0 mod L times the row size: the history of offset o (-(L-1) <= o < 0)
is row m0 + o, and position p0+j is written to each row m0 + j + kL a later run might read
(1-2 copies). So one RLD per row group addresses every row, whatever the run's length, and
running the newest position again rewrites the same rows and reads the same history (a run of
n rows leaves the bits of n runs of one row). m0 comes from the run's fp32 position word, as
the ISA has no integer modulo: floor(p0 / L) by the 1.5 * 2^23 rounding trick on p0 * (1/L)
moved 1/(2L) - 1/2 off the ties (exact for p0 < 2^20), then p0 - L * floor. History rows
before position 0 are multiplied by a 0/1 gate, so a slot's stale ring never leaks into a new
sequence.

`taps` is a parameter (LFM2: 3). `activation="silu"` applies SiLU to the result (Qwen3.5's
convolution, 4 taps). `reference` is the float64 formula over a whole sequence and `fp32_steps`
the card's order of fp32 operations, for the bit-exact test.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ol
from ..ol import CompileError, Tensor, Tile

MAGIC = 12582912.0           # 1.5 * 2^23: x + MAGIC - MAGIC rounds x to an integer for |x| < 2^22


def ring_rows(taps: int) -> int:
    """Rows of d fp32 a sequence's ring holds."""
    return 4 * taps - 4


def live_rows(taps: int) -> slice:
    """The ring rows runs read (each the newest position of its class mod taps; the others are
    spare copies whose contents depend on how the positions were split into runs)."""
    return slice(taps - 1, 3 * taps - 3)


class RingRows:
    """Where a run starting at p0 (`pos`: a (1,) tile holding p0 as fp32) finds its ring rows:
    one register (m0 times the row size) and the 0/1 gates of the history rows."""

    def __init__(self, pos: Tile, taps: int, row_bytes: int):
        if taps < 2:
            raise CompileError(f"a short convolution needs at least 2 taps, not {taps}")
        self.taps, self.row_bytes = taps, row_bytes
        f = pos * (1.0 / taps) + (0.5 / taps - 0.5)
        f = (f + MAGIC) - MAGIC                      # floor(p0 / taps)
        self.m0f = pos - f * float(taps)             # p0 mod taps, fp32
        self._m0 = None                              # its register, taken at first use (registers are few)
        self.valid = {o: ol.minimum(ol.maximum(pos + float(o + 1), 0.0), 1.0) for o in range(-(taps - 1), 0)}

    @property
    def m0(self):
        if self._m0 is None:
            self._m0 = ol.rld(self.m0f, scale=self.row_bytes)
        return self._m0

    def moved(self, block: Tile, rows_per_block: int) -> "RingRows":
        """The same rows in the ring `block` (a (1,) fp32 tile) blocks further on, a block being
        `rows_per_block` ring rows long: one register for both (an address takes one device value)."""
        out = object.__new__(RingRows)
        out.taps, out.row_bytes, out.m0f, out.valid = self.taps, self.row_bytes, self.m0f, self.valid
        out._m0 = ol.rld(self.m0f + block * float(rows_per_block), scale=self.row_bytes)
        return out

    def row(self, ring: Tensor, r: int) -> Tensor:
        """Row m0 + r of the ring (r counted from its middle row)."""
        mid = ring.base + (2 * self.taps - 2) * self.row_bytes
        return Tensor(mid + self.m0 + r * self.row_bytes, (ring.cols,))

    def copies(self, j: int) -> range:
        """The k of the rows m0 + j + k*taps that position p0+j is written to: every row in
        [-(taps-1), taps-2] (where runs read) of its class, for any m0 in [0, taps)."""
        t = self.taps
        return range(math.ceil((2 - 2 * t - j) / t), math.floor((t - 2 - j) / t) + 1)


def short_conv(u: list[Tile], w: Tensor, ring: Tensor, rows: RingRows, activation: str | None = None) -> list[Tile]:
    """u: the inputs (d,) of positions p0..p0+n-1; w: DRAM (taps, d) fp32, tap k multiplying position
    p - (taps-1) + k; ring: DRAM (ring_rows(taps), d) fp32, this sequence's state. Returns the n
    outputs and leaves the run's last inputs in the ring."""
    taps, n = rows.taps, len(u)
    d = u[0].cols
    if w.shape != (taps, d) or ring.shape != (ring_rows(taps), d) or rows.row_bytes != 4 * ring.rs:
        raise CompileError(f"short_conv: taps {w.shape} must be ({taps}, {d}) and the ring {ring.shape} "
                           f"({ring_rows(taps)}, {d}) with rows of {rows.row_bytes} bytes")
    hist = {o: ol.load(rows.row(ring, o)) * rows.valid[o] for o in range(-(taps - 1), 0)}
    taps_w = [ol.load(w[k]) for k in range(taps)]
    out = []
    for j in range(n):
        acc = None
        for k in range(taps):
            o = j - (taps - 1) + k
            term = (hist[o] if o < 0 else u[o]) * taps_w[k]
            acc = term if acc is None else acc + term
        out.append(ol.silu(acc) if activation == "silu" else acc)
    for j in range(max(0, n - taps), n):
        for k in rows.copies(j):
            ol.store(rows.row(ring, j + k * taps), u[j])
    return out


def reference(u: np.ndarray, w: np.ndarray, activation: str | None = None) -> np.ndarray:
    """float64: u [T, d] the inputs of positions 0..T-1, w [taps, d]; the causal convolution [T, d]."""
    u, w = np.asarray(u, np.float64), np.asarray(w, np.float64)
    taps = w.shape[0]
    pad = np.vstack([np.zeros((taps - 1, u.shape[1])), u])
    out = sum(pad[k:k + u.shape[0]] * w[k] for k in range(taps))
    return out / (1.0 + np.exp(-out)) if activation == "silu" else out


def fp32_steps(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The card's fp32 operations in its order: products tap by tap, summed oldest first."""
    u, w = np.asarray(u, np.float32), np.asarray(w, np.float32)
    taps = w.shape[0]
    pad = np.vstack([np.zeros((taps - 1, u.shape[1]), np.float32), u])
    acc = pad[0:u.shape[0]] * w[0]
    for k in range(1, taps):
        acc = acc + pad[k:k + u.shape[0]] * w[k]
    return acc
