"""The simulated p150a behind the `BlackholeDevice` interface: a stand-in for tt-kmd.

It decodes the same ioctl structs the real driver does and keeps the driver's rules: TLB ids
0..200 of 2 MiB and 202..209 of 4 GiB, window addresses aligned to the window size, reset
generations (RESET_DEVICE 2-5 disown every older descriptor: its ioctls fail with ENODEV and its
mappings are gone, which is SIGBUS on hardware and `DeviceGone` here), the POST_RESET gate,
64 LOCK_CTL locks released at close, one NOC-cleanup write at close, the list of open PIDs,
and power-down when the last descriptor closes. Chip behaviour is `simchip`'s.
"""
from __future__ import annotations

import ctypes as C
import errno
import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

from ..card.runstate import pid_alive, process_command, run_dir
from ..errors import DeviceBusy
from . import consts as K
from . import ioctl as I
from .device import BlackholeDevice, DeviceGone
from .faults import ENV as FAULTS_ENV, Fault, parse as parse_faults
from .simchip import SimChip
from .simstate import H_EPOCH, H_GEN, H_LINK_LOST, H_LOCKS, H_NEEDS_INIT, H_NOC_HUNG, H_RESET_MARKER, LINK_UP, TGT_NONE
from .umdlock import UMD_LOCK_PREFIX

TLB_2M_COUNT, TLB_4G_FIRST, TLB_4G_COUNT = 201, 202, 8
BAR0_BYTES = 512 << 20
DRIVER_VERSION = (2, 10, 1)
DIR_PREFIX = "tt-sim-"


def sim_dir(name: str) -> Path:
    return run_dir() / f"{DIR_PREFIX}{name}"


def existing_sims() -> list[str]:
    return sorted(p.name[len(DIR_PREFIX):] for p in run_dir().glob(f"{DIR_PREFIX}*") if (p / "identity.json").exists())


def _holds_files(pid: int) -> bool:
    """Does the process still hold its descriptors? (A zombie has closed them all, as the kernel does at exit.)"""
    if not pid_alive(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] != b"Z"


def release_locks(chip: SimChip, token: int) -> None:
    """Drop every LOCK_CTL lock the descriptor `token` holds (the driver does this at close)."""
    W = chip.W
    for i in range(I.LOCK_COUNT):
        if W[H_LOCKS + i] == token:
            W[H_LOCKS + i] = 0


