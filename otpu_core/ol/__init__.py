"""`ol`: the openTPU kernel language. Layouts are explicit; every change of layout is one instruction.

A kernel is a Python function over layout arguments, traced once by `compile_kernel`:

    from otpu_core import ol

    def scale_rows(x, y):
        t = ol.load(x)
        ol.store(y, t * 2.0)

    prog = ol.compile_kernel(scale_rows, "sim-small", x=img.tensor(a), y=img.tensor(shape=a.shape))

Modules: affine (addresses), layouts (Tensor, QTensor, Tile, Stationary, Bcast), ops (the
operations), recurrence (DSTEP, STREAM, OUTER: the linear-recurrence operations), vector (VOP
lowering), peephole (fusions), memory (TMEM/ACT allocators), builder
(tracing), lower (registers, loops, encoding), waitc (wait entries), program (compile),
cache (on-disk program cache), runtime (DRAM images and simulator runs). See docs/ol.md.
"""
from .affine import Affine, DevVar, Loop, RunVar
from .errors import CompileError
from .layouts import Bcast, QTensor, Stationary, Tensor, Tile
from .ops import *  # noqa: F401,F403  (the language's operations)
from .ops import __all__ as _ops_all
from .recurrence import *  # noqa: F401,F403  (DSTEP, STREAM, OUTER)
from .recurrence import __all__ as _rec_all
from .program import Program, compile_kernel

__all__ = ["Affine", "DevVar", "Loop", "RunVar", "CompileError", "Bcast", "QTensor", "Stationary", "Tensor",
           "Tile", "Program", "compile_kernel"] + list(_ops_all) + list(_rec_all)
