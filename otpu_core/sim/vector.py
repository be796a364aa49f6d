"""Vector semantics on TMEM: VOP (every function and broadcast), OUTER, DSTEP, STREAM, GATHER.

Each function takes the slice, the decoded instruction and its resolved words (register-relative
fields already added) and changes the slice's memories exactly as reference/isa.md 3.4, 3.7-3.9
state, using only `otpu_core.fp32` for arithmetic. A VOP whose element reads an address an
earlier element of the same instruction wrote is refused (the golden model's hazard rule).
"""
from __future__ import annotations

import numpy as np

from .. import fp32, isa, simnative
from ..isa import BMode, Instr, VFunc
from .fault import Fault

_ELEMENTWISE = {
    VFunc.ADD: lambda a, b: fp32.add(a, b),
    VFunc.SUB: lambda a, b: fp32.sub(a, b),
    VFunc.RSUB: lambda a, b: fp32.sub(b, a),
    VFunc.MUL: lambda a, b: fp32.mul(a, b),
    VFunc.MAX: lambda a, b: fp32.fmax(a, b),
    VFunc.MIN: lambda a, b: fp32.fmin(a, b),
    VFunc.COPY: lambda a, b: fp32.ftz(a),
    VFunc.EXP2: lambda a, b: fp32.exp2(a),
    VFunc.RECIP: lambda a, b: fp32.recip(a),
    VFunc.RSQRT: lambda a, b: fp32.rsqrt(a),
    VFunc.ABS: lambda a, b: fp32.fabs(a),
    VFunc.FILL: lambda a, b: fp32.ftz(b),
    VFunc.EXP2SUB: lambda a, b: fp32.exp2sub(a, b),
    VFunc.LOG2: lambda a, b: fp32.log2(a),
}
_REDUCE = {
    VFunc.RSUM: lambda a, b: fp32.rsum(a),
    VFunc.RMAX: lambda a, b: fp32.chain_max(a),
    VFunc.RSSQ: lambda a, b: fp32.rssq(a),
    VFunc.RDOT: lambda a, b: fp32.rdot(a, b),
}


def _span(idx: np.ndarray) -> tuple[int, int]:
    return (int(idx.min()), int(idx.max())) if idx.size else (0, -1)


def check_hazard(writes: np.ndarray, wseq: np.ndarray, reads: list[tuple[np.ndarray, np.ndarray]], what: str) -> None:
    """Refuse a read of an address written by an earlier element: writes[i] happens at wseq[i],
    each read array's elements at their own sequence numbers; equal numbers mean read first."""
    if writes.size == 0:
        return
    wlo, whi = _span(writes)
    for ridx, rseq in reads:
        rlo, rhi = _span(ridx)
        if ridx.size == 0 or rhi < wlo or whi < rlo:
            continue
        w, ws = writes.ravel(), np.broadcast_to(wseq, writes.shape).ravel()
        order = np.lexsort((ws, w))
        w, ws = w[order], ws[order]
        first = np.ones(w.size, bool)
        first[1:] = w[1:] != w[:-1]
        uw, useq = w[first], ws[first]                  # earliest write of each address
        r, rs = ridx.ravel(), np.broadcast_to(rseq, ridx.shape).ravel()
        pos = np.searchsorted(uw, r)
        pos = np.minimum(pos, uw.size - 1)
        bad = (uw[pos] == r) & (useq[pos] < rs)
        if bad.any():
            k = int(np.argmax(bad))
            raise Fault("hazard", f"{what}: read-after-write hazard: TMEM word {int(r[k])} is read after an "
                                  "earlier element of the same instruction wrote it")


def _tile_span(base: int, rows: int, cols: int, rs: int) -> tuple[int, int]:
    last = base + (rows - 1) * rs
    return min(base, last), max(base, last) + cols - 1


