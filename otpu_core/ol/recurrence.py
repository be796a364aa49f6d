"""The linear-recurrence operations: DSTEP and STREAM (state in DRAM, through the stream engine) and OUTER.

- `dstep(state, qk, v, gates, out=None, zero=False)`: one Gated DeltaNet head step on an fp32
  state [rows, cols] in DRAM, updated in place (reference isa.md 3.4). `qk` holds q then k
  (2*cols words), `v` rows words, `gates` the decay and beta: a (2,) tile or a (2, 1) column
  view of a gate table (beta is then `rs` words after the decay: DSTEP's gs).
- `stream(desc, src=, dst=, slots=, x=, consts=, out=)`: the descriptor-programmed row stream
  (isa.StreamDesc, reference 3.8). A Tensor source or destination is DRAM, a Tile is TMEM,
  None is SZERO (reads +0) or NODST (no write-back). Descriptors live in the STREAM_DESC_AREA
  words at the top of (the 16-bit addressable part of) TMEM: each distinct one gets an 8-word
  aligned slot, written once by FILL VOPs at the start of the program (descriptor words are
  float-safe, so FILL keeps them). The area is claimed at the first `stream` call and must not
  have been used by then.
- `outer(acc, u, v, decay=None)`: acc = acc * decay + u[:, None] * v[None, :] in place, one VOP
  OUTER (decay None: 1, a (1,) tile: one scalar, a (cols,) tile: per column).

Each checks its target feature (a target without DSTEP or STREAM refuses at compile time; a
target whose stream engine runs only the hardware subset, `Target.stream_subset`, refuses a
descriptor outside `isa.stream_hw_cfg`),
shapes and the fields the hardware takes as absolute addresses. Footprints are exact; on a
SEQ_WC target a STREAM also carries the conservative ranges the timing model checks wait
entries against (reference 7), so its wait entries order everything the card's scoreboard would.
"""
from __future__ import annotations

from .. import isa
from ..isa import BMode, VFunc
from .affine import Affine
from .builder import current
from .errors import CompileError, source_chain, source_line
from .ir import DRAM, TMEM, Access, Node
from .layouts import Tensor, Tile
from .vector import _ranges_overlap, new_tile

DESC_SLOT = 8                 # descriptor slots are 8-word aligned
DESC_FIELD_LIMIT = 1 << 16    # STREAM w1[15:0]: the descriptor address is 16 bits
STREAM_CONSERVATIVE = 256     # the rows / cols bound of the timing model's STREAM footprint (reference 7)


def has_dstep() -> bool: return current().cfg.DSTEP


def has_stream() -> bool: return current().cfg.STREAM


def _need(feature: str, what: str) -> None:
    cfg = current().cfg
    if not getattr(cfg, feature):
        raise CompileError(f"{what} needs a target with {feature}; this target has {feature} = false",
                           hint=f"use the VOP form on targets without {feature}")


def _static(t: Tile, what: str) -> int:
    if not t.base.is_static():
        raise CompileError(f"{what}: the hardware takes this TMEM address as an absolute field, so it cannot "
                           f"depend on a loop or run-time value ({t.base})")
    return t.base.const


def _aligned(a: Affine, d: int) -> bool:
    """Every value of `a` is a multiple of d (a device value counts by the multiple its RLD's scale keeps)."""
    return a.const % d == 0 and all(c * getattr(v, "align", 1) % d == 0 for v, c in a.terms.items())


def _words(t: Tile, n: int, what: str) -> None:
    if not isinstance(t, Tile):
        raise CompileError(f"{what} must be a tile, not {type(t).__name__}")
    if t.rows * t.cols != n or not t.contiguous:
        raise CompileError(f"{what} must be {n} contiguous words, not a tile of shape {t.shape} (row stride {t.rs})")


def _gate_pair(t: Tile, what: str) -> tuple[int, int]:
    """(address of the first value, stride to the second) of a (2,) tile or a (2, 1) column view."""
    if not isinstance(t, Tile):
        raise CompileError(f"{what} must be a tile, not {type(t).__name__}")
    if t.shape == (2,):
        return _static(t, what), 1
    if t.ndim == 2 and t.rows == 2 and t.cols == 1:
        return _static(t, what), t.rs
    raise CompileError(f"{what} must be a (2,) tile or a (2, 1) column view (decay and beta), not shape {t.shape}")


