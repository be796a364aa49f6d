"""Gated MLPs: y = down(act(x Wg^T) * (x Wu^T)), the hidden dimension F in chunks; SwiGLU
(act = silu, Llama/Qwen) and GeGLU (act = gelu with the tanh approximation, Gemma).

x is quantised once; each F-chunk runs the gate and up MMs, silu(g)*u on the VPU, quantises the
chunk and accumulates its down-projection into y with MM ACC. Up to `UNROLL` chunks are
unrolled and software-pipelined (gate and up of chunk c+1 are issued before chunk c's down, in
buffers of their own), so the in-order MXU streams them while the VPU computes chunk c's silu;
more chunks run as one hardware loop. The down weight is stored as F-chunk column parts (`Image.weight_parts`)
so each chunk's scales are contiguous. Every weight byte is streamed once.
"""
from __future__ import annotations

from typing import Callable

from .. import ol
from ..ol import CompileError, QTensor, Stationary, Tile
from .activations import gelu_tanh


UNROLL = 4


def swiglu_mlp(x: Tile | Stationary, w_gate: QTensor, w_up: QTensor, w_down: QTensor, f_chunk: int) -> Tile:
    """x (M, d) -> (M, d); w_gate/w_up [F, d]; w_down [d, F] stored as column parts of f_chunk."""
    return gated_mlp(x, w_gate, w_up, w_down, f_chunk, ol.silu)


def geglu_mlp(x: Tile | Stationary, w_gate: QTensor, w_up: QTensor, w_down: QTensor, f_chunk: int) -> Tile:
    """`swiglu_mlp` with gelu (tanh approximation) on the gate: Gemma's MLP."""
    return gated_mlp(x, w_gate, w_up, w_down, f_chunk, gelu_tanh)


def gated_mlp(x: Tile | Stationary, w_gate: QTensor, w_up: QTensor, w_down: QTensor, f_chunk: int,
              act: Callable[[Tile], Tile]) -> Tile:
    """down(act(x Wg^T) * (x Wu^T)) with the F-chunk pipeline above."""
    xq = x if isinstance(x, Stationary) else ol.quantize_for(x, w_gate)
    F = w_gate.N
    if w_up.N != F or w_gate.K != xq.K or w_up.K != xq.K:
        raise CompileError(f"shape mismatch in swiglu_mlp: x of shape {xq.shape}, gate {w_gate.shape}, up {w_up.shape}")
    if F % f_chunk or w_down.K != f_chunk:
        raise CompileError(f"swiglu_mlp: F={F} must split into parts of {f_chunk} columns; down part shape {w_down.shape}")
    M = xq.M
    y = ol.zeros((M, w_down.N) if M > 1 else (w_down.N,))
    chunks = F // f_chunk
    if chunks > UNROLL:
        for c in ol.range(chunks):
            g = ol.dot(xq, w_gate.rows(c * f_chunk, f_chunk))
            u = ol.dot(xq, w_up.rows(c * f_chunk, f_chunk))
            ol.dot(act(g) * u, w_down.part(c), acc=y)
        return y
    # the MXU runs in order: issue chunk c+1's gate and up before chunk c's down, so they stream
    # while the VPU computes chunk c's silu
    pending = None
    for c in ol.static_range(chunks):
        g = ol.dot(xq, w_gate.rows(c * f_chunk, f_chunk))
        u = ol.dot(xq, w_up.rows(c * f_chunk, f_chunk))
        if pending is not None:
            ol.dot(pending, w_down.part(c - 1), acc=y)
        pending = act(g) * u
        del g, u
    ol.dot(pending, w_down.part(chunks - 1), acc=y)
    return y
