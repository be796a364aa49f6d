"""Row softmax in base 2: p = exp2(x*log2(e) - max), divided by its row sum (EXP2SUB fused)."""
from __future__ import annotations

from .. import ol
from ..ol import Tile


def softmax(x: Tile) -> Tile:
    t = x * ol.LOG2E
    p = ol.exp2(t - ol.max(t)[:, None])
    return p * ol.recip(ol.sum(p))[:, None]
