"""The vectorised tile packers (`bfp.pack_strips` on float32, `bfp16` on F16/BF16 bits) against a
per-element reference written here in plain Python integers from the format's definition
(tt-metal's host packer: shared exponent = the largest fp32 exponent field of the face row, each
24-bit significand shifted right by the difference with the shifted-out bits dropped, rounded to
the magnitude width nearest-even, clamped; zeros and fp32 subnormals pack as zero, a zero has no
sign). Random values and the edges: zeros, -0, subnormals (fp32 and f16), the largest exponents,
ties, rounding over the top, and the policy for infinities and NaNs (no encoding: refused)."""
import struct

import numpy as np
import pytest

from otpu_core.gguf_source import DECODE16
from otpu_core.tt import bfp, bfp16

F16, BF16 = bfp16.SOURCES["F16"], bfp16.SOURCES["BF16"]


def f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def ref_row(values: list[float], width: int) -> tuple[int, list[int]]:
    """One face row of 16 float32 values: (shared exponent byte, 16 sign-magnitude codes)."""
    fields = [(f32_bits(v) >> 23) & 0xFF for v in values]
    shared = max(fields)
    drop = 24 - width
    codes = []
    for v, own in zip(values, fields):
        b = f32_bits(v)
        if own == 0:                                   # zero or subnormal
            codes.append(0)
            continue
        sig = ((b & 0x7FFFFF) | 0x800000) >> min(shared - own, 31)
        low, q = sig & ((1 << drop) - 1), sig >> drop
        half = 1 << (drop - 1)
        if low > half or (low == half and q & 1):
            q += 1
        q = min(q, (1 << width) - 1)
        codes.append(q | ((b >> 31) << width) if q else 0)
    return shared, codes


