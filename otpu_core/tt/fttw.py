"""The FTTW artifact: a model's weights in the card's own tile formats, ready to copy into DRAM.

File layout (little-endian; docs/tenstorrent.md "Weights: the FTTW file" is the prose twin):

    0    header, 64 bytes (HEADER)
    64   directory: tensor_count entries of 256 bytes (ENTRY)
    ...  tensor data, each tensor at a 64-byte aligned offset, in directory order

Header: magic b"FTTW", version, header bytes (64), entry bytes (256), tensor count, alignment (64),
offset of the first tensor's data, the file's total size, the DRAM base of the weights in every
bank, CRC-32 of the directory, 8 reserved bytes, CRC-32 of the 60 header bytes before it.

Entry: name (128 bytes, UTF-8, NUL padded), format (tt-metal DataFormat number: 0 Float32,
5 Float16_b, 6 Bfp8_b, 7 Bfp4_b), layout (0 FLAT, 1 SOURCE, 2 MATMUL_NMAJOR), number of dims,
GGML type of the source, DRAM bank, 3 pad bytes, shape (4 x u64, numpy order, outermost first),
tile rows and tile columns of one stored matrix, number of matrices, CRC-32 of the tensor's
bytes, file offset, byte count, DRAM address, the gate's least PCC and largest max-abs error
(f64; infinity means no limit), 32 reserved bytes.

Layouts of a tensor with shape (..., R, C), each of its prod(...) matrices stored in turn:

- FLAT: 1-D tensors, untiled fp32, zero-padded to 64 bytes.
- SOURCE: the R x C matrix padded to whole tiles, its tile grid row-major: tile (r, c) is tile
  number r * ceil(C / 32) + c, holding rows 32r.., columns 32c.. of the source.
- MATMUL_NMAJOR: the matrix transposed to C x R (K x N: GGUF stores a weight as N rows of K),
  its tile grid column-major: tile (k, n) is number n * ceil(K / 32) + k and holds W[32n + j,
  32k + i] at row i, column j. The K tiles of one output column block are one run of bytes.

In both 2-D layouts a strip of 32 source rows is one contiguous run of tiles in the file (a tile
row of SOURCE, a tile column of MATMUL_NMAJOR); the layouts differ only by a transpose inside
each tile. That is why the converter streams 32-row strips, and why the transpose is done here:
block-float formats share an exponent along a face row, so a tile cannot be transposed after
packing without unpacking it. Tile bytes are `bfp`'s.

Reading checks everything before anything is used: a wrong magic, a version newer than this
code, a checksum that does not match, a directory that points past the end of the file are
`FttwError`s (exit 2) naming the file and the problem.
"""
from __future__ import annotations

import math
import os
import struct
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import UsageError
from . import bfp, consts as K
from .ledger import NMAJOR, SOURCE

MAGIC = b"FTTW"
VERSION = 1
ALIGN = 64
HEADER = struct.Struct("<4s5I3Q4I")
ENTRY = struct.Struct("<128s4BB3x4Q4I3Q2d32x")
NAME_BYTES = 128
MAX_DIMS = 4
FLAT = "flat"
LAYOUT_CODES = {FLAT: 0, SOURCE: 1, NMAJOR: 2}
LAYOUT_BY_CODE = {v: k for k, v in LAYOUT_CODES.items()}
LAYOUT_TITLES = {FLAT: "FLAT", SOURCE: "SOURCE", NMAJOR: "MATMUL_NMAJOR"}
DRAM_BASE_ALIGN = 1 << 20       # bank 0 holds a copy of header + directory below the weights
assert HEADER.size == 64 and ENTRY.size == 256


class FttwError(UsageError):
    """An FTTW file that cannot be used as it is (wrong magic, newer, corrupt, truncated)."""


def align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


