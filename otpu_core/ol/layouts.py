"""The layouts of `ol`: where a value lives and in which shape.

- `Tensor`: fp32 in DRAM, row-major; base in bytes, shape, row stride in elements.
- `QTensor`: quantised weight rows in DRAM ([N, K], row stride `rs` bytes) with their scale rows
  (`srs` bytes apart; None = UNIT), in weight format `wf`. A matrix stored as column parts is a
  list of QTensors, one per part.
- `Tile`: fp32 in TMEM; base in words, shape (n,) or (rows, cols), row stride `rs` words.
- `Stationary`: int8 rows in ACT RAM with their scales (per block, or per row with `row`) and,
  with `suboffsets`, a power-of-two offset per D/4 sub-block, as QACT wrote them: row chunks of
  at most act_rows rows, each holding one or more block ranges (`qranges`).
- `Bcast`: a 1-D tile seen per row (`v[:, None]`) or per column (`v[None, :]`); no storage.

Changing layout is always one instruction (load, store, quantize, dot, a VOP).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ..isa import WF_4BIT, WF_INT8X
from .affine import Affine
from .errors import CompileError


def _index(i, n: int, what: str):
    if isinstance(i, int):
        if not -n <= i < n:
            raise CompileError(f"index {i} out of range for {what} of {n}")
        return i % n
    return Affine.of(i)


def _slice(s: slice, n: int, what: str) -> tuple[int, int]:
    if not isinstance(s, slice):
        one = f"{s}:{s + 1}" if isinstance(s, int) else f"{s}:{s} + 1"
        raise CompileError(f"a {what} index must be a slice: t[:, {s}] is not a layout; use t[:, {one}] "
                           "for one column (a (rows, 1) view)")
    if s.step not in (None, 1):
        raise CompileError(f"{what} slices cannot have a step")
    lo, hi, _ = s.indices(n)
    if hi <= lo:
        raise CompileError(f"empty {what} slice [{s.start}:{s.stop}] of {n}")
    return lo, hi


@dataclass(eq=False)
class Tensor:
    """fp32 in DRAM: `base` bytes (affine), `shape`, row stride `rs` in elements."""
    base: Affine
    shape: tuple
    rs: int = 0

    def __post_init__(self):
        self.base = Affine.of(self.base)
        self.shape = tuple(int(s) for s in self.shape)
        if not self.rs:
            self.rs = self.shape[-1]

    @property
    def rows(self) -> int: return self.shape[0] if len(self.shape) == 2 else 1

    @property
    def cols(self) -> int: return self.shape[-1]

    def __getitem__(self, key) -> "Tensor":
        if not isinstance(key, tuple):
            key = (key,)
        if len(self.shape) == 1:
            if len(key) != 1:
                raise CompileError(f"a 1-D tensor of shape {self.shape} takes one index, got {len(key)}")
            k = key[0]
            if isinstance(k, slice):
                lo, hi = _slice(k, self.cols, "tensor")
                return Tensor(self.base + 4 * lo, (hi - lo,))
            return Tensor(self.base + 4 * _index(k, self.cols, "tensor"), (1,))
        r = key[0]
        c = key[1] if len(key) > 1 else slice(None)
        c0, c1 = _slice(c, self.cols, "tensor column")
        if isinstance(r, slice):
            r0, r1 = _slice(r, self.rows, "tensor row")
            return Tensor(self.base + 4 * (r0 * self.rs + c0), (r1 - r0, c1 - c0), self.rs)
        return Tensor(self.base + 4 * (_index(r, self.rows, "tensor row") * self.rs + c0), (c1 - c0,))

    def window(self, r0, rows: int, c0, cols: int) -> "Tensor":
        """Rows [r0, r0+rows) and columns [c0, c0+cols); r0 and c0 may be affine (loop chunks)."""
        if len(self.shape) == 1:
            return Tensor(self.base + 4 * Affine.of(c0), (cols,))
        return Tensor(self.base + 4 * (Affine.of(r0) * self.rs + Affine.of(c0)), (rows, cols), self.rs)


@dataclass(eq=False)
class QTensor:
    """Quantised weight rows [N, K] in DRAM: data at `data` (bytes), scales at `scale` (None = UNIT)."""
    data: Affine
    scale: Affine | None
    shape: tuple
    rs: int
    srs: int
    wf: int
    D: int
    part_stride: tuple = (0, 0)   # (data, scale) bytes between column parts, for `part(c)`

    def __post_init__(self):
        self.data = Affine.of(self.data)
        self.scale = None if self.scale is None else Affine.of(self.scale)
        self.shape = tuple(int(s) for s in self.shape)

    @property
    def N(self) -> int: return self.shape[0]

    @property
    def K(self) -> int: return self.shape[1]

    @property
    def kb(self) -> int: return -(-self.K // self.D)

    @property
    def four_bit(self) -> bool: return self.wf in WF_4BIT

    def block_bytes(self) -> int: return self.D // 2 if self.four_bit else self.D

    def row_bytes(self, kb: int | None = None) -> int:
        kb = self.kb if kb is None else kb
        return -(-(kb * self.block_bytes()) // self.D) * self.D

    def part(self, c) -> "QTensor":
        """Column part c (affine: a loop over parts) of a matrix stored as equal column parts."""
        if not self.part_stride[0]:
            raise CompileError("this weight is not stored as column parts")
        c = Affine.of(c)
        return QTensor(self.data + c * self.part_stride[0],
                       None if self.scale is None else self.scale + c * self.part_stride[1],
                       self.shape, self.rs, self.srs, self.wf, self.D)

    def rows(self, n0, n: int) -> "QTensor":
        """Rows [n0, n0+n); n0 may be affine (a loop over row chunks)."""
        if isinstance(n0, int) and not (0 <= n0 and n0 + n <= self.N):
            raise CompileError(f"rows [{n0}, {n0 + n}) out of range for a weight of shape {self.shape}")
        n0 = Affine.of(n0)
        return QTensor(self.data + n0 * self.rs, None if self.scale is None else self.scale + n0 * self.srs,
                       (n, self.K), self.rs, self.srs, self.wf, self.D)

    def blocks(self, kb0: int, kb: int) -> "QTensor":
        """K blocks [kb0, kb0+kb); a 4-bit matrix may only start on an even block (whole chunks)."""
        if kb0 < 0 or kb0 + kb > self.kb:
            raise CompileError(f"K blocks [{kb0}, {kb0 + kb}) out of range for a weight of shape {self.shape}")
        if self.four_bit and kb0 % 2:
            raise CompileError(f"a 4-bit weight slice must start on an even block, not block {kb0}")
        if kb0 and self.wf == WF_INT8X:
            raise CompileError("an int8x weight's scale row cannot be sliced by blocks")
        return QTensor(self.data + kb0 * self.block_bytes(), None if self.scale is None else self.scale + 4 * kb0,
                       (self.N, min(self.K - kb0 * self.D, kb * self.D)), self.rs, self.srs, self.wf, self.D)


class Tile:
    """fp32 words in TMEM. Views share the buffer; storage is freed when no view refers to it."""

    def __init__(self, buf, base, shape: tuple, rs: int | None = None):
        self.buf = buf
        self.base = Affine.of(base)
        self.shape = tuple(int(s) for s in shape)
        if len(self.shape) not in (1, 2) or min(self.shape) < 1:
            raise CompileError(f"a tile has shape (n,) or (rows, cols) with positive sizes, not {self.shape}")
        self.rs = self.shape[-1] if rs is None else int(rs)
        self.producer = None      # the Node that wrote this tile last, while it is a fresh temporary
        self.fusion = None        # what a peephole needs to undo that node (kind, operands...)
        self.rowmax_of = None     # for `dot` outputs: (MM node, version) that can carry RMAX

    # -- shape ----------------------------------------------------------------------------
    @property
    def ndim(self) -> int: return len(self.shape)

    @property
    def rows(self) -> int: return self.shape[0] if self.ndim == 2 else 1

    @property
    def cols(self) -> int: return self.shape[-1]

    @property
    def drs(self) -> int:
        """Row stride as a VOP field: 0 for a 1-D tile."""
        return self.rs if self.ndim == 2 else 0

    @property
    def span(self) -> int:
        """Words from the base to past the last element."""
        return (self.rows - 1) * self.rs + self.cols

    @property
    def contiguous(self) -> bool: return self.ndim == 1 or self.rows == 1 or self.rs == self.cols

    def view(self, base, shape, rs=None) -> "Tile":
        return Tile(self.buf, base, shape, rs)

    def __repr__(self) -> str: return f"Tile(shape={self.shape}, base={self.base}, rs={self.rs})"

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if None in key:
            return self._bcast(key)
        if self.ndim == 1:
            if len(key) != 1:
                raise CompileError(f"a 1-D tile of shape {self.shape} takes one index, got {len(key)}")
            k = key[0]
            if isinstance(k, slice):
                lo, hi = _slice(k, self.cols, "tile")
                return self.view(self.base + lo, (hi - lo,))
            return self.view(self.base + _index(k, self.cols, "tile"), (1,))
        r = key[0]
        c = key[1] if len(key) > 1 else slice(None)
        c0, c1 = _slice(c, self.cols, "tile column")
        if isinstance(r, slice):
            r0, r1 = _slice(r, self.rows, "tile row")
            return self.view(self.base + r0 * self.rs + c0, (r1 - r0, c1 - c0), self.rs)
        return self.view(self.base + _index(r, self.rows, "tile row") * self.rs + c0, (c1 - c0,))

    def _bcast(self, key) -> "Bcast":
        if self.ndim != 1 or len(key) != 2:
            raise CompileError(f"broadcast views need a 1-D tile and [:, None] or [None, :], got shape {self.shape}")
        if key[1] is None and key[0] == slice(None):
            return Bcast(self, "row")
        if key[0] is None and key[1] == slice(None):
            return Bcast(self, "col")
        raise CompileError("broadcast views are v[:, None] (one value per row) or v[None, :] (per column)")

    def reshape(self, *shape) -> "Tile":
        if len(shape) == 1 and isinstance(shape[0], tuple):
            shape = shape[0]
        if not self.contiguous:
            raise CompileError(f"only a contiguous tile can be reshaped; this one has row stride {self.rs}")
        n = self.rows * self.cols
        m = 1
        for s in shape:
            m *= s
        if m != n:
            raise CompileError(f"cannot reshape a tile of shape {self.shape} to {tuple(shape)}")
        return self.view(self.base, tuple(shape))

    def repeat_rows(self, n: int) -> "Tile":
        """A 1-D tile seen as n identical rows (row stride 0)."""
        if self.ndim != 1:
            raise CompileError(f"repeat_rows needs a 1-D tile, not shape {self.shape}")
        return self.view(self.base, (n, self.cols), 0)

    @property
    def rowmax(self) -> "Tile":
        """The row maxima an MM RMAX epilogue wrote after a `dot(..., rowmax=True)` output."""
        if getattr(self, "_rowmax", None) is None:
            raise CompileError("this tile has no row maxima: produce it with dot(..., rowmax=True)")
        return self._rowmax

    # -- arithmetic (VOPs) ------------------------------------------------------------------
    def __add__(self, o): return vector.binary("add", self, o)

    def __radd__(self, o): return vector.binary("add", o, self)

    def __sub__(self, o): return vector.binary("sub", self, o)

    def __rsub__(self, o): return vector.binary("sub", o, self)

    def __mul__(self, o):
        unnamed = sys.getrefcount(self) <= vector.OPERATOR_TEMP_REFS   # before self is passed on
        return vector.binary("mul", self, o, a_unnamed=unnamed)

    def __rmul__(self, o): return vector.binary("mul", o, self)

    def __truediv__(self, o): return vector.divide(self, o)

    def __neg__(self): return vector.binary("mul", self, -1.0)

    def __matmul__(self, o): return vector.matvec(self, o)

    def __iadd__(self, o): return vector.binary("add", self, o, out=self)

    def __isub__(self, o): return vector.binary("sub", self, o, out=self)

    def __imul__(self, o): return vector.binary("mul", self, o, out=self)

    def set(self, value) -> "Tile":
        """Write `value` (a tile, a broadcast or a number) into this tile in place."""
        unnamed = sys.getrefcount(value) <= vector.ARG_TEMP_REFS
        return vector.assign(self, value, unnamed=unnamed)


@dataclass(eq=False)
class Bcast:
    """A 1-D tile read per row (`axis="row"`: B(r, c) = v[r]) or per column (B(r, c) = v[c])."""
    tile: Tile
    axis: str

    @property
    def n(self) -> int: return self.tile.cols

    def __repr__(self) -> str:
        return f"{'v[:, None]' if self.axis == 'row' else 'v[None, :]'} of {self.n}"

    def __add__(self, o): return vector.binary("add", self, o)

    def __radd__(self, o): return vector.binary("add", o, self)

    def __sub__(self, o): return vector.binary("sub", self, o)

    def __rsub__(self, o): return vector.binary("sub", o, self)

    def __mul__(self, o): return vector.binary("mul", self, o)

    def __rmul__(self, o): return vector.binary("mul", o, self)


@dataclass(eq=False)
class QRange:
    """K blocks [kb0, kb0+kb) of a Stationary, held at ACT RAM blocks [ab, ab+kb)."""
    kb0: int
    ab: int
    kb: int
    token: int


@dataclass(eq=False)
class Chunk:
    """Rows [r0, r0+rows) of a Stationary, as one or more block ranges."""
    r0: int
    rows: int
    qranges: list = field(default_factory=list)


@dataclass(eq=False)
class Stationary:
    """int8 activations in ACT RAM with their scales and (with `suboffsets`) sub-block offsets:
    shape (M, K), K = KB*D."""
    M: int
    KB: int
    D: int
    chunks: list
    dup: bool = False
    owner: object = None      # keeps the ACT RAM blocks alive while any view lives
    row: bool = False         # one scale per row (QACT ROW), as the seed weight formats need
    suboffsets: bool = False  # QACT SUB also wrote a power-of-two offset per D/4 sub-block (implies row)

    @property
    def K(self) -> int: return self.KB * self.D

    @property
    def shape(self) -> tuple: return (self.M, self.K)

    def blocks(self, kb0: int, kb: int) -> "Stationary":
        """A view of K blocks [kb0, kb0+kb)."""
        if kb0 < 0 or kb < 1 or kb0 + kb > self.KB:
            raise CompileError(f"K blocks [{kb0}, {kb0 + kb}) out of range for an activation of shape {self.shape}")
        chunks = []
        for ch in self.chunks:
            qr = []
            for q in ch.qranges:
                lo, hi = max(q.kb0, kb0), min(q.kb0 + q.kb, kb0 + kb)
                if lo < hi:
                    qr.append(QRange(lo - kb0, q.ab + lo - q.kb0, hi - lo, q.token))
            chunks.append(Chunk(ch.r0, ch.rows, qr))
        return Stationary(self.M, kb, self.D, chunks, self.dup, self.owner or self, self.row, self.suboffsets)


from . import vector  # noqa: E402  (operators above dispatch to the VOP lowering)
