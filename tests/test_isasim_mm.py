"""MM, QACT and QST on the simulator against float64 numpy models (max-abs and cosine reported),
plus the weight cache being invalidated by stores."""
import numpy as np
import pytest

from otpu_core import formats, isa
from otpu_core.isasim import Machine, SimError

RNG = np.random.default_rng(11)
D = 32                       # sim-small
SA, SSA, OUT = 0x10000, 0x80000, 8000


def report(got, ref):
    got, ref = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.max(np.abs(got - ref))), float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))


def quant_model(x):
    """QACT/QST block quantisation in float64: s = amax/127, q = round-half-even(x / s)."""
    amax = np.abs(x).max(axis=-1, keepdims=True)
    s = amax / 127
    q = np.clip(np.rint(np.where(s > 0, x / np.where(s > 0, s, 1), 0)), -127, 127)
    return q, s[..., 0]


# -- an independent float64 decoder of the public weight layouts (reference 5.1) ----------------
E2M1_X2 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float64)
INT4 = np.array([0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1], np.float64)


def weights_f64(wf, rows, scales, kb, unit=False):
    n = rows.shape[0]
    if wf == isa.WF_INT8:
        w = rows[:, :kb * D].view(np.int8).astype(np.float64).reshape(n, kb, D)
        s = np.ones((n, kb)) if unit else scales[:, :4 * kb].copy().view("<f4").astype(np.float64)
        return (w * s[..., None]).reshape(n, kb * D)
    nib = np.empty((n, 2 * rows.shape[1]), np.int64)
    nib[:, 0::2], nib[:, 1::2] = rows & 15, rows >> 4
    w = (INT4 if wf == isa.WF_INT4 else E2M1_X2)[nib[:, :kb * D]].reshape(n, kb, 4, D // 4)
    if not unit:
        words = scales[:, :4 * kb].copy().view("<u4").astype(np.int64)
        bf = ((words & 0xFFFF) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
        mult = (words[..., None] >> (16 + 4 * np.arange(4))) & 15
        w = w * mult[..., None] * bf[..., None, None]
    return w.reshape(n, kb * D)


def machine_with(w, wf, x, row=False, unit=False, **qact):
    m = Machine("sim-small")
    pw = formats.quantize(w, wf, D)
    m.write_dram(SA, pw.rows)
    m.write_dram(SSA, pw.scales)
    m.write_tmem(0, x.astype(np.float32))
    kb = pw.kb
    m.load([isa.qact(src=0, rows=x.shape[0], ab=2, kb=kb, srs=x.shape[1], row=int(row), **qact), isa.halt()])
    m.run()
    return m, pw


def mm_prog(pw, m_rows, wf, ors=None, **flags):
    ors = ors or pw.n + 1
    return [isa.mm(sa=SA, ssa=SSA, out=OUT, n=pw.n, kb=pw.kb, rs=pw.rs, srs=pw.srs, m=m_rows, ors=ors, ab=2,
                   wf=wf, **flags), isa.halt()]


def act_f64(m, rows, kb):
    sl = m.slice
    q = sl.act.q[:rows, 2 * D:(2 + kb) * D].astype(np.float64).reshape(rows, kb, D)
    s = sl.act.scale[:rows, 2:2 + kb].view(np.float32).astype(np.float64)
    return (q * s[..., None]).reshape(rows, kb * D)


def test_qact_block_quantisation_against_float64():
    x = RNG.standard_normal((3, 3 * D)) * np.array([1, 100, 1e-3])[:, None]
    m, _ = machine_with(np.zeros((1, 3 * D)), 0, x)
    q = m.slice.act.q[:3, 2 * D:5 * D].astype(np.float64).reshape(3, 3, D)
    s = m.slice.act.scale[:3, 2:5].view(np.float32).astype(np.float64)
    qm, sm = quant_model(x.astype(np.float32).astype(np.float64).reshape(3, 3, D))
    assert np.abs(q - qm).max() <= 1 and (q != qm).mean() < 0.01       # rounding ties may differ by one code
    assert np.abs(s / sm - 1).max() < 2 ** -22
    err, cos = report((q * s[..., None]).ravel(), x.ravel())
    step = np.repeat(s, D, axis=-1).ravel()          # one code step per element's block
    assert np.all(np.abs((q * s[..., None]).ravel() - x.ravel()) <= 0.5 * step * (1 + 1e-6)) and cos > 0.9999, (err, cos)


def test_qact_row_mode_rscale_cscale_and_dup():
    x = RNG.standard_normal((2, 2 * D))
    r, c = RNG.uniform(0.5, 2, 2), RNG.uniform(0.5, 2, 2 * D)
    m = Machine("sim-small")
    m.write_tmem(0, x.astype(np.float32))
    m.write_tmem(500, r.astype(np.float32))
    m.write_tmem(600, c.astype(np.float32))
    m.load([isa.qact(src=0, rows=2, ab=0, kb=2, srs=2 * D, rscale_addr=500, cscale_addr=600, rscale=1, cscale=1,
                     row=1, dup=1), isa.halt()])
    m.run()
    scaled = x.astype(np.float32).astype(np.float64) * r[:, None].astype(np.float32) * c[None, :].astype(np.float32)
    qm, sm = quant_model(scaled)
    sl = m.slice
    assert np.abs(sl.act.q[:2, :2 * D] - qm).max() <= 1
    s = sl.act.scale[:2, :2].view(np.float32)
    assert np.all(s[:, 0] == s[:, 1]) and np.abs(s[:, 0] / sm - 1).max() < 1e-6   # one scale per row
    assert np.array_equal(sl.act.q[2:4, :2 * D], sl.act.q[:2, :2 * D])          # DUP copies rows
    assert np.array_equal(sl.act.scale[2:4, :2], sl.act.scale[:2, :2])


@pytest.mark.parametrize("wf", [isa.WF_INT8, isa.WF_INT4, isa.WF_E2M1])
@pytest.mark.parametrize("kb", [1, 2, 3])
def test_mm_public_formats_against_float64(wf, kb):
    n, mr = 40, 3
    w, x = RNG.standard_normal((n, kb * D)), RNG.standard_normal((mr, kb * D))
    m, pw = machine_with(w, wf, x)
    m.load(mm_prog(pw, mr, wf))
    m.run()
    got = m.read_tmem(OUT, mr * (n + 1)).view(np.float32).reshape(mr, n + 1)[:, :n]
    ref = act_f64(m, mr, kb) @ weights_f64(wf, pw.rows, pw.scales, kb).T
    err, cos = report(got, ref)
    assert err < 1e-5 * np.abs(ref).max() and cos > 1 - 1e-10, (err, cos)
    # and the whole pipeline (quantised activations and weights) tracks the float64 product
    assert report(got, x @ w.T)[1] > 0.99


@pytest.mark.parametrize("wf", [isa.WF_INT8X, isa.WF_FP4X6])
def test_mm_seed_formats_accumulate_exactly_with_one_epilogue(wf):
    n, mr, kb = 24, 2, 3
    w, x = RNG.standard_normal((n, kb * D)), RNG.standard_normal((mr, kb * D))
    m, pw = machine_with(w, wf, x, row=True)
    m.load(mm_prog(pw, mr, wf))
    m.run()
    got = m.read_tmem(OUT, mr * (n + 1)).view(np.float32).reshape(mr, n + 1)[:, :n].astype(np.float64)
    ref = act_f64(m, mr, kb) @ pw.dequantize().T
    err, cos = report(got, ref)
    # exact integer accumulation: only the epilogue's two fp32 roundings separate got from ref
    assert np.all(np.abs(got - ref) <= 2 * np.abs(ref) * 2 ** -24 + 1e-30), err
    assert cos > 1 - 1e-12


def test_mm_seed_format_refuses_block_activation_scales():
    w, x = RNG.standard_normal((8, 2 * D)), RNG.standard_normal((1, 2 * D)) * np.repeat([1, 50], D)
    m, pw = machine_with(w, isa.WF_INT8X, x, row=False)
    m.load(mm_prog(pw, 1, isa.WF_INT8X))
    with pytest.raises(SimError, match="one activation scale per row"):
        m.run()


def test_mm_acc_ascale_rmax_and_unit():
    n, mr, kb = 16, 2, 2
    w, x = RNG.integers(-127, 128, (n, kb * D)).astype(np.int8), RNG.standard_normal((mr, kb * D))
    m = Machine("sim-small")
    m.write_dram(SA, w.view(np.uint8))
    m.write_tmem(0, x.astype(np.float32))
    prev = RNG.standard_normal((mr, n + 1)).astype(np.float32)
    alpha = np.array([0.5, -2.0], np.float32)
    m.write_tmem(OUT, prev)
    m.write_tmem(7000, alpha)
    m.load([isa.qact(src=0, rows=mr, ab=2, kb=kb, srs=kb * D),
            isa.mm(sa=SA, ssa=7000, out=OUT, n=n, kb=kb, rs=kb * D, m=mr, ors=n + 1, ab=2, unit=1, acc=1, ascale=1,
                   rmax=1), isa.halt()])
    m.run()
    y = m.read_tmem(OUT, mr * (n + 1)).view(np.float32).reshape(mr, n + 1)[:, :n].astype(np.float64)
    ref = prev[:, :n].astype(np.float64) * alpha[:, None] + act_f64(m, mr, kb) @ w.astype(np.float64).T
    err, cos = report(y, ref)
    assert err < 1e-5 * np.abs(ref).max() and cos > 1 - 1e-10
    rmax = m.read_tmem(OUT + mr * (n + 1), mr).view(np.float32)
    assert np.array_equal(rmax, y.astype(np.float32).max(axis=1))


def test_mm_pair_uses_dup_rows_for_odd_blocks():
    n, mr, kb = 16, 1, 3
    w, x = RNG.standard_normal((n, kb * D)), RNG.standard_normal((mr, kb * D))
    m, pw = machine_with(w, isa.WF_INT4, x, dup=1)
    srs = 16                                   # PAIR reads scale pairs: srs a multiple of 8
    padded = np.zeros((n, srs), np.uint8)
    padded[:, :pw.srs] = pw.scales
    m.write_dram(SSA, padded)
    m.load([isa.mm(sa=SA, ssa=SSA, out=OUT, n=n, kb=kb, rs=pw.rs, srs=srs, m=mr, ors=n, ab=2, wf=isa.WF_INT4,
                   pair=1), isa.halt()])
    m.run()
    got = m.read_tmem(OUT, n).view(np.float32)
    ref = act_f64(m, mr, kb) @ weights_f64(isa.WF_INT4, pw.rows, pw.scales, kb).T
    err, cos = report(got, ref)
    assert err < 1e-5 * np.abs(ref).max() and cos > 1 - 1e-10


def test_mm_replay_beyond_mcols_equals_two_mms():
    cfg = Machine("sim-small").cfg.replace(ACT_ROWS=8)
    n, kb = 12, 2
    w = RNG.integers(-127, 128, (n, kb * D)).astype(np.int8)
    x = RNG.standard_normal((8, kb * D)).astype(np.float32)
    outs = []
    for split in (False, True):
        m = Machine("sim-small", cfg=cfg)
        m.write_dram(SA, w.view(np.uint8))
        m.write_tmem(0, x)
        prog = [isa.qact(src=0, rows=8, ab=0, kb=kb, srs=kb * D)]
        if split:   # rows 0..3 and 4..7 as two MMs on their own ACT copies
            prog += [isa.qact(src=0, rows=4, ab=4, kb=kb, srs=kb * D), isa.qact(src=4 * kb * D, rows=4, ab=6, kb=kb, srs=kb * D),
                     isa.mm(sa=SA, out=OUT, n=n, kb=kb, rs=kb * D, m=4, ors=n, ab=4, unit=1),
                     isa.mm(sa=SA, out=OUT + 4 * n, n=n, kb=kb, rs=kb * D, m=4, ors=n, ab=6, unit=1)]
        else:
            prog += [isa.mm(sa=SA, out=OUT, n=n, kb=kb, rs=kb * D, m=8, ors=n, ab=0, unit=1)]
        m.load(prog + [isa.halt()])
        m.run()
        outs.append(m.read_tmem(OUT, 8 * n))
    assert np.array_equal(outs[0], outs[1])


def test_a_store_over_cached_weights_invalidates_them():
    n, kb = 8, 1
    w = RNG.integers(-127, 128, (n, D)).astype(np.int8)
    m = Machine("sim-small")
    m.write_dram(SA, w.view(np.uint8))
    m.write_tmem(0, np.ones(D, np.float32))
    m.write_tmem(100, np.full(D // 4, 0x01010101, np.uint32))      # int8 ones, as raw words
    mm_once = [isa.qact(src=0, rows=1, ab=0, kb=kb, srs=D), isa.mm(sa=SA, out=OUT, n=n, kb=kb, rs=D, m=1, ors=n, unit=1)]
    m.load(mm_once + [isa.halt()])
    m.run()
    first = m.read_tmem(OUT, n).view(np.float32).copy()
    # the program overwrites row 3 of the weights with ST, then multiplies again
    m.load(mm_once + [isa.st(dram=SA + 3 * D, tmem=100, n=D // 4)] + mm_once + [isa.halt()])
    m.run()
    second = m.read_tmem(OUT, n).view(np.float32)
    scale = float(m.slice.act.scale[0, 0].view(np.float32))
    assert np.allclose(first, w.astype(np.float64).sum(1) * 127 * scale, rtol=1e-6)    # ones quantise to 127
    assert second[3] == np.float32(D * 127 * scale) and np.array_equal(np.delete(second, 3), np.delete(first, 3))
    m.write_dram(SA, np.zeros(D, np.uint8))                        # a host write invalidates too
    m.load(mm_once + [isa.halt()])
    m.run()
    assert m.read_tmem(OUT, 1).view(np.float32)[0] == 0


@pytest.mark.parametrize("es,drs,half", [(1, 2 * D, False), (64, 1, True)])
def test_qst_k_token_major_and_vt_dim_major_with_half(es, drs, half):
    rows, kb = 3, 2
    x = RNG.standard_normal((rows, kb * D))
    m = Machine("sim-small")
    m.write_tmem(0, x.astype(np.float32))
    dst, sdst = 0x20000, 0x30000
    row = half                      # the V^T case quantises whole rows (one scale per token)
    m.load([isa.qst(src=0, dst=dst, sdst=sdst, rows=rows, kb=kb, srs=kb * D, drs=drs, es=es, row=int(row),
                    half=int(half)), isa.halt()])
    m.run()
    ncols = kb * D // 2 if half else kb * D
    idx = dst + drs * np.arange(rows)[:, None] + es * np.arange(ncols)[None, :]
    q = m.slice.dram.bytes[idx].view(np.int8).astype(np.float64)
    xs = x.astype(np.float32).astype(np.float64)
    if row:
        qm, sm = quant_model(xs)
        s = m.read_dram(sdst, 4 * rows).view(np.float32)
        qm = qm[:, :ncols]
    else:
        qm, sm = quant_model(xs.reshape(rows, kb, D))
        qm = qm.reshape(rows, kb * D)
        s = m.read_dram(sdst, 4 * rows * kb).view(np.float32).reshape(rows, kb)
    assert np.abs(q - qm).max() <= 1
    assert np.abs(s / sm - 1).max() < 1e-6
    untouched = np.ones(m.cfg.DRAM_BYTES, bool)
    untouched[idx.ravel()] = False
    untouched[sdst: sdst + s.size * 4] = False
    assert not m.slice.dram.bytes[untouched].any()                  # nothing else written


def test_qst_data_and_scales_must_not_overlap():
    m = Machine("sim-small")
    m.load([isa.qst(src=0, dst=0x1000, sdst=0x1010, rows=1, kb=1, srs=D, drs=D, es=1), isa.halt()])
    with pytest.raises(SimError, match="overlap its scales"):
        m.run()