def _vop_hazard(tm, tiles: list[tuple[int, int, int, int]], dst: int, rows: int, cols: int, ocols: int,
                drs: int, reduce: bool, what: str) -> None:
    """check_hazard for a VOP whose element (r, c) reads each tile at (r, c) (broadcast where the
    tile is one row or column) and writes dst; a reduction writes a row after its last read."""
    seq = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)
    wseq = seq
    if reduce:
        seq = (seq // cols) * (cols + 1) + seq % cols
        wseq = np.broadcast_to((np.arange(rows, dtype=np.int64) * (cols + 1) + cols)[:, None], (rows, ocols))
    reads = [(np.broadcast_to(tm.tile_index(*t, what), (rows, cols)), seq) for t in tiles]
    check_hazard(tm.tile_index(dst, rows, ocols, drs, what), wseq, reads, what)


def vop(sl, ins: Instr, w: list[int]) -> None:
    f = ins.fields
    rows, cols, func, bmode = f["rows"], f["cols"], ins.func, ins.bmode
    dst, a, b, imm = w[1], w[2], w[3], w[7]
    if rows == 0 or cols == 0:
        return
    if func == VFunc.OUTER:
        return _outer(sl, ins, w)
    tm = sl.tmem
    drs, ars, brs = f["drs"], f["ars"], f["brs"]
    reduce = func in isa.REDUCE
    tiles = []                      # (base, rows, cols, rs) each element reads (hazard candidates)
    if func != VFunc.FILL:
        tm.tile_index(a, rows, cols, ars, "VOP A")
        in_place = a == dst and ars == drs and (drs >= cols or rows == 1) and not reduce
        if not in_place:    # in place, each element reads only the word it writes itself
            tiles.append((a, rows, cols, ars))
    btile = None
    if func in isa.READS_B:
        btile = {BMode.FULL: (b, rows, cols, brs), BMode.ROW: (b, rows, 1, brs), BMode.COL: (b, 1, cols, 0)}.get(bmode)
        if btile is not None:      # every element reads its B, a broadcast one included
            tm.tile_index(*btile, "VOP B")
            tiles.append(btile)
    if func == VFunc.ARGMAX and rows > 1 and drs < 2:
        raise Fault("shape", f"VOP ARGMAX over {rows} rows needs drs >= 2 (value, index pairs), got {drs}")
    ocols = (2 if func == VFunc.ARGMAX else 1) if reduce else cols
    tm.tile_index(dst, rows, ocols, drs, "VOP dst")
    wlo, whi = _tile_span(dst, rows, ocols, drs)
    if any(lo <= whi and wlo <= hi for lo, hi in (_tile_span(*t) for t in tiles)):
        _vop_hazard(tm, tiles, dst, rows, cols, ocols, drs, reduce, "VOP ARGMAX" if func == VFunc.ARGMAX else "VOP")
    if func != VFunc.ARGMAX:
        bop = {BMode.FULL: (b, brs, 1), BMode.ROW: (b, brs, 0), BMode.COL: (b, 0, 1)}.get(bmode) \
            if btile is not None else None          # (address, row stride, column stride) of B
        if simnative.vop_in_place(tm.t, func.name, rows, cols, (a, ars) if func != VFunc.FILL else None,
                                  bop, imm, (dst, drs)):
            return
    A = tm.t[tm.tile_index(a, rows, cols, ars, "VOP A")] if func != VFunc.FILL else None
    B = None
    if func in isa.READS_B:
        B = tm.t[tm.tile_index(*btile, "VOP B")] if btile is not None else np.full((1, 1), imm, np.uint32)
        B = np.broadcast_to(B, (rows, cols))
    if func in _ELEMENTWISE:
        out = np.broadcast_to(_ELEMENTWISE[func](A, B), (rows, cols))
        tm.put_tile(dst, drs, np.ascontiguousarray(out), "VOP dst")
        return
    if func == VFunc.ARGMAX:
        val, col = fp32.argmax(A)
        base = imm - (1 << 32) if imm & 0x80000000 else imm
        index = ((col.astype(np.int64) + base + (1 << 31)) % (1 << 32)) - (1 << 31)
        tm.put_tile(dst, drs, np.stack([val, fp32.i2f(index)], axis=1), "VOP dst")
        return
    out = _REDUCE[func](A, B)
    tm.put_tile(dst, drs, out.reshape(rows, 1), "VOP dst")      # row order: a later row wins


def _outer(sl, ins: Instr, w: list[int]) -> None:
    f = ins.fields
    rows, cols = f["rows"], f["cols"]
    dst, a, b, cv = w[1], w[2], w[3], w[7]
    if ins.bmode != BMode.ROW:
        raise Fault("shape", f"VOP OUTER needs bmode ROW, got {ins.bmode.name}")
    if cols > isa.OUTER_MAX_COLS:
        raise Fault("shape", f"VOP OUTER handles at most {isa.OUTER_MAX_COLS} columns, got {cols}")
    tm = sl.tmem
    drs, brs = f["drs"], f["brs"]
    Cv = tm.read(cv, cols, "VOP OUTER column vector")          # read before any write
    if ins.has(isa.F_DONE):
        Dv = np.uint32(fp32.ONE)
    elif ins.has(isa.F_DSCALAR):
        Dv = tm.read(a, 1, "VOP OUTER decay")[0]
    else:
        Dv = tm.read(a, cols, "VOP OUTER decay")
    didx = tm.tile_index(dst, rows, cols, drs, "VOP OUTER dst")
    bidx = tm.tile_index(b, rows, 1, brs, "VOP OUTER B")
    seq = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)
    reads = [(np.broadcast_to(bidx, (rows, cols)), seq)]
    if drs < cols and rows > 1:     # overlapping rows: a row may read what an earlier row wrote
        reads.append((didx, seq))
    check_hazard(didx, seq, reads, "VOP OUTER")
    out = fp32.outer(tm.t[didx], Dv, tm.t[bidx], Cv)
    tm.put_tile(dst, drs, out, "VOP OUTER dst")


