"""The FTTW artifact against its definition: an independent float64 reader written here from the
format's text (docs/tenstorrent.md), an independent model of the block-float packer, exact
representable round trips, hand-computed tile bytes, and mutations that must turn the tests red."""
import math
import struct
import zlib

import gguf
import numpy as np
import pytest

from otpu_core.tt import bfp
from otpu_core.tt.convert import convert
from otpu_core.tt.ledger import Ledger

WIDTH = {6: 7, 7: 3}                     # Bfp8_b, Bfp4_b magnitude bits


# ---- an FTTW reader from the definition, in float64 ------------------------------------------

def read_fttw64(path):
    """{name: float64 array in the source's shape} from the file's bytes and the format's text alone."""
    data = path.read_bytes()
    assert data[:4] == b"FTTW"
    version, header_bytes, entry_bytes, count, alignment = struct.unpack_from("<5I", data, 4)
    assert (version, header_bytes, entry_bytes, alignment) == (1, 64, 256, 64)
    assert zlib.crc32(data[:60]) == struct.unpack_from("<I", data, 60)[0]
    assert zlib.crc32(data[64:64 + 256 * count]) == struct.unpack_from("<I", data, 48)[0]
    out = {}
    for i in range(count):
        base = 64 + 256 * i
        name = data[base:base + 128].rstrip(b"\0").decode()
        fmt, layout, ndim = data[base + 128], data[base + 129], data[base + 130]
        shape = struct.unpack_from("<4Q", data, base + 136)[:ndim]
        tile_rows, tile_cols, matrices, crc = struct.unpack_from("<4I", data, base + 168)
        offset, nbytes, _dram = struct.unpack_from("<3Q", data, base + 184)
        assert offset % 64 == 0
        blob = data[offset:offset + nbytes]
        assert zlib.crc32(blob) == crc
        if layout == 0:
            out[name] = np.array(struct.unpack_from(f"<{shape[0]}f", blob), np.float64)
            continue
        rows, cols = shape[-2], shape[-1]
        tile_bytes = {0: 4096, 5: 2048, 6: 1088, 7: 576}[fmt]
        mats = []
        per_matrix = tile_rows * tile_cols * tile_bytes
        for m in range(matrices):
            grid_r, grid_c = tile_rows * 32, tile_cols * 32
            full = np.zeros((grid_r, grid_c))
            for t in range(tile_rows * tile_cols):
                tile = decode_tile(blob[m * per_matrix + t * tile_bytes:m * per_matrix + (t + 1) * tile_bytes], fmt)
                if layout == 1:      # SOURCE: row-major grid of the source matrix
                    r, c = divmod(t, tile_cols)
                else:                # MATMUL_NMAJOR: column-major grid of the K x N transpose
                    c, r = divmod(t, tile_rows)
                full[32 * r:32 * r + 32, 32 * c:32 * c + 32] = tile
            mat = full if layout == 1 else full.T
            mats.append(mat[:rows, :cols])
        out[name] = np.array(mats).reshape(shape)
    return out


