"""Matrix-side semantics: MM (streamed weights x stationary ACT rows), QACT and QST.

The field checks, operand fetch and epilogue addressing of reference/isa.md 3.5-3.6 (and of the
project's QACT SUB sub-block offsets, docs/formats.md 4) live here;
the MM arithmetic (public per-block fp32 terms with the 4-partial tree, the seed's exact integer
accumulation) and the decoded-weight cache are `otpu_core.mxu`'s, weight decoding is
`otpu_core.formats`', and quantisation is `fp32.quantize` (`formats.quantize_suboffsets` with SUB).
"""
from __future__ import annotations

import numpy as np

from .. import formats, fp32, isa, mxu, simnative
from ..isa import Instr
from .fault import Fault


# -- quantiser -----------------------------------------------------------------------------------
def _quant_source(sl, src: int, rows: int, kb: int, srs: int, what: str) -> np.ndarray:
    return sl.tmem.tile(src, rows, kb * sl.cfg.D, srs, what)


def _quantize(x: np.ndarray, kb: int, d: int, row_mode: bool) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes [rows, kb*d], scale bits [rows, kb]); ROW mode replicates the row's scale."""
    rows = x.shape[0]
    groups = x if row_mode else x.reshape(rows * kb, d)
    qs = simnative.quantize(groups)
    q, s = qs if qs is not None else fp32.quantize(groups, axis=-1)
    if row_mode:
        return q, np.repeat(s.reshape(rows, 1), kb, axis=1)
    return q.reshape(rows, kb * d), s.reshape(rows, kb)


def qact(sl, ins: Instr, w: list[int]) -> None:
    """TMEM fp32 rows -> ACT RAM int8 with one scale per (row, block); with SUB (and ROW) also a
    power-of-two offset per D/4 sub-block in the block's side word (docs/formats.md 4)."""
    f, cfg = ins.fields, sl.cfg
    rows, ab, kb, srs = f["rows"], f["ab"], f["kb"], f["srs"]
    dup = ins.has(isa.F_DUP)
    if rows < 1 or kb < 1:
        raise Fault("shape", f"QACT rows and KB must be at least 1 (rows={rows}, KB={kb})")
    if dup:
        if not cfg.PAIR:
            raise Fault("illegal-opcode", "QACT DUP needs column reuse (arch PAIR = false on this target)")
        if 2 * rows > cfg.MCOLS:
            raise Fault("shape", f"QACT DUP writes 2*rows = {2 * rows} rows; MCOLS is {cfg.MCOLS}")
    elif rows > cfg.act_rows:
        raise Fault("shape", f"QACT rows={rows} exceeds the ACT RAM's {cfg.act_rows} rows")
    if ab + kb > cfg.ACT_BLOCKS:
        raise Fault("out-of-range", f"QACT blocks [{ab}, {ab + kb}) exceed ACT_BLOCKS={cfg.ACT_BLOCKS}")
    if ins.has(isa.F_SUB) and not ins.has(isa.F_ROW):
        raise Fault("shape", "QACT SUB (sub-block offsets) needs ROW mode: one scale per row")
    x = _quant_source(sl, w[1], rows, kb, srs, "QACT source")
    if ins.has(isa.F_RSCALE):
        x = fp32.mul(x, sl.tmem.read(f["rscale_addr"], rows, "QACT rscale")[:, None])
    if ins.has(isa.F_CSCALE):
        x = fp32.mul(x, sl.tmem.read(f["cscale_addr"], kb * cfg.D, "QACT cscale")[None, :])
    d = cfg.D
    if ins.has(isa.F_SUB):
        q, s, e = formats.quantize_suboffsets(x, d)
        s, side = np.repeat(s[:, None], kb, axis=1), formats.pack_suboffsets(e)
    else:
        (q, s), side = _quantize(x, kb, d, ins.has(isa.F_ROW)), 0
    act = sl.act
    for base in ((0, rows) if dup else (0,)):
        act.q[base: base + rows, ab * d: (ab + kb) * d] = q
        act.scale[base: base + rows, ab: ab + kb] = s
        act.sub[base: base + rows, ab: ab + kb] = side


