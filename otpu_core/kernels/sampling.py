"""Greedy and top-k selection over a vocabulary, chunk by chunk: logits in DRAM, or straight
from the LM head's MMs (`greedy_head`, logits never stored).

A chunk's (max, index) pair comes from one VOP ARGMAX; the winning chunk is found by an ARGMAX
over the per-chunk maxima, and its pair is copied out through an RLD-computed address. Top-k
knocks each winner out (a -inf FILL at an RLD-computed address) and repeats: k rounds per chunk
give every chunk's k best as candidates, k rounds over the candidates give the k best overall.
Results are (value, index) fp32 pairs, indices exact below 2^24.
"""
from __future__ import annotations

from .. import ol
from ..ol import CompileError, QTensor, Stationary, Tensor, Tile

KNOCKED_OUT = float("-inf")
PAIR = 2


def _column(pairs: Tile, n: int) -> Tile:
    """The values of n (value, index) pairs as a contiguous (n,) tile (one strided COPY)."""
    col = ol.empty((n,))
    ol.copy(Tile(pairs.buf, pairs.base, (n, 1), PAIR), out=col.reshape(n, 1))
    return col


def _pick(pairs: Tile, n: int, out: Tile, knock_out: bool) -> None:
    """Copy the best of n pairs into `out` (2 words); optionally knock its value out."""
    col = _column(pairs, n)
    best = ol.argmax(col)
    j2 = ol.rld(best[1:2], scale=PAIR)              # 2 * winning pair number, in a register
    ol.copy(Tile(pairs.buf, pairs.base + j2, (PAIR,)), out=out)
    if knock_out:
        Tile(pairs.buf, pairs.base + j2, (1,)).set(KNOCKED_OUT)


def _chunking(logits: Tensor, chunk: int) -> tuple[int, int]:
    v = logits.cols
    if len(logits.shape) != 1 or chunk < 1:
        raise CompileError(f"sampling needs a 1-D logits tensor, not shape {logits.shape}")
    chunk = min(chunk, v)
    return chunk, v


def _best_over_chunks(total: int, chunk: int, make_chunk) -> Tile:
    """(max, index) over `total` values produced chunk by chunk by make_chunk(c0, n) -> (n,) tile."""
    full, tail = divmod(total, chunk)
    n = full + (1 if tail else 0)
    pairs = ol.empty((n * PAIR,))
    for c in ol.range(full):
        ol.argmax(make_chunk(c * chunk, chunk), base=c * chunk, out=Tile(pairs.buf, pairs.base + c * PAIR, (PAIR,)))
    if tail:
        ol.argmax(make_chunk(full * chunk, tail), base=full * chunk, out=pairs[full * PAIR:])
    out = ol.empty((PAIR,))
    _pick(pairs, n, out, knock_out=False)
    return out


def argmax(logits: Tensor, chunk: int = 8192) -> Tile:
    """(max, index) of a 1-D logits tensor, read in chunks."""
    chunk, v = _chunking(logits, chunk)
    return _best_over_chunks(v, chunk, lambda c0, n: ol.load(logits.window(0, 1, c0, n)))


def greedy_head(x: Stationary, head: QTensor, chunk: int = 8192) -> Tile:
    """(max, index) of the logits x @ head^T without storing them: an ARGMAX per row chunk of the
    head while the next chunk streams (x one quantised row)."""
    if x.M != 1:
        raise CompileError(f"greedy_head takes one activation row, not {x.M}")
    return _best_over_chunks(head.N, min(chunk, head.N), lambda c0, n: ol.dot(x, head.rows(c0, n)))


def topk(logits: Tensor, k: int, chunk: int = 8192) -> Tile:
    """The k largest (value, index) pairs of a 1-D logits tensor, best first, as a (k, 2) tile."""
    chunk, v = _chunking(logits, chunk)
    if not 1 <= k <= min(chunk, v):
        raise CompileError(f"topk: k={k} must be between 1 and the chunk size {chunk}")
    full, tail = divmod(v, chunk)
    n = full + (1 if tail else 0)
    cands = ol.empty((n * k * PAIR,))
    offset = ol.zeros((1,))

    def chunk_topk(t: Tile, c_base):
        for r in ol.static_range(k):
            dst = Tile(cands.buf, c_base + r * PAIR, (PAIR,))
            ol.argmax(t, out=dst)
            pos = ol.rld(dst[1:2])
            Tile(t.buf, t.base + pos, (1,)).set(KNOCKED_OUT)
            idx = dst[1:2]
            idx += offset

    for c in ol.range(full):
        chunk_topk(ol.load(logits.window(0, 1, c * chunk, chunk)), cands.base + c * (k * PAIR))
        offset += float(chunk)
    if tail:
        chunk_topk(ol.load(logits.window(0, 1, full * chunk, tail)), cands.base + full * (k * PAIR))
    out = ol.empty((k, PAIR))
    for r in ol.static_range(k):
        _pick(cands, n * k, out[r], knock_out=True)
    return out
