"""Greedy and top-k selection over a vocabulary, chunk by chunk: logits in DRAM, or straight
from the LM head's MMs (`greedy_head`, `head_choice`: logits never stored unless asked), and
sampling on the card (`head_choice` with `SampleParams`).

A chunk's (max, index) pair comes from one VOP ARGMAX; the winning chunk is found by an ARGMAX
over the per-chunk maxima, and its pair is copied out through an RLD-computed address. Top-k
knocks each winner out (a -inf FILL at an RLD-computed address) and repeats: k rounds per chunk
give every chunk's k best as candidates, k rounds over the candidates give the k best overall.
Results are (value, index) fp32 pairs, indices exact below 2^24.

Sampling from the k best (`sample_top`), every step a VOP:
  p_i = exp2((v_i - v_0) * log2(e)/T)                       (v_0 the best logit, so p_0 = 1)
  c_i = p_0 + ... + p_i                                     (one RDOT against a triangle of ones)
  keep_i = 1 for i = 0, else [c_{i-1} < top_p * c_{k-1}]    (top-p: the smallest head reaching top_p)
  Z = sum keep_i p_i;  t = u * Z                            (u: a host-drawn uniform in [0, 1))
  pick = sum keep_i [c_i < t]                               (the first kept i with c_i >= t)
[x < 0] is min(max(x * -2^127, 0), 1): 1 for every normal negative x, 0 for zero and above. The
repetition penalty (HF's: a seen token's logit divided by p when positive, multiplied when
negative) runs on each chunk before selection: l' = max(l, 0)(1 + s(1/p - 1)) + min(l, 0)(1 +
s(p - 1)) with s the chunk of the seen-token mask (1.0 for a seen token). Temperature, top-p and
the penalty factors are TMEM words (run-time values), k and whether to penalise are compile-time.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ol
from ..ol import CompileError, QTensor, Stationary, Tensor, Tile
from .activations import softcap

KNOCKED_OUT = float("-inf")
PAIR = 2
STEP_GAIN = 2.0 ** 127          # |x| * 2^127 >= 1 for every normal x


def _column(pairs: Tile, n: int, stride: int = PAIR, col: int = 0) -> Tile:
    """Word `col` (0 the value, 1 the index) of n pairs `stride` words apart as a contiguous (n,)
    tile (one strided COPY)."""
    out = ol.empty((n,))
    ol.copy(Tile(pairs.buf, pairs.base + col, (n, 1), stride), out=out.reshape(n, 1))
    return out


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
    cands, n = _candidates(v, chunk, k, lambda c0, m: ol.load(logits.window(0, 1, c0, m)))
    return _best_k(cands, n * k, k)


def topk_tile(t: Tile, k: int) -> Tile:
    """The k largest (value, index) pairs of a (n,) TMEM tile, best first, as a (k, 2) tile; `t` is
    overwritten (its winners knocked out)."""
    if t.ndim != 1 or not 1 <= k <= t.cols:
        raise CompileError(f"topk_tile: k={k} of a tile of shape {t.shape}: k must be 1..{t.cols}")
    out = ol.empty((k * PAIR,))
    _chunk_topk(t, k, out, out.base, ol.zeros((1,)))
    return out.reshape(k, PAIR)


def pair_column(pairs: Tile, n: int, col: int) -> Tile:
    """Column `col` of an (n, 2) tile (its own row stride) as a contiguous (n,) tile."""
    return _column(pairs, n, pairs.rs, col)


def _chunk_topk(t: Tile, k: int, cands: Tile, c_base, offset: Tile) -> None:
    """The k best pairs of chunk t (indices + offset) into cands at c_base; t is knocked out as it goes."""
    for r in ol.static_range(k):
        dst = Tile(cands.buf, c_base + r * PAIR, (PAIR,))
        ol.argmax(t, out=dst)
        pos = ol.rld(dst[1:2])
        Tile(t.buf, t.base + pos, (1,)).set(KNOCKED_OUT)
        idx = dst[1:2]
        idx += offset


def _candidates(total: int, chunk: int, k: int, make_chunk) -> tuple[Tile, int]:
    """Every chunk's k best pairs (chunks made by make_chunk(c0, n) -> (n,) tile); (candidates, chunks)."""
    full, tail = divmod(total, chunk)
    n = full + (1 if tail else 0)
    cands = ol.empty((n * k * PAIR,))
    offset = ol.zeros((1,))
    for c in ol.range(full):
        _chunk_topk(make_chunk(c * chunk, chunk), k, cands, cands.base + c * (k * PAIR), offset)
        offset += float(chunk)
    if tail:
        _chunk_topk(make_chunk(full * chunk, tail), k, cands, cands.base + full * (k * PAIR), offset)
    return cands, n


