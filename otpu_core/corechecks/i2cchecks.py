"""I2C checks (section `i2c`, selftest stage `i2c`): the pin registers and a scan of each bus.

Only reads: the scan addresses each candidate address for reading and NACKs the one byte it
gets, then names what answered from its read-only ID registers (setting a register pointer
or PMBus command code is the only byte it sends).
The otpu-i2c plugin may take these checks over (same names) when it exists.
"""
from __future__ import annotations

import functools

from ..card import i2c, regs
from ..checks import Check, CheckContext, Result, Status
from . import device
from . import names as N
from .regchecks import outcome

HINT = "a missing pull-up, a device holding SCL or SDA low, or the pin assignment of the build"
# Sensor and power-monitor addresses (LM73 0x48-0x4E, INA2xx 0x40-0x4F, PMBus regulators 0x60-0x67):
# a full 7-bit scan costs seconds of bit-banging through BAR0 and finds nothing else on this board.
SCAN = (*range(0x40, 0x50), *range(0x60, 0x68))
LM73_ADDRS, INA_ADDRS = (0x48, 0x4E), (0x40, 0x4F)
LM73_ID, INA_MFR, PMBUS_REVISION = b"\x01\x90", b"TI", 0x98


def _caps_i2c(ctx: CheckContext) -> bool:
    return bool(device.info(ctx).caps.get("i2c"))


def pins(ctx: CheckContext) -> Result:
    if not _caps_i2c(ctx):
        return Result(Status.SKIP, "no I2C pin registers (CAPS I2C clear)")
    t = device.transport(ctx)
    ctrl, pin_in = regs.off("I2C_CTRL"), regs.off("I2C_IN")
    old = t.reg_read(ctrl)
    bad = []
    try:
        t.reg_write(ctrl, 0)
        idle = t.reg_read(pin_in)
        for bus in (0, 1):
            for name, bit in (("SCL", i2c.scl_bit(bus)), ("SDA", i2c.sda_bit(bus))):
                if not idle & bit:
                    bad.append(f"bus {bus} {name} low while released")
                    continue
                t.reg_write(ctrl, bit)
                if t.reg_read(pin_in) & bit:
                    bad.append(f"bus {bus} {name} stays high when driven low")
                t.reg_write(ctrl, 0)
    finally:
        t.reg_write(ctrl, old)
    return outcome(bad, "pins ok: SCL and SDA idle high, follow the drive", hint=HINT)


def identify(master: i2c.BitBangMaster, addr: int) -> str:
    """What answers at an address, from read-only ID registers: LM73 (ID 0x0190 at pointer 7),
    INA2xx (manufacturer "TI" at 0xFE, die ID at 0xFF), a PMBus device (PMBUS_REVISION)."""
    try:
        if LM73_ADDRS[0] <= addr <= LM73_ADDRS[1] and master.read(addr, 0x07, 2) == LM73_ID:
            return "LM73"
        if INA_ADDRS[0] <= addr <= INA_ADDRS[1] and master.read(addr, 0xFE, 2) == INA_MFR:
            die = int.from_bytes(master.read(addr, 0xFF, 2), "big")
            return f"INA{die >> 4:x}" if die >> 4 in (0x226, 0x219, 0x220, 0x230) else "INA2xx"
        rev = master.read(addr, PMBUS_REVISION, 1)[0]
        return f"PMBus 1.{rev >> 4}"    # [7:4] the Part I revision: 0 = 1.0 ... 3 = 1.3
    except i2c.I2cNack:
        return "unknown"


def scan(ctx: CheckContext, bus: int) -> Result:
    t = device.transport(ctx)
    master = i2c.BitBangMaster(lambda o: t.reg_read(regs.I2C_BASE + o),
                               lambda o, v: t.reg_write(regs.I2C_BASE + o, v), bus)
    try:
        found = {a: identify(master, a) for a in SCAN if master.probe(a)}
    except i2c.I2cError as e:
        return Result(Status.FAIL, e.message, {"bus": bus}, hint=HINT)
    text = ", ".join(f"0x{a:02x} {kind}" for a, kind in found.items()) or "no devices"
    return Result(Status.PASS, f"bus {bus} ({i2c.BUS_NAMES[bus]}): {text}",
                  {"bus": bus, "found": {f"0x{a:02x}": kind for a, kind in found.items()}})


def checks() -> list[Check]:
    return [Check("i2c", N.I2C_PINS, pins, needs=(N.CONFIG,), stage="i2c"),
            *(Check("i2c", N.i2c_bus(b), functools.partial(scan, bus=b), needs=(N.I2C_PINS,), stage="i2c")
              for b in (0, 1))]
