"""The `i2c` checks of selftest and diag (section and stage `i2c`): the pin registers and a scan of each bus.

Only reads: `I2C pins` releases and pulls each line once and reads it back (then puts
I2C_CTRL back as it was); a bus scan probes the sensor and power-monitor addresses (LM73
0x48-0x4E, INA2xx 0x40-0x4F, PMBus regulators 0x60-0x67: a full 7-bit scan costs seconds
through BAR0 and finds nothing else on this board) and names what answers from its ID
registers. Both hold the card's I2C lock, so they never interleave with otpu-i2c or smi.
"""
from __future__ import annotations

import functools

from otpu_core.card import regs
from otpu_core.checks import Check, CheckContext, Result, Status
from otpu_core.corechecks import device
from otpu_core.corechecks import names as N
from otpu_core.corechecks.regchecks import outcome

from .bitbang import BUS_NAMES, HINT, I2cError, scl_bit, sda_bit
from .discovery import card_buses, scan as scan_bus

SCAN = (*range(0x40, 0x50), *range(0x60, 0x68))


def _caps_i2c(ctx: CheckContext) -> bool:
    return bool(device.info(ctx).caps.get("i2c"))


def pins(ctx: CheckContext) -> Result:
    if not _caps_i2c(ctx):
        return Result(Status.SKIP, "no I2C pin registers (CAPS I2C clear)")
    t = device.transport(ctx)
    ctrl, pin_in = regs.off("I2C_CTRL"), regs.off("I2C_IN")
    with card_buses(device.board(ctx))[0].lock:
        old = t.reg_read(ctrl)
        bad = []
        try:
            t.reg_write(ctrl, 0)
            idle = t.reg_read(pin_in)
            for bus in (0, 1):
                for name, bit in (("SCL", scl_bit(bus)), ("SDA", sda_bit(bus))):
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


def scan(ctx: CheckContext, bus: int) -> Result:
    guard = card_buses(device.board(ctx))[bus]
    try:
        found = scan_bus(guard, SCAN)
    except I2cError as e:
        return Result(Status.FAIL, e.message, {"bus": bus}, hint=e.hint or HINT)
    names = {d.addr: d.kind if d.kind != "PMBus" else f"PMBus {d.info.get('revision')}" for d in found}
    text = ", ".join(f"0x{a:02x} {kind}" for a, kind in names.items()) or "no devices"
    return Result(Status.PASS, f"bus {bus} ({BUS_NAMES[bus]}): {text}",
                  {"bus": bus, "found": {f"0x{a:02x}": kind for a, kind in names.items()}})


def checks() -> list[Check]:
    return [Check("i2c", N.I2C_PINS, pins, needs=(N.CONFIG,), stage="i2c"),
            *(Check("i2c", N.i2c_bus(b), functools.partial(scan, bus=b), needs=(N.I2C_PINS,), stage="i2c")
              for b in (0, 1))]
