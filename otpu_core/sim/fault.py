"""Simulator errors: `Fault` (raised by opcode semantics) and `SimError` (what a user sees).

Semantics code raises `Fault(kind, reason)` without knowing where it runs; the slice that
executes the instruction turns it into a `SimError` naming slice, pc, the disassembled
instruction and the reason. `SimError` is a `UsageError`: a bad program is bad input (exit 2).
"""
from __future__ import annotations

from ..errors import UsageError

# Every kind a SimError can carry; tests reach each one.
KINDS = ("illegal-opcode", "out-of-range", "misaligned", "loop-depth", "loop-end", "waitw-timeout",
         "hazard", "shape", "collective", "program-end", "step-limit", "chain")


class Fault(Exception):
    """An instruction cannot execute; `kind` is one of KINDS."""

    def __init__(self, kind: str, reason: str):
        assert kind in KINDS, kind
        super().__init__(reason)
        self.kind, self.reason = kind, reason


class SimError(UsageError):
    """A program did something the machine refuses; the message says where and why."""

    def __init__(self, kind: str, reason: str, slice_id: int | None = None, pc: int | None = None,
                 disasm: str | None = None, hint: str | None = None):
        where = []
        if slice_id is not None:
            where.append(f"slice {slice_id}")
        if pc is not None:
            where.append(f"pc {pc}")
        head = ", ".join(where)
        text = reason if not head else f"{head}" + (f" ({disasm})" if disasm else "") + f": {reason}"
        super().__init__(text, hint)
        self.kind, self.reason, self.slice_id, self.pc, self.disasm = kind, reason, slice_id, pc, disasm
