"""What a profile knows about the program itself: one row per static instruction, and its sources.

For each pc: the mnemonic class (`mm.int8`, `vop.exp2sub`, `ld` ...), the unit, the nominal
work the timing model's cost table gives it (`otpu_core.sim.costs.work_of`: unit cycles, DRAM
bytes by port, MXU MACs), the disassembly, and the source frames the compiler recorded
(`ol.Program.sources`). Work does not depend on the resolved addresses, so it is computed once
per pc and shared by every dynamic instance.
"""
from __future__ import annotations

import linecache
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from otpu_core import isa
from otpu_core.asm import disasm_one
from otpu_core.isa import Op
from otpu_core.sim.costs import work_of
from otpu_core.target import Target

WEIGHT_FORMAT = {v: k for k, v in isa.WF_NAMES.items()}
_ROOT = Path(__file__).resolve().parents[2]


def class_of(ins: isa.Instr) -> str:
    if ins.op == Op.VOP:
        return f"vop.{ins.func.name.lower()}"
    if ins.op == Op.MM:
        return f"mm.{WEIGHT_FORMAT.get(ins.wf, ins.wf)}"
    return ins.op.name.lower()


def macs_of(ins: isa.Instr, cfg) -> int:
    if ins.op != Op.MM:
        return 0
    f = ins.fields
    rows = 2 * f["m"] if ins.has(isa.F_PAIR) else f["m"]
    return f["n"] * f["kb"] * cfg.D * rows


def display_path(path: str) -> str:
    """A source file as a reader knows it: relative to the suite's checkout or the working directory."""
    p = Path(path).resolve()
    for base in (_ROOT, Path.cwd()):
        try:
            return str(p.relative_to(base))
        except ValueError:
            continue
    return path


@dataclass
class Sources:
    """Distinct source chains, each with an id: the innermost frame and the callers outward."""
    entries: list = field(default_factory=list)
    _ids: dict = field(default_factory=dict)

    def id_of(self, chain) -> int:
        if not chain:
            return -1
        key = tuple(tuple(f) for f in chain)
        if key not in self._ids:
            frames = [{"file": display_path(f), "line": int(ln), "func": fn,
                       "text": linecache.getline(f, int(ln)).strip()} for f, ln, fn in key]
            self._ids[key] = len(self.entries)
            self.entries.append({**frames[0], "chain": frames[1:]})
        return self._ids[key]


@dataclass
class ProgramTable:
    """Per-pc arrays (index = pc) and the JSON rows of one program."""
    name: str
    instrs: list
    cls: np.ndarray
    unit: np.ndarray
    work: np.ndarray
    bbytes: np.ndarray
    abytes: np.ndarray
    macs: np.ndarray
    stream: np.ndarray          # DRAM cycles at the sustained rate
    src: np.ndarray
    classes: list
    rows: list
    fetch_bytes: int

    @property
    def size(self) -> int: return len(self.instrs)


def build(name: str, instrs: list, sources_per_pc: list, target: Target, sources: Sources,
          classes: list, class_ids: dict, waits: bool = False) -> ProgramTable:
    cfg, ua = target.config(), target.uarch
    bpc = ua.DRAM_BYTES_PER_CYCLE * ua.DRAM_EFFICIENCY
    n = len(instrs)
    arrays = {k: np.zeros(n, np.int64) for k in ("cls", "unit", "work", "bbytes", "abytes", "macs", "stream", "src")}
    rows = []
    for pc, ins in enumerate(instrs):
        cname = class_of(ins)
        if cname not in class_ids:
            class_ids[cname] = len(classes)
            classes.append(cname)
        w = work_of(ins, list(ins.words), cfg, ua)
        chain = sources_per_pc[pc] if pc < len(sources_per_pc) else ()
        src = sources.id_of(chain)
        nbytes = w.dram_bytes
        vals = {"cls": class_ids[cname], "unit": -1 if w.unit is None else w.unit, "work": w.compute,
                "bbytes": w.b_rd + w.b_wr, "abytes": w.a_rd + w.sw_wr, "macs": macs_of(ins, cfg),
                "stream": math.ceil(nbytes / bpc) if nbytes else 0, "src": src}
        for k, v in vals.items():
            arrays[k][pc] = v
        rows.append([pc, cname, disasm_one(ins), vals["unit"], src, vals["work"], vals["bbytes"], vals["abytes"],
                     vals["macs"], ins.flags, int(ins.op)])
    fetch = isa.BYTES_PER_INSTR * n + (8 * n if waits else 0)
    return ProgramTable(name, list(instrs), classes=classes, rows=rows, fetch_bytes=fetch, **arrays)


PROGRAM_COLUMNS = ["pc", "class", "asm", "unit", "src", "work", "bbytes", "abytes", "macs", "flags", "op"]

