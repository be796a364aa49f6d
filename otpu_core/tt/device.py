"""The `BlackholeDevice` interface: what every tool may do to a Blackhole card, and nothing more.

A device is a tt-kmd file descriptor: typed ioctls (packed by `ioctl`), TLB windows mapped into
the process and aimed at (x, y, address) by CONFIGURE_TLB, and one BAR0 page with the PCIe
tile's own registers. Two subclasses implement the two primitives, `_ioctl` and `_map`: `kmd`
(the kernel driver) and `simdev` (the simulated chip). Tools never ask which one they hold.
"""
from __future__ import annotations

import ctypes as C
import errno
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

from ..errors import DeviceError
from . import consts, ioctl as I


class DeviceGone(OSError):
    """The driver disowned this descriptor or mapping (ENODEV after a reset; SIGBUS on hardware)."""

    def __init__(self, what: str):
        super().__init__(errno.ENODEV, what)


class NeedsPostReset(DeviceError):
    """The card was reset and nobody issued POST_RESET: tt-kmd refuses all but the info and reset
    ioctls (ENODEV) until someone does."""


class Window(Protocol):
    """A mapped TLB window or BAR page: 32-bit register accesses plus block copies."""

    size: int

    def read32(self, offset: int) -> int: ...

    def write32(self, offset: int, value: int) -> None: ...

    def read(self, offset: int, length: int) -> bytes: ...

    def write(self, offset: int, data: bytes) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class DeviceInfo:
    vendor_id: int
    device_id: int
    subsystem_vendor_id: int
    subsystem_id: int
    bdf: str
    max_dma_buf_size_log2: int


@dataclass(frozen=True)
class DriverInfo:
    api: int
    version: str


@dataclass(frozen=True)
class Tlb:
    id: int
    size: int
    offset_uc: int
    offset_wc: int


