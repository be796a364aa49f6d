"""Linear-recurrence steps on the stream engine: Mamba2 (SSD), GLA and RetNet, one token each.

All three update a per-head fp32 state S [rows, cols] in DRAM in place with one STREAM per
head, the descriptor-programmed row stream: Y = S * G + Dv(r) * B(c) (U = FMMA, B = column slot
1, Dv = X * K1: the D_SCALE program), the row outputs O(r) = Y . q(c) (Q = slot 0), and Y
written back. They differ only in the gate G and in what the slots hold:

| step | rows x cols | G | B | X, K1 | q |
|---|---|---|---|---|---|
| Mamba2 | headdim x d_state | K0 = exp(dt * A), A = -exp(A_log) | B (of the head's group) | x, dt | C |
| GLA | dv x dk | slot 3 = exp(gk) per column | k | v, 1 | q * dk^-0.5 |
| RetNet | dv x dk | K0 = gamma (per head) | k | v, 1 | q * dk^-0.5 |

so S is value-major (row r is S[r, :] over the key / state dimension), the transpose of the
[dk, dv] layout of flash-linear-attention. Mamba2 adds the skip D * x and, given z, the gate
silu(z) (mamba_ssm's selective_state_update; Mamba2's gated RMSNorm is the layer's). Every
descriptor is in the board's hardware subset (`isa.stream_hw_cfg`).

`engine="vops"` runs the same step as VOPs over row chunks in TMEM (MUL for Dv, OUTER with the
decay, RDOT), bit-identical: for targets without STREAM, and the tests' cross-check.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import isa, ol
from ..ol import CompileError, Tensor, Tile
from ..ol.builder import MAX_LOOP_DEPTH, current
from .activations import softplus

VOP_CHUNK_WORDS = 1024        # state words per TMEM chunk of the VOP forms


@dataclass(eq=False)
class Mamba2Weights:
    """A Mamba2 layer's per-head constants in DRAM: A_log, dt_bias and the skip D, (H,) each."""
    a_log: Tensor
    dt_bias: Tensor
    d: Tensor


def _engine(engine: str | None) -> str:
    engine = engine or ("stream" if ol.has_stream() else "vops")
    if engine not in ("stream", "vops"):
        raise CompileError(f"recurrent step engine {engine!r}: 'stream' or 'vops'")
    return engine


def _check_state(state: Tensor, heads: int, rows: int, cols: int, what: str) -> None:
    if not isinstance(state, Tensor) or state.shape != (heads * rows, cols):
        raise CompileError(f"{what} state must be a ({heads * rows}, {cols}) DRAM tensor, not "
                           f"{getattr(state, 'shape', type(state).__name__)}")


def head_step(desc: isa.StreamDesc, state: Tensor, slots: Tile, x: Tile, consts: Tile, out: Tile, engine: str) -> None:
    """One head: Y = S * G + (x * K1)[:, None] * slots[1][None, :], O = Y . slots[0], S = Y.
    G is K0 (gate "const") or slot 3 (gate "col"); consts is a (2, 1) column view (K0, K1)."""
    if engine == "stream":
        ol.stream(desc, src=state, dst=state, slots=slots, x=x, consts=consts, out=out)
        return
    cols = state.cols
    q, b = slots[0:cols], slots[cols:2 * cols]
    k0, k1 = consts[0:1, :].reshape(1), consts[1:2, :].reshape(1)
    decay = slots[3 * cols:4 * cols] if desc.g_src == isa.G_SLOT else k0
    for s, rows_of in vop_chunks(state):
        ol.outer(s, rows_of(x) * k1, b, decay=decay)
        rows_of(out).set(s @ q)


