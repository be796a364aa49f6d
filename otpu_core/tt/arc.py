"""ARC over the NoC at tile (8,0): boot status, the telemetry table, and the message queue.

Telemetry: SCRATCH_RAM[13] points at the table {version, count, (tag, offset)*}, SCRATCH_RAM[12]
at the values; tag-to-offset pairs only change with a firmware update plus reset, so they are
read once per open. Messages use queue 2 (the tools' queue by convention): 8 words into the
request slot, bump the write pointer, interrupt ARC through ARC_MISC_CNTL, poll the response.
"""
from __future__ import annotations

import struct
import time

from ..errors import DeviceError
from . import consts as K
from .noc import Noc


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
        self.offsets = {e & 0xFFFF: e >> 16 for e in entries}
        self.span = max(self.offsets.values()) + 1 if self.offsets else 0

    def read(self) -> dict[int, int]:
        """Every published tag's current value (one block read)."""
        words = struct.unpack(f"<{self.span}I", self.noc.read(self.noc.tiles.arc, self.data, 4 * self.span))
        return {tag: words[off] for tag, off in self.offsets.items()}

    def named(self) -> dict[str, int]:
        values = self.read()
        return {K.TAG_NAMES.get(t, f"TAG_{t}"): v for t, v in sorted(values.items())}


class ArcQueue:
    """One ARC message queue (default: the tools' queue 2)."""

    def __init__(self, noc: Noc, index: int = K.TOOLS_QUEUE):
        arc = noc.tiles.arc
        self.noc, self.arc = noc, arc
        cb = noc.read32(arc, K.SCRATCH_RAM + 4 * K.SCR_MSGQ_CB)
        base, shape = struct.unpack("<2I", noc.read(arc, cb, 8))
        self.entries, count = shape & 0xFF, (shape >> 8) & 0xFF
        if index >= count:
            raise ArcError(f"ARC has {count} message queues; queue {index} does not exist")
        self.header = base + index * (32 + 2 * self.entries * 32)

    def send(self, code: int, *args: int, timeout: float = 1.0) -> list[int]:
        """Send one message; returns the 8 response words. Raises ArcError on timeout or error status."""
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
