"""Weight formats: quantise fp32 matrices, pack them to the DRAM bytes the MM instruction reads,
decode those bytes back to what the MXU multiplies, and report bits per weight.

Formats (byte layouts and worked examples in docs/formats.md):
- WF_INT8 (0, public): int8 rows, one fp32 scale word per (row, D-block). 8 + 32/D bits.
- WF_INT4 (1) and WF_E2M1 (2) (public 4-bit): two nibbles per byte, even element low; one word
  per (row, D-block): bf16 block scale in [15:0], four 4-bit sub-block multipliers above.
  4 + 32/D bits.
- WF_INT8X (3, seed): int8 rows as WF_INT8; per row a scale row of one fp32 row scale Sw followed
  by one shift byte e_k (0..16) per D-block: weight = q * 2^e_k * Sw. 8 + 8/D + 32/K bits.
- WF_FP4X6 (4, seed): E2M1 nibbles as WF_E2M1; one word per (row, D-block): exponent byte E in
  [7:0] and four 6-bit multipliers m_b in [13:8], [19:14], [25:20], [31:26]:
  weight = E2M1 value * m_b * 2^(E - 127). 4 + 32/D bits.
- nvfp4 (reference quantiser only, no MM path): E2M1 with an E4M3 scale per D/8 elements under a
  per-tensor fp32 scale. 4 + 8/(D/8) bits.
- activations with sub-block offsets (QACT SUB, project extension): int8 codes, one fp32 scale per
  row and a 3-bit power-of-two offset e per D/4 sub-block (value = q * s * 2^-e), kept in ACT RAM
  as one 16-bit side word per (row, block).

Public API: ``quantize(w, wf, d, search=True) -> PackedWeights``; ``PackedWeights`` (rows, scales,
rs, srs, kb, ``dequantize()``, ``bits_per_weight``); ``decode(wf, d, kb, rows, scales, unit)``
-> ``Decoded`` (what ``mxu`` multiplies); ``row_bytes``, ``scale_read_bytes``,
``scale_row_bytes``, ``bits_per_weight``; ``quantize_nvfp4`` -> ``Nvfp4``; helpers ``bf16_rne``,
``e2m1_codes``, ``e4m3_encode``/``E4M3_VALUES``, ``pack_nibbles``/``unpack_nibbles``;
``quantize_suboffsets``, ``pack_suboffsets``/``unpack_suboffsets``, ``act_values`` (QACT SUB); tables
``DEC_INT4``, ``DEC_FP4``; ``WeightFormatError`` for side data the MXU cannot use.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import fp32 as F
from .isa import NSUB, SUB_EXP_BITS, SUB_EXP_MAX, WF_4BIT, WF_E2M1, WF_FP4X6, WF_INT4, WF_INT8, WF_INT8X, WF_NAMES, WF_SEED

DEC_INT4 = np.array([0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1], np.int8)
# E2M1 codes decoded to twice their value, so every weight is an integer
DEC_FP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
_NIBBLES_OF_BYTE = np.stack([np.arange(256) & 15, np.arange(256) >> 4], axis=1)
# every byte decoded to its (low nibble, high nibble) pair of values in one lookup
_BYTE_PAIRS_INT4 = DEC_INT4[_NIBBLES_OF_BYTE].astype(np.float32)
_BYTE_PAIRS_FP4 = DEC_FP4[_NIBBLES_OF_BYTE].astype(np.float32)
E2M1_MAX = 6.0
INT4_MAX = 7
PUBLIC_MULT_MAX = 15                  # 4-bit sub-block multipliers
FP4X6_MULT_MAX = 63                   # 6-bit sub-block multipliers
SEED_MAX_SHIFT = 16                   # shift range of the seed formats' exact accumulation
INT8X_EXP_BYTES_OFFSET = 4            # int8x scale row: Sw word, then one shift byte per block
NVFP4_E4M3_MAX = 448.0


class WeightFormatError(ValueError):
    """Side data the MXU cannot use (an int8x shift above 16, an fp4x6 row whose block exponents
    span more than 16): the simulator reports it as a fault of the MM."""


def _name(wf: int) -> str:
    return next((n for n, v in WF_NAMES.items() if v == wf), str(wf))


def _check_wf(wf: int) -> None:
    if wf not in WF_NAMES.values():
        raise WeightFormatError(f"unknown weight format {wf} (known: {sorted(WF_NAMES.values())})")


def block_bytes(wf: int, d: int) -> int:
    """Bytes of one D-block of one row in DRAM."""
    return d // 2 if wf in WF_4BIT else d


def row_bytes(wf: int, d: int, kb: int) -> int:
    """DRAM bytes of one row of kb blocks, padded to whole D-byte chunks."""
    return -(-kb * block_bytes(wf, d) // d) * d


def scale_read_bytes(wf: int, kb: int) -> int:
    """Bytes of side data the MM reads per row at ssa + n*srs."""
    return INT8X_EXP_BYTES_OFFSET + kb if wf == WF_INT8X else 4 * kb


def scale_row_bytes(wf: int, kb: int) -> int:
    """The scale row stride the quantiser lays out (srs): the read bytes padded to whole words."""
    return -(-scale_read_bytes(wf, kb) // 4) * 4


def bits_per_weight(wf: int, d: int, k: int | None = None) -> float:
    """Storage per weight; k adds the per-row fp32 scale of int8x (ignored when None)."""
    _check_wf(wf)
    if wf == WF_INT8X:
        return 8 + 8 / d + (32 / k if k else 0.0)
    return (4 if wf in WF_4BIT else 8) + 32 / d


# --- small encoders --------------------------------------------------------------------------

def bf16_rne(x) -> np.ndarray:
    """fp32 bits rounded to bf16 (kept in the upper half of a word), nearest even."""
    b = F.as_bits(x).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)


def e2m1_codes(v) -> np.ndarray:
    """E2M1 codes (sign in bit 3) of v in units of the element scale: nearest grid value of
    {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even code, saturating; -0 is code 0."""
    v = np.asarray(v, np.float64)
    a = np.abs(v)
    mag = ((a > 0.25).astype(np.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5)
           + (a >= 3.5) + (a > 5.0)).astype(np.uint8)
    return np.where((v < 0) & (mag > 0), mag | 8, mag).astype(np.uint8)


def _int4_codes(v) -> np.ndarray:
    return (np.clip(np.rint(v), -INT4_MAX, INT4_MAX).astype(np.int8) & 15).astype(np.uint8)


def _e4m3_table() -> np.ndarray:
    codes = np.arange(127)
    e, m = codes >> 3, codes & 7
    return np.where(e == 0, m * 2.0 ** -9, (8 + m) * 2.0 ** (e - 10))


E4M3_VALUES = _e4m3_table()           # the 127 finite non-negative E4M3 values by code


def e4m3_encode(v) -> np.ndarray:
    """Non-negative values to E4M3 codes: nearest, ties to the even code, saturating at 448."""
    v = np.clip(np.asarray(v, np.float64), 0.0, NVFP4_E4M3_MAX)
    hi = np.clip(np.searchsorted(E4M3_VALUES, v), 1, 126)
    lo = hi - 1
    dl, dh = v - E4M3_VALUES[lo], E4M3_VALUES[hi] - v
    pick_hi = (dh < dl) | ((dh == dl) & (hi % 2 == 0))
    return np.where(pick_hi, hi, lo).astype(np.uint8)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """[..., 2n] 4-bit codes to [..., n] bytes, the even element in the low nibble."""
    c = codes.astype(np.uint8)
    return (c[..., 0::2] & 15) | ((c[..., 1::2] & 15) << 4)


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """Inverse of pack_nibbles."""
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), np.uint8)
    out[..., 0::2] = packed & 15
    out[..., 1::2] = packed >> 4
    return out


# --- packed matrices --------------------------------------------------------------------------

@dataclass(frozen=True)
class PackedWeights:
    """A weight matrix [n, k] as DRAM bytes: row i at sa + i*rs, its side data at ssa + i*srs."""
    wf: int
    d: int
    n: int
    k: int
    rows: np.ndarray        # uint8 [n, rs]
    scales: np.ndarray      # uint8 [n, srs]

    @property
    def kb(self) -> int: return -(-self.k // self.d)

    @property
    def rs(self) -> int: return self.rows.shape[1]

    @property
    def srs(self) -> int: return self.scales.shape[1]

    @property
    def bits_per_weight(self) -> float:
        return 8 * (self.rows.size + self.scales.size) / (self.n * self.k) if self.n * self.k else 0.0

    def decode(self, unit: bool = False) -> "Decoded":
        return decode(self.wf, self.d, self.kb, self.rows, self.scales, unit)

    def dequantize(self) -> np.ndarray:
        """The float64 weights the MXU multiplies, [n, k]."""
        return self.decode().values()[:, : self.k]


@dataclass(frozen=True)
class Decoded:
    """Weights as the MXU sees them. w holds exact integers (int8 codes, or m_b * dec(code) for
    the 4-bit formats) as float32, laid out [kb, n, d] for one matmul per block. Public formats
    carry one fp32 block scale per (row, block); seed formats a shift per (row, block) and one fp32
    scale per row."""
    wf: int
    d: int
    w: np.ndarray
    block_scale: np.ndarray | None = None   # uint32 [n, kb]
    shift: np.ndarray | None = None         # int64 [n, kb]
    row_scale: np.ndarray | None = None     # uint32 [n]

    @property
    def exact(self) -> bool:
        return self.wf in WF_SEED

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.w, self.block_scale, self.shift, self.row_scale) if a is not None)

    def values(self) -> np.ndarray:
        """float64 [n, kb*d] weight values."""
        kb, n, d = self.w.shape
        w = self.w.astype(np.float64).transpose(1, 0, 2)                      # [n, kb, d]
        if self.exact:
            w = w * np.exp2(self.shift.astype(np.float64))[:, :, None]
            w = w * F.to_float(self.row_scale).astype(np.float64)[:, None, None]
        else:
            w = w * F.to_float(self.block_scale).astype(np.float64)[:, :, None]
        return w.reshape(n, kb * d)


def _block_weights(wf: int, d: int, kb: int, rows: np.ndarray, mult: np.ndarray | None) -> np.ndarray:
    """float32 [kb, n, d] integer weights, filled one block at a time straight from the rows
    (mult [n, kb, NSUB]: the 4-bit sub-block multipliers, None for 1)."""
    n, bb = rows.shape[0], block_bytes(wf, d)
    out = np.empty((kb, n, d), np.float32)
    pairs = _BYTE_PAIRS_INT4 if wf == WF_INT4 else _BYTE_PAIRS_FP4
    for k in range(kb):
        chunk = rows[:, k * bb:(k + 1) * bb]
        if wf not in WF_4BIT:
            out[k] = chunk.view(np.int8)
        elif mult is None:
            out[k] = np.take(pairs, chunk, axis=0).reshape(n, d)
        else:
            np.multiply(np.take(pairs, chunk, axis=0).reshape(n, NSUB, d // NSUB), mult[:, k, :, None],
                        out=out[k].reshape(n, NSUB, d // NSUB))
    return out


def decode(wf: int, d: int, kb: int, rows: np.ndarray, scales: np.ndarray | None, unit: bool = False) -> Decoded:
    """Decode what an MM streams: rows [n, >= kb*block_bytes] bytes and scale rows
    [n, >= scale_read_bytes] bytes (not read with unit: every scale 1, every multiplier 1)."""
    _check_wf(wf)
    n, need = rows.shape[0], kb * block_bytes(wf, d)
    if rows.shape[1] < need:
        raise WeightFormatError(f"{_name(wf)}: {kb} blocks need {need} row bytes, got {rows.shape[1]}")
    if not unit:
        need = scale_read_bytes(wf, kb)
        if scales is None or scales.shape[1] < need or scales.shape[0] != n:
            got = "none" if scales is None else "x".join(map(str, scales.shape))
            raise WeightFormatError(f"{_name(wf)}: {n} rows of {kb} blocks need {need} scale bytes each, got {got}")
        side = np.ascontiguousarray(scales[:, :need])
        if wf != WF_INT8X:
            words = side.view("<u4").astype(np.uint32).reshape(n, kb)
    mult = None
    if wf in WF_4BIT and not unit:
        first, width = (8, 6) if wf == WF_FP4X6 else (16, 4)
        fields = (first + width * np.arange(NSUB)).astype(np.uint32)
        mult = ((words[..., None] >> fields) & np.uint32((1 << width) - 1)).astype(np.float32)
    w = _block_weights(wf, d, kb, rows, mult)

    if wf in (WF_INT8, WF_INT4, WF_E2M1):
        if unit:
            ws = np.full((n, kb), F.ONE, np.uint32)
        else:
            ws = F.ftz(words if wf == WF_INT8 else words << np.uint32(16))
        return Decoded(wf, d, w, block_scale=ws)

    if unit:
        return Decoded(wf, d, w, shift=np.zeros((n, kb), np.int64), row_scale=np.full(n, F.ONE, np.uint32))
    if wf == WF_INT8X:
        row_scale = F.ftz(side[:, :4].copy().view("<u4").astype(np.uint32)[:, 0])
        shift = side[:, INT8X_EXP_BYTES_OFFSET:].astype(np.int64)
        if shift.size and shift.max() > SEED_MAX_SHIFT:
            r = int(np.argmax(shift.max(axis=1)))
            raise WeightFormatError(f"int8x row {r}: block shift byte {int(shift[r].max())} is above {SEED_MAX_SHIFT}")
        return Decoded(wf, d, w, shift=shift, row_scale=row_scale)
    exps = (words & np.uint32(0xFF)).astype(np.int64)
    base = exps.min(axis=1)
    spread = exps.max(axis=1) - base
    if spread.size and spread.max() > SEED_MAX_SHIFT:
        r = int(np.argmax(spread))
        raise WeightFormatError(f"fp4x6 row {r}: block exponents span {int(spread[r])}, "
                                f"more than the {SEED_MAX_SHIFT} the exact accumulator shifts")
    # weight = dec(code)/2 * m * 2^(E-127): the per-row factor is 2^(Ebase - 128), flushed below 2^-126
    row_scale = np.where(base >= 2, (np.clip(base, 2, 255) - 1) << 23, 0).astype(np.uint32)
    return Decoded(wf, d, w, shift=exps - base[:, None], row_scale=row_scale)


# --- quantisers -------------------------------------------------------------------------------

def _blocks(w: np.ndarray, d: int) -> np.ndarray:
    """[n, k] -> float64 [n, kb, d], zero padded."""
    n, k = w.shape
    kb = -(-k // d)
    out = np.zeros((n, kb * d), np.float64)
    out[:, :k] = w
    return out.reshape(n, kb, d)


def _rows_from_codes(wf: int, d: int, codes: np.ndarray) -> np.ndarray:
    """[n, kb, d] element codes (uint8 nibbles or int8) -> [n, row_bytes] DRAM bytes."""
    n, kb, _ = codes.shape
    out = np.zeros((n, row_bytes(wf, d, kb)), np.uint8)
    flat = codes.reshape(n, kb * d)
    if wf in WF_4BIT:
        out[:, : kb * d // 2] = pack_nibbles(flat)
    else:
        out[:, : kb * d] = flat.view(np.uint8)
    return out


def _words_to_bytes(words: np.ndarray, width: int) -> np.ndarray:
    n = words.shape[0]
    out = np.zeros((n, width), np.uint8)
    out[:, : 4 * words.shape[1]] = words.astype("<u4").view(np.uint8).reshape(n, -1)
    return out


def _best_multipliers(x: np.ndarray, unit_scale: np.ndarray, mmax: int, element_values) -> np.ndarray:
    """Per sub-block multiplier m in 1..mmax minimising the squared error of
    x ~ unit_scale * m * element_values(x / (unit_scale * m)). x [n, kb, NSUB, g], unit_scale
    [n, kb, NSUB] (> 0). Rows are processed in chunks to bound memory."""
    cand = np.arange(1, mmax + 1, dtype=np.float64)
    best = np.empty(x.shape[:-1], np.int64)
    step = max(1, (1 << 22) // max(1, x[0].size * mmax))
    for lo in range(0, x.shape[0], step):
        xs = x[lo: lo + step, ..., None, :]
        sc = unit_scale[lo: lo + step, ..., None, None] * cand[:, None]
        err = ((element_values(xs / sc) * sc - xs) ** 2).sum(axis=-1)
        best[lo: lo + step] = np.argmin(err, axis=-1) + 1
    return best


def _e2m1_values(v):
    return DEC_FP4[e2m1_codes(v)] / 2.0


def _int4_values(v):
    return np.clip(np.rint(v), -INT4_MAX, INT4_MAX)


def _codes_and_words(wf, d, codes, words) -> tuple[np.ndarray, np.ndarray]:
    return _rows_from_codes(wf, d, codes), _words_to_bytes(words, scale_row_bytes(wf, codes.shape[1]))


def _quantize_public4(x: np.ndarray, wf: int, d: int, search: bool):
    n, kb, _ = x.shape
    sub = x.reshape(n, kb, NSUB, d // NSUB)
    qmax = INT4_MAX if wf == WF_INT4 else E2M1_MAX
    sb = np.abs(sub).max(axis=-1) / qmax
    s = F.to_float(bf16_rne(F.from_float(sb.max(axis=-1) / PUBLIC_MULT_MAX))).astype(np.float64)
    s = np.where(s == 0, 1.0, s)
    values = _int4_values if wf == WF_INT4 else _e2m1_values
    if search:
        m = _best_multipliers(sub, np.broadcast_to(s[..., None], sb.shape), PUBLIC_MULT_MAX, values)
    else:
        m = np.clip(np.rint(sb / s[..., None]), 1, PUBLIC_MULT_MAX).astype(np.int64)
    v = sub / (s[..., None, None] * m[..., None])
    codes = _int4_codes(v) if wf == WF_INT4 else e2m1_codes(v)
    stored = s if wf == WF_INT4 else s / 2                              # DEC_FP4 is twice E2M1
    words = (F.from_float(stored) >> np.uint32(16)).astype(np.uint32)
    words |= (m.astype(np.uint32) << (16 + 4 * np.arange(NSUB)).astype(np.uint32)).sum(axis=-1, dtype=np.uint32)
    return _codes_and_words(wf, d, codes.reshape(n, kb, d), words)


def _quantize_int8x(x: np.ndarray, d: int):
    n, kb, _ = x.shape
    sb = np.abs(x).max(axis=-1) / 127.0                               # ideal block scales
    smax = sb.max(axis=1)
    # the largest block gets shift 16 (fewer if Sw would leave the normal range)
    top = np.clip(np.floor(np.log2(np.where(smax > 0, smax, 1.0))) + 126 - 1, 0, SEED_MAX_SHIFT)
    sw = F.to_float(F.from_float(np.where(smax > 0, smax * 2.0 ** -top, 1.0))).astype(np.float64)
    with np.errstate(divide="ignore"):
        e = np.ceil(np.log2(np.where(sb > 0, sb, 1.0) / sw[:, None]))
    e = np.clip(np.where(sb > 0, e, 0), 0, SEED_MAX_SHIFT).astype(np.int64)
    scale = sw[:, None] * np.exp2(e)
    q = np.clip(np.rint(x / scale[..., None]), -127, 127).astype(np.int8)
    side = np.zeros((n, scale_row_bytes(WF_INT8X, kb)), np.uint8)
    side[:, :4] = F.from_float(sw).astype("<u4").view(np.uint8).reshape(n, 4)
    side[:, INT8X_EXP_BYTES_OFFSET: INT8X_EXP_BYTES_OFFSET + kb] = e
    return _rows_from_codes(WF_INT8X, d, q), side


def _quantize_fp4x6(x: np.ndarray, d: int, search: bool):
    n, kb, _ = x.shape
    sub = x.reshape(n, kb, NSUB, d // NSUB)
    sb = np.abs(sub).max(axis=-1) / E2M1_MAX
    top = sb.max(axis=-1)                                               # [n, kb]
    # smallest power of two 2^(E-127) with top <= 2^(E-127) * 63
    with np.errstate(divide="ignore"):
        exp = np.ceil(np.log2(np.where(top > 0, top, 1.0) / FP4X6_MULT_MAX)) + 127
    exp = np.where(top > 0, exp, -np.inf)
    row_top = exp.max(axis=1, keepdims=True)
    row_top = np.where(np.isfinite(row_top), row_top, 127)
    exp = np.clip(np.where(np.isfinite(exp), exp, row_top), row_top - SEED_MAX_SHIFT, row_top)
    exp = np.clip(exp, 2, 255).astype(np.int64)
    unit_scale = np.exp2(exp - 127.0)[..., None] * np.ones(NSUB)
    if search:
        m = _best_multipliers(sub, unit_scale, FP4X6_MULT_MAX, _e2m1_values)
    else:
        m = np.clip(np.rint(sb / unit_scale), 1, FP4X6_MULT_MAX).astype(np.int64)
    codes = e2m1_codes(sub / (unit_scale * m)[..., None])
    words = exp.astype(np.uint32) | (m.astype(np.uint32) << (8 + 6 * np.arange(NSUB)).astype(np.uint32)).sum(
        axis=-1, dtype=np.uint32)
    return _codes_and_words(WF_FP4X6, d, codes.reshape(n, kb, d), words)


def _check_matrix(w: np.ndarray, what: str, d: int) -> None:
    if w.ndim != 2 or d % (2 * NSUB):
        raise WeightFormatError(f"{what}: need a 2-D matrix and D a multiple of {2 * NSUB}")
    if not np.isfinite(w).all():
        r, c = np.argwhere(~np.isfinite(w))[0]
        raise WeightFormatError(f"{what}: weight [{r}, {c}] is {w[r, c]}; only finite weights can be quantised")


def quantize(w, wf: int, d: int, search: bool = True) -> PackedWeights:
    """Quantise an fp32 matrix [n, k] (k padded with zeros to whole D-blocks) to format wf.
    search picks each 4-bit sub-block multiplier by least squared error (else nearest)."""
    _check_wf(wf)
    w = np.asarray(F.to_float(w) if np.asarray(w).dtype == np.uint32 else w, np.float64)
    _check_matrix(w, _name(wf), d)
    x = _blocks(w, d)
    if wf == WF_INT8:
        q, s = F.quantize(x.astype(np.float32))
        rows, scales = _codes_and_words(WF_INT8, d, q, s)
    elif wf == WF_INT8X:
        rows, scales = _quantize_int8x(x, d)
    elif wf == WF_FP4X6:
        rows, scales = _quantize_fp4x6(x, d, search)
    else:
        rows, scales = _quantize_public4(x, wf, d, search)
    return PackedWeights(wf, d, w.shape[0], w.shape[1], rows, scales)


# --- activations with sub-block offsets (QACT SUB, project extension) -------------------------

SUB_MARK = 0x8000                     # ACT side word bit 15: the (row, block) carries offsets
_SUB_FIELD = (1 << SUB_EXP_BITS) - 1
# fp32 bits of 127 * 2^-e for e = 1..E: a sub-block gets offset e when its scaled amax is at most this
_SUB_FITS = np.array([127.0 * 2.0 ** -e for e in range(1, SUB_EXP_MAX + 1)], np.float32)


def quantize_suboffsets(x, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """QACT SUB: rows of fp32 bits [rows, kb*d] -> (int8 codes [rows, kb*d], row scale bits [rows],
    offsets uint8 [rows, kb*NSUB]).

    amax, s and inv are the public row quantiser's (fp32.quantize over the whole row). Per D/4
    sub-block b: t = mul(amax_b, inv) with amax_b its largest |x| bits; e_b = the largest e in
    0..E with t <= 127 * 2^-e, and 0 when t is 0 or NaN (a sub-block of zeros gains nothing);
    codes q = q8(mul(x, mul(inv, 2^e_b))). With every e_b = 0 the codes are the public ROW
    quantiser's."""
    x = F.ftz(np.asarray(x, np.uint32))
    rows, k = x.shape
    amax = np.max(x & np.uint32(0x7FFFFFFF), axis=1, keepdims=True)
    zero = amax == 0
    s = np.where(zero, np.uint32(0), F.mul(amax, np.uint32(F.INV127)))
    inv = np.where(zero, np.uint32(0), F.mul(np.uint32(0x42FE0000), F.recip(amax)))
    sub = x.reshape(rows, k // (d // NSUB), d // NSUB)
    t = F.to_float(F.mul(np.max(sub & np.uint32(0x7FFFFFFF), axis=2), inv))
    with np.errstate(invalid="ignore"):
        e = np.where(t == 0, 0, (t[:, :, None] <= _SUB_FITS).sum(axis=2)).astype(np.uint8)
    inv_b = F.mul(inv, ((127 + e.astype(np.uint32)) << np.uint32(23)))
    q = F.q8(F.mul(sub, inv_b[:, :, None])).reshape(rows, k)
    return q, s[:, 0], e


def pack_suboffsets(e: np.ndarray) -> np.ndarray:
    """Offsets uint8 [rows, kb*NSUB] -> ACT side words uint16 [rows, kb]: e of sub-block j of a
    block in bits [3j+2:3j], SUB_MARK set."""
    rows = e.shape[0]
    fields = e.reshape(rows, -1, NSUB).astype(np.uint16) << (SUB_EXP_BITS * np.arange(NSUB, dtype=np.uint16))
    return (np.bitwise_or.reduce(fields, axis=2) | np.uint16(SUB_MARK)).astype(np.uint16)


def unpack_suboffsets(words: np.ndarray) -> np.ndarray:
    """ACT side words uint16 [...] -> offsets uint8 [..., NSUB] (0 where SUB_MARK is clear)."""
    w = np.asarray(words, np.uint16)[..., None] >> (SUB_EXP_BITS * np.arange(NSUB, dtype=np.uint16))
    return (w & np.uint16(_SUB_FIELD)).astype(np.uint8)


def act_values(q: np.ndarray, s: np.ndarray, e: np.ndarray, d: int) -> np.ndarray:
    """float64 values of QACT SUB output: q * s_row * 2^-e_b."""
    rows, k = q.shape
    unit = F.to_float(s).astype(np.float64)[:, None] * np.exp2(-e.astype(np.float64))
    return (q.astype(np.float64).reshape(rows, -1, d // NSUB) * unit[:, :, None]).reshape(rows, k)


# --- nvfp4 (reference quantiser only) ---------------------------------------------------------

@dataclass(frozen=True)
class Nvfp4:
    """E2M1 nibbles [n, k/2], one E4M3 scale code per group of `group` elements [n, k/group], and
    one fp32 tensor scale: value = e2m1(code) * e4m3(scale) * tensor_scale."""
    n: int
    k: int
    group: int
    codes: np.ndarray
    scales: np.ndarray
    tensor_scale: int

    @property
    def bits_per_weight(self) -> float:
        return 4 + 8 / self.group

    def dequantize(self) -> np.ndarray:
        vals = DEC_FP4[unpack_nibbles(self.codes)] / 2.0
        s = E4M3_VALUES[np.minimum(self.scales, 126)] * float(F.to_float(np.uint32(self.tensor_scale)))
        return (vals.reshape(self.n, -1, self.group) * s[..., None]).reshape(self.n, -1)[:, : self.k]


def quantize_nvfp4(w, d: int = 128) -> Nvfp4:
    """NVFP4 with groups of D/8 elements: tensor scale amax/(6*448), E4M3 group scales."""
    w = np.asarray(w, np.float64)
    _check_matrix(w, "nvfp4", d)
    n, k = w.shape
    group = d // 8
    x = _blocks(w, group)
    amax = np.abs(w).max() if w.size else 0.0
    g = float(F.to_float(F.from_float(amax / (E2M1_MAX * NVFP4_E4M3_MAX)))) if amax > 0 else 1.0
    sc = e4m3_encode(np.abs(x).max(axis=-1) / E2M1_MAX / g)
    scale = E4M3_VALUES[sc] * g
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(scale[..., None] > 0, x / scale[..., None], 0.0)
    codes = pack_nibbles(e2m1_codes(v).reshape(n, -1))
    return Nvfp4(n, k, group, codes, sc, int(F.from_float(g)))