def _best_k(cands: Tile, n: int, k: int) -> Tile:
    out = ol.empty((k, PAIR))
    for r in ol.static_range(k):
        _pick(cands, n, out[r], knock_out=True)
    return out


@dataclass
class SampleParams:
    """What `head_choice` needs to sample instead of taking the argmax. The TMEM words are (1,) tiles:
    tinv = log2(e)/T, top_p, u (the uniform), pen_a = 1/p - 1 and pen_b = p - 1 (with `seen`)."""
    k: int
    tinv: Tile
    top_p: Tile
    u: Tile
    tri: Tensor                  # lower-triangular ones, at least (k, k), row stride >= k
    seen: Tensor | None = None   # (V,) seen-token mask in DRAM: repetition penalty on
    pen_a: Tile | None = None
    pen_b: Tile | None = None


def _below(x):
    """[x < 0] as 1.0 / 0.0 for a tile x."""
    return ol.minimum(ol.maximum(x * -STEP_GAIN, 0.0), 1.0)


def sample_top(top: Tile, k: int, prm: SampleParams) -> Tile:
    """One (value, index) pair drawn from the k best `top` (k, 2) (best first): temperature,
    top-p and the uniform u as in the module docstring."""
    stride = top.rs if top.ndim == 2 else PAIR
    v = _column(top, k, stride)
    p = ol.exp2((v - v[0:1]) * prm.tinv)
    if k == 1:
        out = ol.empty((PAIR,))
        ol.copy(top[0], out=out)
        return out
    tri = ol.load(prm.tri.window(0, k, 0, k))
    cum = tri @ p
    keep = ol.full((k,), 1.0)
    keep[1:k].set(_below(cum[0:k - 1] - cum[k - 1:k] * prm.top_p))
    t = ol.sum(p * keep) * prm.u
    pick = ol.sum(keep * _below(cum - t))
    at = ol.rld(pick, scale=stride)
    out = ol.empty((PAIR,))
    ol.copy(Tile(top.buf, top.base + at, (PAIR,)), out=out)
    return out


def _penalised(lg: Tile, seen: Tensor, c0, n: int, prm: SampleParams) -> Tile:
    s = ol.load(seen.window(0, 1, c0, n))
    up = s * prm.pen_a + 1.0
    down = s * prm.pen_b + 1.0
    return ol.maximum(lg, 0.0) * up + ol.minimum(lg, 0.0) * down


def head_choice(x: Stationary, head: QTensor, chunk: int = 8192, sample: SampleParams | None = None,
                each=None, penalty: SampleParams | None = None, cap: float = 0.0) -> Tile:
    """The next token from the LM head for one activation row x: (value, index) of the argmax, or
    a draw with `sample`. `each(c0, n, logits)` sees every chunk's logits (e.g. to store them);
    `penalty` (or `sample.seen`) applies the repetition penalty before choosing; `cap` > 0 soft-caps
    the logits first (Gemma: what `each`, the penalty and the draw see)."""
    if x.M != 1:
        raise CompileError(f"head_choice takes one activation row, not {x.M}")
    chunk = min(chunk, head.N)
    pen = penalty if penalty is not None else (sample if sample is not None and sample.seen is not None else None)
    k = sample.k if sample is not None else 1

    def make_chunk(c0, n):
        lg = ol.dot(x, head.rows(c0, n))
        if cap:
            lg = softcap(lg, cap)
        if each is not None:
            each(c0, n, lg)
        return _penalised(lg, pen.seen, c0, n, pen) if pen is not None else lg

    if k == 1 and pen is None and sample is None:
        return _best_over_chunks(head.N, chunk, make_chunk)
    if not 1 <= k <= chunk:
        raise CompileError(f"sampling: k={k} must be between 1 and the chunk size {chunk}")
    cands, n = _candidates(head.N, chunk, k, make_chunk)
    if sample is None:
        out = ol.empty((PAIR,))
        _pick(cands, n, out, knock_out=False)
        return out
    return sample_top(_best_k(cands, n * k, k), k, sample)
