"""The openTPU instruction set: opcodes, field layouts, encode/decode, program images, wait entries.

Every instruction is 8 little-endian 32-bit words. w0 holds the opcode [7:0], four register
slots ra [11:8], rb [15:12], rc [19:16], rd [23:20] and 8 flag bits [31:24]; w1..w7 are
immediates. Each opcode's layout is one `Layout` table entry (a list of `Field`s), so encoding,
decoding, reserved-bit checks, register-relative address resolution and the assembler all read
the same description. The public card's encoding (shared/reference/isa.md section 2) is kept bit
for bit; the project's extensions (seed weight formats WF=3/4, the QACT SUB flag, the WAITC wait entry) are defined
here and documented in docs/isa.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from typing import Iterable, Mapping, Sequence

import numpy as np

from . import fp32
from .errors import UsageError

WORDS_PER_INSTR = 8
BYTES_PER_INSTR = 4 * WORDS_PER_INSTR
NREGS = 16
ARG0 = 8                 # R8..R15 hold ARG0..ARG7 at the start of a run
NARGS = 8
LOOP_DEPTH = 4           # hardware loop stack depth
OUTER_MAX_COLS = 256
DSTEP_MAX_ROWS = 256
DSTEP_LANES = 8          # timing only
DSTEP_COLS = (64, 128, 192, 256)
STREAM_SLOTS = 4
STREAM_MAX_OPS = 15
STREAM_DESC_FIXED = 5    # descriptor words before the scalar ops
STREAM_DESC_AREA = 64    # TMEM words the compiler reserves at the top when Config.STREAM
MXU_FIFO_CHUNKS = 1024   # board MXU chunk FIFO
BOARD_IMEM_INSTRS = 4096
NSUB = 4                 # sub-blocks of D/4 elements per D-block (4-bit weights, QACT SUB offsets)
SUB_EXP_BITS = 3         # QACT SUB: bits of one sub-block offset e
SUB_EXP_MAX = 7          # QACT SUB: the cap E of e; MM shifts a sub-block's partial by E - e
MASK32 = 0xFFFFFFFF


class IsaError(UsageError):
    """An instruction or program image that is not legal: the message names the word and why."""


class Op(IntEnum):
    NOP = 0x00
    HALT = 0x01
    LI = 0x02
    ADDI = 0x03
    LOOP = 0x04
    BAR = 0x05
    RLD = 0x06
    WAITW = 0x07
    LD = 0x10
    ST = 0x11
    DSTEP = 0x12
    STREAM = 0x13
    MM = 0x20
    QACT = 0x21
    QST = 0x22
    VOP = 0x30
    GATHER = 0x40


class Unit(IntEnum):
    """RTL unit classes (rtl/core/otpu_defs.svh `unit_of`); SEQ runs in the sequencer itself."""
    DMA = 0
    MXU = 1
    Q = 2
    VPU = 3
    COLL = 4
    SEQ = 5


UNIT_OF = {Op.NOP: Unit.SEQ, Op.HALT: Unit.SEQ, Op.LI: Unit.SEQ, Op.ADDI: Unit.SEQ, Op.LOOP: Unit.SEQ,
           Op.BAR: Unit.COLL, Op.RLD: Unit.SEQ, Op.WAITW: Unit.DMA, Op.LD: Unit.DMA, Op.ST: Unit.DMA,
           Op.DSTEP: Unit.DMA, Op.STREAM: Unit.DMA, Op.MM: Unit.MXU, Op.QACT: Unit.Q, Op.QST: Unit.Q,
           Op.VOP: Unit.VPU, Op.GATHER: Unit.COLL}

# --- flags (bit masks within the 8-bit flags byte, w0[31:24]) ---------------------------------
F_CHAIN = 0x01                                   # HALT
F_RAW, F_MUL = 0x01, 0x02                        # RLD
C_EQ, C_NE, C_GE = 0, 1, 2                       # WAITW compare, flags[1:0]
F_DZERO = 0x01                                   # DSTEP
F_SZERO, F_SRC_T, F_DST_T, F_NODST = 0x01, 0x02, 0x04, 0x08   # STREAM
F_UNIT, F_ACC, F_RMAX, F_ASCALE, F_PAIR = 0x01, 0x02, 0x04, 0x08, 0x40   # MM
WF_SHIFT = 4                                     # MM WF[1:0] = flags[5:4]; WF[2] = flags[7] (project)
WF_HI_FLAG = 0x80
F_ROW, F_CSCALE, F_RSCALE, F_DUP = 0x01, 0x02, 0x04, 0x08     # QACT (QST: ROW, HALF)
F_SUB = 0x10                                     # QACT (project): per-sub-block offsets, needs ROW
F_HALF = 0x02                                    # QST
F_DSCALAR, F_DONE = 0x01, 0x02                   # VOP OUTER

# MM weight formats. 0..2 are the public card's; 3 and 4 are the seed's exact-accumulation formats
# (layouts in docs/formats.md). WF[2] lives in flag bit 7, which the public card leaves unused.
WF_INT8, WF_INT4, WF_E2M1, WF_INT8X, WF_FP4X6 = 0, 1, 2, 3, 4
WF_NAMES = {"int8": WF_INT8, "int4": WF_INT4, "e2m1": WF_E2M1, "int8x": WF_INT8X, "fp4x6": WF_FP4X6}
WF_PUBLIC = (WF_INT8, WF_INT4, WF_E2M1)
WF_4BIT = (WF_INT4, WF_E2M1, WF_FP4X6)
WF_SEED = (WF_INT8X, WF_FP4X6)


class VFunc(IntEnum):
    ADD = 0
    SUB = 1
    RSUB = 2
    MUL = 3
    MAX = 4
    MIN = 5
    OUTER = 6
    COPY = 8
    EXP2 = 9
    RECIP = 10
    RSQRT = 11
    ABS = 12
    FILL = 13
    EXP2SUB = 14
    LOG2 = 15
    RSUM = 16
    RMAX = 17
    RSSQ = 18
    RDOT = 19
    ARGMAX = 20


BINARY = frozenset({VFunc.ADD, VFunc.SUB, VFunc.RSUB, VFunc.MUL, VFunc.MAX, VFunc.MIN, VFunc.FILL, VFunc.EXP2SUB})
UNARY = frozenset({VFunc.COPY, VFunc.EXP2, VFunc.RECIP, VFunc.RSQRT, VFunc.ABS, VFunc.LOG2})
READS_B = BINARY | {VFunc.RDOT}
REDUCE = frozenset({VFunc.RSUM, VFunc.RMAX, VFunc.RSSQ, VFunc.RDOT, VFunc.ARGMAX})
COMPOSITE = frozenset({VFunc.EXP2, VFunc.RECIP, VFunc.RSQRT, VFunc.LOG2, VFunc.EXP2SUB})


class BMode(IntEnum):
    FULL = 0     # B(r, c) = T[b + r*brs + c]
    ROW = 1      # B(r, c) = T[b + r*brs]
    COL = 2      # B(r, c) = T[b + c]
    SCALAR = 3   # B(r, c) = fp32 bits of R[rd] + w7


B_FULL, B_ROW, B_COL, B_SCALAR = BMode.FULL, BMode.ROW, BMode.COL, BMode.SCALAR

# --- field layouts ------------------------------------------------------------------------------
REG_SLOTS = {"ra": 8, "rb": 12, "rc": 16, "rd": 20}   # lsb of each 4-bit register slot in w0
FLAGS_LSB = 24


@dataclass(frozen=True)
class Field:
    """One named field: bit parts (word, lsb, width), lowest part first.

    kind: "int" plain immediate; "sint" full-word immediate written signed in assembly; "reg" a
    register operand (value = register number); "flag" one flag bit; "enum" named values;
    "fp32" a full word that is fp32 bits for scalar operands; "body" a LOOP body length (labels).
    `reg` names the register slot whose value is added to the word (register-relative field).
    """
    name: str
    parts: tuple[tuple[int, int, int], ...]
    kind: str = "int"
    reg: str | None = None
    names: Mapping[str, int] | None = None
    default: int = 0

    @property
    def width(self) -> int: return sum(p[2] for p in self.parts)

    def get(self, words: Sequence[int]) -> int:
        v, shift = 0, 0
        for w, lsb, width in self.parts:
            v |= ((words[w] >> lsb) & ((1 << width) - 1)) << shift
            shift += width
        return v

    def put(self, words: list[int], value: int) -> None:
        shift = 0
        for w, lsb, width in self.parts:
            m = (1 << width) - 1
            words[w] = (words[w] & ~(m << lsb)) | (((value >> shift) & m) << lsb)
            shift += width


def _w(name: str, word: int, lsb: int = 0, width: int = 32, kind: str = "int", **kw) -> Field:
    return Field(name, ((word, lsb, width),), kind, **kw)


def _rel(name: str, word: int, reg: str, kind: str = "int") -> Field:
    return Field(name, ((word, 0, 32),), kind, reg=reg)


def _flag(name: str, mask: int) -> Field:
    return Field(name, ((0, FLAGS_LSB + mask.bit_length() - 1, 1),), "flag")


def _reg(slot: str) -> Field:
    return Field(slot, ((0, REG_SLOTS[slot], 4),), "reg")


@dataclass(frozen=True)
class Layout:
    op: Op
    mnemonic: str
    fields: tuple[Field, ...]

    @cached_property
    def by_name(self) -> dict[str, Field]: return {f.name: f for f in self.fields}

    @cached_property
    def used(self) -> tuple[int, ...]:
        """Per word, the bits some field (or the opcode) occupies; every other bit is reserved."""
        used = [0xFF] + [0] * 7
        for f in self.fields:
            for w, lsb, width in f.parts:
                used[w] |= ((1 << width) - 1) << lsb
            if f.reg:
                used[0] |= 0xF << REG_SLOTS[f.reg]
        return tuple(used)

    @cached_property
    def rel(self) -> tuple[tuple[int, str], ...]:
        """(word index, register slot) for every register-relative word."""
        return tuple((f.parts[0][0], f.reg) for f in self.fields if f.reg)

    @cached_property
    def slots(self) -> tuple[str, ...]:
        """Register slots this opcode uses, as address bases or as operands."""
        s = {f.reg for f in self.fields if f.reg} | {f.name for f in self.fields if f.kind == "reg"}
        return tuple(k for k in REG_SLOTS if k in s)


_CMP_NAMES = {"eq": C_EQ, "ne": C_NE, "ge": C_GE}
_BMODE_NAMES = {m.name.lower(): int(m) for m in BMode}
_WF = Field("wf", ((0, FLAGS_LSB + WF_SHIFT, 2), (0, 31, 1)), "enum", names=WF_NAMES)
_VFUNC = _w("func", 6, 16, 8, "enum", names={f.name.lower(): int(f) for f in VFunc})

LAYOUTS: dict[Op, Layout] = {lay.op: lay for lay in (
    Layout(Op.NOP, "nop", ()),
    Layout(Op.HALT, "halt", (_flag("chain", F_CHAIN), _reg("ra"), _reg("rb"))),
    Layout(Op.LI, "li", (_reg("rd"), _w("imm", 1, kind="sint"))),
    Layout(Op.ADDI, "addi", (_reg("rd"), _reg("ra"), _w("imm", 1, kind="sint"))),
    Layout(Op.LOOP, "loop", (_w("body", 1, kind="body"), _rel("count", 2, "ra"))),
    Layout(Op.BAR, "bar", ()),
    Layout(Op.RLD, "rld", (_reg("rd"), _rel("addr", 1, "ra"), _rel("factor", 2, "rb"),
                           _flag("raw", F_RAW), _flag("mul", F_MUL))),
    Layout(Op.WAITW, "waitw", (_rel("addr", 1, "ra"), _rel("dst", 2, "rb"), _rel("ref", 3, "rc", "sint"),
                               _w("mask", 4, default=MASK32), _w("interval", 5), _w("timeout", 6),
                               Field("cmp", ((0, FLAGS_LSB, 2),), "enum", names=_CMP_NAMES))),
    Layout(Op.LD, "ld", (_rel("dram", 1, "ra"), _rel("tmem", 2, "rb"), _w("n", 3))),
    Layout(Op.ST, "st", (_rel("dram", 1, "ra"), _rel("tmem", 2, "rb"), _w("n", 3))),
    Layout(Op.DSTEP, "dstep", (_rel("state", 1, "ra"), _rel("qk", 2, "rb"), _rel("v", 3, "rc"),
                               _w("rows", 4, 0, 16), _w("cols", 4, 16, 16), _w("g", 5), _w("o", 6), _w("gs", 7),
                               _flag("dzero", F_DZERO))),
    Layout(Op.STREAM, "stream", (_w("desc", 1, 0, 16), _w("ks", 1, 16, 16), _rel("src", 2, "ra"),
                                 _rel("dst", 3, "ra"), _rel("vec", 4, "rb"), _rel("x", 5, "rc"),
                                 _rel("k", 6, "rd"), _w("out", 7), _flag("szero", F_SZERO),
                                 _flag("src_t", F_SRC_T), _flag("dst_t", F_DST_T), _flag("nodst", F_NODST))),
    Layout(Op.MM, "mm", (_rel("sa", 1, "ra"), _rel("ssa", 2, "rb"), _rel("out", 3, "rc"),
                         _w("n", 4, 0, 16), _w("kb", 4, 16, 16), _w("rs", 5), _w("ors", 6, 0, 16),
                         _w("m", 6, 16, 8), _w("ab", 6, 24, 8), _w("srs", 7), _WF,
                         _flag("unit", F_UNIT), _flag("acc", F_ACC), _flag("rmax", F_RMAX),
                         _flag("ascale", F_ASCALE), _flag("pair", F_PAIR))),
    Layout(Op.QACT, "qact", (_rel("src", 1, "ra"), _w("rows", 2, 0, 8), _w("ab", 2, 8, 8), _w("kb", 2, 16, 16),
                             _w("srs", 3), _w("cscale_addr", 4), _w("rscale_addr", 5), _flag("row", F_ROW),
                             _flag("cscale", F_CSCALE), _flag("rscale", F_RSCALE), _flag("dup", F_DUP),
                             _flag("sub", F_SUB))),
    Layout(Op.QST, "qst", (_rel("src", 1, "ra"), _rel("dst", 2, "rb"), _rel("sdst", 3, "rc"),
                           _w("rows", 4, 0, 16), _w("kb", 4, 16, 16), _w("srs", 5), _w("drs", 6), _w("es", 7),
                           _flag("row", F_ROW), _flag("half", F_HALF))),
    Layout(Op.VOP, "vop", (_rel("dst", 1, "ra"), _rel("a", 2, "rb"), _rel("b", 3, "rc"),
                           _w("rows", 4, 0, 16), _w("cols", 4, 16, 16), _w("drs", 5, 0, 16), _w("ars", 5, 16, 16),
                           _w("brs", 6, 0, 16), _VFUNC, _w("bmode", 6, 24, 2, "enum", names=_BMODE_NAMES),
                           _rel("imm", 7, "rd", "fp32"), _flag("dscalar", F_DSCALAR), _flag("done", F_DONE))),
    Layout(Op.GATHER, "gather", (_rel("src", 1, "ra"), _rel("dst", 2, "rb"), _w("rows", 3, 0, 16),
                                 _w("cols", 3, 16, 16), _w("srs", 4), _w("drs", 5), _w("seg", 6))),
)}

MNEMONICS = {lay.mnemonic: lay.op for lay in LAYOUTS.values()}


def _legal_enum(f: Field, v: int) -> bool:
    return f.names is None or v in f.names.values()


def check_words(words: Sequence[int]) -> str | None:
    """Why these 8 words are not a legal instruction, or None. Words are ints in [0, 2^32)."""
    if len(words) != WORDS_PER_INSTR:
        return f"an instruction is {WORDS_PER_INSTR} words, got {len(words)}"
    for i, w in enumerate(words):
        if not 0 <= w <= MASK32:
            return f"word {i}: {w} is not a 32-bit value"
    code = words[0] & 0xFF
    if code not in Op._value2member_map_:
        return f"word 0: unknown opcode 0x{code:02x}"
    lay = LAYOUTS[Op(code)]
    for i, (w, used) in enumerate(zip(words, lay.used)):
        extra = w & ~used & MASK32
        if extra:
            return f"word {i}: reserved bits 0x{extra:08x} set in {lay.mnemonic.upper()} (word 0x{w:08x})"
    for f in lay.fields:
        if not _legal_enum(f, f.get(words)):
            return f"word {f.parts[0][0]}: illegal {lay.mnemonic.upper()} {f.name} value {f.get(words)}"
    return None


@dataclass(frozen=True)
class Instr:
    """One decoded, legal instruction: its 8 words. Build with `Instr.make` or the per-opcode helpers."""
    words: tuple[int, ...]

    def __post_init__(self):
        words = tuple(int(w) for w in self.words)
        object.__setattr__(self, "words", words)
        why = check_words(words)
        if why:
            raise IsaError(f"illegal instruction: {why}")

    # --- construction / serialisation ---
    @classmethod
    def make(cls, op: Op | str, **fields: int | str | bool) -> "Instr":
        """Build from named fields; omitted fields take their default (0; WAITW mask all ones).

        Register-relative and register fields take register numbers under the slot names
        (ra=3) and immediates under the field name; enum fields take a value or its name.
        """
        op = MNEMONICS[op] if isinstance(op, str) else Op(op)
        lay = LAYOUTS[op]
        words = [int(op)] + [0] * 7
        regs = {k: fields.pop(k) for k in list(fields) if k in REG_SLOTS and k not in lay.by_name}
        for f in lay.fields:
            value = fields.pop(f.name, f.default)
            f.put(words, _field_value(lay, f, value))
        for slot, r in regs.items():
            if slot not in lay.slots:
                raise IsaError(f"{lay.mnemonic.upper()} has no register slot {slot}")
            _put_reg(words, slot, r)
        if fields:
            raise IsaError(f"{lay.mnemonic.upper()} has no field(s) {', '.join(sorted(fields))}; "
                           f"fields: {', '.join(f.name for f in lay.fields) or 'none'}")
        return cls(tuple(words))

    def encode(self) -> np.ndarray:
        return np.array(self.words, dtype=np.uint32)

    @classmethod
    def decode(cls, words: Sequence[int] | np.ndarray, index: int | None = None) -> "Instr":
        """Decode 8 words; IsaError names the instruction index (if given), the word and the reason."""
        ws = tuple(int(w) for w in np.asarray(words, dtype=np.uint64).reshape(-1))
        why = check_words(ws)
        if why:
            where = f"instruction {index}, " if index is not None else ""
            raise IsaError(f"cannot decode {where}{why}",
                           hint="the image is not an openTPU program, or was built for another ISA version")
        return cls(ws)

    # --- named access ---
    @cached_property
    def op(self) -> Op: return Op(self.words[0] & 0xFF)

    @cached_property
    def layout(self) -> Layout: return LAYOUTS[self.op]

    @property
    def ra(self) -> int: return (self.words[0] >> 8) & 0xF

    @property
    def rb(self) -> int: return (self.words[0] >> 12) & 0xF

    @property
    def rc(self) -> int: return (self.words[0] >> 16) & 0xF

    @property
    def rd(self) -> int: return (self.words[0] >> 20) & 0xF

    @property
    def flags(self) -> int: return self.words[0] >> FLAGS_LSB

    def reg(self, slot: str) -> int:
        return (self.words[0] >> REG_SLOTS[slot]) & 0xF

    @cached_property
    def fields(self) -> dict[str, int]:
        """Every named field's raw value (flags as 0/1)."""
        return {f.name: f.get(self.words) for f in self.layout.fields}

    def __getitem__(self, name: str) -> int:
        try:
            return self.fields[name]
        except KeyError:
            raise KeyError(f"{self.layout.mnemonic.upper()} has no field {name!r}") from None

    def has(self, flag: int) -> bool:
        return bool(self.flags & flag)

    @property
    def wf(self) -> int:
        """MM weight format (WF_*)."""
        return _WF.get(self.words)

    @cached_property
    def func(self) -> VFunc:
        """VOP function."""
        return VFunc((self.words[6] >> 16) & 0xFF)

    @cached_property
    def bmode(self) -> BMode:
        return BMode((self.words[6] >> 24) & 3)

    @property
    def unit(self) -> Unit: return UNIT_OF[self.op]

    # --- what the simulator needs ---
    @cached_property
    def rel_regs(self) -> tuple[tuple[int, int], ...]:
        """(word index, register number) of each register-relative word with a nonzero register."""
        return tuple((w, self.reg(slot)) for w, slot in self.layout.rel if self.reg(slot))

    @cached_property
    def regs_read(self) -> frozenset[int]:
        """Registers whose values this instruction reads (R0 excluded: it is always 0)."""
        op, regs = self.op, {r for _, r in self.rel_regs}
        if op == Op.ADDI or (op == Op.HALT and self.has(F_CHAIN)):
            regs |= {self.ra} | ({self.rb} if op == Op.HALT else set())
        return frozenset(regs - {0})

    @property
    def reg_written(self) -> int | None:
        """The register this instruction writes (LI, ADDI, RLD with rd != 0), else None."""
        return self.rd if self.op in (Op.LI, Op.ADDI, Op.RLD) and self.rd else None

    def resolve(self, regs: Sequence[int]) -> list[int]:
        """w0..w7 with every register-relative word's register added (mod 2^32)."""
        out = list(self.words)
        for w, r in self.rel_regs:
            out[w] = (out[w] + int(regs[r])) & MASK32
        return out

    def with_fields(self, **fields) -> "Instr":
        """A copy with some named fields (or register slots) replaced."""
        lay = self.layout
        words = list(self.words)
        for name, value in fields.items():
            if name in lay.by_name:
                f = lay.by_name[name]
                f.put(words, _field_value(lay, f, value))
            elif name in lay.slots:
                _put_reg(words, name, value)
            else:
                raise IsaError(f"{lay.mnemonic.upper()} has no field {name}")
        return Instr(tuple(words))

    def __repr__(self) -> str:
        from .asm import disasm_one
        return f"Instr({disasm_one(self)!r})"


