"""VOP lowering: elementwise ops, reductions and assignment on tiles, with their operand modes.

Operand modes (`_operand`): a number is a SCALAR immediate; a same-shape tile is FULL; a (1,)
tile against a larger one is ROW with brs = 0 (one TMEM scalar); `v[:, None]` is ROW; `v[None,
:]` is COL. When the left side is not a full tile the operands swap (SUB becomes RSUB). Any
other pair is a compile error naming both shapes and the program line.

Every result remembers the node that produced it (`Tile.producer`) and what the fusion
peepholes need (`Tile.fusion`), so a consumer can rewrite that node when the result turns out
to be an unnamed temporary (`peephole.py`).
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass

import numpy as np

from ..isa import BMode, VFunc, f32_bits
from .affine import Affine
from .builder import current
from .errors import CompileError
from .ir import Access, Node, TMEM
from .layouts import Bcast, Tile

_FUNCS = {"add": VFunc.ADD, "sub": VFunc.SUB, "mul": VFunc.MUL, "max": VFunc.MAX, "min": VFunc.MIN}
_SWAPPED = {"add": "add", "sub": "rsub", "mul": "mul", "max": "max", "min": "min"}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "max": "maximum", "min": "minimum"}


class _OperatorProbe:
    def __mul__(self, other): return sys.getrefcount(self)


def _arg_probe(x): return sys.getrefcount(x)


# References a temporary has inside a Tile operator method and inside a function it is passed
# to (calibrated here, not assumed: the numbers differ between Python versions).
OPERATOR_TEMP_REFS = _OperatorProbe() * 1
ARG_TEMP_REFS = _arg_probe(object())


@dataclass
class Fusion:
    """How a VOP result was made, for peepholes that may later undo that VOP (tiles held weakly)."""
    op: str
    a: "weakref.ref | None"
    bmode: BMode = BMode.SCALAR
    b: Affine | None = None
    brs: int = 0
    b_access: Access | None = None
    imm: int = 0
    # when the A operand was itself an unnamed temporary: the VOP that made it and its record
    # (kept here because that temporary dies as soon as this result exists)
    a_node: object = None
    a_fusion: "Fusion | None" = None

    def a_tile(self) -> Tile | None:
        return self.a() if self.a is not None else None


def new_tile(shape: tuple, rs: int | None = None, spare: int = 0) -> Tile:
    """A fresh TMEM tile; with `spare`, that many words after rows*rs stay reserved (where an MM
    RMAX epilogue writes the row maxima)."""
    shape = tuple(int(s) for s in shape)
    rows = shape[0] if len(shape) == 2 else 1
    rs = shape[-1] if rs is None else rs
    words = rows * rs + spare if spare else (rows - 1) * rs + shape[-1]
    buf = current().buffer(words)
    return Tile(buf, buf.start, shape, rs)


def tile_access(t: Tile, rows: int | None = None, cols: int | None = None, rs: int | None = None) -> Access:
    rows = t.rows if rows is None else rows
    cols = t.cols if cols is None else cols
    rs = t.rs if rs is None else rs
    return Access(TMEM, t.base, (rows - 1) * rs + cols)


def _imm_bits(x) -> int:
    return f32_bits(float(x))


def emit_vop(func: VFunc, dst: Tile, a: Tile | None, rows: int, cols: int, *, ars: int | None = None,
             b: Affine | None = None, brs: int = 0, bmode: BMode = BMode.SCALAR, imm=0,
             b_access: Access | None = None, drs: int | None = None, out_words: int | None = None) -> Node:
    """Append one VOP; `a` may be None for FILL. Returns the node."""
    if rows > 0xFFFF or cols > 0xFFFF:
        raise CompileError(f"a VOP covers at most 65535 rows and columns, not {rows} x {cols}")
    drs = dst.drs if drs is None else drs
    ars = (a.drs if a is not None else 0) if ars is None else ars
    if max(drs, ars, brs) > 0xFFFF:
        raise CompileError(f"a VOP row stride is at most 65535 words, not {max(drs, ars, brs)}; use narrower tiles")
    reads = []
    if a is not None and func != VFunc.FILL:
        reads.append(Access(TMEM, a.base, (rows - 1) * ars + cols))
    if b_access is not None:
        reads.append(b_access)
    if out_words is None:
        out_words = (rows - 1) * drs + cols
    node = Node("VOP",
                {"dst": dst.base, "a": a.base if a is not None else Affine(0), "b": Affine.of(b if b is not None else 0),
                 "imm": Affine.of(imm)},
                {"func": func, "rows": rows, "cols": cols, "drs": drs, "ars": ars, "brs": brs, "bmode": bmode},
                reads, [Access(TMEM, dst.base, out_words)])
    current().emit(node)
    dst.buf.version += 1
    return node


def _shape(x) -> str:
    if isinstance(x, Tile):
        return str(x.shape)
    if isinstance(x, Bcast):
        return f"({x.n},)[{':, None' if x.axis == 'row' else 'None, :'}]"
    return "scalar"


def _operand(main: Tile, other, what: str):
    """(bmode, b address, brs, imm, b footprint) for `other` against the full tile `main`."""
    if isinstance(other, (int, float, np.floating, np.integer)):
        return BMode.SCALAR, None, 0, _imm_bits(other), None
    if isinstance(other, Tile):
        if other.shape == main.shape or (other.ndim != main.ndim and other.rows * other.cols == main.rows * main.cols
                                         and other.rows == main.rows):
            return BMode.FULL, other.base, other.drs, 0, tile_access(other, main.rows, main.cols, other.drs)
        if other.shape == (1,):
            return BMode.ROW, other.base, 0, 0, Access(TMEM, other.base, 1)
    elif isinstance(other, Bcast):
        v = other.tile
        if other.axis == "row" and other.n == main.rows:
            return BMode.ROW, v.base, 1, 0, Access(TMEM, v.base, v.cols)
        if other.axis == "col" and other.n == main.cols:
            return BMode.COL, v.base, 0, 0, Access(TMEM, v.base, v.cols)
    else:
        raise CompileError(f"{what}: cannot use a {type(other).__name__} as an operand")
    raise CompileError(f"shape mismatch in {what}: {_shape(main)} and {_shape(other)}")


def _ranges_overlap(a: Access, b: Access) -> bool:
    """Whether two TMEM footprints may overlap (exact when their bases differ by a constant)."""
    d = a.lo - b.lo
    if d.is_static():
        return -a.n < d.const < b.n
    ba, bb = a.lo.bounds(), b.lo.bounds()
    if ba is not None and bb is not None:
        return ba[0] < bb[1] + b.n and bb[0] < ba[1] + a.n
    return True


def _unsafe_out(out: Tile, reads: list[Access], a: Tile | None, ars: int) -> bool:
    """Whether writing `out` would read something an earlier element of the same VOP wrote."""
    w = tile_access(out)
    for r in reads:
        if not _ranges_overlap(w, r):
            continue
        if a is not None and r.lo == a.base and out.base == a.base and out.drs == ars:
            continue      # exact in-place A: each element reads its own word before writing it
        return True
    return False


def binary(op: str, x, y, out: Tile | None = None, *, where: str | None = None, a_unnamed: bool = False) -> Tile:
    what = where or (f"{_SYMBOL[op]}" if op in _SYMBOL else op)
    if isinstance(x, Bcast) and isinstance(y, Bcast):
        return _outer_bcast(op, x, y, out)
    if not isinstance(x, Tile):
        if not isinstance(y, Tile):
            raise CompileError(f"shape mismatch in {what}: {_shape(x)} and {_shape(y)} (one side must be a tile)")
        x, y, op = y, x, _SWAPPED[op]
    func = VFunc.RSUB if op == "rsub" else _FUNCS[op]
    bmode, b, brs, imm, b_acc = _operand(x, y, what)
    fusion = Fusion(op, weakref.ref(x), bmode, None if b is None else Affine.of(b), brs, b_acc, imm,
                    x.producer if a_unnamed else None, x.fusion if a_unnamed else None)
    return _elementwise(func, x, out, b=b, brs=brs, bmode=bmode, imm=imm, b_access=b_acc, fusion=fusion)


def _outer_bcast(op: str, x: Bcast, y: Bcast, out: Tile | None) -> Tile:
    """u[:, None] op v[None, :]: v is read as A with row stride 0 and u as ROW, so A - B is v - u."""
    if x.axis == y.axis:
        raise CompileError(f"shape mismatch: {_shape(x)} and {_shape(y)} do not make a 2-D tile")
    if x.axis == "row":
        func = VFunc.RSUB if op == "sub" else _FUNCS[op]
        u, v = x.tile, y.tile
    else:
        func = _FUNCS[op]
        u, v = y.tile, x.tile
    a = v.repeat_rows(u.cols)
    return _elementwise(func, a, out, b=u.base, brs=1, bmode=BMode.ROW, imm=0,
                        b_access=Access(TMEM, u.base, u.cols), fusion=None, ars=0)


def _elementwise(func: VFunc, a: Tile, out: Tile | None, *, b=None, brs=0, bmode=BMode.SCALAR, imm=0,
                 b_access=None, fusion=None, ars: int | None = None) -> Tile:
    ars = a.drs if ars is None else ars
    if out is not None and out.shape != a.shape and not (out.rows == a.rows and out.cols == a.cols):
        raise CompileError(f"shape mismatch: result of shape {a.shape} written into a tile of shape {out.shape}")
    reads = [tile_access(a, rs=ars)] + ([b_access] if b_access else [])
    if out is not None and _unsafe_out(out, reads, a, ars):
        tmp = _elementwise(func, a, None, b=b, brs=brs, bmode=bmode, imm=imm, b_access=b_access, ars=ars)
        return copy_into(out, tmp)
    dst = out if out is not None else new_tile(a.shape)
    node = emit_vop(func, dst, a, a.rows, a.cols, ars=ars, b=b, brs=brs, bmode=bmode, imm=imm, b_access=b_access)
    dst.producer, dst.fusion = node, fusion
    return dst


def unary(func: VFunc, x: Tile, out: Tile | None = None) -> Tile:
    if not isinstance(x, Tile):
        raise CompileError(f"{func.name.lower()} needs a tile, not {_shape(x)}")
    return _elementwise(func, x, out, fusion=Fusion(func.name.lower(), weakref.ref(x)))


def copy_into(out: Tile, src: Tile) -> Tile:
    if (out.rows, out.cols) != (src.rows, src.cols):
        raise CompileError(f"shape mismatch: cannot copy a tile of shape {src.shape} into one of shape {out.shape}")
    node = emit_vop(VFunc.COPY, out, src, src.rows, src.cols)
    out.producer, out.fusion = node, Fusion("copy", weakref.ref(src))
    return out


def fill(out: Tile, value) -> Tile:
    node = emit_vop(VFunc.FILL, out, None, out.rows, out.cols, bmode=BMode.SCALAR, imm=_imm_bits(value))
    out.producer, out.fusion = node, None
    return out


def reduce(func: VFunc, x: Tile, *, b=None, brs=0, bmode=BMode.SCALAR, b_access=None,
           out: Tile | None = None) -> Tile:
    """A row reduction: one value per row, into a (rows,) tile ((1,) for a 1-D input) or into
    `out` (a (rows,) tile or a (rows, 1) column view)."""
    if out is None:
        out = new_tile((x.rows,))
    if out.rows * out.cols != x.rows:
        raise CompileError(f"shape mismatch: {x.rows} row results of a tile of shape {x.shape} "
                           f"into a tile of shape {out.shape}")
    drs = (1 if out.ndim == 1 else out.rs) if x.rows > 1 else 0
    node = emit_vop(func, out, x, x.rows, x.cols, b=b, brs=brs, bmode=bmode, b_access=b_access,
                    drs=drs, out_words=(x.rows - 1) * drs + 1)
    out.producer, out.fusion = node, Fusion("reduce", weakref.ref(x))
    return out


def divide(x, y) -> Tile:
    if isinstance(y, (int, float)):
        return binary("mul", x, 1.0 / float(y), where="/")
    if isinstance(x, (int, float)) and isinstance(y, Tile):
        r = unary(VFunc.RECIP, y)
        return r if float(x) == 1.0 else binary("mul", r, x, where="/")
    if isinstance(y, Tile):
        return binary("mul", x, unary(VFunc.RECIP, y), where="/")
    if isinstance(y, Bcast):
        return binary("mul", x, Bcast(unary(VFunc.RECIP, y.tile), y.axis), where="/")
    raise CompileError(f"cannot divide {_shape(x)} by {_shape(y)}")


def matvec(x: Tile, v) -> Tile:
    """x @ v for a 1-D v: one RDOT per row (v against each row)."""
    if isinstance(v, Tile) and v.ndim == 1 and v.cols == x.cols:
        return reduce(VFunc.RDOT, x, b=v.base, brs=0, bmode=BMode.COL, b_access=tile_access(v))
    raise CompileError(f"shape mismatch in @: {_shape(x)} and {_shape(v)} (the right side must be 1-D of {x.cols})")


def assign(t: Tile, value, unnamed: bool = False) -> Tile:
    from . import peephole
    if isinstance(value, (int, float)):
        return fill(t, value)
    if isinstance(value, Bcast):
        bmode, b, brs, imm, b_acc = _operand(t, value, "set")
        node = emit_vop(VFunc.FILL, t, None, t.rows, t.cols, b=b, brs=brs, bmode=bmode, b_access=b_acc)
        t.producer, t.fusion = node, None
        return t
    if not isinstance(value, Tile):
        raise CompileError(f"cannot assign a {type(value).__name__} to a tile")
    if (value.rows, value.cols) != (t.rows, t.cols):
        raise CompileError(f"shape mismatch in set: tile of shape {t.shape} and value of shape {value.shape}")
    if unnamed and peephole.retarget(t, value):
        return t
    return copy_into(t, value)