def vop_chunks(state: Tensor):
    """The VOP forms' pass over a DRAM state in chunks of at most VOP_CHUNK_WORDS words: the
    whole chunks in a hardware loop (unrolled when the loops already nest as deep as the hardware
    allows, as in a layer inside a model's nested layer loops), then the rest. Yields (the chunk
    loaded into TMEM, a function giving the chunk's rows of a per-row 1-D tile) and stores the
    chunk back when the caller is done."""
    rows, cols = state.shape
    chunk = max(1, min(rows, VOP_CHUNK_WORDS // cols))
    full, tail = divmod(rows, chunk)

    def part(r0, n):
        return Tensor(state.base + 4 * cols * r0, (n, cols)), (lambda t: t.view(t.base + r0, (n,)))
    looped = full > 1 and len(current().loops) < MAX_LOOP_DEPTH
    whole = ol.range(full) if looped else range(full)
    parts = [(whole, chunk)] + ([(iter([full * chunk]), tail)] if tail else [])
    for starts, n in parts:
        for i in starts:
            rows_t, rows_of = part(i * chunk if n == chunk else i, n)
            s = ol.load(rows_t)
            yield s, rows_of
            ol.store(rows_t, s)


def _heads(desc, state: Tensor, slot_rows: Tile, group: int, x: Tile, consts: Tile, engine: str) -> Tile:
    """Every head h: its slots are row h // group of `slot_rows`, its K0, K1 column h of `consts`."""
    heads, rows = x.shape
    out = ol.empty((heads, rows), banked=False)
    for h in ol.static_range(heads):
        head_step(desc, state[h * rows:(h + 1) * rows], slot_rows[h // group], x[h], consts[:, h:h + 1], out[h],
                  engine)
    return out


def mamba2_step(x: Tile, dt: Tile, b: Tile, c: Tile, w: Mamba2Weights, state: Tensor, z: Tile | None = None,
                engine: str | None = None) -> Tile:
    """One token of a Mamba2 SSM: x (H, P); dt (H,) before its bias and softplus; b, c (G, N)
    shared by H/G heads each; states (H*P, N) in DRAM. Returns y = S C + D x (times silu(z) when
    z (H, P) is given), (H, P)."""
    engine = _engine(engine)
    if x.ndim != 2 or b.ndim != 2 or c.shape != b.shape:
        raise CompileError(f"mamba2_step: x (H, P), b and c (G, N), not {x.shape}, {b.shape}, {c.shape}")
    heads, p = x.shape
    groups, n = b.shape
    if heads % groups or dt.rows * dt.cols != heads:
        raise CompileError(f"mamba2_step: {heads} heads, {groups} groups, dt of shape {dt.shape}")
    _check_state(state, heads, p, n, "mamba2_step")
    dt1 = softplus(dt.reshape(heads) + ol.load(w.dt_bias))
    consts = ol.empty((2, heads), banked=False)
    rate = ol.exp2(ol.load(w.a_log) * ol.LOG2E) * -ol.LOG2E          # A * log2(e), A = -exp(A_log)
    consts[0].set(ol.exp2(dt1 * rate))
    consts[1].set(dt1)
    slots = ol.empty((groups, 2 * n), banked=False)                  # per group: C (slot 0), B (slot 1)
    slots[:, 0:n].set(c)
    slots[:, n:2 * n].set(b)
    desc = isa.state_desc(p, n, isa.D_SCALE, gate="const", q=True)
    y = _heads(desc, state, slots, heads // groups, x, consts, engine)
    y = y + x * ol.load(w.d)[:, None]
    return y * ol.silu(z) if z is not None else y


def _qk_slots(q: Tile, k: Tile, gate: Tile | None) -> Tile:
    """Per head: q * dk^-0.5 (slot 0), k (slot 1) and, for GLA, exp(gk) (slot 3)."""
    if q.ndim != 2 or k.shape != q.shape:
        raise CompileError(f"q and k must be (H, dk) tiles of one shape, not {q.shape} and {k.shape}")
    heads, dk = q.shape
    slots = ol.empty((heads, (4 if gate is not None else 2) * dk), banked=False)
    slots[:, 0:dk].set(q * dk ** -0.5)
    slots[:, dk:2 * dk].set(k)
    if gate is not None:
        slots[:, 3 * dk:4 * dk].set(ol.exp2(gate * ol.LOG2E))
    return slots


def _unit_consts(decay: Tile | None, heads: int) -> Tile:
    """(2, H): K0 the per-head decay (or 1), K1 = 1."""
    consts = ol.full((2, heads), 1.0) if decay is None else ol.empty((2, heads), banked=False)
    if decay is not None:
        consts[0].set(decay)
        consts[1].set(1.0)
    return consts


def gla_step(q: Tile, k: Tile, v: Tile, gk: Tile, state: Tensor, engine: str | None = None) -> Tile:
    """One token of gated linear attention: q, k, gk (H, dk) with gk the log decay per key
    dimension (flash-linear-attention's fused_recurrent_gla), v (H, dv); states (H*dv, dk) in
    DRAM. Returns o (H, dv)."""
    engine = _engine(engine)
    if gk.shape != q.shape or v.ndim != 2 or v.rows != q.rows:
        raise CompileError(f"gla_step: q, k, gk (H, dk) and v (H, dv), not {q.shape}, {gk.shape}, {v.shape}")
    _check_state(state, v.rows, v.cols, q.cols, "gla_step")
    slots = _qk_slots(q, k, gk)
    desc = isa.state_desc(v.cols, q.cols, isa.D_SCALE, gate="col", q=True)
    return _heads(desc, state, slots, 1, v, _unit_consts(None, v.rows), engine)


def retnet_step(q: Tile, k: Tile, v: Tile, gamma: Tile, state: Tensor, engine: str | None = None) -> Tile:
    """One token of RetNet's recurrent retention: q, k (H, dk), v (H, dv), gamma (H,) the per-head
    decay (RetNet's 1 - 2^(-5-h)); states (H*dv, dk) in DRAM. Returns o (H, dv)."""
    engine = _engine(engine)
    if v.ndim != 2 or v.rows != q.rows or gamma.rows * gamma.cols != q.rows:
        raise CompileError(f"retnet_step: q, k (H, dk), v (H, dv), gamma (H,), not {q.shape}, {v.shape}, "
                           f"{gamma.shape}")
    _check_state(state, v.rows, v.cols, q.cols, "retnet_step")
    slots = _qk_slots(q, k, None)
    desc = isa.state_desc(v.cols, q.cols, isa.D_SCALE, gate="const", q=True)
    return _heads(desc, state, slots, 1, v, _unit_consts(gamma.reshape(q.rows), q.rows), engine)
