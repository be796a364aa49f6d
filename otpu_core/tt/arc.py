"""ARC over the NoC at tile (8,0): boot status, the telemetry table, and the message queue.

Telemetry: SCRATCH_RAM[13] points at the table {version, count, (tag, offset)*}, SCRATCH_RAM[12]
at the values; tag-to-offset pairs only change with a firmware update plus reset, so they are
read once per open. The firmware's table has TAG_COUNT slots of which some are empty (tag 0;
tt-zephyr-platforms bh_arc/telemetry.c), and those are skipped.

Messages go on the application queue (3) under tt-umd's ARC message mutex, exactly as tt-umd
sends them (device/arc/blackhole_arc_messenger.cpp), so tt-umd users and this tool take turns;
queue 2 belongs to luwen-based tools (tt-flash, tt-smi --use_luwen; luwen
crates/luwen-api/src/chip/blackhole.rs), which take no lock. A message is 8 words into the
request slot, the write pointer bumped, ARC interrupted through ARC_MISC_CNTL, the response
polled. Response word 0 carries the status: 0 ok, the handler's exit code when it refused
(TOGGLE_SINGLE_TENSIX_RESET answers 1 for a coordinate that is not a Tensix), 0xFF unknown.
"""
from __future__ import annotations

import struct
import time

from ..errors import DeviceError
from . import consts as K
from .noc import Noc
from .umdlock import RobustMutex


class ArcError(DeviceError):
    """ARC did not answer, or answered with an error status."""


def boot_status(noc: Noc) -> int:
    return noc.read32(noc.tiles.arc, K.SCRATCH_RAM + 4 * K.SCR_BOOT_STATUS0)


def wait_ready(noc: Noc, timeout: float = 10.0) -> None:
    """Wait until ARC's message queue is ready and hardware init is done (BOOT_STATUS0 & 7 == 5)."""
    deadline = time.monotonic() + timeout
    while True:
        status = boot_status(noc)
        if status & 7 == K.BOOT_READY:
            return
        if time.monotonic() >= deadline:
            raise ArcError(f"ARC firmware not ready after {timeout:g} s (BOOT_STATUS0 = {status:#x})",
                           hint="the card may need an ASIC reset: `otpu-tt core recover --all --yes`")
        time.sleep(0.01)


class Telemetry:
    """The ARC telemetry table of one card, with its tag offsets cached."""

    def __init__(self, noc: Noc):
        arc = noc.tiles.arc
        self.noc = noc
        table = noc.read32(arc, K.SCRATCH_RAM + 4 * K.SCR_TELEM_TABLE)
        self.data = noc.read32(arc, K.SCRATCH_RAM + 4 * K.SCR_TELEM_DATA)
        if not table or not self.data:
            raise ArcError("ARC has not published its telemetry table yet", hint="wait a second and retry")
        version, count = struct.unpack("<2I", noc.read(arc, table, 8))
        if version >> 16 > 1:
            raise ArcError(f"telemetry table version {version:#x} is newer than this tool understands (major > 1)")
        entries = struct.unpack(f"<{count}I", noc.read(arc, table + 8, 4 * count))
        self.version = version
        self.offsets = {e & 0xFFFF: e >> 16 for e in entries if e & 0xFFFF}     # tag 0: an empty slot
        self.span = max(self.offsets.values()) + 1 if self.offsets else 0

    def read(self) -> dict[int, int]:
        """Every published tag's current value (one block read)."""
        words = struct.unpack(f"<{self.span}I", self.noc.read(self.noc.tiles.arc, self.data, 4 * self.span))
        return {tag: words[off] for tag, off in self.offsets.items()}

    def named(self) -> dict[str, int]:
        values = self.read()
        return {K.TAG_NAMES.get(t, f"TAG_{t}"): v for t, v in sorted(values.items())}


class ArcQueue:
    """One ARC message queue (default: the application queue 3), used under `mutex` when given."""

    def __init__(self, noc: Noc, index: int = K.APP_QUEUE, mutex: RobustMutex | None = None):
        arc = noc.tiles.arc
        self.noc, self.arc, self.index, self.mutex = noc, arc, index, mutex
        cb = noc.read32(arc, K.SCRATCH_RAM + 4 * K.SCR_MSGQ_CB)
        base, shape = struct.unpack("<2I", noc.read(arc, cb, 8))
        self.entries, count = shape & 0xFF, (shape >> 8) & 0xFF
        if index >= count:
            raise ArcError(f"ARC has {count} message queues; queue {index} does not exist")
        self.header = base + index * (32 + 2 * self.entries * 32)

    def send(self, code: int, *args: int, timeout: float = 1.0) -> list[int]:
        """Send one message; returns the 8 response words (word 0 & 0xFF is the status, which a
        handler may set below 240 to refuse). Raises ArcError on timeout, 0xFF or a status >= 240."""
        if self.mutex is None:
            return self._send(code, args, timeout)
        self.mutex.acquire(timeout=max(10.0, timeout))
        try:
            return self._send(code, args, timeout)
        finally:
            self.mutex.release()

    def _send(self, code: int, args: tuple[int, ...], timeout: float) -> list[int]:
        noc, arc, h, n = self.noc, self.arc, self.header, self.entries
        deadline = time.monotonic() + timeout
        while True:
            wptr, rptr = noc.read32(arc, h), noc.read32(arc, h + 0x10)
            if (wptr - rptr) % (2 * n) != n:
                break
            if time.monotonic() >= deadline:
                raise ArcError(f"ARC message queue full (message {code:#x})")
            time.sleep(0.001)
        words = [code & 0xFF, *args][:8]
        words += [0] * (8 - len(words))
        noc.write(arc, h + 32 + (wptr % n) * 32, struct.pack("<8I", *words))
        noc.write32(arc, h, (wptr + 1) % (2 * n))
        noc.write32(arc, K.ARC_MISC_CNTL, K.ARC_IRQ0)
        resp_rptr = noc.read32(arc, h + 4)
        while noc.read32(arc, h + 0x14) == resp_rptr:
            if time.monotonic() >= deadline:
                raise ArcError(f"ARC did not answer message {code:#x} within {timeout:g} s",
                               hint="ARC or the NoC may be hung")
            time.sleep(0.0005)
        slot = h + 32 + n * 32 + (resp_rptr % n) * 32
        resp = list(struct.unpack("<8I", noc.read(arc, slot, 32)))
        noc.write32(arc, h + 4, (resp_rptr + 1) % (2 * n))
        status = resp[0] & 0xFF
        if status == K.MSG_STATUS_UNKNOWN:
            raise ArcError(f"ARC firmware does not know message {code:#x}", hint="the card's firmware bundle is too old for it")
        if status >= 240:
            raise ArcError(f"ARC message {code:#x} failed with status {status:#x}")
        return resp
