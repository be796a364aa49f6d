"""The host side of the card's bit-banged I2C buses: I2C through two registers, I2C_CTRL and I2C_IN.

The FPGA has no I2C master: the host pulls SCL and SDA of bus b low through I2C_CTRL (bit 2b
SCL, 2b+1 SDA, 1 = pull low; the other bus's bits are kept) and reads the wired-AND levels in
I2C_IN. Every line change writes I2C_CTRL and then reads I2C_IN: the read completes after the
posted write reached the pins, so it both sees the levels and paces the bus; `half_s` holds
each half bit at least that long (`--khz`). The other bus's I2C_CTRL bits are read at each
START and kept; another user of the pins holds the card's I2C lock (`bus.I2cLock`).

Bus rules (reference host.md 7): before a START both lines must have been high for 50 us; a
bus that is not idle within 50 ms is diagnosed: SCL never high is a stuck clock, both lines
low with every driver released is a bus without pull-ups, SDA held low with SCL high gets the
bus recovery (up to nine SCL pulses with SDA released, then a STOP); a device may stretch
the clock for up to 35 ms; losing arbitration (SDA low while released with SCL high) releases
both lines, backs off at random (1-2 x 100 us x attempt) and retries up to five times.

There is no call that writes a data byte: a transaction is an address, at most one command or
pointer byte, a repeated START and reads.
"""
from __future__ import annotations

import random
import time
from typing import Callable

from otpu_core.card import regs
from otpu_core.errors import DeviceBusy, DeviceError

I2C_CTRL, I2C_IN = regs.off("I2C_CTRL") - regs.I2C_BASE, regs.off("I2C_IN") - regs.I2C_BASE
BUS_NAMES = regs.I2C_BUS_NAMES
scl_bit, sda_bit = regs.i2c_scl, regs.i2c_sda
IDLE_S = 50e-6
BUSY_TIMEOUT_S = 0.050
STRETCH_TIMEOUT_S = 0.035
RETRIES = 5
BACKOFF_S = 100e-6


class I2cError(DeviceError):
    """An I2C transaction failed (exit 3)."""


class I2cNack(I2cError):
    def __init__(self, addr: int, what: str, bus: str = ""):
        super().__init__(f"I2C device 0x{addr:02x}{f' on bus {bus}' if bus else ''} did not acknowledge {what}",
                         hint="no device answers at that address (absent, unpowered, or another address strap); "
                              "`otpu-i2c scan` lists what answers")
        self.addr = addr


class StuckBus(I2cError):
    """A line is held low (a device, or a short) and recovery did not free it."""


class NoPullup(I2cError):
    """Both lines read low with nothing driving them: the bus has no pull-ups (or no supply)."""


class BusBusy(I2cError, DeviceBusy):
    """Another master holds the bus (lost arbitration every time)."""


class _LostArbitration(Exception):
    pass


