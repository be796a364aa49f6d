"""Weight format byte layouts: hand-derived golden bytes (the worked examples of docs/formats.md),
pack/unpack round trips, bits per weight, element encoders and side-data validation."""
import numpy as np
import pytest

from otpu_core import formats as Fm
from otpu_core import fp32 as F
from otpu_core.isa import WF_E2M1, WF_FP4X6, WF_INT4, WF_INT8, WF_INT8X

RNG = np.random.default_rng(7)


def word(scales_row, i=0):
    return int(scales_row[4 * i: 4 * i + 4].view("<u4")[0])


def test_int4_worked_example():
    # D = 8: sub-blocks of 2. sb = [1, 1/7, 3/7, 2/7]; S = bf16(1/15) = 0x3D89 (0.06689453125);
    # m = rint(sb/S) = [15, 2, 6, 4]; codes 7,-7 | 0,7 | 5,7 | -4,-7
    p = Fm.quantize(np.array([[7, -7, 0, 1, 2, 3, -1, -2]], np.float32), WF_INT4, 8, search=False)
    assert list(p.rows[0]) == [0x97, 0x70, 0x75, 0x9C, 0, 0, 0, 0]
    assert word(p.scales[0]) == 0x462F3D89
    assert p.rs == 8 and p.srs == 4


def test_fp4x6_worked_example():
    # sb = [1, 1/6, 2, 1/8]; E = 127 + ceil(log2(2/63)) = 123 (unit 2^-4); m = [16, 3, 32, 2];
    # values/unit/m: 6,-3 | 2.67,5.33 | 6,0 | -2,6  -> codes 7,13 | 5,7 | 7,0 | 12,7
    p = Fm.quantize(np.array([[6, -3, 0.5, 1, 12, 0, -0.25, 0.75]], np.float32), WF_FP4X6, 8, search=False)
    assert list(p.rows[0]) == [0xD7, 0x75, 0x07, 0x7C, 0, 0, 0, 0]
    assert word(p.scales[0]) == 0x0A00D07B
    np.testing.assert_array_equal(p.dequantize()[0], [6, -3, 0.5625, 1.125, 12, 0, -0.25, 0.75])


def test_int8x_worked_example():
    # block 0 amax 127 -> ideal 1 -> Sw = 2^-16, shift 16; block 1 amax 1.27 -> ideal 0.01 ->
    # shift ceil(log2(0.01 * 2^16)) = 10, scale 2^-6: 1.27 -> 81, -0.5 -> -32
    w = np.zeros((1, 16), np.float32)
    w[0, :3] = [127, -1, 0.5]
    w[0, 8:10] = [1.27, -0.5]
    p = Fm.quantize(w, WF_INT8X, 8)
    assert list(p.rows[0].view(np.int8)) == [127, -1, 0, 0, 0, 0, 0, 0, 81, -32, 0, 0, 0, 0, 0, 0]
    assert list(p.scales[0]) == [0x00, 0x00, 0x80, 0x37, 16, 10, 0, 0]


def test_int8_and_e2m1_worked_examples():
    p = Fm.quantize(np.array([[127, -2, 0.5, 1.5, 0, -127, 64, -0.25]], np.float32), WF_INT8, 8)
    assert bytes(p.rows[0]) == bytes.fromhex("7FFE000200814000") and word(p.scales[0]) == 0x3F800000
    # S = bf16(2/15) = 0.1337890625, stored S/2 = 0x3D89; m = [7, 1, 15, 1]
    p = Fm.quantize(np.array([[6, -3, 0.5, 1, 12, 0, -0.25, 0.75]], np.float32), WF_E2M1, 8, search=False)
    assert bytes(p.rows[0]) == bytes.fromhex("D776077C00000000") and word(p.scales[0]) == 0x1F173D89


def test_int8_is_quantize_per_block_bit_for_bit():
    w = RNG.normal(size=(5, 300)).astype(np.float32)
    p = Fm.quantize(w, WF_INT8, 128)
    padded = np.zeros((5, 384), np.float32)
    padded[:, :300] = w
    q, s = F.quantize(padded.reshape(5, 3, 128))
    np.testing.assert_array_equal(p.rows.view(np.int8), q.reshape(5, 384))
    np.testing.assert_array_equal(p.scales.view("<u4"), s)


def test_e2m1_thresholds_tie_to_even_codes():
    v = [0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, 100, -0.0, -0.2, -0.5, -6, -1e9]
    assert list(Fm.e2m1_codes(v)) == [0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 0, 0, 9, 15, 15]


def test_e4m3_table_and_ties():
    assert len(Fm.E4M3_VALUES) == 127 and Fm.E4M3_VALUES[-1] == 448 and Fm.E4M3_VALUES[1] == 2.0 ** -9
    assert (np.diff(Fm.E4M3_VALUES) > 0).all()
    # 1.0 is code 56, 1.125 code 57: the midpoint ties to the even code; 1.1875 ties 57|58 -> 58
    assert list(Fm.e4m3_encode([1.0, 1.0625, 1.1, 1.1875, 500.0, 0.0])) == [56, 56, 57, 58, 126, 0]


def test_bf16_rounding_is_nearest_even():
    b = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F80FFFF], np.uint32)
    assert [hex(x) for x in Fm.bf16_rne(b)] == ["0x3f800000", "0x3f820000", "0x3f810000", "0x3f810000"]


