"""The narrow interface between the host and a card: 32-bit BAR0 registers and DMA to card DRAM.

`Transport` holds every rule of the XDMA path (reference host.md section 2) once, so each
transport (`xdma.XdmaTransport` on the real device files, `sim.SimTransport` on the simulated
card) implements only four underscore methods: `_reg_read`, `_reg_write`, `_h2c`, `_c2h`
(one DMA call at an AXI address, no bigger than `DMA_CHUNK`), and may add `_reg_batch` to hand
a run of register accesses to the card in one go.

The rules, applied by `mem_write` / `mem_read`:
- at most `DMA_CHUNK` (8 MiB) per call;
- writes cover whole 64-byte beats only: a partial edge beat is read, merged on the host and
  written back alone (never the whole 128-byte chunk);
- host buffer placement: writes need (host address - card address) mod 64 = 0, reads need it
  mod 4096 in [32, 4064]; a buffer that does not hold goes through a placed staging buffer
  (reads under 64 KiB are latency-bound and never bounced);
- while a program runs (`in_run`), at most `RUN_H2C` (4 KiB) per host->card call;
- host->card and card->host never overlap: every call, bounce copy included, runs inside the
  card's DMA lock (thread lock + flock on `<run dir>/<dev>.dma`).
`OTPU_TRACE_BAR=1` prints every register access to stderr.
"""
from __future__ import annotations

import errno
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

import numpy as np

from ..card import regs
from ..card.regs import DMA_CHUNK, DMA_PLACE, RUN_H2C, read_placed, write_placed  # noqa: F401  (part of this API)
from ..card.runstate import DmaLock, dma_lock
from ..errors import DeviceError, UsageError

READ_BOUNCE_MIN = 64 << 10   # smaller reads are latency-bound: never bounced
PREFAULT_MIN = 1 << 20       # placed buffers from this size on are touched when allocated
POLL_SPIN = 100e-6           # back-to-back reads first
POLL_MIN_SLEEP = 20e-6
POLL_MAX_SLEEP = 1e-3
POLL_EARLY = 1.5e-3          # with an expected time: wake this much (+3%) before it


def placed(n: int, card: int) -> np.ndarray:
    """A uint8 buffer of n bytes whose address is card + DMA_PLACE modulo 4096.

    Allocated by numpy (which asks for transparent huge pages on large arrays) and touched
    here: a page first touched inside the DMA syscall's copy costs several times more."""
    raw = np.empty(n + 4096, np.uint8)
    if n >= PREFAULT_MIN:
        raw[::4096] = 0
    start = (card + DMA_PLACE - buffer_address(raw)) % 4096
    return raw[start:start + n]


def buffer_address(buf: np.ndarray) -> int: return buf.__array_interface__["data"][0]


def as_bytes(data) -> np.ndarray:
    """Any buffer as a flat uint8 array without copying."""
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8) if data.flags.c_contiguous else np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    return np.frombuffer(data, dtype=np.uint8)


