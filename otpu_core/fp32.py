"""Bit-exact fp32 arithmetic of the machine: the one place that defines how a number rounds.

Every value is an IEEE-754 binary32 bit pattern held in a numpy ``uint32`` array (any shape;
arguments broadcast). Inputs may also be float32 arrays (taken by their bits), integer arrays
(taken as bit patterns) or float64 values (rounded to fp32 first, for constants and tests).
Results are always ``uint32`` bit patterns, except ``f2i`` (uint32 register values), ``q8`` and
``quantize`` (int8 codes).

Rules (docs/formats.md, section 1):
- round to nearest even; flush to zero on every input and every output, the output flush decided
  after rounding to the subnormal grid (so 0.5 * 0x00FFFFFF is 0x00800000);
- add, sub and mul return the canonical NaN 0x7FC00000 for any NaN result; ftz, fabs, neg, fmax
  and fmin keep a NaN's bits;
- the total order key(x) (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN) drives gt, fmax,
  fmin, chain_max and argmax.

Public API
- conversion: ``as_bits``, ``from_float``, ``to_float``
- elementwise: ``ftz``, ``canon``, ``add``, ``sub``, ``mul``, ``neg``, ``fabs``, ``key``, ``gt``,
  ``fmax``, ``fmin``, ``i2f``, ``f2i``, ``outer``,
  ``block_terms`` (the MM per-block term)
- composites (the reference's exact step sequences): ``exp2``, ``exp2sub``, ``recip``,
  ``rsqrt``, ``log2``
- sums and reductions along the last axis: ``chain_sum``, ``interleaved_sum``, ``isum_vop``
  (P = 64, +0 padding), ``isum_mm`` (P = 4, no padding), ``rsum``, ``rssq``, ``rdot``,
  ``chain_max``, ``argmax``
- quantisation: ``q8``, ``quantize``
- constants: ``CANON_NAN``, ``POS_INF``, ``NEG_INF``, ``ONE``, ``VOP_PARTIALS``, ``MM_PARTIALS``
"""
from __future__ import annotations

import numpy as np

CANON_NAN = 0x7FC00000
POS_INF = 0x7F800000
NEG_INF = 0xFF800000
ONE = 0x3F800000
VOP_PARTIALS = 64
MM_PARTIALS = 4

_SIGN = np.uint32(0x80000000)
_EXP = np.uint32(0x7F800000)
_MANT = np.uint32(0x007FFFFF)
_ABS = np.uint32(0x7FFFFFFF)
_NAN = np.uint32(CANON_NAN)

# 2^f on [0, 1): minimax polynomial with C0 = 1, coefficients tuned in fp32 (C0..C7)
EXP2_COEFFS = (0x3F800000, 0x3F317218, 0x3E75FDE9, 0x3D63593E,
               0x3C1D8534, 0x3AAFE2F6, 0x3916C07C, 0x37B3C7D6)
# log2(1 + t) = t * (C1 + t * (C2 + ... + t * C9)) for m in [sqrt(1/2), sqrt(2)) (C1..C9)
LOG2_COEFFS = (0x3FB8AA3B, 0xBF38AA38, 0x3EF639EB, 0xBEB8AE27, 0x3E9369C2,
               0xBE74ADF2, 0x3E5CE48E, 0xBE543E8E, 0x3E00DB73)
LOG2_SQRT2_MANT = 0x3504F3
RECIP_SEED = 0x7EF311C3
RSQRT_SEED = 0x5F3759DF
INV127 = 0x3C010204            # fp32(1/127)


def as_bits(x) -> np.ndarray:
    """Bit patterns of x as uint32: uint32/int arrays as bits, float32 by view, float64 rounded."""
    a = np.asarray(x)
    if a.dtype == np.uint32:
        return a
    if a.dtype == np.float32:
        return a.view(np.uint32)
    if a.dtype.kind in "iub":
        return a.astype(np.uint32)
    if a.dtype.kind == "f":
        return a.astype(np.float32).view(np.uint32)
    raise TypeError(f"cannot read {a.dtype} values as fp32 bit patterns")


