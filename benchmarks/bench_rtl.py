"""Verilator speed of the machine's RTL: simulated cycles per second of wall time on a kernel.

Runs one kernel case of otpu_core.rtlcases (default the decoder step) on the RTL of
nangate45-small several times (the build is cached; its time is not counted) and prints the
simulated cycles per second of the whole simulator process (loading the DRAM image, running,
dumping the state), and of the run alone (the process time of an empty program subtracted).
The ratio is against the seed's 35-50 K cycles/s for its card configuration under Verilator.
As a baseline run in the same process it also prints the golden simulator with its timing model
on the same program: model cycles per second of wall time.

Usage: python benchmarks/bench_rtl.py [--kernel decoder_step] [--repeat 3]
"""
from __future__ import annotations

import argparse
import time

from otpu_core import rtlcases
from otpu_core.rtlbackend import RtlBackend
from otpu_core.rtlcheck import golden_machine, reset_state

SEED_LOW, SEED_HIGH = 35_000, 50_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="decoder_step", help="a case of otpu_core.rtlcases")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", default="nangate45-small")
    a = ap.parse_args()
    case = next((c for c in rtlcases.kernel_cases(a.target) if c.name == a.kernel), None)
    if case is None:
        raise SystemExit(f"no kernel case {a.kernel!r}; cases: " + ", ".join(c.name for c in rtlcases.kernel_cases(a.target)))
    be = RtlBackend(a.target, progress=print)
    img, prog, values = case.build()
    args = prog.arg_words(**values)
    empty = be.prepare("halt")
    best_run = best_empty = float("inf")
    cycles = 0
    for _ in range(a.repeat):
        reset_state(be, img.dram[: img.cursor])
        be.run(empty)
        best_empty = min(best_empty, be.seconds)
        reset_state(be, img.dram[: img.cursor])
        stats = be.run(prog, args)
        cycles = stats.cycles
        best_run = min(best_run, be.seconds)
    sim = cycles / max(best_run - best_empty, 1e-6)
    whole = cycles / best_run
    reset_state(be, img.dram[: img.cursor])
    m = golden_machine(be)
    t0 = time.perf_counter()
    m.load(list(prog.instrs), args, waits=list(prog.waits))
    m.run()
    gold_s = time.perf_counter() - t0
    model = m.counters()["CYCLES"]
    print(f"kernel {case.name} on {a.target}: {cycles} RTL cycles ({model} in the timing model)")
    print(f"  RTL simulator process: {best_run:.3f} s = {whole / 1e3:.1f} K cycles/s")
    print(f"  RTL run alone (empty program's {best_empty:.3f} s taken off): {sim / 1e3:.1f} K cycles/s")
    print(f"  ratio against the seed's {SEED_LOW // 1000}-{SEED_HIGH // 1000} K cycles/s: "
          f"{sim / SEED_HIGH:.2f}-{sim / SEED_LOW:.2f}")
    print(f"  baseline, same process: golden simulator + timing model {gold_s:.3f} s = "
          f"{model / gold_s / 1e3:.1f} K model cycles/s (RTL/golden {sim / (model / gold_s):.2f})")


if __name__ == "__main__":
    main()
