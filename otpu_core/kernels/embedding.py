"""Embedding gather from the tied int8 LM head, on the card, through the MXU.

The VPU cannot turn int8 into fp32; the MXU can. Row `tok` of the head [V, d] is streamed as
d/D rows of one D-block each (row stride D, scale stride 4), against one-hot activation rows:
ACT block b holds, in row j, a one at position b*M + j (M = act_rows). MM b then yields
W[tok, n*D + b*M + j] * scale for every block n and row j; D/M MMs cover every position. The
results land transposed ([D positions, d/D blocks]); one strided COPY per block puts them in
order. The token is a run-time value (`ol.runvar`), so one program serves every token, or a
value the program computed (the greedy pick), read into registers by RLD.
"""
from __future__ import annotations

from .. import ol
from ..ol import CompileError, QTensor, Tile


def _one_hot(m: int, D: int) -> Tile:
    """(m, D*(D/m)) tile: row j has a one at column b*D + b*m + j of block b."""
    nb = D // m
    t = ol.zeros((m, nb * D))
    for j in ol.static_range(m):
        Tile(t.buf, t.base + j * t.rs + j, (nb, 1), D + m).set(1.0)
    return t


def embed(head: QTensor, tok) -> Tile:
    """Row `tok` of the int8 head as fp32 (d,): W[tok] * its block scales (to ~1 ulp).

    `tok` is a run-time value (`ol.runvar`) or a one-word tile holding the index as fp32 (e.g.
    the index of a `greedy_head` pair): then two RLDs turn it into the row's byte offsets."""
    cfg = ol.config()
    D, m = cfg.D, cfg.act_rows
    if head.wf != 0 or head.scale is None:
        raise CompileError("embed gathers from an int8 head with block scales (format int8)")
    if D % m:
        raise CompileError(f"embed: D={D} must be a multiple of act_rows={m}")
    nb, blocks = D // m, head.kb
    hot = ol.quantize(_one_hot(m, D))
    if isinstance(tok, Tile):
        data, scale = head.data + ol.rld(tok, scale=head.rs), head.scale + ol.rld(tok, scale=head.srs)
    else:
        data, scale = head.data + tok * head.rs, head.scale + tok * head.srs
    row = QTensor(data, scale, (blocks, D), D, 4, head.wf, D)
    trans = ol.empty((D, blocks))                   # trans[e, n] = W[tok, n*D + e]
    for b in ol.static_range(nb):
        ol.dot(hot.blocks(b, 1), row, out=Tile(trans.buf, trans.base + b * m * trans.rs, (m, blocks), trans.rs))
    out = ol.empty((head.K,))
    for n in ol.range(blocks):
        ol.copy(Tile(trans.buf, trans.base + n, (D, 1), trans.rs), out=Tile(out.buf, out.base + n * D, (D, 1), 1))
    return out