def from_float(x) -> np.ndarray:
    """fp32 bit patterns of real numbers (one RNE rounding from float64, no flush)."""
    return np.asarray(x, dtype=np.float64).astype(np.float32).view(np.uint32)


def to_float(b) -> np.ndarray:
    """The float32 values of bit patterns (a view, no flush)."""
    return np.asarray(as_bits(b)).view(np.float32)


_MIN_NORMAL = np.float32(2.0 ** -126)


_DENORMAL_SPAN = np.uint32(0x007FFFFF)
_ONE_BIT = np.uint32(1)


def _has_denormal(u: np.ndarray) -> bool:
    # a denormal's magnitude bits lie in [1, 0x7FFFFF]: minus one (zero wraps to 2^32 - 1) is below 0x7FFFFF
    mag = np.asarray(u) & _ABS
    if mag.ndim == 0:
        return 0 < int(mag) <= 0x7FFFFF
    mag -= _ONE_BIT
    return bool((mag < _DENORMAL_SPAN).any())


def _flush(u: np.ndarray) -> np.ndarray:
    """Flushed bits; the argument itself when it holds no denormal (callers never mutate)."""
    if not _has_denormal(u):
        return u
    return np.where((u & _EXP) == 0, u & _SIGN, u)


def ftz(x) -> np.ndarray:
    """Denormals become a zero of their sign; everything else (NaN included) keeps its bits."""
    u = as_bits(x)
    f = _flush(u)
    return f.copy() if f is u else f


def canon(x) -> np.ndarray:
    """Every NaN becomes the canonical 0x7FC00000; other bits are kept."""
    u = as_bits(x)
    return np.where((u & _ABS) > _EXP, _NAN, u)


def _finish(r) -> np.ndarray:
    """Output rule of add/sub/mul on a float32 result: flush, then canonical NaN."""
    r = np.asarray(r, dtype=np.float32)
    u = r.view(np.uint32)
    if not np.isnan(r).any():
        return _flush(u)
    u = np.where((u & _EXP) == 0, u & _SIGN, u)
    return np.where((u & _ABS) > _EXP, _NAN, u)


def _in(x) -> np.ndarray:
    """Flushed input bits, possibly the argument itself: read, never written."""
    return _flush(as_bits(x))


# numpy's float32 arithmetic is IEEE round-to-nearest-even. _addf/_subf/_mulf take operands
# that are already flushed (results of earlier operations, flushed inputs or normal constants)
# and skip the input scan that add/sub/mul make.
def _addf(a, b) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _finish(np.add(a.view(np.float32), b.view(np.float32)))


def _subf(a, b) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _finish(np.subtract(a.view(np.float32), b.view(np.float32)))


def _mulf(a, b) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _finish(np.multiply(a.view(np.float32), b.view(np.float32)))


def add(a, b) -> np.ndarray:
    return _addf(_in(a), _in(b))


def sub(a, b) -> np.ndarray:
    return _subf(_in(a), _in(b))


def mul(a, b) -> np.ndarray:
    return _mulf(_in(a), _in(b))


def neg(x) -> np.ndarray:
    """Sign flipped after the flush (a NaN keeps its payload)."""
    return _in(x) ^ _SIGN


def fabs(x) -> np.ndarray:
    """Sign cleared after the flush (a NaN keeps its payload)."""
    return _in(x) & _ABS


def _key_of_flushed(u: np.ndarray) -> np.ndarray:
    return np.where(u >= _SIGN, ~u, u | _SIGN)


def key(x) -> np.ndarray:
    """Total-order key: compare keys as unsigned integers."""
    return _key_of_flushed(_in(x))


def gt(a, b) -> np.ndarray:
    return key(a) > key(b)


def fmax(a, b) -> np.ndarray:
    """a if a > b in the total order, else b (both flushed first)."""
    a, b = _in(a), _in(b)
    return np.where(_key_of_flushed(a) > _key_of_flushed(b), a, b)


def fmin(a, b) -> np.ndarray:
    """a if b > a in the total order, else b (both flushed first)."""
    a, b = _in(a), _in(b)
    return np.where(_key_of_flushed(b) > _key_of_flushed(a), a, b)


_EXACT_IN_FLOAT64 = 1 << 53


