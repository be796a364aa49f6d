"""Native (C) twins of the golden simulator's hot loops, with the numpy code they replace as
the definition: every function here returns exactly the bytes of its twin, or None when the
native library is unavailable (no compiler, `OTPU_NATIVE=0`, a failed build) so the caller
runs the twin. The C source is otpu_core/native/sim.c, built through `cbuild`.

- `mm_int8`: an MM over int8 weights (WF 0, no PAIR, no sub-block offsets) straight from the
  DRAM rows; twin: `mxu.mm` over `formats.decode`d weights.

Public API: `lib()`, `mm_int8(act_q, act_scale, rows, scales, kb, d)`.
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import cbuild

SOURCE = Path(__file__).with_name("native") / "sim.c"
THREADS = max(1, min(2, os.cpu_count() or 1))

_p, _i, _i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64


@lru_cache(maxsize=None)
def lib() -> ctypes.CDLL | None:
    """The built library with its signatures declared, or None (use the numpy twins)."""
    so = cbuild.load("otpu_sim", SOURCE)
    if so is None:
        return None
    so.mm_int8.argtypes = [_p, _i64, _p, _i64, _i, _p, _i64, _p, _i64, _i, _i, _i, _p, _i]
    so.mm_int8.restype = _i
    return so


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def mm_int8(act_q: np.ndarray, act_scale: np.ndarray, rows: np.ndarray, scales: np.ndarray | None,
            kb: int, d: int) -> np.ndarray | None:
    """uint32 [R, n]: `mxu.mm` of int8 weights, computed from the raw operands.

    act_q int8 [R, kb*d] and act_scale uint32 [R, kb] (views with unit column strides), rows
    uint8 [n, >= kb*d] and scales uint8 [n, >= 4*kb] (DRAM row views; scales None for UNIT)."""
    so = lib()
    if so is None or kb > 1024:
        return None
    for a in (act_q, rows) + ((scales,) if scales is not None else ()):
        assert a.strides[1] == 1, "row views must have unit column strides"
    assert act_scale.strides[1] == 4 and act_scale.dtype == np.uint32 and act_q.dtype == np.int8
    r, n = act_q.shape[0], rows.shape[0]
    out = np.empty((r, n), np.uint32)
    if r == 0 or n == 0:
        return out
    ws, ws_rs = (None, 0) if scales is None else (_ptr(scales), scales.strides[0])
    rc = so.mm_int8(_ptr(act_q), act_q.strides[0], _ptr(act_scale), act_scale.strides[0] // 4, r,
                    _ptr(rows), rows.strides[0], ws, ws_rs, n, kb, d, _ptr(out), THREADS)
    return out if rc == 0 else None
