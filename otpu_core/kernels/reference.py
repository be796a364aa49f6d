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


def softplus(x) -> np.ndarray:
    """PyTorch's softplus (beta 1, threshold 20): x above 20, else log(1 + exp(x))."""
    x = np.asarray(x, np.float64)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def sigmoid(x) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def l2norm(x, eps: float = 1e-6) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + eps)


def gated_deltanet(q, k, v, z, a, b, a_log, dt_bias, norm_w, state=None, eps: float = 1e-6):
    """Tokens t of a Gated DeltaNet layer, the gated delta rule as Qwen3-Next states it: q, k
    (T, Hk, dk); v, z (T, Hv, dv); a, b (T, Hv). The state is (Hv, dk, dv), PyTorch's layout.
    Returns (y (T, Hv, dv) after the gated RMSNorm, the final state)."""
    q, k, v, z, a, b = (np.asarray(t, np.float64) for t in (q, k, v, z, a, b))
    T, hk, dk = q.shape
    hv, dv = v.shape[1:]
    S = np.zeros((hv, dk, dv)) if state is None else np.array(state, np.float64)
    ys = []
    for t in range(T):
        qt = l2norm(q[t]) / np.sqrt(dk)
        kt = l2norm(k[t])
        decay = np.exp(-np.exp(np.asarray(a_log, np.float64)) * softplus(a[t] + np.asarray(dt_bias, np.float64)))
        beta = sigmoid(b[t])
        o = np.zeros((hv, dv))
        for h in range(hv):
            kh, qh = kt[h * hk // hv], qt[h * hk // hv]
            S[h] *= decay[h]
            delta = (v[t, h] - kh @ S[h]) * beta[h]
            S[h] += np.outer(kh, delta)
            o[h] = qh @ S[h]
        ys.append(rmsnorm(o, norm_w, eps) * silu(z[t]))
    return np.stack(ys), S


def gelu_tanh(x) -> np.ndarray:
    """PyTorch's gelu(approximate="tanh")."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def geglu_mlp(x, wg, wu, wd) -> np.ndarray:
    x = np.asarray(x, np.float64)
    g, u = x @ np.asarray(wg, np.float64).T, x @ np.asarray(wu, np.float64).T
    return (gelu_tanh(g) * u) @ np.asarray(wd, np.float64).T


def softcap(x, cap: float) -> np.ndarray:
    return cap * np.tanh(np.asarray(x, np.float64) / cap)


def mamba2(x, dt, b, c, a_log, dt_bias, d, z=None, state=None):
    """Tokens of a Mamba2 SSM, mamba_ssm's selective_state_update per step: x (T, H, P), dt (T, H),
    b and c (T, G, N). The state is (H, P, N). Returns (y (T, H, P), the final state)."""
    x, dt, b, c = (np.asarray(t, np.float64) for t in (x, dt, b, c))
    T, H, P = x.shape
    G, N = b.shape[1:]
    S = np.zeros((H, P, N)) if state is None else np.array(state, np.float64)
    A = -np.exp(np.asarray(a_log, np.float64))
    ys = []
    for t in range(T):
        dtt = softplus(dt[t] + np.asarray(dt_bias, np.float64))
        y = np.zeros((H, P))
        for h in range(H):
            g = h * G // H
            S[h] = S[h] * np.exp(dtt[h] * A[h]) + dtt[h] * np.outer(x[t, h], b[t, g])
            y[h] = S[h] @ c[t, g] + np.asarray(d, np.float64)[h] * x[t, h]
        if z is not None:
            y = y * silu(np.asarray(z, np.float64)[t])
        ys.append(y)
    return np.stack(ys), S


def gated_linear_attention(q, k, v, log_decay, state=None):
    """Tokens of GLA's recurrence (flash-linear-attention's fused_recurrent_gla, scale dk^-0.5):
    q, k (T, H, dk), v (T, H, dv), log_decay (T, H, dk) per key dimension or (T, H) per head
    (RetNet's log gamma). The state is (H, dk, dv). Returns (o (T, H, dv), the final state)."""
    q, k, v, g = (np.asarray(t, np.float64) for t in (q, k, v, log_decay))
    T, H, dk = q.shape
    S = np.zeros((H, dk, v.shape[2])) if state is None else np.array(state, np.float64)
    os = []
    for t in range(T):
        decay = np.exp(g[t])
        decay = decay[:, :, None] if decay.ndim == 2 else decay[:, None, None]
        S = S * decay + k[t][:, :, None] * v[t][:, None, :]
        os.append(np.einsum("hk,hkv->hv", q[t] * dk ** -0.5, S))
    return np.stack(os), S
