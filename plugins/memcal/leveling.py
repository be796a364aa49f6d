"""Write latency and read leveling at one CK/DQS phase: the read scan, each lane's best window, the settings.

As liblitedram for a PHY without write leveling (reference host.md 6.2):
- `read_scan`: for every read bitslip and every IDELAY tap, the wrong DQ bits of a burst
  written once (all nine lanes at once);
- `lane_best`: per lane, the read bitslip whose longest run of taps has all eight bits right;
  with per-bit bitslips (`ddrphy_dly_sel_bits`) a bit may read at its lane's bitslip +2 or -2
  (its ISERDES framed the word a clock off), each bit taking the offset that reads right over
  most of the window; the widest window wins, then the fewest bits off their lane's bitslip;
- `write_latency`: a read scan at each write bitslip 0, 2, 4, 6 (tCK steps); per lane the one
  with the widest read window, or none (-1) when no window reaches MIN_WINDOW taps;
- `read_leveling`: per lane its bitslip, its bits' offsets and the centre tap of its window,
  then a check at those settings with every seed, which must read back error-free.
"""
from __future__ import annotations

import functools
import operator
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from otpu_core.card import litedram_map as M

from .dfii import ALL, SCAN_SEEDS, SEEDS, Dram, lane_errors

WRITE_BITSLIPS = tuple(range(0, M.BITSLIPS, M.TCK_BITSLIPS))
PER_BIT_OFFSETS = (0, 2, -2)


@dataclass
class LaneRead:
    """A lane's read window at one write bitslip: its width, bitslip, first tap and per-bit offsets."""
    taps: int = 0
    bitslip: int = 0
    start: int = 0
    offsets: list[int] = field(default_factory=lambda: [0] * 8)
    line: str = ""                      # one character per tap at that bitslip: 1 every bit right, 0 not

    @property
    def tap(self) -> int: return self.start + self.taps // 2 if self.taps else 0

    def as_dict(self) -> dict: return {**asdict(self), "tap": self.tap}