def i2f(i) -> np.ndarray:
    """Signed integers (any numpy int, up to int64) to fp32 with one RNE rounding."""
    v = np.asarray(i, dtype=np.int64)
    if v.size == 0 or (v.min() > -_EXACT_IN_FLOAT64 and v.max() < _EXACT_IN_FLOAT64):
        return v.astype(np.float64).astype(np.float32).view(np.uint32)
    # beyond 2^53 a float64 detour would round twice: round to 24 bits in integers first
    mag = np.where(v < 0, -v, v).view(np.uint64)            # -INT64_MIN wraps to 2^63, as wanted
    _, e = np.frexp(mag.astype(np.float64))
    e = e - (mag < (np.uint64(1) << np.maximum(e - 1, 0).astype(np.uint64))).astype(e.dtype)
    shift = np.maximum(e - 24, 0).astype(np.uint64)
    q = mag >> shift
    rem = mag - (q << shift)
    half = np.where(shift > 0, np.uint64(1) << (shift - np.uint64(1)), np.uint64(0))
    up = (shift > 0) & ((rem > half) | ((rem == half) & ((q & np.uint64(1)) == 1)))
    q = q + up.astype(np.uint64)
    val = np.ldexp(q.astype(np.float64), shift.astype(np.int64))
    return np.where(v < 0, -val, val).astype(np.float32).view(np.uint32)


def f2i(x) -> np.ndarray:
    """fp32 to a 32-bit register value, truncating toward zero, result mod 2^32 (as uint32).

    |x| < 1 (zeros and denormals included) gives 0; |x| >= 2^31, inf and NaN give 0x80000000.
    """
    u = as_bits(x).astype(np.int64)
    e = (u >> 23) & 0xFF
    m = (u & 0x7FFFFF) | 0x800000
    v = np.where(e >= 150, m << np.clip(e - 150, 0, 7), m >> np.clip(150 - e, 0, 31))
    v = np.where(u & 0x80000000, -v, v)
    v = np.where(e < 127, 0, np.where(e >= 158, 0x80000000, v))
    return (v & 0xFFFFFFFF).astype(np.uint32)


def _add_exponent(u: np.ndarray, k) -> np.ndarray:
    """Integer add of k to the exponent field (x * 2^k while the field stays in 1..254)."""
    return ((u.astype(np.int64) + (np.asarray(k, np.int64) << 23)) & 0xFFFFFFFF).astype(np.uint32)


def _horner(coeffs: tuple[int, ...], t: np.ndarray) -> np.ndarray:
    """p = coeffs[-1]; p = _addf(_mulf(p, t), c) for c from coeffs[-2] down to coeffs[0]."""
    p = np.broadcast_to(np.uint32(coeffs[-1]), t.shape)
    for c in reversed(coeffs[:-1]):
        p = _addf(_mulf(p, t), np.uint32(c))
    return p


def exp2(x) -> np.ndarray:
    """2^x: range split on the total order, floor/fraction split, degree-7 minimax Horner,
    integer add of floor(x) to the exponent field. x < -126 gives +0; x >= 128 or NaN, +inf."""
    x = canon(_in(x))
    lo = gt(np.uint32(0xC2FC0000), x)                    # -126 > x
    hi = ~gt(np.uint32(0x43000000), x)                   # not 128 > x (also every NaN)
    xf = np.where(lo | hi, np.uint32(0), x)
    i = np.floor(xf.view(np.float32)).astype(np.int64)
    f = _subf(xf, i2f(i))
    p = _horner(EXP2_COEFFS, f)
    r = _add_exponent(p, i)
    return np.where(lo, np.uint32(0), np.where(hi, np.uint32(POS_INF), r))


def exp2sub(a, b) -> np.ndarray:
    return exp2(sub(a, b))