def _put_reg(words: list[int], slot: str, r: int | str) -> None:
    r = parse_reg(r) if isinstance(r, str) else int(r)
    if not 0 <= r < NREGS:
        raise IsaError(f"register {slot}={r}: registers are r0..r15")
    words[0] = (words[0] & ~(0xF << REG_SLOTS[slot])) | (r << REG_SLOTS[slot])


def parse_reg(text: str) -> int:
    t = text.strip().lower()
    if len(t) >= 2 and t[0] == "r" and t[1:].isdigit() and int(t[1:]) < NREGS:
        return int(t[1:])
    raise IsaError(f"{text!r} is not a register (r0..r15)")


def _field_value(lay: Layout, f: Field, value) -> int:
    """Check and convert one field value (bool, int, enum name, float for fp32) to its raw bits."""
    if isinstance(value, str) and f.names is not None:
        if value.lower() not in f.names:
            raise IsaError(f"{lay.mnemonic.upper()} {f.name}: {value!r} is not one of {', '.join(f.names)}")
        return f.names[value.lower()]
    if f.kind == "reg" and isinstance(value, str):
        return parse_reg(value)
    if isinstance(value, float):
        if f.kind != "fp32":
            raise IsaError(f"{lay.mnemonic.upper()} {f.name}: a float is only allowed for an fp32 immediate")
        return f32_bits(value)
    v = int(value)
    width = f.width
    if f.kind in ("sint", "fp32") and -(1 << 31) <= v < 0:
        v &= MASK32
    if not 0 <= v < (1 << width):
        raise IsaError(f"{lay.mnemonic.upper()} {f.name}={value} does not fit its {width}-bit field")
    if not _legal_enum(f, v):
        raise IsaError(f"{lay.mnemonic.upper()} {f.name}={v} is illegal; allowed: "
                       + ", ".join(f"{k}={n}" for k, n in f.names.items()))
    return v


