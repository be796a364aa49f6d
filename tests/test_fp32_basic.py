"""fp32 basics: add/sub/mul, flush order, NaN, total order, i2f/f2i and the sum trees, checked
against an independent float64 model of the rules (exact products/sums, one rounding to fp32)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from otpu_core import fp32 as F

MIN_NORMAL = 2.0 ** -126
EDGE = np.array([
    0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x007FFFFF, 0x00800000, 0x80800000,
    0x00FFFFFF, 0x00C00000, 0x3F000000, 0xBF000000, 0x3F800000, 0xBF800000, 0x3F800001,
    0x33800000, 0x34000000, 0x4B000000, 0x4B000001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F000000,
    0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0xFFC00001, 0xFF800001,
    0x01000000, 0x40400000, 0x3EAAAAAB, 0x42FE0000,
], dtype=np.uint32)


def model(op, a_bits, b_bits):
    """The rules in float64: flush inputs, exact op in float64 (exact for fp32 products; for sums
    float64 then fp32 rounding is innocuous since 53 >= 2*24 + 2), fp32 RNE, flush, canonical NaN."""
    def val(b):
        v = np.asarray(b, np.uint32).view(np.float32).astype(np.float64)
        return np.where(np.abs(v) < MIN_NORMAL, np.copysign(0.0, v), v)
    with np.errstate(all="ignore"):   # NaN inputs are part of the model's domain
        a, b = val(a_bits), val(b_bits)
        r = {"add": a + b, "sub": a - b, "mul": a * b}[op]
        r32 = r.astype(np.float32)
    u = r32.view(np.uint32)
    u = np.where(np.abs(r32) < np.float32(MIN_NORMAL), u & np.uint32(0x80000000), u)
    return np.where(np.isnan(r32), np.uint32(0x7FC00000), u).astype(np.uint32)


def random_bits(n, seed):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    # half of them with exponents near each other so that sums really cancel and round
    near = (raw & np.uint32(0x807FFFFF)) | (rng.integers(100, 140, n).astype(np.uint32) << 23)
    tiny = raw & np.uint32(0x80FFFFFF)              # subnormals and the first binade
    pick = rng.integers(0, 3, n)
    return np.where(pick == 0, raw, np.where(pick == 1, near, tiny))


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_edge_value_grid_matches_the_model(op):
    a, b = np.meshgrid(EDGE, EDGE)
    got = getattr(F, op)(a, b)
    np.testing.assert_array_equal(got, model(op, a, b))


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_random_patterns_match_the_model(op):
    a, b = random_bits(200_000, 1), random_bits(200_000, 2)
    np.testing.assert_array_equal(getattr(F, op)(a, b), model(op, a, b))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1), st.sampled_from(["add", "sub", "mul"]))
def test_any_pair_matches_the_model(a, b, op):
    assert int(getattr(F, op)(a, b)) == int(model(op, a, b))


def test_product_rounds_on_the_subnormal_grid_before_the_flush():
    assert int(F.mul(F.from_float(0.5), 0x00FFFFFF)) == 0x00800000
    assert int(F.mul(F.from_float(-0.5), 0x00FFFFFF)) == 0x80800000
    assert int(F.mul(F.from_float(0.5), 0x00FFFFFE)) == 0x00000000      # 2^-126 - 2^-149: flushed
    assert int(F.mul(F.from_float(-0.5), 0x00800000)) == 0x80000000     # -2^-127 flushes to -0


def test_ties_round_to_even():
    one, half_ulp = 0x3F800000, 0x33800000                             # 1.0, 2^-24
    assert int(F.add(one, half_ulp)) == one                              # tie, even stays
    assert int(F.add(0x3F800001, half_ulp)) == 0x3F800002                # tie, odd goes up
    assert int(F.sub(0x3F800001, half_ulp)) == 0x3F800000                # 1+2^-23 - 2^-24 -> even


def test_nan_results_are_canonical_but_moves_keep_payloads():
    for x in (0x7F800001, 0xFFC00001, 0x7FFFFFFF):
        assert int(F.add(x, 0x3F800000)) == 0x7FC00000
        assert int(F.mul(x, 0)) == 0x7FC00000
        assert int(F.ftz(x)) == x
        assert int(F.fabs(x)) == x & 0x7FFFFFFF
        assert int(F.neg(x)) == x ^ 0x80000000
    assert int(F.sub(0x7F800000, 0x7F800000)) == 0x7FC00000
    assert int(F.mul(0x7F800000, 0x00000001)) == 0x7FC00000            # inf * denormal(->0)


def test_ftz_and_fabs_of_denormals():
    np.testing.assert_array_equal(F.ftz([0x00000001, 0x807FFFFF, 0x00800000]),
                                  [0, 0x80000000, 0x00800000])
    assert int(F.fabs(0x807FFFFF)) == 0


def test_total_order_sorts_as_documented():
    ordered = [0xFFC00000, 0xFF800000, 0xBF800000, 0x80800000, 0x80000000, 0x00000000,
               0x00800000, 0x3F800000, 0x7F800000, 0x7FC00000]
    keys = F.key(np.array(ordered, np.uint32))
    assert (np.diff(keys.astype(np.int64)) > 0).all()
    assert bool(F.gt(0, 0x80000000)) and not bool(F.gt(0x80000000, 0))
    # denormals are flushed before comparing: -denormal == -0, +denormal == +0
    assert not bool(F.gt(0x00000001, 0)) and not bool(F.gt(0, 0x00000001))
    assert int(F.fmax(0x80000000, 0)) == 0 and int(F.fmin(0x80000000, 0)) == 0x80000000
    assert int(F.fmax(0x7FC00001, 0x7F800000)) == 0x7FC00001
    assert int(F.fmin(0xFFC00000, 0xFF800000)) == 0xFFC00000
    assert int(F.fmax(0x00000005, 0x80000001)) == 0                     # flushed operands


def test_max_min_against_float_compare_on_ordinary_values():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 10_000)).astype(np.float32)
    np.testing.assert_array_equal(F.to_float(F.fmax(a, b)), np.maximum(a, b))
    np.testing.assert_array_equal(F.to_float(F.fmin(a, b)), np.minimum(a, b))


def exact_i2f(v: int) -> int:
    """RNE of a Python int to 24 significant bits, returned as fp32 bits (pure integers)."""
    if v == 0:
        return 0
    sign, m = (0x80000000 if v < 0 else 0), abs(v)
    shift = max(m.bit_length() - 24, 0)
    q, rem = m >> shift, m & ((1 << shift) - 1)
    if shift and (rem > 1 << (shift - 1) or (rem == 1 << (shift - 1) and q & 1)):
        q += 1
    top = q.bit_length()                       # 25 only when rounding carried out
    exp = shift + top - 1 + 127
    return sign | (exp << 23) | ((q << 24 >> top) & 0x7FFFFF)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2 ** 63), 2 ** 63 - 1))
def test_i2f_rounds_once_to_nearest_even(v):
    assert int(F.i2f(np.int64(v))) == exact_i2f(v)


def test_i2f_ties_beyond_2_53():
    vals = [2 ** 60 + 2 ** 36, 2 ** 60 + 3 * 2 ** 36, 2 ** 60 + 2 ** 36 + 1, -(2 ** 63), 2 ** 24 + 1,
            2 ** 24 + 3, -(2 ** 25 + 2), 2 ** 63 - 1]
    np.testing.assert_array_equal(F.i2f(np.array(vals, np.int64)), [exact_i2f(v) for v in vals])


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2 ** 32 - 1))
def test_f2i_truncates_toward_zero(b):
    x = float(np.uint32(b).view(np.float32))
    if math.isnan(x) or math.isinf(x) or abs(x) >= 2 ** 31:
        want = 0x80000000
    else:
        want = math.trunc(x) & 0xFFFFFFFF
    assert int(F.f2i(b)) == want


def chain_model(terms):
    acc = np.uint32(0)
    for t in terms:
        acc = model("add", acc, t)
    return int(acc)


def tree_model(row, partials, pad_zero):
    row = list(row)
    if pad_zero:
        row += [0] * (-len(row) % partials)
    p = [chain_model(row[q::partials]) for q in range(partials)]
    while len(p) > 1:
        n = len(p) // 2
        p = [int(model("add", p[i], p[i + n])) for i in range(n)]
    return p[0]


@pytest.mark.parametrize("cols", [1, 3, 4, 7, 64, 65, 130, 300])
def test_interleaved_sums_follow_the_documented_order(cols):
    rng = np.random.default_rng(cols)
    rows = random_bits(4 * cols, cols).reshape(4, cols)
    rows[1] = F.from_float(rng.normal(size=cols) * 2.0 ** rng.integers(-20, 20, cols))
    rows[2] = F.from_float(rng.normal(size=cols) * 1e-38)                 # flushes on the way
    for partials, pad, fn in ((64, True, F.isum_vop), (4, False, F.isum_mm)):
        got = fn(rows)
        want = [tree_model(r, partials, pad) for r in rows]
        np.testing.assert_array_equal(got, want)


def test_mm_tree_keeps_a_negative_zero_partial_that_vop_padding_turns_positive():
    m, neg = 0x00800000, 0x80C00000                                     # 2^-126, -1.5 * 2^-126
    row = np.array([neg] * 4 + [m] * 4, np.uint32)                       # every partial flushes to -0
    assert int(F.isum_mm(row)) == 0x80000000
    row129 = np.array([neg] * 64 + [m] * 64 + [0x80000000], np.uint32)
    assert int(F.interleaved_sum(row129, 64, pad_zero=False)) == 0x80000000
    assert int(F.isum_vop(row129)) == 0x00000000                         # the +0 pads are added


def test_chain_sum_and_dot_products():
    rng = np.random.default_rng(5)
    a = rng.normal(size=(3, 50)).astype(np.float32)
    b = rng.normal(size=(3, 50)).astype(np.float32)
    assert [int(x) for x in F.chain_sum(a)] == [chain_model(F.as_bits(r)) for r in a]
    prods = F.mul(a, b)
    np.testing.assert_array_equal(F.rdot(a, b), [tree_model(r, 64, True) for r in prods])
    np.testing.assert_array_equal(F.rssq(a), F.rdot(a, a))
    np.testing.assert_array_equal(F.rsum(a), [tree_model(F.as_bits(r), 64, True) for r in a])
    assert int(F.chain_sum(np.array([0x80000000] * 3, np.uint32))) == 0     # from +0


def test_argmax_is_first_maximal_key():
    row = np.array([0x3F800000, 0x7F800000, 0x00000000, 0x7F800000, 0x80000000], np.uint32)
    val, idx = F.argmax(row)
    assert int(val) == 0x7F800000 and int(idx) == 1
    val, idx = F.argmax(np.array([0x80000000, 0x00000001], np.uint32))  # -0 < +0 (flushed denormal)
    assert int(val) == 0 and int(idx) == 1
    assert int(F.chain_max(np.array([0xFFC00000, 0xFF800000], np.uint32))) == 0xFF800000