# -- DSTEP ---------------------------------------------------------------------------------------
def dstep(sl, ins: Instr, w: list[int]) -> None:
    """Gated DeltaNet head step on a DRAM state; bit-identical to RDOT, MUL, SUB, MUL, OUTER, RDOT."""
    if not sl.cfg.DSTEP:
        raise Fault("illegal-opcode", "DSTEP is not built into this target (arch DSTEP = false)")
    f = ins.fields
    rows, cols = f["rows"], f["cols"]
    d, qk, v, g, o, gs = w[1], w[2], w[3], f["g"], f["o"], f["gs"]
    if not 1 <= rows <= isa.DSTEP_MAX_ROWS:
        raise Fault("shape", f"DSTEP rows must be 1..{isa.DSTEP_MAX_ROWS}, got {rows}")
    if cols not in isa.DSTEP_COLS:
        raise Fault("shape", f"DSTEP cols must be one of {isa.DSTEP_COLS}, got {cols}")
    if d % sl.cfg.D:
        raise Fault("misaligned", f"DSTEP state address 0x{d:x} is not a multiple of D={sl.cfg.D}")
    tm = sl.tmem
    qv = tm.read(qk, 2 * cols, "DSTEP q,k")
    q, k = qv[:cols], qv[cols:]
    vv = tm.read(v, rows, "DSTEP v")
    e = tm.read(g, 1, "DSTEP decay")[0]
    beta = tm.read(g + gs, 1, "DSTEP beta")[0]
    if ins.has(isa.F_DZERO):
        sl.dram.check(d, 4 * rows * cols, 4, "DSTEP state")
        S = np.zeros((rows, cols), np.uint32)
    else:
        S = sl.dram.read_words(d, rows * cols, "DSTEP state").reshape(rows, cols)
    kv = fp32.rdot(S, k[None, :])
    delta = fp32.mul(fp32.sub(vv, fp32.mul(kv, e)), beta)
    S2 = fp32.outer(S, e, delta[:, None], k[None, :])
    out = fp32.rdot(S2, q[None, :])
    tm.check(o, rows, "DSTEP o")
    sl.dram.write_words(d, S2.reshape(-1), "DSTEP state")
    tm.t[o: o + rows] = out