def f32_bits(x: float) -> int:
    """The fp32 bit pattern of a Python float (round to nearest even; too large becomes inf)."""
    with np.errstate(over="ignore"):
        return int(np.array(x, dtype=np.float32).view(np.uint32))


# --- per-opcode helpers -------------------------------------------------------------------------
def _helper(op: Op):
    lay = LAYOUTS[op]

    def build(**fields) -> Instr:
        return Instr.make(op, **fields)
    build.__name__ = lay.mnemonic
    build.__doc__ = (f"Build a {lay.mnemonic.upper()} from named fields: "
                     + (", ".join(f.name + (f" (+{f.reg})" if f.reg else "") for f in lay.fields) or "none") + ".")
    return build


nop, halt, li, addi, loop, bar = (_helper(o) for o in (Op.NOP, Op.HALT, Op.LI, Op.ADDI, Op.LOOP, Op.BAR))
rld, waitw, ld, st, dstep, stream = (_helper(o) for o in (Op.RLD, Op.WAITW, Op.LD, Op.ST, Op.DSTEP, Op.STREAM))
mm, qact, qst, gather = (_helper(o) for o in (Op.MM, Op.QACT, Op.QST, Op.GATHER))


def vop(func: VFunc | str | int, **fields) -> Instr:
    """Build a VOP: func (name or VFunc) plus dst/a/b (+ra/rb/rc), rows, cols, drs, ars, brs, bmode, imm (+rd)."""
    return Instr.make(Op.VOP, func=func.name.lower() if isinstance(func, VFunc) else func, **fields)


