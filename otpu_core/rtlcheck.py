"""RTL against the golden simulator: one program, the same DRAM image and TMEM on both, every
TMEM and DRAM bit compared, and the cycle counts of the RTL and of the timing model side by side.

`compare_run(rtl, program, args, waits)` runs the program on an `RtlBackend` and on a golden
`Machine` holding the same state (DRAM, TMEM, ACT RAM copied from the backend before the run)
and returns a `Comparison`; `compare_case` does so for a kernel case, `compare_op_checks` for
every op check of selftest/diag. The program area the RTL loads its program from is written into the
golden DRAM too, so the two memories are compared whole. A program the golden simulator faults on
must stop the RTL with the same fault: an error code that stands for the golden's kind
(`RTL_KINDS`) at the same pc (the faulting instruction's); the memories are not compared then
(the golden stops at the fault, the RTL finishes the older instructions in flight).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .isasim import Machine, SimError
from .rtlbackend import RtlBackend, RtlFault

# the golden simulator's fault kinds each RTL error code (otpu_defs.svh) stands for
RTL_KINDS = {1: {"illegal-opcode"}, 2: {"out-of-range"}, 3: {"out-of-range"}, 4: {"shape", "misaligned", "out-of-range"},
             5: {"illegal-opcode"}, 6: {"loop-end", "loop-depth"}, 7: {"chain"}, 8: {"waitw-timeout"},
             9: {"program-end"}}


@dataclass
class Comparison:
    tmem_words: int               # TMEM words that differ
    dram_bytes: int               # DRAM bytes that differ
    first_tmem: int | None
    first_dram: int | None
    rtl_cycles: int
    model_cycles: int
    golden_fault: SimError | None = None
    rtl_fault: RtlFault | None = None

    @property
    def same_fault(self) -> bool:
        """Both stopped on a fault: the same instruction (pc) and an RTL code for the golden's kind."""
        g, r = self.golden_fault, self.rtl_fault
        return g is not None and r is not None and g.pc == r.pc and g.kind in RTL_KINDS.get(r.code, ())

    @property
    def ok(self) -> bool:
        if self.golden_fault or self.rtl_fault:
            return self.same_fault
        return self.tmem_words == 0 and self.dram_bytes == 0

    @property
    def ratio(self) -> float: return self.rtl_cycles / self.model_cycles if self.model_cycles else float("nan")

    def message(self) -> str:
        g, r = self.golden_fault, self.rtl_fault
        if g or r:
            both = (f"the golden simulator: {g.message if g else 'no fault'}; "
                    f"the RTL: {r.message if r else 'no fault'}")
            return ("the same fault: " if self.same_fault else "the faults differ: ") + both
        if self.ok:
            return f"bit-exact; {self.rtl_cycles} RTL cycles, {self.model_cycles} model cycles (ratio {self.ratio:.3f})"
        return (f"{self.tmem_words} TMEM words differ (first {self.first_tmem}), {self.dram_bytes} DRAM bytes differ "
                f"(first {None if self.first_dram is None else hex(self.first_dram)})")


def golden_machine(rtl: RtlBackend) -> Machine:
    """A golden Machine (with the timing model) holding a copy of the backend's state."""
    m = Machine(rtl.target, drams=[np.zeros(rtl.cfg.DRAM_BYTES, np.uint8) if rtl.cfg.DRAM_BYTES <= rtl.dram_bytes
                                   else None])
    m.write_dram(0, rtl.dram[: rtl.dram_bytes])
    sl = m.slice
    sl.tmem.t[:] = rtl.tmem
    sl.act.q[:] = rtl.act_q
    sl.act.scale[:] = rtl.act_scale
    sl.act.sub[:] = rtl.act_sub
    return m


def compare_run(rtl: RtlBackend, program, args=None, waits=None) -> Comparison:
    prog = rtl.prepare(program, waits)
    m = golden_machine(rtl)
    m.write_dram(rtl.prog_at, prog.image)
    golden = None
    try:
        m.load(list(prog.instrs), args, waits=list(prog.waits) if prog.waits is not None else None)
        m.run()
    except SimError as e:
        golden = e
    try:
        stats = rtl.run(prog, args)
    except RtlFault as e:
        return Comparison(0, 0, None, None, rtl.last["cycles"], 0, golden, e)
    if golden:
        return Comparison(0, 0, None, None, stats.cycles, 0, golden)
    gd = m.slice.dram.bytes[: rtl.dram_bytes]
    dt = np.flatnonzero(rtl.tmem != m.slice.tmem.t)
    dd = np.flatnonzero(rtl.dram[: rtl.dram_bytes] != gd)
    return Comparison(int(dt.size), int(dd.size), int(dt[0]) if dt.size else None, int(dd[0]) if dd.size else None,
                      stats.cycles, m.counters()["CYCLES"])


def reset_state(rtl: RtlBackend, image: np.ndarray | None = None) -> None:
    """A cold machine: DRAM zero except `image` (from address 0), TMEM and ACT RAM zero."""
    rtl.dram[:] = 0
    if image is not None:
        rtl.write(0, image)
    rtl.tmem[:] = 0
    rtl.act_q[:] = 0
    rtl.act_scale[:] = 0
    rtl.act_sub[:] = 0


def compare_case(rtl: RtlBackend, case) -> Comparison:
    """A kernel case (otpu_core.rtlcases) from a cold machine, with its compiled wait table."""
    img, prog, values = case.build()
    reset_state(rtl, img.dram[: img.cursor])
    return compare_run(rtl, prog, prog.arg_words(**values))


def compare_op_checks(rtl: RtlBackend) -> tuple[dict[str, Comparison], list[str]]:
    """({title: Comparison} for every op check of selftest/diag, each from the diag image; the
    titles of the checks the target cannot run: the PAIR one without column reuse)."""
    from . import opchecks
    image = opchecks.diag_image(rtl.cfg)
    checks = opchecks.op_checks(rtl.cfg, gen=True, waitw=True) + [opchecks.demo_check(rtl.cfg),
                                                                  opchecks.masked_check(rtl.cfg)]
    results, refused = {}, []
    for check in checks:
        if "pair" in check.caps and not rtl.cfg.PAIR:
            refused.append(check.title)
            continue
        reset_state(rtl)
        for addr, data in image.items():
            rtl.write(addr, data)
        results[check.title] = compare_run(rtl, list(check.program))
    return results, refused
