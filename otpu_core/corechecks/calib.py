"""DDR3 calibration status (the selftest `calib` stage): STATUS CALIB0 / CALIB1 within 5 s.

Only reads the status bits; calibrating belongs to otpu-memcal, whose plugin may take these
checks over (same names) when it exists.
"""
from __future__ import annotations

import functools
import time

from ..card import regs
from ..checks import Check, CheckContext, Result, Status
from . import device
from . import names as N

WAIT_S, POLL_S = 5.0, 0.1
HINT = ("LiteDRAM builds: reset the card so its calibration CPU searches the delay windows again (a simulated "
        "card: `otpu sim reset`); MIG builds: the DDR pinout and clocking; check the memory voltage "
        "(STATUS bit5 = channel 0, bit6 = channel 1)")


def calibrated(ctx: CheckContext, ch: int) -> Result:
    t = device.transport(ctx)
    bit = regs.ST_CALIB[ch]
    deadline = time.monotonic() + WAIT_S
    while True:
        if t.reg_read(regs.off("STATUS")) & bit:
            return Result(Status.PASS, f"ch{ch} ok")
        if time.monotonic() >= deadline:
            return Result(Status.FAIL, f"ch{ch} NOT calibrated (STATUS CALIB{ch} clear after {WAIT_S:g} s)",
                          {"channel": ch}, hint=HINT)
        time.sleep(POLL_S)


def checks() -> list[Check]:
    return [Check("platform", N.calib(ch), functools.partial(calibrated, ch=ch), needs=(N.ID,), stage="calib")
            for ch in (0, 1)]
