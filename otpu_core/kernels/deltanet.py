"""Gated DeltaNet (Qwen3.5 / Qwen3-Next linear attention): one token through a layer's heads.

Per token, from the projected (and convolved) q, k (Hk heads of dk), v, z (Hv heads of dv) and
the gate inputs a, b (Hv each), as the public definition (Qwen3-Next's gated delta rule with
q/k L2 norm in the kernel) states it:

  q = q / sqrt(sum q^2 + eps) / sqrt(dk);  k = k / sqrt(sum k^2 + eps)
  decay = exp(-exp(A_log) * softplus(a + dt_bias));  beta = sigmoid(b)
  S_h = S_h * decay + ((v - (S_h k) * decay) * beta) k^T;  o_h = S_h q      (per value head h)
  y_h = rmsnorm(o_h) * norm_w * silu(z_h)

Value head h reads key head h // (Hv / Hk). The state of head h is rows [h*dv, (h+1)*dv) of
`state` (Hv*dv, dk) in DRAM, value-major (row r is S[r, :] over the key dimension: DSTEP's
layout, the transpose of the [dk, dv] one PyTorch keeps). On a target with DSTEP each head is
one DSTEP: the state is read and written in place in DRAM by the stream engine and never enters
TMEM (Qwen3.5: 16 heads x 128 x 128 fp32 = 1 MiB per layer). `engine="vops"` runs the same head
step as VOPs over row chunks loaded into TMEM (RDOT, MUL, SUB, MUL, OUTER, RDOT: bit-identical),
the form for targets without DSTEP and the baseline of benchmarks/bench_recurrence.py.

The gates use activations.softplus and sigmoid; everything is the VPU's exact functions (exp2,
log2, recip, rsqrt). `keep` (a (1,) 0/1 tile) multiplies the decay: 0 restarts the state from the
token's own update, as a new sequence's first token (a model's position 0) needs, whatever an
earlier sequence left in the slot.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ol
from ..ol import CompileError, Tensor, Tile
from .activations import sigmoid, softplus
from .norm import rmsnorm
from .recurrent import vop_chunks

L2_EPS = 1e-6


@dataclass(eq=False)
class GdnWeights:
    """A layer's per-head constants and the output norm weight, in DRAM: A_log and dt_bias (Hv,), norm (dv,)."""
    a_log: Tensor
    dt_bias: Tensor
    norm: Tensor


def gates(a: Tile, b: Tile, w: GdnWeights, keep: Tile | None = None) -> Tile:
    """The (2, Hv) gate table DSTEP reads: row 0 the decay exp(-exp(A_log) softplus(a + dt_bias))
    (times `keep`), row 1 beta = sigmoid(b)."""
    hv = a.rows * a.cols
    if b.rows * b.cols != hv or w.a_log.cols != hv or w.dt_bias.cols != hv:
        raise CompileError(f"gated_deltanet gates: a {a.shape}, b {b.shape}, A_log {w.a_log.shape}, "
                           f"dt_bias {w.dt_bias.shape} must all hold Hv values")
    a1, b1 = a.reshape(hv), b.reshape(hv)
    rate = ol.exp2(ol.load(w.a_log) * ol.LOG2E) * -ol.LOG2E          # -exp(A_log) * log2(e)
    g = ol.empty((2, hv), banked=False)
    decay = ol.exp2(softplus(a1 + ol.load(w.dt_bias)) * rate)
    g[0].set(decay if keep is None else decay * keep)
    g[1].set(sigmoid(b1))
    return g


def _l2_scaled(x: Tile, scale: float, out: Tile) -> None:
    """out = x / sqrt(sum x^2 + eps) * scale, per row."""
    r = ol.rsqrt(ol.sum(x * x) + L2_EPS)
    if scale != 1.0:
        r = r * scale
    out.set(x * r[:, None])


def qk_table(q: Tile, k: Tile) -> Tile:
    """(Hk, 2*dk): per key head its normalised, scaled q then its normalised k (DSTEP's qk operand)."""
    if q.ndim != 2 or q.shape != k.shape:
        raise CompileError(f"gated_deltanet: q and k must be (Hk, dk) tiles of one shape, not {q.shape} and {k.shape}")
    hk, dk = q.shape
    qk = ol.empty((hk, 2 * dk), banked=False)
    _l2_scaled(q, dk ** -0.5, qk[:, 0:dk])
    _l2_scaled(k, 1.0, qk[:, dk:2 * dk])
    return qk


def head_step(state: Tensor, qk: Tile, v: Tile, g: Tile, out: Tile, engine: str) -> None:
    """One head: state (dv, dk) in DRAM, qk (2*dk,), v (dv,), g the (2, 1) gate column, out (dv,)."""
    if engine == "dstep":
        ol.dstep(state, qk, v, g, out=out)
        return
    dk = state.cols
    q, k = qk[0:dk], qk[dk:2 * dk]
    e, beta = g[0:1, :].reshape(1), g[1:2, :].reshape(1)
    for s, rows_of in vop_chunks(state):
        d = (rows_of(v) - (s @ k) * e) * beta
        ol.outer(s, d, k, decay=e)
        rows_of(out).set(s @ q)


def gated_deltanet_step(q: Tile, k: Tile, v: Tile, z: Tile, a: Tile, b: Tile, w: GdnWeights, state: Tensor,
                        eps: float = 1e-6, engine: str | None = None, keep: Tile | None = None) -> Tile:
    """One token through every head of a Gated DeltaNet layer: q, k (Hk, dk); v, z (Hv, dv); a, b
    (Hv,); the states (Hv*dv, dk) in DRAM, updated in place. Returns y (Hv, dv), the gated
    RMSNorm of the head outputs (what the layer's out-projection multiplies)."""
    engine = engine or ("dstep" if ol.has_dstep() else "vops")
    if engine not in ("dstep", "vops"):
        raise CompileError(f"gated_deltanet engine {engine!r}: 'dstep' or 'vops'")
    hk, dk = q.shape if q.ndim == 2 else (0, 0)
    if v.ndim != 2 or z.shape != v.shape:
        raise CompileError(f"gated_deltanet: v and z must be (Hv, dv) tiles of one shape, not {v.shape} and {z.shape}")
    hv, dv = v.shape
    if not hk or hv % hk:
        raise CompileError(f"gated_deltanet: {hv} value heads do not share {hk} key heads evenly")
    if not isinstance(state, Tensor) or state.shape != (hv * dv, dk):
        raise CompileError(f"gated_deltanet state must be a ({hv * dv}, {dk}) DRAM tensor, not "
                           f"{getattr(state, 'shape', type(state).__name__)}")
    if w.norm.cols != dv:
        raise CompileError(f"gated_deltanet norm weight of shape {w.norm.shape}, head dim {dv}")
    qk = qk_table(q, k)
    g = gates(a, b, w, keep)
    del q, k, a, b            # their TMEM is free for the heads (a 16 x 128 layer fills most of it)
    o = ol.empty((hv, dv), banked=False)
    group = hv // hk
    for h in ol.static_range(hv):
        head_step(state[h * dv:(h + 1) * dv], qk[h // group], v[h], g[:, h:h + 1], o[h], engine)
    del qk, v, g
    return rmsnorm(o, ol.load(w.norm), eps) * ol.silu(z)
