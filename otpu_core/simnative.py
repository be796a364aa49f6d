"""Native (C) twins of the golden simulator's hot loops, with the numpy code they replace as
the definition: every function here returns exactly the bytes of its twin, or None when the
native library is unavailable (no compiler, `OTPU_NATIVE=0`, a failed build) so the caller
runs the twin. The C source is otpu_core/native/sim.c, built through `cbuild`.

- `mm_int8`: an MM over int8 weights (WF 0, no PAIR, no sub-block offsets) straight from the
  DRAM rows; twin: `mxu.mm` over `formats.decode`d weights.
- `elementwise`: the VOP elementwise functions (`ELEMENTWISE`, VFunc names); twins: fp32.add,
  sub, mul, fmax, fmin, ftz, exp2, recip, rsqrt, fabs, exp2sub, log2.
- `reduce`: RSUM, RSSQ, RDOT, RMAX along rows; twins: fp32.rsum, rssq, rdot, chain_max.
- `vop_in_place`: either of those run straight on TMEM (strided operands, no gathers) for a VOP
  the hazard rule accepted; twin: sim/vector.py's gather, compute, put_tile.
- `quantize`: one int8 group per row of a 2-D array; twin: fp32.quantize(x, axis=-1).

Public API: `lib()`, `mm_int8(act_q, act_scale, rows, scales, kb, d)`, `elementwise(name, a, b,
shape)`, `reduce(name, a, b)`, `vop_in_place(t, name, rows, cols, a, b, imm, dst)`, `quantize(x)`,
`ELEMENTWISE`, `REDUCE`.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from . import cbuild

# the C kernel's function numbers (enum in sim.c)
ELEMENTWISE = {n: i for i, n in enumerate(("ADD", "SUB", "RSUB", "MUL", "MAX", "MIN", "COPY", "EXP2", "RECIP",
                                           "RSQRT", "ABS", "FILL", "EXP2SUB", "LOG2"))}
REDUCE = {"RSUM": 0, "RSSQ": 1, "RDOT": 2, "RMAX": 3}
SOURCE = Path(__file__).with_name("native") / "sim.c"
THREADS = max(1, min(2, os.cpu_count() or 1))

_p, _i, _i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64


def lib() -> ctypes.CDLL | None:
    """The built library with its signatures declared, or None (use the numpy twins)."""
    return cbuild.typed("otpu_sim", SOURCE, _declare)


def _declare(so: ctypes.CDLL) -> None:
    so.mm_int8.argtypes = [_p, _i64, _p, _i64, _i, _p, _i64, _p, _i64, _i, _i, _i, _p, _i, _i]
    so.mm_int8.restype = _i
    for fn in (so.vop_ew, so.vop_reduce):
        fn.argtypes = [_i, _i64, _i64, _p, _i64, _i64, _p, _i64, _i64, ctypes.c_uint32, _p, _i64]
        fn.restype = _i
    so.quantize.argtypes = [_i64, _i64, _p, _p, _p]
    so.quantize.restype = _i


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


_base = [None, 0]          # the last TMEM array vop_in_place ran on (kept alive) and its address


def _tmem_ptr(t: np.ndarray) -> int:
    if _base[0] is not t:
        _base[:] = [t, _ptr(t)]
    return _base[1]


def mm_int8(act_q: np.ndarray, act_scale: np.ndarray, rows: np.ndarray, scales: np.ndarray | None,
            kb: int, d: int, vnni: bool = True) -> np.ndarray | None:
    """uint32 [R, n]: `mxu.mm` of int8 weights, computed from the raw operands.

    act_q int8 [R, kb*d] and act_scale uint32 [R, kb] (views with unit column strides), rows
    uint8 [n, >= kb*d] and scales uint8 [n, >= 4*kb] (DRAM row views; scales None for UNIT).
    vnni=False keeps the portable loop where the CPU has AVX-512 VNNI (tests check both)."""
    so = lib()
    if so is None or kb > 1024:
        return None
    views = (act_q, rows) + ((scales,) if scales is not None else ())
    if any(v.strides[1] != 1 for v in views) or act_scale.strides[1] != 4 or act_scale.strides[0] % 4 \
            or act_scale.dtype != np.uint32 or act_q.dtype != np.int8:
        raise TypeError("native MM operands are row views with unit column strides (int8 codes, uint32 scales)")
    r, n = act_q.shape[0], rows.shape[0]
    out = np.empty((r, n), np.uint32)
    if r == 0 or n == 0:
        return out
    ws, ws_rs = (None, 0) if scales is None else (_ptr(scales), scales.strides[0])
    rc = so.mm_int8(_ptr(act_q), act_q.strides[0], _ptr(act_scale), act_scale.strides[0] // 4, r,
                    _ptr(rows), rows.strides[0], ws, ws_rs, n, kb, d, _ptr(out), THREADS, int(vnni))
    return out if rc == 0 else None


def _operand(x: np.ndarray | None, shape: tuple[int, int]) -> tuple[int | None, int, int]:
    """(pointer, row stride, column stride) in words of x broadcast to shape (None: not read)."""
    if x is None:
        return None, 0, 0
    v = np.broadcast_to(x, shape)
    if v.dtype != np.uint32 or any(st % 4 for st in v.strides):
        raise TypeError("native VOP operands are uint32 arrays with word strides")
    return _ptr(v), v.strides[0] // 4, v.strides[1] // 4


def elementwise(name: str, a: np.ndarray | None, b: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray | None:
    """uint32 `shape`: VOP function `name` of a and b (each broadcast to shape; None if unread)."""
    so = lib()
    if so is None:
        return None
    out = np.empty(shape, np.uint32)
    so.vop_ew(ELEMENTWISE[name], shape[0], shape[1], *_operand(a, shape), *_operand(b, shape), 0, _ptr(out),
              shape[1])
    return out


def reduce(name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray | None:
    """uint32 [rows]: VOP reduction `name` along the rows of a 2-D a (RDOT: with b broadcast to a)."""
    so = lib()
    if so is None or a.shape[1] == 0:
        return None
    out = np.empty(a.shape[0], np.uint32)
    so.vop_reduce(REDUCE[name], a.shape[0], a.shape[1], *_operand(a, a.shape), *_operand(b, a.shape), 0, _ptr(out),
                  1)
    return out


def vop_in_place(t: np.ndarray, name: str, rows: int, cols: int, a: tuple[int, int] | None,
                 b: tuple[int, int, int] | None, imm: int, dst: tuple[int, int]) -> bool:
    """VOP `name` straight on the TMEM word array t: a = (address, row stride) or None (unread),
    b = (address, row stride, column stride) or None (reads imm), dst = (address, row stride).
    Only for instructions the hazard rule accepted. False: unavailable, run the numpy twin."""
    so = lib()
    if so is None:
        return False
    base = _tmem_ptr(t)
    pa = (base + 4 * a[0], a[1], 1) if a is not None else (None, 0, 0)
    pb = (base + 4 * b[0], b[1], b[2]) if b is not None else (None, 0, 0)
    if name in ELEMENTWISE:
        so.vop_ew(ELEMENTWISE[name], rows, cols, *pa, *pb, imm, base + 4 * dst[0], dst[1])
    else:
        so.vop_reduce(REDUCE[name], rows, cols, *pa, *pb, imm, base + 4 * dst[0], dst[1])
    return True


def quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 codes like x, uint32 scale bits [groups]) of a 2-D uint32 x, one group per row."""
    so = lib()
    if so is None:
        return None
    x = np.ascontiguousarray(x, dtype=np.uint32)
    q = np.empty(x.shape, np.int8)
    s = np.empty(x.shape[0], np.uint32)
    so.quantize(x.shape[0], x.shape[1], _ptr(x), _ptr(q), _ptr(s))
    return q, s
