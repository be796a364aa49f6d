"""The fp32 composites bit for bit against a second implementation written here.

The second implementation follows the documented step sequences (shared/reference/isa.md 4.2,
from FeSens/openTPU opentpu/fp32.py @42cef8ba, and docs/formats.md 1.3) in a different
formulation: every rounded operation is float64 arithmetic (exact for one fp32 product or sum,
or correctly rounded: 53 >= 2 * 24 + 2 bits, so one more rounding to fp32 is the fp32 result)
followed by one cast to float32 and a flush decided on the value; significands and exponent
adds go through frexp/ldexp instead of bit fields; the constants are the reference's bit
patterns copied here as data. Nothing in this file calls otpu_core.fp32 except the function
under test.

Each composite runs on more than a million inputs: random bit patterns over every exponent,
uniform values in the ranges the kernels use, every exponent crossed with the mantissa edges,
and the special values (zeros, denormals, infinities, NaNs of both signs).
"""
import numpy as np
import pytest

from otpu_core import fp32 as F

# Coefficients as published (shared/reference/isa.md 4.2; docs/formats.md 1.3).
EXP2_C = (0x3F800000, 0x3F317218, 0x3E75FDE9, 0x3D63593E, 0x3C1D8534, 0x3AAFE2F6, 0x3916C07C, 0x37B3C7D6)  # C0..C7
LOG2_C = (0x3FB8AA3B, 0xBF38AA38, 0x3EF639EB, 0xBEB8AE27, 0x3E9369C2, 0xBE74ADF2, 0x3E5CE48E,
          0xBE543E8E, 0x3E00DB73)                                                                     # C1..C9
RECIP_MAGIC, RSQRT_MAGIC, SQRT2_MANTISSA = 0x7EF311C3, 0x5F3759DF, 0x3504F3
TINY = 2.0 ** -126
CANONICAL_NAN = 0x7FC00000
RNG = np.random.default_rng(20260819)


# ---- the second implementation: float64 values, one fp32 rounding per operation -------------
def value(bits) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.asarray(bits, np.uint32).view(np.float32).astype(np.float64)


def const(bits: int) -> float:
    return float(np.array(bits, np.uint32).view(np.float32))


def flushed(v: np.ndarray) -> np.ndarray:
    """A denormal value as the zero of its sign (decided on the value, not on exponent bits)."""
    return np.where(np.abs(v) < TINY, np.copysign(0.0, v), v)


def rounded(v) -> np.ndarray:
    """One fp32 rounding of an exact-or-correctly-rounded float64 result, then the output flush."""
    with np.errstate(over="ignore", invalid="ignore"):
        return flushed(np.asarray(v, np.float64).astype(np.float32).astype(np.float64))


def radd(a, b):
    return rounded(a + b)


def rmul(a, b):
    return rounded(a * b)


def as_bits(v: np.ndarray) -> np.ndarray:
    """float64 results (already fp32 values) to bit patterns, every NaN canonical."""
    with np.errstate(over="ignore", invalid="ignore"):
        b = np.asarray(v, np.float64).astype(np.float32).view(np.uint32)
    return np.where(np.isnan(v), np.uint32(CANONICAL_NAN), b)


def f32_bits(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, np.float64).astype(np.float32).view(np.uint32)


def ref_exp2(xb):
    x = flushed(value(xb))
    lo = x < -126.0
    hi = ~(x < 128.0)                              # NaN included
    xf = np.where(lo | hi, 0.0, x)
    i = np.floor(xf)
    f = rounded(xf - (i + 0.0))                    # i2f(i) is +0 for i = 0, also when xf is -0
    p = np.full_like(f, const(EXP2_C[7]))
    for c in reversed(EXP2_C[:7]):
        p = radd(rmul(p, f), const(c))
    r = np.ldexp(p, i.astype(np.int64))            # the exponent add, as a power-of-two scale
    return as_bits(np.where(lo, 0.0, np.where(hi, np.inf, rounded(r))))


