"""What each instruction asks of the machine: unit, cycles, footprint and DRAM bytes (a `Work`).

Pure functions of the decoded instruction, its resolved words and the target (timing is
data-independent). The rates are those of docs/simulator.md "Timing model"; footprints follow
reference/isa.md 7 (`fp_ranges`).
"""
from __future__ import annotations

from .. import formats, isa
from ..isa import BMode, Instr, Op, VFunc
from ..target import Config, Uarch
from ..timing import ACT, ALL_DRAM, COLL, DMA, DRAM, MXU, QNT, TMEM, VPU, Work

VPU_LATENCY = 4          # VPU pipeline: operand read, op, round, write
REDUCE_LATENCY = 8       # the 64-partial fold after the last element
QNT_LATENCY = 4          # amax, reciprocal, scale, write
STREAM_FILL = 200        # stream engine fill (reference 7: a 128x128 head takes 2,048 + ~200)
STREAM_WORDS_PER_CYCLE = 8
STREAM_MAX = 256         # STREAM's conservative footprint (reference 7)
SEQ = Work(None)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tile(base: int, rows: int, cols: int, rs: int) -> tuple:
    if rows <= 0 or cols <= 0:
        return ()
    lo = base
    hi = base + (rows - 1) * rs + cols
    return ((TMEM, lo, hi),)


def mm_bytes(ins: Instr, cfg: Config) -> tuple[int, int]:
    """(weight bytes per row, side-data bytes per row) an MM streams from DRAM."""
    kb, wf = ins.fields["kb"], ins.wf
    side = 0 if ins.has(isa.F_UNIT) else formats.scale_read_bytes(wf, kb)
    return formats.row_bytes(wf, cfg.D, kb), side


def work_of(ins: Instr, w: list[int], cfg: Config, ua: Uarch, polls: int = 0, shape: tuple[int, int] = (0, 0)) -> Work:
    """The Work of one instruction; `polls` (WAITW failed polls) and `shape` (STREAM rows, cols)
    come from execution."""
    op = ins.op
    f = ins.fields
    lanes = cfg.LANES
    if op in (Op.NOP, Op.LI, Op.ADDI, Op.LOOP, Op.HALT, Op.RLD):
        return SEQ
    if op == Op.LD:
        n = f["n"]
        return Work(DMA, _cdiv(n, lanes), reads=((DRAM, w[1], w[1] + 4 * n),), writes=((TMEM, w[2], w[2] + n),),
                    b_rd=4 * n)
    if op == Op.ST:
        n = f["n"]
        return Work(DMA, _cdiv(n, lanes), reads=((TMEM, w[2], w[2] + n),), writes=((DRAM, w[1], w[1] + 4 * n),),
                    b_wr=4 * n)
    if op == Op.WAITW:
        return Work(DMA, polls * max(f["interval"], 1), reads=(ALL_DRAM,), writes=(ALL_DRAM, (TMEM, w[2], w[2] + 1)),
                    b_rd=64 * (polls + 1))
    if op == Op.MM:
        return _mm(ins, w, cfg, ua)
    if op == Op.QACT:
        rows, kb = f["rows"], f["kb"]
        n = rows * kb * cfg.D
        reads = _tile(w[1], rows, kb * cfg.D, f["srs"])
        if ins.has(isa.F_CSCALE):
            reads += ((TMEM, f["cscale_addr"], f["cscale_addr"] + kb * cfg.D),)
        if ins.has(isa.F_RSCALE):
            reads += ((TMEM, f["rscale_addr"], f["rscale_addr"] + rows),)
        return Work(QNT, _cdiv(n, lanes), reads=reads, writes=((ACT, f["ab"], f["ab"] + kb),), latency=QNT_LATENCY)
    if op == Op.QST:
        return _qst(ins, w, cfg, ua)
    if op == Op.VOP:
        return _vop(ins, w, cfg, ua)
    if op == Op.DSTEP:
        rows, cols = f["rows"], f["cols"]
        state = 4 * rows * cols
        return Work(DMA, _cdiv(rows * cols, STREAM_WORDS_PER_CYCLE) + STREAM_FILL,
                    reads=((TMEM, w[2], w[2] + 2 * cols), (TMEM, w[3], w[3] + rows), (TMEM, f["g"], f["g"] + 1),
                           (TMEM, f["g"] + f["gs"], f["g"] + f["gs"] + 1), (DRAM, w[1], w[1] + state)),
                    writes=((DRAM, w[1], w[1] + state), (TMEM, f["o"], f["o"] + rows)),
                    b_rd=0 if ins.has(isa.F_DZERO) else state, b_wr=state)
    if op == Op.STREAM:
        return _stream(ins, w, cfg, *shape)
    if op == Op.GATHER:
        rows, cols = f["rows"], f["cols"]
        return Work(COLL, _cdiv(cfg.S * rows * cols, lanes), reads=_tile(w[1], rows, cols, f["srs"]),
                    writes=((TMEM, w[2], w[2] + (cfg.S - 1) * f["seg"] + max(rows - 1, 0) * f["drs"] + cols),))
    if op == Op.BAR:
        return Work(COLL, 1, barrier=True)
    raise AssertionError(f"no cost model for {op.name}")