def qst(sl, ins: Instr, w: list[int]) -> None:
    """TMEM fp32 rows -> DRAM int8 bytes at dst + r*drs + c*es, scales at sdst."""
    f, cfg = ins.fields, sl.cfg
    src, dst, sdst = w[1], w[2], w[3]
    rows, kb, srs, drs, es = f["rows"], f["kb"], f["srs"], f["drs"], f["es"]
    row_mode, half = ins.has(isa.F_ROW), ins.has(isa.F_HALF)
    if rows < 1 or kb < 1:
        raise Fault("shape", f"QST rows and KB must be at least 1 (rows={rows}, KB={kb})")
    if half and not row_mode:
        raise Fault("shape", "QST HALF needs ROW mode")
    x = _quant_source(sl, src, rows, kb, srs, "QST source")
    q, s = _quantize(x, kb, cfg.D, row_mode)
    ncols = kb * cfg.D // 2 if half else kb * cfg.D
    q = q[:, :ncols]
    idx = dst + drs * np.arange(rows, dtype=np.int64)[:, None] + es * np.arange(ncols, dtype=np.int64)[None, :]
    lo, hi = int(idx.min()), int(idx.max()) + 1
    sl.dram.check(lo, hi - lo, 1, "QST data")
    if row_mode:
        scales, nsc = s[:, 0], rows
    else:
        scales, nsc = s.reshape(-1), rows * kb
    sl.dram.check(sdst, 4 * nsc, 4, "QST scales")
    if lo < sdst + 4 * nsc and sdst < hi:
        raise Fault("shape", f"QST data bytes [0x{lo:x}, 0x{hi:x}) overlap its scales "
                             f"[0x{sdst:x}, 0x{sdst + 4 * nsc:x})")
    sl.dram.bytes[idx] = q.view(np.uint8)
    sl.dram.note_write(lo, hi)
    sl.dram.write_words(sdst, scales, "QST scales")


# -- MM ------------------------------------------------------------------------------------------
def mm_check(sl, ins: Instr, w: list[int]) -> tuple[int, int]:
    """The MM validity checks in the reference's order; returns (ACT rows used, weight bytes per row)."""
    f, cfg = ins.fields, sl.cfg
    n, kb, m, ab = f["n"], f["kb"], f["m"], f["ab"]
    pair, wf = ins.has(isa.F_PAIR), ins.wf
    if n < 1 or kb < 1:
        raise Fault("shape", f"MM: N and KB must be at least 1 (N={n}, KB={kb})")
    r = 2 * m if pair else m
    if not 0 < r <= cfg.act_rows:
        raise Fault("shape", f"MM uses {r} ACT rows; must be 1..{cfg.act_rows}")
    if ab + kb > cfg.ACT_BLOCKS:
        raise Fault("out-of-range", f"MM ACT blocks [{ab}, {ab + kb}) exceed ACT_BLOCKS={cfg.ACT_BLOCKS}")
    if (ins.has(isa.F_RMAX) or ins.has(isa.F_ASCALE)) and m > cfg.MCOLS:
        raise Fault("shape", f"MM RMAX/ASCALE need M <= MCOLS={cfg.MCOLS}, got M={m}")
    if pair:
        if not cfg.PAIR:
            raise Fault("illegal-opcode", "MM PAIR needs column reuse (arch PAIR = false on this target)")
        if 2 * m > cfg.MCOLS or wf not in isa.WF_4BIT:
            raise Fault("shape", f"MM PAIR needs 2M <= MCOLS={cfg.MCOLS} and a 4-bit WF (M={m}, WF={wf})")
        if not ins.has(isa.F_UNIT) and (w[2] % 8 or f["srs"] % 8):
            raise Fault("misaligned", f"MM PAIR scales: ssa 0x{w[2]:x} and srs {f['srs']} must be multiples of 8")
    if ins.has(isa.F_ASCALE) and not (ins.has(isa.F_UNIT) and ins.has(isa.F_ACC)):
        raise Fault("shape", "MM ASCALE needs UNIT and ACC")
    d = cfg.D
    row_bytes = formats.row_bytes(wf, d, kb)
    sa, rs = w[1], f["rs"]
    if sa % d or rs % d:
        raise Fault("misaligned", f"MM weight rows: sa 0x{sa:x} and rs {rs} must be multiples of D={d}")
    sl.dram.check(sa, (n - 1) * rs + row_bytes, d, "MM weights")
    return r, row_bytes


