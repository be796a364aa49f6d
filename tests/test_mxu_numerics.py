"""MM numerics against independent models: the public per-block fp32 terms and 4-partial tree
(float64 model of every rounding, numpy int64 block dots) and the seed's exact integer sum (numpy
int64, one RNE rounding done in pure Python integers), plus float64 matmuls of the dequantised
weights for max-abs and cosine."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from test_fp32_basic import exact_i2f, model, tree_model

from otpu_core import formats as Fm
from otpu_core import fp32 as F
from otpu_core import mxu
from otpu_core.isa import WF_E2M1, WF_FP4X6, WF_INT4, WF_INT8, WF_INT8X

D = 32


def activations(rng, rows, kb, row_mode=False):
    x = rng.normal(size=(rows, kb, D)).astype(np.float32)
    if row_mode:
        q, s = F.quantize(x.reshape(rows, kb * D))
        return q, np.repeat(s[:, None], kb, axis=1)
    q, s = F.quantize(x)
    return q.reshape(rows, kb * D), s


def int_dots(q, dec):
    """numpy int64 block dots [rows, n, kb]."""
    kb = dec.w.shape[0]
    a = q.reshape(q.shape[0], kb, D).astype(np.int64)
    w = dec.w.astype(np.int64)                                          # [kb, n, d] integers
    return np.einsum("rkd,knd->rnk", a, w)


def public_model(q, s, dec, pair=False):
    dots = int_dots(q, dec)
    rows, n, kb = dots.shape
    t = model("mul", model("mul", F.from_float(dots.astype(np.float64)), dec.block_scale[None]), s[:, None, :])
    if pair:
        m = rows // 2
        odd = np.concatenate([t[m:, :, 1::2], np.zeros((m, n, kb % 2), np.uint32)], axis=-1)
        t = model("add", t[:m, :, 0::2], odd)
    return np.array([[tree_model(t[j, i], 4, False) for i in range(n)] for j in range(t.shape[0])], np.uint32)


def dequant_matmul(q, s, dec):
    a = q.reshape(q.shape[0], -1, D).astype(np.float64) * F.to_float(s).astype(np.float64)[:, :, None]
    return a.reshape(q.shape[0], -1) @ dec.values().T


def report(got, want64):
    g = F.to_float(got).astype(np.float64)
    maxabs = np.abs(g - want64).max()
    cos = (g * want64).sum() / np.linalg.norm(g) / np.linalg.norm(want64)
    return maxabs, cos


@pytest.mark.parametrize("wf", [WF_INT8, WF_INT4, WF_E2M1])
@pytest.mark.parametrize("kb", [1, 2, 3, 5, 9])
def test_public_formats_match_the_tree_model_bit_for_bit(wf, kb):
    rng = np.random.default_rng(kb * 10 + wf)
    p = Fm.quantize(rng.normal(size=(7, kb * D)).astype(np.float32), wf, D)
    dec = p.decode()
    q, s = activations(rng, 3, kb)
    got = mxu.mm(q, s, dec)
    np.testing.assert_array_equal(got, public_model(q, s, dec))
    maxabs, cos = report(got, dequant_matmul(q, s, dec))
    assert maxabs < 1e-5 * np.abs(F.to_float(got)).max() and cos > 0.999999


def test_public_unit_with_acc_and_ascale_epilogues():
    rng = np.random.default_rng(1)
    p = Fm.quantize(rng.normal(size=(6, 3 * D)).astype(np.float32), WF_E2M1, D)
    dec = Fm.decode(WF_E2M1, D, 3, p.rows, None, unit=True)
    q, s = activations(rng, 2, 3)
    acc = mxu.mm(q, s, dec)
    np.testing.assert_array_equal(acc, public_model(q, s, dec))
    prev = F.from_float(rng.normal(size=(2, 6)))
    alpha = F.from_float(rng.normal(size=2))
    np.testing.assert_array_equal(mxu.epilogue(acc, prev), model("add", prev, acc))
    np.testing.assert_array_equal(mxu.epilogue(acc, prev, alpha),
                                  model("add", model("mul", prev, alpha[:, None]), acc))
    assert mxu.epilogue(acc) is acc


@pytest.mark.parametrize("kb", [1, 4, 5])
def test_public_pair_adds_row_j_even_and_row_j_plus_m_odd_blocks(kb):
    rng = np.random.default_rng(kb)
    p = Fm.quantize(rng.normal(size=(5, kb * D)).astype(np.float32), WF_INT4, D)
    dec = p.decode()
    q, s = activations(rng, 4, kb)
    np.testing.assert_array_equal(mxu.mm(q, s, dec, pair=True), public_model(q, s, dec, pair=True))


def test_zero_dots_are_positive_zero():
    # all products 0 * negative = -0: the IEEE float sum is -0 but i2f(0) is +0
    w = -np.ones((2, D), np.float32)
    dec = Fm.quantize(w, WF_INT8, D).decode()
    q = np.zeros((1, D), np.int8)
    s = F.from_float([[-1.0]])
    # BLAS may or may not return -0 for such a sum; the term treats the dot as i2f(0) = +0
    assert list(F.block_terms(np.float32([-0.0, 0.0]), F.ONE, F.ONE)) == [0, 0]
    assert list(F.block_terms(np.float32([-0.0, 3.0]), F.ONE, 0xBF800000)) == [0x80000000, 0xC0400000]
    assert list(mxu.mm(q, s, dec)[0]) == [0, 0]                         # term -0, partial +0 + -0
    np.testing.assert_array_equal(mxu.mm(q, s, dec), public_model(q, s, dec))


def seed_model(q, s, dec, pair=False):
    """Exact int64 sum of the shifted block dots, one RNE to fp32 in Python integers, then the
    two rounded muls by Sw and Sa' (float64 model)."""
    dots = int_dots(q, dec)                                              # [rows, n, kb]
    rows, n, kb = dots.shape
    if pair:
        m = rows // 2
        dots = np.where(np.arange(kb) % 2 == 1, dots[m:], dots[:m])
        s = s[:m]
    acc = (dots << dec.shift[None].astype(np.int64)).sum(axis=-1)
    rounded = np.array([[exact_i2f(int(v)) for v in row] for row in acc], np.uint32)
    return acc, model("mul", model("mul", rounded, dec.row_scale[None]), s[:, :1])


