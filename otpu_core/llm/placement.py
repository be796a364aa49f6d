"""Placing arrays in card DRAM: a bump cursor and the shapes every layer block is made of.

`Cursor.take` hands out aligned byte ranges; `weight` places a quantised matrix (its data rows,
then its scale rows), `parts` a matrix split into column parts (W_down's F-chunks), `vector` an
fp32 vector, `kv_pool` a KV pool of pages (per page and KV head: K token-major with its scales,
V^T dim-major with its scales). layout.py and gemma_layout.py build the image from these.
"""
from __future__ import annotations

from .. import formats
from ..ol import KVCache, QTensor, Tensor

ALIGN = 128
BLOCK_ALIGN = 4096


class Cursor:
    def __init__(self, at: int):
        self.at = at

    def take(self, nbytes: int, align: int = ALIGN) -> int:
        self.at = -(-self.at // align) * align
        addr = self.at
        self.at += max(int(nbytes), 1)
        return addr


def weight(cur: Cursor, n: int, k: int, wf: int, D: int) -> QTensor:
    kb = -(-k // D)
    rs, srs = formats.row_bytes(wf, D, kb), formats.scale_row_bytes(wf, kb)
    data = cur.take(n * rs)
    scale = cur.take(n * srs)
    return QTensor(data, scale, (n, kb * D), rs, srs, wf, D)


def parts(cur: Cursor, n: int, k: int, part: int, wf: int, D: int) -> QTensor:
    first = [weight(cur, n, part, wf, D) for _ in range(k // part)]
    q = first[0]
    if len(first) > 1:
        q.part_stride = (first[1].data.const - q.data.const, first[1].scale.const - q.scale.const)
    else:
        q.part_stride = (q.rs * n + ALIGN, q.srs * n + ALIGN)
    return q


def vector(cur: Cursor, n: int) -> Tensor:
    return Tensor(cur.take(4 * n), (n,))


def kv_pool(lc: Cursor, hd: int, kv_heads: int, P: int, pages: int, D: int) -> tuple[KVCache, int, int]:
    """Page 0 / head 0 of a KV pool, the head stride and the page stride."""
    kv0 = KVCache(lc.take(P * hd), lc.take(4 * P * (hd // D)), lc.take(hd * P), lc.take(4 * P), P, hd)
    head_stride = -(-(kv0.v_scale.const + 4 * P - kv0.k.const) // ALIGN) * ALIGN
    lc.at = kv0.k.const + head_stride * kv_heads * pages
    return kv0, head_stride, head_stride * kv_heads
