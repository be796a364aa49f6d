"""The memories of one slice: DRAM (bytes, with write generations), TMEM (words), ACT RAM
(int8 codes, scales and sub-block offset words).

DRAM is a numpy uint8 buffer the caller may supply (the simulated card passes an np.memmap of
a sparse file, so 4 GiB costs only the pages touched); every access is checked and raises a
`Fault` rather than an IndexError. Each 64 KiB DRAM page carries the value of a write clock at
its last write, so a cache of decoded weights can ask "has anything in [lo, hi) changed since?"
with `generation(lo, hi)`. Whoever writes the buffer behind the simulator's back (a host DMA)
must call `note_write`.
"""
from __future__ import annotations

import itertools
import mmap
import sys

import numpy as np

from .fault import Fault

PAGE_SHIFT = 16
_dram_ids = itertools.count(1)
MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def sparse_zeros(size: int) -> np.ndarray:
    """A zeroed uint8 buffer whose untouched pages cost nothing, however large (32 GiB DRAMs
    included): an anonymous mapping the kernel does not reserve swap for."""
    if size <= 1 << 30:
        return np.zeros(size, np.uint8)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE
    return np.frombuffer(mmap.mmap(-1, size, flags=flags), np.uint8)


class Dram:
    """Byte-addressed little-endian DRAM of `size` bytes."""

    def __init__(self, size: int, buf: np.ndarray | None = None):
        if buf is None:
            buf = sparse_zeros(size)
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise ValueError("DRAM buffer must be a 1-D uint8 array")
        if len(buf) < size:
            raise ValueError(f"DRAM buffer has {len(buf)} bytes, the target needs {size}")
        self.size = size
        self.bytes = buf[:size]
        self.words = self.bytes[: size & ~3].view(np.uint32)
        self.uid = next(_dram_ids)
        self.clock = 0
        self.gens = np.zeros(((size - 1) >> PAGE_SHIFT) + 1, np.int64)

    # -- checks -------------------------------------------------------------------------------
    def check(self, addr: int, nbytes: int, align: int, what: str) -> None:
        if addr % align:
            raise Fault("misaligned", f"{what}: DRAM address 0x{addr:x} is not a multiple of {align}")
        if addr < 0 or nbytes < 0 or addr + nbytes > self.size:
            raise Fault("out-of-range", f"{what}: DRAM bytes [0x{addr:x}, 0x{addr + nbytes:x}) "
                                        f"outside the slice's {self.size} bytes")

    # -- write generations --------------------------------------------------------------------
    def note_write(self, lo: int, hi: int) -> None:
        """Record that bytes [lo, hi) changed (simulator stores and host DMA alike)."""
        if hi > lo:
            self.clock += 1
            self.gens[lo >> PAGE_SHIFT: ((hi - 1) >> PAGE_SHIFT) + 1] = self.clock

    def generation(self, lo: int, hi: int) -> tuple[int, int]:
        """(DRAM identity, last write clock over [lo, hi)): equal values mean unchanged bytes."""
        if hi <= lo:
            return self.uid, 0
        return self.uid, int(self.gens[lo >> PAGE_SHIFT: ((hi - 1) >> PAGE_SHIFT) + 1].max())

    # -- access -------------------------------------------------------------------------------
    def read_words(self, addr: int, n: int, what: str) -> np.ndarray:
        self.check(addr, 4 * n, 4, what)
        return self.words[addr >> 2: (addr >> 2) + n].copy()

    def write_words(self, addr: int, values: np.ndarray, what: str) -> None:
        n = len(values)
        self.check(addr, 4 * n, 4, what)
        self.words[addr >> 2: (addr >> 2) + n] = values
        self.note_write(addr, addr + 4 * n)

    def word(self, addr: int, what: str) -> int:
        self.check(addr, 4, 4, what)
        return int(self.words[addr >> 2])

    def rows(self, addr: int, n: int, stride: int, width: int, what: str, align: int = 1) -> np.ndarray:
        """n rows of `width` bytes, `stride` bytes apart, as an (n, width) view (no copy)."""
        if n <= 0 or width <= 0:
            return np.zeros((max(n, 0), max(width, 0)), np.uint8)
        if stride % align:
            raise Fault("misaligned", f"{what}: row stride {stride} is not a multiple of {align}")
        self.check(addr, (n - 1) * stride + width, align, what)
        return np.lib.stride_tricks.as_strided(self.bytes[addr:], shape=(n, width), strides=(stride, 1),
                                               writeable=False)


