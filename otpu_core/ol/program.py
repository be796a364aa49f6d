"""Compiling a kernel: trace, lower, generate WAITC entries; the result is a `Program`.

`compile_kernel(fn, target, **args)` runs the Python kernel `fn(**args)` under a fresh builder
(loops traced once), lowers it to instructions, and attaches one wait entry per instruction.
The `Program` knows which run-time values each argument register holds, so
`Program.arg_words(pos=17)` gives the eight ARG words a host writes before the run, and which
source lines emitted each instruction (`Program.sources`, for profilers).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .. import isa
from ..target import Config, Target
from ..target import load as load_target
from . import builder as builder_mod
from .builder import Builder
from .errors import CompileError
from .lower import lower
from .waitc import generate_waits


@dataclass
class Stats:
    instrs: int = 0
    tmem_peak: int = 0
    tmem_traffic: int = 0          # TMEM words read + written by one pass over the instructions
    peephole_instrs: int = 0
    peephole_words: int = 0
    peepholes: dict = field(default_factory=dict)
    compile_s: float = 0.0
    waitc_s: float = 0.0
    waits: int = 0                 # instructions whose entry waits for something
    cached: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Program:
    instrs: list
    waits: list
    run_args: list                 # per argument register: tuple of (run-time name, coefficient)
    stats: Stats
    arch_hash: int
    sources: list = field(default_factory=list)   # per instruction: ((file, line, function), ...) innermost first

    def source_of(self, pc: int) -> tuple:
        """The source frames that emitted instruction `pc` (() for the final HALT or an unknown pc)."""
        return self.sources[pc] if 0 <= pc < len(self.sources) else ()

    def image(self, with_waits: bool = False) -> bytes:
        return isa.encode_program(self.instrs, self.waits if with_waits else None)

    def arg_words(self, **values: int) -> list[int]:
        """ARG0..ARG7 for these run-time values: combination k goes to ARG(7-k)."""
        words = [0] * isa.NARGS
        for k, combo in enumerate(self.run_args):
            missing = [n for n, _ in combo if n not in values]
            if missing:
                raise CompileError(f"run-time value(s) {', '.join(missing)} not given", where=("", 0, ""))
            words[isa.NARGS - 1 - k] = sum(c * int(values[n]) for n, c in combo) & isa.MASK32
        return words

    def words(self) -> np.ndarray:
        return np.array([i.words for i in self.instrs], dtype=np.uint32)


def target_of(target) -> tuple[Target, Config]:
    if isinstance(target, Config):
        return load_target("sim-small"), target
    t = target if isinstance(target, Target) else load_target(target)
    return t, t.config()


def trace(fn, cfg: Config, peepholes: bool, args: dict, stream_subset: bool = False) -> Builder:
    b = Builder(cfg, peepholes, stream_subset)
    builder_mod.push(b)
    try:
        fn(**args)
    finally:
        builder_mod.pop()
        b.closed = True
    return b


def compile_kernel(fn, target=None, *, peepholes: bool = True, **args) -> Program:
    t, cfg = target_of(target)
    if cfg.LANES == 16 and (cfg.DSTEP or cfg.STREAM):
        raise CompileError("a LANES=16 build has no stream engine: DSTEP and STREAM must be off for this target",
                           where=("", 0, ""))
    t0 = time.perf_counter()
    b = trace(fn, cfg, peepholes, args, stream_subset=not isinstance(target, Config) and t.stream_subset)
    low = lower(b.root, cfg, b.chain)
    if len(low.instrs) > cfg.imem_instrs:
        raise CompileError(f"the program has {len(low.instrs)} instructions; IMEM holds {cfg.imem_instrs}",
                           hint="put repeated work in ol.range loops", where=("", 0, ""))
    t1 = time.perf_counter()
    waits = generate_waits(low)
    t2 = time.perf_counter()
    stats = Stats(instrs=len(low.instrs), tmem_peak=b.tmem.peak,
                  tmem_traffic=_traffic(low), peephole_instrs=b.savings.instrs, peephole_words=b.savings.words,
                  peepholes={k: {"instrs": n, "words": w} for k, (n, w) in b.savings.by_rule.items()},
                  compile_s=t2 - t0, waitc_s=t2 - t1, waits=sum(1 for w in waits if w.waits))
    run_args = [tuple(sorted((v.name, c) for v, c in combo)) for combo in low.run_args]
    return Program(low.instrs, waits, run_args, stats, t.arch_hash() if not isinstance(target, Config) else 0,
                   low.chains)


def _traffic(low) -> int:
    """TMEM words moved by the whole run, with loop bodies counted once per iteration."""
    mult = [1] * len(low.instrs)
    for head, body, count, _ in low.loops:
        for i in range(head + 1, head + 1 + body):
            mult[i] *= count if count is not None else 1
    total = 0
    for node, m in zip(low.nodes, mult):
        if node is not None:
            total += m * sum(a.n for a in node.reads + node.writes if a.space == "T")
    return total