def ref_recip(xb):
    x = flushed(value(xb))
    ax = np.abs(x)
    zero, big = ax == 0, ~(ax < 2.0 ** 126)       # big: >= 2^126, inf, NaN
    m, e = np.frexp(np.where(zero | big, 1.0, ax))  # ax = m * 2^e, m in [0.5, 1)
    a = 2 * m                                      # the significand in [1, 2); ax = a * 2^(e-1)
    y = value((np.uint32(RECIP_MAGIC) - f32_bits(a)).astype(np.uint32))
    for _ in range(2):
        y = rmul(y, radd(2.0, -rmul(a, y)))
    y = radd(rmul(y, radd(1.0, -rmul(a, y))), y)
    r = np.copysign(np.ldexp(y, -(e - 1)), x)
    r = np.where(big, np.copysign(0.0, x), r)
    return as_bits(np.where(zero, 0.0, r))


def ref_rsqrt(xb):
    raw = np.asarray(xb, np.uint32)
    x = flushed(value(raw))
    negative = np.signbit(x)                       # -0 and negative NaN too
    bad = negative | (x == 0) | (x == np.inf)
    nan = np.isnan(x) & ~negative
    _, e = np.frexp(np.where(bad | nan, 1.0, x))   # the exponent field is e + 126
    field = e + 126
    k = np.where(field <= 2, 4, np.where(field >= 250, -4, 0))
    xs = np.ldexp(np.where(bad | nan, 1.0, x), k)
    y = value((np.uint32(RSQRT_MAGIC) - (f32_bits(xs) >> np.uint32(1))).astype(np.uint32))
    h = rmul(0.5, xs)
    for _ in range(2):
        y = rmul(y, radd(1.5, -rmul(h, rmul(y, y))))
    y = radd(rmul(y, radd(0.5, -rmul(h, rmul(y, y)))), y)
    r = np.ldexp(y, k // 2)
    return as_bits(np.where(bad, 0.0, np.where(nan, np.nan, r)))


def ref_log2(xb):
    raw = np.asarray(xb, np.uint32)
    x = flushed(value(raw))
    ax = np.abs(x)
    special = ~np.isfinite(x)
    finite_nonzero = (ax > 0) & ~special
    m, e = np.frexp(np.where(finite_nonzero, ax, 1.0))
    sig = 2 * m                                    # 1.f in [1, 2), x = sig * 2^(e-1)
    fraction = np.rint((sig - 1) * 2.0 ** 23)      # the 23 fraction bits as an integer
    ge = fraction >= SQRT2_MANTISSA
    mm = np.where(ge, sig / 2, sig)                # m in [sqrt(1/2), sqrt(2))
    ee = np.where(finite_nonzero, (e - 1) + ge, 0).astype(np.float64)
    t = radd(mm, -1.0)
    q = np.full_like(t, const(LOG2_C[8]))
    for c in reversed(LOG2_C[:8]):
        q = radd(rmul(q, t), const(c))
    r = radd(rmul(q, t), ee)
    r = np.where(special, np.where(np.isnan(x), np.nan, x), r)
    r = np.where(np.signbit(x) & (ax > 0), np.nan, r)
    r = np.where(ax == 0, -np.inf, r)
    return as_bits(flushed(r))


# ---- inputs ----------------------------------------------------------------------------------
MANTISSA_EDGES = np.array([0, 1, 2, 0x3504F2, SQRT2_MANTISSA, 0x3504F4, 0x400000, 0x7FFFFE, 0x7FFFFF], np.uint32)
SPECIALS = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00400000, 0x7F800000, 0xFF800000,
                     0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FFFFFFF, 0x00800000, 0x80800000], np.uint32)


def edge_bits() -> np.ndarray:
    """Every exponent field with the mantissa edges, both signs, plus the special patterns."""
    fields = np.arange(256, dtype=np.uint32)[:, None] << np.uint32(23)
    grid = (fields | MANTISSA_EDGES[None, :]).reshape(-1)
    return np.concatenate([grid, grid | np.uint32(0x80000000), SPECIALS])


def random_bits(n: int) -> np.ndarray:
    return RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)


def floats(*arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float32) for a in arrays]).view(np.uint32)


def inputs(name: str) -> np.ndarray:
    common = [random_bits(700_000), edge_bits()]
    if name == "exp2":
        k = np.arange(-140, 141, dtype=np.float32)
        extra = floats(RNG.uniform(-130, 130, 250_000), RNG.uniform(-1, 1, 50_000), k, k + 0.5,
                       np.nextafter(k, np.float32(-np.inf)), np.nextafter(k, np.float32(np.inf)))
    elif name == "log2":
        extra = floats(RNG.uniform(0.5, 4.0, 250_000), RNG.uniform(0.70, 0.72, 25_000),
                       RNG.uniform(1.40, 1.43, 25_000))
    else:
        extra = floats(RNG.uniform(-8, 8, 150_000), np.exp2(RNG.uniform(-126, 126, 150_000)))
    return np.concatenate(common + [extra])


