"""The traced program before lowering: instruction nodes with affine addresses, and loop blocks.

A `Node` is one machine instruction whose register-relative address fields are still `Affine`
expressions; lowering assigns the registers. Each node also carries its memory footprint
(`Access` ranges in TMEM words, DRAM bytes or ACT RAM blocks), which the WAITC generator and
the peephole bookkeeping read, and the source frames that emitted it (profilers map run time
back to kernel lines through `Program.sources`). A `LoopBlock` is a hardware LOOP whose body was traced once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .affine import Affine, Loop

TMEM, DRAM, ACT = "T", "D", "A"


@dataclass
class Access:
    """A footprint: `n` units from `lo` in one space (TMEM words, DRAM bytes or ACT blocks)."""
    space: str
    lo: Affine
    n: int


@dataclass
class Node:
    """One instruction. `addrs` are the register-relative fields (name -> Affine), `imm` the rest."""
    op: str
    addrs: dict[str, Affine]
    imm: dict[str, Any]
    reads: list[Access] = field(default_factory=list)
    writes: list[Access] = field(default_factory=list)
    where: tuple | None = None
    chain: tuple = ()             # source frames that emitted it (errors.source_chain)
    dead: bool = False            # removed by a peephole; lowering skips it


@dataclass
class LoopBlock:
    loop: Loop
    body: list = field(default_factory=list)
    chain: tuple = ()             # the `ol.range` line (its LOOP and register steps map there)
