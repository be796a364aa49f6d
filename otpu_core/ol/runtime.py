"""Placing kernel arguments in card DRAM and running compiled programs on the golden simulator.

`Image` is a bump allocator over one slice's DRAM (128-byte aligned, whole MXU chunks): fp32
tensors (`tensor`), quantised weights in any MM format (`weight`, packed by formats.py), and
KV caches (`kv_cache`). `Image.run(program, **run_values)` loads the program into a
`isasim.Machine` with this DRAM and the argument words, runs it to HALT and returns the machine;
`Image.read(tensor)` reads an fp32 tensor back.
"""
from __future__ import annotations

import numpy as np

from .. import formats, isa
from ..isasim import Machine
from ..target import Target
from ..target import load as load_target
from .layouts import QTensor, Tensor
from .ops import KVCache

ALIGN = 128


class Image:
    def __init__(self, target: Target | str = "sim-small", size: int | None = None):
        self.target = target if isinstance(target, Target) else load_target(target)
        self.cfg = self.target.config()
        self.size = size or min(self.cfg.DRAM_BYTES, 64 << 20)
        self.dram = np.zeros(self.size, np.uint8)
        self.cursor = ALIGN            # keep address 0 unused: a zero address is usually a bug
        self.packed: dict[int, formats.PackedWeights] = {}
        self.parts: dict[int, list[QTensor]] = {}

    def alloc(self, nbytes: int) -> int:
        addr = self.cursor
        self.cursor = -(-(addr + max(nbytes, 1)) // ALIGN) * ALIGN
        if self.cursor > self.size:
            raise MemoryError(f"the DRAM image is full: {nbytes} bytes do not fit in {self.size}")
        return addr

    def write(self, addr: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self.dram[addr: addr + raw.size] = raw

    def tensor(self, data=None, shape=None) -> Tensor:
        """An fp32 tensor: from data (written now) or an empty one of `shape`."""
        if data is not None:
            arr = np.ascontiguousarray(np.asarray(data, dtype=np.float32))
            shape = arr.shape
        n = int(np.prod(shape))
        addr = self.alloc(4 * n)
        if data is not None:
            self.write(addr, arr)
        return Tensor(addr, tuple(shape))

    def weight(self, w, fmt: str | int = "int8", unit: bool = False) -> QTensor:
        """A weight matrix [N, K] quantised to `fmt` (K zero-padded to whole blocks); unit drops the scales."""
        wf = isa.WF_NAMES[fmt] if isinstance(fmt, str) else int(fmt)
        packed = formats.quantize(np.asarray(w, dtype=np.float32), wf, self.cfg.D)
        data = self.alloc(packed.rows.size)
        self.write(data, packed.rows)
        scale = None
        if not unit:
            scale = self.alloc(packed.scales.size)
            self.write(scale, packed.scales)
        self.packed[data] = packed
        return QTensor(data, scale, (packed.n, packed.kb * self.cfg.D), packed.rs, packed.srs if not unit else 0,
                       wf, self.cfg.D)

    def weight_parts(self, w, part_cols: int, fmt: str | int = "int8") -> QTensor:
        """A matrix [N, K] stored as K/part_cols column parts, each [N, part_cols] with its own
        contiguous scale rows; `q.part(c)` addresses part c."""
        w = np.asarray(w, dtype=np.float32)
        parts = [self.weight(w[:, c: c + part_cols], fmt) for c in range(0, w.shape[1], part_cols)]
        if len(parts) > 1:
            for a, b in zip(parts, parts[1:]):
                if (b.data.const - a.data.const, b.scale.const - a.scale.const) != \
                        (parts[1].data.const - parts[0].data.const, parts[1].scale.const - parts[0].scale.const):
                    raise ValueError("column parts are not equally spaced")
            q = parts[0]
            q.part_stride = (parts[1].data.const - q.data.const, parts[1].scale.const - q.scale.const)
        else:
            q = parts[0]
            q.part_stride = (q.rs * q.N, q.srs * q.N)
        self.parts[q.data.const] = parts
        return q

    def dequantized(self, q: QTensor) -> np.ndarray:
        """The float64 values the MXU multiplies for a weight placed by `weight` or `weight_parts`."""
        base = q.data.const
        if base in self.parts:
            return np.concatenate([self.packed[p.data.const].dequantize() for p in self.parts[base]], axis=1)
        return self.packed[base].dequantize()

    def kv_cache(self, cap: int, d: int) -> KVCache:
        D = self.cfg.D
        if cap % D or d % D:
            raise ValueError(f"KV capacity {cap} and head dim {d} must be multiples of D={D}")
        k = self.alloc(cap * d)
        ks = self.alloc(4 * cap * (d // D))
        vt = self.alloc(d * cap)
        vs = self.alloc(4 * cap)
        return KVCache(k, ks, vt, vs, cap, d)

    def read(self, t: Tensor, machine: Machine | None = None) -> np.ndarray:
        src = machine.slice.dram.bytes if machine is not None else self.dram
        base = t.base.static()
        rows, cols = t.rows, t.cols
        words = np.frombuffer(bytes(src[base: base + 4 * ((rows - 1) * t.rs + cols)]), np.float32)
        out = np.stack([words[r * t.rs: r * t.rs + cols] for r in range(rows)])
        return out if len(t.shape) == 2 else out.reshape(-1)

    def machine(self, program, **run_values) -> Machine:
        """A simulator with this DRAM image (copied into every slice) and the program loaded with
        its argument words."""
        m = Machine(self.target, timing=False)
        m.write_dram(0, self.dram[: self.cursor])
        m.load(program.instrs, program.arg_words(**run_values))
        return m

    def run(self, program, **run_values) -> Machine:
        m = self.machine(program, **run_values)
        m.run()
        return m
