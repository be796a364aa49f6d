"""The CK/DQS phase: moving it, sweeping it over one tCK with per-lane pass maps, and the common window.

The write DQS clock's phase (an MMCM fine phase shift: 1/56 VCO period per step, 112 steps
per tCK at DDR3-1066) moves every lane's DQS against CK and against its DQ; the banks have no
ODELAY, so it is the only write-side knob. The sweep visits one tCK around the starting
phase, every `stride` steps. At each step every lane is tested at the read settings read
leveling gave it (the read eye follows the DRAM's DQS, not the write clock) and at its write
latency; a lane that stops passing is tried at the other write latencies (crossing a tCK moves
the latency by two bitslips, and the window goes on there); with a BIST size, the step also writes and checks that much traffic
in hardware mode, and a lane with wrong beats fails the step (the DFII check alone passes at
phases where real traffic does not). `margins` finds each lane's window and the longest run
of steps where every lane passes; its centre is the pick.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from otpu_core.card import litedram_map as M

from . import bist as bist_mod
from .csr import Chan
from .dfii import SCAN_SEEDS, Dram, lane_bits
from .leveling import WRITE_BITSLIPS

BUSY_POLLS = 1000


class PhaseStuck(Exception):
    """phase_dqs_busy never cleared, or the phase did not move."""


class DqsPhase:
    """The channel's CK/DQS phase in fine steps since configuration (phase_dqs_steps, signed)."""

    def __init__(self, chan: Chan):
        self.c = chan

    def steps(self) -> int: return M.signed32(self.c.r(M.B_PHASE, M.PHASE_DQS_STEPS))

    def move(self, target: int) -> None:
        """Step the phase to `target`: each shift after a read of dqs_busy, in one run of accesses,
        then the count read back; a shift issued while busy (the count falls short) is redone
        one step at a time, waiting for busy to clear."""
        now = self.steps()
        if now != target:
            n, up = abs(target - now), int(target > now)
            got = self.c.batch([(M.B_PHASE, M.PHASE_DQS_BUSY, None), (M.B_PHASE, M.PHASE_DQS_SHIFT, up)] * n
                               + [(M.B_PHASE, M.PHASE_DQS_STEPS, None)])
            now = M.signed32(got[-1])
        while now != target:
            for _ in range(BUSY_POLLS):
                if not self.c.r(M.B_PHASE, M.PHASE_DQS_BUSY):
                    break
            else:
                raise PhaseStuck(f"phase_dqs_busy stayed set for {BUSY_POLLS} reads")
            self.c.w(M.B_PHASE, M.PHASE_DQS_SHIFT, 1 if target > now else 0)
            moved = self.steps()
            if moved == now:
                raise PhaseStuck(f"the phase stays at {now} steps after a shift towards {target}")
            now = moved


def offsets(stride: int) -> list[int]:
    """Sweep points relative to the start: one tCK, -P/2 .. P/2 - 1, every `stride` steps."""
    return list(range(-(M.PERIOD_STEPS // 2), M.PERIOD_STEPS // 2, stride))


@dataclass
class Sweep:
    """Per lane, one pass flag per sweep point; the write latency each lane passed at; BIST findings."""
    start: int
    stride: int
    points: list[int]
    passes: list[list[bool]] = field(default_factory=lambda: [[] for _ in range(M.LANES)])
    latency: list[list[int]] = field(default_factory=lambda: [[] for _ in range(M.LANES)])
    bist_mib: float = 0.0
    bist_failed: list[int] = field(default_factory=lambda: [0] * M.LANES)   # steps the BIST failed each lane
    lane_bits: int = 0                                                     # OR of wrong DQ bits the BISTs saw

    @property
    def circular(self) -> bool: return self.stride * len(self.points) >= M.PERIOD_STEPS

    def maps(self) -> list[str]:
        return ["".join("#" if p else "." for p in lane) for lane in self.passes]

    def lane_windows(self) -> list[tuple[int, int]]:
        """Per lane its longest run of passing points: (first index, length)."""
        return [circular_run(p, self.circular) for p in self.passes]

    def common(self) -> tuple[int, int]:
        return circular_run([all(lane[i] for lane in self.passes) for i in range(len(self.points))], self.circular)


def circular_run(ok: list[bool], circular: bool) -> tuple[int, int]:
    """(first, length) of the longest run of True, wrapping around the end when `circular`; (0, 0) if none."""
    n = len(ok)
    if not any(ok):
        return 0, 0
    if all(ok):
        return 0, n
    seq = ok + ok if circular else ok
    best, start = (0, 0), None
    for i, v in enumerate(seq + [False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            if i - start > best[1] and start < n:
                best = (start, min(i - start, n))
            start = None
    return best


def sweep(dram: Dram, dqs: DqsPhase, chan: Chan, start: int, stride: int, bist_mib: float = 0.0,
          progress: Callable[[int, int], None] | None = None, seeds=SCAN_SEEDS) -> Sweep:
    """Visit one tCK around `start`; the lanes keep the read settings and write latencies set in `dram`."""
    points = offsets(stride)
    out = Sweep(start, stride, points, bist_mib=bist_mib)
    base_wb = list(dram.wb)
    before = [True] * M.LANES              # passing at the point before (every lane counts at the first)
    for k, off in enumerate(points):
        dqs.move(start + off)
        passing, at = _dfii_step(dram, base_wb, seeds, retry=before)
        if bist_mib and any(passing):
            dram.hardware()
            try:
                _w, check = bist_mod.traffic(chan, bist_mib, bist_mod.SEED + off)
            finally:
                dram.software()
            for lane in check.bad_lanes():
                if passing[lane]:         # a lane whose writes land wrong here says nothing about its pins
                    out.bist_failed[lane] += 1
                    out.lane_bits |= check.lane_bits & (0xFF << (8 * lane))
                    passing[lane] = False
        for lane in range(M.LANES):
            out.passes[lane].append(passing[lane])
            out.latency[lane].append(at[lane])
            if at[lane] >= 0:
                base_wb[lane] = at[lane]   # the window goes on at that latency
        before = passing
        if progress:
            progress(k + 1, len(points))
    dqs.move(start)
    return out


def _dfii_step(dram: Dram, base_wb: list[int], seeds, retry: list[bool]) -> tuple[list[bool], list[int]]:
    """Per lane: does it read back right here, and at which write latency (-1: none)? A lane that
    fails where it passed the point before (`retry`) is tried at the other write latencies."""
    if dram.wb != base_wb:
        dram.set_write_bitslip({lane: base_wb[lane] for lane in range(M.LANES) if dram.wb[lane] != base_wb[lane]})
    dram.write_bursts(seeds)
    wrong = dram.read_errors(seeds)
    passing = [not lane_bits(wrong, lane) for lane in range(M.LANES)]
    at = [base_wb[lane] if passing[lane] else -1 for lane in range(M.LANES)]
    for wb in WRITE_BITSLIPS:
        failing = [lane for lane in range(M.LANES) if not passing[lane] and retry[lane] and base_wb[lane] != wb]
        if not failing:
            continue
        dram.set_write_bitslip({lane: wb for lane in failing})
        dram.write_bursts(seeds)
        wrong = dram.read_errors(seeds)
        for lane in failing:
            if not lane_bits(wrong, lane):
                passing[lane], at[lane] = True, wb
    return passing, at