def _mm(ins: Instr, w: list[int], cfg: Config, ua: Uarch) -> Work:
    f = ins.fields
    n, kb, m, ors = f["n"], f["kb"], f["m"], f["ors"]
    pair = ins.has(isa.F_PAIR)
    rows_act = 2 * m if pair else m
    row_bytes, scale_bytes = mm_bytes(ins, cfg)
    chunks = n * row_bytes // cfg.D
    per_chunk = 2 if ins.wf in isa.WF_4BIT and not pair else 1      # 4-bit: one D-block per cycle
    replay = _cdiv(rows_act, cfg.MCOLS)
    steps = chunks * per_chunk * replay
    sa, ssa, out = w[1], w[2], w[3]
    reads = ((DRAM, sa, sa + (n - 1) * f["rs"] + row_bytes), (ACT, f["ab"], f["ab"] + kb))
    if scale_bytes and not ins.has(isa.F_ASCALE):
        reads += ((DRAM, ssa, ssa + (n - 1) * f["srs"] + scale_bytes),)
    if ins.has(isa.F_ASCALE):
        reads += ((TMEM, ssa, ssa + m),)
    hi = out + (m - 1) * ors + n
    writes = ((TMEM, out, hi),)
    if ins.has(isa.F_ACC):
        reads += ((TMEM, out, hi),)
    if ins.has(isa.F_RMAX):
        writes += ((TMEM, out + m * ors, out + m * ors + m),)
    banks = len({(j * ors) % cfg.LANES for j in range(m)})
    return Work(MXU, steps, reads=reads, writes=writes, b_rd=n * row_bytes, a_rd=n * scale_bytes,
                latency=ua.MXU_LATENCY, macs=chunks * replay, deny=n * (m - banks), late_writes=True)


def _qst(ins: Instr, w: list[int], cfg: Config, ua: Uarch) -> Work:
    f = ins.fields
    rows, kb, es, drs = f["rows"], f["kb"], f["es"], f["drs"]
    ncols = kb * cfg.D // 2 if ins.has(isa.F_HALF) else kb * cfg.D
    nbytes = rows * ncols
    nscales = rows if ins.has(isa.F_ROW) else rows * kb
    compute = _cdiv(rows * kb * cfg.D, cfg.LANES)
    if es > 1:   # V^T append: every byte is one 64-byte read-modify-write
        compute += nbytes * ua.VT_APPEND_CYCLES
        sw = 64 * nbytes
    else:
        sw = nbytes
    dlo, dhi = w[2], w[2] + (rows - 1) * drs + (ncols - 1) * es + 1
    return Work(QNT, compute, reads=_tile(w[1], rows, kb * cfg.D, f["srs"]),
                writes=((DRAM, dlo, dhi), (DRAM, w[3], w[3] + 4 * nscales)), sw_wr=sw + 4 * nscales,
                latency=QNT_LATENCY)


def _vop(ins: Instr, w: list[int], cfg: Config, ua: Uarch) -> Work:
    f = ins.fields
    rows, cols, func, bmode = f["rows"], f["cols"], ins.func, ins.bmode
    dst, a, b, imm = w[1], w[2], w[3], w[7]
    n = rows * cols
    if func == VFunc.OUTER:
        dv = () if ins.has(isa.F_DONE) else ((TMEM, a, a + (1 if ins.has(isa.F_DSCALAR) else cols)),)
        tile = _tile(dst, rows, cols, f["drs"])
        reads = tile + dv + ((TMEM, imm, imm + cols),) + _tile(b, rows, 1, f["brs"])
        return Work(VPU, _cdiv(n, cfg.LANES), reads=reads, writes=tile, latency=VPU_LATENCY)
    reads = () if func == VFunc.FILL else _tile(a, rows, cols, f["ars"])
    if func in isa.READS_B:
        if bmode == BMode.FULL:
            reads += _tile(b, rows, cols, f["brs"])
        elif bmode == BMode.ROW:
            reads += _tile(b, rows, 1, f["brs"])
        elif bmode == BMode.COL:
            reads += _tile(b, 1, cols, 0)
    rate = ua.COMPOSITE_COLS_PER_CYCLE if func in isa.COMPOSITE else cfg.LANES
    if func in isa.REDUCE:
        width = 2 if func == VFunc.ARGMAX else 1
        return Work(VPU, _cdiv(n, rate), reads=reads, writes=_tile(dst, rows, width, f["drs"]),
                    latency=VPU_LATENCY + REDUCE_LATENCY)
    return Work(VPU, _cdiv(n, rate), reads=reads, writes=_tile(dst, rows, cols, f["drs"]), latency=VPU_LATENCY)


def _stream(ins: Instr, w: list[int], cfg: Config, rows: int, cols: int) -> Work:
    """STREAM: rows x cols state words at the stream engine's rate; the footprint is the
    conservative one of reference 7 (the shape lives in the TMEM descriptor)."""
    f = ins.fields
    span = 4 * STREAM_MAX * STREAM_MAX
    src_t, dst_t = ins.has(isa.F_SRC_T), ins.has(isa.F_DST_T)
    reads = ((TMEM, f["desc"], f["desc"] + 8), (TMEM, w[4], w[4] + isa.STREAM_SLOTS * STREAM_MAX),
             (TMEM, w[5], w[5] + STREAM_MAX), (TMEM, w[6], w[6] + f["ks"] * 3 + 1))
    writes = ((TMEM, f["out"], f["out"] + STREAM_MAX),)
    state = 4 * rows * cols
    b_rd = b_wr = 0
    if not ins.has(isa.F_SZERO):
        reads += ((TMEM, w[2], w[2] + STREAM_MAX * STREAM_MAX),) if src_t else ((DRAM, w[2], w[2] + span),)
        b_rd = 0 if src_t else state
    if not ins.has(isa.F_NODST):
        writes += ((TMEM, w[3], w[3] + STREAM_MAX * STREAM_MAX),) if dst_t else ((DRAM, w[3], w[3] + span),)
        b_wr = 0 if dst_t else state
    return Work(DMA, _cdiv(rows * cols, STREAM_WORDS_PER_CYCLE) + STREAM_FILL,
                reads=reads, writes=writes, b_rd=b_rd, b_wr=b_wr)
