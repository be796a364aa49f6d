"""The short causal depthwise convolution over time (LFM2's `shortconv`), its state a ring in DRAM.

For `taps` = L and channel c: conv[p, c] = sum_k w[k, c] * u[p - (L-1) + k, c], with u = 0 before
position 0. The state is a ring of L rows of d fp32 per sequence: position p's input lives in row
p mod L. A run over positions p0..p0+n-1 reads the L-1 rows before p0, keeps its own rows in
TMEM and writes the last min(n, L) of them back, so running a position again (the engine feeds
the last prompt token once more when it generates) rewrites the same row and reads the same
history: a run of n rows leaves the bits of n runs of one row.

The ring row of a position is found on the card from the run's fp32 position word, since the
ISA has no integer modulo: floor(p / L) by the 1.5 * 2^23 rounding trick on p * (1/L) shifted
by 1/(2L) - 1/2 off the ties (exact for p < 2^20), then p - L * floor, wrapped per offset with
min/max, then RLD as a byte offset (`RingRows`, built once per run, before any layer loop).
Rows before position 0 are multiplied by a 0/1 gate, so a slot's stale ring never leaks into a
new sequence.

`taps` is a parameter (LFM2: 3). `activation="silu"` applies SiLU to the result (Qwen3.5's
convolution, 4 taps). `reference` is the float64 formula over a whole sequence and `fp32_steps`
the card's order of fp32 operations, for the bit-exact test.
"""
from __future__ import annotations

import numpy as np

from .. import ol
from ..ol import CompileError, Tensor, Tile

MAGIC = 12582912.0           # 1.5 * 2^23: x + MAGIC - MAGIC rounds x to an integer for |x| < 2^22


class RingRows:
    """Byte offsets of the ring rows of positions p0 + o (o in `offsets`), and the 0/1 gates of
    the rows before p0 (1 when p0 + o >= 0), from `pos` (a (1,) tile holding p0 as fp32)."""

    def __init__(self, pos: Tile, taps: int, row_bytes: int, offsets: range):
        if taps < 2:
            raise CompileError(f"a short convolution needs at least 2 taps, not {taps}")
        self.taps = taps
        f = pos * (1.0 / taps) + (0.5 / taps - 0.5)
        f = (f + MAGIC) - MAGIC                      # floor(p0 / taps)
        m0 = pos - f * float(taps)                   # p0 mod taps
        self._offset: dict[int, object] = {}
        self._valid: dict[int, Tile] = {}
        for o in offsets:
            t = m0 + float(o % taps)
            wrap = ol.minimum(ol.maximum(t - float(taps - 1), 0.0), 1.0)
            self._offset[o] = ol.rld(t - wrap * float(taps), scale=row_bytes)
            if o < 0:
                self._valid[o] = ol.minimum(ol.maximum(pos + float(o + 1), 0.0), 1.0)

    def offset(self, o: int):
        return self._offset[o]

    def valid(self, o: int) -> Tile:
        return self._valid[o]

    @staticmethod
    def span(taps: int, n: int) -> range:
        """The offsets a run of n rows touches: taps-1 rows of history, then its own."""
        return range(-(taps - 1), n)


def short_conv(u: list[Tile], w: Tensor, ring: Tensor, rows: RingRows, activation: str | None = None) -> list[Tile]:
    """u: the inputs (d,) of positions p0..p0+n-1; w: DRAM (taps, d) fp32, tap k multiplying position
    p - (taps-1) + k; ring: DRAM (taps, d) fp32, this sequence's state. Returns the n outputs and
    leaves the run's last rows in the ring."""
    taps, n = rows.taps, len(u)
    d = u[0].cols
    if w.shape != (taps, d) or ring.shape != (taps, d):
        raise CompileError(f"short_conv: taps {w.shape} and ring {ring.shape} must both be ({taps}, {d})")
    hist = {o: ol.load(Tensor(ring.base + rows.offset(o), (d,))) * rows.valid(o) for o in range(-(taps - 1), 0)}
    taps_w = [ol.load(w[k]) for k in range(taps)]
    out = []
    for j in range(n):
        acc = None
        for k in range(taps):
            o = j - (taps - 1) + k
            term = (hist[o] if o < 0 else u[o]) * taps_w[k]
            acc = term if acc is None else acc + term
        out.append(ol.silu(acc) if activation == "silu" else acc)
    for o in range(max(0, n - taps), n):
        ol.store(Tensor(ring.base + rows.offset(o), (d,)), u[o])
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
