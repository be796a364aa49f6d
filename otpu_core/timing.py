"""The timing model: cycles, counters and trace records of a run, from its instruction stream.

Timing is data-independent, so it is computed from each executed instruction's resolved fields
(the simulator passes them at dispatch; loop trip counts are implicit in the stream) and the
target's uarch layer. The model (docs/simulator.md "Timing model"):

- The sequencer dispatches at most one instruction per cycle into a window of WIN slots;
  scalar instructions (NOP, LI, ADDI, LOOP) retire in the sequencer and take no slot.
- Five units (DMA, MXU, QUANT, VPU, COLL) each run their instructions in program order, one
  at a time; different units overlap unless footprints conflict (RAW, WAR, WAW on [lo, hi)
  ranges of TMEM, DRAM or ACT RAM): an instruction starts after every older in-flight
  instruction it conflicts with has completed. An MM starts streaming once its DRAM and ACT
  conflicts clear; a TMEM conflict only delays its write-back. BAR waits for everything.
- DRAM is one shared resource per slice with DRAM_BYTES_PER_CYCLE * DRAM_EFFICIENCY bytes per
  cycle and DRAM_LATENCY cycles to the first beat; transfers are served in issue order.
- Rates: MXU one D-byte chunk per cycle (4-bit: one D-block per cycle unless PAIR; M > MCOLS
  replays each chunk ceil(M/MCOLS) times) plus MXU_LATENCY; VPU LANES words per cycle
  elementwise and COMPOSITE_COLS_PER_CYCLE for exp2/recip/rsqrt/log2/exp2sub; DMA and the
  quantiser move LANES TMEM words per cycle; a QST with element stride > 1 (V^T append) costs
  VT_APPEND_CYCLES per byte (one 64-byte read-modify-write each).

On SEQ_WC targets a program's WAITC wait entries replace the scoreboard (docs/isa.md 4) and
footprints only check that the entries order every real dependency.

Public API: `TimingModel(target, slices, trace, log)`, its `issue(sid, pc, op, words, work,
wait=None)`, `rld`, `halt`, `collective`, `load_program`, `reset_run`, `counters(sid)`,
`records(sid)` (64-bit trace records with P/Q windows), `clear_trace(sid)`, the per-instruction
`log` (with `keep_log`); `Work` is built by `otpu_core.sim.costs.work_of`.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from . import isa, tracefmt
from .sim.activity import Activity
from .sim.fault import Fault
from .target import Target

DMA, MXU, QNT, VPU, COLL = range(5)
TMEM, DRAM, ACT = range(3)
BEAT = 64
RLD_CYCLES = 3          # register write after the TMEM word is readable
DISPATCH_CYCLES = 1     # decode before a unit can start

# Card counters (host.md 1.3): per-run ones first, then the free-running ones; COLL_BUSY is the
# simulator's own (the card has no collective unit counter).
RUN_COUNTERS = ("CYCLES", "ICOUNT", "B_RD", "B_WR", "A_RD", "SW_WR", "B_STALL")
FREE_COUNTERS = ("RUNNING", "MXU_BUSY", "MXU_MAC", "VPU_BUSY", "QNT_BUSY", "DMA_BUSY", "TMEM_DENY",
                 "DRAM_RD", "DRAM_WR", "DRAM_WAIT", "INSTR", "MXU_STARVE", "COLL_BUSY")
BUSY_OF = {DMA: "DMA_BUSY", MXU: "MXU_BUSY", QNT: "QNT_BUSY", VPU: "VPU_BUSY", COLL: "COLL_BUSY"}


@dataclass(slots=True)
class Work:
    """What one instruction asks of the machine; built by `otpu_core.sim.costs.work_of`."""
    unit: int | None                 # None: retires in the sequencer
    compute: int = 0                 # unit cycles not counting DRAM
    reads: tuple = ()                # ((space, lo, hi), ...)
    writes: tuple = ()
    b_rd: int = 0                    # DRAM bytes by port (host.md 1.2: B = MXU weights + DMA, A = MXU scales)
    b_wr: int = 0
    a_rd: int = 0
    sw_wr: int = 0                   # quantiser (QST) writes
    latency: int = 0                 # pipeline cycles after the last busy cycle
    macs: int = 0                    # MXU chunk steps (MXU_MAC)
    deny: int = 0                    # TMEM bank-conflict cycles (TMEM_DENY)
    barrier: bool = False            # BAR: waits for every older instruction
    late_writes: bool = False        # MM: TMEM write conflicts delay only the write-back

    @property
    def dram_bytes(self) -> int: return self.b_rd + self.b_wr + self.a_rd + self.sw_wr


ALL_DRAM = (DRAM, 0, 1 << 64)        # WAITW's footprint: all of DRAM, read and treated as written


@dataclass(slots=True)
class _Flight:
    end: int
    slot: int
    reads: tuple
    writes: tuple
    release: int                     # operands all read
    pc: int
    barrier: bool                    # BAR: nothing younger starts before it completes


def _overlap(a: tuple, b: tuple) -> bool:
    for sa, lo, hi in a:
        for sb, lo2, hi2 in b:
            if lo < hi2 and lo2 < hi and sa == sb:
                return True
    return False


def _conflict(reads: tuple, writes: tuple, f: _Flight) -> bool:
    """RAW, WAR or WAW between a new instruction's ranges and an older in-flight one's."""
    return _overlap(reads, f.writes) or _overlap(writes, f.writes) or _overlap(writes, f.reads)


def _check_waits(sc: "SliceClock", work: Work, start: int, pc: int) -> None:
    """A wait entry must order every conflicting older instruction: RAW and WAW need it complete,
    WAR released, before this one starts."""
    reads, writes = _gating(work)
    for f in sc.inflight:
        if f.end > start and (_overlap(reads, f.writes) or _overlap(writes, f.writes)):
            raise Fault("hazard", f"the wait entry lets this instruction start at cycle {start - sc.run_start}, "
                                  f"before the conflicting instruction at pc {f.pc} completes (cycle {f.end - sc.run_start})")
        if f.release > start and _overlap(writes, f.reads):
            raise Fault("hazard", f"the wait entry lets this instruction write at cycle {start - sc.run_start}, "
                                  f"before the instruction at pc {f.pc} has read its operands (cycle {f.release - sc.run_start})")


def _gating(work: Work) -> tuple[tuple, tuple]:
    """The ranges whose conflicts hold back an instruction's start (an MM's TMEM ones do not)."""
    if not work.late_writes:
        return work.reads, work.writes
    return (tuple(r for r in work.reads if r[0] != TMEM), tuple(r for r in work.writes if r[0] != TMEM))


@dataclass
class SliceClock:
    """Scheduler state and counters of one slice."""
    sid: int
    win: int
    next_dispatch: int = 0
    reg_ready: int = 0
    dram_free: int = 0
    high: int = 0
    unit_free: list = field(default_factory=lambda: [0] * 5)
    inflight: list = field(default_factory=list)
    free_slots: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)
    groups: list = field(default_factory=list)     # (cycle, order, sub, seq, records)
    seq: int = 0
    run_start: int = 0
    fetch_bytes: int = 0                            # program image still to fetch before dispatch
    queue_ends: list = field(default_factory=lambda: [[] for _ in range(isa.NQUEUES)])  # WAITC queues
    releases: list = field(default_factory=list)    # release cycles of queued dispatches, oldest first
    activity: Activity = field(default_factory=Activity)   # P/Q window intervals (with trace)
    ports: dict = field(default_factory=lambda: dict.fromkeys(tracefmt.H_FIELDS, 0))  # beats for the H record

    def __post_init__(self):
        self.free_slots = list(range(self.win))
        self.counters = dict.fromkeys(RUN_COUNTERS + FREE_COUNTERS, 0)

    def retire(self, now: int) -> None:
        """Free the slots of instructions complete by `now`."""
        if self.inflight and min(f.end for f in self.inflight) <= now:
            keep = []
            for f in self.inflight:
                if f.end <= now:
                    heapq.heappush(self.free_slots, f.slot)
                else:
                    keep.append(f)
            self.inflight = keep


class TimingModel:
    """Cycle-level schedule of S slices under the target's uarch figures."""

    def __init__(self, target: Target, slices: int | None = None, trace: bool = False, log: bool = False):
        self.cfg, self.ua = target.config(), target.uarch
        self.slices = [SliceClock(s, self.ua.WIN) for s in range(slices or self.cfg.S)]
        self.bytes_per_cycle = self.ua.DRAM_BYTES_PER_CYCLE * self.ua.DRAM_EFFICIENCY
        self.trace, self.keep_log = trace, log
        self.log: list[tuple] = []   # (sid, pc, op, dispatch, start, end) per instruction when log=True

    # -- scheduling -------------------------------------------------------------------------------
    def _emit(self, sc: SliceClock, cycle: int, order: int, sub: int, recs: list[int]) -> None:
        sc.seq += 1
        sc.groups.append((cycle, order, sub, sc.seq, recs))

    def _dispatch(self, sc: SliceClock) -> int:
        if sc.fetch_bytes:
            self._fetch(sc)
        d = max(sc.next_dispatch, sc.reg_ready)
        sc.retire(d)
        return d

    def _gate(self, sc: SliceClock, work: Work, ready: int, entry) -> tuple[int, int]:
        """(earliest start, earliest write-back) under the scoreboard, or under a WAITC wait entry."""
        if entry is not None:
            return self._wait_entry(sc, entry, ready), ready
        write_ready = ready
        reads, writes = _gating(work)
        for f in sc.inflight:
            if f.end <= ready:
                continue
            if work.barrier or f.barrier or _conflict(reads, writes, f):
                ready = f.end
            elif work.late_writes and _conflict(work.reads, work.writes, f):
                write_ready = max(write_ready, f.end)
        return ready, max(write_ready, ready)

    def _wait_entry(self, sc: SliceClock, entry, ready: int) -> int:
        """docs/isa.md 4: counts bound each queue's incomplete instructions, the mask waits for
        releases, sync for everything; no footprint is compared."""
        if entry.sync:
            ready = max([ready] + [f.end for f in sc.inflight])
        for q, count in enumerate(entry.counts):
            ends = sc.queue_ends[q]
            if count != isa.WC_ANY and len(ends) > count:
                ready = max(ready, ends[-(count + 1)])
        mask, j = entry.mask, 0
        while mask:
            if mask & 1 and j < len(sc.releases):
                ready = max(ready, sc.releases[-(j + 1)])
            mask >>= 1
            j += 1
        return ready

    def ready_time(self, sid: int, work: Work) -> int:
        """The cycle `work` could start if issued next on slice `sid` (nothing is committed)."""
        sc = self.slices[sid]
        d = self._dispatch(sc)
        if not sc.free_slots:
            d = max(d, min(f.end for f in sc.inflight))
        ready, _ = self._gate(sc, work, d + DISPATCH_CYCLES, None)
        return max(ready, sc.unit_free[work.unit]) if work.unit is not None else ready

    def issue(self, sid: int, pc: int, op: int, words: tuple[int, int, int], work: Work,
              not_before: int = 0, wait=None) -> tuple[int, int, int]:
        """Schedule one instruction; returns (dispatch, start, end) cycles. `wait` is its WAITC
        entry on a SEQ_WC target: it replaces the scoreboard, and an entry too weak to order a
        conflicting older instruction is a `Fault("hazard")`."""
        sc, ua, c = self.slices[sid], self.ua, self.slices[sid].counters
        c["ICOUNT"] += 1
        c["INSTR"] += 1
        d = self._dispatch(sc)
        if work.unit is None:                      # NOP, LI, ADDI, LOOP
            sc.next_dispatch = d + 1
            self._advance(sc, d + 1)
            if self.keep_log:
                self.log.append((sid, pc, op, d, d, d + 1))
            return d, d, d + 1
        if not sc.free_slots:
            d = max(d, min(f.end for f in sc.inflight))
            sc.retire(d)
        slot = heapq.heappop(sc.free_slots)
        sc.next_dispatch = d + 1
        ready, write_ready = self._gate(sc, work, d + DISPATCH_CYCLES, wait)
        start = max(ready, sc.unit_free[work.unit], not_before)
        nbytes = work.dram_bytes
        stream_end, wait, ds, de = start, 0, start, start
        if nbytes:
            ds = max(start, sc.dram_free)
            wait = ds - start
            de = ds + math.ceil(nbytes / self.bytes_per_cycle)
            sc.dram_free = de
            stream_end = de + ua.DRAM_LATENCY
        busy_end = max(start + work.compute, stream_end)
        release = busy_end
        end = max(busy_end, write_ready) + work.latency
        if wait is not None:
            _check_waits(sc, work, start, pc)
        sc.unit_free[work.unit] = end
        sc.inflight.append(_Flight(end, slot, work.reads, work.writes, release, pc, work.barrier))
        queue = isa.queue_of(isa.Op(op))
        if queue is not None:
            sc.queue_ends[queue].append(end)
            del sc.queue_ends[queue][:-isa.WC_ANY]
            sc.releases.append(release)
            del sc.releases[:-isa.WC_MASK_BITS]
        starve = max(0, stream_end - (start + work.compute)) if work.unit == MXU else 0
        # counters
        c[BUSY_OF[work.unit]] += end - start
        c["MXU_MAC"] += work.macs
        c["MXU_STARVE"] += starve
        c["TMEM_DENY"] += work.deny
        c["DRAM_WAIT"] += wait
        c["B_RD"] += -(-work.b_rd // BEAT)
        c["B_WR"] += -(-work.b_wr // BEAT)
        c["A_RD"] += -(-work.a_rd // BEAT)
        c["SW_WR"] += -(-work.sw_wr // BEAT)
        c["DRAM_RD"] += -(-(work.b_rd + work.a_rd) // BEAT)
        c["DRAM_WR"] += -(-(work.b_wr + work.sw_wr) // BEAT)
        if work.b_rd or work.b_wr:
            c["B_STALL"] += wait + starve
        p = sc.ports
        p["bmxu" if work.unit == MXU else "bdma"] += -(-(work.b_rd + work.b_wr) // BEAT)
        p["amxu"] += -(-work.a_rd // BEAT)
        p["aq"] += -(-work.sw_wr // BEAT)
        self._advance(sc, end)
        if self.keep_log:
            self.log.append((sid, pc, op, d, start, end))
        if self.trace:  # record cycles count from the run's first cycle
            self._note_activity(sc, work, start, ds, de, busy_end, end, starve)
            r = sc.run_start
            self._emit(sc, d, 3, 0, tracefmt.dispatch(d - r, slot, pc, op, *words))
            self._emit(sc, start, 2, work.unit, tracefmt.start(start - r, slot, work.unit, ready - r))
            if work.unit == MXU:
                self._emit(sc, release, 0, slot, tracefmt.release(release - r, slot))
            self._emit(sc, end, 1, slot, tracefmt.end(end - r, slot))
            if work.unit in tracefmt.U_FIELDS:
                vals = (starve, wait, 0, work.deny) if work.unit == MXU else (0,)
                self._emit(sc, end, 4, work.unit, tracefmt.unit_counters(end - r, work.unit, vals))
        return d, start, end

    @staticmethod
    def _note_activity(sc: SliceClock, work: Work, start: int, ds: int, de: int, busy_end: int, end: int,
                       starve: int) -> None:
        """What the P/Q activity windows count for one instruction (docs/simulator.md)."""
        act, nbytes = sc.activity, work.dram_bytes
        if nbytes:
            b, a = (work.b_rd + work.b_wr) / nbytes, work.a_rd / nbytes
            act.add("bm" if work.unit == MXU else "bd", ds, de, b)
            act.add("am", ds, de, a)
            act.add("aq", ds, de, work.sw_wr / nbytes)
            if b:
                act.add("bs", start, ds)
            if a or work.sw_wr:
                act.add("as", start, ds)
        if work.unit == MXU:
            act.add("mx", start, busy_end, work.macs / max(busy_end - start, 1))
            act.add("fm", start, end, work.deny / max(end - start, 1))
            act.add("ms", busy_end - starve, busy_end)

    def _advance(self, sc: SliceClock, cycle: int) -> None:
        if cycle > sc.high:
            sc.counters["RUNNING"] += cycle - sc.high
            sc.high = cycle
            sc.counters["CYCLES"] = cycle - sc.run_start

    def rld(self, sid: int, pc: int, op: int, addr: int) -> tuple[int, int, int]:
        """RLD: read a TMEM word after its older writers; younger instructions wait for the register."""
        sc = self.slices[sid]
        d = self._dispatch(sc)
        word = ((TMEM, addr, addr + 1),)
        ready = max([d + DISPATCH_CYCLES] + [f.end for f in sc.inflight if _overlap(word, f.writes)])
        end = ready + RLD_CYCLES
        sc.next_dispatch = d + 1
        sc.reg_ready = end
        sc.counters["ICOUNT"] += 1
        sc.counters["INSTR"] += 1
        self._advance(sc, end)
        if self.keep_log:
            self.log.append((sid, pc, op, d, ready, end))
        return d, ready, end

    def collective(self, entries: list[tuple[int, int, int, tuple, Work]]) -> None:
        """BAR/GATHER on every slice at once: (sid, pc, op, words, work) each; they start together."""
        start = max(self.ready_time(sid, work) for sid, _, _, _, work in entries)
        for sid, pc, op, words, work in entries:
            self.issue(sid, pc, op, words, work, not_before=start)

    def halt(self, sid: int, final: bool = True) -> int:
        """HALT: the run ends when every unit is idle (the H record's cycle + 1 is CYCLES); a HALT
        CHAIN (final=False) continues the run with the next program."""
        sc = self.slices[sid]
        d = self._dispatch(sc)
        last = max([d, sc.high - 1] + [f.end for f in sc.inflight])
        sc.counters["ICOUNT"] += 1
        sc.counters["INSTR"] += 1
        self._advance(sc, last + 1)
        sc.next_dispatch = last + 1
        if self.trace and final:
            self._emit(sc, last, 5, 0, tracefmt.halt(last - sc.run_start, [sc.ports[k] for k in tracefmt.H_FIELDS]))
        return sc.counters["CYCLES"]

    def load_program(self, sid: int, nbytes: int) -> None:
        """The sequencer fetches a program image of `nbytes` from DRAM before its first dispatch
        (accounted when the run starts executing, so counters move only while running)."""
        self.slices[sid].fetch_bytes = nbytes

    def _fetch(self, sc: SliceClock) -> None:
        nbytes, sc.fetch_bytes = sc.fetch_bytes, 0
        start = max(sc.next_dispatch, sc.dram_free)
        sc.counters["DRAM_WAIT"] += start - sc.next_dispatch
        sc.dram_free = start + math.ceil(nbytes / self.bytes_per_cycle)
        sc.next_dispatch = sc.dram_free + self.ua.DRAM_LATENCY
        sc.counters["DRAM_RD"] += -(-nbytes // BEAT)
        if self.trace:
            sc.activity.add("ld", start, sc.dram_free)
        self._advance(sc, sc.next_dispatch)

    def reset_run(self, sid: int) -> None:
        """A new run on slice `sid`: per-run counters restart, free-running ones keep counting."""
        sc = self.slices[sid]
        base = sc.high
        sc.inflight.clear()
        sc.free_slots = list(range(self.ua.WIN))
        for k in RUN_COUNTERS:
            sc.counters[k] = 0
        sc.next_dispatch = sc.reg_ready = sc.dram_free = sc.run_start = base
        sc.unit_free = [base] * 5
        sc.ports = dict.fromkeys(tracefmt.H_FIELDS, 0)
        sc.queue_ends = [[] for _ in range(isa.NQUEUES)]
        sc.releases = []
        sc.groups.clear()
        sc.activity.clear()

    # -- results ----------------------------------------------------------------------------------
    def counters(self, sid: int = 0) -> dict[str, int]:
        return dict(self.slices[sid].counters)

    def records(self, sid: int = 0) -> list[int]:
        """The slice's trace records of the current run, oldest first, in the card's in-cycle
        order, with a P and a Q activity window every WINDOW_CYCLES cycles (the last one short)."""
        sc = self.slices[sid]
        windows = [(cycle, 6, 0, 0, recs) for cycle, recs in sc.activity.records(sc.run_start, sc.high)]
        out: list[int] = []
        for g in sorted(sc.groups + windows, key=lambda g: g[:4]):
            out.extend(g[4])
        return out

    def clear_trace(self, sid: int) -> None:
        """Forget the recorded trace (a card clearing its trace buffer)."""
        self.slices[sid].groups.clear()
        self.slices[sid].activity.clear()