def waitw_holds(value: int, ref: int, cmp: int, mask: int) -> bool:
    """Whether a WAITW condition holds for a DRAM word (reference 3.3; GE is a signed difference)."""
    v = value & mask & MASK32
    if cmp == C_EQ:
        return v == ref & MASK32
    if cmp == C_NE:
        return v != ref & MASK32
    if cmp == C_GE:
        return ((v - ref) & MASK32) < 0x80000000
    raise IsaError(f"WAITW compare {cmp} is illegal (0 EQ, 1 NE, 2 GE)")


def f2i(bits: int) -> int:
    """RLD's fp32 -> int32 conversion (truncation toward zero) of one word, as a 32-bit pattern."""
    return int(fp32.f2i(np.uint32(bits)))


# --- program images -----------------------------------------------------------------------------
def encode_program(instrs: Iterable[Instr], waits: Sequence["WaitEntry"] | None = None) -> bytes:
    """The program image: 32 bytes per instruction; with `waits`, the WAITC table follows it."""
    instrs = list(instrs)
    words = np.array([i.words for i in instrs], dtype="<u4").reshape(-1)
    image = words.tobytes()
    if waits is not None:
        if len(waits) != len(instrs):
            raise IsaError(f"the wait table has {len(waits)} entries for {len(instrs)} instructions")
        image += encode_wait_table(waits)
    return image


