"""The two kinds of bus otpu-i2c reads, behind one interface, and what keeps every use of them read-only.

- `CardBus`: one of the card's bit-banged buses (0 "sensor", 1 "smbus") through BAR0's I2C_CTRL /
  I2C_IN (`bitbang.BitBangMaster`); it can also show its pin levels.
- `HostBus`: a host I2C adapter `/dev/i2c-N` through smbus2 (combined write+read messages with a
  repeated START, SMBus block reads), for a card's sensors wired to the host's SMBus.
Both offer `probe(addr)` and `read(addr, cmd, n, block)`, and nothing that writes data.

`Guard` sits in front of either: command and pointer bytes are refused where the reference
refuses them (no command byte to 0x30-0x37, DIMM SPD write protection and page selection, to
0x0C, the SMBus alert response, or to 0x61, the ARP address; the PMBus send-byte commands
CLEAR_FAULTS 0x03 and STORE_/RESTORE_ 0x11-0x18 only go to a device identified as an LM73 or
INA2xx, where those codes are plain registers), and every transaction runs under the card's
I2C lock (`<run dir>/<dev>.i2c.lock`, shared by every process; waiting more than 2 s names the
holder). Nested use inside one process counts, so a scan holds the lock once.
"""
from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from otpu_core.card import regs
from otpu_core.card.runstate import open_shared, process_command, run_dir
from otpu_core.errors import DeviceBusy, DeviceError, UsageError

from .bitbang import BUS_NAMES, I2C_CTRL, I2C_IN, BitBangMaster, I2cError, I2cNack, sda_bit, scl_bit

SCAN_RANGE = range(0x08, 0x78)
NO_POINTER = {*range(0x30, 0x38), 0x0C, 0x61}           # never sent a command byte
SEND_BYTE_CODES = {0x03, *range(0x11, 0x19)}            # PMBus commands that act on receipt
LOCK_TIMEOUT_S, LOCK_RETRY_S = 2.0, 0.005


def card_bus_number(spec: str) -> int | None:
    """0 / 1 for `sensor` / `smbus` / `0` / `1`; None when the spec is not a card bus."""
    s = spec.strip().lower()
    if s in BUS_NAMES:
        return BUS_NAMES.index(s)
    if s in ("0", "1"):
        return int(s)
    return None


def host_adapter(spec: str) -> int | None:
    """N for `/dev/i2c-N` or `i2c-N`; None otherwise."""
    s = spec.strip()
    for prefix in ("/dev/i2c-", "i2c-"):
        if s.startswith(prefix) and s[len(prefix):].isdigit():
            return int(s[len(prefix):])
    return None


def parse_bus(spec: str) -> str:
    """A canonical bus name (`sensor`, `smbus`, `/dev/i2c-N`), or a UsageError naming what is allowed."""
    n = card_bus_number(spec)
    if n is not None:
        return BUS_NAMES[n]
    a = host_adapter(spec)
    if a is not None:
        return f"/dev/i2c-{a}"
    raise UsageError(f"bus '{spec}': not a bus otpu-i2c knows",
                     hint="the card's buses are sensor (0) and smbus (1); a host adapter is /dev/i2c-N (`i2cdetect -l`)")


def _number(text: str, what: str, lo: int, hi: int, allowed: str, example: str) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise UsageError(f"{what} '{text}': not a number (write {example})") from None
    if not lo <= v <= hi:
        raise UsageError(f"{what} 0x{v:x}: {allowed}")
    return v


def parse_addr(text: str) -> int:
    """A 7-bit address (0x48, 72, 0o110); UsageError outside 0x03..0x77."""
    return _number(text, "address", 0x03, 0x77, "outside the 7-bit device range 0x03..0x77", "0x48 or 72")


def parse_byte(text: str, what: str) -> int:
    return _number(text, what, 0, 0xFF, "a register or command code is one byte, 0x00..0xff", "0x07 or 7")


def refuse_pointer(addr: int) -> None:
    """UsageError for an address that must never be sent a command byte."""
    if addr in NO_POINTER:
        what = {0x0C: "the SMBus alert response address", 0x61: "the SMBus ARP address"}.get(
            addr, "a DIMM SPD write-protect / page address")
        raise UsageError(f"0x{addr:02x} is {what}: otpu-i2c never sends it a command byte",
                         hint="read it without a register (`otpu-i2c read BUS ADDR`), or not at all")


# ---- the two back-ends ---------------------------------------------------------------------------

class CardBus:
    """A bit-banged bus of the card, through its transport's BAR0."""
    kind = "card"

    def __init__(self, transport, number: int, half_s: float = 0.0):
        self.t, self.number, self.name = transport, number, BUS_NAMES[number]
        self.master = BitBangMaster(self._rd, self._wr, number, half_s=half_s, batch=self._batch)

    def _rd(self, off: int) -> int: return self.t.reg_read(regs.I2C_BASE + off)

    def _batch(self, ops: list) -> list[int]: return self.t.reg_batch([(regs.I2C_BASE + o, v) for o, v in ops])

    def _wr(self, off: int, value: int) -> None: self.t.reg_write(regs.I2C_BASE + off, value)

    def probe(self, addr: int) -> bool: return self.master.probe(addr)

    def read(self, addr: int, cmd: int | None, n: int, block: bool = False) -> bytes:
        return self.master.read(addr, cmd, n, block)

    def levels(self) -> dict:
        v = self._rd(I2C_IN)
        return {"bus": self.name, "scl": int(bool(v & scl_bit(self.number))), "sda": int(bool(v & sda_bit(self.number))),
                "driven": {"scl": bool(self._rd(I2C_CTRL) & scl_bit(self.number)),
                           "sda": bool(self._rd(I2C_CTRL) & sda_bit(self.number))},
                **({"alert0": "released (high)" if v & regs.I2C_ALERT0 else "asserted (low)"} if self.number == 0 else {})}

    def close(self) -> None: pass


