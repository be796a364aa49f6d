"""QACT SUB and the seed formats' exact MM over sub-block offsets on the golden simulator
(sim-small: D=32, MCOLS=4, PAIR), against independent models:
- QACT: a float64 numpy model of the definition (docs/formats.md 4): exact int8 codes, offsets
  and row scales;
- MM: an int64 numpy model (integer activations q * 2^(Emax - e) times integer weights decoded
  here from the DRAM bytes, summed exactly, then the epilogue's roundings), bit-equal; and the
  float64 product of the dequantised operands (max-abs and cosine reported).
"""
import numpy as np
import pytest

from otpu_core import formats, isa
from otpu_core.isasim import Machine, SimError

D, SUB = 32, 8
E = isa.SUB_EXP_MAX
SA, SSA, OUT = 0x10000, 0x80000, 8000
E2M1_X2 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int64)


def report(got, ref):
    got, ref = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.max(np.abs(got - ref))), float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))


def f32(x):
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def recip_model(a):
    """The machine's reciprocal (docs/formats.md 1.3, recip) is part of the quantiser's
    definition; its sequence is checked against float64 in test_fp32_composites."""
    from otpu_core import fp32
    return fp32.to_float(fp32.recip(np.asarray(a, np.float32).view(np.uint32))).astype(np.float64)


def qact_sub_model(x):
    """float64 model of QACT ROW + SUB: (codes, row scale, offsets) for rows x [rows, K]."""
    x = np.asarray(x, np.float32).astype(np.float64)
    amax = np.abs(x).max(axis=1, keepdims=True)
    s = f32(amax * f32(1 / 127))
    inv = np.where(amax > 0, f32(127 * recip_model(amax)), 0)
    t = f32(np.abs(x).reshape(x.shape[0], -1, SUB).max(axis=2) * inv)
    with np.errstate(divide="ignore"):
        e = np.where(t > 0, np.clip(np.floor(np.log2(127 / np.where(t > 0, t, 1))), 0, E), 0).astype(np.int64)
    scaled = f32(x.reshape(x.shape[0], -1, SUB) * f32(inv * 2.0 ** e)[..., None])
    q = np.clip(np.rint(scaled), -127, 127).reshape(x.shape).astype(np.int64)
    return q, s[:, 0], e


