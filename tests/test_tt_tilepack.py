"""The native tile packer (otpu_core/tt/tilepack.c) against its numpy twin (bfp, bfp16), which the
per-element reference of test_tt_bfp_packer and the float64 reader of test_tt_fttw_format define:
the same bytes for every format, layout and source type, for odd shapes (padding) and the edge
values (zeros, -0, fp32 and F16 subnormals, the largest exponents, ties, exponents below 24), in
its AVX2 body and its portable one; infinities and NaNs refused; its CRC-32 against zlib's; and
whole files converted natively (one thread or two, any block size) against OTPU_NATIVE=0."""
import zlib

import gguf
import numpy as np
import pytest

from otpu_core.errors import UsageError
from otpu_core.gguf_source import DECODE16
from otpu_core.tt import bfp, bfp16, tilepack
from otpu_core.tt.convert import convert
from test_tt_bfp_packer import edge_values
from test_tt_fttw_format import ledger_for, read_fttw64, write_gguf

SHAPES = [(64, 64), (70, 45), (33, 100), (1, 1), (32, 33), (96, 160)]


@pytest.fixture(params=[True, False], ids=["avx2", "portable"])
def lib(request):
    lib = tilepack.library()
    if lib is None:
        pytest.skip("no native kernel here (no C compiler, or OTPU_NATIVE=0): nothing to compare")
    tilepack.set_simd(lib, request.param)
    yield lib
    tilepack.set_simd(lib, True)