@contextmanager
def descriptor_table(chip: SimChip):
    """The chip's table of open descriptors (token -> pid, cleanup), pruned of dead processes."""
    path = chip.dir / "fds.json"
    with open(chip.dir / "fds.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            fds = json.loads(path.read_text())
        except (OSError, ValueError):
            fds = {}
        dead = [t for t, e in fds.items() if not _holds_files(e["pid"])]
        for t in dead:
            # What the driver did when that process died: its cleanup write, its locks,
            # and power-down if it was the last user.
            cleanup = fds.pop(t).get("cleanup")
            if cleanup:
                x, y, addr, data = cleanup
                chip.write32(chip.resolve(x, y), addr, data & 0xFFFFFFFF)
            release_locks(chip, int(t))
            if not fds:
                chip.power_down()
        yield fds
        tmp = path.with_name(f".fds.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(fds))
        os.replace(tmp, path)


def holders(chip: SimChip) -> list[int]:
    """PIDs with the card open, one entry per descriptor (as /proc/driver/tenstorrent/N/pids)."""
    with descriptor_table(chip) as fds:
        return [e["pid"] for e in fds.values()]


def power_cycle(chip: SimChip) -> None:
    """Power a simulated card off and on: memories, registers, hangs, locks and faults all gone.

    Refused (DeviceBusy) while a process has the card open: pulling the power under a live user
    is not something a tool should do to it.
    """
    with descriptor_table(chip) as fds:
        users = sorted({e["pid"] for e in fds.values()})
        if users:
            who = ", ".join(f"PID {pid} ({process_command(pid)})" for pid in users)
            raise DeviceBusy(f"tt:sim:{chip.name} is open in {who}", hint="stop them first, then power the card off")
        chip.power_cycle()

class SimWindow:
    """A mapping of one TLB window (or BAR0 page) of the simulated chip."""

    __slots__ = ("size", "_dev", "_chip", "_slot", "_epoch", "_tlb")

    def __init__(self, dev: "SimDevice", slot: list, size: int, tlb: int | None):
        self.size, self._dev, self._chip, self._slot, self._tlb = size, dev, dev.chip, slot, tlb
        self._epoch = dev.chip.W[H_EPOCH]

    def _live(self) -> None:
        W = self._chip.W
        if self._dev._gen != W[H_GEN] or self._epoch != W[H_EPOCH] or self._dev.closed:
            raise DeviceGone("this mapping was zapped by a reset (SIGBUS on hardware); reopen the device")

    def read32(self, offset: int) -> int:
        self._live()
        slot = self._slot
        return self._chip.read32(slot[1], slot[0] + offset)

    def write32(self, offset: int, value: int) -> None:
        self._live()
        slot = self._slot
        self._chip.write32(slot[1], slot[0] + offset, value & 0xFFFFFFFF)

    def read(self, offset: int, length: int) -> bytes:
        self._live()
        slot = self._slot
        return self._chip.read(slot[1], slot[0] + offset, length)

    def write(self, offset: int, data: bytes) -> None:
        self._live()
        slot = self._slot
        self._chip.write(slot[1], slot[0] + offset, data)

    def close(self) -> None:
        if self._tlb is not None:
            mapped = self._dev._mapped
            mapped[self._tlb] = max(0, mapped.get(self._tlb, 0) - 1)
            self._tlb = None


class SimBarPage:
    """A BAR0 page: the PCIe tile's own registers, answered without the NoC."""

    __slots__ = ("size", "_dev", "_offset", "_epoch")

    def __init__(self, dev: "SimDevice", offset: int):
        self.size, self._dev, self._offset, self._epoch = 4096, dev, offset, dev.chip.W[H_EPOCH]

    def read32(self, offset: int) -> int:
        if self._epoch != self._dev.chip.W[H_EPOCH] or self._dev.closed:
            raise DeviceGone("this mapping was zapped by a reset (SIGBUS on hardware); reopen the device")
        return self._dev.chip.bar_read32(self._offset + offset)

    def write32(self, offset: int, value: int) -> None:
        raise PermissionError("the BAR0 registers of the PCIe tile are the driver's")

    def read(self, offset: int, length: int) -> bytes:
        return b"".join(self.read32(offset + i).to_bytes(4, "little") for i in range(0, length, 4))

    def write(self, offset: int, data: bytes) -> None:
        raise PermissionError("the BAR0 registers of the PCIe tile are the driver's")

    def close(self) -> None:
        pass


class SimDevice(BlackholeDevice):
    """One open descriptor of a simulated p150a named `name` (run directory `tt-sim-<name>`)."""

    def __init__(self, name: str = "0", faults: list[Fault] | None = None, spec: str | None = None,
                 exclusive: bool = False):
        self.name = name
        self.spec = spec or f"tt:sim:{name}"
        self.chip = SimChip(sim_dir(name), name)
        self.path = str(self.chip.dir)
        self.closed = False
        self._tlbs: dict[int, list] = {}
        self._mapped: dict[int, int] = {}
        try:
            with descriptor_table(self.chip) as fds:
                # tt-kmd >= 2.10 open(): O_EXCL waits for no other descriptor, a plain open waits
                # while an O_EXCL one is held; opened with O_NONBLOCK, both are EAGAIN instead.
                if (exclusive and fds) or any(e.get("excl") for e in fds.values()):
                    raise OSError(errno.EAGAIN, f"{self.spec}: "
                                  + ("other descriptors are open" if exclusive else "held open with O_EXCL"))
                self.token = self.chip.new_token()
                if not fds and not self.chip.W[H_NEEDS_INIT]:
                    self.chip.power_up()        # a legacy client: every domain on
                fds[str(self.token)] = {"pid": os.getpid(), "cleanup": None, "excl": exclusive}
        except BaseException:
            self.closed = True
            self.chip.close()
            raise
        self._gen = self.chip.W[H_GEN]
        # Specs this card had already been given: not applied again (see `SimChip.inject`).
        self.repeated_faults = self.chip.inject(parse_faults(os.environ.get(FAULTS_ENV)) + list(faults or []))

    def close(self) -> None:
        if self.closed:
            return
        with descriptor_table(self.chip) as fds:
            entry = fds.pop(str(self.token), None) or {}
            cleanup = entry.get("cleanup")
            if cleanup and self._gen == self.chip.W[H_GEN]:
                x, y, addr, data = cleanup
                self.chip.write32(self.chip.resolve(x, y), addr, data & 0xFFFFFFFF)
            release_locks(self.chip, self.token)
            if not fds:
                self.chip.power_down()
        self.closed = True
        self.chip.close()

    def reopen(self, exclusive: bool = False) -> "SimDevice":
        """Find the card again by PCI address (a simulated card keeps its address) and open it."""
        bdf = self.chip.bdf
        self.close()
        for name in existing_sims():
            ident = json.loads((sim_dir(name) / "identity.json").read_text())
            if ident.get("bdf") == bdf:
                return SimDevice(name, spec=f"tt:sim:{name}", exclusive=exclusive)
        raise DeviceGone(f"no card at {bdf} any more")

    def arc_mutex_path(self) -> Path:
        """tt-umd's ARC message mutex of this card (the simulated card keeps it in its run directory)."""
        return self.chip.dir / f"{UMD_LOCK_PREFIX}ARC_MSG_sim_PCIe"

    def reset_marker(self) -> bool:
        return bool(self.chip.W[H_RESET_MARKER])

    def power_cycle_hint(self) -> str:
        return f"`otpu-tt sim reset --dev tt:sim:{self.name}` powers this simulated card off and on"

    def open_another(self) -> "SimDevice":
        return SimDevice(self.name, spec=self.spec)

    def host_facts(self) -> dict:
        return {"node": self.spec, "driver_version": ".".join(map(str, DRIVER_VERSION)),
                "current_link_speed": "16.0 GT/s PCIe", "max_link_speed": "32.0 GT/s PCIe",
                "current_link_width": "16", "max_link_width": "16", "bdf": self.chip.bdf, "sysfs": self._sysfs()}

    def _sysfs(self) -> dict:
        """The driver's telemetry files: read by the driver through its own window (TLB 201)."""
        chip = self.chip
        if chip.W[H_NOC_HUNG] or chip.W[H_LINK_LOST] or chip.W[H_NEEDS_INIT]:
            return {}                       # ENODATA / unreadable
        v, T = chip.telemetry_values(), K.TAGS
        temp = v[T["ASIC_TEMPERATURE"]]
        temp_c = (temp - (1 << 32) if temp & 0x80000000 else temp) / 65536
        return {"tt_aiclk": str(v[T["AICLK"]]), "tt_axiclk": str(v[T["AXICLK"]]), "tt_arcclk": str(v[T["ARCCLK"]]),
                "tt_serial": chip.identity["board_id"], "tt_card_type": "p150a", "tt_asic_id": chip.identity["asic_id"],
                "tt_fw_bundle_ver": K.version_text(v[T["FLASH_BUNDLE_VERSION"]]), "tt_heartbeat": str(v[T["TIMER_HEARTBEAT"]]),
                "tt_therm_trip_count": str(v[T["THERM_TRIP_COUNT"]]), "temp1_input": str(int(temp_c * 1000)),
                "in0_input": str(v[T["VCORE"]]), "curr1_input": str(v[T["TDC"]] * 1000),
                "power1_input": str(v[T["TDP"]] * 1_000_000), "fan1_input": str(v[T["FAN_RPM"]])}

    def pids(self) -> list[int]:
        return holders(self.chip)

    # ---- mmap ------------------------------------------------------------------------------
    def _map(self, offset: int, size: int):
        self._check(None)
        if offset >= K.TLB_MMAP_UC:
            rel = offset - (K.TLB_MMAP_WC if offset >= K.TLB_MMAP_WC else K.TLB_MMAP_UC)
            tlb = rel // K.TLB_2M if rel < BAR0_BYTES else TLB_4G_FIRST + (rel - BAR0_BYTES) // K.TLB_4G
            if tlb not in self._tlbs:
                raise OSError(errno.EINVAL, f"mmap offset 0x{offset:x} is not a TLB window this descriptor owns")
            limit = K.TLB_2M if tlb < TLB_2M_COUNT else K.TLB_4G
            if size > limit:
                raise OSError(errno.EINVAL, "a TLB mapping may not exceed its window")
            self._mapped[tlb] = self._mapped.get(tlb, 0) + 1
            return SimWindow(self, self._tlbs[tlb], size, tlb)
        if offset + size <= BAR0_BYTES:
            return SimBarPage(self, offset)
        raise OSError(errno.EINVAL, f"mmap offset 0x{offset:x} is not modelled")

    # ---- ioctls ------------------------------------------------------------------------------
    def _check(self, request: int | None) -> None:
        if self.closed:
            raise OSError(errno.EBADF, "descriptor closed")
        W = self.chip.W
        if self._gen != W[H_GEN]:
            raise DeviceGone(f"{self.spec}: the driver disowned this descriptor (the card was reset)")
        if W[H_NEEDS_INIT] and request not in (I.GET_DEVICE_INFO, I.GET_DRIVER_INFO, I.RESET_DEVICE):
            raise DeviceGone(f"{self.spec}: the card needs POST_RESET before anything else")

    def _ioctl(self, request: int, buf: bytearray) -> None:
        self._check(request)
        handler = self._HANDLERS.get(request)
        if handler is None:
            raise OSError(errno.ENOTTY, f"ioctl 0x{request:x} is not known to the driver")
        handler(self, buf)

    def _get_device_info(self, buf: bytearray) -> None:
        s = I.GetDeviceInfo.from_buffer(buf)
        domain, bus, devfn = self.chip.bdf.split(":")
        dev, fn = devfn.split(".")
        o = s.out
        o.output_size_bytes = C.sizeof(I.GetDeviceInfoOut)
        o.vendor_id, o.device_id, o.subsystem_vendor_id, o.subsystem_id = K.PCI_VENDOR, K.PCI_DEVICE_BH, K.PCI_VENDOR, 0x0040
        o.bus_dev_fn = (int(bus, 16) << 8) | (int(dev, 16) << 3) | int(fn, 16)
        o.max_dma_buf_size_log2, o.pci_domain = 28, int(domain, 16)

    def _get_driver_info(self, buf: bytearray) -> None:
        o = I.GetDriverInfo.from_buffer(buf).out
        o.output_size_bytes, o.driver_version = C.sizeof(I.GetDriverInfoOut), 2
        o.driver_version_major, o.driver_version_minor, o.driver_version_patch = DRIVER_VERSION

    def _query_mappings(self, buf: bytearray) -> None:
        want = I.QueryMappingsIn.from_buffer(buf).output_mapping_count
        rows = [(1, 0, BAR0_BYTES), (2, 1 << 36, BAR0_BYTES), (3, 2 << 36, 1 << 20), (4, 3 << 36, 1 << 20),
                (5, 4 << 36, 32 << 30), (6, 5 << 36, 32 << 30)]
        base = C.sizeof(I.QueryMappingsIn)
        for i, (mid, mbase, msize) in enumerate(rows[:want]):
            m = I.Mapping.from_buffer(buf, base + i * C.sizeof(I.Mapping))
            m.mapping_id, m.mapping_base, m.mapping_size = mid, mbase, msize

    def _allocate_tlb(self, buf: bytearray) -> None:
        s = I.AllocateTlb.from_buffer(buf)
        if s.in_.size == K.TLB_2M:
            ids, off = range(TLB_2M_COUNT), lambda i: i * K.TLB_2M
        elif s.in_.size == K.TLB_4G:
            ids, off = range(TLB_4G_FIRST, TLB_4G_FIRST + TLB_4G_COUNT), \
                lambda i: BAR0_BYTES + (i - TLB_4G_FIRST) * K.TLB_4G
        else:
            raise OSError(errno.EINVAL, "a TLB window is 2 MiB or 4 GiB")
        free = next((i for i in ids if i not in self._tlbs), None)
        if free is None:
            raise OSError(errno.ENOMEM, "no free TLB window")
        self._tlbs[free] = [0, (TGT_NONE, 0)]
        s.out.id, s.out.mmap_offset_uc, s.out.mmap_offset_wc = free, K.TLB_MMAP_UC + off(free), K.TLB_MMAP_WC + off(free)

    def _free_tlb(self, buf: bytearray) -> None:
        tlb = I.FreeTlbIn.from_buffer(buf).id
        if tlb not in self._tlbs:
            raise OSError(errno.EPERM, "not your TLB window")
        if self._mapped.get(tlb):
            raise OSError(errno.EBUSY, "munmap the window first")
        del self._tlbs[tlb]

    def _configure_tlb(self, buf: bytearray) -> None:
        s = I.ConfigureTlb.from_buffer(buf)
        tlb, cfg = s.in_.id, s.in_.config
        if tlb not in self._tlbs:
            raise OSError(errno.EPERM, "not your TLB window")
        size = K.TLB_2M if tlb < TLB_2M_COUNT else K.TLB_4G
        if cfg.addr % size:
            raise OSError(errno.EINVAL, "TLB address must be aligned to the window size")
        if cfg.mcast:
            raise OSError(errno.EOPNOTSUPP, "multicast windows are not modelled by the simulated chip")
        slot = self._tlbs[tlb]
        slot[0], slot[1] = cfg.addr, self.chip.resolve(cfg.x_end, cfg.y_end)

    def _reset_device(self, buf: bytearray) -> None:
        """As tt-kmd's ioctl_reset_device: the result is 0 when the step worked, 1 when not."""
        s = I.ResetDevice.from_buffer(buf)
        flags, W, chip = s.in_.flags, self.chip.W, self.chip
        ok = True
        if flags == I.RESET_PCIE_LINK:
            W[H_EPOCH] += 1                 # tenstorrent_vma_zap
            chip.secondary_bus_reset()
            ok = W[H_LINK_LOST] == LINK_UP  # pcie_hot_reset_and_restore_state
        elif flags in (I.RESET_ASIC, I.RESET_ASIC_DMC, I.RESET_CONFIG_WRITE, I.RESET_USER):
            W[H_GEN] += 1                   # bump_reset_gen: every other descriptor is disowned
            W[H_EPOCH] += 1
            self._gen = W[H_GEN]            # the resetting descriptor survives
            self._tlbs.clear()
            self._mapped.clear()
            if flags != I.RESET_CONFIG_WRITE:
                W[H_NEEDS_INIT] = 1
            W[H_RESET_MARKER] = 1           # set_reset_marker: PCI_COMMAND bit 6
            if flags == I.RESET_ASIC_DMC and W[H_NOC_HUNG]:
                ok = False                  # "Couldn't communicate with firmware; NOC is likely hung."
            elif flags != I.RESET_USER and chip.asic_reset():
                W[H_RESET_MARKER] = 0       # the reset cleared config space, marker included
        elif flags == I.RESET_POST:
            ok = not W[H_RESET_MARKER]      # is_reset_marker_zero
            if W[H_NEEDS_INIT]:
                chip.post_reset()
                if ok:
                    chip.power_up()
        elif flags != I.RESET_RESTORE_STATE:
            raise OSError(errno.EINVAL, f"unknown reset flags {flags}")
        s.out.output_size_bytes, s.out.result = C.sizeof(I.ResetDeviceOut), int(not ok)

    def _lock_ctl(self, buf: bytearray) -> None:
        s = I.LockCtl.from_buffer(buf)
        flags, index = s.in_.flags, s.in_.index
        if index >= I.LOCK_COUNT:
            raise OSError(errno.EINVAL, "lock index out of range")
        W = self.chip.W
        slot = H_LOCKS + index
        if flags in (I.LOCK_ACQUIRE, I.LOCK_ACQUIRE_BLOCKING):
            while True:
                with descriptor_table(self.chip):           # prunes locks of dead processes
                    if W[slot] in (0, self.token):
                        W[slot] = self.token
                        s.out.value = 1
                        return
                if flags == I.LOCK_ACQUIRE:
                    s.out.value = 0
                    return
                time.sleep(0.01)
        elif flags == I.LOCK_RELEASE:
            if W[slot] == self.token:
                W[slot] = 0
            s.out.value = 0
        elif flags == I.LOCK_TEST:
            s.out.value = int(W[slot] == self.token) | (int(W[slot] != 0) << 1)
        else:
            raise OSError(errno.EINVAL, f"unknown LOCK_CTL flags {flags}")

    def _set_noc_cleanup(self, buf: bytearray) -> None:
        s = I.SetNocCleanup.from_buffer(buf)
        if s.argsz != C.sizeof(I.SetNocCleanup) or s.addr & 3 or s.x > 64 or s.y > 64:
            raise OSError(errno.EINVAL, "bad SET_NOC_CLEANUP arguments")
        with descriptor_table(self.chip) as fds:
            fds[str(self.token)]["cleanup"] = [s.x, s.y, s.addr, s.data] if s.enabled else None

    def _set_power_state(self, buf: bytearray) -> None:
        s = I.SetPowerState.from_buffer(buf)
        if s.argsz != C.sizeof(I.SetPowerState):
            raise OSError(errno.EINVAL, "bad SET_POWER_STATE argsz")
        nflags = s.validity & 0xF
        if nflags > 2 and not s.power_flags & I.POWER_TENSIX_ENABLE:
            self.chip.power_down()
        else:
            self.chip.power_up()

    _HANDLERS = {I.GET_DEVICE_INFO: _get_device_info, I.GET_DRIVER_INFO: _get_driver_info,
                 I.QUERY_MAPPINGS: _query_mappings, I.ALLOCATE_TLB: _allocate_tlb, I.FREE_TLB: _free_tlb,
                 I.CONFIGURE_TLB: _configure_tlb, I.RESET_DEVICE: _reset_device, I.LOCK_CTL: _lock_ctl,
                 I.SET_NOC_CLEANUP: _set_noc_cleanup, I.SET_POWER_STATE: _set_power_state}