def outlier_rows(rng, rows, k, factor=60.0):
    """Gaussian rows where a few channels are `factor` times larger (LLM activations)."""
    x = rng.standard_normal((rows, k)).astype(np.float32)
    x[:, rng.choice(k, max(1, k // 40), replace=False)] *= factor
    return x


def weight_ints(wf, pw):
    """Integer weights w_int [n, K] and the per-row fp32 factor, decoded here from the bytes:
    int8x value = code * 2^shift_k * Sw; fp4x6 value = dec2(code) * m * 2^(E_k - Ebase) * 2^(Ebase - 128)."""
    n, kb = pw.n, pw.kb
    if wf == isa.WF_INT8X:
        codes = pw.rows[:, :kb * D].view(np.int8).astype(np.int64).reshape(n, kb, D)
        shift = pw.scales[:, 4:4 + kb].astype(np.int64)
        sw = pw.scales[:, :4].copy().view("<f4")[:, 0].astype(np.float64)
        return (codes << shift[..., None]).reshape(n, kb * D), sw
    nib = np.empty((n, 2 * pw.rows.shape[1]), np.int64)
    nib[:, 0::2], nib[:, 1::2] = pw.rows & 15, pw.rows >> 4
    words = pw.scales[:, :4 * kb].copy().view("<u4").astype(np.int64)
    exps = words & 0xFF
    mult = (words[..., None] >> (8 + 6 * np.arange(4))) & 63
    base = exps.min(axis=1)
    w = E2M1_X2[nib[:, :kb * D]].reshape(n, kb, 4, SUB) * mult[..., None]
    return (w << (exps - base[:, None])[..., None, None]).reshape(n, kb * D), 2.0 ** (base - 128)


def machine(rows_x, w, wf, dup=False, row_only=False):
    m = Machine("sim-small")
    pw = formats.quantize(w, wf, D)
    m.write_dram(SA, pw.rows)
    m.write_dram(SSA, pw.scales)
    m.write_tmem(0, rows_x.astype(np.float32))
    flags = {"row": 1} if row_only else {"row": 1, "sub": 1}
    return m, pw, isa.qact(src=0, rows=rows_x.shape[0], ab=1, kb=pw.kb, srs=rows_x.shape[1], dup=int(dup), **flags)


def run_mm(m, pw, qact, rows, wf, pair=False):
    mm = isa.mm(sa=SA, ssa=SSA, out=OUT, n=pw.n, kb=pw.kb, rs=pw.rs, ors=pw.n, m=rows, ab=1, srs=pw.srs,
                wf=wf, pair=int(pair))
    m.load([qact, mm, isa.halt()])
    m.run()
    return m.read_tmem(OUT, rows * pw.n).reshape(rows, pw.n)


def test_qact_sub_codes_offsets_and_scales_equal_the_float64_model():
    rng = np.random.default_rng(1)
    x = outlier_rows(rng, 4, 4 * D)
    x[3, 2 * SUB:3 * SUB] = 0                       # a sub-block of zeros takes offset 0
    m, pw, qact = machine(x, rng.standard_normal((3, 4 * D)), isa.WF_INT8X)
    m.load([qact, isa.halt()])
    m.run()
    act = m.slice.act
    q, s, e = qact_sub_model(x)
    assert np.array_equal(act.q[:4, D:5 * D].astype(np.int64), q)
    assert np.array_equal(act.scale[:4, 1:5], np.repeat(s.astype(np.float32).view(np.uint32)[:, None], 4, axis=1))
    side = act.sub[:4, 1:5]
    assert (side & formats.SUB_MARK).all()
    assert np.array_equal(formats.unpack_suboffsets(side).reshape(4, -1), e)
    assert e.max() >= 4 and (e == 0).any() and e[3, 2] == 0           # offsets really vary
    assert act.sub[:4, 0].max() == 0 and act.sub[:4, 5].max() == 0      # blocks QACT did not write


def test_qact_sub_applies_rscale_and_cscale_first():
    rng = np.random.default_rng(3)
    x = outlier_rows(rng, 2, 2 * D)
    r = np.float32([0.5, 3.0])
    c = rng.uniform(0.5, 2, 2 * D).astype(np.float32)
    m = Machine("sim-small")
    m.write_tmem(0, x)
    m.write_tmem(500, r)
    m.write_tmem(600, c)
    m.load([isa.qact(src=0, rows=2, ab=0, kb=2, srs=2 * D, rscale_addr=500, cscale_addr=600, rscale=1, cscale=1,
                     row=1, sub=1), isa.halt()])
    m.run()
    q, s, e = qact_sub_model(f32(f32(x * r[:, None]) * c[None, :]))
    assert np.array_equal(m.slice.act.q[:2, :2 * D].astype(np.int64), q)
    assert np.array_equal(formats.unpack_suboffsets(m.slice.act.sub[:2, :2]).reshape(2, -1), e)


def test_public_qact_clears_offsets_and_uniform_rows_quantise_as_row_mode():
    rng = np.random.default_rng(2)
    x = np.sign(rng.standard_normal((2, 2 * D))).astype(np.float32)          # every sub-block at the row max
    w = rng.standard_normal((5, 2 * D))
    m, pw, qact = machine(x, w, isa.WF_INT8X)
    y_sub = run_mm(m, pw, qact, 2, isa.WF_INT8X)
    assert formats.unpack_suboffsets(m.slice.act.sub[:2, 1:3]).max() == 0
    q_sub = m.slice.act.q[:2, D:3 * D].copy()
    m2, _, qrow = machine(x, w, isa.WF_INT8X, row_only=True)
    y_row = run_mm(m2, pw, qrow, 2, isa.WF_INT8X)
    assert np.array_equal(q_sub, m2.slice.act.q[:2, D:3 * D])
    assert np.array_equal(y_sub, y_row)                                       # bit-identical results
    assert m2.slice.act.sub.max() == 0
    m.load([qrow, isa.halt()])                                                # over the SUB rows
    m.run()
    assert m.slice.act.sub.max() == 0


@pytest.mark.parametrize("wf", [isa.WF_INT8X, isa.WF_FP4X6])
@pytest.mark.parametrize("rows,kb", [(1, 1), (3, 4), (4, 7)])
def test_exact_mm_with_offsets_equals_the_int64_model(wf, rows, kb):
    rng = np.random.default_rng(10 * rows + kb + wf)
    x = outlier_rows(rng, rows, kb * D)
    w = rng.standard_normal((9, kb * D)) * np.exp2(rng.integers(-6, 1, (1, kb * D)))   # uneven blocks
    m, pw, qact = machine(x, w, wf)
    got = run_mm(m, pw, qact, rows, wf)

    q, s, e = qact_sub_model(x)
    emax = e.max(axis=1)
    a_int = (q.reshape(rows, -1, SUB) << (emax[:, None] - e)[..., None]).reshape(rows, -1)
    w_int, sw = weight_ints(wf, pw)
    acc = a_int @ w_int.T                                                  # exact int64
    assert np.abs(acc).max() < 2 ** 47
    y = f32(acc.astype(np.float32).astype(np.float64) * 2.0 ** -emax[:, None])
    y = f32(f32(y * f32(sw)[None, :]) * s[:, None])
    assert np.array_equal(got, y.astype(np.float32).view(np.uint32)), (got, y)

    ref = formats.act_values(q.astype(np.int8), s.astype(np.float32).view(np.uint32), e, D) @ pw.dequantize().T
    err, cos = report(got.view(np.float32), ref)
    print(f"WF={wf} rows={rows} kb={kb}: max-abs {err:.3g} (|ref| max {np.abs(ref).max():.3g}), cosine {cos:.9f}")
    assert err <= 2e-6 * np.abs(ref).max() and cos > 0.99999999


def test_pair_with_dup_and_offsets():
    rng = np.random.default_rng(5)
    rows, kb = 2, 6
    x = outlier_rows(rng, rows, kb * D)
    w = rng.standard_normal((7, kb * D))
    m, pw, qact = machine(x, w, isa.WF_FP4X6, dup=True)
    got = run_mm(m, pw, qact, rows, isa.WF_FP4X6, pair=True)
    act = m.slice.act
    assert np.array_equal(act.sub[2:4, 1:1 + kb], act.sub[:2, 1:1 + kb]) and act.sub[:2, 1].all()
    m2, _, _ = machine(x, w, isa.WF_FP4X6)
    plain = run_mm(m2, pw, qact, rows, isa.WF_FP4X6)
    assert np.array_equal(got, plain)        # exact: the PAIR order of the blocks cannot matter


def test_public_weights_refuse_rows_with_offsets():
    rng = np.random.default_rng(6)
    x = outlier_rows(rng, 1, 2 * D)
    m, pw, qact = machine(x, rng.standard_normal((4, 2 * D)), isa.WF_INT8)
    with pytest.raises(SimError, match="sub-block offsets \\(QACT SUB\\).*int8x/fp4x6"):
        run_mm(m, pw, qact, 1, isa.WF_INT8)


def test_sub_needs_row_mode():
    m = Machine("sim-small")
    m.load([isa.qact(src=0, rows=1, ab=0, kb=1, srs=D, sub=1), isa.halt()])
    with pytest.raises(SimError, match="QACT SUB .* needs ROW mode"):
        m.run()