class HostBus:
    """A host adapter /dev/i2c-N through smbus2 (combined messages: the command byte, a repeated START, reads)."""
    kind = "host"

    def __init__(self, number: int, smbus=None):
        self.number, self.name = number, f"/dev/i2c-{number}"
        if smbus is None:
            import smbus2
            try:
                smbus = smbus2.SMBus(number)
            except FileNotFoundError:
                raise DeviceError(f"{self.name}: no such I2C adapter",
                                  hint="`i2cdetect -l` lists the adapters; `modprobe i2c-dev` makes their nodes") from None
            except PermissionError:
                raise DeviceError(f"{self.name}: permission denied",
                                  hint="run as a member of the i2c group, or with sudo") from None
            except OSError as e:
                raise DeviceError(f"{self.name}: {e.strerror or e}") from None
        self.smbus = smbus

    def _call(self, addr: int, what: str, fn):
        try:
            return fn()
        except OSError as e:
            if e.errno in (errno.ENXIO, errno.EREMOTEIO, errno.EIO):
                raise I2cNack(addr, what, self.name) from None
            if e.errno == errno.ETIMEDOUT:
                raise I2cError(f"{self.name}: the transfer to 0x{addr:02x} timed out (bus held or stuck)",
                               hint="a device holding a line low; the adapter's driver may reset the bus") from None
            raise I2cError(f"{self.name}: {what} of 0x{addr:02x} failed: {e.strerror or e}") from None

    def probe(self, addr: int) -> bool:
        try:
            self._call(addr, "a one-byte read", lambda: self.smbus.read_byte(addr))
            return True
        except I2cNack:
            return False

    def read(self, addr: int, cmd: int | None, n: int, block: bool = False) -> bytes:
        from smbus2 import i2c_msg
        if block:
            return bytes(self._call(addr, f"block read of 0x{cmd:02x}", lambda: self.smbus.read_block_data(addr, cmd)))
        r = i2c_msg.read(addr, n)
        msgs = [i2c_msg.write(addr, [cmd]), r] if cmd is not None else [r]
        self._call(addr, "a read" if cmd is None else f"a read of 0x{cmd:02x}", lambda: self.smbus.i2c_rdwr(*msgs))
        return bytes(list(r))

    def levels(self) -> dict:
        raise UsageError(f"{self.name}: a host adapter does not show its pin levels",
                         hint="`otpu-i2c levels` reads the card's buses (sensor, smbus)")

    def close(self) -> None:
        self.smbus.close()


# ---- the I2C lock --------------------------------------------------------------------------------

class I2cLock:
    """All processes serialise whole I2C transactions on a card with one flock (re-entrant in a process)."""

    def __init__(self, devname: str | None, directory: Path | None = None, timeout: float = LOCK_TIMEOUT_S):
        self.path = (directory or run_dir()) / f"{devname or 'card'}.i2c.lock"
        self.timeout = timeout
        self._fd: int | None = None
        self._depth = 0

    def holder(self) -> str:
        try:
            pid, _, cmd = self.path.read_text().partition(" ")
            return f"PID {int(pid)} ({cmd.strip() or '?'})"
        except (OSError, ValueError):
            return "another process"

    def __enter__(self) -> "I2cLock":
        if self._depth == 0:
            fd = open_shared(self.path)
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        os.close(fd)
                        raise DeviceBusy(f"I2C lock {self.path} held by {self.holder()} for more than {self.timeout:g} s",
                                         hint="another otpu-i2c, otpu-smi or a check is using the I2C buses; try again") from None
                    time.sleep(LOCK_RETRY_S)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()} {process_command(os.getpid())}".encode(), 0)
            except OSError:
                pass
            self._fd = fd
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Guard:
    """A bus made safe: refused command codes and addresses, the lock around each transaction."""

    def __init__(self, bus, lock: I2cLock):
        self.bus, self.lock = bus, lock
        self.name, self.kind = bus.name, bus.kind
        self.plain_registers: set[int] = set()      # addresses identified as LM73 / INA2xx

    def check_command(self, addr: int, cmd: int | None) -> None:
        if cmd is None:
            return
        refuse_pointer(addr)
        if cmd in SEND_BYTE_CODES and addr not in self.plain_registers:
            name = "CLEAR_FAULTS" if cmd == 0x03 else "a STORE_ / RESTORE_ command"
            raise UsageError(f"command 0x{cmd:02x} is PMBus {name}, which a PMBus device acts on when it receives it: "
                             f"otpu-i2c sends it only to a device identified as an LM73 or INA2xx (0x{addr:02x} is not)",
                             hint="otpu-i2c is read-only; use a PMBus tool made for writing")

    def probe(self, addr: int) -> bool:
        with self.lock:
            return self.bus.probe(addr)

    def read(self, addr: int, cmd: int | None, n: int, block: bool = False) -> bytes:
        self.check_command(addr, cmd)
        if not block and not 1 <= n <= 32:
            raise UsageError(f"-n {n}: otpu-i2c reads 1 to 32 bytes")
        with self.lock:
            return self.bus.read(addr, cmd, n, block)

    def levels(self) -> dict:
        with self.lock:
            return self.bus.levels()

    def close(self) -> None: self.bus.close()

