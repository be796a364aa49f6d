"""The traced program before lowering: instruction nodes with affine addresses, and loop blocks.

A `Node` is one machine instruction whose register-relative address fields are still `Affine`
expressions; lowering assigns the registers. Each node also carries its memory footprint
(`Access` ranges in TMEM words, DRAM bytes or ACT RAM blocks), which the WAITC generator and
the peephole bookkeeping read. A `LoopBlock` is a hardware LOOP whose body was traced once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .affine import Affine, Loop

TMEM, DRAM, ACT = "T", "D", "A"

# Execution unit of each opcode, as the sequencer's scoreboard sees it.
UNIT_OF = {"LD": "DMA", "ST": "DMA", "MM": "MXU", "QACT": "Q", "QST": "Q", "VOP": "VPU",
           "RLD": "SEQ", "LI": "SEQ", "ADDI": "SEQ", "NOP": "SEQ", "HALT": "SEQ", "LOOP": "SEQ"}


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
    dead: bool = False            # removed by a peephole; lowering skips it

    @property
    def unit(self) -> str: return UNIT_OF[self.op]


@dataclass
class LoopBlock:
    loop: Loop
    body: list = field(default_factory=list)


def walk(items):
    """Every live Node in program order, descending into loop bodies."""
    for it in items:
        if isinstance(it, LoopBlock):
            yield from walk(it.body)
        elif not it.dead:
            yield it


def traffic(node: Node) -> int:
    """TMEM words a node reads plus writes (the peephole savings are reported in these)."""
    return sum(a.n for a in node.reads + node.writes if a.space == TMEM)
