"""The real device: `/dev/tenstorrent/N` through the tt-kmd ioctls, mmap'd TLB windows and sysfs.

Registers are touched only with single 32-bit loads and stores through a memoryview cast to
'I' (a sliced mmap copy may become overlapping or byte-sized stores, which double-writes FIFOs
and doorbells); block copies go through slices. A reset by another descriptor makes this one's
ioctls fail with ENODEV: `_ioctl` turns that into `DeviceGone` so the card layer reopens.

The node is opened with O_NONBLOCK: on tt-kmd >= 2.10 a descriptor opened with O_EXCL makes
every other open wait, and O_NONBLOCK turns that wait into EAGAIN (chardev.c
admit_chardev_open), which the card layer reports with the holder's PID instead of hanging.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import time
from pathlib import Path
from typing import Callable

from ..errors import DeviceError
from .device import BlackholeDevice, DeviceGone
from .umdlock import arc_mutex_path

DEV_DIR = Path("/dev/tenstorrent")
SYSFS_PCI = Path("/sys/bus/pci/devices")
PROC_DIR = Path("/proc/driver/tenstorrent")
MODULE_VERSION = Path("/sys/module/tenstorrent/version")
SYSFS_CLASS = Path("/sys/class/tenstorrent")
SYSFS_TELEMETRY = ("tt_aiclk", "tt_axiclk", "tt_arcclk", "tt_serial", "tt_card_type", "tt_asic_id", "tt_fw_bundle_ver",
                   "tt_m3app_fw_ver", "tt_heartbeat", "tt_therm_trip_count")
PCI_COMMAND_PARITY = 0x40
HWMON_ATTRS = ("temp1_input", "temp1_max", "in0_input", "in0_max", "curr1_input", "curr1_max", "power1_input",
               "power1_max", "fan1_input")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class MmapWindow:
    """A mapped window: `read32`/`write32` are single aligned 32-bit accesses."""

    def __init__(self, fd: int, offset: int, size: int):
        self.size = size
        self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        self._u32 = memoryview(self._mm).cast("I")

    def read32(self, offset: int) -> int: return self._u32[offset >> 2]

    def write32(self, offset: int, value: int) -> None: self._u32[offset >> 2] = value & 0xFFFFFFFF

    def read(self, offset: int, length: int) -> bytes: return self._mm[offset:offset + length]

    def write(self, offset: int, data: bytes) -> None: self._mm[offset:offset + len(data)] = data

    def close(self) -> None:
        self._u32.release()
        self._mm.close()


class KmdDevice(BlackholeDevice):
    """An open /dev/tenstorrent/N. `ioctl_fn` exists so tests can stand in for the kernel."""

    def __init__(self, minor: int, dev_dir: Path = DEV_DIR, ioctl_fn: Callable = fcntl.ioctl, spec: str | None = None,
                 exclusive: bool = False):
        self.minor, self.dev_dir, self._ioctl_fn = minor, dev_dir, ioctl_fn
        self.path = str(dev_dir / str(minor))
        self.spec = spec or f"tt:{minor}"
        self._fd = -1
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_EXCL if exclusive else 0)
        try:
            # Legacy (not O_APPEND) client: the driver powers every domain on except max AICLK,
            # which is what makes touching Tensix and DRAM safe.
            self._fd = os.open(self.path, flags)
        except FileNotFoundError:
            raise DeviceError(f"{self.path} does not exist", hint="is tt-kmd loaded? `otpu-tt list` shows the cards found") from None
        except PermissionError:
            raise DeviceError(f"{self.path}: permission denied", hint="tt-kmd's udev rule makes the node 0666; check it is installed") from None
        self._bdf: str | None = None

    def _ioctl(self, request: int, buf: bytearray) -> None:
        try:
            self._ioctl_fn(self._fd, request, buf, True)
        except OSError as e:
            if e.errno == errno.ENODEV:
                raise DeviceGone(f"{self.path}: the driver disowned this descriptor (the card was reset)") from None
            raise

    def _map(self, offset: int, size: int) -> MmapWindow:
        return MmapWindow(self._fd, offset, size)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def bdf(self) -> str:
        if self._bdf is None:
            self._bdf = self.device_info().bdf
        return self._bdf

    def reopen(self, exclusive: bool = False, timeout: float = 10.0) -> "KmdDevice":
        bdf = self.bdf
        self.close()
        deadline = time.monotonic() + timeout
        while True:
            minor = minor_of_bdf(bdf, self.dev_dir)
            if minor is not None:
                dev = KmdDevice(minor, self.dev_dir, self._ioctl_fn, spec=f"tt:{minor}", exclusive=exclusive)
                dev._bdf = bdf
                return dev
            if time.monotonic() >= deadline:
                raise DeviceError(f"the card at {bdf} did not come back within {timeout:g} s",
                                  hint="check `lspci -s " + bdf + "`; a card that does not reappear needs a power cycle")
            time.sleep(0.2)

    def open_another(self) -> "KmdDevice":
        dev = KmdDevice(self.minor, self.dev_dir, self._ioctl_fn, spec=self.spec)
        dev._bdf = self._bdf
        return dev

    def host_facts(self) -> dict:
        facts: dict = {"minor": self.minor, "node": self.path, "bdf": self.bdf}
        version = _read(MODULE_VERSION)
        if version is not None:
            facts["driver_version"] = version
        pci = SYSFS_PCI / self.bdf
        for attr in ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width"):
            value = _read(pci / attr)
            if value is not None:
                facts[attr] = value
        # The driver's own telemetry files (absent tags and ENODATA before POST_RESET are skipped).
        sysfs = {}
        for attr in SYSFS_TELEMETRY:
            value = _read(SYSFS_CLASS / f"tenstorrent!{self.minor}" / attr)
            if value is not None:
                sysfs[attr] = value
        for hwmon in sorted((pci / "hwmon").glob("hwmon*")):
            for attr in HWMON_ATTRS:
                value = _read(hwmon / attr)
                if value is not None:
                    sysfs[attr] = value
        facts["sysfs"] = sysfs
        return facts

    def pids(self) -> list[int]:
        return holders(self.minor)

    def arc_mutex_path(self) -> Path:
        return arc_mutex_path(self.minor)

    def reset_marker(self) -> bool | None:
        """The driver's reset marker (PCI_COMMAND parity bit, tt-kmd pcie.c set_reset_marker): set from
        an ASIC reset request until the reset clears config space. None when sysfs cannot tell."""
        try:
            raw = (SYSFS_PCI / self.bdf / "config").read_bytes()[4:6]
        except (OSError, DeviceGone):
            return None
        return bool(len(raw) == 2 and raw[0] & PCI_COMMAND_PARITY)

    def power_cycle_hint(self) -> str:
        return "power the host off and on (a cold boot: a warm reboot may keep the card powered)"


def bdf_of_minor(minor: int) -> str | None:
    """The PCI address of /dev/tenstorrent/<minor>, from sysfs (no descriptor needed)."""
    try:
        return (SYSFS_CLASS / f"tenstorrent!{minor}" / "device").resolve(strict=True).name
    except OSError:
        return None


def holders(minor: int) -> list[int]:
    """PIDs holding /dev/tenstorrent/<minor> open, one per descriptor (tt-kmd enumerate.c pids_proc_show)."""
    try:
        return [int(t) for t in (PROC_DIR / str(minor) / "pids").read_text().split()]
    except (OSError, ValueError):
        return []


def minor_of_bdf(bdf: str, dev_dir: Path = DEV_DIR, sysfs_pci: Path | None = None) -> int | None:
    """The /dev/tenstorrent minor now serving the card at PCI address `bdf`, if it is present."""
    for entry in sorted(((sysfs_pci or SYSFS_PCI) / bdf / "tenstorrent").glob("tenstorrent!*")):
        minor = int(entry.name.split("!")[1])
        if (dev_dir / str(minor)).exists():
            return minor
    return None


def present_minors(dev_dir: Path = DEV_DIR) -> list[int]:
    return sorted(int(p.name) for p in dev_dir.glob("*") if p.name.isdigit())