def padded(a: np.ndarray) -> np.ndarray:
    out = np.zeros((-(-a.shape[0] // 32) * 32, -(-a.shape[1] // 32) * 32), a.dtype)
    out[:a.shape[0], :a.shape[1]] = a
    return out


def float_cases(rng):
    edge = edge_values(rng)
    yield edge
    # whole face rows of each kind in both orientations: 16 rows x 16 columns of one kind each
    kinds = np.zeros((64, 64), np.float32)
    kinds[16:32, :] = np.float32(2.0 ** -125) * rng.integers(1, 64, (16, 64))      # shared exponent below 24
    kinds[32:48, :] = np.float32(1e-41) * rng.integers(0, 9, (16, 64))             # subnormals and zeros: E = 0
    kinds[48:64, :32] = rng.standard_normal((16, 32)).astype(np.float32) * 2.0 ** -103   # E about 24
    kinds[48:64, 32:] = np.finfo(np.float32).max * rng.uniform(-1, 1, (16, 32)).astype(np.float32)
    yield kinds
    for shape in SHAPES:
        x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-40, 40, (shape[0], 1))).astype(np.float32)
        x.flat[::7] = edge.flat[:x.size][::7]
        yield x


def bit_cases(rng, source):
    src = bfp16.SOURCES[source]
    for shape in SHAPES:
        bits = rng.integers(0, 1 << 16, shape).astype(np.uint16)
        bits[(bits & 0x7FFF) >= src.first_nonfinite] &= 0xBFFF                 # finite patterns only
        flat = bits.reshape(-1)
        edges = np.array([0, 0x8000, 1, 0x8001, 0x3FF, src.first_nonfinite - 1, (src.first_nonfinite - 1) | 0x8000,
                          0x3C00, 0xBC00, 0x0400], np.uint16)
        flat[:min(flat.size, edges.size)] = edges[:flat.size]
        if shape[0] > 4:                                                          # wide exponent spreads in a face row
            bits[3:5] = np.where(rng.random((2, shape[1])) < 0.5, bits[3:5] & 0x83FF, bits[3:5])
        yield bits


@pytest.mark.parametrize("fmt", bfp.FORMATS, ids=lambda f: f.short)
@pytest.mark.parametrize("transposed", [False, True], ids=["source", "nmajor"])
def test_float32_sources_pack_to_the_numpy_bytes(lib, fmt, transposed):
    rng = np.random.default_rng(11)
    for x in float_cases(rng):
        want = bfp.pack_strips(padded(x), fmt, transposed)
        got = tilepack.pack_strips(lib, x, "F32", fmt, transposed)
        assert got.shape == want.shape and np.array_equal(got, want), (x.shape, np.argwhere(got != want)[:5])


@pytest.mark.parametrize("source", ["F16", "BF16"])
@pytest.mark.parametrize("fmt", bfp.FORMATS, ids=lambda f: f.short)
@pytest.mark.parametrize("transposed", [False, True], ids=["source", "nmajor"])
def test_16_bit_sources_pack_to_the_numpy_bytes(lib, source, fmt, transposed):
    rng = np.random.default_rng(12)
    for bits in bit_cases(rng, source):
        want = bfp16.SOURCES[source].pack_strips(padded(bits), fmt, transposed)
        got = tilepack.pack_strips(lib, bits, source, fmt, transposed)
        assert np.array_equal(got, want), (bits.shape, np.argwhere(got != want)[:5])


@pytest.mark.parametrize("source", ["F16", "BF16"])
def test_every_finite_16_bit_pattern_decodes_to_its_float32_bits(lib, source):
    """Float32 tiles of all 65536 patterns hold the exact float32 of each (numpy's own conversion
    for F16, the top half of the word for BF16), whichever decoder the body uses."""
    pats = np.arange(1 << 16, dtype=np.uint32)
    want = pats.astype(np.uint16).view(np.float16).astype(np.float32) if source == "F16" else (pats << 16).view(np.float32)
    finite = np.isfinite(want)
    bits = pats[finite].astype(np.uint16)
    bits = np.concatenate([bits, np.zeros(-bits.size % 1024, np.uint16)]).reshape(-1, 32)
    tiles = tilepack.pack_strips(lib, bits, source, bfp.FLOAT32, False)
    values = bfp.unpack_strips(tiles.reshape(-1, bfp.FLOAT32.tile_bytes), bfp.FLOAT32, False, 32).reshape(-1)
    assert np.array_equal(values[:finite.sum()].view(np.uint32), want[finite].view(np.uint32))
    assert np.array_equal(DECODE16[source][finite].view(np.uint32), want[finite].view(np.uint32))


@pytest.mark.parametrize("source", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("fmt", bfp.FORMATS, ids=lambda f: f.short)
def test_infinities_and_nans_are_refused(lib, source, fmt):
    if source == "F32":
        bad = [np.float32(np.inf).view(np.uint32), np.float32(-np.inf).view(np.uint32), np.uint32(0x7FC00000),
               np.uint32(0xFF800001)]
    else:
        first = bfp16.SOURCES[source].first_nonfinite
        bad = [first, first | 0x8000, first + 1, 0xFFFF]
    dtype = np.uint32 if source == "F32" else np.uint16
    for pattern in bad:
        for where in [(0, 0), (17, 9), (40, 70)]:
            bits = np.zeros((45, 72), dtype)
            bits[where] = pattern
            a = bits.view(np.float32) if source == "F32" else bits
            for transposed in (False, True):
                with pytest.raises(tilepack.NonFinite):
                    tilepack.pack_strips(lib, a, source, fmt, transposed)


def test_crc32_is_zlibs(lib):
    rng = np.random.default_rng(13)
    for n in list(range(0, 200)) + [1023, 4096, 65537, 1 << 20]:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        for fast in (True, False):
            assert tilepack.crc32(lib, data, 0x5A5A5A5A, fast) == zlib.crc32(data, 0x5A5A5A5A), (n, fast)
    a, b = rng.integers(0, 256, 3000, dtype=np.uint8).tobytes(), rng.integers(0, 256, 70001, dtype=np.uint8).tobytes()
    assert lib.tp_crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def model(path, rng):
    """Odd shapes in every source type the kernel reads, a stack, and ones it does not (Q8_0, 1-D)."""
    bf16 = (rng.standard_normal((45, 70)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    q8 = gguf.quants.quantize(rng.standard_normal((64, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    f32 = edge_values(rng)[:, :50].copy()
    write_gguf(path, {"f32.weight": f32, "f16.weight": (rng.standard_normal((200, 72)) * 3).astype(np.float16),
                      "bf16.weight": (bf16.view(np.uint8), gguf.GGMLQuantizationType.BF16),
                      "stack.weight": rng.standard_normal((3, 40, 64)).astype(np.float16),
                      "q8.weight": (q8, gguf.GGMLQuantizationType.Q8_0),
                      "norm.weight": rng.standard_normal(70).astype(np.float32)})


@pytest.mark.parametrize("fmt", ["bfp8", "bfp4", "bf16", "fp32"])
@pytest.mark.parametrize("layout", ["source", "nmajor"])
def test_native_files_are_the_numpy_files(tmp_path, monkeypatch, fmt, layout):
    import otpu_core.tt.convert as conv
    if tilepack.library() is None:
        pytest.skip("no native kernel here: nothing to compare")
    model(tmp_path / "m.gguf", np.random.default_rng(14))
    book = ledger_for(tmp_path, fmt, layout)
    monkeypatch.setenv("OTPU_NATIVE", "0")
    convert(tmp_path / "m.gguf", tmp_path / "numpy.fttw", book)
    want = (tmp_path / "numpy.fttw").read_bytes()
    monkeypatch.setenv("OTPU_NATIVE", "1")
    for block, jobs in [(conv.BLOCK_ELEMS, 2), (1, 1), (1, 2), (5000, 2)]:
        monkeypatch.setattr(conv, "BLOCK_ELEMS", block)
        convert(tmp_path / "m.gguf", tmp_path / "native.fttw", book, jobs=jobs)
        assert (tmp_path / "native.fttw").read_bytes() == want, (block, jobs)
    got = read_fttw64(tmp_path / "native.fttw")                  # every tensor's CRC checked there too
    assert set(got) == {"f32.weight", "f16.weight", "bf16.weight", "stack.weight", "q8.weight", "norm.weight"}


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_non_finite_value_is_named_the_same_way_on_both_paths(tmp_path, monkeypatch, native):
    import otpu_core.tt.convert as conv
    monkeypatch.setenv("OTPU_NATIVE", native)
    monkeypatch.setattr(conv, "BLOCK_ELEMS", 2048)             # the bad row in the third block of strips
    w = np.ones((2, 200, 64), np.float32)
    w[1, 150, 7] = np.nan
    w[1, 155, 9] = -np.inf
    write_gguf(tmp_path / "nan.gguf", {"ok.weight": np.ones((64, 64), np.float16), "bad.weight": w})
    for jobs in (1, 2):
        with pytest.raises(UsageError, match=r"'bad.weight' has 2 non-finite values \(the first, nan, at row 350, column 7\)"):
            convert(tmp_path / "nan.gguf", tmp_path / "o.fttw", jobs=jobs)
        assert not (tmp_path / "o.fttw").exists() and not (tmp_path / "o.fttw.partial").exists()
