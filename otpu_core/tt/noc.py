"""NoC reads and writes through 2 MiB TLB windows aimed at (x, y, address), with the guards.

Every access names a `Tile` from the card's `TileMap` (so its coordinates came from telemetry)
and an address that is valid for that kind of tile: L1 or the debug and NIU registers of a
Tensix (never the RISC private RAM, which can break Blackhole when read over the NoC), CSM and
the reset unit of ARC, the addressable 4 GiB - 16 MiB of a DRAM bank. Anything else is refused with a UsageError
before it is issued, because a wrong endpoint does not fail: it hangs the NoC.

Windows are reused: a few are allocated once, the one already aimed at the right 2 MiB is
used as is, otherwise the least recently used is re-aimed. Registers go through 32-bit
accesses; a read of 0xFFFFFFFF runs tt-umd's hang detection (the PCIe tile's node id through the
BAR, then over the NoC at the PCIe tile's NOC0 coordinates, which answer with translation on or
off) and raises `LinkLost` or `NocHung` when it finds one.
"""
from __future__ import annotations

from ..errors import DeviceError, UsageError
from . import consts as K
from .coords import ARC, DRAM, PCIE, TENSIX, Tile, TileMap
from .device import BlackholeDevice

MASK = 0xFFFFFFFF
WINDOW = K.TLB_2M


class NocHung(DeviceError):
    """The NoC stopped answering: every access fails until an ASIC reset."""


class LinkLost(DeviceError):
    """The PCIe link or the device itself is gone."""


def check_address(tile: Tile, addr: int, length: int) -> None:
    """Refuse an address that is not valid for the kind of tile (before anything is issued)."""
    end = addr + length
    if tile.kind == TENSIX and 0 <= addr and 0 < length and end <= K.L1_BYTES:
        return                                   # the hot path: L1
    where = f"{tile.kind} {tile.x},{tile.y}"
    if addr < 0 or length <= 0:
        raise UsageError(f"bad NoC access of {length} bytes at {addr:#x} on {where}")
    if tile.kind == TENSIX:
        for lo, hi in K.PRIVATE_RAM:
            if addr < hi and end > lo:
                raise UsageError(f"refusing {where} address {addr:#x}: RISC private memory; reading it over the "
                                 "NoC can break a Blackhole and hang the host")
        for lo, hi in (K.DEBUG_REGS, K.NIU_REGS):
            if lo <= addr and end <= hi:
                if length != 4 or addr & 3:
                    raise UsageError(f"{where} register {addr:#x}: registers take single aligned 32-bit accesses")
                return
        raise UsageError(f"refusing {where} address {addr:#x}: not L1 (< {K.L1_BYTES:#x}) nor a known register block")
    if tile.kind == ARC:
        if K.ARC_CSM[0] <= addr and end <= K.ARC_CSM[1]:
            return
        if (K.ARC_APB[0] <= addr and end <= K.ARC_APB[1]) or (addr == K.MSI_FIFO and length == 4):
            if length != 4 or addr & 3:
                raise UsageError(f"ARC register {addr:#x}: registers take single aligned 32-bit accesses")
            return
        raise UsageError(f"refusing ARC address {addr:#x}: only CSM, the reset unit and the MSI FIFO are addressed")
    if tile.kind == DRAM:
        if end <= K.DRAM_BANK_ADDRESSABLE:
            return
        raise UsageError(f"refusing DRAM bank {tile.index} access of {length} bytes at {addr:#x}: a Blackhole bank "
                         f"is addressable up to {K.DRAM_BANK_ADDRESSABLE:#x} (4 GiB less the top 16 MiB, which "
                         "silently drop writes)")
    if tile.kind == PCIE:
        if K.PCIE_NIU_NOC_ADDR <= addr and end <= K.PCIE_NIU_NOC_ADDR + 0x1000 and length == 4:
            return
        raise UsageError(f"refusing PCIe tile address {addr:#x}")
    raise UsageError(f"unknown tile kind {tile.kind}")


