"""Fusion peepholes: rewrite the VOP that produced an unnamed temporary instead of adding another.

Each rule fires only when the consumer got an unnamed temporary (the caller checks the reference
count: a value bound to a name may be read again, so it is never rewritten) and only when the
builder was made with peepholes on. Each rule gives the same bits as the unfused sequence,
since the fused instruction is defined as that sequence, and records the instructions and
TMEM words it saved:

| source                              | becomes                                     |
|-------------------------------------|---------------------------------------------|
| exp2(a - b)                         | the SUB rewritten to EXP2SUB                |
| quantize(x * v[None, :])            | the MUL dropped; QACT CSCALE = v            |
| quantize((x * r[:, None]) * v[None, :]) | both MULs dropped; QACT CSCALE + RSCALE |
| sum(a * b)                          | the MUL dropped; RDOT (RSSQ when b is a)    |
| max(dot(...), axis=-1)              | RMAX set on the MM; its maxima returned     |
| t.set(expr)                         | the producing VOP writes t directly          |
"""
from __future__ import annotations

from ..isa import BMode, VFunc
from .builder import current
from .ir import Access, TMEM
from .layouts import Tile


def _fresh(x: Tile):
    """The live VOP node that wrote all of x, with its fusion record, or (None, None)."""
    node, fusion = x.producer, x.fusion
    if node is None or node.dead or node.op != "VOP" or fusion is None:
        return None, None
    if node.addrs["dst"] != x.base or node.imm["rows"] != x.rows or node.imm["cols"] != x.cols:
        return None, None
    return node, fusion


def exp2sub(x: Tile) -> bool:
    """exp2(x) where x = a - b: turn the SUB into EXP2SUB in place."""
    b = current()
    node, fusion = _fresh(x)
    if not b.peepholes or node is None or node.imm["func"] != VFunc.SUB:
        return False
    node.imm["func"] = VFunc.EXP2SUB
    x.fusion = None
    b.savings.add("exp2sub", 1, 2 * x.rows * x.cols)
    return True


def quantize_scales(x: Tile):
    """For quantize(x): (source tile, cscale address, rscale address) with the MULs dropped, or None."""
    b = current()
    node, fusion = _fresh(x)
    if not b.peepholes or node is None or fusion.op != "mul" or fusion.bmode != BMode.COL:
        return None
    if not fusion.b.is_static():
        return None              # QACT's cscale field is absolute: no register can be added
    src, rscale = fusion.a_tile(), None
    inner, inner_f = fusion.a_node, fusion.a_fusion
    if (inner is not None and inner_f is not None and not inner.dead and inner.op == "VOP"
            and inner_f.op == "mul" and inner_f.bmode == BMode.ROW and inner_f.brs == 1
            and inner_f.b.is_static() and inner_f.a_tile() is not None):
        rscale = inner_f.b.const
        inner.dead = True
        src = inner_f.a_tile()
        b.savings.add("quantize_rscale", 1, 2 * x.rows * x.cols)
    if src is None:
        return None
    node.dead = True
    b.savings.add("quantize_cscale", 1, 2 * x.rows * x.cols)
    return src, fusion.b.const, rscale


def reduce_sum(x: Tile):
    """For sum(x) where x = a * b: (func, a, b, brs, bmode, b footprint) with the MUL dropped, or None."""
    b = current()
    node, fusion = _fresh(x)
    if not b.peepholes or node is None or fusion.op != "mul" or fusion.bmode == BMode.SCALAR:
        return None
    a = fusion.a_tile()
    if a is None:
        return None
    node.dead = True
    b.savings.add("rdot", 1, 2 * x.rows * x.cols)
    if fusion.bmode == BMode.FULL and fusion.b == a.base and fusion.brs == a.drs:
        return VFunc.RSSQ, a, None, 0, BMode.SCALAR, None
    return VFunc.RDOT, a, fusion.b, fusion.brs, fusion.bmode, fusion.b_access


def rowmax(x: Tile) -> Tile | None:
    """max(x, axis=-1) of an unmodified `dot` output: set RMAX on its MM and return the maxima."""
    b = current()
    if not b.peepholes or x.rowmax_of is None:
        return None
    mm, version, maxima = x.rowmax_of
    if mm.dead or x.buf.version != version or mm.imm.get("rmax"):
        return None
    m, n = mm.imm["m"], mm.imm["n"]
    if (x.rows, x.cols) != (m, n) or m > b.cfg.MCOLS:
        return None
    mm.imm["rmax"] = True
    mm.writes.append(Access(TMEM, maxima.base, m))
    b.savings.add("rmax", 1, m * n + m)
    return maxima


def retarget(t: Tile, value: Tile) -> bool:
    """t.set(value) for a fresh VOP result: make that VOP write t (if it reads nothing t overlaps)."""
    from .vector import _ranges_overlap, tile_access
    b = current()
    node = value.producer
    if not b.peepholes or node is None or node.dead or node.op != "VOP" or node.addrs["dst"] != value.base:
        return False
    reduces = node.imm["func"] in (VFunc.RSUM, VFunc.RMAX, VFunc.RSSQ, VFunc.RDOT)
    if reduces:
        if t.ndim != 1 and t.cols != 1:
            return False
        drs = 1 if t.ndim == 1 else t.rs
    elif node.imm["func"] == VFunc.ARGMAX or (t.rows, t.cols) != (node.imm["rows"], node.imm["cols"]):
        return False
    else:
        drs = t.drs
    w = tile_access(t)
    for r in node.reads:
        if r.space == TMEM and _ranges_overlap(w, r):
            in_place = r.lo == t.base and node.addrs["a"] == t.base and node.imm["ars"] == drs
            if not in_place:
                return False
    rows = node.imm["rows"]
    node.addrs["dst"] = t.base
    node.imm["drs"] = drs if rows > 1 else 0
    node.writes = [Access(TMEM, t.base, (rows - 1) * node.imm["drs"] + (1 if reduces else node.imm["cols"]))]
    t.buf.version += 1
    t.producer, t.fusion = node, None
    b.savings.add("set", 1, 2 * value.rows * value.cols)
    return True