def _weights(sl, ins: Instr, sa: int, ssa: int, row_bytes: int) -> formats.Decoded:
    """The instruction's weights as the MXU multiplies them, from the slice's decode cache when
    neither the rows nor their side data were written since they were decoded."""
    f, d = ins.fields, sl.cfg.D
    n, kb, rs, srs, wf = f["n"], f["kb"], f["rs"], f["srs"], ins.wf
    unit = ins.has(isa.F_UNIT)
    rows = sl.dram.rows(sa, n, rs, row_bytes, "MM weights", align=d)
    scales = None
    gen_s = None
    if not unit:
        width = formats.scale_read_bytes(wf, kb)
        scales = sl.dram.rows(ssa, n, srs, width, "MM scales", align=4)
        gen_s = sl.dram.generation(ssa, ssa + (n - 1) * srs + width)
    key = (sa, rs, n, kb, wf, unit, ssa, srs, d, sl.dram.generation(sa, sa + (n - 1) * rs + row_bytes), gen_s)
    try:
        return sl.wcache.get(key, wf, d, kb, rows, scales, unit)
    except formats.WeightFormatError as e:
        raise Fault("shape", f"MM weights at 0x{sa:x}: {e}") from None


def _native_int8(sl, ins: Instr, sa: int, ssa: int, rows_act: int, row_bytes: int) -> np.ndarray | None:
    """The MM's accumulation by the native kernel, from the DRAM rows themselves, when the
    weights are int8 (no PAIR, no sub-block offsets); None: take the decoded-weight path."""
    f, d = ins.fields, sl.cfg.D
    n, kb, ab = f["n"], f["kb"], f["ab"]
    if ins.wf != isa.WF_INT8 or ins.has(isa.F_PAIR) or simnative.lib() is None:
        return None
    if (sl.act.sub[:rows_act, ab:ab + kb] & formats.SUB_MARK).any():
        return None
    rows = sl.dram.rows(sa, n, f["rs"], row_bytes, "MM weights", align=d)
    scales = None if ins.has(isa.F_UNIT) else \
        sl.dram.rows(ssa, n, f["srs"], formats.scale_read_bytes(ins.wf, kb), "MM scales", align=4)
    return simnative.mm_int8(sl.act.q[:rows_act, ab * d:(ab + kb) * d], sl.act.scale[:rows_act, ab:ab + kb],
                             rows, scales, kb, d)


def mm(sl, ins: Instr, w: list[int]) -> None:
    """Streamed weight rows x stationary ACT rows (reference 3.5; seed formats: docs/formats.md)."""
    f, cfg, tm = ins.fields, sl.cfg, sl.tmem
    rows_act, row_bytes = mm_check(sl, ins, w)
    sa, ssa, out = w[1], w[2], w[3]
    n, kb, m, ab, ors = f["n"], f["kb"], f["m"], f["ab"], f["ors"]
    d = cfg.D
    idx = tm.tile_index(out, m, n, ors, "MM out")
    if ins.has(isa.F_RMAX):
        tm.check(out + m * ors, m, "MM row maxima")
    alpha = tm.read(ssa, m, "MM ASCALE factors") if ins.has(isa.F_ASCALE) else None
    acc = _native_int8(sl, ins, sa, ssa, rows_act, row_bytes)
    if acc is None:
        weights = _weights(sl, ins, sa, 0 if ins.has(isa.F_ASCALE) else ssa, row_bytes)
        try:
            acc = mxu.mm(sl.act.q[:rows_act, ab * d:(ab + kb) * d], sl.act.scale[:rows_act, ab:ab + kb], weights,
                         pair=ins.has(isa.F_PAIR), act_sub=sl.act.sub[:rows_act, ab:ab + kb])
        except mxu.MxuError as e:
            raise Fault("shape", f"MM: {e}") from None
    prev = tm.t[idx] if ins.has(isa.F_ACC) else None
    y = mxu.epilogue(acc, prev, alpha)
    tm.put_tile(out, ors, y, "MM out")
    if ins.has(isa.F_RMAX):
        tm.t[out + m * ors: out + m * ors + m] = fp32.chain_max(y)