@dataclass
class Entry:
    name: str
    shape: tuple[int, ...]
    fmt: bfp.TileFormat
    layout: str
    source_type: int = 0
    tile_rows: int = 0            # of one stored matrix (K x N for MATMUL_NMAJOR)
    tile_cols: int = 0
    matrices: int = 1
    offset: int = 0
    nbytes: int = 0
    crc32: int = 0
    bank: int = 0
    dram_addr: int = 0
    min_pcc: float = 1.0
    max_abs: float = 0.0

    @property
    def rows(self) -> int:        # source rows of one matrix (1 for FLAT)
        return self.shape[-2] if len(self.shape) > 1 else 1

    @property
    def cols(self) -> int:
        return self.shape[-1]

    @property
    def strips(self) -> int:      # 32-row strips of one matrix
        return -(-self.rows // bfp.TILE)

    @property
    def tiles_per_strip(self) -> int:
        return -(-self.cols // bfp.TILE)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(shape=list(self.shape), format=self.fmt.name, layout=LAYOUT_TITLES[self.layout],
                 max_abs=None if math.isinf(self.max_abs) else self.max_abs)
        del d["fmt"]
        return d

    def pack(self) -> bytes:
        name = self.name.encode()
        shape = list(self.shape) + [0] * (MAX_DIMS - len(self.shape))
        return ENTRY.pack(name, self.fmt.code, LAYOUT_CODES[self.layout], len(self.shape), self.source_type,
                          self.bank, *shape, self.tile_rows, self.tile_cols, self.matrices, self.crc32,
                          self.offset, self.nbytes, self.dram_addr, self.min_pcc, self.max_abs)


def entry_for(name: str, shape: tuple[int, ...], fmt: bfp.TileFormat, layout: str) -> Entry:
    """A directory entry with its tile grid and size worked out (offset, placement and CRC still 0)."""
    if len(name.encode()) >= NAME_BYTES:
        raise UsageError(f"tensor name '{name}' is {len(name.encode())} bytes; FTTW names are at most {NAME_BYTES - 1}")
    if len(shape) > MAX_DIMS:
        raise UsageError(f"tensor '{name}' has {len(shape)} dimensions; at most {MAX_DIMS}")
    e = Entry(name, tuple(shape), fmt, layout)
    if layout == FLAT:
        e.fmt, e.nbytes = bfp.FLOAT32, align(4 * shape[-1])
        return e
    e.matrices = math.prod(shape[:-2])
    strips, tiles = e.strips, e.tiles_per_strip
    e.tile_rows, e.tile_cols = (strips, tiles) if layout == SOURCE else (tiles, strips)
    e.nbytes = e.matrices * strips * tiles * fmt.tile_bytes
    return e


# ---- strips and tiles ------------------------------------------------------------------------

def strips_to_tiles(strips: np.ndarray, layout: str) -> np.ndarray:
    """(S*32, Cpad) source rows, S whole strips, to an (S, Cpad/32, 32, 32) view: the tiles in file order."""
    s = strips.reshape(-1, bfp.TILE, strips.shape[1] // bfp.TILE, bfp.TILE)        # strip, row, tile, col
    return s.transpose(0, 2, 1, 3) if layout == SOURCE else s.transpose(0, 2, 3, 1)


def tiles_to_strips(tiles: np.ndarray, layout: str, cols_padded: int) -> np.ndarray:
    """The inverse of `strips_to_tiles`: (S*T, 32, 32) tiles in file order to (S*32, Cpad) rows."""
    t = tiles.reshape(-1, cols_padded // bfp.TILE, bfp.TILE, bfp.TILE)
    s = t.transpose(0, 2, 1, 3) if layout == SOURCE else t.transpose(0, 3, 1, 2)
    return s.reshape(-1, cols_padded)


# ---- the file --------------------------------------------------------------------------------

@dataclass
class Header:
    tensor_count: int
    data_offset: int
    file_bytes: int
    dram_base: int
    directory_crc: int
    version: int = VERSION

    def pack(self) -> bytes:
        head = HEADER.pack(MAGIC, self.version, HEADER.size, ENTRY.size, self.tensor_count, ALIGN,
                           self.data_offset, self.file_bytes, self.dram_base, self.directory_crc, 0, 0, 0)
        return head[:60] + struct.pack("<I", zlib.crc32(head[:60]))


def layout_plan(entries: list[Entry], banks: int = K.DRAM_BANKS, bank_bytes: int = K.DRAM_BANK_ADDRESSABLE) -> Header:
    """Give every entry its file offset and its DRAM place; returns the header (CRC filled in later).

    Each tensor lives whole in one bank (a reader's run of tiles is one transfer), on the bank
    with the fewest bytes so far, 64-byte aligned, above `dram_base` where bank 0 keeps the
    card's copy of header and directory.
    """
    directory = HEADER.size + ENTRY.size * len(entries)
    dram_base = align(directory, DRAM_BASE_ALIGN)
    offset = align(directory)
    used = [dram_base] * banks
    for e in entries:
        e.offset = offset
        offset = align(offset + e.nbytes)
        bank = min(range(banks), key=lambda b: (used[b], b))
        if used[bank] + e.nbytes > bank_bytes:
            total = sum(x.nbytes for x in entries)
            raise UsageError(f"tensor '{e.name}' ({e.nbytes} bytes) does not fit in card DRAM: {banks} banks of "
                             f"{bank_bytes >> 20} MiB hold at most {banks * (bank_bytes - dram_base)} bytes of "
                             f"weights, one tensor per bank; this model needs {total}",
                             hint="convert more tensors to bfp4 or bfp8 (--default, --ledger)")
        e.bank, e.dram_addr = bank, used[bank]
        used[bank] = align(used[bank] + e.nbytes)
    return Header(len(entries), align(directory), offset, dram_base, 0)


def directory_bytes(entries: list[Entry]) -> bytes:
    return b"".join(e.pack() for e in entries)


class FttwFile:
    """An FTTW file opened for reading: header and directory checked, tensor bytes on demand."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        if not self.path.is_file():
            raise FttwError(f"{self.path}: no such FTTW file" if not self.path.exists() else f"{self.path}: not a file")
        self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.size = os.fstat(self._fd).st_size
            self.header, self.directory_raw, self.entries = self._read()
        except BaseException:
            self.close()
            raise
        self.by_name = {e.name: e for e in self.entries}

    def _fail(self, what: str, hint: str | None = None) -> FttwError:
        return FttwError(f"{self.path}: {what}", hint=hint or "convert the model again with `otpu-tt convert`")

    def _read(self) -> tuple[Header, bytes, list[Entry]]:
        head = os.pread(self._fd, HEADER.size, 0)
        if head[:4] != MAGIC:
            what = "a GGUF model" if head[:4] == b"GGUF" else f"starts with {head[:4]!r}"
            raise self._fail(f"not an FTTW file ({what}; an FTTW file starts with {MAGIC!r})",
                             hint="`otpu-tt convert MODEL.gguf OUT.fttw` makes one" if head[:4] == b"GGUF" else None)
        if len(head) < HEADER.size:
            raise self._fail(f"truncated: {self.size} bytes, shorter than the {HEADER.size}-byte FTTW header")
        (_, version, header_bytes, entry_bytes, count, alignment, data_offset, file_bytes, dram_base,
         dir_crc, _, _, head_crc) = HEADER.unpack(head)
        if version > VERSION:
            raise self._fail(f"FTTW version {version} is newer than this tool reads (up to {VERSION})",
                             hint="update otpu, or convert the model again with this version")
        if zlib.crc32(head[:60]) != head_crc:
            raise self._fail("header checksum mismatch: the header is corrupt")
        if version < 1 or header_bytes != HEADER.size or entry_bytes != ENTRY.size or alignment != ALIGN:
            raise self._fail(f"corrupt header (version {version}, header {header_bytes} B, entry {entry_bytes} B, "
                             f"alignment {alignment})")
        if self.size < file_bytes:
            raise self._fail(f"truncated: the header says {file_bytes} bytes, the file has {self.size}")
        raw = os.pread(self._fd, count * ENTRY.size, HEADER.size)
        if len(raw) != count * ENTRY.size or zlib.crc32(raw) != dir_crc:
            raise self._fail("directory checksum mismatch: the tensor directory is corrupt")
        entries = [self._entry(raw[i * ENTRY.size:(i + 1) * ENTRY.size], i, data_offset, file_bytes)
                   for i in range(count)]
        return Header(count, data_offset, file_bytes, dram_base, dir_crc, version), raw, entries

    def _entry(self, raw: bytes, i: int, data_offset: int, file_bytes: int) -> Entry:
        (name, fmt, layout, ndim, src, bank, *rest) = ENTRY.unpack(raw)
        shape, (tile_rows, tile_cols, matrices, crc, offset, nbytes, dram_addr, min_pcc, max_abs) = rest[:4], rest[4:]
        try:
            name = name.rstrip(b"\0").decode()
        except UnicodeDecodeError:
            raise self._fail(f"directory entry {i}: the name is not UTF-8") from None
        where = f"tensor '{name}' (directory entry {i})"
        if fmt not in bfp.BY_CODE or layout not in LAYOUT_BY_CODE or not 1 <= ndim <= MAX_DIMS:
            raise self._fail(f"{where}: unknown format {fmt} or layout {layout} or {ndim} dimensions")
        e = entry_for(name, tuple(shape[:ndim]), bfp.BY_CODE[fmt], LAYOUT_BY_CODE[layout])
        if (e.tile_rows, e.tile_cols, e.matrices, e.nbytes, e.fmt.code) != (tile_rows, tile_cols, matrices, nbytes, fmt):
            raise self._fail(f"{where}: its size does not follow from its shape {list(e.shape)} and format")
        if offset % ALIGN or offset < data_offset or offset + nbytes > file_bytes:
            raise self._fail(f"{where}: data at {offset}..{offset + nbytes} is outside the file's data "
                             f"({data_offset}..{file_bytes}) or not {ALIGN}-byte aligned")
        if bank >= K.DRAM_BANKS or dram_addr % ALIGN or dram_addr + nbytes > K.DRAM_BANK_ADDRESSABLE:
            raise self._fail(f"{where}: DRAM place bank {bank} address {dram_addr:#x} is not on the card")
        e.source_type, e.offset, e.crc32, e.bank, e.dram_addr = src, offset, crc, bank, dram_addr
        e.min_pcc, e.max_abs = min_pcc, max_abs
        return e

    def entry(self, name: str) -> Entry:
        e = self.by_name.get(name)
        if e is None:
            raise FttwError(f"{self.path}: no tensor '{name}'")
        return e

    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise self._fail(f"truncated: wanted {length} bytes at {offset}")
        return data

    def head_bytes(self) -> bytes:
        """Header and directory, as the file has them (what upload copies to bank 0)."""
        return self.read(0, HEADER.size) + self.directory_raw

    def chunks(self, e: Entry, chunk: int):
        """(position in the tensor, bytes) of one tensor, read `chunk` bytes at a time."""
        for pos in range(0, e.nbytes, chunk):
            yield pos, self.read(e.offset + pos, min(chunk, e.nbytes - pos))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "FttwFile": return self

    def __exit__(self, *exc) -> None: self.close()
