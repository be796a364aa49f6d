"""ISA op checks: one small program per opcode feature, run on a card and on the golden simulator.

Every program starts from the same DRAM image (`diag_image`: random fp32 data, int8 weights and
their scales, 32 fp32 edge values and the same reversed, a chained program, zeros to clear
TMEM), clears the TMEM it uses (a card keeps TMEM between programs), stores its results in
the OUT area and halts. `run_golden` runs a check on `otpu_core.isasim` and returns the OUT
bytes; `compare` says, bit for bit, where the card's bytes differ. Groups (the unit each
program exercises) are what otpu-diag's diagnosis reasons about: control, dma, mxu, quant,
vpu, vpu-reduce, vpu-new (RDOT, LOG2, OUTER: what register map 3 added), vpu-composite,
vpu-edge, gen, waitw, collective.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import asm, isa
from .isa import Instr
from .target import Config, Target

# DRAM layout (bytes) shared by every program.
DATA, W8, SC, SC4, OUT, EDGE, WB, CHAIN_AT, ZERO_AT, PROG_AT = (
    0x0, 0x10000, 0x20000, 0x28000, 0x30000, 0x80000, 0x200000, 0x340000, 0x380000, 0x3C0000)
DATA_WORDS = 4096
OUT_BYTES = 0x4000
TMEM_CLEAR = 4096          # TMEM words every program zeroes first
# TMEM areas (words)
TA, TB, TC, TO = 0, 1024, 2048, 3072
ROWS, COLS = 4, 32         # VPU tile

# 32 fp32 edge values (no NaN: RTL and simulator legitimately differ on NaN inputs).
EDGE_BITS = np.array([
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,
    0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3F000000, 0x40000000,
    0x42FE0000, 0x43000000, 0xC2FC0000, 0xC3160000, 0x42B17218, 0x7149F2CA, 0xF149F2CA, 0x0DA24260,
    0x00400000, 0x34000000, 0x3F7FFFFF, 0x3F800001, 0x4B000000, 0xCB000001, 0x3EAAAAAB, 0xC0490FDB],
    dtype=np.uint32)
VPU_BINARY = ("add", "sub", "rsub", "mul", "max", "min", "fill")
VPU_UNARY = ("copy", "abs")
COMPOSITE = ("exp2", "recip", "rsqrt", "exp2sub")


@dataclass(frozen=True)
class OpCheck:
    group: str
    name: str
    program: tuple[Instr, ...]
    out_bytes: int            # bytes of OUT this program writes (compared)
    caps: tuple[str, ...] = ()   # CAPS bits (board.CardInfo.caps names) the card needs for this program

    @property
    def title(self) -> str: return f"{self.group}: {self.name}"


def diag_image(cfg: Config) -> dict[int, np.ndarray]:
    """The DRAM every op check starts from, as {address: bytes}."""
    rng = np.random.default_rng(1234)
    data = rng.uniform(-4.0, 4.0, DATA_WORDS).astype(np.float32)
    weights = rng.integers(-127, 128, 64 * cfg.D * 4, dtype=np.int8)
    scales = rng.uniform(0.001, 0.01, 64 * 4).astype(np.float32)
    edge = np.concatenate([EDGE_BITS, EDGE_BITS[::-1]])
    # 4-bit scale words: a bf16 block scale in [15:0] and four 4-bit sub-block multipliers in [31:16]
    bf16 = (rng.uniform(0.001, 0.01, 64 * 4).astype(np.float32).view(np.uint32) >> 16).astype(np.uint32)
    mults = rng.integers(1, 16, (64 * 4, 4)).astype(np.uint32)
    scales4 = bf16 | (mults << (16 + 4 * np.arange(4, dtype=np.uint32))).sum(axis=1).astype(np.uint32)
    chained = asm.assemble(f"st dram={OUT + 0x3000} tmem={TA} n=8\nhalt")
    return {DATA: data.view(np.uint8), W8: weights.view(np.uint8), SC: scales.view(np.uint8),
            SC4: scales4.view(np.uint8),
            EDGE: edge.view(np.uint8), WB: np.array([1, 0x1234, 7, 0], np.uint32).view(np.uint8),
            CHAIN_AT: np.frombuffer(isa.encode_program(chained), np.uint8),
            ZERO_AT: np.zeros(TMEM_CLEAR * 4, np.uint8), OUT: np.zeros(OUT_BYTES, np.uint8)}


def _prog(body: str, out_words: int) -> tuple[tuple[Instr, ...], int]:
    text = f"ld dram={ZERO_AT} tmem=0 n={TMEM_CLEAR}\n{body}\nhalt"
    return tuple(asm.assemble(text)), out_words * 4


def _check(group: str, name: str, body: str, out_words: int) -> OpCheck:
    prog, nbytes = _prog(body, out_words)
    return OpCheck(group, name, prog, nbytes)


def _control() -> list[OpCheck]:
    ld = f"ld dram={DATA} tmem={TA} n=64"
    return [
        _check("control", "HALT", f"{ld}\nst dram={OUT} tmem={TA} n=16", 16),
        _check("control", "NOP", f"{ld}\nnop\nnop\nst dram={OUT} tmem={TA + 3} n=16", 16),
        _check("control", "LI/ADDI register offsets",
               f"{ld}\nli rd=r1 imm=64\naddi rd=r2 ra=r1 imm=-32\nst dram=r1+{OUT} tmem=r2+0 n=8", 24),
        _check("control", "LOOP",
               f"{ld}\nli rd=r1 imm=0\nloop body=@e count=5\nst dram=r1+{OUT} tmem=r1+0 n=1\n"
               "addi rd=r1 ra=r1 imm=4\ne:\nnop", 5),
        _check("control", "LOOP nested",
               f"{ld}\nli rd=r1 imm=0\nloop body=@e1 count=3\nloop body=@e2 count=4\n"
               f"st dram=r1+{OUT} tmem=r1+0 n=1\naddi rd=r1 ra=r1 imm=4\ne2:\naddi rd=r1 ra=r1 imm=4\ne1:\nnop", 15),
        _check("control", "LOOP count from a register",
               f"{ld}\nli rd=r3 imm=6\nli rd=r1 imm=0\nloop body=@e count=r3+1\nst dram=r1+{OUT} tmem={TA + 9} n=1\n"
               f"addi rd=r1 ra=r1 imm=4\ne:\nnop", 7),
        _check("control", "LOOP count 0",
               f"{ld}\nst dram={OUT} tmem={TA} n=4\nloop body=@e count=0\nst dram={OUT} tmem={TA + 20} n=4\ne:\nnop", 4),
        _check("control", "BAR", f"{ld}\nbar\nst dram={OUT} tmem={TA + 1} n=8", 8),
    ]


def _dma() -> list[OpCheck]:
    return [
        _check("dma", "LD/ST aligned", f"ld dram={DATA} tmem={TA} n=256\nst dram={OUT} tmem={TA} n=256", 256),
        _check("dma", "LD unaligned source", f"ld dram={DATA + 4 * 13} tmem={TA} n=100\nst dram={OUT} tmem={TA} n=100", 100),
        _check("dma", "ST unaligned target",
               f"ld dram={DATA} tmem={TA} n=100\nst dram={OUT + 4 * 7} tmem={TA} n=100", 107),
        *(_check("dma", f"short {n} words", f"ld dram={DATA + 64} tmem={TA} n={n}\nst dram={OUT + 4} tmem={TA} n={n}", n + 1)
          for n in (1, 2, 3, 5, 8, 15, 16, 17)),
        _check("dma", "register offsets",
               f"li rd=r1 imm=256\nli rd=r2 imm=40\nld dram=r1+{DATA} tmem=r2+0 n=64\nst dram=r1+{OUT} tmem=r2+0 n=64", 128),
    ]


def _mm(cfg: Config, name: str, m: int = 1, kb: int = 2, n: int = 8, flags: str = "", ab: int = 0, ors: int | None = None,
        init_out: bool = False, qflags: str = "") -> OpCheck:
    d = cfg.D
    ors = n if ors is None else ors
    rows_out = m * ors + (m if "rmax" in flags else 0)
    body = [f"ld dram={DATA} tmem={TA} n={m * kb * d}", f"qact src={TA} rows={m} ab={ab} kb={kb} srs={kb * d} {qflags}"]
    if init_out:
        body.append(f"ld dram={DATA + 0x2000} tmem={TO} n={rows_out}")
    ssa = SC
    if "ascale" in flags:
        body.append(f"ld dram={DATA + 0x3000} tmem={TC} n={m}")
        ssa = TC
    body.append(f"mm sa={W8} ssa={ssa} out={TO} n={n} kb={kb} rs={kb * d} m={m} ab={ab} ors={ors} srs={4 * kb} {flags}")
    body.append(f"st dram={OUT} tmem={TO} n={rows_out}")
    return _check("mxu" if not qflags else "quant", name, "\n".join(body), rows_out)


def _mm4(cfg: Config, name: str, wf: str, pair: bool = False, kb: int = 3, n: int = 8) -> OpCheck:
    """An MM streaming 4-bit weights (two blocks per D-byte chunk); PAIR sums ACT row pairs."""
    d, m = cfg.D, 1
    rows = 2 * m if pair else m
    rs = d * -(-kb // 2)
    body = "\n".join([
        f"ld dram={DATA} tmem={TA} n={rows * kb * d}",
        f"qact src={TA} rows={rows} ab=0 kb={kb} srs={kb * d}",
        f"mm sa={W8} ssa={SC4} out={TO} n={n} kb={kb} rs={rs} m={m} ors={n} srs={8 * -(-kb // 2)} wf={wf}"
        + (" pair" if pair else ""),
        f"st dram={OUT} tmem={TO} n={m * n}"])
    prog, nbytes = _prog(body, m * n)
    return OpCheck("mxu", name, prog, nbytes, ("w4", "pair") if pair else ("w4",))


def _mxu(cfg: Config) -> list[OpCheck]:
    m = min(2, cfg.MCOLS)
    return [
        _mm(cfg, "MM", m=m),
        _mm(cfg, "UNIT", m=m, flags="unit"),
        _mm(cfg, "ACC", m=m, flags="acc", init_out=True),
        _mm(cfg, "RMAX", m=m, flags="rmax"),
        _mm(cfg, "ACC RMAX", m=m, flags="acc rmax", init_out=True),
        _mm(cfg, "UNIT ACC ASCALE", m=m, flags="unit acc ascale", init_out=True),
        _mm(cfg, "M=1", m=1, kb=3),
        _mm(cfg, "ACT block ab=3", m=m, ab=3),
        _mm(cfg, "output row stride 40", m=m, ors=40),
        _mm(cfg, "one block, many rows", m=m, kb=1, n=32),
        _mm4(cfg, "MM int4", "int4"),
        _mm4(cfg, "MM e2m1", "e2m1"),
        _mm4(cfg, "MM e2m1 PAIR", "e2m1", pair=True, kb=4),
    ]


def _quant(cfg: Config) -> list[OpCheck]:
    d, kb = cfg.D, 2
    qst = f"ld dram={DATA} tmem={TA} n={2 * kb * d}\n"
    m = min(2, cfg.MCOLS)
    return [
        _mm(cfg, "QACT ROW", m=m, flags="unit", qflags="row"),
        _mm(cfg, "QACT CSCALE", m=m, flags="unit", qflags=f"cscale cscale_addr={TA + 16}"),
        _mm(cfg, "QACT RSCALE", m=m, flags="unit", qflags=f"rscale rscale_addr={TA + 40}"),
        _check("quant", "QST dense",
               qst + f"qst src={TA} dst={OUT} sdst={OUT + 0x1000} rows=2 kb={kb} srs={kb * d} drs={kb * d} es=1",
               (0x1000 + 4 * 2 * kb) // 4),
        _check("quant", "QST strided es=3",
               qst + f"qst src={TA} dst={OUT} sdst={OUT + 0x2000} rows=2 kb={kb} srs={kb * d} drs={3 * kb * d + 8} es=3",
               (0x2000 + 4 * 2 * kb) // 4),
        _check("quant", "QST ROW",
               qst + f"qst src={TA} dst={OUT} sdst={OUT + 0x1000} rows=2 kb={kb} srs={kb * d} drs={kb * d} es=1 row",
               (0x1000 + 8) // 4),
        _check("quant", "QST ROW HALF",
               qst + f"qst src={TA} dst={OUT} sdst={OUT + 0x1000} rows=2 kb={kb} srs={kb * d} drs={kb * d} es=1 row half",
               (0x1000 + 8) // 4),
    ]


def _vop(group: str, name: str, func: str, bmode: str = "full", reduce: bool = False, src: int = DATA,
         rows: int = ROWS, cols: int = COLS, extra: str = "") -> OpCheck:
    b = {"full": f"b={TB} brs={cols}", "row": f"b={TB} brs=1", "col": f"b={TB}", "scalar": "imm=1.75"}[bmode]
    out = rows if reduce else rows * cols
    drs = 2 if func == "argmax" else (1 if reduce else cols)
    if func == "argmax":
        out = 2 * rows
    body = (f"ld dram={src} tmem={TA} n={rows * cols}\nld dram={src + 4 * rows * cols if src == DATA else src + 128} "
            f"tmem={TB} n={rows * cols}\n"
            f"vop.{func} dst={TO} a={TA} {b} rows={rows} cols={cols} drs={drs} ars={cols} bmode={bmode} {extra}\n"
            f"st dram={OUT} tmem={TO} n={out}")
    return _check(group, name, body, out)


def _vpu() -> list[OpCheck]:
    out = [_vop("vpu", f"{f.upper()} {bm.upper()}", f, bm) for f in VPU_BINARY for bm in ("full", "row", "col", "scalar")]
    out += [_vop("vpu", f.upper(), f) for f in VPU_UNARY]
    return out


def _reduce() -> list[OpCheck]:
    return [_vop("vpu-reduce", f.upper(), f, reduce=True) for f in ("rsum", "rmax", "rssq")]


def _outer(name: str, flags: str) -> OpCheck:
    """OUTER in place: T[dst] = T[dst] * Dv(c) + B(r) * Cv(c), Cv at the TMEM address in imm."""
    body = "\n".join([
        f"ld dram={DATA} tmem={TO} n={ROWS * COLS}", f"ld dram={DATA + 0x800} tmem={TA} n={COLS}",
        f"ld dram={DATA + 0x1000} tmem={TB} n={ROWS}", f"ld dram={DATA + 0x1800} tmem={TC} n={COLS}",
        f"vop.outer dst={TO} a={TA} b={TB} brs=1 rows={ROWS} cols={COLS} drs={COLS} bmode=row imm={TC} {flags}",
        f"st dram={OUT} tmem={TO} n={ROWS * COLS}"])
    return _check("vpu-new", name, body, ROWS * COLS)


def _new() -> list[OpCheck]:
    """The functions a register map 3 bitstream added: RDOT, LOG2, OUTER."""
    out = [_vop("vpu-new", f"RDOT {bm.upper()}", "rdot", bm, reduce=True) for bm in ("full", "row", "col", "scalar")]
    out.append(_vop("vpu-new", "LOG2", "log2"))
    out.append(_vop("vpu-new", "LOG2 edge values", "log2", src=EDGE, rows=1))
    out += [_outer("OUTER column", ""), _outer("OUTER scalar", "dscalar"), _outer("OUTER one", "done")]
    return out


def _composite() -> list[OpCheck]:
    return [_vop("vpu-composite", f.upper(), f, "full") for f in COMPOSITE]


def _edge() -> list[OpCheck]:
    funcs = ("exp2", "recip", "rsqrt", "exp2sub", "add", "sub", "mul", "max", "min", "abs", "copy")
    out = [_vop("vpu-edge", f"{f.upper()} edge values", f, src=EDGE, rows=1) for f in funcs]
    out += [_vop("vpu-edge", f"{f.upper()} edge values", f, src=EDGE, rows=1, reduce=True) for f in ("rsum", "rmax", "rssq")]
    return out


def _gen() -> list[OpCheck]:
    ld = f"ld dram={DATA} tmem={TA} n=64\nld dram={WB} tmem={TB} n=4"
    return [
        _check("gen", "RLD raw", f"{ld}\nrld rd=r1 addr={TB + 1} raw\nst dram=r1+{OUT - 0x1234} tmem={TA} n=8", 8),
        _check("gen", "RLD MUL", f"{ld}\nli rd=r2 imm=0\nrld rd=r1 addr={TB + 2} raw mul factor=r2+4\n"
               f"st dram=r1+{OUT} tmem={TA} n=8", 7 + 8),
        _check("gen", "RLD loop count", f"{ld}\nrld rd=r3 addr={TB + 2} raw\nli rd=r1 imm=0\nloop body=@e count=r3+0\n"
               f"st dram=r1+{OUT} tmem=r1+0 n=1\naddi rd=r1 ra=r1 imm=4\ne:\nnop", 7),
        _vop("gen", "ARGMAX rows", "argmax", reduce=True),
        _vop("gen", "ARGMAX base", "argmax", reduce=True, extra="imm=0x00000005"),
        _vop("gen", "ARGMAX edge values", "argmax", src=EDGE, rows=1, reduce=True),
        _check("gen", "HALT CHAIN", f"{ld}\nst dram={OUT} tmem={TA + 8} n=8\nli rd=r1 imm={CHAIN_AT}\nli rd=r2 imm=2\n"
               f"halt chain ra=r1 rb=r2", (0x3000 + 32) // 4),
    ]


def _waitw() -> list[OpCheck]:
    ld = f"ld dram={DATA} tmem={TA} n=64"
    return [_check("waitw", f"WAITW {name}", f"{ld}\nwaitw addr={WB + off} dst={TB} ref={ref} cmp={cmp} mask={mask} "
                   f"interval=1 timeout=100000\nst dram={OUT} tmem={TB} n=1\nst dram={OUT + 4} tmem={TA} n=8", 9)
            for name, off, ref, cmp, mask in (("EQ", 0, 1, "eq", 0xFFFFFFFF), ("NE", 4, 0, "ne", 0xFFFFFFFF),
                                              ("GE", 8, 5, "ge", 0xFFFFFFFF), ("mask", 4, 0x34, "eq", 0xFF))]


def _collective() -> list[OpCheck]:
    return [_check("collective", "GATHER",
                   f"ld dram={DATA} tmem={TA} n=256\ngather src={TA} dst={TO} rows=4 cols=16 srs=32 drs=16 seg=64\n"
                   f"st dram={OUT} tmem={TO} n=64", 64)]


def op_checks(cfg: Config, gen: bool = False, waitw: bool = False) -> list[OpCheck]:
    """Every op check this configuration can run; GEN and WAITW programs only when the card has them."""
    out = _control() + _dma() + _mxu(cfg) + _quant(cfg) + _vpu() + _reduce() + _new() + _composite() + _edge()
    if gen:
        out += _gen()
    if waitw:
        out += _waitw()
    return out + _collective()


def golden_dram(target: Target, image: dict[int, np.ndarray]) -> np.ndarray:
    cfg = target.config()
    dram = np.zeros(cfg.DRAM_BYTES, np.uint8)
    for addr, data in image.items():
        dram[addr:addr + data.size] = data
    return dram


def run_golden(target: Target, check: OpCheck, image: dict[int, np.ndarray]) -> np.ndarray:
    """The OUT bytes the golden simulator computes for this check (from a fresh image)."""
    from .isasim import Machine
    dram = golden_dram(target, image)
    Machine(target, programs=list(check.program), drams=[dram], timing=False).run()
    return dram[OUT:OUT + check.out_bytes].copy()


@dataclass
class Mismatch:
    words: int                    # 32-bit words that differ
    first: int | None             # byte offset in OUT of the first
    bits: int                     # OR of every differing bit
    vpu_lanes: list[int]          # word index mod LANES of the differing words
    lane_words: list[int]         # differing words per lane

    @property
    def main_lane(self) -> int | None:
        """The lane holding most of the wrong words (at least half of them, and more than one word)."""
        if self.words < 2:
            return None
        lane = max(range(len(self.lane_words)), key=self.lane_words.__getitem__)
        return lane if 2 * self.lane_words[lane] >= self.words else None

    @property
    def ok(self) -> bool: return self.words == 0

    def message(self, total_words: int) -> str:
        if self.ok:
            return f"{total_words} words bit-exact"
        return (f"{self.words} of {total_words} words differ from the golden simulator, first at OUT+0x{self.first:x} "
                f"(bits 0x{self.bits:08x})")


def compare(card: np.ndarray, golden: np.ndarray, lanes: int) -> Mismatch:
    n = golden.size // 4 * 4
    a = np.ascontiguousarray(card[:n]).view("<u4")
    b = np.ascontiguousarray(golden[:n]).view("<u4")
    diff = np.flatnonzero(a != b)
    if diff.size == 0:
        return Mismatch(0, None, 0, [], [0] * lanes)
    per_lane = np.bincount(diff % lanes, minlength=lanes)
    return Mismatch(int(diff.size), int(diff[0]) * 4, int(np.bitwise_or.reduce(a[diff] ^ b[diff])),
                    [int(i) for i in np.flatnonzero(per_lane)], per_lane.tolist())


def demo_check(cfg: Config) -> OpCheck:
    """The all-units demo: DMA in, quantise, MM, VPU (elementwise, composite, reduction), DMA out."""
    d, kb, m, n = cfg.D, 2, min(2, cfg.MCOLS), 16
    body = "\n".join([
        f"ld dram={DATA} tmem={TA} n={m * kb * d}",
        f"qact src={TA} rows={m} ab=0 kb={kb} srs={kb * d}",
        f"mm sa={W8} ssa={SC} out={TO} n={n} kb={kb} rs={kb * d} m={m} ors={n} srs={4 * kb}",
        f"vop.mul dst={TC} a={TO} rows={m} cols={n} drs={n} ars={n} bmode=scalar imm=0.125",
        f"vop.exp2 dst={TC} a={TC} rows={m} cols={n} drs={n} ars={n}",
        f"vop.rsum dst={TC + m * n} a={TC} rows={m} cols={n} drs=1 ars={n}",
        f"st dram={OUT} tmem={TO} n={m * n}",
        f"st dram={OUT + 4 * m * n} tmem={TC} n={m * n + m}",
    ])
    return _check("system", "all-units demo", body, 2 * m * n + m)


def masked_check(cfg: Config) -> OpCheck:
    """Partial DRAM writes: QST bytes three apart leave the bytes between them as they were."""
    d, kb = cfg.D, 1
    body = (f"ld dram={DATA} tmem={TA} n={4 * kb * d}\n"
            f"qst src={TA} dst={OUT + 1} sdst={OUT + 0x3000} rows=4 kb={kb} srs={kb * d} drs={3 * kb * d + 5} es=3")
    return _check("system", "masked (partial) DRAM writes", body, (0x3000 + 16) // 4)


def stream_check(cfg: Config) -> OpCheck:
    """One DSTEP (the Gated-DeltaNet head step on the stream engine) from a zero state."""
    rows, cols = 4, 64
    state = OUT + 0x1000
    body = (f"ld dram={DATA} tmem={TA} n={2 * cols}\nld dram={DATA + 0x1000} tmem={TB} n={rows}\n"
            f"ld dram={EDGE + 4 * 12} tmem={TC} n=2\n"
            f"dstep state={state} qk={TA} v={TB} rows={rows} cols={cols} g={TC} gs=1 o={TO} dzero\n"
            f"st dram={OUT} tmem={TO} n={rows}")
    return _check("system", "stream program", body, (0x1000 + 4 * rows * cols) // 4)


def nop_loop(n: int) -> tuple[Instr, ...]:
    """A program that spends about n cycles in a loop of NOPs."""
    return tuple(asm.assemble(f"loop body=@e count={max(n // 4, 1)}\nnop\nnop\nnop\nnop\ne:\nhalt"))