def decode_program(data: bytes | np.ndarray, n: int | None = None) -> list[Instr]:
    """Decode a program image (all of it, or its first n instructions when a wait table follows)."""
    if isinstance(data, np.ndarray):
        raw = data.astype(np.uint32).reshape(-1)
    else:
        if len(data) % 4:
            raise IsaError(f"a program image is a multiple of {BYTES_PER_INSTR} bytes; got {len(data)}")
        raw = np.frombuffer(bytes(data), dtype="<u4")
    if n is None:
        if raw.size % WORDS_PER_INSTR:
            raise IsaError(f"a program image is a multiple of {BYTES_PER_INSTR} bytes; got {raw.size * 4}")
        n = raw.size // WORDS_PER_INSTR
    elif raw.size < n * WORDS_PER_INSTR:
        raise IsaError(f"the image holds {raw.size // WORDS_PER_INSTR} instructions, {n} were asked for")
    rows = raw[:n * WORDS_PER_INSTR].reshape(n, WORDS_PER_INSTR).tolist()
    return [Instr.decode(r, i) for i, r in enumerate(rows)]


# --- WAITC: the seed's compile-time wait entries -------------------------------------------------
class Queue(IntEnum):
    """The seven in-order completion queues a wait entry counts (docs/isa.md "WAITC")."""
    LD = 0      # DMA into TMEM: LD, WAITW
    ST = 1      # DMA out of TMEM: ST
    SE = 2      # stream engine: DSTEP, STREAM
    MXU = 3     # MM
    QACT = 4    # quantiser into ACT RAM: QACT
    QST = 5     # quantiser into DRAM: QST
    VPU = 6     # VOP