class Transport:
    """Registers and DMA of one card. Subclasses implement `_reg_read`, `_reg_write`, `_h2c`, `_c2h`."""

    kind = "abstract"
    devname: str | None = None      # names the card's lock files; None = no locking
    ecc = False                     # DRAM needs a scrub before first reads
    keeps_state = True              # registers keep their values between calls
    threaded = True                 # large transfers may run on a worker thread
    physical_timing = True          # DMA rates and the core clock run in wall-clock time, so measuring them means something

    def __init__(self, dev: str, channel_bytes: int, channels: int = regs.CHANNELS, lock_dir=None):
        self.dev = dev
        self.channel_bytes = channel_bytes
        self.channels = channels
        self.in_run = False
        self.trace_bar = os.environ.get("OTPU_TRACE_BAR") == "1"
        self.dma: DmaLock = dma_lock(self.devname, lock_dir)
        self._staging: np.ndarray | None = None
        self._read_stages: tuple[np.ndarray, np.ndarray] | None = None
        self.stats = {"h2c_calls": 0, "c2h_calls": 0, "bounced": 0}
        self._wedged = False

    # -- subclass interface ----------------------------------------------------------------------
    def _reg_read(self, off: int) -> int: raise NotImplementedError(f"{type(self).__name__} cannot read registers")

    def _reg_write(self, off: int, value: int) -> None: raise NotImplementedError(f"{type(self).__name__} cannot write registers")

    def _h2c(self, axi: int, buf: memoryview) -> None: raise NotImplementedError(f"{type(self).__name__} has no host->card DMA")

    def _c2h(self, axi: int, buf: memoryview) -> None: raise NotImplementedError(f"{type(self).__name__} has no card->host DMA")

    def _reg_batch(self, ops: list[tuple[int, int | None]]) -> list[int]:
        out = []
        for off, value in ops:
            if value is None:
                out.append(self._reg_read(off))
            else:
                self._reg_write(off, value)
        return out

    def _close(self) -> None: pass

    def last_error(self) -> str:
        """What the card said about its last failed run, where it can say more than STATUS ("" if not)."""
        return ""

    def link(self) -> dict:
        """PCIe facts: vendor, device, speed, width (None where unknown)."""
        return {"vendor": None, "device": None, "speed": None, "width": None}

    def injected_faults(self) -> tuple[str, ...]:
        """Faults injected into the card, one spec token each (none on a real card)."""
        return ()

    def fault_note(self) -> str:
        """One sentence naming the injected faults and how to clear them, for failure hints ("" if none)."""
        return ""

    def card_target(self) -> str | None:
        """The name of the target the card itself says it was built as, when it can say more than
        its CFG_HASH (several targets share one arch hash); None on a card that cannot."""
        return None

    def engine_health(self) -> tuple[str, ...]:
        """What is wrong with the card's DMA engine now, one sentence each naming what clears it
        (empty: nothing known to be wrong). The base class knows what this process saw: a
        host->card call that timed out means the write path is wedged."""
        if self._wedged:
            return ("the host->card write path is wedged (a write timed out): reload the bitstream",)
        return ()

    # -- registers -------------------------------------------------------------------------------
    def reg_read(self, off: int) -> int:
        self._check_reg(off)
        v = self._reg_read(off)
        if self.trace_bar:
            print(f"otpu-bar: R 0x{off:05x} -> 0x{v:08x}", file=sys.stderr)
        return v

    def reg_write(self, off: int, value: int) -> None:
        self._check_reg(off)
        if not 0 <= value <= 0xFFFFFFFF:
            raise UsageError(f"register value {value} does not fit 32 bits")
        if self.trace_bar:
            print(f"otpu-bar: W 0x{off:05x} <- 0x{value:08x}", file=sys.stderr)
        self._reg_write(off, value)

    def reg_read_many(self, offs: Iterable[int]) -> list[int]: return [self.reg_read(o) for o in offs]

    def reg_batch(self, ops: Iterable[tuple[int, int | None]]) -> list[int]:
        """Register accesses in order, one 32-bit load or store each: `(offset, value)` writes,
        `(offset, None)` reads; returns what the reads gave. A real card makes them one after
        another; the simulated card takes a run inside one peripheral in a single step."""
        ops = list(ops)
        for off, value in ops:
            if off & 3 or not 0 <= off < regs.HOST_MAP_BYTES:
                self._check_reg(off)
            if value is not None and not 0 <= value <= 0xFFFFFFFF:
                raise UsageError(f"register value {value} does not fit 32 bits")
        out = self._reg_batch(ops)
        if self.trace_bar:
            values = iter(out)
            for off, value in ops:
                print(f"otpu-bar: R 0x{off:05x} -> 0x{next(values):08x}" if value is None
                      else f"otpu-bar: W 0x{off:05x} <- 0x{value:08x}", file=sys.stderr)
        return out

    @staticmethod
    def _check_reg(off: int) -> None:
        if off % 4 or not 0 <= off < regs.HOST_MAP_BYTES:
            raise UsageError(f"BAR0 offset 0x{off:x} is not an aligned word inside the mapped 0x{regs.HOST_MAP_BYTES:x} bytes")

    def poll(self, off: int, mask: int, val: int, timeout: float = 600.0, expect: float = 0.0) -> int:
        """Wait until (reg & mask) == val; returns the register value.

        Without `expect`: back-to-back reads for POLL_SPIN, then sleeps of elapsed/32 (at most
        POLL_MAX_SLEEP). With `expect` (seconds the wait should take): sleep in halving steps
        until POLL_EARLY + 3% before it, spin until POLL_SPIN after it, then sleep lateness/32
        (POLL_MIN_SLEEP..POLL_MAX_SLEEP)."""
        t0 = time.monotonic()
        if expect > 0:
            wake = t0 + expect * 0.97 - POLL_EARLY
            while (left := wake - time.monotonic()) > 1e-3:
                v = self.reg_read(off)
                if v & mask == val:
                    return v
                time.sleep(left / 2)
        spin_until = t0 + expect + POLL_SPIN
        while True:
            v = self.reg_read(off)
            if v & mask == val:
                return v
            now = time.monotonic()
            if now - t0 > timeout:
                raise DeviceError(f"timed out after {timeout:g}s waiting for register 0x{off:03x} & 0x{mask:x} == 0x{val:x} "
                                  f"(it reads 0x{v:08x})")
            if now > spin_until:
                late = now - t0 - expect
                time.sleep(min(POLL_MAX_SLEEP, max(POLL_MIN_SLEEP if expect else 0.0, late / 32)))

    # -- DMA ------------------------------------------------------------------------------------
    def _check_mem(self, ch: int, off: int, n: int) -> None:
        if not 0 <= ch < self.channels:
            raise UsageError(f"DRAM channel {ch} does not exist (the card has {self.channels})")
        if off < 0 or n < 0 or off + n > self.channel_bytes:
            raise UsageError(f"channel {ch} bytes [0x{off:x}, 0x{off + n:x}) are outside its {self.channel_bytes} bytes")

    def mem_write(self, ch: int, off: int, data) -> None:
        """Write bytes at a channel offset, whole beats only, obeying every DMA rule."""
        src = as_bytes(data)
        n = src.size
        self._check_mem(ch, off, n)
        if n == 0:
            return
        beat = regs.BEAT
        end = off + n
        head_stop = min(end, -(-off // beat) * beat)
        tail_start = max(head_stop, end // beat * beat)
        if off % beat:
            self._merge_beat(ch, off, src[:head_stop - off])
        if tail_start > head_stop:
            self._write_run(ch, head_stop, src[head_stop - off:tail_start - off])
        if end > tail_start and end % beat:
            self._merge_beat(ch, tail_start, src[tail_start - off:])

    def _merge_beat(self, ch: int, off: int, part: np.ndarray) -> None:
        """Read the beat holding [off, off+len(part)), merge on the host, write the beat back."""
        base = off // regs.BEAT * regs.BEAT
        axi = regs.axi_address(ch, base)
        with self.dma:
            buf = placed(regs.BEAT, axi)
            self._dma_read_call(axi, buf)
            buf[off - base:off - base + part.size] = part
            self._dma_write_call(axi, buf)

    def _write_run(self, ch: int, off: int, src: np.ndarray) -> None:
        step = RUN_H2C if self.in_run else DMA_CHUNK
        axi0 = regs.axi_address(ch, off)
        for pos in range(0, src.size, step):
            piece = src[pos:pos + step]
            axi = axi0 + pos
            with self.dma:
                if not write_placed(buffer_address(piece), axi):
                    piece = self._stage(piece, axi)
                self._dma_write_call(axi, piece)

    def _stage(self, piece: np.ndarray, axi: int, copy: bool = True) -> np.ndarray:
        """The staging buffer, placed for `axi`, sized like `piece` (holding a copy of it for a write)."""
        if self._staging is None:
            self._staging = placed(DMA_CHUNK + 8192, 0)
        start = (axi + DMA_PLACE - buffer_address(self._staging)) % 4096
        out = self._staging[start:start + piece.size]
        if copy:
            out[:] = piece
        self.stats["bounced"] += 1
        return out

    def mem_read(self, ch: int, off: int, n: int, out: np.ndarray | None = None) -> np.ndarray:
        """Read bytes at a channel offset into `out` (or a new placed buffer), obeying every DMA rule."""
        self._check_mem(ch, off, n)
        axi0 = regs.axi_address(ch, off)
        if out is None:
            out = placed(n, axi0) if n >= READ_BOUNCE_MIN else np.empty(n, np.uint8)
        dst = as_bytes(out)
        if dst.size < n:
            raise UsageError(f"read buffer holds {dst.size} bytes, {n} asked")
        if n > DMA_CHUNK and not read_placed(buffer_address(dst), axi0):
            self._bounced_read(axi0, dst[:n])
            return dst[:n]
        for pos in range(0, n, DMA_CHUNK):
            piece = dst[pos:pos + DMA_CHUNK]
            axi = axi0 + pos
            with self.dma:
                if piece.size >= READ_BOUNCE_MIN and not read_placed(buffer_address(piece), axi):
                    stage = self._stage(piece, axi, copy=False)
                    self._dma_read_call(axi, stage)
                    piece[:] = stage
                else:
                    self._dma_read_call(axi, piece)
        return dst[:n]

    def _bounced_read(self, axi0: int, dst: np.ndarray) -> None:
        """A large read into a badly placed buffer: DMA chunk i into one staging buffer while a
        worker copies chunk i-1 out of the other (the copy touches no device, so it runs outside
        the DMA lock)."""
        if self._read_stages is None:
            self._read_stages = (placed(DMA_CHUNK + 8192, 0), placed(DMA_CHUNK + 8192, 0))
        with ThreadPoolExecutor(1, thread_name_prefix="otpu-bounce") as pool:
            pending = None
            for i, pos in enumerate(range(0, dst.size, DMA_CHUNK)):
                piece = dst[pos:pos + DMA_CHUNK]
                axi = axi0 + pos
                buf = self._read_stages[i % 2]
                start = (axi + DMA_PLACE - buffer_address(buf)) % 4096
                stage = buf[start:start + piece.size]
                with self.dma:
                    self._dma_read_call(axi, stage)
                self.stats["bounced"] += 1
                if pending is not None:
                    pending.result()
                pending = pool.submit(np.copyto, piece, stage)
            if pending is not None:
                pending.result()

    def _dma_write_call(self, axi: int, buf: np.ndarray) -> None: self._dma_call("h2c", axi, buf)

    def _dma_read_call(self, axi: int, buf: np.ndarray) -> None: self._dma_call("c2h", axi, buf)

    def _dma_call(self, direction: str, axi: int, buf: np.ndarray) -> None:
        """One DMA call; an OSError becomes a DeviceError saying what failed and how to recover."""
        self.stats[f"{direction}_calls"] += 1
        try:
            (self._h2c if direction == "h2c" else self._c2h)(axi, memoryview(buf))
        except OSError as e:
            raise self._dma_error("host->card" if direction == "h2c" else "card->host", axi, buf.size, e) from None

    def _dma_error(self, what: str, axi: int, n: int, e: OSError) -> DeviceError:
        ch, off = regs.axi_channel(axi)
        note = self.fault_note()
        if e.errno == errno.ETIMEDOUT:
            self._wedged = True
            return DeviceError(f"{self.dev}: {what} DMA of {n} bytes at channel {ch} offset 0x{off:x} timed out "
                               "(the card's write path is wedged)",
                               hint="reload the bitstream (simulated card: `otpu sim reset`); reads and registers still work"
                               + (f". {note}" if note else ""))
        return DeviceError(f"{self.dev}: {what} DMA of {n} bytes at channel {ch} offset 0x{off:x} failed: {e.strerror or e}",
                           hint=note or None)

    # -- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        self._close()
        self._staging = self._read_stages = None

    def __enter__(self) -> "Transport": return self

    def __exit__(self, *exc) -> None: self.close()
