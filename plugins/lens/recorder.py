"""Running a workload's steps on an engine and capturing each traced step for the profiler.

Two engines behind one small interface (write, read, run, close):

- `SimEngine`: a private golden machine with the timing model's trace on (`--engine sim`);
  every slice's records and counters, nothing lost, kind "sim".
- `CardEngine`: a card through the Board (`--engine card --dev DEV`; the simulated card when
  no card is present): DRAM by DMA, the program in the program area at the top of DRAM, the
  trace buffer started as asked (keep the first or the last records), the per-run counters
  and the free-running ones as SNAP differences; kind "hw". A bitstream without a trace
  buffer gives a counters-only profile (kind "board") with a warning.

`record(workload, ctx, engine, say)` runs the steps in order and returns one profile per
traced step; `say(text)` reports each profile and anything the trace lost.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from otpu_core import isa
from otpu_core.board import Board, BoardBackend
from otpu_core.commands.card_cmd import wait_showing_cycles
from otpu_core.console import spin_while, stderr
from otpu_core.errors import UsageError
from otpu_core.timing import FREE_COUNTERS
from otpu_core.target import Target

from . import profile as profile_mod
from .workloads import Context, Step, Workload

BATCH = 4096
LONG_TRACE = 2_000_000           # records that take a couple of seconds to profile


class SimEngine:
    kind = "sim"

    def __init__(self, target: Target, max_steps: int = 50_000_000):
        from otpu_core.isasim import Machine
        if target.uarch.WIN > 16:
            raise UsageError(f"target {target.name} has WIN={target.uarch.WIN}: trace records carry 4-bit window "
                             "slots, so its instructions cannot be told apart",
                             hint="profile a target with WIN <= 16 (ypcb-00338, sim-small)")
        self.target = target
        self.machine = Machine(target, trace=True, max_steps=max_steps)
        self.device = None
        self.clock_mhz = float(target.platform["core_mhz"])

    def write(self, addr: int, data: np.ndarray) -> None: self.machine.write_dram(addr, data)

    def read(self, addr: int, n: int) -> np.ndarray: return self.machine.read_dram(addr, n, 0)

    def run(self, step: Step) -> tuple[list, dict | None, dict | None]:
        from otpu_core.isasim import HALTED
        m = self.machine
        m.timing.trace = step.traced
        before = [m.counters(s) for s in range(m.cfg.S)]
        m.load(step.program.instrs, step.args)
        spin_while(lambda: m.run_for(BATCH) != HALTED, lambda: f"{step.name}: {m.steps:,} instructions", stderr())
        slices = []
        for s in range(m.cfg.S):
            counters = m.counters(s)      # the free-running ones as this run's difference, as a card's SNAPs give
            counters.update({k: counters[k] - before[s][k] for k in FREE_COUNTERS})
            slices.append(profile_mod.SliceCapture(np.asarray(m.trace_records(s), np.uint64) if step.traced else None,
                                                   counters))
        return slices, None, None

    def close(self) -> None: pass


class CardEngine:
    kind = "hw"

    def __init__(self, dev: str | None, target: str | Target | None, keep: str, timeout: float = 600.0):
        self.board = Board.open(dev, target)
        try:
            self.target = self.board.target
            self.backend = BoardBackend(self.board)
        except BaseException:
            self.board.close()
            raise
        self.keep, self.timeout = keep, timeout
        self.device = self.board.t.dev
        self.clock_mhz = (self.board.info.core_khz or 1000 * self.target.platform["core_mhz"]) / 1000
        caps = self.board.info.caps
        self.has_trace = self.board.info.regmap >= 2 and bool(caps.get("trace"))

    def write(self, addr: int, data: np.ndarray) -> None:
        prog_at = self.backend.prog_at
        if addr < prog_at + self.target.config().IMEM_WORDS * 4 and addr + data.size > prog_at:
            raise UsageError(f"the workload's DRAM image [0x{addr:x}, 0x{addr + data.size:x}) overlaps the card's "
                             f"program area at 0x{prog_at:x}")
        self.board.write(addr, data)

    def read(self, addr: int, n: int) -> np.ndarray: return self.board.read(addr, n)

    def run(self, step: Step) -> tuple[list, dict | None, dict | None]:
        board = self.board
        image = np.frombuffer(isa.encode_program(step.program.instrs), np.uint8)
        board.load_program(self.backend.prog_at, image)
        board.set_args(step.args)
        before = board.snapshot()
        trace = self.keep if step.traced and self.has_trace else None
        board.start(trace)
        stats = wait_showing_cycles(board, board, self.timeout, stderr())
        after = board.snapshot()
        counters = {"CYCLES": stats.cycles, "ICOUNT": stats.instructions, "B_RD": stats.b_reads,
                    "B_WR": stats.b_writes, "A_RD": stats.a_reads, "SW_WR": stats.a_writes, "B_STALL": stats.b_stall}
        if before and after:
            counters.update({k: after[k] - before[k] for k in FREE_COUNTERS if k in after and k in before})
        board_info = {"device": self.device, "seconds": stats.seconds, "status": stats.status,
                      "counters": dict(counters), "regmap": board.info.regmap}
        meta, records = None, None
        if trace is not None:
            tr = stats.trace
            records = np.asarray(tr["records"], np.uint64)
            meta = {k: (int(v) if not isinstance(v, str) else v) for k, v in tr.items() if k != "records"}
            meta["wrapped"] = bool(tr["wrapped"])
        return [profile_mod.SliceCapture(records, counters)], meta, board_info

    def close(self) -> None: self.board.close()


def record(w: Workload, ctx: Context, engine, say: Callable[[str, str], None]) -> list[dict]:
    """Run every step of `w` on `engine`; a profile per traced step. `say(level, text)` reports."""
    ctx.read = engine.read
    profiles = []
    for step in w.build(ctx):
        for addr, data in step.writes:
            engine.write(addr, np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        slices, meta, board_info = engine.run(step)
        if not step.traced:
            continue
        kind = engine.kind
        notes = []
        if kind == "hw" and slices[0].records is None:
            kind = "board"
        cap = profile_mod.Capture(kind, f"{step.name} ({_engine_name(engine)})", w.name, engine.target,
                                  list(step.program.instrs), list(step.program.sources), slices, engine.clock_mhz,
                                  engine.device, meta, board_info, notes)
        nrec = sum(0 if sc.records is None else sc.records.size for sc in slices)
        if nrec > LONG_TRACE:            # seconds of work: say so before it starts
            say("info", f"{step.name}: profiling {nrec:,} trace records")
        p = profile_mod.build(cap)
        profiles.append(p)
        _report(p, say)
    if not profiles:
        raise UsageError(f"workload {w.name} ran no traced step")
    return profiles


def _engine_name(engine) -> str:
    return "timing model" if engine.kind == "sim" else engine.device


def _report(p: dict, say) -> None:
    tr = p.get("trace") or {}
    roof = p["roofline"]
    parts = [f"{tr.get('records', 0):,} trace records"]
    if p["kind"] == "hw":
        parts.append(f"count {tr.get('count', 0):,}, drop {tr.get('drop', 0):,}, lost {tr.get('lost', 0):,}"
                     + (", ring wrapped" if tr.get("wrapped") else ""))
    say("info", f"{p['name']}: {p['cycles']:,} cycles, {100 * roof['efficiency']:.1f}% of roofline, "
                + "; ".join(parts))
    for n in p["notes"]:
        if n["level"] in ("warn", "bad") and ("trace" in n["text"] or "records" in n["text"]):
            say(n["level"], n["text"])