NQUEUES = 7
WC_ANY = 15              # a count of 15 is no condition at all (not "at most 15")
WC_MASK_BITS = 31
WC_SYNC_BIT = 59
WC_RESERVED = 0xF << 60

_QUEUE_OF = {Op.LD: Queue.LD, Op.WAITW: Queue.LD, Op.ST: Queue.ST, Op.DSTEP: Queue.SE, Op.STREAM: Queue.SE,
             Op.MM: Queue.MXU, Op.QACT: Queue.QACT, Op.QST: Queue.QST, Op.VOP: Queue.VPU}


def queue_of(op: Op) -> Queue | None:
    """The completion queue an opcode enters; None for sequencer and collective instructions."""
    return _QUEUE_OF.get(op)


@dataclass(frozen=True)
class WaitEntry:
    """One instruction's 64-bit wait entry (docs/isa.md "WAITC"); dispatch waits until all hold.

    counts[q] < 15: at most counts[q] earlier instructions of queue q are incomplete (RAW/WAW on
    an in-order queue); 15 (WC_ANY) is no condition. mask bit j: the queued instruction
    dispatched j+1 queued dispatches earlier has released, i.e. read all its operands (WAR).
    sync: every earlier instruction has completed. Distances and counts follow the dynamic
    dispatch order, so loop-carried dependencies are counted across the back edge.
    """
    counts: tuple[int, ...] = (WC_ANY,) * NQUEUES
    mask: int = 0
    sync: bool = False

    def __post_init__(self):
        counts = tuple(int(c) for c in self.counts)
        object.__setattr__(self, "counts", counts)
        if len(counts) != NQUEUES or not all(0 <= c <= 15 for c in counts):
            raise IsaError(f"a wait entry has {NQUEUES} counts of 0..15, got {counts}")
        if not 0 <= self.mask < (1 << WC_MASK_BITS):
            raise IsaError(f"a wait entry mask is {WC_MASK_BITS} bits, got 0x{self.mask:x}")

    def pack(self) -> int:
        v = sum(c << (4 * q) for q, c in enumerate(self.counts))
        return v | (self.mask << 28) | (int(self.sync) << WC_SYNC_BIT)

    @classmethod
    def unpack(cls, value: int, index: int | None = None) -> "WaitEntry":
        if value >> 64 or value & WC_RESERVED:
            where = f"wait entry {index}: " if index is not None else ""
            raise IsaError(f"{where}reserved bits 0x{value & ~((1 << 60) - 1):016x} set (bits 63:60 must be 0)")
        return cls(tuple((value >> (4 * q)) & 0xF for q in range(NQUEUES)),
                   (value >> 28) & ((1 << WC_MASK_BITS) - 1), bool(value >> WC_SYNC_BIT & 1))

    @property
    def waits(self) -> bool:
        return self.sync or self.mask != 0 or any(c != WC_ANY for c in self.counts)


NO_WAIT = WaitEntry()


def encode_wait_table(entries: Sequence[WaitEntry]) -> bytes:
    """Wait entries as little-endian 64-bit words (low word first), one per instruction."""
    return np.array([e.pack() for e in entries], dtype="<u8").tobytes()


def decode_wait_table(data: bytes, n: int) -> list[WaitEntry]:
    raw = np.frombuffer(bytes(data), dtype="<u8")
    if raw.size < n:
        raise IsaError(f"the wait table holds {raw.size} entries, {n} were asked for")
    return [WaitEntry.unpack(int(v), i) for i, v in enumerate(raw[:n].tolist())]


