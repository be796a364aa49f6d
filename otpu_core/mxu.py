"""MM numerics: the bit-exact matrix unit as one vectorised computation, plus the decoded-weight
cache that keeps repeated MMs over the same DRAM weights from decoding them again.

Both numerics of docs/formats.md (section 2, "MM numerics"):
- public formats (WF 0..2): per D-block fp32 terms t = mul(mul(i2f(isum), ws), ascale), summed
  over the blocks by the 4-partial tree (fp32.isum_mm); PAIR adds t[j][2c] + t[j+M][2c+1] first;
- seed formats (WF 3, 4): the block dots shifted by the per-block exponents and summed exactly
  over all of K, then one epilogue mul(mul(i2f(acc), Sw), Sa').
Every int8 x int8 block dot is below 2^24, so float32 BLAS matmuls over [kb, rows, D] x
[kb, D, n] return them exactly; the seed's shifted sums stay below 2^53 and are summed in float64.

Public API: ``block_dots(act_q, weights)``, ``mm(act_q, act_scale, weights, pair=False)`` ->
uint32 [M, n] (before ACC/ASCALE), ``epilogue(acc, prev=None, alpha=None)``, ``WeightCache``
(``get(key, wf, d, kb, rows, scales, unit)``; key by DRAM identity, address, shape and write
generation), ``MxuError``.
"""
from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from . import fp32 as F
from .formats import Decoded, WeightFormatError, decode

DEFAULT_CACHE_MB = 4096


class MxuError(WeightFormatError):
    """Operands the MXU cannot combine (seed formats with per-block activation scales)."""


def block_dots(act_q: np.ndarray, weights: Decoded) -> np.ndarray:
    """Exact integer dots per D-block: act_q int8 [R, kb*D] against weights -> float32
    [kb, R, n] holding integers (a zero may be -0: IEEE sums of -0 products)."""
    kb, _, d = weights.w.shape
    rows = act_q.shape[0]
    a = np.ascontiguousarray(act_q.reshape(rows, kb, d).transpose(1, 0, 2), dtype=np.float32)
    return np.matmul(a, weights.w.transpose(0, 2, 1))


def _public(dots: np.ndarray, act_scale: np.ndarray, weights: Decoded, pair: bool) -> np.ndarray:
    terms = F.block_terms(dots.transpose(1, 2, 0), weights.block_scale[None], act_scale[:, None, :])
    if pair:
        m = terms.shape[0] // 2
        even, odd = terms[:m, :, 0::2], terms[m:, :, 1::2]
        if odd.shape[-1] < even.shape[-1]:          # odd KB: the last pair's second term is +0
            odd = np.concatenate([odd, np.zeros(odd.shape[:-1] + (1,), np.uint32)], axis=-1)
        terms = F.add(even, odd)
    return F.isum_mm(terms)


def _exact(dots: np.ndarray, act_scale: np.ndarray, weights: Decoded, pair: bool) -> np.ndarray:
    rows, kb = act_scale.shape
    m = rows // 2 if pair else rows
    # the row of activations each block comes from, per output row
    src = np.arange(m)[:, None] + np.where(pair & (np.arange(kb) % 2 == 1), m, 0)[None, :]
    used = act_scale[src, np.arange(kb)[None, :]]
    if (used != used[:, :1]).any():
        j = int(np.argmax((used != used[:, :1]).any(axis=1)))
        raise MxuError(f"seed weight formats need one activation scale per row (QACT ROW mode); "
                       f"row {j} has {len(np.unique(used[j]))} different block scales")
    pow2 = np.exp2(weights.shift.astype(np.float64))                           # [n, kb]
    acc = np.zeros((m, dots.shape[2]), np.float64)
    for k in range(kb):
        block = dots[k, m:] if (pair and k % 2) else dots[k, :m]
        acc += block.astype(np.float64) * pow2[:, k]
    total = F.i2f(acc.astype(np.int64))
    return F.mul(F.mul(total, weights.row_scale[None, :]), used[:, :1])


def mm(act_q: np.ndarray, act_scale: np.ndarray, weights: Decoded, pair: bool = False) -> np.ndarray:
    """The accumulated result of one MM before its ACC/ASCALE epilogue, uint32 [M, n].

    act_q: int8 [R, kb*D] (ACT RAM rows ab.. of the instruction); act_scale: uint32 [R, kb] (their
    ASCALE words); R = 2M with pair (row j + M supplies the odd blocks of output row j)."""
    if pair and act_q.shape[0] % 2:
        raise MxuError("PAIR needs an even number of activation rows")
    dots = block_dots(act_q, weights)
    if weights.exact:
        return _exact(dots, act_scale, weights, pair)
    return _public(dots, act_scale, weights, pair)


def epilogue(acc: np.ndarray, prev: np.ndarray | None = None, alpha: np.ndarray | None = None) -> np.ndarray:
    """y written to TMEM: acc; with ACC add(prev, acc); with ASCALE add(mul(prev, alpha_j), acc)."""
    if alpha is not None:
        return F.add(F.mul(prev, np.asarray(alpha, np.uint32)[:, None]), acc)
    if prev is not None:
        return F.add(prev, acc)
    return acc


class WeightCache:
    """Decoded weights by key, least recently used evicted beyond max_bytes.

    The key must change whenever the bytes could have: the caller puts in the DRAM's identity,
    sa, rs, n, kb, wf, ssa, srs, unit, D and the write generation of both byte ranges."""

    def __init__(self, max_bytes: int | None = None):
        if max_bytes is None:
            max_bytes = int(os.environ.get("OTPU_MXU_CACHE_MB", DEFAULT_CACHE_MB)) << 20
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple, Decoded] = OrderedDict()

    def get(self, key: tuple, wf: int, d: int, kb: int, rows: np.ndarray, scales: np.ndarray | None,
            unit: bool) -> Decoded:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return found
        self.misses += 1
        dec = decode(wf, d, kb, rows, scales, unit)
        self._entries[key] = dec
        self.bytes += dec.nbytes
        while self.bytes > self.max_bytes and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            self.bytes -= old.nbytes
        return dec

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)
