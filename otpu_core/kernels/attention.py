"""Attention over a quantised KV cache: KV appends and flash attention in 256-token blocks.

Per block of keys (one KV head, a group of g <= MCOLS query heads):
  s = q.K^T (MM, RMAX epilogue gives the row maxima); m' = max(m, rowmax);
  p = exp2(s - m') (EXP2SUB); alpha = exp2(m - m') (EXP2SUB);
  acc = acc*alpha + quantize(p * v_scale) . V^T (QACT CSCALE, then MM ACC + ASCALE, V^T unscaled);
  l = l*alpha + sum(p); m = m'.
q is quantised with log2(e)/sqrt(d) folded in (QACT CSCALE), so the scores are already in base
2. The full blocks run as one hardware loop; a partial last block is padded to whole D-blocks
and its padding masked with a large negative score before its row maximum is taken.
"""
from __future__ import annotations

import math

from .. import ol
from ..ol import CompileError, KVCache, Tile

ATTN_BLOCK = 256
MASKED = -1.0e30


def append_kv(kv: KVCache, pos, k: Tile, v: Tile) -> None:
    """Write one token's K row and V^T column (two QSTs)."""
    ol.kv_append(kv, pos, k, v)


def attention(q: Tile, kv: KVCache, n_tokens: int, block: int = ATTN_BLOCK) -> Tile:
    """softmax(q K^T / sqrt(d)) V over the first n_tokens of the cache, for q (g, d)."""
    cfg = ol.config()
    D = cfg.D
    q2 = q if q.ndim == 2 else q.reshape(1, q.cols)
    g, d = q2.shape
    if d != kv.d:
        raise CompileError(f"shape mismatch in attention: q of shape {q.shape}, cache head dim {kv.d}")
    if g > cfg.MCOLS:
        raise CompileError(f"attention: a query group of {g} rows exceeds MCOLS={cfg.MCOLS}; split the group")
    if not 0 < n_tokens <= kv.cap or block % D:
        raise CompileError(f"attention: {n_tokens} tokens in a cache of {kv.cap}, block {block} (a multiple of D={D})")
    qscale = ol.full((d,), ol.LOG2E / math.sqrt(d))
    qs = ol.quantize(q2 * qscale[None, :])
    acc = ol.zeros((g, d))
    m = ol.full((g,), MASKED)
    l = ol.zeros((g,))

    def step(t0, n: int, tail: int | None):
        npad = -(-n // D) * D
        if tail is None:
            s = ol.dot(qs, kv.keys(t0, npad, D), rowmax=True)
            m_new = ol.maximum(m, s.rowmax)
        else:
            s = ol.dot(qs, kv.keys(t0, npad, D))
            if npad > n:
                mask = ol.zeros((npad,))
                mask[n:npad].set(MASKED)
                s += mask[None, :]
            m_new = ol.maximum(m, ol.max(s))
        p = ol.exp2(s - m_new[:, None])
        alpha = ol.exp2(m - m_new)
        vs = ol.zeros((npad,)) if npad > n else ol.empty((npad,))
        ol.load(kv.value_scales(t0, n), out=vs[:n] if npad > n else vs)
        ol.dot(ol.quantize(p * vs[None, :]), kv.values_t(t0, npad, D), acc=acc, acc_scale=alpha)
        l.set(l * alpha + ol.sum(p))
        m.set(m_new)

    full, tail = divmod(n_tokens, block)
    for b in ol.range(full):
        step(b * block, block, None)
    if tail:
        step(full * block, tail, tail)
    out = acc * ol.recip(l)[:, None]
    return out if q.ndim == 2 else out.reshape(d)
