"""MM numerics: the bit-exact matrix unit as one vectorised computation, plus the decoded-weight
cache that keeps repeated MMs over the same DRAM weights from decoding them again.

Both numerics of docs/formats.md (section 2, "MM numerics"):
- public formats (WF 0..2): per D-block fp32 terms t = mul(mul(i2f(isum), ws), ascale), summed
  over the blocks by the 4-partial tree (fp32.isum_mm); PAIR adds t[j][2c] + t[j+M][2c+1] first;
- seed formats (WF 3, 4): the block dots shifted by the per-block exponents and summed exactly
  over all of K, then one epilogue mul(mul(i2f(acc), Sw), Sa');
- seed formats over activations QACT wrote with sub-block offsets (SUB): each D/4 sub-block's
  partial shifted by Emax - e as well (Emax: the row's largest offset in the MM), the 48-bit sum
  wrapped, and i2f(acc) * 2^-Emax in the epilogue; public formats refuse such activations.
Every int8 x int8 block dot is below 2^24, so float32 BLAS matmuls over [kb, rows, D] x
[kb, D, n] return them exactly; the seed's shifted sums stay below 2^53 and are summed in float64
(with offsets: the shifts folded into the codes where one float32 matmul per block stays exact,
per-sub-block dots elsewhere; weight-shifted block sums added in float64 chunks, then int64).

Public API: ``block_dots(act_q, weights)``, ``sub_dots(act_q, w)``,
``shifted_block_dots(act_q, shift, weights)``,
``mm(act_q, act_scale, weights, pair=False, act_sub=None)`` ->
uint32 [M, n] (before ACC/ASCALE), ``epilogue(acc, prev=None, alpha=None)``, ``WeightCache``
(``get(key, wf, d, kb, rows, scales, unit)``; key by DRAM identity, address, shape and write
generation), ``MxuError``.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from . import fp32 as F
from .formats import SUB_MARK, Decoded, WeightFormatError, decode, unpack_suboffsets
from .isa import NSUB, WF_FP4X6, WF_INT8X

DEFAULT_CACHE_MB = 4096
ACC_HALF = 1 << 47          # the seed's 48-bit column-end accumulator: [-2^47, 2^47)
# blocks whose weight-shifted sums float64 adds exactly: with offsets a block's sum is below
# 2^24 x 2^7 (one matmul) or 4 x 2^22 x 2^7 (sub-block dots), times 2^16, and 64 of them stay below 2^53
EXACT_BLOCKS = 64
WEIGHT_MAX = {WF_INT8X: 127, WF_FP4X6: 63 * 12}      # the largest |integer weight| of a seed format


class MxuError(WeightFormatError):
    """Operands the MXU cannot combine (seed formats with per-block activation scales, public
    formats with sub-block offsets)."""


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


def _row_sources(m: int, kb: int, pair: bool) -> np.ndarray:
    """[m, kb]: the ACT row each block of output row j comes from (PAIR: odd blocks from j + M)."""
    return np.arange(m)[:, None] + np.where(pair & (np.arange(kb) % 2 == 1), m, 0)[None, :]


def _row_scales(act_scale: np.ndarray, src: np.ndarray) -> np.ndarray:
    """The one activation scale per output row the exact path needs, uint32 [m, 1]."""
    used = act_scale[src, np.arange(src.shape[1])[None, :]]
    if (used != used[:, :1]).any():
        j = int(np.argmax((used != used[:, :1]).any(axis=1)))
        raise MxuError(f"seed weight formats need one activation scale per row (QACT ROW mode); "
                       f"row {j} has {len(np.unique(used[j]))} different block scales")
    return used[:, :1]


def _exact(dots: np.ndarray, act_scale: np.ndarray, weights: Decoded, pair: bool) -> np.ndarray:
    rows, kb = act_scale.shape
    m = rows // 2 if pair else rows
    scale = _row_scales(act_scale, _row_sources(m, kb, pair))
    pow2 = np.exp2(weights.shift.astype(np.float64))                           # [n, kb]
    acc = np.zeros((m, dots.shape[2]), np.float64)
    for k in range(kb):
        block = dots[k, m:] if (pair and k % 2) else dots[k, :m]
        acc += block.astype(np.float64) * pow2[:, k]
    total = F.i2f(acc.astype(np.int64))
    return F.mul(F.mul(total, weights.row_scale[None, :]), scale)


def sub_dots(act_q: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact integer dots per D/4 sub-block of act_q int8 [R, kb*D] against decoded weights w
    float32 [kb, n, D] -> float32 [kb, NSUB, R, n]: one float32 matmul per (block, sub-block)
    over a strided view of w; each partial is below 2^24."""
    kb, n, d = w.shape
    rows = act_q.shape[0]
    a = act_q.reshape(rows, kb, NSUB, d // NSUB).transpose(1, 2, 0, 3).astype(np.float32)
    return np.matmul(a, w.reshape(kb, n, NSUB, d // NSUB).transpose(0, 2, 3, 1))


def shifted_block_dots(act_q: np.ndarray, shift: np.ndarray, weights: Decoded) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per ACT row and block, the exact sum over its sub-blocks of dot * 2^shift (shift: [R, kb,
    NSUB], 0..SUB_EXP_MAX) -> (float32 [kb, R, n], the `loose` block indices, float64 [len(loose), R, n]).

    A block's smallest shift is factored out and the rest folded into the codes (|q| 2^(shift -
    min) < 2^14), so one float32 matmul per block gives the sum, exact where the block's sum of
    |folded codes| times the format's largest |weight| stays below 2^24; times 2^min it stays an
    exact float32. The loose blocks, where that bound fails, are zero in the float32 result and
    come instead from their exact sub-block dots (`sub_dots`), shifted and added in float64."""
    kb, n, d = weights.w.shape
    rows = act_q.shape[0]
    low = shift.min(axis=2)                                                          # [R, kb]
    folded = act_q.reshape(rows, kb, NSUB, d // NSUB) * np.exp2(shift - low[..., None]).astype(np.float32)[..., None]
    a = np.ascontiguousarray(folded.reshape(rows, kb, d).transpose(1, 0, 2))
    bound = np.abs(a).sum(axis=2) * WEIGHT_MAX[weights.wf]                            # [kb, R]
    a *= np.exp2(low.T.astype(np.float32))[:, :, None]       # the factored shift, exact; the matmul bound holds
    loose = np.flatnonzero((bound >= 2 ** 24).any(axis=1))
    a[loose] = 0
    dots = np.matmul(a, weights.w.transpose(0, 2, 1))
    pow2 = np.exp2(shift[:, loose].astype(np.float32))                               # [R, loose, NSUB]
    exact = np.einsum("ksjn,jks->kjn", sub_dots(act_q.reshape(rows, kb, d)[:, loose].reshape(rows, -1),
                                                 weights.w[loose]), pow2, dtype=np.float64)
    return dots, loose, exact


def _shifted_sum(per_block: np.ndarray, wpow2: np.ndarray) -> np.ndarray:
    """int64 [M, n]: sum over blocks of per_block * 2^(weight shift), exact: float64 adds
    EXACT_BLOCKS such integers (each below 2^47) exactly, and the chunks meet in int64."""
    acc = np.zeros(per_block.shape[1:], np.int64)
    for k0 in range(0, per_block.shape[0], EXACT_BLOCKS):
        chunk = per_block[k0:k0 + EXACT_BLOCKS] * wpow2[k0:k0 + EXACT_BLOCKS].astype(per_block.dtype)
        acc += chunk.sum(axis=0, dtype=np.float64).astype(np.int64)
    return acc


def _exact_sub(act_q: np.ndarray, act_scale: np.ndarray, act_sub: np.ndarray, weights: Decoded,
               pair: bool) -> np.ndarray:
    """The exact path over activations with sub-block offsets (docs/formats.md 4.3): with
    Emax_j the largest offset among the sub-blocks output row j reads, every sub-block partial
    is shifted left by (Emax_j - e) plus its weight block's shift, summed in the 48-bit two's
    complement accumulator, and y = mul(mul(i2f(acc) * 2^-Emax_j, Sw), Sa) (the 2^-Emax is exact)."""
    rows, kb = act_scale.shape
    m = rows // 2 if pair else rows
    src = _row_sources(m, kb, pair)
    scale = _row_scales(act_scale, src)
    e = unpack_suboffsets(act_sub).astype(np.int64)                                  # [R, kb, NSUB]
    emax = e[src, np.arange(kb)[None, :]].max(axis=(1, 2))                           # [m]
    shift = np.maximum(emax[np.arange(rows) % m][:, None, None] - e, 0)   # blocks a PAIR row does not feed: 0
    dots, loose, exact = shifted_block_dots(act_q, shift, weights)
    if pair:       # odd blocks come from rows M..2M-1
        dots, exact = dots[np.arange(kb)[:, None], src.T], exact[np.arange(loose.size)[:, None], src.T[loose]]
    wpow2 = np.exp2(weights.shift.T)[:, None, :]                                     # [kb, 1, n]
    acc = _shifted_sum(dots, wpow2) + _shifted_sum(exact, wpow2[loose])
    acc = ((acc + ACC_HALF) & (2 * ACC_HALF - 1)) - ACC_HALF
    total = F.mul(F.i2f(acc), ((127 - emax) << 23).astype(np.uint32)[:, None])
    return F.mul(F.mul(total, weights.row_scale[None, :]), scale)


def mm(act_q: np.ndarray, act_scale: np.ndarray, weights: Decoded, pair: bool = False,
       act_sub: np.ndarray | None = None) -> np.ndarray:
    """The accumulated result of one MM before its ACC/ASCALE epilogue, uint32 [M, n].

    act_q: int8 [R, kb*D] (ACT RAM rows ab.. of the instruction); act_scale: uint32 [R, kb] (their
    ASCALE words); act_sub: uint16 [R, kb] (their sub-block offset words; None: none);
    R = 2M with pair (row j + M supplies the odd blocks of output row j)."""
    if pair and act_q.shape[0] % 2:
        raise MxuError("PAIR needs an even number of activation rows")
    with_offsets = act_sub is not None and bool((act_sub & SUB_MARK).any())
    if with_offsets and not weights.exact:
        raise MxuError("public weight formats take per-block activation scales only; these ACT rows carry "
                       "sub-block offsets (QACT SUB): quantize without SUB, or use int8x/fp4x6 weights")
    if with_offsets:
        return _exact_sub(act_q, act_scale, act_sub, weights, pair)
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
            from .envvars import number
            max_bytes = int(number("OTPU_MXU_CACHE_MB", DEFAULT_CACHE_MB, 0, 1 << 20, integer=True)) << 20
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
