"""Attention over a quantised KV cache: KV appends and flash attention in 256-token blocks.

Per block of keys (one KV head, a group of g <= MCOLS query heads):
  s = q.K^T (MM, RMAX epilogue gives the row maxima); m' = max(m, rowmax);
  p = exp2(s - m') (EXP2SUB); alpha = exp2(m - m') (EXP2SUB);
  acc = acc*alpha + quantize(p * v_scale) . V^T (QACT CSCALE, then MM ACC + ASCALE, V^T unscaled);
  l = l*alpha + sum(p); m = m'.
q is quantised with log2(e)/sqrt(d) folded in (QACT CSCALE), so the scores are already in base
2. The full blocks run as one hardware loop; a partial last block is padded to whole D-blocks
and its padding masked with a large negative score before its row maximum is taken. With a
run-time length (resident decode: one program per 256-position bucket, the position in an
argument register) the last block is a whole block masked by a row of an additive mask table.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ol
from ..ol import CompileError, KVCache, Tensor, Tile

ATTN_BLOCK = 256
MASKED = -1.0e30


def append_kv(kv: KVCache, pos, k: Tile, v: Tile) -> None:
    """Write one token's K row and V^T column (two QSTs)."""
    ol.kv_append(kv, pos, k, v)


def mask_table(block: int = ATTN_BLOCK) -> np.ndarray:
    """The additive mask rows a run-time-length attention reads: row t is 0 up to column t and
    MASKED after it (place it in DRAM, e.g. `Image.tensor(mask_table())`)."""
    cols = np.arange(block)
    return np.where(cols[None, :] <= cols[:, None], 0.0, MASKED).astype(np.float32)


def attention(q: Tile, kv: KVCache, n_tokens, block: int = ATTN_BLOCK, *, full_blocks: int | None = None,
              mask: Tensor | None = None) -> Tile:
    """softmax(q K^T / sqrt(d)) V over the first n_tokens of the cache, for q (g, d).

    n_tokens is a compile-time count, or a run-time expression (e.g. `pos + 1`) with `full_blocks`
    (the static number of whole blocks before it: the position's bucket) and `mask` (the
    `mask_table(block)` in DRAM); the last block then always spans `block` tokens and its mask
    row is read at the run-time offset. Cache slots past the last token must hold finite scales
    (they are multiplied by zero)."""
    cfg = ol.config()
    D = cfg.D
    q2 = q if q.ndim == 2 else q.reshape(1, q.cols)
    g, d = q2.shape
    if d != kv.d:
        raise CompileError(f"shape mismatch in attention: q of shape {q.shape}, cache head dim {kv.d}")
    if g > cfg.MCOLS:
        raise CompileError(f"attention: a query group of {g} rows exceeds MCOLS={cfg.MCOLS}; split the group")
    runtime = not isinstance(n_tokens, int)
    if runtime:
        if full_blocks is None or mask is None or mask.shape != (block, block):
            raise CompileError(f"attention over a run-time length needs full_blocks= and the ({block}, {block}) "
                               "mask table (mask_table())")
        if (full_blocks + 1) * block > kv.cap:
            raise CompileError(f"attention: block {full_blocks} ends past the cache capacity {kv.cap}")
    elif not 0 < n_tokens <= kv.cap:
        raise CompileError(f"attention: {n_tokens} tokens in a cache of {kv.cap}")
    if block % D:
        raise CompileError(f"attention: block {block} is not a multiple of D={D}")
    qscale = ol.full((d,), ol.LOG2E / math.sqrt(d))
    qs = ol.quantize(q2 * qscale[None, :])
    acc = ol.zeros((g, d))
    m = ol.full((g,), MASKED)
    l = ol.zeros((g,))

    def step(t0, n: int, mask_row: Tile | None):
        """Keys [t0, t0+n); a partial block (mask_row given, or n short of whole blocks) is masked."""
        npad = -(-n // D) * D
        if mask_row is None and npad == n and n == block:
            s = ol.dot(qs, kv.keys(t0, npad, D), rowmax=True)
            m_new = ol.maximum(m, s.rowmax)
        else:
            s = ol.dot(qs, kv.keys(t0, npad, D))
            if mask_row is None and npad > n:
                mask_row = ol.zeros((npad,))
                mask_row[n:npad].set(MASKED)
            if mask_row is not None:
                s += mask_row[None, :]
            m_new = ol.maximum(m, ol.max(s))
        p = ol.exp2(s - m_new[:, None])
        alpha = ol.exp2(m - m_new)
        vs = ol.zeros((npad,)) if npad > n else ol.empty((npad,))
        ol.load(kv.value_scales(t0, n), out=vs[:n] if npad > n else vs)
        ol.dot(ol.quantize(p * vs[None, :]), kv.values_t(t0, npad, D), acc=acc, acc_scale=alpha)
        l.set(l * alpha + ol.sum(p))
        m.set(m_new)

    full, tail = (full_blocks, None) if runtime else divmod(n_tokens, block)
    for b in ol.range(full):
        step(b * block, block, None)
    if runtime:
        step(full * block, block, ol.load(mask[n_tokens - 1 - full * block]))
    elif tail:
        step(full * block, tail, None)
    out = acc * ol.recip(l)[:, None]
    return out if q.ndim == 2 else out.reshape(d)
