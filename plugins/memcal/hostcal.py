"""Calibrate one LiteDRAM channel from the host, step by step as the reference does (host.md 6.2).

1. clear cal_ready (the STATUS CALIB bit drops); check the write-clock MMCM is locked and its
   DQ / DQS outputs sit at the phases the calibration assumes (DRP reads);
2. PHY reset and the JEDEC init through the DFII, every delay and bitslip at 0;
3. write latency and read leveling at the starting phase (`leveling.calibrate`); lanes whose
   write window does not hold that phase are looked for a quarter tCK further on, up to four
   times;
4. the CK/DQS phase sweep over one tCK with those settings and a BIST per step
   (`sweep.sweep`): a pass map per lane, the longest run common to every lane, its centre;
5. at the centre, write latency and read leveling again, checked with every seed;
6. a BIST write and read & check pass in hardware mode;
7. a last DFII check at the final settings, then hardware mode and cal_ready (STATUS CALIB).
A failure raises `CalError` with the step, the reference's error code and a hint; cal_ready
stays low, so STATUS says the channel is not calibrated.
"""
from __future__ import annotations

import time
from typing import Callable

from otpu_core.card import litedram_map as M
from otpu_core.errors import ChecksFailed

from . import bist as bist_mod
from .csr import Chan, Csr
from .dfii import SEEDS, Dram, lane_errors
from .leveling import Leveling, calibrate, read_leveling, write_latency
from .sweep import DqsPhase, PhaseStuck, sweep

DRP_POLLS = 100
DISCOVERY_TRIES = 4             # the start and three quarter-tCK moves
HINTS = {
    M.ERR_DRP_TIMEOUT: "the write-clock MMCM's DRP port does not answer: reload the bitstream",
    M.ERR_MMCM_UNLOCKED: "the write-clock MMCM is not locked: its input clock or the build's clocking",
    M.ERR_MMCM_PHASES: "the bitstream's write-clock phases differ from what the calibration assumes: "
                       "rebuild with the openTPU LiteDRAM settings",
    M.ERR_BIST_TIMEOUT: "the controller's BIST never finished: the controller or its clock",
    M.ERR_SHIFT_BUSY: "the CK/DQS phase shifter is stuck: reload the bitstream",
    M.ERR_NO_COMMON_PHASE: "the lanes' DQ / DQS pinout, termination and Vref, the DDR3 supply or the module "
                           "(`otpu-memcal scan` shows each lane's window)",
    M.ERR_FINAL: "a marginal window: calibrate again with --stride 1 and check the temperature and the DDR3 supply",
}


ALL_LANES_HINT = ("not one lane reads back right: the channel's CK / address / command path, its DDR3 supply and "
                  "reset, or the module itself")


class CalError(ChecksFailed):
    """A channel did not calibrate (exit 1). `code` is the reference's error code, `partial` what was found."""

    def __init__(self, ch: int, code: int, detail: str, partial: dict | None = None, hint: str | None = None):
        super().__init__(f"channel {ch}: {detail}", hint=hint or HINTS.get(code))
        self.ch, self.code, self.partial = ch, code, partial or {}


Progress = Callable[[str, int, int], None]       # (what, done, total)


def check_write_clock(chan: Chan) -> None:
    """The MMCM is locked and CLKOUT3..6 sit at the eighths of a VCO period the calibration assumes."""
    if not chan.r(M.B_WCLK, M.WCLK_MMCM_LOCKED):
        raise CalError(chan.ch, M.ERR_MMCM_UNLOCKED, M.ERROR_TEXT[M.ERR_MMCM_UNLOCKED])
    for out, want in M.EXPECTED_PHASES.items():
        pair = []
        for reg in M.DRP_REGS[out]:
            chan.wm([(M.B_WCLK, M.WCLK_DRP_ADR, reg), (M.B_WCLK, M.WCLK_DRP_READ, 1)])
            for _ in range(DRP_POLLS):
                if chan.r(M.B_WCLK, M.WCLK_DRP_DRDY):
                    break
            else:
                raise CalError(chan.ch, M.ERR_DRP_TIMEOUT, M.ERROR_TEXT[M.ERR_DRP_TIMEOUT])
            pair.append(chan.r(M.B_WCLK, M.WCLK_DRP_DAT_R))
        got = M.drp_eighths(*pair)
        if got != want:
            raise CalError(chan.ch, M.ERR_MMCM_PHASES,
                           f"{M.ERROR_TEXT[M.ERR_MMCM_PHASES]}: CLKOUT{out} at {got}/8 of a VCO period, expected {want}/8")