def _state_tensor(s: Tensor, rows: int | None, cols: int | None, what: str) -> tuple[int, int]:
    if not isinstance(s, Tensor) or len(s.shape) != 2:
        got = getattr(s, "shape", type(s).__name__)
        raise CompileError(f"{what} must be a 2-D DRAM Tensor (rows, cols), not {got}")
    if s.rs != s.cols:
        raise CompileError(f"{what} must be contiguous rows (row stride {s.rs}, {s.cols} columns)")
    if (rows, cols) != (None, None) and (s.rows, s.cols) != (rows, cols):
        raise CompileError(f"shape mismatch: {what} of shape {s.shape}, the step is ({rows}, {cols})")
    D = current().cfg.D
    if not _aligned(s.base, D):
        raise CompileError(f"{what}: the state address {s.base} must be a multiple of D={D} bytes")
    return s.rows, s.cols


# -- DSTEP ---------------------------------------------------------------------------------------
def dstep(state: Tensor, qk: Tile, v: Tile, gates: Tile, out: Tile | None = None, zero: bool = False) -> Tile:
    """One Gated DeltaNet head step: S = S*e + ((v - (S k)*e) * beta) k^T in place in DRAM and
    o = S q (rows words, returned; written into `out` when given). `zero` starts from S = +0
    without reading DRAM (DZERO)."""
    _need("DSTEP", "dstep")
    rows, cols = _state_tensor(state, None, None, "dstep state")
    if not 1 <= rows <= isa.DSTEP_MAX_ROWS or cols not in isa.DSTEP_COLS:
        raise CompileError(f"dstep state of shape {state.shape}: rows 1..{isa.DSTEP_MAX_ROWS}, "
                           f"cols one of {isa.DSTEP_COLS}")
    _words(qk, 2 * cols, "dstep qk (q then k)")
    _words(v, rows, "dstep v")
    g, gs = _gate_pair(gates, "dstep gates")
    if out is None:
        out = new_tile((rows,))
    _words(out, rows, "dstep out")
    o = _static(out, "dstep out")
    nbytes = 4 * rows * cols
    reads = [Access(TMEM, qk.base, 2 * cols), Access(TMEM, v.base, rows), Access(TMEM, Affine(g), 1),
             Access(TMEM, Affine(g + gs), 1)]
    if not zero:
        reads.append(Access(DRAM, state.base, nbytes))
    writes = [Access(DRAM, state.base, nbytes), Access(TMEM, Affine(o), rows)]
    current().emit(Node("DSTEP", {"state": state.base, "qk": qk.base, "v": v.base},
                        {"rows": rows, "cols": cols, "g": g, "o": o, "gs": gs, "dzero": bool(zero)}, reads, writes))
    out.buf.version += 1
    out.producer = out.fusion = None
    return out