@pytest.mark.parametrize("wf", [WF_INT8X, WF_FP4X6])
def test_seed_formats_sum_exactly_then_round_once(wf):
    rng = np.random.default_rng(wf)
    kb = 6
    w = rng.normal(size=(9, kb * D)) * np.exp2(rng.integers(-8, 8, (9, kb, 1))).repeat(D, -1).reshape(9, -1)
    p = Fm.quantize(w.astype(np.float32), wf, D)
    dec = p.decode()
    assert dec.shift.max() >= 8                                          # sums far beyond 2^24
    q, s = activations(rng, 3, kb, row_mode=True)
    acc, want = seed_model(q, s, dec)
    assert np.abs(acc).max() > 2 ** 24
    got = mxu.mm(q, s, dec)
    np.testing.assert_array_equal(got, want)
    maxabs, cos = report(got, dequant_matmul(q, s, dec))
    assert maxabs <= 2 * 2.0 ** -23 * np.abs(F.to_float(got)).max() and cos > 0.9999999


def test_seed_integer_sum_is_exact_with_unit_scales():
    rng = np.random.default_rng(4)
    kb = 8
    p = Fm.quantize(rng.normal(size=(5, kb * D)).astype(np.float32), WF_INT8X, D)
    side = p.scales.copy()
    side[:, :4] = np.array([1.0], np.float32).view(np.uint8)                       # Sw = 1
    side[:, 4:4 + kb] = rng.integers(0, 17, (5, kb))                      # every shift 0..16
    dec = Fm.decode(WF_INT8X, D, kb, p.rows, side)
    q = rng.integers(-127, 128, (2, kb * D)).astype(np.int8)
    s = np.full((2, kb), F.ONE, np.uint32)                                 # Sa' = 1
    acc, _ = seed_model(q, s, dec)
    got = mxu.mm(q, s, dec)
    np.testing.assert_array_equal(got, [[exact_i2f(int(v)) for v in row] for row in acc])