def split_image(data: bytes, n: int, seq_wc: bool) -> tuple[list[Instr], list[WaitEntry] | None]:
    """What a card loads from PROG_ADDR for PROG_N = n: the program, and with SEQ_WC the wait table
    that follows it (a public card reads only the first 32n bytes)."""
    instrs = decode_program(data, n)
    if not seq_wc:
        return instrs, None
    return instrs, decode_wait_table(bytes(data)[n * BYTES_PER_INSTR:], n)


# --- STREAM descriptors (reference 2.5) ---------------------------------------------------------
SOP_ADD, SOP_SUB, SOP_MUL, SOP_MAX, SOP_MIN, SOP_MOV, SOP_RSQRT, SOP_RECIP, SOP_EXP2, SOP_LOG2, SOP_EXP2SUB = range(11)
SOP_NAMES = ("add", "sub", "mul", "max", "min", "mov", "rsqrt", "recip", "exp2", "log2", "exp2sub")
SOP_UNARY = frozenset({SOP_MOV, SOP_RSQRT, SOP_RECIP, SOP_EXP2, SOP_LOG2})
OP_A, OP_X, OP_K0, OP_ZERO, OP_ONE = 8, 9, 10, 14, 15
A_SLOT, A_SELF, A_CONST, A_MAX = range(4)
U_PASS, U_FMMA, U_MUL, U_ADD = range(4)
G_REG, G_SLOT, G_CONST, G_ONE = range(4)
BS_SLOT, BS_CONST, BS_REG = range(3)
DESC_EXP = 0x80

# (name, word, lsb, width) of each descriptor payload field
_DESC_FIELDS = (
    ("rows", 0, 0, 12), ("cols", 0, 12, 12),
    ("a_en", 1, 0, 1), ("a_op", 1, 1, 2), ("a_idx", 1, 3, 2), ("u_mode", 1, 5, 2), ("g_src", 1, 7, 2),
    ("g_idx", 1, 9, 3), ("b_src", 1, 12, 2), ("b_idx", 1, 14, 3), ("d_reg", 1, 17, 3), ("q_en", 1, 20, 1),
    ("q_idx", 1, 21, 2), ("out_p2", 1, 23, 1),
    ("rinit", 2, 4, 4), ("rsave", 2, 8, 4), ("q_self", 2, 12, 1), ("o_reg_en", 2, 13, 1), ("o_reg", 2, 14, 3),
    ("srs", 4, 0, 12), ("drs", 4, 12, 12),
)


def float_safe(payload: int) -> int:
    """A 24-bit payload as a normal fp32 in [2, 4): payload bit 23 -> sign, bits 22..0 -> mantissa."""
    return ((payload >> 23) & 1) << 31 | DESC_EXP << 23 | (payload & 0x7FFFFF)


def float_payload(word: int, index: int = 0) -> int:
    if (word >> 23) & 0xFF != DESC_EXP:
        raise IsaError(f"STREAM descriptor word {index} (0x{word:08x}) is not float-safe: exponent must be 0x80")
    return ((word >> 31) & 1) << 23 | (word & 0x7FFFFF)


@dataclass(frozen=True)
class StreamDesc:
    """A STREAM descriptor: the fixed words d0..d4 and up to 15 scalar ops (op, dst, a, b)."""
    rows: int
    cols: int
    a_en: int = 0
    a_op: int = A_SLOT
    a_idx: int = 0
    u_mode: int = U_PASS
    g_src: int = G_REG
    g_idx: int = 0
    b_src: int = BS_SLOT
    b_idx: int = 0
    d_reg: int = 0
    q_en: int = 0
    q_idx: int = 0
    out_p2: int = 0
    rinit: int = 0
    rsave: int = 0
    q_self: int = 0
    o_reg_en: int = 0
    o_reg: int = 0
    srs: int = 0
    drs: int = 0
    ops: tuple[tuple[int, int, int, int], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "ops", tuple(tuple(int(x) for x in o) for o in self.ops))
        for name, _, _, width in _DESC_FIELDS:
            v = getattr(self, name)
            if not 0 <= v < (1 << width):
                raise IsaError(f"STREAM descriptor {name}={v} does not fit its {width}-bit field")
        if len(self.ops) > STREAM_MAX_OPS:
            raise IsaError(f"a STREAM descriptor holds at most {STREAM_MAX_OPS} ops, got {len(self.ops)}")
        for i, (op, dst, a, b) in enumerate(self.ops):
            if not (0 <= op <= SOP_EXP2SUB and 0 <= dst < 8 and 0 <= a < 16 and 0 <= b < 16):
                raise IsaError(f"STREAM descriptor op {i} {(op, dst, a, b)}: op 0..10, dst r0..r7, operands 0..15")

    def encode(self) -> np.ndarray:
        payload = [0] * STREAM_DESC_FIXED
        for name, w, lsb, _ in _DESC_FIELDS:
            payload[w] |= getattr(self, name) << lsb
        payload[2] |= len(self.ops)
        payload += [op | dst << 4 | a << 7 | b << 11 for op, dst, a, b in self.ops]
        return np.array([float_safe(p) for p in payload], dtype=np.uint32)

    @classmethod
    def decode(cls, words: Sequence[int]) -> "StreamDesc":
        if len(words) < STREAM_DESC_FIXED:
            raise IsaError(f"a STREAM descriptor has at least {STREAM_DESC_FIXED} words, got {len(words)}")
        payload = [float_payload(int(w), i) for i, w in enumerate(words[:STREAM_DESC_FIXED])]
        if payload[3]:
            raise IsaError(f"STREAM descriptor word 3 is reserved; payload 0x{payload[3]:06x}")
        if payload[2] >> 17:
            raise IsaError(f"STREAM descriptor word 2: reserved payload bits 0x{payload[2] & ~0x1FFFF:06x}")
        nops = payload[2] & 0xF
        if len(words) < STREAM_DESC_FIXED + nops:
            raise IsaError(f"the STREAM descriptor names {nops} ops but only {len(words) - STREAM_DESC_FIXED} follow")
        ops = []
        for i in range(nops):
            p = float_payload(int(words[STREAM_DESC_FIXED + i]), STREAM_DESC_FIXED + i)
            if p >> 15:
                raise IsaError(f"STREAM descriptor op word {STREAM_DESC_FIXED + i}: reserved payload bits set")
            ops.append((p & 0xF, (p >> 4) & 7, (p >> 7) & 0xF, (p >> 11) & 0xF))
        vals = {name: (payload[w] >> lsb) & ((1 << width) - 1) for name, w, lsb, width in _DESC_FIELDS}
        return cls(**vals, ops=tuple(ops))

    @property
    def nwords(self) -> int: return STREAM_DESC_FIXED + len(self.ops)

    def slots(self) -> set[int]:
        """The column slots the descriptor reads (reference 3.8 step 3)."""
        used = set()
        if self.a_en and self.a_op == A_SLOT:
            used.add(self.a_idx)
        if self.u_mode in (U_FMMA, U_MUL) and self.g_src == G_SLOT:
            used.add(self.g_idx)
        if self.u_mode in (U_FMMA, U_ADD) and self.b_src == BS_SLOT:
            used.add(self.b_idx)
        if (self.q_en and not self.q_self) or self.out_p2:
            used.add(self.q_idx)
        return used


