"""The native tile packer: `tilepack.c`, the C twin of `bfp.pack_strips` and `bfp16`, loaded with cbuild.

`library()` is the loaded kernel, or None when native kernels are off (`OTPU_NATIVE=0`, no C
compiler, a failed build): then `convert` takes the numpy path, which defines every byte. Both
give the same bytes (tests/test_tt_tilepack.py compares them over every format, layout and source
type, edge values included). The kernel reads the source's float32 bits (F16 through an exact
table or VCVTPH2PS, BF16 by a shift) and does only exact steps on them, so its AVX2 body and its
portable body agree.

- `pack_strips(src, kind, fmt, transposed, ...)`: one block of strips in memory, as
  `bfp.pack_strips` takes it (float32 values, or F16/BF16 bits with `kind`).
- `convert_tensor(...)`: a whole F32/F16/BF16 tensor from one file descriptor to another, in
  blocks of strips shared by threads: map, pack, CRC-32 (PCLMULQDQ) while hot, pwrite. The
  GIL is let go for the whole tensor. The source's size is checked against the tensor first; a
  file cut short while it is being converted would be SIGBUS (the mapping), not an error.
- `crc32(data, crc, fast)`: zlib's CRC-32.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from .. import cbuild
from . import bfp

KINDS = {"F32": 0, "F16": 1, "BF16": 2}             # GGML types the kernel reads itself
OK, NONFINITE, READ, WRITE, NOMEM, BADARG = range(6)
_i64, _int, _u32 = ctypes.c_int64, ctypes.c_int, ctypes.c_uint32


class NonFinite(ValueError):
    """A block holds an infinity or a NaN; `row` is the first source row of the first such block."""

    def __init__(self, row: int = 0):
        super().__init__(f"non-finite value in the block from row {row}")
        self.row = row


class KernelError(OSError):
    """The kernel could not read, write or allocate; `stage` says which (errno 0 on a read: the
    source is shorter than its directory says)."""

    def __init__(self, errno: int, stage: str):
        super().__init__(errno, os.strerror(errno) if errno else "file cut short")
        self.stage = stage


def library() -> ctypes.CDLL | None:
    """The kernel, or None: use the numpy path."""
    return cbuild.typed("tilepack", Path(__file__).with_name("tilepack.c"), _declare)


def _declare(lib: ctypes.CDLL) -> None:
    p = ctypes.c_void_p
    lib.tp_pack.argtypes = [p, _int, _i64, _i64, _i64, _i64, _i64, _int, _int, p]
    lib.tp_pack.restype = _int
    lib.tp_set_simd.argtypes = [_int]
    lib.tp_set_simd.restype = None
    lib.tp_crc32.argtypes = [_u32, p, _i64, _int]
    lib.tp_crc32.restype = _u32
    lib.tp_crc32_combine.argtypes = [_u32, _u32, _i64]
    lib.tp_crc32_combine.restype = _u32
    lib.tp_convert.argtypes = [_int, _i64, _int, _i64, _i64, _i64, _int, _int, _int, _i64, _i64, _int,
                               ctypes.POINTER(_u32), ctypes.POINTER(_i64), ctypes.POINTER(_int)]
    lib.tp_convert.restype = _int


def pack_strips(lib: ctypes.CDLL, src: np.ndarray, kind: str, fmt: bfp.TileFormat, transposed: bool,
                strips: int | None = None, tiles: int | None = None) -> np.ndarray:
    """(rows, cols) values of `kind` (F32: float32; F16, BF16: their uint16 bits) as `strips`
    strips of `tiles` tiles (default: just enough), zero-padded: (strips, tiles, fmt.tile_bytes)
    uint8, the bytes `bfp.pack_strips` gives for the padded float32 values. Raises NonFinite."""
    a = np.ascontiguousarray(src, dtype=np.float32 if kind == "F32" else np.uint16)
    rows, cols = a.shape
    strips = -(-rows // bfp.TILE) if strips is None else strips
    tiles = -(-cols // bfp.TILE) if tiles is None else tiles
    out = np.empty((strips, tiles, fmt.tile_bytes), np.uint8)
    status = lib.tp_pack(a.ctypes.data, KINDS[kind], cols, rows, cols, strips, tiles, fmt.code, int(transposed),
                         out.ctypes.data)
    if status == NONFINITE:
        raise NonFinite
    if status != OK:
        raise ValueError(f"tp_pack: bad arguments ({a.shape} into {strips} x {tiles} tiles)")
    return out


def convert_tensor(lib: ctypes.CDLL, fd_in: int, in_offset: int, kind: str, rows: int, cols: int, matrices: int,
                   fmt: bfp.TileFormat, transposed: bool, fd_out: int, out_offset: int, block_strips: int,
                   threads: int) -> int:
    """Convert `matrices` rows x cols matrices at `in_offset` of fd_in to tiles at `out_offset` of
    fd_out; returns the CRC-32 of the bytes written. Raises NonFinite, KernelError."""
    crc, bad, err = _u32(), _i64(), _int()
    status = lib.tp_convert(fd_in, in_offset, KINDS[kind], rows, cols, matrices, fmt.code, int(transposed),
                            fd_out, out_offset, block_strips, threads, ctypes.byref(crc), ctypes.byref(bad),
                            ctypes.byref(err))
    if status == NONFINITE:
        raise NonFinite(bad.value)
    if status != OK:
        raise KernelError(err.value, {READ: "read", WRITE: "write", NOMEM: "memory"}.get(status, "arguments"))
    return crc.value


def crc32(lib: ctypes.CDLL, data, crc: int = 0, fast: bool = True) -> int:
    buf = np.frombuffer(data, np.uint8)
    return lib.tp_crc32(crc, buf.ctypes.data, buf.size, int(fast))


def set_simd(lib: ctypes.CDLL, on: bool) -> None:
    """Use the AVX2 body where the CPU has it (on), or the portable one (off: tests compare both)."""
    lib.tp_set_simd(int(on))
