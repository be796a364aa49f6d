"""Running op-check programs on the card and comparing them with the golden simulator.

The op-check DRAM image is written once per run; before each program the OUT area is zeroed
on the card (the golden run starts from the image, whose OUT is zero), the program is loaded
at PROG_AT and run, and OUT is read back and compared bit for bit. A program that does not
halt stops the card (the Board stops it) and every later program is reported as not run on
a hung core (SKIP "not run", blocked by the program that hung) instead of waiting for each
timeout again.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import isa, opchecks
from ..checks import CheckContext, Result, Status
from ..errors import DeviceBusy, DeviceError
from . import device

RUN_TIMEOUT_S = 5.0
HANG_HINT = ("the core did not halt: a hung sequencer or memory path; stop it (CTRL=0), reload the bitstream, and "
             "compare the run's counters with the simulator")


@dataclass
class Outcome:
    mismatch: opchecks.Mismatch | None
    stats: object | None      # board.RunStats
    error: str | None = None
    hung_on: str | None = None   # not run: the core hung on this program earlier in the run
    hung: bool = False           # this program did not halt

    @property
    def ok(self) -> bool: return self.error is None and self.mismatch is not None and self.mismatch.ok

    @property
    def ran(self) -> bool: return self.hung_on is None


def _image(ctx: CheckContext) -> dict:
    if "opcheck_image" not in ctx.cache:
        image = opchecks.diag_image(device.target(ctx).config())
        b = device.board(ctx)
        for addr, data in image.items():
            b.write(addr, data)
        ctx.cache["opcheck_image"] = image
    return ctx.cache["opcheck_image"]


def golden(ctx: CheckContext, check: opchecks.OpCheck) -> np.ndarray:
    cache = ctx.cache.setdefault("golden", {})
    if check.title not in cache:
        cache[check.title] = opchecks.run_golden(device.target(ctx), check, _image(ctx))
    return cache[check.title]


def hung_on(ctx: CheckContext) -> str | None:
    """The program the core hung on earlier in this run (None: it has not hung)."""
    return ctx.cache.get("hung")


def not_run(ctx: CheckContext) -> Result:
    """The row of a program that was not run because the core hung earlier."""
    hung = hung_on(ctx)
    return Result(Status.SKIP, f"not run: the core hung on '{hung}' earlier in this run", {"hung_on": hung},
                  blocked_by=hung)


def run_program(ctx: CheckContext, program, timeout: float = RUN_TIMEOUT_S, title: str = "a program"):
    """Load and run a program; returns (RunStats, None) or (None, why it did not finish). A
    program that does not halt marks the core hung for the rest of the run (`hung_on`)."""
    b = device.board(ctx)
    try:
        b.load_program(opchecks.PROG_AT, np.frombuffer(isa.encode_program(program), np.uint8))
        return b.run(timeout=timeout), None
    except DeviceBusy:
        raise
    except DeviceError as e:
        if b.timed_out:
            ctx.cache["hung"] = title
        return None, e.message


def run_check(ctx: CheckContext, check: opchecks.OpCheck) -> Outcome:
    if hung_on(ctx):
        return Outcome(None, None, hung_on=hung_on(ctx))
    want = golden(ctx, check)
    b = device.board(ctx)
    b.write(opchecks.OUT, np.zeros(opchecks.OUT_BYTES, np.uint8))
    stats, error = run_program(ctx, check.program, ctx.options.get("run_timeout", RUN_TIMEOUT_S), check.title)
    if error:
        return Outcome(None, None, error, hung=hung_on(ctx) == check.title)
    got = b.read(opchecks.OUT, check.out_bytes)
    return Outcome(opchecks.compare(got, want, device.info(ctx).lanes), stats)


def result_of(check: opchecks.OpCheck, out: Outcome, hint: str | None = None, extra: str = "",
              ctx: CheckContext | None = None) -> Result:
    words = check.out_bytes // 4
    if not out.ran:
        return Result(Status.SKIP, f"not run: the core hung on '{out.hung_on}' earlier in this run",
                      {"group": check.group, "hung_on": out.hung_on}, blocked_by=out.hung_on)
    if out.error:
        return Result(Status.FAIL, out.error, {"group": check.group, "hung": out.hung},
                      hint=HANG_HINT if out.hung else hint)
    m = out.mismatch
    data = {"group": check.group, "cycles": out.stats.cycles, "instructions": out.stats.instructions}
    if not m.ok:
        data.update(words=m.words, first=m.first, bits=m.bits, vpu_lanes=m.vpu_lanes)
        lane = m.main_lane
        if lane is not None:
            hint = (f"{m.lane_words[lane]} of the {m.words} wrong words sit on VPU lane {lane} (TMEM bank {lane}): "
                    "that VPU lane or its TMEM port; otpu-diag names the op-check groups it breaks")
        return Result(Status.FAIL, m.message(words), data, hint=hint)
    return Result(Status.PASS, m.message(words) + extra, data)
