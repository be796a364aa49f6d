"""Matrix products against quantised weights (int8, 4-bit and the seed formats): y = x @ W^T.

`linear` takes an activation tile (or an already quantised Stationary) and produces an output
tile, N in chunks so that each chunk's output fits TMEM. `matmul` goes DRAM to DRAM: any M
(MMs of act_rows rows each), K up to the ACT RAM capacity (padded with zero columns to whole
D-blocks; the weight is padded the same way when it is quantised), N chunked in a hardware loop
with an unrolled tail.
"""
from __future__ import annotations

from .. import ol
from ..ol import CompileError, QTensor, Stationary, Tensor, Tile

TMEM_SHARE = 4       # an output chunk takes at most this fraction of TMEM


def pad_activation(x: Tensor, kp: int) -> Tile:
    """Load x (rows, K) into a (rows, kp) tile, columns K..kp zero."""
    rows, k = x.rows, x.cols
    if k == kp:
        return ol.load(x)
    t = ol.zeros((rows, kp) if len(x.shape) == 2 else (kp,))
    ol.load(x, out=t[:, :k] if t.ndim == 2 else t[:k])
    return t


def chunk_rows(m: int, n: int) -> int:
    """Output columns per chunk for m rows so that a chunk fits its share of TMEM."""
    budget = ol.config().TMEM_WORDS // TMEM_SHARE
    return max(1, min(n, budget // (m + 1) - 1, 0xFFFF))


def linear(x: Tile | Stationary, w: QTensor, n_chunk: int | None = None) -> Tile:
    """x @ w^T into a new (M, N) tile (one dot when N fits one chunk)."""
    xq = x if isinstance(x, Stationary) else ol.quantize_for(x, w)
    if n_chunk is None or n_chunk >= w.N:
        return ol.dot(xq, w)
    out = ol.empty((xq.M, w.N) if xq.M > 1 else (w.N,))
    for c0 in ol.static_range(0, w.N, n_chunk):
        n = min(n_chunk, w.N - c0)
        view = out[:, c0:c0 + n] if out.ndim == 2 else out[c0:c0 + n]
        ol.dot(xq, w.rows(c0, n), out=view)
    return out


def matmul(x: Tensor, w: QTensor, y: Tensor, n_chunk: int | None = None) -> None:
    """y[M, N] = x[M, K] @ w[N, K]^T, DRAM to DRAM."""
    cfg = ol.config()
    if x.cols > w.K or -(-x.cols // cfg.D) != w.kb:
        raise CompileError(f"shape mismatch in matmul: x of shape {x.shape} and weight of shape {w.shape}")
    if w.K > cfg.max_k:
        raise CompileError(f"matmul: K={w.K} exceeds the ACT RAM capacity of {cfg.max_k}")
    if (y.rows, y.cols) != (x.rows, w.N):
        raise CompileError(f"shape mismatch in matmul: output of shape {y.shape} for {x.rows} x {w.N}")
    xq = ol.quantize_for(pad_activation(x, w.K), w)
    m = x.rows
    nc = n_chunk or chunk_rows(m, w.N)
    full, tail = divmod(w.N, nc)

    def chunk(c0, n):
        out = ol.dot(xq, w.rows(c0, n))
        ol.store(y.window(0, m, c0, n), out)

    for c in ol.range(full):
        chunk(c * nc, nc)
    if tail:
        chunk(full * nc, tail)
