"""The Tensix tile formats: a 32x32 tile as four 16x16 faces, packed as the hardware reads them.

A tile's faces come in the order top-left, top-right, bottom-left, bottom-right (face f covers
rows 16 * (f // 2) .. +16 and columns 16 * (f % 2) .. +16); inside a face, rows are row-major.
The formats (numbered as tt-metal's DataFormat, the number the FTTW directory stores):

- Float32 (0): 1024 little-endian fp32 words in face order, 4096 bytes.
- Float16_b (5): bfloat16 (fp32 rounded to nearest even), 1024 u16 in face order, 2048 bytes.
- Bfp8_b (6): 64 shared exponents (one byte per face row, face 0 rows 0..15 first), then 1024
  bytes, one per element in face order: sign in bit 7, a 7-bit magnitude M; the value is
  (-1)^s * M * 2^(E - 127 - 6), E the row's exponent. 1088 bytes.
- Bfp4_b (7): the same 64 exponents, then 512 bytes, two elements a byte (the even element of a
  pair in the low nibble): sign in bit 3, a 3-bit magnitude; value (-1)^s * M * 2^(E - 127 - 2).
  576 bytes.

Packing a block-float row follows tt-metal's host packer: E is the largest fp32 exponent field
in the row; each element's 24-bit significand (hidden bit set) is shifted right by E minus its
own exponent (bits shifted out are dropped), then rounded to the magnitude width, nearest with
ties to even, and clamped to the largest magnitude (a row never borrows a larger exponent).
A zero magnitude has no sign. fp32 zeros and subnormals pack as zero (the Tensix FPU flushes
subnormals; tt-metal's packer would give nonsense for a row of them). Non-finite values have no
block-float encoding: the converter refuses them before they get here.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

TILE, FACE = 32, 16
TILE_ELEMS = TILE * TILE
FACE_ROWS = 4 * FACE                      # face rows in a tile: one shared exponent each


@dataclass(frozen=True)
class TileFormat:
    code: int                             # tt-metal DataFormat number
    name: str                             # tt-metal's name
    short: str                            # what the ledger and the command line call it
    tile_bytes: int
    mantissa_bits: int = 0                # block-float magnitude width (0: not block-float)

    @property
    def block_float(self) -> bool: return self.mantissa_bits > 0


FLOAT32 = TileFormat(0, "Float32", "fp32", 4096)
FLOAT16_B = TileFormat(5, "Float16_b", "bf16", 2048)
BFP8_B = TileFormat(6, "Bfp8_b", "bfp8", FACE_ROWS + TILE_ELEMS, 7)
BFP4_B = TileFormat(7, "Bfp4_b", "bfp4", FACE_ROWS + TILE_ELEMS // 2, 3)
FORMATS = (FLOAT32, FLOAT16_B, BFP8_B, BFP4_B)
BY_CODE = {f.code: f for f in FORMATS}
BY_SHORT = {f.short: f for f in FORMATS}


def format_named(text: str) -> TileFormat | None:
    """The format a user names, by its short name (bfp8) or tt-metal's (Bfp8_b), any case."""
    t = text.strip().lower()
    return next((f for f in FORMATS if t in (f.short, f.name.lower())), None)


# ---- faces and tile order --------------------------------------------------------------------

def to_faces(tiles: np.ndarray) -> np.ndarray:
    """(..., 32, 32) tiles (any strides) to a contiguous (T, 4, 16, 16) array in face order."""
    lead = tiles.shape[:-2]
    t = tiles.reshape(*lead, 2, FACE, 2, FACE)
    n = len(lead)
    return face_order(t, (*range(n), n, n + 2, n + 1, n + 3)).reshape(-1, 4, FACE, FACE)


def from_faces(faces: np.ndarray) -> np.ndarray:
    """(T, 4, 16, 16) face-ordered values back to (T, 32, 32) tiles."""
    t = faces.reshape(faces.shape[0], 2, 2, FACE, FACE).transpose(0, 1, 3, 2, 4)
    return t.reshape(faces.shape[0], TILE, TILE)


