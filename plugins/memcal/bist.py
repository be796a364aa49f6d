"""The LiteDRAM BIST of one channel: a write pass and a read & check pass in hardware mode.

Registers (reference host.md 6.2): base, length (64-byte beats), mode (bit0 read & check,
bit1 address as data), a 64-bit seed, start; `done` rises when the pass ends, then `ticks`
(sys clocks), `beats`, and for a check the wrong beats, wrong beats per lane and the OR of the
wrong DQ bits. GB/s = beats x 64 / (ticks / sys clock); the peak is one beat per sys clock.
A wrong-beat pattern becomes the per-lane diagnosis diag prints (`memtest.lane_hints`).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from otpu_core import memtest
from otpu_core.card import litedram_map as M

from .csr import Chan

POLL_S = 0.005
TIMEOUT_S = 60.0
PEAK_GBS = M.SYS_HZ * 64 / 1e9
SEED = 0x0123456789ABCDEF


class BistTimeout(Exception):
    """`done` never rose."""


@dataclass
class BistResult:
    mode: int
    beats: int
    ticks: int
    errors: int = 0
    lane_errors: list[int] | None = None
    lane_bits: int = 0

    @property
    def gbs(self) -> float: return self.beats * 64 / (self.ticks / M.SYS_HZ) / 1e9 if self.ticks else 0.0

    @property
    def checked(self) -> bool: return bool(self.mode & M.BIST_READ)

    def bad_lanes(self) -> list[int]: return [l for l, n in enumerate(self.lane_errors or []) if n]

    def as_dict(self) -> dict:
        return {**asdict(self), "lane_bits": f"0x{self.lane_bits:018x}", "gbs": round(self.gbs, 3),
                "percent_of_peak": round(100 * self.gbs / PEAK_GBS, 1)}


def run(chan: Chan, beats: int, mode: int, seed: int = SEED, timeout: float = TIMEOUT_S) -> BistResult:
    """One BIST pass over the first `beats` beats of the channel (the controller must be in hardware mode)."""
    chan.wm([(M.B_BIST, M.BIST_BASE, 0), (M.B_BIST, M.BIST_LENGTH, beats), (M.B_BIST, M.BIST_MODE, mode),
             (M.B_BIST, M.BIST_SEED, (seed >> 32) & 0xFFFFFFFF), (M.B_BIST, M.BIST_SEED + 4, seed & 0xFFFFFFFF),
             (M.B_BIST, M.BIST_START, 1)])
    deadline = time.monotonic() + timeout
    while not chan.r(M.B_BIST, M.BIST_DONE):
        if time.monotonic() > deadline:
            raise BistTimeout(f"BIST done never rose within {timeout:g} s")
        time.sleep(POLL_S)
    ticks, done_beats, errors = chan.rm(M.B_BIST, [M.BIST_TICKS, M.BIST_BEATS, M.BIST_ERRORS])
    if not mode & M.BIST_READ:
        return BistResult(mode, done_beats, ticks)
    lanes = chan.rm(M.B_BIST, [M.BIST_LANE_ERRORS + 4 * l for l in range(M.LANES)])
    return BistResult(mode, done_beats, ticks, errors, lanes, chan.word(M.B_BIST, M.BIST_LANE_BITS, 3))


def traffic(chan: Chan, mib: float, seed: int = SEED, mode: int = 0) -> tuple[BistResult, BistResult]:
    """Write `mib` MiB of the pattern, then read and check it: (write pass, read pass)."""
    beats = max(1, int(mib * (1 << 20)) // 64)
    return run(chan, beats, mode, seed), run(chan, beats, mode | M.BIST_READ, seed)


def diagnosis(ch: int, check: BistResult) -> list[str]:
    """What a read & check pass's wrong lanes and bits point at (data lanes as diag words it, then ECC)."""
    if not check.errors:
        return []
    lanes = (check.lane_errors or [0] * M.LANES)
    bits = [(check.lane_bits >> i) & 1 for i in range(M.DATABITS)]
    hints = memtest.lane_hints(ch, lanes[:memtest.LANES], bits[:8 * memtest.LANES])
    if lanes[memtest.LANES:] and lanes[memtest.LANES]:
        dq = [i for i in range(8) if bits[8 * memtest.LANES + i]]
        hints.append(f"channel {ch} ECC lane errors -> DQ[71:64] (the ninth byte lane)"
                     + (f"; only DQ{64 + dq[0]} (stuck or shorted bit)" if len(dq) == 1 else ""))
    return hints