class BlackholeDevice(ABC):
    """One open descriptor of one Blackhole chip."""

    spec: str      # the --dev spec that opened it (tt:0, tt:sim:NAME)
    path: str      # /dev/tenstorrent/N, or the simulated chip's run directory

    # ---- the two primitives -------------------------------------------------------------
    @abstractmethod
    def _ioctl(self, request: int, buf: bytearray) -> None:
        """Issue one ioctl with a mutable buffer; raise OSError with the driver's errno."""

    @abstractmethod
    def _map(self, offset: int, size: int) -> Window:
        """mmap `size` bytes of the device at a driver-defined offset (BAR or TLB window)."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def reopen(self, exclusive: bool = False) -> "BlackholeDevice":
        """Open the same card again, found by its PCI address (minor numbers move across resets);
        `exclusive` opens it with O_EXCL, so no other descriptor can be open meanwhile."""

    @abstractmethod
    def open_another(self) -> "BlackholeDevice":
        """A second descriptor of the same card (for state the driver keeps per descriptor)."""

    @abstractmethod
    def host_facts(self) -> dict:
        """What the host knows without the chip: driver version, PCIe link, minor number."""

    @abstractmethod
    def pids(self) -> list[int]:
        """PIDs holding the device open (one entry per descriptor), as /proc/driver/tenstorrent shows."""

    @abstractmethod
    def arc_mutex_path(self):
        """Where tt-umd keeps this card's ARC message mutex (`umdlock`)."""

    @abstractmethod
    def reset_marker(self) -> bool | None:
        """Is the driver's reset marker still set (an ASIC reset was asked for and has not landed)?"""

    @abstractmethod
    def power_cycle_hint(self) -> str:
        """How a user powers this card off and on (the last rung of recovery)."""

    # ---- typed ioctls ---------------------------------------------------------------------
    def _call(self, request: int, struct: I._S) -> I._S:
        buf = struct.pack()
        self._ioctl(request, buf)
        return type(struct).unpack(buf)

    def device_info(self) -> DeviceInfo:
        s = I.GetDeviceInfo()
        s.in_.output_size_bytes = C.sizeof(I.GetDeviceInfoOut)
        o = self._call(I.GET_DEVICE_INFO, s).out
        return DeviceInfo(o.vendor_id, o.device_id, o.subsystem_vendor_id, o.subsystem_id,
                          I.bdf_text(o.pci_domain, o.bus_dev_fn), o.max_dma_buf_size_log2)

    def driver_info(self) -> DriverInfo:
        s = I.GetDriverInfo()
        s.in_.output_size_bytes = C.sizeof(I.GetDriverInfoOut)
        o = self._call(I.GET_DRIVER_INFO, s).out
        return DriverInfo(o.driver_version, f"{o.driver_version_major}.{o.driver_version_minor}.{o.driver_version_patch}")

    def query_mappings(self, count: int = 8) -> list[I.Mapping]:
        buf = I.query_mappings_buffer(count)
        self._ioctl(I.QUERY_MAPPINGS, buf)
        return [m for m in I.query_mappings_result(buf) if m.mapping_id]

    def allocate_tlb(self, size: int = consts.TLB_2M) -> Tlb:
        s = I.AllocateTlb()
        s.in_.size = size
        o = self._call(I.ALLOCATE_TLB, s).out
        return Tlb(o.id, size, o.mmap_offset_uc, o.mmap_offset_wc)

    def configure_tlb(self, tlb_id: int, addr: int, x: int, y: int, ordering: int = consts.ORDERING_STRICT,
                      mcast: tuple[int, int] | None = None, noc: int = 0) -> None:
        s = I.ConfigureTlb()
        s.in_.id = tlb_id
        c = s.in_.config
        c.addr, c.x_end, c.y_end, c.noc, c.ordering = addr, x, y, noc, ordering
        if mcast is not None:
            c.mcast, (c.x_start, c.y_start) = 1, mcast
        self._call(I.CONFIGURE_TLB, s)

    def free_tlb(self, tlb_id: int) -> None:
        s = I.FreeTlbIn()
        s.id = tlb_id
        self._call(I.FREE_TLB, s)

    def map_tlb(self, tlb: Tlb, write_combined: bool = False) -> Window:
        return self._map(tlb.offset_wc if write_combined else tlb.offset_uc, tlb.size)

    def map_bar0_page(self, bar_offset: int) -> Window:
        """One 4 KiB page of BAR0, uncached (the PCIe tile's own registers; no NoC involved)."""
        return self._map(consts.BAR0_MMAP_UC + bar_offset, 4096)

    def reset_device(self, flags: int) -> int:
        s = I.ResetDevice()
        s.in_.output_size_bytes, s.in_.flags = C.sizeof(I.ResetDeviceOut), flags
        return self._call(I.RESET_DEVICE, s).out.result

    def lock_ctl(self, flags: int, index: int) -> int:
        s = I.LockCtl()
        s.in_.output_size_bytes, s.in_.flags, s.in_.index = C.sizeof(I.LockCtlOut), flags, index
        return self._call(I.LOCK_CTL, s).out.value

    def set_power_state(self, power_flags: int, settings: tuple[int, ...] = ()) -> None:
        s = I.SetPowerState()
        s.argsz, s.power_flags = C.sizeof(I.SetPowerState), power_flags
        s.validity = 4 | (len(settings) << 4)       # four flags specified
        for i, v in enumerate(settings):
            s.power_settings[i] = v
        self._call(I.SET_POWER_STATE, s)

    def set_noc_cleanup(self, x: int, y: int, addr: int, data: int, enabled: bool = True, noc: int = 0) -> None:
        s = I.SetNocCleanup()
        s.argsz, s.enabled, s.x, s.y, s.noc, s.addr, s.data = C.sizeof(I.SetNocCleanup), int(enabled), x, y, noc, addr, data
        self._call(I.SET_NOC_CLEANUP, s)

    def __enter__(self) -> "BlackholeDevice": return self

    def __exit__(self, *exc) -> None: self.close()
