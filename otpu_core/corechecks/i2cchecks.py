"""I2C rows of the check DAG (section and stage `i2c`): the pin registers, and the place of each bus scan.

`I2C pins` is register-level and needs no I2C master: each line released reads high and pulled
low reads low (I2C_CTRL is put back as it was). Scanning a bus takes the bit-bang master and
device identification of the otpu-i2c plugin, which takes these rows over by name (its pins
row runs this one under the card's I2C lock); without the plugin the scans are SKIP.
"""
from __future__ import annotations

import functools

from ..card import regs
from ..checks import Check, CheckContext, Result, Status
from . import device
from . import names as N
from .regchecks import outcome

HINT = "a missing pull-up, a device holding SCL or SDA low, or the pin assignment of the build"


def pins(ctx: CheckContext) -> Result:
    if not device.info(ctx).caps.get("i2c"):
        return Result(Status.SKIP, "no I2C pin registers (CAPS I2C clear)")
    t = device.transport(ctx)
    ctrl, pin_in = regs.off("I2C_CTRL"), regs.off("I2C_IN")
    old = t.reg_read(ctrl)
    bad = []
    try:
        t.reg_write(ctrl, 0)
        idle = t.reg_read(pin_in)
        for bus in (0, 1):
            for name, bit in (("SCL", regs.i2c_scl(bus)), ("SDA", regs.i2c_sda(bus))):
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
    return Result(Status.SKIP, f"bus {bus} scan: needs the otpu-i2c plugin (not installed, or disabled)")


def checks() -> list[Check]:
    return [Check("i2c", N.I2C_PINS, pins, needs=(N.CONFIG,), stage="i2c"),
            *(Check("i2c", N.i2c_bus(b), functools.partial(scan, bus=b), needs=(N.I2C_PINS,), stage="i2c")
              for b in (0, 1))]
