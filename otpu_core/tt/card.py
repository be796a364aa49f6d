"""A Blackhole card for the tools: open a `--dev` spec, find its tiles, lock it, reset it, find it again.

`--dev tt:N` is /dev/tenstorrent/N, `tt:sim[:NAME]` a simulated card; with no spec, the first
/dev/tenstorrent node if any, else `tt:sim`. Opening reads ARC's boot status and telemetry and
builds the `TileMap` from ENABLED_TENSIX_COL / ENABLED_GDDR / NOC_TRANSLATION / PCIE_USAGE;
nothing else ever decides which coordinates exist. A card that cannot be used over the NoC
still opens, with `broken` saying why (hung NoC, lost link, or a reset nobody finished with
POST_RESET), so recovery can run and monitors can say what they see.

Opening never blocks: a descriptor held with O_EXCL (tt-kmd >= 2.10) makes the open fail with
EAGAIN, reported as DeviceBusy naming the holder, or waited for up to `$OTPU_LOCK_WAIT` seconds.

Rungs that reach past one core run under `exclusive()`: the lock file of the card's PCI address
(holder PID and command, so a second user is told who it is) plus LOCK_CTL in the driver, with
a check for other processes holding the card (`$OTPU_LOCK_WAIT` waits for them to leave). The
ASIC reset itself runs on a descriptor opened with O_EXCL, so the driver keeps everyone else out
until POST_RESET is done, and the card is found again by PCI address if hotplug moved it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import sys
import time
from contextlib import contextmanager

from ..card.runstate import DeviceLock, open_shared, pid_alive, process_command
from ..envvars import number
from ..errors import DeviceBusy, DeviceError, UsageError
from . import arc, consts as K, ioctl as I
from .arc import ArcQueue, Telemetry
from .cardmemo import CardMemo
from .coords import TileMap
from .device import BlackholeDevice, DeviceGone, NeedsPostReset
from .faults import Fault
from .kmd import KmdDevice, bdf_of_minor, holders as kmd_holders, present_minors
from .noc import LinkLost, Noc, NocHung
from .simchip import SimChip
from .simdev import SimDevice, holders as sim_holders, power_cycle, sim_dir
from .umdlock import RobustMutex

RESET_READY_TIMEOUT = 60.0
REAPPEAR_TIMEOUT = 10.0      # tt-smi and tt-umd allow a reset card 10 s to come back
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


def lock_name(bdf: str) -> str:
    """The lock file of the card at PCI address `bdf` (minor numbers move across resets; addresses do not)."""
    return "tt-" + bdf.replace(":", "_")


def resetter(bdf: str | None) -> str | None:
    """'PID p (command)' of the process holding the card's reset lock right now, if any."""
    if not bdf:
        return None
    lock = DeviceLock(lock_name(bdf))
    try:
        fd = open_shared(lock.path)
    except (OSError, UsageError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        pid, cmd = lock.holder()
        return f"PID {pid} ({cmd})" if pid is not None and pid_alive(pid) else "another process"
    finally:
        os.close(fd)


def _busy(spec: str, kind: str, which) -> DeviceBusy:
    """The card's descriptor is held with O_EXCL: say by whom (and whether it is resetting it)."""
    if kind == "sim":
        chip = SimChip(sim_dir(which), which)
        try:
            pids, bdf = sim_holders(chip), chip.bdf
        finally:
            chip.close()
    else:
        pids, bdf = kmd_holders(which), bdf_of_minor(which)
    who = ", ".join(f"PID {p} ({process_command(p)})" for p in sorted(set(pids))) or "another process"
    doing = resetter(bdf)
    text = f"{spec} is being reset by {doing}" if doing else f"{spec} is held exclusively (O_EXCL) by {who}"
    return DeviceBusy(text, hint="wait for it with OTPU_LOCK_WAIT=<seconds>, or run again when it is done")


def open_device(spec: str | None = None, faults: list[Fault] | None = None, exclusive: bool = False,
                wait: float | None = None) -> BlackholeDevice:
    """The device a `--dev` spec names. Missing card: DeviceError (exit 3); held with O_EXCL by
    someone else (or, with `exclusive`, open anywhere else): DeviceBusy after `wait` seconds
    (default `$OTPU_LOCK_WAIT`, else at once)."""
    spec = spec or os.environ.get("OTPU_TT_DEV") or default_spec()
    kind, which = parse_spec(spec)
    if kind != "sim" and faults:
        raise UsageError("--fault only applies to a simulated card (tt:sim)")
    if wait is None:
        wait = number("OTPU_LOCK_WAIT", 0.0, 0.0, 86400.0)
    deadline, announced = time.monotonic() + wait, False
    while True:
        try:
            if kind == "sim":
                return SimDevice(which, faults=faults, spec=spec, exclusive=exclusive)
            return KmdDevice(which, spec=spec, exclusive=exclusive)
        except OSError as e:
            if e.errno != errno.EAGAIN:
                raise
            if time.monotonic() >= deadline:
                raise _busy(spec, kind, which) from None
            if not announced:
                print(f"otpu: {spec} is held exclusively; waiting up to {wait:g}s", file=sys.stderr)
                announced = True
            time.sleep(0.2)


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


def wait_for(what, timeout: float, step: float = 0.05) -> bool:
    """Poll `what()` until it is true or `timeout` passes; returns its last answer."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True


class Card:
    """An open card with its telemetry, tile map, NoC access and ARC queue."""

    def __init__(self, spec: str | None = None, faults: list[Fault] | None = None, ready_timeout: float = 10.0):
        self.ready_timeout = ready_timeout
        self.dev = open_device(spec, faults)
        self.spec = self.dev.spec
        self.noc: Noc | None = None
        self.tiles: TileMap | None = None
        self._mutex: RobustMutex | None = None
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
        self.memo = CardMemo(self.info.bdf)
        self._queue: ArcQueue | None = None
        self.broken: DeviceError | None = None
        self.telemetry = None
        try:
            # ARC and PCIe only until telemetry says more (or the map this card had before a reset).
            self.noc = Noc(self.dev, self.tiles or self.remembered_tiles())
        except DeviceGone:
            # A fresh descriptor refused: the driver waits for POST_RESET (tt-kmd chardev.c
            # needs_hw_init). Either someone is resetting the card right now, or they died.
            doing = resetter(self.info.bdf)
            if doing:
                raise DeviceBusy(f"{self.spec} is being reset by {doing}",
                                 hint="wait for it with OTPU_LOCK_WAIT=<seconds>, or run again when it is done") from None
            self.broken = NeedsPostReset(
                f"{self.spec} was reset and never given POST_RESET (whoever reset it stopped between ASIC_RESET "
                "and POST_RESET): the driver refuses it everything but info and reset",
                hint=f"`otpu-tt core recover --all --dev {self.spec}` completes the reset (rung 0, POST_RESET)")
            self.tiles = self.tiles or self.remembered_tiles()
            return
        try:
            arc.wait_ready(self.noc, self.ready_timeout)
            self.telemetry = Telemetry(self.noc)
            values = self.telemetry.read()
            self.tiles = TileMap.from_telemetry(values)
            self.memo.remember(values)
        except (NocHung, LinkLost) as e:
            # Still open, so the chip-wide rungs of recovery (which need no NoC) can run.
            self.broken = e
            self.tiles = self.tiles or self.remembered_tiles()
            self.noc.tiles = self.tiles
            return
        self.noc.tiles = self.tiles

    def remembered_tiles(self) -> TileMap:
        """The tile map from the telemetry this host last read from the card; for a card never read,
        a p150a as the firmware harvests one by default (the two highest physical columns off)."""
        values = self.memo.identity()
        if K.TAGS["ENABLED_TENSIX_COL"] in values:
            return TileMap.from_telemetry(values)
        return TileMap(0x3FFF & ~(0b11 << 12))

    @property
    def needs_post_reset(self) -> bool:
        return isinstance(self.broken, NeedsPostReset)

    def require(self) -> None:
        """Raise the reason this card cannot be used over the NoC, if there is one."""
        if self.broken is not None:
            raise self.broken

    @property
    def arc(self) -> ArcQueue:
        if self._queue is None:
            if self._mutex is None:
                self._mutex = RobustMutex(self.dev.arc_mutex_path())
            self._queue = ArcQueue(self.noc, K.APP_QUEUE, self._mutex)
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

    def _drop_noc(self) -> None:
        if self.noc is not None:
            try:
                self.noc.close()
            except OSError:
                pass                # a reset disowned the descriptor
            self.noc = None

    def close(self) -> None:
        self._drop_noc()
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

    def reopen(self, timeout: float = REAPPEAR_TIMEOUT) -> None:
        """Drop a disowned descriptor and open the card again by its PCI address; a reset still in
        progress elsewhere is waited for (up to `timeout`), after which `broken` says what is left."""
        self._drop_noc()
        self.dev = self.dev.reopen()
        self.spec = self.dev.spec
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._attach()
            except DeviceBusy:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
                continue
            if not self.needs_post_reset or time.monotonic() >= deadline:
                return
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
    def exclusive(self, allow_others: bool = False):
        """The advisory lock: the lock file (holder named) plus LOCK_CTL, and no other process with the
        card open (waiting up to `$OTPU_LOCK_WAIT` for them to leave). With `allow_others` the others
        are not refused but yielded, so the caller can say whom its action affects."""
        lock = DeviceLock(self.lock_name).acquire()
        got = False
        try:
            if not self.needs_post_reset:      # LOCK_CTL is one of the ioctls refused until POST_RESET
                got = bool(self.dev.lock_ctl(I.LOCK_ACQUIRE, RESET_LOCK_INDEX))
                if not got:
                    raise DeviceBusy(f"{self.spec}: another process holds the driver's reset lock ({RESET_LOCK_INDEX})")
            wait = number("OTPU_LOCK_WAIT", 0.0, 0.0, 86400.0)
            if not allow_others and not wait_for(lambda: not self.other_users(), wait, 0.2):
                who = ", ".join(f"PID {pid} ({cmd})" for pid, cmd in self.other_users())
                raise DeviceBusy(f"{self.spec} is open in {who}: close it and retry",
                                 hint="or wait for it with OTPU_LOCK_WAIT=<seconds>; a reset under a live user kills "
                                      "its mappings (SIGBUS) and can destabilise the host")
            yield self.other_users()
        finally:
            if got:
                try:
                    self.dev.lock_ctl(I.LOCK_RELEASE, RESET_LOCK_INDEX)
                except OSError:
                    pass        # a reset disowned the descriptor; its locks went with it
            lock.release()

    def _reopen_exclusive(self) -> None:
        """This card's descriptor again, opened with O_EXCL (waiting out a brief other open)."""
        deadline = time.monotonic() + REAPPEAR_TIMEOUT
        while True:
            try:
                self.dev = self.dev.reopen(exclusive=True)
                break
            except OSError as e:
                if e.errno != errno.EAGAIN or time.monotonic() >= deadline:
                    raise DeviceBusy(f"{self.spec}: another process opened the card while it was being reset") from None
                time.sleep(0.05)
        self.spec = self.dev.spec
        try:
            self.dev.lock_ctl(I.LOCK_ACQUIRE, RESET_LOCK_INDEX)     # the driver dropped it with the old descriptor
        except DeviceGone:
            pass                     # refused until POST_RESET; O_EXCL keeps others out meanwhile

    def complete_reset(self, settle: float = 2.0) -> str:
        """POST_RESET for a card someone else reset and left (the caller holds `exclusive()`): wait for
        the reset marker to clear (the reset landed), issue POST_RESET, attach. Returns what happened."""
        landed = wait_for(lambda: not self.dev.reset_marker(), max(settle, 0.0) + REAPPEAR_TIMEOUT * (settle > 0))
        result = self.dev.reset_device(I.RESET_POST)
        self._attach_after_reset()
        if result:
            return "POST_RESET done, but the reset never landed (the driver's reset marker did not clear)"
        return "POST_RESET done: completed the reset another process left" + ("" if landed else " (late)")

    def asic_reset(self, settle: float = 2.0, sbr: bool = False) -> None:
        """ASIC reset (optionally after a PCIe secondary bus reset), then find the card and POST_RESET.

        The caller holds `exclusive()`. Everything on the chip is lost; old descriptors get ENODEV.
        The reset runs on an O_EXCL descriptor, so nobody can open the card until POST_RESET.
        """
        self._drop_noc()
        self._reopen_exclusive()
        if sbr:
            self.dev.reset_device(I.RESET_PCIE_LINK)
        if self.dev.reset_device(I.RESET_ASIC):
            raise DeviceError(f"{self.spec}: the driver could not trigger the ASIC reset")
        time.sleep(settle)           # hotplug may remove and re-add the device meanwhile
        if not self.alive():
            self._reopen_exclusive()  # found again by PCI address
        result = self.dev.reset_device(I.RESET_POST)
        self._attach_after_reset()
        if result:
            raise DeviceError(f"{self.spec}: the ASIC reset did not land (the driver's reset marker never cleared; "
                              "POST_RESET failed)")

    def _attach_after_reset(self) -> None:
        timeout, self.ready_timeout = self.ready_timeout, max(self.ready_timeout, RESET_READY_TIMEOUT)
        try:
            self._attach()           # GDDR retrains and ARC firmware boots: allow it a minute
        finally:
            self.ready_timeout = timeout
        if self.broken is None:
            self.memo.clear()