def test_seed_result_is_independent_of_block_order():
    rng = np.random.default_rng(8)
    kb = 7
    p = Fm.quantize(rng.normal(size=(4, kb * D)).astype(np.float32), WF_FP4X6, D)
    q, s = activations(rng, 2, kb, row_mode=True)
    perm = rng.permutation(kb)
    words = p.scales.view("<u4")[:, perm].copy()
    codes = Fm.unpack_nibbles(p.rows[:, : kb * D // 2]).reshape(4, kb, D)[:, perm]
    rows = Fm.pack_nibbles(codes.reshape(4, -1))
    dec_perm = Fm.decode(WF_FP4X6, D, kb, rows, words.view(np.uint8))
    q_perm = q.reshape(2, kb, D)[:, perm].reshape(2, -1)
    np.testing.assert_array_equal(mxu.mm(q_perm, s, dec_perm), mxu.mm(q, s, p.decode()))


def test_seed_pair_equals_the_merged_rows():
    rng = np.random.default_rng(12)
    kb = 5
    dec = Fm.quantize(rng.normal(size=(3, kb * D)).astype(np.float32), WF_FP4X6, D).decode()
    q, s = activations(rng, 2, kb, row_mode=True)
    q[1] = rng.integers(-127, 128, kb * D)                                 # DUP would copy; differ here
    s[1] = s[0]
    merged = q.reshape(2, kb, D)[0].copy()
    merged[1::2] = q.reshape(2, kb, D)[1, 1::2]
    got = mxu.mm(q, s, dec, pair=True)
    np.testing.assert_array_equal(got, mxu.mm(merged.reshape(1, -1), s[:1], dec))
    np.testing.assert_array_equal(got, seed_model(q, s, dec, pair=True)[1])


def test_seed_formats_refuse_per_block_activation_scales():
    rng = np.random.default_rng(2)
    dec = Fm.quantize(rng.normal(size=(2, 2 * D)).astype(np.float32), WF_INT8X, D).decode()
    q, s = activations(rng, 2, 2)
    with pytest.raises(mxu.MxuError, match="one activation scale per row"):
        mxu.mm(q, s, dec)


def test_weight_cache_hits_invalidates_and_evicts():
    rng = np.random.default_rng(3)
    p = Fm.quantize(rng.normal(size=(64, 4 * D)).astype(np.float32), WF_INT8, D)
    cache = mxu.WeightCache(max_bytes=2 * p.decode().nbytes)
    first = cache.get(("dram", 0, 1), WF_INT8, D, 4, p.rows, p.scales, False)
    assert cache.get(("dram", 0, 1), WF_INT8, D, 4, p.rows, p.scales, False) is first
    assert (cache.hits, cache.misses) == (1, 1)
    changed = p.rows.copy()
    changed[0, 0] ^= 1
    second = cache.get(("dram", 0, 2), WF_INT8, D, 4, changed, p.scales, False)   # new generation
    assert second is not first and second.w[0, 0, 0] != first.w[0, 0, 0]
    cache.get(("dram", 4096, 1), WF_INT8, D, 4, p.rows, p.scales, False)
    assert len(cache) == 2 and cache.bytes <= cache.max_bytes                  # oldest evicted
    assert cache.get(("dram", 0, 1), WF_INT8, D, 4, p.rows, p.scales, False) is not first


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([WF_INT8, WF_INT4, WF_E2M1, WF_INT8X, WF_FP4X6]),
       st.integers(1, 9), st.integers(1, 6), st.integers(1, 3), st.booleans())
def test_any_shape_and_format_matches_its_model(seed, wf, kb, n, m, pair):
    rng = np.random.default_rng(seed)
    scale = np.exp2(rng.integers(-30, 30, (n, 1)))                        # rows of any magnitude
    dec = Fm.quantize((rng.normal(size=(n, kb * D)) * scale).astype(np.float32), wf, D).decode()
    seed_format = wf in (WF_INT8X, WF_FP4X6)
    rows = 2 * m if pair else m
    q, s = activations(rng, rows, kb, row_mode=seed_format)
    if pair and seed_format:
        s[m:] = s[:m]                                                       # DUP copies the scales
    want = seed_model(q, s, dec, pair)[1] if seed_format else public_model(q, s, dec, pair)
    np.testing.assert_array_equal(mxu.mm(q, s, dec, pair=pair), want)