# -- STREAM --------------------------------------------------------------------------------------
_SCALAR_OPS = {
    isa.SOP_ADD: fp32.add, isa.SOP_SUB: fp32.sub, isa.SOP_MUL: fp32.mul, isa.SOP_MAX: fp32.fmax,
    isa.SOP_MIN: fp32.fmin, isa.SOP_EXP2SUB: fp32.exp2sub,
}
_SCALAR_UNARY = {isa.SOP_MOV: fp32.ftz, isa.SOP_RSQRT: fp32.rsqrt, isa.SOP_RECIP: fp32.recip,
                 isa.SOP_EXP2: fp32.exp2, isa.SOP_LOG2: fp32.log2}


def stream(sl, ins: Instr, w: list[int]) -> dict:
    """The descriptor-programmed row stream (reference 3.8); returns its shape for the timing model."""
    if not sl.cfg.STREAM:
        raise Fault("illegal-opcode", "STREAM is not built into this target (arch STREAM = false)")
    tm, f = sl.tmem, ins.fields
    daddr, ks = f["desc"], f["ks"]
    tm.check(daddr, isa.STREAM_DESC_FIXED, "STREAM descriptor")
    words = tm.t[daddr: min(daddr + isa.STREAM_DESC_FIXED + isa.STREAM_MAX_OPS, tm.size)]
    try:
        desc = isa.StreamDesc.decode([int(x) for x in words])
    except isa.IsaError as e:
        raise Fault("shape", f"STREAM descriptor at TMEM {daddr}: {e.message}") from None
    rows, cols = desc.rows, desc.cols
    if rows == 0 or cols == 0:
        raise Fault("shape", f"STREAM descriptor has rows={rows} cols={cols}; both must be at least 1")
    if desc.q_en and desc.o_reg_en:
        raise Fault("shape", "STREAM descriptor sets both q_en and o_reg_en")
    src, dst, vec, x, kaddr, out = w[2], w[3], w[4], w[5], w[6], w[7]
    szero, src_t, dst_t, nodst = (ins.has(m) for m in (isa.F_SZERO, isa.F_SRC_T, isa.F_DST_T, isa.F_NODST))
    ops = desc.ops
    # -- what the program uses
    slots = desc.slots()
    operands = [o[2] for o in ops] + [o[3] for o in ops if o[0] not in isa.SOP_UNARY]
    consts = {c - isa.OP_K0 for c in operands if isa.OP_K0 <= c < isa.OP_ZERO}
    consts |= {j for j in range(4) if desc.rinit >> j & 1}
    if desc.a_en and desc.a_op == isa.A_CONST:
        consts.add(desc.a_idx)
    if desc.g_src == isa.G_CONST:
        consts.add(desc.g_idx)
    if desc.b_src == isa.BS_CONST:
        consts.add(desc.b_idx)
    uses_x = isa.OP_X in operands
    # -- read every input first
    if slots and max(slots) >= isa.STREAM_SLOTS:
        raise Fault("shape", f"STREAM descriptor names column slot {max(slots)}; there are {isa.STREAM_SLOTS}")
    C = {i: tm.read(vec + i * cols, cols, f"STREAM slot {i}") for i in sorted(slots)}
    K = {}
    for j in sorted(consts):
        if j < isa.STREAM_SLOTS:
            tm.check(kaddr + j * ks, 1, f"STREAM constant K{j}")
            K[j] = np.uint32(tm.t[kaddr + j * ks])
    X = tm.read(x, rows, "STREAM x") if uses_x else None
    one = np.uint32(fp32.ONE)

    def konst(j):
        return K.get(j, one)

    # -- stream addressing
    srs = desc.srs or cols
    drs = desc.drs or cols
    if not src_t and not szero and src % sl.cfg.D:
        raise Fault("misaligned", f"STREAM DRAM source 0x{src:x} is not a multiple of D={sl.cfg.D}")
    if not dst_t and not nodst and dst % sl.cfg.D:
        raise Fault("misaligned", f"STREAM DRAM destination 0x{dst:x} is not a multiple of D={sl.cfg.D}")

    def read_rows(r0: int, n: int) -> np.ndarray:
        if szero:
            return np.zeros((n, cols), np.uint32)
        if src_t:
            return tm.tile(src + r0 * srs, n, cols, srs, "STREAM source")
        return sl.dram.read_words(src + 4 * r0 * cols, n * cols, "STREAM source").reshape(n, cols)

    def write_rows(r0: int, vals: np.ndarray) -> None:
        if nodst:
            return
        if dst_t:
            tm.put_tile(dst + r0 * drs, drs, vals, "STREAM destination")
        else:
            sl.dram.write_words(dst + 4 * r0 * cols, vals.reshape(-1), "STREAM destination")

    # validate both ranges before any write
    if not szero:
        if src_t:
            tm.tile_index(src, rows, cols, srs, "STREAM source")
        else:
            sl.dram.check(src, 4 * rows * cols, 4, "STREAM source")
    if not nodst:
        if dst_t:
            tm.tile_index(dst, rows, cols, drs, "STREAM destination")
        else:
            sl.dram.check(dst, 4 * rows * cols, 4, "STREAM destination")
    if desc.q_en or desc.o_reg_en:
        tm.check(out, rows, "STREAM out")
    # -- scalar registers r0..r7 (r4..r7 = K0..K3 where rinit says)
    regs = [np.zeros(1, np.uint32) for _ in range(8)]
    for j in range(4):
        if desc.rinit >> j & 1:
            regs[4 + j] = np.full(1, konst(j), np.uint32)
    carried = False            # an op reads a register that it or a later op writes
    for i, (op, _, oa, ob) in enumerate(ops):
        srcs = [oa] if op in isa.SOP_UNARY else [oa, ob]
        if any(s < 8 and s in {o[1] for o in ops[i:]} for s in srcs):
            carried = True
    same_space = (src_t == dst_t) and not szero and not nodst
    overlap = False
    if same_space and src != dst:
        a0, a1 = (src, src + (rows - 1) * srs + cols) if src_t else (src, src + 4 * rows * cols)
        b0, b1 = (dst, dst + (rows - 1) * drs + cols) if dst_t else (dst, dst + 4 * rows * cols)
        overlap = a0 < b1 and b0 < a1
    rowwise = carried or overlap
    o_all = np.zeros(rows, np.uint32)

    def run_rows(r0: int, S: np.ndarray) -> np.ndarray:
        n = S.shape[0]
        if desc.a_en:
            if desc.a_op == isa.A_MAX:
                A = fp32.chain_max(S)
            elif desc.a_op == isa.A_SELF:
                A = fp32.rdot(S, S)
            elif desc.a_op == isa.A_CONST:
                A = fp32.rdot(S, np.broadcast_to(konst(desc.a_idx), S.shape))
            else:
                A = fp32.rdot(S, C[desc.a_idx][None, :])
        else:
            A = np.zeros(n, np.uint32)
        xr = X[r0: r0 + n] if X is not None else None

        def operand(code):
            if code < 8:
                return regs[code]
            if code == isa.OP_A:
                return A
            if code == isa.OP_X:
                return xr
            if code < isa.OP_ZERO:
                return np.broadcast_to(konst(code - isa.OP_K0), (n,))
            return np.broadcast_to(np.uint32(0 if code == isa.OP_ZERO else fp32.ONE), (n,))
        for op, dreg, oa, ob in ops:
            if op in _SCALAR_UNARY:
                val = _SCALAR_UNARY[op](operand(oa))
            else:
                val = _SCALAR_OPS[op](operand(oa), operand(ob))
            regs[dreg] = np.broadcast_to(val, (n,)).copy()
        reg = [np.broadcast_to(r, (n,)) for r in regs]
        Dv = reg[desc.d_reg][:, None]

        def gate():
            if desc.g_src == isa.G_REG:
                return reg[desc.g_idx & 7][:, None]
            if desc.g_src == isa.G_SLOT:
                return C[desc.g_idx][None, :]
            return konst(desc.g_idx) if desc.g_src == isa.G_CONST else one

        def bvec():
            if desc.b_src == isa.BS_SLOT:
                return C[desc.b_idx][None, :]
            return konst(desc.b_idx) if desc.b_src == isa.BS_CONST else reg[desc.b_idx & 7][:, None]
        if desc.u_mode == isa.U_PASS:
            Y = fp32.ftz(S)
        elif desc.u_mode == isa.U_FMMA:
            Y = fp32.add(fp32.mul(S, gate()), fp32.mul(Dv, bvec()))
        elif desc.u_mode == isa.U_MUL:
            Y = fp32.mul(S, gate())
        else:
            Y = fp32.add(S, fp32.mul(Dv, bvec()))
        Y = np.broadcast_to(Y, S.shape)
        if desc.q_en:
            o_all[r0: r0 + n] = fp32.rdot(Y, Y if desc.q_self else C[desc.q_idx][None, :])
        elif desc.o_reg_en:
            o_all[r0: r0 + n] = reg[desc.o_reg]
        return fp32.mul(Y, C[desc.q_idx][None, :]) if desc.out_p2 else np.ascontiguousarray(Y)

    if rowwise:
        for r in range(rows):
            write_rows(r, run_rows(r, read_rows(r, 1)))
            regs = [rg[-1:].copy() for rg in regs]
    else:
        write_rows(0, run_rows(0, read_rows(0, rows)))
    if desc.q_en or desc.o_reg_en:
        tm.t[out: out + rows] = o_all
    for j in range(4):
        if desc.rsave >> j & 1:
            tm.check(kaddr + j * ks, 1, f"STREAM constant K{j}")
            tm.t[kaddr + j * ks] = regs[4 + j].reshape(-1)[-1]
    return {"shape": (rows, cols)}