def test_nibble_pack_round_trip():
    codes = RNG.integers(0, 16, (7, 64)).astype(np.uint8)
    packed = Fm.pack_nibbles(codes)
    assert packed.shape == (7, 32) and (packed[:, 0] & 15 == codes[:, 0]).all()
    np.testing.assert_array_equal(Fm.unpack_nibbles(packed), codes)


@pytest.mark.parametrize("wf", [WF_INT4, WF_E2M1, WF_FP4X6])
def test_4bit_decode_recovers_codes_and_multipliers(wf):
    d, k = 32, 160                                            # KB = 5: an odd block count
    w = RNG.normal(size=(6, k)).astype(np.float32)
    p = Fm.quantize(w, wf, d)
    assert p.rs == 3 * d                                      # ceil(5/2) chunks of D bytes
    words = p.scales.view("<u4")
    if wf == WF_FP4X6:
        mult = (words[..., None] >> (8 + 6 * np.arange(4))) & 63
        assert mult.min() >= 1 and mult.max() <= 63 and mult.max() >= 32
    else:
        mult = (words[..., None] >> (16 + 4 * np.arange(4))) & 15
        assert mult.min() >= 1 and mult.max() <= 15
    codes = Fm.unpack_nibbles(p.rows[:, : 5 * d // 2]).reshape(6, 5, 4, d // 4)
    table = Fm.DEC_INT4 if wf == WF_INT4 else Fm.DEC_FP4
    dec = p.decode()
    np.testing.assert_array_equal(dec.w.transpose(1, 0, 2).reshape(6, 5, 4, d // 4),
                                  table[codes] * mult[..., None])
    repacked = np.zeros_like(p.rows)
    repacked[:, : 5 * d // 2] = Fm.pack_nibbles(codes.reshape(6, -1))
    np.testing.assert_array_equal(repacked, p.rows)


@pytest.mark.parametrize("wf,bits", [(WF_INT8, 8.25), (WF_INT4, 4.25), (WF_E2M1, 4.25),
                                     (WF_FP4X6, 4.25), (WF_INT8X, 8 + 8 / 128 + 32 / 1024)])
def test_bits_per_weight_table_and_actual_bytes(wf, bits):
    assert Fm.bits_per_weight(wf, 128, 1024) == pytest.approx(bits)
    p = Fm.quantize(RNG.normal(size=(4, 1024)).astype(np.float32), wf, 128)
    assert p.bits_per_weight == pytest.approx(bits)


def test_nvfp4_bits_and_group():
    nv = Fm.quantize_nvfp4(RNG.normal(size=(3, 256)), 128)
    assert nv.group == 16 and nv.bits_per_weight == 4.5
    assert nv.codes.shape == (3, 128) and nv.scales.shape == (3, 16)


def test_seed_side_data_the_mxu_cannot_shift_is_refused():
    w = RNG.normal(size=(2, 64)).astype(np.float32)
    p = Fm.quantize(w, WF_INT8X, 32)
    bad = p.scales.copy()
    bad[1, 5] = 17
    with pytest.raises(Fm.WeightFormatError, match="int8x row 1"):
        Fm.decode(WF_INT8X, 32, 2, p.rows, bad)
    q = Fm.quantize(w, WF_FP4X6, 32)
    words = q.scales.view("<u4").copy()
    words[0, 0] = (words[0, 0] & ~np.uint32(0xFF)) | np.uint32((int(words[0, 1]) & 0xFF) - 17)
    with pytest.raises(Fm.WeightFormatError, match="fp4x6 row 0"):
        Fm.decode(WF_FP4X6, 32, 2, q.rows, words.view(np.uint8))


def test_unit_decode_ignores_side_data():
    p = Fm.quantize(RNG.normal(size=(2, 64)).astype(np.float32), WF_E2M1, 32)
    dec = Fm.decode(WF_E2M1, 32, 2, p.rows, None, unit=True)
    assert (dec.block_scale == F.ONE).all()
    np.testing.assert_array_equal(dec.w.transpose(1, 0, 2).reshape(2, -1),
                                  Fm.DEC_FP4[Fm.unpack_nibbles(p.rows[:, :32])])
    x = Fm.quantize(RNG.normal(size=(2, 64)).astype(np.float32), WF_INT8X, 32)
    seed = Fm.decode(WF_INT8X, 32, 2, x.rows, None, unit=True)
    assert (seed.shift == 0).all() and (seed.row_scale == F.ONE).all()
    np.testing.assert_array_equal(seed.values(), x.rows.view(np.int8))


def test_short_rows_or_scales_are_refused():
    p = Fm.quantize(RNG.normal(size=(2, 64)).astype(np.float32), WF_INT8, 32)
    with pytest.raises(Fm.WeightFormatError, match="row bytes"):
        Fm.decode(WF_INT8, 32, 3, p.rows, p.scales)
    with pytest.raises(Fm.WeightFormatError, match="scale bytes"):
        Fm.decode(WF_INT8, 32, 2, p.rows, p.scales[:, :4])


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_weights_are_refused_with_their_position(bad):
    w = np.ones((3, 64), np.float32)
    w[2, 5] = bad
    for wf in (WF_INT8, WF_INT4, WF_E2M1, WF_INT8X, WF_FP4X6):
        with pytest.raises(Fm.WeightFormatError, match=r"weight \[2, 5\]"):
            Fm.quantize(w, wf, 32)
    with pytest.raises(Fm.WeightFormatError, match=r"weight \[2, 5\]"):
        Fm.quantize_nvfp4(w, 32)