REFERENCES = {"exp2": ref_exp2, "recip": ref_recip, "rsqrt": ref_rsqrt, "log2": ref_log2}


def compare(name: str, x: np.ndarray, got: np.ndarray, want: np.ndarray) -> None:
    bad = np.flatnonzero(got != want)
    if not bad.size:
        return
    g, w = value(got[bad]), value(want[bad])
    both = np.isfinite(g) & np.isfinite(w)
    gv, wv = value(got), value(want)
    fin = np.isfinite(gv) & np.isfinite(wv)
    cos = float(gv[fin] @ wv[fin] / (np.linalg.norm(gv[fin]) * np.linalg.norm(wv[fin])))
    ulps = np.abs(got[bad].astype(np.int64) - want[bad].astype(np.int64))
    examples = ", ".join(f"{int(a):#010x} -> {int(b):#010x} (want {int(c):#010x})"
                         for a, b, c in zip(x[bad][:5], got[bad][:5], want[bad][:5]))
    pytest.fail(f"{name}: {bad.size} of {x.size} inputs differ from the documented sequence; "
                f"max-abs {np.abs(g[both] - w[both]).max() if both.any() else float('nan'):.3g}, "
                f"max {ulps.max()} ulp, cosine {cos:.12f}; e.g. {examples}")


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_the_reference_reproduces_the_published_edge_values(name):
    """The second implementation itself against values fixed by the documents, so a slip in it
    cannot hide one in the code: exp2 exact at integers, recip and rsqrt exact at powers of
    two and four, log2 exact at powers of two, and the special-value rules."""
    k = np.arange(-126, 128)
    cases = {
        "exp2": (np.concatenate([f32_bits(k.astype(np.float64)), SPECIALS[[5, 6, 7, 8]]]),
                 np.concatenate([((k + 127) << 23).astype(np.uint32),
                                 np.array([0x7F800000, 0, 0x7F800000, 0x7F800000], np.uint32)])),
        "recip": (((np.arange(1, 253)) << 23).astype(np.uint32),
                  ((254 - np.arange(1, 253)) << 23).astype(np.uint32)),
        "rsqrt": (((2 * np.arange(-63, 64) + 127) << 23).astype(np.uint32),
                  ((127 - np.arange(-63, 64)) << 23).astype(np.uint32)),
        "log2": (np.concatenate([((k + 127) << 23).astype(np.uint32), SPECIALS[[0, 1, 5, 6, 7]]]),
                 np.concatenate([f32_bits(k.astype(np.float64)),
                                 np.array([0xFF800000, 0xFF800000, 0x7F800000, CANONICAL_NAN, CANONICAL_NAN],
                                          np.uint32)])),
    }
    x, want = cases[name]
    np.testing.assert_array_equal(REFERENCES[name](x), want)


def _bit_exact(name):
    x = inputs(name)
    assert x.size > 1_000_000
    compare(name, x, getattr(F, name)(x), REFERENCES[name](x))


def test_exp2_bit_exact_against_the_documented_sequence():
    _bit_exact("exp2")


def test_recip_bit_exact_against_the_documented_sequence():
    _bit_exact("recip")


def test_rsqrt_bit_exact_against_the_documented_sequence():
    _bit_exact("rsqrt")


def test_log2_bit_exact_against_the_documented_sequence():
    _bit_exact("log2")


def test_exp2sub_is_exp2_of_the_correctly_rounded_difference():
    """EXP2SUB(a, b) = exp2(sub(a, b)): the difference rounded once in float64 -> fp32, then the
    reference exp2, over a million attention-like score pairs and the special values."""
    a = np.concatenate([RNG.normal(0, 12, 1_000_000).astype(np.float32).view(np.uint32), SPECIALS, SPECIALS])
    b = np.concatenate([RNG.normal(0, 12, 1_000_000).astype(np.float32).view(np.uint32), SPECIALS,
                        SPECIALS[::-1]])
    va, vb = flushed(value(a)), flushed(value(b))
    with np.errstate(invalid="ignore"):
        diff = np.where(np.isnan(va) | np.isnan(vb), np.nan, rounded(va - vb))
    compare("exp2sub", a, F.exp2sub(a, b), ref_exp2(as_bits(diff)))