# The stream engine's hardware-subset scalar programs (d_reg = 2), as (op, dst, a, b).
D_DELTA, D_DELTA1, D_SCALE, D_DOT = 0, 1, 2, 3
DPROGS = {
    D_DELTA: ((SOP_MUL, 0, OP_A, OP_K0), (SOP_SUB, 1, OP_X, 0), (SOP_MUL, 2, 1, OP_K0 + 1)),
    D_DELTA1: ((SOP_SUB, 1, OP_X, OP_A), (SOP_MUL, 2, 1, OP_K0 + 1)),
    D_SCALE: ((SOP_MUL, 2, OP_X, OP_K0 + 1),),
    D_DOT: ((SOP_MUL, 2, OP_A, OP_K0 + 1),),
}
DPROG_USES_A = {D_DELTA: True, D_DELTA1: True, D_SCALE: False, D_DOT: True}


def state_desc(rows: int, cols: int, dprog: int, a_idx: int = 1, gate: str = "const", q: bool = True) -> StreamDesc:
    """A state-update descriptor: A over slot a_idx, U = FMMA with B = slot 1 and G = K0 ("const"),
    slot 3 ("col") or 1.0 ("one"), Q = slot 0 when q; d_reg = 2."""
    g = {"const": (G_CONST, 0), "col": (G_SLOT, 3), "one": (G_ONE, 0)}
    if gate not in g:
        raise IsaError(f"gate {gate!r} is not one of {', '.join(g)}")
    return StreamDesc(rows, cols, a_en=int(DPROG_USES_A[dprog]), a_op=A_SLOT, a_idx=a_idx if DPROG_USES_A[dprog] else 0,
                      u_mode=U_FMMA, g_src=g[gate][0], g_idx=g[gate][1], b_src=BS_SLOT, b_idx=1, d_reg=2,
                      q_en=int(q), q_idx=0, ops=DPROGS[dprog])


def gdn_desc(rows: int, cols: int) -> StreamDesc:
    """The Gated DeltaNet step (equal to DSTEP when ks = gs)."""
    return state_desc(rows, cols, D_DELTA, a_idx=1, gate="const", q=True)


def stream_hw_cfg(desc: StreamDesc, flags: int) -> dict | None:
    """What the board's stream engine runs for this descriptor and STREAM flags, or None when the
    descriptor is outside the hardware subset (the compiler then lowers to VOPs)."""
    if flags & (F_SRC_T | F_DST_T | F_NODST):
        return None
    if not (1 <= desc.rows <= 256 and desc.cols % 64 == 0 and 64 <= desc.cols <= 256):
        return None
    if desc.q_self or desc.out_p2 or desc.o_reg_en or desc.rinit or desc.rsave or desc.srs or desc.drs:
        return None
    if desc.u_mode != U_FMMA or desc.b_src != BS_SLOT or desc.b_idx != 1 or desc.d_reg != 2:
        return None
    gate = "one" if desc.g_src == G_ONE else {(G_CONST, 0): "const", (G_SLOT, 3): "col"}.get((desc.g_src, desc.g_idx))
    if gate is None:
        return None
    dmode = next((m for m, prog in DPROGS.items() if prog == desc.ops), None)
    if dmode is None or (desc.q_en and desc.q_idx != 0):
        return None
    if DPROG_USES_A[dmode] != bool(desc.a_en):
        return None
    if desc.a_en and (desc.a_op != A_SLOT or desc.a_idx not in (1, 2)):
        return None
    return {"ns": desc.cols // 8, "rows": desc.rows, "a_en": desc.a_en, "a_sel": desc.a_idx, "dmode": dmode,
            "g_src": gate, "q_en": desc.q_en}
