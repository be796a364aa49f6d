"""The simulated card's DRAM: both channels in one sparse file, mapped with np.memmap.

The file holds the logical address space the accelerator sees (4 GiB on ypcb-00338), so the
golden simulator adopts `mem` as its DRAM without a copy. The host's DMA sees two channels;
`write_channel`/`read_channel` translate channel byte ranges to logical beats with the
interleave and CHASH of `regs`, vectorised. The file is sparse: a 4 GiB card costs only the
pages that were written, and `power_off` punches everything out again.

`gens` is a per-64 KiB-page write generation shared by every process on the card (a second
small memmap): host DMA bumps it, so an engine in another process can tell which of its cached
decoded weights went stale.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from . import regs

PAGE_SHIFT = 16


class Dram:
    """Two DRAM channels of `channel_bytes` each, stored as one logical sparse file."""

    def __init__(self, path: Path, channel_bytes: int, chash: bool, channels: int = regs.CHANNELS):
        self.path = Path(path)
        self.channel_bytes = channel_bytes
        self.channels = channels
        self.chash = chash
        self.size = channel_bytes * channels
        self.mem = _sparse_memmap(self.path, self.size, np.uint8)
        self.beats = self.mem.reshape(-1, regs.BEAT)
        self.gens = _sparse_memmap(self.path.with_suffix(".gens"), ((self.size - 1) >> PAGE_SHIFT) + 1, np.int64)

    # -- channel view (the host DMA's) -----------------------------------------------------------
    def logical_beats(self, ch: int, first: int, stop: int) -> np.ndarray:
        """Logical beat index of channel beats [first, stop)."""
        return regs.logical_beats(ch, first, stop, self.chash)

    def _check(self, ch: int, offset: int, n: int) -> None:
        if not 0 <= ch < self.channels or offset < 0 or offset + n > self.channel_bytes:
            raise ValueError(f"channel {ch} bytes [0x{offset:x}, 0x{offset + n:x}) outside its {self.channel_bytes} bytes")

    def write_channel(self, ch: int, offset: int, data) -> tuple[int, int]:
        """Store bytes at a channel offset (any alignment: partial edge beats are merged).
        Returns the logical byte range the written beats span; the caller bumps its page
        generations (`touch`) under its own lock, after the data is in place."""
        src = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8).reshape(-1)
        n = src.size
        self._check(ch, offset, n)
        if n == 0:
            return 0, 0
        first, stop = offset // regs.BEAT, -(-(offset + n) // regs.BEAT)
        idx = self.logical_beats(ch, first, stop)
        lead = offset - first * regs.BEAT
        if lead or (offset + n) % regs.BEAT:
            block = self.beats[idx]
            block.reshape(-1)[lead:lead + n] = src
        else:
            block = src.reshape(-1, regs.BEAT)
        self.beats[idx] = block
        return int(idx.min()) * regs.BEAT, (int(idx.max()) + 1) * regs.BEAT

    def read_channel(self, ch: int, offset: int, n: int, out: np.ndarray | None = None) -> np.ndarray:
        self._check(ch, offset, n)
        res = out.view(np.uint8).reshape(-1)[:n] if out is not None else np.empty(n, np.uint8)
        if n == 0:
            return res
        first, stop = offset // regs.BEAT, -(-(offset + n) // regs.BEAT)
        lead = offset - first * regs.BEAT
        block = self.beats[self.logical_beats(ch, first, stop)]
        res[:] = block.reshape(-1)[lead:lead + n]
        return res

    # -- bookkeeping -----------------------------------------------------------------------------
    def touch(self, lo: int, hi: int) -> None:
        """Bump the write generation of the pages covering logical bytes [lo, hi) (not atomic
        between processes: hold the card's lock)."""
        if hi > lo:
            self.gens[lo >> PAGE_SHIFT:((hi - 1) >> PAGE_SHIFT) + 1] += 1

    def power_off(self) -> None:
        """Forget every byte (DRAM loses its contents): the file becomes one hole again."""
        for arr in (self.mem, self.gens):
            arr.flush()
        _punch(self.path, self.size)
        self.gens[:] = 0

    def close(self) -> None:
        for name in ("beats", "mem", "gens"):
            arr = getattr(self, name, None)
            if arr is not None:
                mm = getattr(arr, "_mmap", None)
                setattr(self, name, None)
                del arr
                if mm is not None:
                    try:
                        mm.close()
                    except BufferError:
                        pass     # a view is still alive somewhere (the engine); the map goes with it


def beat_channels(beats: np.ndarray, chash: bool) -> np.ndarray:
    """The channel of each logical beat (the interleave, with the CHASH swap)."""
    ch = beats & 1
    return ch ^ regs.chunk_parity(beats >> 1) if chash else ch


def channel_bytes(logical: np.ndarray, chash: bool) -> tuple[np.ndarray, np.ndarray]:
    """(channel, channel byte address) of logical byte addresses."""
    beats = logical >> 6
    return beat_channels(beats, chash), (beats >> 1) * regs.BEAT + (logical & (regs.BEAT - 1))


def logical_bytes(ch: int, pos: np.ndarray, chash: bool) -> np.ndarray:
    """Logical byte addresses of channel `ch`'s byte addresses (channel beat c is in chunk c)."""
    chunk = pos >> 6
    return (2 * chunk + beat_channels(2 * chunk + ch, chash)) * regs.BEAT + (pos & (regs.BEAT - 1))


def _sparse_memmap(path: Path, count: int, dtype) -> np.memmap:
    nbytes = count * np.dtype(dtype).itemsize
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        if os.fstat(fd).st_size != nbytes:
            os.ftruncate(fd, nbytes)     # grows as a hole: nothing is allocated until written
    finally:
        os.close(fd)
    return np.memmap(path, dtype=dtype, mode="r+", shape=(count,))


def _punch(path: Path, size: int) -> None:
    """Deallocate the whole file in place (other processes keep valid maps: no SIGBUS window)."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        if _LIBC.fallocate(fd, _PUNCH_HOLE | _KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(size)) != 0:
            raise OSError(ctypes.get_errno(), f"cannot punch a hole in {path}")
    finally:
        os.close(fd)


_LIBC = ctypes.CDLL(None, use_errno=True)
_KEEP_SIZE, _PUNCH_HOLE = 0x01, 0x02      # <linux/falloc.h>
