"""A Blackhole card for the tools: open a `--dev` spec, find its tiles, lock it, reset it, find it again.

`--dev tt:N` is /dev/tenstorrent/N, `tt:sim[:NAME]` a simulated p150a; with no spec, the first
/dev/tenstorrent node if any, else `tt:sim`. Opening reads ARC's boot status and telemetry and
builds the `TileMap` from ENABLED_TENSIX_COL / ENABLED_GDDR / NOC_TRANSLATION; nothing else ever
decides which coordinates exist.

An ASIC reset runs under the advisory lock: the lock file of the card's PCI address (holder PID
and command, so a second user gets `DeviceBusy` naming them) plus LOCK_CTL in the driver, and
only when no other process has the device open. Afterwards the card is found again by PCI
address (minor numbers move) and POST_RESET is issued from the new descriptor.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

from ..card.runstate import DeviceLock, process_command
from ..errors import DeviceBusy, DeviceError, UsageError
from . import arc, consts as K, ioctl as I
from .arc import ArcQueue, Telemetry
from .coords import TileMap
from .device import BlackholeDevice, DeviceGone
from .faults import Fault
from .kmd import KmdDevice, present_minors
from .noc import LinkLost, Noc, NocHung
from .simchip import SimChip
from .simdev import SimDevice, power_cycle, sim_dir

RESET_READY_TIMEOUT = 60.0
RESET_LOCK_INDEX = 63        # LOCK_CTL index for "a tool is resetting this card" (0-15 are ETH by convention)


def default_spec() -> str:
    minors = present_minors()
    return f"tt:{minors[0]}" if minors else "tt:sim"


def parse_spec(spec: str) -> tuple[str, str | int]:
    """("sim", NAME) for tt:sim[:NAME], ("kmd", N) for tt:N; anything else is a UsageError."""
    parts = spec.split(":")
    if parts[0] != "tt" or len(parts) < 2 or not parts[1]:
        raise UsageError(f"'{spec}' is not a Blackhole device spec", hint="use tt:0 (first card), tt:sim or tt:sim:NAME")
    if parts[1] == "sim":
        name = parts[2] if len(parts) > 2 and parts[2] else "0"
        if not name.replace("-", "").replace("_", "").isalnum():
            raise UsageError(f"simulated card name '{name}' must be letters, digits, - or _")
        return "sim", name
    try:
        return "kmd", int(parts[1])
    except ValueError:
        raise UsageError(f"'{spec}': expected tt:<number> or tt:sim[:NAME]") from None


def open_device(spec: str | None = None, faults: list[Fault] | None = None) -> BlackholeDevice:
    """The device a `--dev` spec names. Missing card: DeviceError (exit 3)."""
    spec = spec or os.environ.get("OTPU_TT_DEV") or default_spec()
    kind, which = parse_spec(spec)
    if kind == "sim":
        return SimDevice(which, faults=faults, spec=spec)
    if faults:
        raise UsageError("--fault only applies to a simulated card (tt:sim)")
    return KmdDevice(which, spec=spec)


def lock_name(bdf: str) -> str:
    """The lock file of the card at PCI address `bdf` (minor numbers move across resets; addresses do not)."""
    return "tt-" + bdf.replace(":", "_")


def power_cycle_sim(spec: str) -> str:
    """Power a simulated card off and on (`otpu-tt sim reset`); returns its name.

    A real card is a UsageError: software cannot pull its power."""
    kind, name = parse_spec(spec)
    if kind != "sim":
        raise UsageError(f"`otpu-tt sim reset` powers off simulated cards; {spec} is a real card",
                         hint="a real card needs the host power-cycled; `otpu-tt core recover --all --yes` "
                              "runs the resets software can do")
    chip = SimChip(sim_dir(name), name)
    try:
        with DeviceLock(lock_name(chip.bdf)):       # not while a tool is resetting it
            power_cycle(chip)
    finally:
        chip.close()
    return name


class Card:
    """An open card with its telemetry, tile map, NoC access and ARC queue."""

    def __init__(self, spec: str | None = None, faults: list[Fault] | None = None, ready_timeout: float = 10.0):
        self.ready_timeout = ready_timeout
        self.dev = open_device(spec, faults)
        self.spec = self.dev.spec
        self.noc: Noc | None = None
        try:
            self._attach()
        except BaseException:
            self.close()
            raise

    def _attach(self) -> None:
        self.info = self.dev.device_info()
        if (self.info.vendor_id, self.info.device_id) != (K.PCI_VENDOR, K.PCI_DEVICE_BH):
            raise DeviceError(f"{self.spec} is {self.info.vendor_id:04x}:{self.info.device_id:04x}, not a Blackhole "
                              f"({K.PCI_VENDOR:04x}:{K.PCI_DEVICE_BH:04x})")
        # ARC and PCIe only until telemetry says more (or the map this card had before a reset).
        self.tiles: TileMap | None = getattr(self, "tiles", None)
        self.noc = Noc(self.dev, self.tiles or TileMap(0, 0))
        self._queue: ArcQueue | None = None
        self.broken: DeviceError | None = None
        try:
            arc.wait_ready(self.noc, self.ready_timeout)
            self.telemetry = Telemetry(self.noc)
            self.tiles = TileMap.from_telemetry(self.telemetry.read())
        except (NocHung, LinkLost) as e:
            # Still open, so the chip-wide rungs of recovery (which need no NoC) can run.
            self.broken = e
            return
        self.noc.tiles = self.tiles

    def require(self) -> None:
        """Raise the reason this card cannot be used over the NoC, if there is one."""
        if self.broken is not None:
            raise self.broken

    @property
    def arc(self) -> ArcQueue:
        if self._queue is None:
            self._queue = ArcQueue(self.noc)
        return self._queue

    @property
    def lock_name(self) -> str:
        return lock_name(self.info.bdf)

    def fault_note(self) -> str | None:
        """What to tell the user when fault specs were not applied because the card already had them."""
        repeated = self.dev.repeated_faults if isinstance(self.dev, SimDevice) else []
        if not repeated:
            return None
        names = ", ".join(f"'{f}'" for f in repeated)
        it = "them" if len(repeated) > 1 else "it"
        return (f"fault{'s' if len(repeated) > 1 else ''} {names} not applied: {self.spec} was given {it} before "
                f"(a fault spec is applied once in a card's life, even if recovered since); to start over, "
                f"`otpu-tt sim reset --dev {self.spec}` powers the card off, clearing its state and faults")

    def close(self) -> None:
        if self.noc is not None:
            self.noc.close()
            self.noc = None
        self.dev.close()

    def __enter__(self) -> "Card": return self

    def __exit__(self, *exc) -> None: self.close()

    # ---- descriptors that a reset disowned ---------------------------------------------------
    def alive(self) -> bool:
        """Is this descriptor still the driver's? (After someone's reset it fails with ENODEV.)"""
        try:
            self.dev.device_info()
            self.dev.driver_info()
            return True
        except DeviceGone:
            return False

    def reopen(self, timeout: float = 10.0) -> None:
        """Drop a disowned descriptor and open the card again by its PCI address."""
        if self.noc is not None:
            try:
                self.noc.close()
            except OSError:
                pass
            self.noc = None
        self.dev = self.dev.reopen()
        self.spec = self.dev.spec
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._attach()
                return
            except DeviceGone:
                if time.monotonic() >= deadline:
                    raise DeviceError(f"{self.spec} still needs POST_RESET after {timeout:g} s",
                                      hint="the process that reset it may have died; `otpu-tt core recover --all --yes`")
                if self.noc is not None:
                    self.noc = None
                time.sleep(0.05)

    def ensure_alive(self) -> bool:
        """Reopen if the descriptor was disowned; True when it had to."""
        if self.alive():
            return False
        self.reopen()
        return True

    # ---- exclusive use -------------------------------------------------------------------------
    def other_users(self) -> list[tuple[int, str]]:
        me = os.getpid()
        return [(pid, process_command(pid)) for pid in sorted(set(self.dev.pids())) if pid != me]

    @contextmanager
    def exclusive(self):
        """The advisory lock: lock file (holder named) plus LOCK_CTL, and no other open descriptor."""
        lock = DeviceLock(self.lock_name).acquire()
        got = False
        try:
            got = bool(self.dev.lock_ctl(I.LOCK_ACQUIRE, RESET_LOCK_INDEX))
            if not got:
                raise DeviceBusy(f"{self.spec}: another process holds the driver's reset lock ({RESET_LOCK_INDEX})")
            others = self.other_users()
            if others:
                who = ", ".join(f"PID {pid} ({cmd})" for pid, cmd in others)
                raise DeviceBusy(f"{self.spec} is open in {who}", hint="stop them first; a reset under live users "
                                 "kills their mappings (SIGBUS) and can destabilise the host")
            yield
        finally:
            if got:
                try:
                    self.dev.lock_ctl(I.LOCK_RELEASE, RESET_LOCK_INDEX)
                except OSError:
                    pass        # a reset disowned the descriptor; its locks went with it
            lock.release()

    def asic_reset(self, settle: float = 2.0, sbr: bool = False) -> None:
        """ASIC reset (optionally after a PCIe secondary bus reset), then find the card and POST_RESET.

        The caller holds `exclusive()`. Everything on the chip is lost; old descriptors get ENODEV.
        """
        if self.noc is not None:
            self.noc.close()
            self.noc = None
        if sbr:
            self.dev.reset_device(I.RESET_PCIE_LINK)
        result = self.dev.reset_device(I.RESET_ASIC)
        if result:
            raise DeviceError(f"{self.spec}: ASIC reset failed (driver result {result})")
        time.sleep(settle)           # hotplug may remove and re-add the device meanwhile
        self.dev = self.dev.reopen()
        self.spec = self.dev.spec
        self.dev.reset_device(I.RESET_POST)
        timeout, self.ready_timeout = self.ready_timeout, max(self.ready_timeout, RESET_READY_TIMEOUT)
        try:
            self._attach()           # GDDR retrains and ARC firmware boots: allow it a minute
        finally:
            self.ready_timeout = timeout