def longest_run(ok: list[bool]) -> tuple[int, int]:
    """(start, length) of the longest run of True (the first of equals); (0, 0) if none."""
    best, start = (0, 0), None
    for i, v in enumerate(ok + [False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            if i - start > best[1]:
                best = (start, i - start)
            start = None
    return best


def read_scan(dram: Dram, seeds=SCAN_SEEDS, progress: Callable[[], None] | None = None) -> list[list[int]]:
    """scan[bitslip][tap]: the wrong-bit mask of the bursts already written, every lane at once
    (`progress()` after each bitslip)."""
    dram.apply(dram._strobes(M.PHY_RDLY_DQ_BITSLIP_RST, ALL))
    dram.rb = [0] * M.LANES
    scan = []
    for _b in range(M.BITSLIPS):
        # one run of accesses per bitslip: every lane selected, 32 taps, a read-back at each
        ops = dram.tap_rst_all()[:-1]
        for t in range(M.DELAYS):
            ops += dram.read_ops(seeds, before=dram.tap_inc_all(selected=True) if t else None)
        words = dram.c.batch(ops + dram.bitslip_inc_all())
        n = len(words) // M.DELAYS
        scan.append([dram.errors_of(words[t * n:(t + 1) * n], seeds) for t in range(M.DELAYS)])
        if progress:
            progress()
    return scan


def tap_masks(scan: list[list[int]]) -> list[list[int]]:
    """masks[bitslip][dq]: bit t set where that DQ bit reads right at tap t (the scan, transposed)."""
    nb, nt = len(scan), len(scan[0])
    raw = np.frombuffer(b"".join(m.to_bytes(9, "little") for row in scan for m in row), np.uint8).reshape(nb, nt, 9)
    ok = ~np.unpackbits(raw, axis=2, bitorder="little")[:, :, :M.DATABITS].astype(bool)
    weights = np.left_shift(np.uint64(1), np.arange(nt, dtype=np.uint64))
    return (ok.transpose(0, 2, 1) * weights).sum(axis=2, dtype=np.uint64).tolist()


def _runs(mask: int, n: int) -> tuple[int, int]:
    return longest_run([bool(mask >> t & 1) for t in range(n)])


def lane_best(scan: list[list[int]], lane: int, per_bit: bool, masks: list[list[int]] | None = None) -> LaneRead:
    """The lane's widest read window in a scan, with per-bit bitslip offsets when the PHY has them
    (`masks`: the scan's `tap_masks`, when the caller has them)."""
    masks = tap_masks(scan) if masks is None else masks
    nb, nt = len(scan), len(scan[0])
    offsets = PER_BIT_OFFSETS if per_bit else (0,)
    best = LaneRead()
    for b in range(nb):
        ok = {(i, o): masks[b + o][8 * lane + i] if 0 <= b + o < nb else 0 for i in range(8) for o in offsets}
        some = (1 << nt) - 1
        for i in range(8):
            some &= functools.reduce(operator.or_, (ok[i, o] for o in offsets))
        start, n = _runs(some, nt)
        if n == 0 or n < best.taps:
            continue
        window = ((1 << n) - 1) << start
        offs = [max(offsets, key=lambda o: bin(ok[i, o] & window).count("1")) for i in range(8)]
        every = functools.reduce(operator.and_, (ok[i, offs[i]] for i in range(8)))
        start, n = _runs(every, nt)
        if (n, -sum(map(bool, offs))) > (best.taps, -sum(map(bool, best.offsets))):
            best = LaneRead(n, b, start, offs, "".join("1" if every >> t & 1 else "0" for t in range(nt)))
    if not best.line:
        best.line = "0" * nt
    return best


def bitslip_maps(scan: list[list[int]], lane: int) -> list[str]:
    """The BIOS map of a lane: per read bitslip one character per tap, 1 when all eight bits read right."""
    return ["".join("1" if lane_bits_clean(m, lane) else "0" for m in row) for row in scan]


def lane_bits_clean(mask: int, lane: int) -> bool: return not (mask >> (8 * lane)) & 0xFF


@dataclass
class Leveling:
    """What one calibration at a phase found: per lane its write latency (-1 none) and read window."""
    write_latency: list[int]
    reads: list[LaneRead]
    windows: dict[int, list[int]]           # write bitslip -> widest read window per lane (taps)
    maps: list[list[str]]                   # per lane, the BIOS map at its write latency
    errors: list[int] = field(default_factory=lambda: [0] * M.LANES)   # wrong bits per lane at the settings

    @property
    def ok(self) -> bool: return all(w >= 0 for w in self.write_latency) and not any(self.errors)

    def lanes_without_window(self) -> list[int]: return [l for l, w in enumerate(self.write_latency) if w < 0]

    def as_dict(self) -> dict:
        return {"write_latency": self.write_latency, "read": [r.as_dict() for r in self.reads],
                "windows": {str(k): v for k, v in self.windows.items()}, "maps": self.maps, "errors": self.errors}


def write_latency(dram: Dram, seeds=SCAN_SEEDS, lanes=None, progress: Callable[[int, int], None] | None = None) -> Leveling:
    """A read scan at every write bitslip; per lane the bitslip with the widest read window.
    `lanes` limits the choice (the others keep their write bitslip); `progress(done, total)`
    counts bitslip rows."""
    lanes = list(range(M.LANES)) if lanes is None else list(lanes)
    windows: dict[int, list[LaneRead]] = {}
    scans = {}
    rows, total = [0], len(WRITE_BITSLIPS) * M.BITSLIPS

    def row_done() -> None:
        rows[0] += 1
        if progress:
            progress(rows[0], total)

    for wb in WRITE_BITSLIPS:
        dram.set_write_bitslip({lane: wb for lane in lanes})
        dram.write_bursts(seeds)
        scans[wb] = read_scan(dram, seeds, row_done)
        masks = tap_masks(scans[wb])
        windows[wb] = [lane_best(scans[wb], lane, dram.per_bit, masks) for lane in range(M.LANES)]
    choice, reads, maps = [-1] * M.LANES, [LaneRead() for _ in range(M.LANES)], [[] for _ in range(M.LANES)]
    for lane in lanes:
        wb = max(WRITE_BITSLIPS, key=lambda k: windows[k][lane].taps)
        if windows[wb][lane].taps >= M.MIN_WINDOW:
            choice[lane], reads[lane] = wb, windows[wb][lane]
        maps[lane] = bitslip_maps(scans[wb], lane)
    dram.set_write_bitslip({lane: max(choice[lane], 0) for lane in lanes})
    return Leveling(choice, reads, {wb: [r.taps for r in windows[wb]] for wb in WRITE_BITSLIPS}, maps)


def read_leveling(dram: Dram, lev: Leveling, seeds=SEEDS, lanes=None) -> Leveling:
    """Set each lane's read bitslip, bit offsets and centre tap; check every seed there."""
    writes = []
    for lane in (range(M.LANES) if lanes is None else lanes):
        r = lev.reads[lane]
        writes += dram.set_read(lane, r.bitslip, r.tap, r.offsets)
    dram.apply(writes)
    lev.errors = lane_errors(dram.test(seeds))
    return lev


def calibrate(dram: Dram, scan_seeds=SCAN_SEEDS, check_seeds=SEEDS,
              progress: Callable[[int, int], None] | None = None) -> Leveling:
    """Write latency then read leveling at the current phase; the settings stay in the PHY."""
    return read_leveling(dram, write_latency(dram, scan_seeds, progress=progress), check_seeds)
