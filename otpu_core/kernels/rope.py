"""Rotary position embedding (rotate-half form) from cos/sin table rows.

For each head row x = [x1, x2] (halves of the head dim): [x1*cos - x2*sin, x2*cos + x1*sin],
with cos and sin the table rows of the position (half the head dim each). `cos`/`sin` may be
tiles already loaded, or DRAM tables with a (run-time) position to load them from.
"""
from __future__ import annotations

from .. import ol
from ..ol import CompileError, Tensor, Tile


def rope(x: Tile, cos, sin, pos=None) -> Tile:
    """x (heads, hd) or (hd,); cos/sin tiles of hd/2, or tables [positions, hd/2] read at `pos`."""
    h = x.cols // 2
    if x.cols % 2:
        raise CompileError(f"rope needs an even head dim, not shape {x.shape}")
    if isinstance(cos, Tensor):
        cos, sin = ol.load(cos[pos]), ol.load(sin[pos])
    if (cos.cols, sin.cols) != (h, h):
        raise CompileError(f"shape mismatch in rope: x of shape {x.shape}, cos {cos.shape}, sin {sin.shape}")
    x2d = x if x.ndim == 2 else x.reshape(1, x.cols)
    out = ol.empty(x2d.shape)
    x1, x2 = x2d[:, :h], x2d[:, h:]
    c, s = cos[None, :], sin[None, :]
    o1, o2 = out[:, :h], out[:, h:]
    o1.set(x1 * c - x2 * s)
    o2.set(x2 * c + x1 * s)
    return out if x.ndim == 2 else out.reshape(x.cols)
