"""The tracing context: the instruction tree being built, loops, storage lifetimes and options.

One `Builder` is current while a kernel function runs (`ol.trace`). Layout objects allocate
TMEM and ACT RAM through it; their storage is freed when the Python object dies, but storage
allocated outside a loop and dying inside it is only freed when that loop closes, since the
next iteration still reads it.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field

from ..target import Config
from .affine import Affine, Loop, RunVar, DevVar
from .errors import CompileError, source_chain, source_line
from .ir import Node, LoopBlock
from .memory import ActAllocator, TmemAllocator

MAX_LOOP_DEPTH = 4

_tracing = threading.local()     # per thread: the builders of the kernels being traced


def _stack() -> list:
    if not hasattr(_tracing, "stack"):
        _tracing.stack = []
    return _tracing.stack


def current() -> "Builder":
    stack = _stack()
    if not stack:
        raise CompileError("ol operations can only be used while a kernel is being compiled")
    return stack[-1]


def push(b: "Builder") -> None: _stack().append(b)


def pop() -> None: _stack().pop()


@dataclass
class Savings:
    """What the fusion peepholes saved: instructions and TMEM words moved, per peephole."""
    by_rule: dict = field(default_factory=dict)

    def add(self, rule: str, instrs: int, words: int) -> None:
        n, w = self.by_rule.get(rule, (0, 0))
        self.by_rule[rule] = (n + instrs, w + words)

    @property
    def instrs(self) -> int: return sum(n for n, _ in self.by_rule.values())

    @property
    def words(self) -> int: return sum(w for _, w in self.by_rule.values())


class Buffer:
    """A TMEM allocation; freed (possibly deferred to a loop end) when no layout refers to it."""

    def __init__(self, builder: "Builder", words: int):
        self.start = builder.tmem.alloc(words)
        self.words = words
        self.depth = len(builder.loops)
        self.version = 0          # bumped by every instruction that writes the buffer
        weakref.finalize(self, builder._release, "T", self.start, self.depth, None)


class Builder:
    def __init__(self, cfg: Config, peepholes: bool = True, stream_subset: bool = False):
        self.cfg = cfg
        self.peepholes = peepholes
        self.stream_subset = stream_subset    # STREAM runs only the hardware subset (Target.stream_subset)
        self.tmem = TmemAllocator(cfg.TMEM_WORDS, cfg.LANES)
        self.act = ActAllocator(cfg.ACT_BLOCKS)
        self.root: list = []
        self.blocks: list[list] = [self.root]
        self.loops: list[Loop] = []
        self.deferred: list[list] = [[]]      # per loop level: frees waiting for that loop to close
        self.runvars: list[RunVar] = []
        self.devvars: list[DevVar] = []
        self.savings = Savings()
        self.chain: tuple[DevVar, DevVar] | None = None     # halt_chain(addr, length): the final HALT chains
        self.stream_area = None       # the STREAM descriptor slots (recurrence.py), claimed at the first stream
        self.closed = False
        self._tokens = itertools.count(1)

    # -- emission --------------------------------------------------------------------------
    def emit(self, node: Node) -> Node:
        node.where = node.where or source_line()
        node.chain = node.chain or source_chain()
        for aff in list(node.addrs.values()) + [a.lo for a in node.reads + node.writes]:
            self._check_scope(aff)
        self.blocks[-1].append(node)
        return node

    def _check_scope(self, aff: Affine) -> None:
        for v in aff.loops():
            if v not in self.loops:
                raise CompileError(f"loop variable {v.name} used outside its loop")

    # -- loops -----------------------------------------------------------------------------
    def begin_loop(self, count: int | DevVar) -> Loop:
        if len(self.loops) >= MAX_LOOP_DEPTH:
            raise CompileError(f"loops nest deeper than {MAX_LOOP_DEPTH}, the hardware limit")
        if isinstance(count, DevVar):
            loop = Loop(f"i{len(self.loops)}", count=0, rcount=1, depth=len(self.loops))
            loop.count_var = count
        else:
            loop = Loop(f"i{len(self.loops)}", count=int(count), depth=len(self.loops))
        blk = LoopBlock(loop, chain=source_chain())
        self.blocks[-1].append(blk)
        self.blocks.append(blk.body)
        self.loops.append(loop)
        self.deferred.append([])
        return loop

    def end_loop(self) -> None:
        self.loops.pop()
        self.blocks.pop()
        for kind, start, extra in self.deferred.pop():
            self._free_now(kind, start, extra)

    # -- variables -------------------------------------------------------------------------
    def runvar(self, name: str) -> RunVar:
        v = RunVar(name)
        self.runvars.append(v)
        return v

    # -- storage ---------------------------------------------------------------------------
    def buffer(self, words: int) -> Buffer: return Buffer(self, words)

    def act_alloc(self, kb: int, owner, contiguous: bool) -> list[tuple[int, int, int]]:
        """(ab, blocks, token) runs holding kb blocks for `owner`, freed when it dies."""
        token = next(self._tokens)
        runs = [(self.act.alloc(kb, token), kb)] if contiguous else self.act.alloc_runs(kb, token)
        for ab, n in runs:
            weakref.finalize(owner, self._release, "A", ab, len(self.loops), (n, token))
        return [(ab, n, token) for ab, n in runs]

    def _release(self, kind: str, start: int, depth: int, extra) -> None:
        if self.closed:
            return
        if depth < len(self.loops):
            self.deferred[depth + 1].append((kind, start, extra))
        else:
            self._free_now(kind, start, extra)

    def _free_now(self, kind: str, start: int, extra) -> None:
        if kind == "T":
            self.tmem.free(start)
        else:
            kb, token = extra
            self.act.free(start, kb, token)
