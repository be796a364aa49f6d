"""float64 numpy references of the kernels, and the two numbers every comparison reports.

These are independent of the compiler: plain float64 math on the values the card holds
(dequantised weights, and for `quantized_matmul` the activations quantised the way QACT does).
"""
from __future__ import annotations

import numpy as np

from .. import fp32 as F


def max_abs(got, ref) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64))))


def cosine(got, ref) -> float:
    a, b = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def quantize_rows(x: np.ndarray, d: int, row: bool = False) -> np.ndarray:
    """x (rows, K) as QACT stores it, dequantised: int8 times its scale (float64), one scale per
    (row, D-block), or per row with `row` (ROW mode)."""
    x = np.asarray(x, np.float32)
    rows, k = x.shape
    kp = -(-k // d) * d
    xp = np.zeros((rows, kp), np.float32)
    xp[:, :k] = x
    groups = xp.reshape(rows, 1, kp) if row else xp.reshape(rows, kp // d, d)
    q, s = F.quantize(groups)
    return (q.astype(np.float64) * F.to_float(s).astype(np.float64)[..., None]).reshape(rows, kp)


def matmul(x, w) -> np.ndarray:
    return np.asarray(x, np.float64) @ np.asarray(w, np.float64).T


def quantized_matmul(x, w, d: int, row: bool = False) -> np.ndarray:
    """The same math as the MXU with activations quantised as QACT does: only fp32 rounding differs."""
    w = np.asarray(w, np.float64)
    xq = quantize_rows(x, d, row)
    k = min(w.shape[1], xq.shape[1])
    return xq[:, :k] @ w[:, :k].T


def rmsnorm(x, w, eps: float = 1e-6) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * np.asarray(w, np.float64)


def softmax(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def rope(x, cos, sin) -> np.ndarray:
    x = np.asarray(x, np.float64)
    h = x.shape[-1] // 2
    c, s = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def attention(q, k, v) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v for q (g, d), k and v (n, d)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    return softmax(q @ k.T / np.sqrt(q.shape[-1])) @ v


def silu(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / (1.0 + np.exp(-x))


def swiglu_mlp(x, wg, wu, wd) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (silu(x @ np.asarray(wg, np.float64).T) * (x @ np.asarray(wu, np.float64).T)) @ np.asarray(wd, np.float64).T


def topk(logits, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and indices of the k largest, best first (lowest index first among equals)."""
    x = np.asarray(logits, np.float64)
    idx = np.lexsort((np.arange(x.size), -x))[:k]
    return x[idx], idx
