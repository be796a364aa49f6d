"""RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w, per row.

`rmsnorm_quantized` is the form a matmul consumes: one RSSQ, the rsqrt, and one QACT that folds
the row scale (RSCALE) and the weight (CSCALE) in, so the normalised tile is never written.
Given the weight it feeds, it quantises the way that weight's format wants (`ol.quant_mode_for`:
one scale per row with sub-block offsets for the seed formats, per-block scales for the public
ones, DUP for MM PAIR where a 4-bit weight can use it).
"""
from __future__ import annotations

from .. import ol
from ..ol import QTensor, Stationary, Tile


def _inv_rms(x: Tile, eps: float) -> Tile:
    return ol.rsqrt(ol.sum(x * x) * (1.0 / x.cols) + eps)


def rmsnorm(x: Tile, w: Tile, eps: float = 1e-6) -> Tile:
    r = _inv_rms(x, eps)
    return (x * r[:, None]) * w[None, :]


def rmsnorm_quantized(x: Tile, w: Tile, eps: float = 1e-6, weight: QTensor | None = None) -> Stationary:
    mode = ol.quant_mode_for(x, weight) if weight is not None else {}
    r = _inv_rms(x, eps)
    # keywords spelled out: a ** call holds the temporary once more, and quantize would take it
    # for a named tile and keep the two MULs instead of folding them into the QACT
    return ol.quantize((x * r[:, None]) * w[None, :], suboffsets=mode.get("suboffsets", False),
                       dup=mode.get("dup", False))