# -- STREAM --------------------------------------------------------------------------------------
class _DescArea:
    """The top-of-TMEM descriptor slots of one program: descriptor words -> TMEM address."""

    def __init__(self, lo: int):
        self.lo, self.next, self.slots, self.fills = lo, lo, {}, 0

    def place(self, words: tuple[int, ...]) -> int:
        addr = self.slots.get(words)
        if addr is not None:
            return addr
        size = -(-len(words) // DESC_SLOT) * DESC_SLOT
        if self.next + size > self.lo + isa.STREAM_DESC_AREA:
            raise CompileError(f"the STREAM descriptor area ({isa.STREAM_DESC_AREA} words) is full: "
                               f"{len(self.slots)} distinct descriptors placed",
                               hint="use fewer distinct descriptors (equal ones share a slot)")
        addr, self.next = self.next, self.next + size
        self.slots[words] = addr
        b = current()
        where, chain = source_line(), source_chain()
        for i, w in enumerate(words):
            node = Node("VOP", {"dst": Affine(addr + i), "a": Affine(0), "b": Affine(0), "imm": Affine(int(w))},
                        {"func": VFunc.FILL, "rows": 1, "cols": 1, "drs": 0, "ars": 0, "brs": 0,
                         "bmode": BMode.SCALAR}, [], [Access(TMEM, Affine(addr + i), 1)], where=where, chain=chain)
            b.root.insert(self.fills, node)      # at the program start: loops do not refill them
            self.fills += 1
        return addr


def _desc_area() -> _DescArea:
    b = current()
    area = b.stream_area
    if area is None:
        lo = min(b.cfg.TMEM_WORDS, DESC_FIELD_LIMIT) - isa.STREAM_DESC_AREA
        if b.tmem.peak > lo:
            raise CompileError(f"STREAM descriptors live in TMEM words {lo}..{lo + isa.STREAM_DESC_AREA - 1}, which "
                               f"this program used before its first stream (TMEM peak {b.tmem.peak})",
                               hint="issue a stream before the big allocations, or use less TMEM")
        b.tmem.reserve(lo, isa.STREAM_DESC_AREA)
        area = b.stream_area = _DescArea(lo)
    return area


def _stream_operand(t, rows: int, cols: int, rs_field: int, what: str):
    """(address, in TMEM, footprint) of a stream source or destination."""
    if isinstance(t, Tensor):
        if len(t.shape) != 2 or (t.rows, t.cols) != (rows, cols) or t.rs != cols:
            raise CompileError(f"stream {what}: a DRAM Tensor of contiguous rows ({rows}, {cols}), not shape "
                               f"{t.shape} (row stride {t.rs})")
        D = current().cfg.D
        if not _aligned(t.base, D):
            raise CompileError(f"stream {what}: the DRAM address {t.base} must be a multiple of D={D} bytes")
        return t.base, False, Access(DRAM, t.base, 4 * rows * cols)
    if isinstance(t, Tile):
        rs = rs_field or cols
        if (t.rows, t.cols) != (rows, cols) or (rows > 1 and t.rs != rs):
            raise CompileError(f"stream {what}: a TMEM tile ({rows}, {cols}) with row stride {rs}, not shape "
                               f"{t.shape} (row stride {t.rs})")
        return t.base, True, Access(TMEM, t.base, (rows - 1) * rs + cols)
    raise CompileError(f"stream {what} must be a DRAM Tensor, a TMEM Tile or None, not {type(t).__name__}")


def _desc_uses(desc: isa.StreamDesc) -> tuple[set, set, bool]:
    """(column slots, constants, whether X is read) a descriptor uses (reference 3.8 step 3)."""
    slots = desc.slots()
    operands = [o[2] for o in desc.ops] + [o[3] for o in desc.ops if o[0] not in isa.SOP_UNARY]
    consts = {c - isa.OP_K0 for c in operands if isa.OP_K0 <= c < isa.OP_ZERO}
    consts |= {j for j in range(4) if (desc.rinit | desc.rsave) >> j & 1}
    if desc.a_en and desc.a_op == isa.A_CONST:
        consts.add(desc.a_idx)
    if desc.u_mode in (isa.U_FMMA, isa.U_MUL) and desc.g_src == isa.G_CONST:
        consts.add(desc.g_idx)
    if desc.u_mode in (isa.U_FMMA, isa.U_ADD) and desc.b_src == isa.BS_CONST:
        consts.add(desc.b_idx)
    return slots, {j for j in consts if j < isa.STREAM_SLOTS}, isa.OP_X in operands


def _consts(t: Tile | None, need: set) -> tuple[Affine, int, int]:
    """(base, ks, count) of the constants K_j = T[k + j*ks]: a 1-D tile (ks = 1) or an (n, 1) column view."""
    if not need:
        return (t.base if isinstance(t, Tile) else Affine(0)), 1, 0
    if not isinstance(t, Tile):
        raise CompileError(f"the stream descriptor reads constants K{', K'.join(map(str, sorted(need)))}: "
                           f"pass consts= (a 1-D tile, or an (n, 1) column view)")
    n, ks = (t.cols, 1) if t.ndim == 1 else (t.rows, t.rs)
    if t.ndim == 2 and t.cols != 1:
        raise CompileError(f"stream consts: a 1-D tile or an (n, 1) column view, not shape {t.shape}")
    if max(need) >= n:
        raise CompileError(f"stream consts: the descriptor reads K{max(need)}, the tile holds {n} constants")
    if ks >= 1 << 16:
        raise CompileError(f"stream consts: a stride of {ks} words does not fit STREAM's 16-bit ks field")
    return t.base, ks, n


def stream(desc: isa.StreamDesc, *, src=None, dst=None, slots: Tile | None = None, x: Tile | None = None,
           consts: Tile | None = None, out: Tile | None = None) -> Tile | None:
    """One STREAM over `desc.rows` x `desc.cols` state rows. `slots` holds the column vectors
    (slot i at i*cols words), `x` the row scalars, `consts` K0..K3, `out` the row outputs (q_en or
    o_reg_en; allocated when not given). Returns `out` (None when the descriptor writes none)."""
    _need("STREAM", "stream")
    if not isinstance(desc, isa.StreamDesc):
        raise CompileError(f"stream needs an isa.StreamDesc, not {type(desc).__name__}")
    rows, cols = desc.rows, desc.cols
    if rows < 1 or cols < 1:
        raise CompileError(f"stream descriptor of rows={rows} cols={cols}: both must be at least 1")
    if desc.q_en and desc.o_reg_en:
        raise CompileError("stream descriptor sets both q_en and o_reg_en; it has one row output")
    if src is None and dst is None and not (desc.q_en or desc.o_reg_en or desc.rsave):
        raise CompileError("stream with no source, no destination and no outputs computes nothing")
    used_slots, used_consts, uses_x = _desc_uses(desc)
    reads, writes, addrs, flags = [], [], {}, {}
    base = None
    if src is None:
        flags["szero"] = True
    else:
        a, in_t, acc = _stream_operand(src, rows, cols, desc.srs, "source")
        flags["src_t"], addrs["src"], base = in_t, a, a
        reads.append(acc)
    if dst is None:
        flags["nodst"] = True
    else:
        a, in_t, acc = _stream_operand(dst, rows, cols, desc.drs, "destination")
        flags["dst_t"], addrs["dst"] = in_t, a
        if base is not None and not (a - base).is_static():
            raise CompileError(f"stream source {base} and destination {a} share one address register (ra): "
                               "their addresses must differ by a constant")
        base = a if base is None else base
        writes.append(acc)
    # an unused stream address takes the used one's register part, so the shared ra stays right
    anchor = Affine(0, base.terms) if base is not None else Affine(0)
    addrs.setdefault("src", anchor)
    addrs.setdefault("dst", anchor)
    if used_slots:
        if max(used_slots) >= isa.STREAM_SLOTS:
            raise CompileError(f"stream descriptor names column slot {max(used_slots)}; there are {isa.STREAM_SLOTS}")
        need = (max(used_slots) + 1) * cols
        if not isinstance(slots, Tile) or slots.rows * slots.cols < need or not slots.contiguous:
            raise CompileError(f"the stream descriptor reads column slots {sorted(used_slots)}: pass slots= "
                               f"({need} contiguous words, slot i at i*{cols})")
        reads.append(Access(TMEM, slots.base, need))
    addrs["vec"] = slots.base if isinstance(slots, Tile) and used_slots else Affine(0)
    if uses_x:
        if not isinstance(x, Tile) or x.rows * x.cols != rows or not x.contiguous:
            raise CompileError(f"the stream descriptor reads X: pass x= ({rows} contiguous words, one per row)")
        reads.append(Access(TMEM, x.base, rows))
    addrs["x"] = x.base if isinstance(x, Tile) and uses_x else Affine(0)
    kbase, ks, _ = _consts(consts, used_consts)
    addrs["k"] = kbase if used_consts else Affine(0)
    for j in sorted(used_consts):
        reads.append(Access(TMEM, kbase + j * ks, 1))
        if desc.rsave >> j & 1:
            writes.append(Access(TMEM, kbase + j * ks, 1))
    o = 0
    if desc.q_en or desc.o_reg_en:
        if out is None:
            out = new_tile((rows,))
        _words(out, rows, "stream out")
        o = _static(out, "stream out")
        writes.append(Access(TMEM, Affine(o), rows))
    else:
        out = None
    _check_subset(desc, flags)
    words = tuple(int(w) for w in desc.encode())
    d = _desc_area().place(words)
    reads.append(Access(TMEM, Affine(d), len(words)))
    b = current()
    if b.cfg.SEQ_WC:
        reads, writes = _conservative(reads, writes, d, addrs, flags, ks, o)
    b.emit(Node("STREAM", addrs, {"desc": d, "ks": ks, "out": o, **{k: bool(v) for k, v in flags.items()}},
                reads, writes))
    if out is not None:
        out.buf.version += 1
        out.producer = out.fusion = None
    if isinstance(dst, Tile):
        dst.buf.version += 1
        dst.producer = dst.fusion = None
    return out


def _check_subset(desc: isa.StreamDesc, flags: dict) -> None:
    """On a target whose stream engine runs only the hardware subset (a card's, the RTL's), refuse a
    descriptor outside it: the golden simulator would run it, the machine would not."""
    if not current().stream_subset:
        return
    bits = {"szero": isa.F_SZERO, "src_t": isa.F_SRC_T, "dst_t": isa.F_DST_T, "nodst": isa.F_NODST}
    if isa.stream_hw_cfg(desc, sum(m for k, m in bits.items() if flags.get(k))) is None:
        raise CompileError(f"stream descriptor {desc} (flags {sorted(k for k in bits if flags.get(k))}) is outside "
                           "the stream engine's hardware subset, the only STREAMs this target runs",
                           hint="isa.stream_hw_cfg says what the subset is (state_desc builds one); "
                                "use VOPs (OUTER, RDOT) for the general form")


def _conservative(reads: list, writes: list, d: int, addrs: dict, flags: dict, ks: int, o: int):
    """The footprint the timing model gives every STREAM (sim/costs.py `_stream`), added to the exact one."""
    m = STREAM_CONSERVATIVE
    reads = reads + [Access(TMEM, Affine(d), 8), Access(TMEM, addrs["vec"], isa.STREAM_SLOTS * m),
                     Access(TMEM, addrs["x"], m), Access(TMEM, addrs["k"], 3 * ks + 1)]
    writes = writes + [Access(TMEM, Affine(o), m)]
    if not flags.get("szero"):
        reads.append(Access(TMEM, addrs["src"], m * m) if flags.get("src_t") else Access(DRAM, addrs["src"], 4 * m * m))
    if not flags.get("nodst"):
        writes.append(Access(TMEM, addrs["dst"], m * m) if flags.get("dst_t")
                      else Access(DRAM, addrs["dst"], 4 * m * m))
    return reads, writes


# -- OUTER ---------------------------------------------------------------------------------------
def outer(acc: Tile, u: Tile, v: Tile, decay: Tile | None = None) -> Tile:
    """acc = acc * decay + u[:, None] * v[None, :] in place (one VOP OUTER); returns acc."""
    if not all(isinstance(t, Tile) for t in (acc, u, v)):
        raise CompileError("outer takes tiles: acc (rows, cols), u (rows,), v (cols,)")
    rows, cols = acc.rows, acc.cols
    if u.rows * u.cols != rows or v.rows * v.cols != cols or not v.contiguous:
        raise CompileError(f"shape mismatch in outer: acc {acc.shape}, u {u.shape}, v {v.shape}")
    if cols > isa.OUTER_MAX_COLS:
        raise CompileError(f"outer handles at most {isa.OUTER_MAX_COLS} columns, not {cols}")
    brs = 1 if u.ndim == 1 else u.rs
    if u.ndim == 2 and u.cols != 1:
        raise CompileError(f"outer u must be (rows,) or a (rows, 1) column view, not {u.shape}")
    imm = {"dscalar": False, "done": decay is None}
    reads = [Access(TMEM, acc.base, acc.span), Access(TMEM, v.base, cols), Access(TMEM, u.base, (rows - 1) * brs + 1)]
    a = Affine(0)
    if decay is not None:
        if decay.shape == (1,):
            imm["dscalar"] = True
            reads.append(Access(TMEM, decay.base, 1))
        elif decay.rows * decay.cols == cols and decay.contiguous:
            reads.append(Access(TMEM, decay.base, cols))
        else:
            raise CompileError(f"outer decay: a (1,) tile or ({cols},) per column, not {decay.shape}")
        a = decay.base
    for r in reads[1:]:
        if _ranges_overlap(Access(TMEM, acc.base, acc.span), r):
            raise CompileError("outer: u, v and decay must not overlap the accumulator it updates in place")
    current().emit(Node("VOP", {"dst": acc.base, "a": a, "b": u.base, "imm": v.base},
                        {"func": VFunc.OUTER, "rows": rows, "cols": cols, "drs": acc.drs, "ars": 0, "brs": brs,
                         "bmode": BMode.ROW, **imm}, reads, [Access(TMEM, acc.base, acc.span)]))
    acc.buf.version += 1
    acc.producer = acc.fusion = None
    return acc


__all__ = ["has_dstep", "has_stream", "dstep", "stream", "outer"]