def recip(x) -> np.ndarray:
    """1/x on the significand a in [1, 2): seed, two Newton steps, one correction step, then the
    exponent and sign put back. ±0 gives +0; |x| >= 2^126, inf and NaN give a zero of x's sign."""
    x = _in(x)
    ab = x & _ABS
    zero = ab == 0
    big = ab >= np.uint32(0x7E800000)
    a = np.uint32(127 << 23) | (ab & _MANT)
    y = np.uint32(RECIP_SEED) - a
    for _ in range(2):
        y = _mulf(y, _subf(np.uint32(0x40000000), _mulf(a, y)))
    y = _addf(_mulf(y, _subf(np.uint32(ONE), _mulf(a, y))), y)
    y = _add_exponent(y, 127 - (ab >> np.uint32(23)).astype(np.int64))
    y = np.where(big, np.uint32(0), y) | (x & _SIGN)
    return np.where(zero, np.uint32(0), y)


def rsqrt(x) -> np.ndarray:
    """1/sqrt(x): tiny and huge exponents rescaled by 2^±4, seed, two Newton steps, one
    correction step, rescale by 2^∓2. Any sign bit, +0 and +inf give +0; +NaN gives NaN."""
    x = _in(x)
    field = (x >> np.uint32(23)) & np.uint32(0xFF)
    bad = (x >= _SIGN) | (x == 0) | (x == np.uint32(POS_INF))
    k = np.where(field <= 2, 4, np.where((field >= 250) & (field <= 254), -4, 0))
    k = np.where(bad, 0, k)
    xs = np.where(bad, np.uint32(ONE), _add_exponent(x, k))
    y = np.uint32(RSQRT_SEED) - (xs >> np.uint32(1))
    h = _mulf(np.uint32(0x3F000000), xs)
    for _ in range(2):
        y = _mulf(y, _subf(np.uint32(0x3FC00000), _mulf(h, _mulf(y, y))))
    y = _addf(_mulf(y, _subf(np.uint32(0x3F000000), _mulf(h, _mulf(y, y)))), y)
    return np.where(bad, np.uint32(0), _add_exponent(y, k // 2))


def log2(x) -> np.ndarray:
    """log2(x) = e + log2(m), m in [sqrt(1/2), sqrt(2)), t = m - 1 exact, degree-9 Horner.
    ±0 gives -inf, negative nonzero (-inf included) the canonical NaN, +inf stays, NaN canonical."""
    x = _in(x)
    frac = x & _MANT
    ex = ((x >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    ge = frac >= np.uint32(LOG2_SQRT2_MANT)
    e = np.where(ex == 0, 0, ex - 127 + ge)
    m = np.where(ge, np.uint32(126 << 23), np.uint32(127 << 23)) | frac
    t = _addf(m, np.uint32(0xBF800000))
    q = _horner(LOG2_COEFFS, t)
    r = _addf(_mulf(q, t), i2f(e))
    zero = (x & _ABS) == 0
    r = np.where(ex == 255, canon(x), r)
    r = np.where((x >= _SIGN) & ~zero, _NAN, r)
    r = np.where(zero, np.uint32(NEG_INF), r)
    return _in(r)


def block_terms(isum, a, b) -> np.ndarray:
    """MM block terms mul(mul(i2f(isum), a), b). isum holds integers below 2^24 as float32 (so
    i2f is the value itself, with +0 for zero); a and b are fp32 bits; all broadcast."""
    with np.errstate(all="ignore"):
        exact = np.add(np.asarray(isum, np.float32), np.float32(0))   # i2f(0) is +0, never -0
    return _mulf(_mulf(exact.view(np.uint32), _in(a)), _in(b))


def outer(a, d, b, c) -> np.ndarray:
    """VOP OUTER element: add(mul(a, d), mul(b, c))."""
    return _addf(mul(a, d), mul(b, c))


def _chain_axis0(u: np.ndarray) -> np.ndarray:
    """+0 + u[0] + u[1] + ... along axis 0, each step an FTZ'd add; u is already flushed.

    Plain float32 adds make the same sequential RNE chain. Starting from u[0] instead of +0 only
    differs while every term is -0, which one final +0 add settles. Otherwise the chains differ
    only where a running sum is denormal (the flush), so those columns are redone step by step."""
    rest = u.shape[1:]
    u = u.reshape(u.shape[0], -1)
    f = u.view(np.float32)
    part = np.empty_like(f)                  # row by row: far faster than add.accumulate on axis 0
    with np.errstate(all="ignore"):
        part[0] = f[0]
        for i in range(1, len(f)):
            np.add(part[i - 1], f[i], out=part[i])
        out = _finish(np.add(part[-1], np.float32(0)))
    pu = part.view(np.uint32)
    if not _has_denormal(pu):
        return out.reshape(rest)
    redo = (((pu & _EXP) == 0) & ((pu & _ABS) != 0)).any(axis=0)
    if redo.any():
        acc = np.zeros(int(redo.sum()), np.uint32)
        for row in u[:, redo]:
            acc = _addf(acc, row)
        out[redo] = acc
    return out.reshape(rest)


def chain_sum(a, axis: int = -1) -> np.ndarray:
    """Sum along axis strictly left to right from +0, every step an add()."""
    u = np.moveaxis(_in(a), axis, 0)
    if u.shape[0] == 0:
        return np.zeros(u.shape[1:], np.uint32)
    return _chain_axis0(np.ascontiguousarray(u))


def interleaved_sum(a, partials: int, pad_zero: bool) -> np.ndarray:
    """isum_P along the last axis: partial q = +0 + a[q] + a[q+P] + ... (left to right), then
    fold p[i] = add(p[i], p[i+n]) for n = P/2, ..., 1. pad_zero pads the row to a multiple of P
    with +0 terms that are added (VOP); otherwise missing terms are simply absent (MM)."""
    u = _in(a)
    cols = u.shape[-1]
    whole = -(-max(cols, 1) // partials) * partials
    if whole != cols:
        # -0 is the identity of add (x + -0 == x for every x, ±0 included): "no term"
        fill = np.uint32(0) if pad_zero else _SIGN
        pad = np.broadcast_to(fill, u.shape[:-1] + (whole - cols,))
        u = np.concatenate([u, pad], axis=-1)
    steps = u.reshape(u.shape[:-1] + (whole // partials, partials))
    p = _chain_axis0(np.ascontiguousarray(np.moveaxis(steps, -2, 0)))
    n = partials
    while n > 1:
        n //= 2
        p = _addf(p[..., :n], p[..., n:2 * n])
    return p[..., 0]


def isum_vop(a) -> np.ndarray:
    """VOP RSUM tree: isum_64, rows padded with +0 terms."""
    return interleaved_sum(a, VOP_PARTIALS, pad_zero=True)


def isum_mm(a) -> np.ndarray:
    """MM epilogue tree over K blocks: isum_4 with no pad terms."""
    return interleaved_sum(a, MM_PARTIALS, pad_zero=False)


def rsum(a) -> np.ndarray:
    return isum_vop(a)


def rdot(a, b) -> np.ndarray:
    """isum_64 of the rounded products (B broadcasts)."""
    return isum_vop(mul(a, b))


def rssq(a) -> np.ndarray:
    return isum_vop(mul(a, a))


def argmax(a) -> tuple[np.ndarray, np.ndarray]:
    """(flushed element with the largest key, its first column) along the last axis."""
    u = _in(a)
    idx = np.argmax(_key_of_flushed(u), axis=-1)
    return np.take_along_axis(u, idx[..., None], axis=-1)[..., 0], idx


def chain_max(a) -> np.ndarray:
    return argmax(a)[0]


def q8(x) -> np.ndarray:
    """fp32 to int8: flush, NaN to 0, round half to even, saturate to [-127, 127]."""
    f = _in(x).view(np.float32)
    with np.errstate(invalid="ignore"):
        r = np.rint(np.where(np.isnan(f), np.float32(0), f))
    return np.clip(r, -127, 127).astype(np.int8)


def quantize(x, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """One group per slice along axis -> (int8 codes shaped like x, fp32 scale bits).

    amax = the element with the largest |x| bits (a NaN ranks above inf); s = amax * fp32(1/127),
    inv = 127 * recip(amax) (both 0 when amax is 0), q = q8(x * inv)."""
    x = _in(x)
    amax = np.max(x & _ABS, axis=axis, keepdims=True)
    zero = amax == 0
    s = np.where(zero, np.uint32(0), mul(amax, np.uint32(INV127)))
    inv = np.where(zero, np.uint32(0), mul(np.uint32(0x42FE0000), recip(amax)))
    return q8(mul(x, inv)), np.squeeze(s, axis=axis)
