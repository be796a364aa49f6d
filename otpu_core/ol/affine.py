"""Affine address expressions: a constant plus integer multiples of loop, run-time and device variables.

Every address an `ol` program computes is one of these. Lowering turns the variable part into
an address register (stepped by ADDI at the end of each loop body) and the constant into the
instruction's immediate, so the variable part (`key`) decides which register an address uses.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Union

from .errors import CompileError

_ids = itertools.count(1)


@dataclass(eq=False)
class Var:
    """Base of the three variable kinds; identity is the object itself."""
    name: str
    uid: int = field(default_factory=lambda: next(_ids), init=False)

    def __hash__(self) -> int: return self.uid

    def __repr__(self) -> str: return self.name

    # A variable used in arithmetic becomes an Affine.
    def _aff(self) -> "Affine": return Affine(0, {self: 1})

    def __add__(self, o): return self._aff() + o
    __radd__ = __add__

    def __sub__(self, o): return self._aff() - o

    def __rsub__(self, o): return -self._aff() + o

    def __mul__(self, o): return self._aff() * o
    __rmul__ = __mul__

    def __neg__(self): return -self._aff()


@dataclass(eq=False, repr=False)
class Loop(Var):
    """The induction variable of a hardware LOOP; `count` is static, or `rcount` names a device register."""
    count: int = 0
    rcount: int = 0
    depth: int = 0


@dataclass(eq=False, repr=False)
class RunVar(Var):
    """A run-time value the host writes into an argument register before the run (e.g. the position)."""


@dataclass(eq=False, repr=False)
class DevVar(Var):
    """A value the program itself computes into register `reg` (by RLD); only 1*var may appear.
    `align`: a number its value is always a multiple of (the RLD's scale)."""
    reg: int = 0
    align: int = 1


Term = Union[Loop, RunVar, DevVar]


class Affine:
    """const + sum(coeff * var). Immutable; arithmetic with ints and other Affines only."""
    __slots__ = ("const", "terms")

    def __init__(self, const: int = 0, terms: dict | None = None):
        self.const = int(const)
        self.terms = {v: c for v, c in (terms or {}).items() if c}

    @staticmethod
    def of(x) -> "Affine":
        if isinstance(x, Affine):
            return x
        if isinstance(x, Var):
            return x._aff()
        if isinstance(x, (int,)) or hasattr(x, "__index__"):
            return Affine(int(x))
        raise CompileError(f"an address must be an integer or an affine expression, not {type(x).__name__}")

    def __add__(self, o) -> "Affine":
        o = Affine.of(o)
        terms = dict(self.terms)
        for v, c in o.terms.items():
            terms[v] = terms.get(v, 0) + c
        return Affine(self.const + o.const, terms)
    __radd__ = __add__

    def __neg__(self) -> "Affine": return Affine(-self.const, {v: -c for v, c in self.terms.items()})

    def __sub__(self, o) -> "Affine": return self + (-Affine.of(o))

    def __rsub__(self, o) -> "Affine": return Affine.of(o) - self

    def __mul__(self, k) -> "Affine":
        if isinstance(k, (Affine, Var)):
            if isinstance(k, Affine) and k.is_static():
                k = k.const
            elif self.is_static():
                return Affine.of(k) * self.const
            else:
                raise CompileError("the product of two variable expressions is not affine")
        k = int(k)
        return Affine(self.const * k, {v: c * k for v, c in self.terms.items()})
    __rmul__ = __mul__

    def is_static(self) -> bool: return not self.terms

    def static(self) -> int:
        if self.terms:
            raise CompileError(f"{self} must be a compile-time constant here")
        return self.const

    @property
    def key(self) -> frozenset:
        """The variable part, which decides the address register."""
        return frozenset(self.terms.items())

    def loops(self) -> list[Loop]: return [v for v in self.terms if isinstance(v, Loop)]

    def runtime(self) -> dict: return {v: c for v, c in self.terms.items() if isinstance(v, RunVar)}

    def devs(self) -> dict: return {v: c for v, c in self.terms.items() if isinstance(v, DevVar)}

    def bounds(self) -> tuple[int, int] | None:
        """[lo, hi] over every loop iteration, or None if a run-time or device term makes it unknown."""
        lo = hi = self.const
        for v, c in self.terms.items():
            if not isinstance(v, Loop) or v.rcount:
                return None
            span = c * (v.count - 1) if v.count > 0 else 0
            lo, hi = lo + min(0, span), hi + max(0, span)
        return lo, hi

    def __eq__(self, o) -> bool:
        o = Affine.of(o) if isinstance(o, (int, Var, Affine)) else None
        return o is not None and self.const == o.const and self.terms == o.terms

    def __hash__(self) -> int: return hash((self.const, self.key))

    def __repr__(self) -> str:
        parts = [f"{c}*{v.name}" for v, c in self.terms.items()]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)