def face_order(a: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """`a` transposed to `axes`, contiguous: the one step that puts values in tile and face order."""
    return np.ascontiguousarray(a.transpose(axes))


def shared_maxima(groups: np.ndarray) -> np.ndarray:
    """The largest magnitude of each face row: (A, 16, M) with a face row's 16 elements on axis 1."""
    return groups.max(axis=1)


# ---- packing ---------------------------------------------------------------------------------
# A strip is 32 source rows, C (a multiple of 32) columns. `transposed` says the tiles hold the
# transpose of the strip's 32 x 32 blocks (MATMUL_NMAJOR), so a face row runs down 16 source
# rows; otherwise (SOURCE) it runs along 16 source columns.

def pack_strips(strips: np.ndarray, fmt: TileFormat, transposed: bool) -> np.ndarray:
    """(S*32, C) float32 rows to (S, C/32, fmt.tile_bytes) uint8: each strip's tiles, in order."""
    x = np.asarray(strips, dtype=np.float32)
    S, C = x.shape[0] // TILE, x.shape[1]
    ct = C // TILE
    if fmt is FLOAT32 or fmt is FLOAT16_B:
        if fmt is FLOAT16_B:
            bits = x.view(np.uint32)
            x = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype("<u2")
        blocks = x.reshape(S, TILE, ct, TILE)
        tiles = blocks.transpose(0, 2, 3, 1) if transposed else blocks.transpose(0, 2, 1, 3)
        return to_faces(tiles).reshape(S, ct, -1).view(np.uint8)
    if not fmt.block_float:
        raise ValueError(f"no packer for {fmt.name}")
    if transposed:      # (strip, column half of the tile, 16 rows of a face row, K)
        groups = x.reshape(S * 2, FACE, C)
        code_axes, exp_shape, exp_axes = (0, 3, 4, 1, 5, 2), (S, 2, ct, 2, FACE), (0, 2, 3, 1, 4)
        code_shape = (S, 2, FACE, ct, 2, FACE)
    else:               # bring each face row's 16 columns to axis 1: (strip, 16, row * group)
        groups = _scratch("groups", (S, FACE, TILE, 2 * ct), np.float32)
        np.copyto(groups, x.reshape(S, TILE, 2 * ct, FACE).transpose(0, 3, 1, 2))
        groups = groups.reshape(S, FACE, TILE * 2 * ct)
        code_axes, exp_shape, exp_axes = (0, 4, 2, 5, 3, 1), (S, 2, FACE, ct, 2), (0, 3, 1, 4, 2)
        code_shape = (S, FACE, 2, FACE, ct, 2)
    mag = np.abs(groups, out=_scratch("mag", groups.shape, np.float32))
    exp = shared_maxima(mag).view(np.uint32) >> 23
    if np.any((exp > 0) & (exp < 24)):
        codes = _codes_exact(groups, mag, exp.astype(np.int32), fmt.mantissa_bits)
    else:
        codes = _codes_fast(groups, exp, fmt.mantissa_bits)
    out = np.empty((S, ct, fmt.tile_bytes), np.uint8)
    out[..., :FACE_ROWS] = face_order(exp.astype(np.uint8).reshape(exp_shape), exp_axes).reshape(S, ct, FACE_ROWS)
    codes = face_order(codes.reshape(code_shape), code_axes).reshape(S, ct, TILE_ELEMS)
    if fmt is BFP8_B:
        out[..., FACE_ROWS:] = codes
    else:
        out[..., FACE_ROWS:] = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return out


_SCRATCH = threading.local()


def _scratch(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """A work array of this thread, reused from block to block (a fresh large array costs a page
    fault per page)."""
    arrays = _SCRATCH.__dict__
    a = arrays.get(name)
    if a is None or a.shape != shape or a.dtype != dtype:
        a = arrays[name] = np.empty(shape, dtype)
    return a


def _codes_fast(groups: np.ndarray, exp: np.ndarray, width: int) -> np.ndarray:
    """Sign-magnitude codes by float arithmetic, exact when every row exponent is 0 or at least 24.

    x * 2^(150 - E) is the 24-bit significand shifted right by E - e, the shifted-out bits still
    there as a fraction (exact: a power-of-two scale, and the result is below 2^24 in size);
    truncation drops them as the integer shift does; then nearest-even to `width` bits, clamped.
    A subnormal lands below 1 and truncates to zero; rows with E = 0 hold only zeros and subnormals.
    """
    scale = ((277 - np.maximum(exp, 24)) << 23).astype(np.uint32).view(np.float32)      # 2^(150 - E), normal
    t = np.multiply(groups, scale[:, None, :], out=_scratch("t", groups.shape, np.float32))
    np.trunc(t, out=t)
    t *= np.float32(2.0 ** (width - 24))
    np.rint(t, out=t)
    top = np.float32((1 << width) - 1)
    np.clip(t, -top, top, out=t)
    q = _scratch("q", groups.shape, np.int8)
    np.copyto(q, t, casting="unsafe")
    return _sign_magnitude(q, width)


def _codes_exact(groups: np.ndarray, mag: np.ndarray, exp: np.ndarray, width: int) -> np.ndarray:
    """Sign-magnitude codes by tt-metal's integer steps (rows whose exponent is below 24 need them)."""
    bits = mag.view(np.uint32)
    own = (bits >> 23).astype(np.int32)
    drop = 24 - width
    shift = np.minimum(exp[:, None, :] - own, 31).astype(np.uint32)
    sig = ((bits & 0x7FFFFF) | 0x800000) >> shift
    sig += ((1 << (drop - 1)) - 1) + ((sig >> drop) & 1)     # nearest, ties to even
    q = np.minimum(sig >> drop, (1 << width) - 1).astype(np.int8)
    q[own == 0] = 0                       # zeros and subnormals
    np.negative(q, out=q, where=np.signbit(groups))
    return _sign_magnitude(q, width)


def _sign_magnitude(q: np.ndarray, width: int) -> np.ndarray:
    """Signed int8 magnitudes to codes: the sign above `width` magnitude bits (zero has none)."""
    sign = np.less(q, 0, out=_scratch("neg", q.shape, np.bool_)).view(np.uint8)
    np.left_shift(sign, width, out=sign)
    code = np.abs(q, out=_scratch("code", q.shape, np.int8)).view(np.uint8)
    np.bitwise_or(code, sign, out=code)
    return code


def pack(tiles: np.ndarray, fmt: TileFormat) -> np.ndarray:
    """(T, 32, 32) float32 tiles to a (T, fmt.tile_bytes) uint8 array, each row one tile's bytes."""
    t = np.asarray(tiles, dtype=np.float32)
    strip = t.transpose(1, 0, 2).reshape(TILE, -1)
    return pack_strips(strip, fmt, False).reshape(t.shape[0], fmt.tile_bytes)


# ---- unpacking -------------------------------------------------------------------------------

def unpack(data: np.ndarray, fmt: TileFormat) -> np.ndarray:
    """(T, fmt.tile_bytes) uint8 (or the same bytes flat) back to (T, 32, 32) float32 tiles."""
    raw = np.asarray(data, dtype=np.uint8).reshape(-1, fmt.tile_bytes)
    n = raw.shape[0]
    if fmt is FLOAT32:
        faces = raw.view("<f4").astype(np.float32, copy=False)
    elif fmt is FLOAT16_B:
        faces = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        codes = raw[:, FACE_ROWS:]
        if fmt is BFP4_B:
            codes = np.stack((codes & 0xF, codes >> 4), axis=-1).reshape(n, TILE_ELEMS)
        width = fmt.mantissa_bits
        mag = (codes & ((1 << width) - 1)).astype(np.float32)
        mag[codes >> width != 0] *= -1
        scale = np.ldexp(np.float32(1), raw[:, :FACE_ROWS].astype(np.int32) - (127 + width - 1)).astype(np.float32)
        faces = mag.reshape(n, FACE_ROWS, FACE) * scale[..., None]
    return from_faces(faces.reshape(n, 4, FACE, FACE))


def unpack_strips(data: np.ndarray, fmt: TileFormat, transposed: bool, cols: int) -> np.ndarray:
    """The inverse of `pack_strips`: tile bytes of whole strips back to (S*32, cols) float32 rows."""
    ct = cols // TILE
    tiles = unpack(data, fmt).reshape(-1, ct, TILE, TILE)
    rows = tiles.transpose(0, 3, 1, 2) if transposed else tiles.transpose(0, 2, 1, 3)
    return rows.reshape(-1, cols)
