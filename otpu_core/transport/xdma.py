"""XdmaTransport: a real card through the Xilinx XDMA driver's device files.

`<dev>_user` is BAR0, mapped with MAP_SHARED and read and written one aligned 32-bit word at a
time through a memoryview cast to 32-bit items (a sliced mmap copy would become byte writes,
and otpu_ctrl keeps only the last byte). `<dev>_h2c_0` takes pwrite at file offset = card AXI
address, `<dev>_c2h_0` answers lseek + readinto (not preadv: vectored reads take the driver's
AIO path). The device lock is taken before any node is opened. The same class runs on
file-backed nodes in tests, with real syscalls.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

from ..card import regs
from ..card.runstate import DeviceLock
from ..errors import DeviceError
from . import Transport

SYSFS_CLASS = Path("/sys/class/xdma")


def node_paths(dev: str) -> dict[str, str]:
    return {"user": f"{dev}_user", "h2c": f"{dev}_h2c_0", "c2h": f"{dev}_c2h_0"}


def present(prefix: str = "/dev/xdma") -> list[str]:
    """Device prefixes (`/dev/xdma0`, ...) whose user node exists, in order."""
    parent = Path(prefix).parent
    stem = Path(prefix).name
    found = sorted(str(p)[:-len("_user")] for p in parent.glob(f"{stem}*_user"))
    return found


class XdmaTransport(Transport):
    kind = "xdma"
    ecc = True

    def __init__(self, dev: str = "/dev/xdma0", dma: bool = True, lock: bool = True,
                 channel_bytes: int = regs.CH_AXI_SPAN, lock_dir=None):
        self.devname = os.path.basename(dev)
        nodes = node_paths(dev)
        missing = [p for k, p in nodes.items() if (dma or k == "user") and not os.path.exists(p)]
        if missing:
            raise DeviceError(f"{dev}: no device node {', '.join(missing)}",
                              hint="is the card powered and the xdma driver loaded? (`otpu setup --check` says), "
                                   "or use --dev sim for the simulated card")
        super().__init__(dev, channel_bytes, lock_dir=lock_dir)
        self.lock = DeviceLock(self.devname, lock_dir) if lock else None
        self._fds: list[int] = []
        self._map = self._words = self._c2h_file = None
        try:
            if self.lock:
                self.lock.acquire()      # before any node is open: a waiter must hold no file
            self._user = self._open(nodes["user"], os.O_RDWR | os.O_SYNC)
            self._map = mmap.mmap(self._user, regs.HOST_MAP_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._words = memoryview(self._map).cast("I")
            if dma:
                self._h2c_fd = self._open(nodes["h2c"], os.O_WRONLY)
                self._c2h_fd = self._open(nodes["c2h"], os.O_RDONLY)
                self._c2h_file = open(self._c2h_fd, "rb", buffering=0, closefd=False)
        except BaseException:
            self._close()
            raise

    def _open(self, path: str, flags: int) -> int:
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except PermissionError:
            raise DeviceError(f"{path}: permission denied", hint="`otpu setup --check` names the udev rule that gives access") from None
        except OSError as e:
            raise DeviceError(f"{path}: cannot open: {e.strerror}") from None
        self._fds.append(fd)
        return fd

    def _reg_read(self, off: int) -> int: return self._words[off >> 2]

    def _reg_write(self, off: int, value: int) -> None: self._words[off >> 2] = value

    def _h2c(self, axi: int, buf: memoryview) -> None:
        done = 0
        while done < len(buf):
            done += os.pwrite(self._h2c_fd, buf[done:], axi + done)

    def _c2h(self, axi: int, buf: memoryview) -> None:
        done = 0
        while done < len(buf):
            os.lseek(self._c2h_fd, axi + done, os.SEEK_SET)
            got = self._c2h_file.readinto(buf[done:])
            if not got:
                raise OSError(5, f"short read at AXI 0x{axi + done:x}")
            done += got

    def link(self) -> dict:
        dev = SYSFS_CLASS / f"{self.devname}_user" / "device"

        def attr(name: str):
            try:
                return (dev / name).read_text().strip()
            except OSError:
                return None

        width = attr("current_link_width")
        ids = [attr("vendor"), attr("device")]
        return {"vendor": int(ids[0], 16) if ids[0] else None, "device": int(ids[1], 16) if ids[1] else None,
                "speed": attr("current_link_speed"), "width": int(width) if width and width.isdigit() else None}

    def _close(self) -> None:
        if self._words is not None:
            self._words.release()
            self._words = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._c2h_file is not None:
            self._c2h_file.close()
            self._c2h_file = None
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        if getattr(self, "lock", None):
            self.lock.release()