def decode_tile(b, fmt):
    """Element (i, j) of a tile from its bytes: face (i//16)*2 + j//16, row i%16, column j%16."""
    tile = np.zeros((32, 32))
    for i in range(32):
        for j in range(32):
            f, r, c = (i // 16) * 2 + j // 16, i % 16, j % 16
            k = f * 256 + r * 16 + c
            if fmt == 0:
                tile[i, j] = struct.unpack_from("<f", b, 4 * k)[0]
            elif fmt == 5:
                tile[i, j] = struct.unpack("<f", struct.pack("<I", struct.unpack_from("<H", b, 2 * k)[0] << 16))[0]
            else:
                w = WIDTH[fmt]
                e = b[f * 16 + r]
                code = b[64 + k] if fmt == 6 else (b[64 + k // 2] >> (4 * (k % 2))) & 0xF
                mag, neg = code & ((1 << w) - 1), code >> w
                tile[i, j] = (-1.0 if neg else 1.0) * mag * 2.0 ** (e - 127 - (w - 1))
    return tile


# ---- what each value must become, from the definition -----------------------------------------

def expect(x, fmt, transposed):
    """Independent model: bf16 nearest-even; block-float per face row as tt-metal's packer."""
    x = np.asarray(x, np.float64)
    if fmt is bfp.FLOAT32:
        return x
    m, e = np.frexp(x)
    if fmt is bfp.FLOAT16_B:      # 8 significant bits; below 2^-126 a fixed grid of 2^-133
        return np.where(np.abs(x) < 2.0 ** -126, np.round(x * 2.0 ** 133) * 2.0 ** -133, np.round(m * 256) * 2.0 ** (e - 8))
    w = fmt.mantissa_bits
    field = np.where((x == 0) | (np.abs(x) < 2.0 ** -126), 0, e + 126)
    rows, cols = x.shape
    # face rows: 16 consecutive columns (SOURCE) or 16 consecutive rows of a column (NMAJOR)
    g = field.reshape(rows, cols // 16, 16).max(axis=2).repeat(16, axis=1) if not transposed else \
        field.reshape(rows // 16, 16, cols).max(axis=1).repeat(16, axis=0)
    t = np.floor(np.abs(x) * 2.0 ** (150 - g))
    q = np.minimum(np.round(t / 2.0 ** (24 - w)), 2 ** w - 1)
    q[field == 0] = 0
    return np.sign(x) * q * 2.0 ** (g - 127 - (w - 1))


def write_gguf(path, tensors):
    w = gguf.GGUFWriter(str(path), "llama")
    for name, arr in tensors.items():
        if isinstance(arr, tuple):
            w.add_tensor(name, arr[0], raw_dtype=arr[1])
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ledger_for(tmp_path, fmt, layout):
    p = tmp_path / f"ledger-{fmt}-{layout}.toml"
    p.write_text(f'[[tensor]]\nmatch = "*"\nformat = "{fmt}"\nlayout = "{layout}"\n')
    return Ledger.load(p)


def representable(rng, shape, fmt):
    """Values every format holds exactly: |q| <= 2^w - 1 of random bit lengths, one power of two."""
    w = {"fp32": 7, "bf16": 7, "bfp8": 7, "bfp4": 3}[fmt]
    bits = rng.integers(0, w + 1, shape)
    q = rng.integers(0, 1 << 30, shape) % (1 << bits)
    return (np.where(rng.random(shape) < 0.5, -q, q) * 2.0 ** int(rng.integers(-20, 20))).astype(np.float32)


CASES = [(f, lay) for f in ("fp32", "bf16", "bfp8", "bfp4") for lay in ("source", "nmajor")]


@pytest.mark.parametrize("fmt,layout", CASES)
def test_representable_values_round_trip_exactly(tmp_path, fmt, layout):
    rng = np.random.default_rng(7)
    tensors = {"a.weight": representable(rng, (70, 96), fmt), "b.weight": representable(rng, (2, 33, 64), fmt),
               "norm.weight": rng.standard_normal(50).astype(np.float32)}
    write_gguf(tmp_path / "m.gguf", tensors)
    convert(tmp_path / "m.gguf", tmp_path / "m.fttw", ledger_for(tmp_path, fmt, layout))
    got = read_fttw64(tmp_path / "m.fttw")
    for name, want in tensors.items():
        assert got[name].shape == want.shape
        err = np.max(np.abs(got[name] - want))
        pcc = np.corrcoef(got[name].ravel(), want.ravel())[0, 1]
        assert err == 0.0 and pcc == pytest.approx(1.0), (name, fmt, layout, err, pcc)


@pytest.mark.parametrize("path", ["native", "numpy"])
@pytest.mark.parametrize("fmt,layout", CASES)
def test_gaussian_values_pack_as_the_definition_says(tmp_path, monkeypatch, fmt, layout, path):
    """Both packers against the definition: the C kernel, and the numpy path (OTPU_NATIVE=0, as on
    a machine with no compiler)."""
    monkeypatch.setenv("OTPU_NATIVE", "1" if path == "native" else "0")
    rng = np.random.default_rng(11)
    a = rng.standard_normal((64, 96)).astype(np.float32)
    a[3, :40] = 0.0
    a[5, 7] = -0.0
    tiny = (rng.standard_normal((32, 64)) * 2.0 ** -110).astype(np.float32)      # row exponents below 24
    tiny[0, :16] = 1e-40                                                            # subnormals
    write_gguf(tmp_path / "g.gguf", {"a.weight": a, "tiny.weight": tiny})
    convert(tmp_path / "g.gguf", tmp_path / "g.fttw", ledger_for(tmp_path, fmt, layout))
    got = read_fttw64(tmp_path / "g.fttw")
    f = bfp.format_named(fmt)
    for name, x in (("a.weight", a), ("tiny.weight", tiny)):
        want = expect(x, f, layout == "nmajor")
        assert np.array_equal(got[name], want), (name, np.argwhere(got[name] != want)[:5])
    err = np.max(np.abs(got["a.weight"] - a))
    pcc = np.corrcoef(got["a.weight"].ravel(), a.ravel())[0, 1]
    floor = {"fp32": 1.0, "bf16": 0.9999, "bfp8": 0.9999, "bfp4": 0.98}[fmt]
    limit = {"fp32": 0.0, "bf16": 2.0 ** -6, "bfp8": 2.0 ** -4, "bfp4": 1.0}[fmt]
    assert pcc >= floor - 1e-12 and err <= limit, (fmt, layout, pcc, err)


def test_tile_bytes_by_hand():
    tile = np.zeros((1, 32, 32), np.float32)
    tile[0, 0, 0], tile[0, 0, 1], tile[0, 0, 16], tile[0, 16, 0] = 1.0, -0.5, 3.0, 0.75
    tile[0, 0, 2], tile[0, 0, 3], tile[0, 0, 4] = 2.0 ** -7, 3 * 2.0 ** -7, 1.5 * 2.0 ** -7   # tie, tie, above
    b = bfp.pack(tile, bfp.BFP8_B)[0]
    assert b.size == 1088 and b[0] == 127 and b[16] == 128 and b[32] == 126 and b[48] == 0
    assert not b[1:16].any()                     # rows 1..15 of face 0 are zero: exponent 0
    assert list(b[64:69]) == [0x40, 0xA0, 0x00, 0x02, 0x01]     # 1.0, -0.5, 0.5 -> 0, 1.5 -> 2, 0.75 -> 1
    assert b[64 + 256] == 0x60 and b[64 + 512] == 0x60         # 3.0 in face 1, 0.75 in face 2
    b4 = bfp.pack(tile, bfp.BFP4_B)[0]
    assert b4.size == 576 and b4[0] == 127
    assert b4[64] == 0x4 | (0xA << 4)           # 1.0 -> 4 (low nibble), -0.5 -> sign | 2 (high nibble)
    h = bfp.pack(np.full((1, 32, 32), 1 + 2.0 ** -8, np.float32), bfp.FLOAT16_B)[0]
    assert h[:2].tobytes() == b"\x80\x3f"        # the tie rounds to the even 1.0



@pytest.mark.parametrize("fmt", bfp.FORMATS, ids=[f.short for f in bfp.FORMATS])
def test_unpack_reads_each_element_as_the_definition_says(fmt):
    """bfp.unpack (what `weights check` compares with) against decode_tile, the element-by-element
    reader written here from the format's text."""
    rng = np.random.default_rng(int(fmt.code))
    tiles = (rng.standard_normal((2, 32, 32)) * 2.0 ** rng.integers(-30, 30, (2, 32, 1))).astype(np.float32)
    packed = bfp.pack(tiles, fmt)
    got = bfp.unpack(packed, fmt).astype(np.float64)
    for t in range(2):
        assert np.array_equal(got[t], decode_tile(packed[t].tobytes(), fmt.code)), (fmt.name, t)

@pytest.mark.parametrize("fmt", [bfp.BFP8_B, bfp.BFP4_B], ids=["bfp8", "bfp4"])
def test_ties_of_tiny_rows_round_to_even_on_the_integer_path(fmt):
    """Rows whose shared exponent field is below 24 (values near 2^-107) go through the packer's
    integer steps; exact ties there round to the even magnitude like everywhere else."""
    w, field = fmt.mantissa_bits, 20
    unit = 2.0 ** (field - 127 - (w - 1))                        # one magnitude step of this row
    tile = np.zeros((1, 32, 32))
    tile[0, :, 0] = 2 ** (w - 1) * unit                          # the row maximum: exponent field 20
    ties = np.arange(15, dtype=np.float64) % (2 ** (w - 1)) + 0.5  # k + 1/2 for k = 0, 1, 2, ...
    tile[0, :, 1:16] = ties * unit * np.where(np.arange(32) % 2, -1, 1)[:, None]
    x = tile.astype(np.float32)
    assert np.array_equal(x.astype(np.float64), tile)           # every value exact in fp32
    got = bfp.unpack(bfp.pack(x, fmt), fmt)[0].astype(np.float64)
    want = expect(x[0], fmt, transposed=False)
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]
    assert np.abs(got[:, 1:16]).min() == 0 and (np.abs(got[:, 1:16]) / unit % 2 == 0).all()   # even magnitudes

@pytest.mark.parametrize("mutation", ["face order", "exponent row"])
def test_mutations_turn_the_round_trip_red(tmp_path, monkeypatch, mutation):
    monkeypatch.setenv("OTPU_NATIVE", "0")          # the numpy packer is mutated (tilepack.c is held to its bytes)
    if mutation == "face order":
        real = bfp.face_order

        def swapped(a, axes, out=None):  # faces column-major (0, 2, 1, 3) instead of row-major
            got = real(a, axes)
            first = -4 if got.shape[-2:] == (16, 16) else -3
            got = np.ascontiguousarray(np.swapaxes(got, first, first + 1))
            return got if out is None else real(got, tuple(range(got.ndim)), out)
        monkeypatch.setattr(bfp, "face_order", swapped)
    else:
        monkeypatch.setattr(bfp, "shared_maxima", lambda g: np.roll(g.max(axis=1), 1, axis=-1))
    rng = np.random.default_rng(3)
    red = []
    for fmt, layout in [("bfp8", "source"), ("bfp8", "nmajor"), ("bfp4", "nmajor"), ("bf16", "source")]:
        if mutation == "exponent row" and fmt == "bf16":
            continue
        a = representable(rng, (64, 64), fmt)
        write_gguf(tmp_path / "r.gguf", {"a.weight": a})
        convert(tmp_path / "r.gguf", tmp_path / "r.fttw", ledger_for(tmp_path, fmt, layout))
        got = read_fttw64(tmp_path / "r.fttw")["a.weight"]
        red.append(not np.array_equal(got, a))
    assert all(red), red


def test_strip_blocks_and_threads_do_not_change_the_bytes(tmp_path, monkeypatch):
    """One strip at a time or many at once, one thread or two: the same file."""
    import otpu_core.tt.convert as conv
    rng = np.random.default_rng(5)
    write_gguf(tmp_path / "s.gguf", {"w.weight": rng.standard_normal((200, 72)).astype(np.float32),
                                     "e.weight": rng.standard_normal((96, 64)).astype(np.float16)})
    convert(tmp_path / "s.gguf", tmp_path / "big.fttw", jobs=1)
    monkeypatch.setattr(conv, "BLOCK_ELEMS", 1)
    for jobs in (1, 2):
        convert(tmp_path / "s.gguf", tmp_path / f"one{jobs}.fttw", jobs=jobs)
        assert (tmp_path / "big.fttw").read_bytes() == (tmp_path / f"one{jobs}.fttw").read_bytes()


def test_every_16_bit_value_decodes_as_its_definition_says():
    from otpu_core.gguf_source import DECODE16
    u = np.arange(1 << 16, dtype=np.uint16)
    want = u.view(np.float16).astype(np.float32)
    finite = np.isfinite(want)
    assert np.array_equal(DECODE16["F16"].view(np.uint32)[finite], want.view(np.uint32)[finite])
    assert np.array_equal(np.isnan(DECODE16["F16"]), np.isnan(want))
    # bfloat16: the top half of a float32, from the format's fields (sign, 8-bit exponent, 7 bits)
    s, e, f = u >> 15, (u >> 7) & 0xFF, (u & 0x7F).astype(np.float64)
    with np.errstate(over="ignore"):
        ref = np.where(e == 0, f * 2.0 ** -133, (1 + f / 128) * 2.0 ** (e.astype(np.float64) - 127)) * (-1.0) ** s
    fin = e != 0xFF
    assert np.array_equal(DECODE16["BF16"][fin].astype(np.float64), ref[fin])
    assert np.isinf(DECODE16["BF16"][(e == 0xFF) & (f == 0)]).all() and np.isnan(DECODE16["BF16"][(e == 0xFF) & (f != 0)]).all()


def test_quantised_sources_are_dequantised_by_gguf(tmp_path):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    q8 = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    write_gguf(tmp_path / "q.gguf", {"q.weight": (q8, gguf.GGMLQuantizationType.Q8_0),
                                     "h.weight": x.astype(np.float16)})
    convert(tmp_path / "q.gguf", tmp_path / "q.fttw", ledger_for(tmp_path, "fp32", "nmajor"))
    got = read_fttw64(tmp_path / "q.fttw")
    ref = gguf.quants.dequantize(q8, gguf.GGMLQuantizationType.Q8_0)
    assert np.array_equal(got["q.weight"], ref) and np.array_equal(got["h.weight"], x.astype(np.float16))
    assert math.isclose(np.corrcoef(got["q.weight"].ravel(), x.ravel())[0, 1], 1.0, abs_tol=1e-3)
