"""Activations built from the VPU's exact exp2, log2 and recip: Gemma's tanh-based pair and the
gates of the recurrent layers.

- `gelu_tanh(x)`: GELU with the tanh approximation (PyTorch's `gelu(approximate="tanh")`, Gemma's
  `gelu_pytorch_tanh`): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as the equal
  x * sigmoid(2 sqrt(2/pi) x (1 + 0.044715 x^2)) = x / (1 + exp2(-2 sqrt(2/pi) log2(e) u)), which
  saturates to x and to -0 for every finite x (no inf - inf, no 0 * inf).
- `softcap(x, cap)`: the final logit soft cap cap * tanh(x / cap) as cap - 2 cap / (1 + exp(2 x / cap)),
  which tends to +cap and -cap at the extremes; `softcap_rows` runs it DRAM to DRAM in chunks
  (a vocabulary of logits) in a hardware loop.
- `softplus(x)` as max(x, 0) + ln(1 + exp(-|x|)): no threshold needed, no overflow (PyTorch's
  threshold-20 form differs by less than 2e-9 above 20); `sigmoid(x)` = 1 / (1 + exp(-x)).
"""
from __future__ import annotations

import math

from .. import ol
from ..ol import CompileError, Tensor, Tile

GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715


def gelu_tanh(x: Tile) -> Tile:
    u = x * ((x * x) * GELU_A + 1.0)
    return x * ol.recip(ol.exp2(u * (-2.0 * GELU_C * ol.LOG2E)) + 1.0)


def softcap(x: Tile, cap: float) -> Tile:
    if not cap > 0:
        raise CompileError(f"softcap: the cap must be positive, not {cap}")
    r = ol.recip(ol.exp2(x * (2.0 * ol.LOG2E / cap)) + 1.0)
    return r * (-2.0 * cap) + cap


def softplus(x: Tile) -> Tile:
    tail = ol.log2(ol.exp2(ol.abs(x) * -ol.LOG2E) + 1.0) * ol.LN2
    return ol.maximum(x, 0.0) + tail


def sigmoid(x: Tile) -> Tile:
    return ol.recip(ol.exp2(x * -ol.LOG2E) + 1.0)


def softcap_rows(src: Tensor, dst: Tensor, cap: float, chunk: int) -> None:
    """dst = softcap(src) for 1-D DRAM tensors of one length, `chunk` values per pass (a hardware
    loop over the whole chunks, then the tail)."""
    if len(src.shape) != 1 or src.shape != dst.shape:
        raise CompileError(f"softcap_rows: 1-D tensors of one length, not {src.shape} and {dst.shape}")
    n = src.cols
    full, tail = divmod(n, chunk)
    for c in ol.range(full):
        part = softcap(ol.load(Tensor(src.base + 4 * chunk * c, (chunk,))), cap)
        ol.store(Tensor(dst.base + 4 * chunk * c, (chunk,)), part)
    if tail:
        ol.store(dst[full * chunk:], softcap(ol.load(src[full * chunk:]), cap))