class Tmem:
    """TMEM: TMEM_WORDS 32-bit words holding raw fp32 bit patterns."""

    INDEX_CACHE = 4096             # tile index arrays kept (programs reuse a few hundred shapes)

    def __init__(self, words: int):
        self.size = words
        self.t = np.zeros(words, np.uint32)
        self._index: dict[tuple[int, int, int, int], np.ndarray] = {}

    def check(self, addr: int, n: int, what: str) -> None:
        if addr < 0 or n < 0 or addr + n > self.size:
            raise Fault("out-of-range", f"{what}: TMEM words [{addr}, {addr + n}) outside 0..{self.size - 1}")

    def check_index(self, idx: np.ndarray, what: str) -> None:
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self.size):
            bad = int(idx.max()) if int(idx.max()) >= self.size else int(idx.min())
            raise Fault("out-of-range", f"{what}: TMEM word {bad} outside 0..{self.size - 1}")

    def read(self, addr: int, n: int, what: str) -> np.ndarray:
        self.check(addr, n, what)
        return self.t[addr: addr + n].copy()

    def write(self, addr: int, values: np.ndarray, what: str) -> None:
        self.check(addr, len(values), what)
        self.t[addr: addr + len(values)] = values

    def tile_index(self, base: int, rows: int, cols: int, rs: int, what: str) -> np.ndarray:
        """Word indices base + r*rs + c of a rows x cols tile, checked (read-only: shared between calls)."""
        if rows and cols:
            lo, hi = min(base, base + (rows - 1) * rs), max(base, base + (rows - 1) * rs) + cols - 1
            if lo < 0 or hi >= self.size:
                raise Fault("out-of-range", f"{what}: TMEM tile words [{lo}, {hi}] outside 0..{self.size - 1}")
        key = (base, rows, cols, rs)
        idx = self._index.get(key)
        if idx is None:
            if len(self._index) >= self.INDEX_CACHE:
                self._index.clear()
            idx = base + rs * np.arange(rows, dtype=np.int64)[:, None] + np.arange(cols, dtype=np.int64)[None, :]
            idx.flags.writeable = False
            self._index[key] = idx
        return idx

    def tile(self, base: int, rows: int, cols: int, rs: int, what: str) -> np.ndarray:
        """A rows x cols tile as a fresh uint32 array (strided read, contiguous result)."""
        self.tile_index(base, rows, cols, rs, what)
        if rows == 0 or cols == 0:
            return np.zeros((rows, cols), np.uint32)
        if rs == cols or rows == 1:
            return self.t[base:base + rows * cols].reshape(rows, cols).copy()
        view = np.lib.stride_tricks.as_strided(self.t[base:], shape=(rows, cols), strides=(4 * rs, 4))
        return view.copy()

    def put_tile(self, base: int, rs: int, values: np.ndarray, what: str) -> None:
        rows, cols = values.shape
        self.tile_index(base, rows, cols, rs, what)
        if rows == 0 or cols == 0:
            return
        if rs == cols or rows == 1:
            self.t[base:base + rows * cols].reshape(rows, cols)[...] = values
        elif rs > cols:
            view = np.lib.stride_tricks.as_strided(self.t[base:], shape=(rows, cols), strides=(4 * rs, 4))
            view[...] = values
        else:  # overlapping rows: row-major order decides which write lands last
            for r in range(rows):
                self.t[base + r * rs: base + r * rs + cols] = values[r]


class ActRam:
    """ACT RAM: act_rows x ACT_BLOCKS*D int8 with one fp32 scale per (row, block) and one 16-bit
    side word per (row, block) holding the QACT SUB sub-block offsets (formats.pack_suboffsets;
    0 when the block was written without SUB)."""

    def __init__(self, rows: int, blocks: int, d: int):
        self.rows, self.blocks, self.d = rows, blocks, d
        self.q = np.zeros((rows, blocks * d), np.int8)
        self.scale = np.zeros((rows, blocks), np.uint32)
        self.sub = np.zeros((rows, blocks), np.uint16)