class Noc:
    """Guarded NoC access to one open device."""

    def __init__(self, dev: BlackholeDevice, tiles: TileMap, windows: int = 4):
        self.dev, self.tiles = dev, tiles
        self._bar = dev.map_bar0_page(K.BAR0_NIU_PAGE)
        self._slots: list[list] = []            # [tlb, window, (x, y, base)] most recent first
        for _ in range(windows):
            tlb = dev.allocate_tlb(WINDOW)
            self._slots.append([tlb, dev.map_tlb(tlb), None])

    def close(self) -> None:
        for tlb, win, _ in self._slots:
            try:
                win.close()
                self.dev.free_tlb(tlb.id)
            except OSError:
                pass                             # the descriptor may already be disowned by a reset
        self._slots = []
        self._bar.close()

    # ---- window aiming -----------------------------------------------------------------------
    def _aim(self, tile: Tile, addr: int):
        base = addr & ~(WINDOW - 1)
        key = (tile.x, tile.y, base)
        slots = self._slots
        first = slots[0]
        if first[2] == key:
            return first[1], addr - base
        for i, slot in enumerate(slots):
            if slot[2] == key:
                slots.insert(0, slots.pop(i))
                return slot[1], addr - base
        if not self.tiles.owns(tile) or self.tiles.tile(tile.kind, tile.x, tile.y) != tile:
            raise UsageError(f"tile {tile} did not come from this card's telemetry", hint="get tiles from TileMap.tile()")
        slot = slots.pop()
        slot[2] = None
        self.dev.configure_tlb(slot[0].id, base, tile.x, tile.y)
        slot[2] = key
        slots.insert(0, slot)
        return slot[1], addr - base

    # ---- accesses ----------------------------------------------------------------------------
    def read32(self, tile: Tile, addr: int) -> int:
        if addr & 3:
            raise UsageError(f"unaligned 32-bit read at {addr:#x}")
        check_address(tile, addr, 4)
        win, off = self._aim(tile, addr)
        value = win.read32(off)
        if value == MASK:
            self.detect_hang()
        return value

    def write32(self, tile: Tile, addr: int, value: int) -> None:
        if addr & 3:
            raise UsageError(f"unaligned 32-bit write at {addr:#x}")
        check_address(tile, addr, 4)
        win, off = self._aim(tile, addr)
        win.write32(off, value)

    def read(self, tile: Tile, addr: int, length: int) -> bytes:
        check_address(tile, addr, length)
        if (addr & (WINDOW - 1)) + length <= WINDOW:
            win, off = self._aim(tile, addr)
            data = win.read(off, length)
        else:
            data = b"".join(self._aim(tile, a)[0].read(a & (WINDOW - 1), n) for a, n in _split(addr, length))
        if data[:4] == b"\xff\xff\xff\xff" and data.count(0xFF) == len(data):
            self.detect_hang()
        return data

    def write(self, tile: Tile, addr: int, data: bytes) -> None:
        check_address(tile, addr, len(data))
        if (addr & (WINDOW - 1)) + len(data) <= WINDOW:
            win, off = self._aim(tile, addr)
            win.write(off, data)
            return
        view = memoryview(data)
        pos = 0
        for a, n in _split(addr, len(data)):
            win, off = self._aim(tile, a)
            win.write(off, view[pos:pos + n])
            pos += n

    def detect_hang(self) -> None:
        """After an all-ones read: is the link gone, is the NoC hung, or was the value real?"""
        if self._bar.read32(K.NOC_NODE_ID) == MASK:
            raise LinkLost("the PCIe link to the card is gone (BAR reads return all ones)",
                           hint=f"`otpu-tt core recover --all --yes --dev {self.dev.spec}` tries a PCIe link reset and an "
                                "ASIC reset (rung 6); if the link stays lost, the card needs its power cycled")
        win, off = self._aim(self.tiles.pcie_noc0, K.PCIE_NIU_NOC_ADDR + K.NOC_NODE_ID)
        if win.read32(off) == MASK:
            raise NocHung("the NoC is hung: the PCIe tile does not answer over the NoC",
                          hint=f"`otpu-tt core recover --all --yes --dev {self.dev.spec}` (rung 5, an ASIC reset, "
                               "does not need the NoC)")


def _split(addr: int, length: int):
    """(address, length) pieces that each stay inside one 2 MiB window."""
    while length:
        n = min(length, WINDOW - (addr & (WINDOW - 1)))
        yield addr, n
        addr, length = addr + n, length - n
