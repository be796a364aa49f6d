"""Make a card's DDR3 channels calibrated: the core's CPU first, the host for what it left (host.md 6.1).

`ensure(board)`: a card without HOSTCAL (MIG controllers) calibrates itself, nothing to do.
Otherwise the channels to do are those whose STATUS CALIB bit is low (all of the chosen ones
with `force`). A CPU still calibrating is waited for (up to 60 s) in any case; when this is not
forced its result is taken; whatever it left uncalibrated the host then
calibrates, after holding the CPU so it cannot recalibrate behind the host's back (it stays
held; `otpu-memcal selfcal` hands the channels back to it). Every result, and every failure
with its error, goes to the results file. A forced recalibration that fails puts the channel
back at its previous settings when they are known, so a card is never left worse than found.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from otpu_core.card import litedram_map as M
from otpu_core.card import regs
from otpu_core.errors import UsageError

from . import hostcal, selfcal
from .csr import Csr
from .hostcal import CalError
from .results import Results, running_settings

Log = Callable[[str], None]


def has_hostcal(board) -> bool:
    return board.info.regmap >= 2 and bool(board.info.caps.get("hostcal"))


def require_hostcal(board) -> None:
    if not has_hostcal(board):
        raise UsageError(f"{board.t.dev}: this bitstream has no LiteDRAM CSR window (CAPS bit27 HOSTCAL clear): "
                         "its DDR3 controllers calibrate themselves (MIG)",
                         hint="nothing to calibrate from the host; `otpu-memcal status` shows the STATUS CALIB bits")


def calibrated(board) -> list[bool]:
    st = board.status()
    return [bool(st & bit) for bit in regs.ST_CALIB]


def configured_at(board) -> float | None:
    """When the card was configured (now minus UPTIME): when its CPU calibrated at reset."""
    snap = board.snapshot()
    if not snap or not board.info.core_khz:
        return None
    return time.time() - snap["UPTIME"] / (board.info.core_khz * 1e3)


@dataclass
class Options:
    stride: int = 1
    bist_mib: float = 64.0
    sweep_bist_mib: float = 8.0


@dataclass
class Outcome:
    """What `ensure` did: `by` is None (nothing to do), selfcal, host or selfcal+host."""
    by: str | None
    channels: dict[int, dict] = field(default_factory=dict)
    failures: dict[int, CalError] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def record_cpu(board, csr: Csr, res: Results, channels) -> dict | None:
    """Read the CPU's report and keep each channel it calibrated (with when the card was configured)."""
    rep = selfcal.report(csr)
    if rep is None:
        return None
    when = configured_at(board)
    for ch, r in rep["channels"].items():
        if ch in channels:
            res.set_channel(ch, {**r, "time": when, "firmware_id": f"0x{rep['firmware_id']:08x}"})
    return rep


def ensure(board, channels=(0, 1), force: bool = False, opts: Options | None = None, log: Log | None = None,
           progress: hostcal.Progress | None = None) -> Outcome:
    """Calibrate what needs it. Every channel is tried; the ones that failed are in `failures`."""
    opts = opts or Options()
    say = log or (lambda text: None)
    if not has_hostcal(board):
        return Outcome(None, notes=["self-calibrating (MIG): nothing to do"])
    csr = Csr(board.t)
    res = Results(board.t.devname)
    ok = calibrated(board)
    todo = [ch for ch in channels if force or not ok[ch]]
    out = Outcome(None)
    if not todo:
        return out
    cpu = selfcal.state(csr)
    if cpu.running:         # it is driving the PHYs: let it finish (holding it now would leave a channel half done)
        say("the LiteDRAM core's CPU is calibrating; waiting ...")
        cpu = selfcal.wait(csr)
        ok = calibrated(board)
        todo = [ch for ch in channels if force or not ok[ch]]
    if cpu.present and not force:
        record_cpu(board, csr, res, todo)
        ok = calibrated(board)
        left = [ch for ch in todo if not ok[ch]]
        for ch in set(todo) - set(left):
            out.channels[ch] = res.channel(ch) or {"by": "selfcal"}
        out.by = "selfcal"
        if not left:
            res.save()
            return out
        why = "; ".join(f"channel {ch}: {cpu.channel(ch)['state']}, {cpu.channel(ch)['error_text']}" for ch in left)
        say(f"the core's CPU left channel{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} "
            f"uncalibrated ({why}); calibrating from the host")
        out.notes.append(f"core CPU: {why}")
        todo, out.by = left, "selfcal+host"
    else:
        out.by = "host"
    if cpu.present:         # what the CPU did is known before it is held (to put back, and for status)
        unknown = [ch for ch in range(M.NCHANNELS) if ok[ch] and running_settings(res.channel(ch)) is None]
        if unknown:
            record_cpu(board, csr, res, unknown)
        selfcal.hold(csr)
    previous = {ch: running_settings(res.channel(ch)) for ch in todo if ok[ch]}
    res.begin(todo, "cal")
    try:
        for ch in todo:
            say(f"DDR3 channel {ch}: calibrating (LiteDRAM, host-driven) ...")
            try:
                step = (lambda what, d, n, ch=ch: progress(f"channel {ch} {what}", d, n)) if progress else None
                r = hostcal.calibrate_channel(csr, ch, opts.stride, opts.bist_mib, opts.sweep_bist_mib, step)
            except CalError as e:
                res.set_channel(ch, {"ch": ch, "by": "host", "failed": True, "error": e.message, "hint": e.hint,
                                     "code": e.code, "time": time.time(), **_kept(e.partial)})
                out.failures[ch] = e
                _put_back(csr, ch, previous.get(ch), res, e, say)
                continue
            if not calibrated(board)[ch]:
                e = CalError(ch, M.ERR_FINAL, f"calibrated but its STATUS CALIB{ch} bit stays low")
                res.set_channel(ch, {**r, "failed": True, "error": e.message})
                out.failures[ch] = e
                continue
            res.set_channel(ch, r)
            out.channels[ch] = r
    finally:
        res.end()
    return out


def _kept(partial: dict) -> dict:
    """The parts of a failed calibration worth showing later (the maps, where it stopped)."""
    keep = ("stride", "scan_start", "pass_maps", "scan_points", "lane_window_steps", "lane_window_ps", "dqs_steps",
            "write_latency", "read", "read_maps", "errors", "bist", "search", "bist_failed_steps")
    return {k: partial[k] for k in keep if k in partial}


def _put_back(csr: Csr, ch: int, prev: dict | None, res: Results, err: CalError, say: Log) -> None:
    """After a failed recalibration of a channel that was calibrated: its previous settings, if known."""
    if prev is None:
        return
    try:
        hostcal.restore(csr, ch, prev)
    except CalError as e2:
        say(f"channel {ch}: the previous settings could not be put back: {e2.message}")
        return
    res.set_channel(ch, {**prev, "restored_after": err.message, "restored": time.time()})
    err.message += f"; its previous settings (by {prev.get('by', '?')}) were put back and it runs on them as before"
    say(f"channel {ch}: previous settings put back")