def ref_tile(tile: np.ndarray, fmt: bfp.TileFormat) -> bytes:
    """A 32x32 float32 tile's bytes: 64 exponents (face 0 rows 0..15 first), then the codes in face order."""
    exps, codes = [], []
    for f in range(4):
        for r in range(16):
            i, j = 16 * (f // 2) + r, 16 * (f % 2)
            e, c = ref_row([float(v) for v in tile[i, j:j + 16]], fmt.mantissa_bits)
            exps.append(e)
            codes.extend(c)
    if fmt is bfp.BFP4_B:
        codes = [codes[k] | (codes[k + 1] << 4) for k in range(0, len(codes), 2)]
    return bytes(exps + codes)


def ref_strips(x: np.ndarray, fmt: bfp.TileFormat, transposed: bool) -> bytes:
    """Every tile of (S*32, C) rows in strip order, each tile the block or (NMAJOR) its transpose."""
    out = b""
    for s in range(x.shape[0] // 32):
        for c in range(x.shape[1] // 32):
            block = x[32 * s:32 * s + 32, 32 * c:32 * c + 32]
            out += ref_tile(block.T if transposed else block, fmt)
    return out


def edge_values(rng) -> np.ndarray:
    """A 64x64 float32 block: face rows of random values and face rows of edge cases."""
    x = (rng.standard_normal((64, 64)) * 2.0 ** rng.integers(-30, 30, (64, 1))).astype(np.float32)
    big = np.finfo(np.float32).max
    x[0, :16] = 0.0
    x[0, 16:32] = -0.0
    x[1, :16] = np.float32(1e-40) * np.arange(16)                      # fp32 subnormals: zero codes
    x[1, 16:32] = [2.0 ** -126, 1e-40, -1e-42, 0.0] * 4                # the smallest normal beside them
    x[2, :16] = big                                                    # the largest exponent field (254)
    x[2, 16:32] = [big, -big, 1.0, 2.0 ** 120] * 4
    x[3, :16] = [1.0, 1 + 2.0 ** -7, 1 + 3 * 2.0 ** -7, 1 + 2.0 ** -8 + 2.0 ** -20, 1.5, -1.0078125, 2.0 ** -10, 0] * 2
    x[3, 16:32] = [1.9999999, 1.0, 0.5, -0.25, 1.99, 1.999, -1.9999, 0.0078125] * 2    # rounds over the top: clamps
    x[4, :16] = 2.0 ** -100 * (1 + np.arange(16) / 16)                 # exponents below 24 (the exact path)
    x[4, 16:32] = np.float32(2.0 ** -125) * np.arange(16)
    x[5, :16] = 65504.0 * np.where(np.arange(16) % 2, 1, -1)          # the largest F16
    x[5, 16:32] = 6e-8 * np.arange(16)                                 # F16 subnormals: normal in fp32
    x[6:8] = 2.0 ** 3 + 2.0 ** -rng.integers(1, 30, (2, 64))            # ties and near-ties below 1 ulp
    return x


@pytest.mark.parametrize("fmt", [bfp.BFP8_B, bfp.BFP4_B], ids=lambda f: f.short)
@pytest.mark.parametrize("transposed", [False, True], ids=["source", "nmajor"])
def test_float32_packer_matches_the_per_element_reference(fmt, transposed):
    rng = np.random.default_rng(1)
    for x in (edge_values(rng), rng.standard_normal((64, 96)).astype(np.float32)):
        got = bfp.pack_strips(x, fmt, transposed).tobytes()
        want = ref_strips(x, fmt, transposed)
        bad = [i for i in range(len(want)) if got[i] != want[i]][:5]
        assert got == want, (fmt.short, transposed, bad)


@pytest.mark.parametrize("source", ["F16", "BF16"])
@pytest.mark.parametrize("fmt", [bfp.BFP8_B, bfp.BFP4_B], ids=lambda f: f.short)
@pytest.mark.parametrize("transposed", [False, True], ids=["source", "nmajor"])
def test_16_bit_packer_matches_the_per_element_reference(source, fmt, transposed):
    """The table packer on raw bits gives the reference's bytes for the values those bits mean."""
    rng = np.random.default_rng(2)
    src = bfp16.SOURCES[source]
    bits = rng.integers(0, 1 << 16, (64, 64)).astype(np.uint16)
    bits[(bits & 0x7FFF) >= src.first_nonfinite] &= 0xBFFF                   # finite patterns only
    bits[0, :16] = 0
    bits[0, 16:32] = 0x8000                                                   # -0
    bits[1, :32] = np.arange(32, dtype=np.uint16) | (np.arange(32, dtype=np.uint16) % 3 == 0) << 15   # subnormals
    bits[2, :16] = src.first_nonfinite - 1                                    # the largest finite
    bits[2, 16:32] = (src.first_nonfinite - 1) | 0x8000
    bits[3:5] = np.where(rng.random((2, 64)) < 0.5, bits[3:5] & 0x83FF, bits[3:5])   # wide exponent spreads
    values = DECODE16[source].take(bits)
    got = src.pack_strips(bits, fmt, transposed).tobytes()
    assert got == ref_strips(values, fmt, transposed)
    assert got == bfp.pack_strips(values, fmt, transposed).tobytes()          # and the float32 path agrees


@pytest.mark.parametrize("source", ["F16", "BF16"])
def test_16_bit_packer_gives_the_other_formats_their_float32_bytes(source):
    rng = np.random.default_rng(4)
    src = bfp16.SOURCES[source]
    bits = rng.integers(0, src.first_nonfinite, (32, 64)).astype(np.uint16) | (rng.integers(0, 2, (32, 64)) << 15).astype(np.uint16)
    for fmt in (bfp.FLOAT32, bfp.FLOAT16_B):
        for transposed in (False, True):
            got = src.pack_strips(bits, fmt, transposed)
            assert np.array_equal(got, bfp.pack_strips(DECODE16[source].take(bits), fmt, transposed))


@pytest.mark.parametrize("source", ["F16", "BF16"])
@pytest.mark.parametrize("fmt", bfp.FORMATS, ids=lambda f: f.short)
def test_infinities_and_nans_are_refused_not_packed(source, fmt):
    """The formats define no encoding for them: the packer refuses the block (the converter then
    names the tensor, row and column)."""
    src = bfp16.SOURCES[source]
    for pattern in (src.first_nonfinite, src.first_nonfinite | 0x8000, src.first_nonfinite + 1, 0xFFFF):
        bits = np.zeros((32, 32), np.uint16)
        bits[17, 9] = pattern
        assert not np.isfinite(DECODE16[source][pattern])
        with pytest.raises(bfp16.NonFinite):
            src.pack_strips(bits, fmt, False)


@pytest.mark.parametrize("fmt", ["bfp8", "bfp4", "bf16"])
def test_an_f16_checkpoint_converts_as_the_float64_model_says(tmp_path, fmt):
    """Through `convert` (the bits path, padding included) against the independent float64 model
    and reader of test_tt_fttw_format."""
    from otpu_core.tt.convert import convert
    from test_tt_fttw_format import expect, ledger_for, read_fttw64, write_gguf
    rng = np.random.default_rng(6)
    a = rng.standard_normal((70, 80)).astype(np.float16)
    a[3, :17] = 0
    a[9, 2:40] = np.float16(6e-8)                    # F16 subnormals
    write_gguf(tmp_path / "h.gguf", {"a.weight": a})
    for layout in ("source", "nmajor"):
        convert(tmp_path / "h.gguf", tmp_path / "h.fttw", ledger_for(tmp_path, fmt, layout))
        got = read_fttw64(tmp_path / "h.fttw")["a.weight"]
        x = np.zeros((96, 96), np.float32)
        x[:70, :80] = a
        want = expect(x, bfp.format_named(fmt), layout == "nmajor")[:70, :80]
        assert np.array_equal(got, want), (fmt, layout, np.argwhere(got != want)[:5])
        err, pcc = np.max(np.abs(got - a)), np.corrcoef(got.ravel(), a.astype(np.float64).ravel())[0, 1]
        assert pcc > {"bfp8": 0.999, "bfp4": 0.98, "bf16": 0.9999}[fmt] and err < 1.0, (fmt, layout, pcc, err)


def test_a_non_finite_f16_value_is_named_by_tensor_row_and_column(tmp_path):
    from otpu_core.errors import UsageError
    from otpu_core.tt.convert import convert
    from test_tt_fttw_format import write_gguf
    w = np.ones((40, 64), np.float16)
    w[33, 5] = np.inf
    write_gguf(tmp_path / "inf.gguf", {"bad.weight": w})
    with pytest.raises(UsageError, match=r"'bad.weight' has 1 non-finite values .* at row 33, column 5"):
        convert(tmp_path / "inf.gguf", tmp_path / "o.fttw")
    assert not (tmp_path / "o.fttw").exists() and not (tmp_path / "o.fttw.partial").exists()
