"""The `i2c` rows of selftest and diag (section and stage `i2c`), taken over from the core by name.

Only reads: `I2C pins` is the core's (each line released and pulled once, I2C_CTRL put back)
under the card's I2C lock; a bus scan probes the sensor and power-monitor addresses (LM73
0x48-0x4E, INA2xx 0x40-0x4F, PMBus regulators 0x60-0x67: a full 7-bit scan costs seconds
through BAR0 and finds nothing else on this board) and names what answers from its ID
registers. Both hold the card's I2C lock, so they never interleave with otpu-i2c or smi.
"""
from __future__ import annotations

import functools

from otpu_core.checks import Check, CheckContext, Result, Status
from otpu_core.corechecks import device
from otpu_core.corechecks import i2cchecks as core_i2c
from otpu_core.corechecks import names as N

from .bitbang import BUS_NAMES, I2cError
from .discovery import card_buses, scan as scan_bus

SCAN = (*range(0x40, 0x50), *range(0x60, 0x68))


def pins(ctx: CheckContext) -> Result:
    """The core's pin check, under the card's I2C lock (smi or otpu-i2c may be using the buses)."""
    with card_buses(device.board(ctx))[0].lock:
        return core_i2c.pins(ctx)


def scan(ctx: CheckContext, bus: int) -> Result:
    guard = card_buses(device.board(ctx))[bus]
    try:
        found = scan_bus(guard, SCAN)
    except I2cError as e:
        return Result(Status.FAIL, e.message, {"bus": bus}, hint=e.hint or core_i2c.HINT)
    names = {d.addr: d.kind if d.kind != "PMBus" else f"PMBus {d.info.get('revision')}" for d in found}
    text = ", ".join(f"0x{a:02x} {kind}" for a, kind in names.items()) or "no devices"
    return Result(Status.PASS, f"bus {bus} ({BUS_NAMES[bus]}): {text}",
                  {"bus": bus, "found": {f"0x{a:02x}": kind for a, kind in names.items()}})


def checks() -> list[Check]:
    return [Check("i2c", N.I2C_PINS, pins, needs=(N.CONFIG,), stage="i2c"),
            *(Check("i2c", N.i2c_bus(b), functools.partial(scan, bus=b), needs=(N.I2C_PINS,), stage="i2c")
              for b in (0, 1))]