# -- GATHER --------------------------------------------------------------------------------------
def gather(slices, instrs: list[Instr], ws: list[list[int]]) -> None:
    """All-gather: every slice's tile lands in every slice at dst + s*seg (reference 3.9)."""
    keys = {(w[2], ins["rows"], ins["cols"], ins["drs"], ins["seg"]) for ins, w in zip(instrs, ws)}
    if len(keys) > 1:
        raise Fault("collective", "GATHER: slices disagree on (dst, rows, cols, drs, seg): "
                    + "; ".join(f"slice {s.sid} dst {w[2]}" for s, w in zip(slices, ws)))
    dst, rows, cols, drs, seg = keys.pop()
    tiles = []
    for sl, ins, w in zip(slices, instrs, ws):
        src, srs = w[1], ins["srs"]
        sidx = sl.tmem.tile_index(src, rows, cols, srs, "GATHER source")
        lo_s, hi_s = _span(sidx)
        lo_d, hi_d = dst, dst + (len(slices) - 1) * seg + max(rows - 1, 0) * drs + cols - 1
        if rows and cols and lo_s <= hi_d and lo_d <= hi_s:
            raise Fault("shape", f"GATHER source [{lo_s}, {hi_s}] and destination [{lo_d}, {hi_d}] overlap")
        tiles.append(sl.tmem.t[sidx])
    for sl in slices:
        for s, tile in enumerate(tiles):
            sl.tmem.put_tile(dst + s * seg, drs, tile, "GATHER destination")