class BitBangMaster:
    """One bus through `read(off)` / `write(off, v)` on the pin window (offsets I2C_CTRL, I2C_IN)."""

    def __init__(self, read: Callable[[int], int], write: Callable[[int, int], None], bus: int,
                 half_s: float = 0.0, stretch_timeout_s: float = STRETCH_TIMEOUT_S,
                 busy_timeout_s: float = BUSY_TIMEOUT_S, retries: int = RETRIES, rng: random.Random | None = None,
                 batch: Callable[[list], list[int]] | None = None):
        self._read, self._write, self.bus = read, write, bus
        self._batch = batch          # (off, value) writes and (off, None) reads in one call, if the window has it
        self.name = BUS_NAMES[bus]
        self.half_s, self.stretch_timeout_s, self.busy_timeout_s, self.retries = half_s, stretch_timeout_s, busy_timeout_s, retries
        self.scl, self.sda = scl_bit(bus), sda_bit(bus)
        self.rng = rng or random.Random()
        self._edge = 0.0
        self._other: int | None = None       # the other bus's I2C_CTRL bits during a transaction

    # ---- lines ---------------------------------------------------------------------------------

    def levels(self) -> tuple[int, int]:
        v = self._read(I2C_IN)
        return int(bool(v & self.scl)), int(bool(v & self.sda))

    def _drive(self, scl_low: bool, sda_low: bool) -> int:
        other = self._other if self._other is not None else self._read(I2C_CTRL) & ~(self.scl | self.sda)
        if self.half_s:
            while time.perf_counter() < self._edge + self.half_s:
                pass
        value = other | (self.scl if scl_low else 0) | (self.sda if sda_low else 0)
        if self._batch is not None:
            self._edge = time.perf_counter()
            return self._batch([(I2C_CTRL, value), (I2C_IN, None)])[0]
        self._write(I2C_CTRL, value)
        self._edge = time.perf_counter()
        return self._read(I2C_IN)

    def release(self) -> None:
        self._drive(False, False)
        self._other = None

    def _scl_high(self, sda_low: bool) -> int:
        """Release SCL and wait while a device stretches the clock; returns I2C_IN."""
        v = self._drive(False, sda_low)
        deadline = time.monotonic() + self.stretch_timeout_s
        while not v & self.scl:
            if time.monotonic() > deadline:
                self.release()
                raise StuckBus(f"I2C bus {self.name}: SCL held low for more than {self.stretch_timeout_s * 1000:.0f} ms "
                               "(stuck bus)", hint="a device stretching the clock without end, or SCL shorted to ground")
            v = self._read(I2C_IN)
        return v

    # ---- bus states ----------------------------------------------------------------------------

    def wait_idle(self) -> None:
        """Both lines high for IDLE_S; else diagnose within the busy timeout (and recover a held SDA)."""
        if self._read(I2C_CTRL) & (self.scl | self.sda):
            self.release()                      # this host left a line driven (an interrupted transfer)
        t0 = time.monotonic()
        high_since = None
        while True:
            now = time.monotonic()
            scl, sda = self.levels()
            if scl and sda:
                high_since = high_since or now
                if now - high_since >= IDLE_S:
                    return
                continue
            high_since = None
            if now - t0 < self.busy_timeout_s:
                continue
            if not scl and not sda:
                raise NoPullup(f"I2C bus {self.name}: SCL and SDA both read low with every driver released: "
                               "no pull-ups on the bus (or it has no supply)",
                               hint="fit the pull-up resistors (or power the bus); a short of both lines looks the same")
            if not scl:
                raise StuckBus(f"I2C bus {self.name}: SCL stays low with the host released (stuck bus)",
                               hint="a device holding the clock, or SCL shorted to ground: power-cycle the bus's devices")
            if not self.recover():
                raise StuckBus(f"I2C bus {self.name}: SDA stays low after nine clocks and a STOP (stuck bus)",
                               hint="SDA shorted to ground, or a device that no longer follows the clock")
            return

    def recover(self) -> bool:
        """Free a bus a device holds by SDA (it was left mid-byte): up to nine SCL pulses with SDA
        released until SDA reads high with SCL high, then a START and a STOP there, without another
        clock edge, so every device goes back to idle. True when both lines end up high."""
        self._scl_high(False)
        for _ in range(9):
            if self.levels()[1]:
                break
            self._drive(True, False)
            self._scl_high(False)
        if not self.levels()[1]:
            return False
        self._drive(False, True)
        self._drive(False, False)
        return self.levels() == (1, 1)

    def start(self) -> None:
        self.wait_idle()
        # the other bus's lines, kept as they are: read once per transaction (whoever else drives the
        # pins takes the card's I2C lock first, so they cannot change meanwhile)
        self._other = self._read(I2C_CTRL) & ~(self.scl | self.sda)
        self._drive(False, True)
        self._drive(True, True)

    def repeated_start(self) -> None:
        self._drive(True, False)
        self._scl_high(False)
        self._drive(False, True)
        self._drive(True, True)

    def stop(self) -> None:
        self._drive(True, True)
        self._scl_high(True)
        self._drive(False, False)
        self._other = None

    # ---- bytes ---------------------------------------------------------------------------------

    def write_byte(self, byte: int) -> bool:
        """Clock out one byte MSB first (an address or the one command byte); True when acknowledged."""
        for i in range(7, -1, -1):
            bit_low = not (byte >> i) & 1
            self._drive(True, bit_low)
            v = self._scl_high(bit_low)
            if not bit_low and not v & self.sda:      # released SDA reads low with SCL high: another master
                self.release()
                raise _LostArbitration()
            self._drive(True, bit_low)
        self._drive(True, False)
        v = self._scl_high(False)
        self._drive(True, False)
        return not v & self.sda

    def read_byte(self, ack: bool) -> int:
        byte = 0
        for _ in range(8):
            v = self._scl_high(False)
            byte = (byte << 1) | int(bool(v & self.sda))
            self._drive(True, False)
        self._drive(True, ack)
        self._scl_high(ack)
        self._drive(True, False)
        return byte

    # ---- transactions --------------------------------------------------------------------------

    def _retrying(self, body: Callable[[], object]):
        for attempt in range(1, self.retries + 1):
            try:
                return body()
            except _LostArbitration:
                time.sleep(self.rng.uniform(1, 2) * BACKOFF_S * attempt)
        raise BusBusy(f"I2C bus {self.name}: lost arbitration {self.retries} times (another master is using the bus)",
                      hint="the host's own SMBus controller may be driving the PCIe SMBus; try again, or stop it")

    def _address(self, addr: int, read: bool) -> None:
        if not self.write_byte((addr << 1) | int(read)):
            self.stop()
            raise I2cNack(addr, "its address", self.name)

    def probe(self, addr: int) -> bool:
        """Address + R; read one byte NACKed; STOP. True when a device answered."""
        def body() -> bool:
            self.start()
            if not self.write_byte((addr << 1) | 1):
                self.stop()
                return False
            self.read_byte(ack=False)
            self.stop()
            return True
        return self._retrying(body)

    def read(self, addr: int, cmd: int | None, n: int, block: bool = False) -> bytes:
        """n bytes (or an SMBus block: its count byte first, at most 32) after setting the pointer /
        command `cmd` with a repeated START; `cmd=None` reads from the current pointer."""
        def body() -> bytes:
            self.start()
            if cmd is not None:
                self._address(addr, False)
                if not self.write_byte(cmd):
                    self.stop()
                    raise I2cNack(addr, f"command 0x{cmd:02x}", self.name)
                self.repeated_start()
            self._address(addr, True)
            if block:
                count = self.read_byte(ack=True)
                k = min(count, 32)
                data = bytes(self.read_byte(ack=i < k - 1) for i in range(k)) if k else b""
                if not k:
                    self.read_byte(ack=False)
            else:
                data = bytes(self.read_byte(ack=i < n - 1) for i in range(n))
            self.stop()
            return data
        return self._retrying(body)