def _discover(dram: Dram, dqs: DqsPhase, start: int, progress: Progress | None) -> Leveling:
    """Write latency and read windows of every lane, trying further phases for lanes without one."""
    found = None
    for k in range(DISCOVERY_TRIES):
        dqs.move(start + k * M.PERIOD_STEPS // DISCOVERY_TRIES)
        lanes = None if found is None else found.lanes_without_window()
        lev = write_latency(dram, lanes=lanes, progress=(lambda d, n: progress("search", d, n)) if progress else None)
        if found is None:
            found = lev
        else:
            for lane in lanes:
                found.write_latency[lane], found.reads[lane] = lev.write_latency[lane], lev.reads[lane]
                found.maps[lane] = lev.maps[lane]
        if not found.lanes_without_window():
            break
    dqs.move(start)
    return found


def calibrate_channel(csr: Csr, ch: int, stride: int = 1, bist_mib: float = 64.0, sweep_bist_mib: float = 8.0,
                      progress: Progress | None = None) -> dict:
    """Calibrate channel `ch`; returns the result (JSON-ready) or raises CalError."""
    chan = csr.chan(ch)
    t0, a0 = time.monotonic(), csr.accesses
    chan.w(M.B_CAL, M.CAL_READY, 0)
    check_write_clock(chan)
    dram, dqs = Dram(chan), DqsPhase(chan)
    dram.init()
    try:
        start = dqs.steps()
        result: dict = {"ch": ch, "by": "host", "stride": stride, "scan_start": start, "per_bit": dram.per_bit}
        found = _discover(dram, dqs, start, progress)
        missing = found.lanes_without_window()
        if missing:
            result["search"] = found.as_dict()
            raise CalError(ch, M.ERR_NO_COMMON_PHASE,
                           f"no DQS phase works for every lane: lane{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(map(str, missing))} never read back right at any write latency "
                           f"({DISCOVERY_TRIES} phases a quarter tCK apart)", result,
                           hint=ALL_LANES_HINT if len(missing) == M.LANES else None)
        dram.set_write_bitslip({lane: found.write_latency[lane] for lane in range(M.LANES)})
        read_leveling(dram, found, seeds=SEEDS[:1])
        sw = sweep(dram, dqs, chan, start, stride, sweep_bist_mib,
                   progress=(lambda k, n: progress("sweep", k, n)) if progress else None)
        first, length = sw.common()
        windows = sw.lane_windows()
        result.update(scan_points=len(sw.points), pass_maps=sw.maps(), traffic_checked=bool(sweep_bist_mib),
                      lane_window_steps=[n * stride for _, n in windows],
                      lane_window_ps=[round(n * stride * M.STEP_PS) for _, n in windows])
        if length == 0:
            raise _no_common_phase(ch, sw, result)
        pick = start + sw.points[(first + length // 2) % len(sw.points)]
        result.update(dqs_steps=pick, window_steps=length * stride, window_ps=round(length * stride * M.STEP_PS),
                      run_first=sw.points[first], run_last=sw.points[(first + length - 1) % len(sw.points)])
        dqs.move(pick)
        lev = calibrate(dram, progress=(lambda d, n: progress("level", d, n)) if progress else None)
        result.update(write_latency=lev.write_latency, read=[r.as_dict() for r in lev.reads], windows=lev.as_dict()["windows"],
                      read_maps=lev.maps, errors=lev.errors)
        if not lev.ok:
            raise CalError(ch, M.ERR_FINAL, f"{M.ERROR_TEXT[M.ERR_FINAL]}: step {pick}, write latency {lev.write_latency}, "
                                            f"wrong bits per lane {lev.errors}", result)
        dram.hardware()
        try:
            wpass, check = bist_mod.traffic(chan, bist_mib)
        except bist_mod.BistTimeout as e:
            raise CalError(ch, M.ERR_BIST_TIMEOUT, f"{M.ERROR_TEXT[M.ERR_BIST_TIMEOUT]}: {e}", result) from None
        result["bist"] = {"mib": bist_mib, "write": wpass.as_dict(), "read": check.as_dict()}
        if check.errors:
            hints = bist_mod.diagnosis(ch, check)
            raise CalError(ch, M.ERR_FINAL, f"the BIST after calibration found {check.errors} wrong beats of "
                                            f"{check.beats} (lanes {check.bad_lanes()})", result, hint="; ".join(hints))
        dram.software()
        final = lane_errors(dram.test(SEEDS))
        if any(final):
            raise CalError(ch, M.ERR_FINAL, f"the last check at the chosen settings read wrong bits per lane {final}", result)
        dram.hardware()
        chan.w(M.B_CAL, M.CAL_READY, 1)
    except PhaseStuck as e:
        dram.hardware()
        raise CalError(ch, M.ERR_SHIFT_BUSY, f"{M.ERROR_TEXT[M.ERR_SHIFT_BUSY]}: {e}") from None
    except CalError:
        dram.hardware()        # failed: the controller drives the DRAM again; only cal_ready stays low
        raise
    result.update(seconds=round(time.monotonic() - t0, 3), accesses=csr.accesses - a0, time=time.time())
    return result


def _no_common_phase(ch: int, sw, result: dict) -> CalError:
    """No phase passes on every lane: name the lanes that never pass and what the BIST saw."""
    never = [lane for lane, p in enumerate(sw.passes) if not any(p)]
    detail = "no DQS phase works for every lane"
    if never:
        detail += f": lane{'s' if len(never) > 1 else ''} {', '.join(map(str, never))} never pass{'es' if len(never) == 1 else ''}"
        traffic = [lane for lane in never if sw.bist_failed[lane]]
        if traffic:
            detail += (f" (lane{'s' if len(traffic) > 1 else ''} {', '.join(map(str, traffic))} read back right through "
                       "the DFII but the BIST finds wrong beats there)")
    hint = None
    if sw.lane_bits:
        check = bist_mod.BistResult(M.BIST_READ, 1, 1, 1, [int(sw.bist_failed[lane] > 0) for lane in range(M.LANES)],
                                    sw.lane_bits)
        hint = "; ".join(bist_mod.diagnosis(ch, check)) or None
    result["bist_failed_steps"] = sw.bist_failed
    return CalError(ch, M.ERR_NO_COMMON_PHASE, detail, result, hint=hint)


def restore(csr: Csr, ch: int, settings: dict) -> None:
    """Put a channel back at known settings (a saved result or the CPU's report), check them
    error-free, hand the DRAM to the controller and raise cal_ready. CalError if they do not read back."""
    chan = csr.chan(ch)
    dram, dqs = Dram(chan), DqsPhase(chan)
    dram.software()
    dram.prepare()
    try:
        dqs.move(int(settings["dqs_steps"]))
    except PhaseStuck as e:
        raise CalError(ch, M.ERR_SHIFT_BUSY, f"{M.ERROR_TEXT[M.ERR_SHIFT_BUSY]}: {e}") from None
    dram.set_write_bitslip({lane: max(0, wl) for lane, wl in enumerate(settings["write_latency"])})
    writes = []
    for lane, r in enumerate(settings["read"]):
        writes += dram.set_read(lane, int(r["bitslip"]), int(r["tap"]), r.get("offsets"))
    dram.apply(writes)
    wrong = lane_errors(dram.test(SEEDS))
    if any(wrong):
        raise CalError(ch, M.ERR_FINAL, f"the previous settings (CK step {settings['dqs_steps']}) no longer read back "
                                        f"right: wrong bits per lane {wrong}")
    dram.hardware()
    chan.w(M.B_CAL, M.CAL_READY, 1)
