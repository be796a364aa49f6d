"""The `calib` checks of selftest and diag, taken over from the core by name: `DDR3 calibration channel C`.

On a LiteDRAM card the check makes the channel calibrated (`ensure`: the core's CPU first,
the host for what it left) and passes with who calibrated it; a channel that cannot be
calibrated fails with the calibration's error and hint. A card without HOSTCAL keeps the
core's check (STATUS CALIB within 5 s).
"""
from __future__ import annotations

import functools

from otpu_core.checks import Check, CheckContext, Result, Status
from otpu_core.corechecks import calib as core_calib
from otpu_core.corechecks import device
from otpu_core.corechecks import names as N

from .ensure import Options, ensure, has_hostcal
from .results import Results

HINT = ("{who}: {hint}; `otpu-memcal status --maps` shows its windows (STATUS bit5 = channel 0, bit6 = channel 1)")


def calibrated(ctx: CheckContext, ch: int) -> Result:
    board = device.board(ctx)
    if not has_hostcal(board):
        return core_calib.calibrated(ctx, ch)
    out = ensure(board, channels=(ch,), opts=Options(**ctx.options.get("memcal", {})))
    if ch in out.failures:
        e = out.failures[ch]
        return Result(Status.FAIL, f"ch{ch} NOT calibrated: {e.message.split(': ', 1)[-1]}",
                      {"channel": ch, "code": e.code, "by": out.by},
                      hint=HINT.format(who="the core's calibration CPU could not calibrate it and neither could the host"
                                       if "selfcal" in (out.by or "") else "the host could not calibrate it",
                                       hint=e.hint or "see the error"))
    r = out.channels.get(ch) or Results(board.t.devname).channel(ch) or {}
    data = {"channel": ch, "by": r.get("by", out.by),
            **{k: r[k] for k in ("dqs_steps", "window_ps", "window_steps", "write_latency") if k in r}}
    return Result(Status.PASS, f"ch{ch} ok", data)


def checks() -> list[Check]:
    return [Check("platform", N.calib(ch), functools.partial(calibrated, ch=ch), needs=(N.ID,), stage="calib")
            for ch in (0, 1)]
