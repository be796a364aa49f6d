"""The two references a card's logits are judged against (models.md section 3), in float64 numpy.

- fp32 golden (`Golden(cfg, SourceWeights(ckpt))`): the model as its checkpoint defines it:
  unquantised weights, RMSNorm, RoPE (with the family's theta, Llama 3 scaling, NoPE layers),
  q/k norms, grouped-query softmax attention, SwiGLU, tied or untied head; LFM2's convolution
  layers: in_proj to B, C, x, the causal depthwise convolution of B*x over the last taps
  positions (zeros before the first), C times it, out_proj; Qwen3.5's Gated DeltaNet layers:
  in_proj_qkv through the causal convolution and SiLU, the gated delta rule per value head
  (kernels.reference.gated_deltanet, its state kept per layer), the gated RMSNorm, out_proj;
  its attention: RoPE on the first rotary_dim dims of a head, the output times sigmoid(gate); a
  mixture of experts (Qwen3-MoE): the router's softmax over every expert, the k most probable
  (ties: the lower index), their probabilities (renormalised to sum to 1 with `norm_topk`), the
  weighted sum of their SwiGLU outputs; LFM2-MoE's sigmoid router (the k best of sigmoid +
  bias, weighted by the unbiased sigmoids) past its leading dense layers; Gemma 4 (every field of families/config it has): the
  embedding times sqrt(hidden), sliding layers over their last `sliding_window` positions and full layers with their own head width and (proportional) RoPE,
  the last `kv_shared` layers attending over an earlier layer's KV, v normed without a weight,
  scores without 1/sqrt(head_dim), the norms after the mixer and the MLP, GeGLU, the per-layer
  embeddings (the table row times sqrt(ple) plus the normed projection of the embedding, over
  sqrt(2); per layer gelu(gate h) times it, projected, normed, added), the layer scalar, and the
  final logit soft cap.
- quantised golden (`Golden(cfg, CardWeights(conv), CardNumerics(...))`): the same forward with
  the card's quantisation points applied exactly and nothing else: the weights the MXU
  multiplies (formats.py's dequantisation of the converted tensors), the embedding row the card reads,
  every matmul input quantised as QACT does (per row and D-block, or one scale per row with
  sub-block offsets for the seed formats, F-chunk by F-chunk in the MLP and in each expert; the
  router and every expert take the same quantised input), K stored per
  (token, D-block) and V per token as QST does, q quantised with log2(e)/sqrt(d) folded in, and
  the flash attention's blocks of a page: running maximum, p = 2^(s - m), P times the V scales
  quantised per D-block of tokens, the alpha rescale. All arithmetic between those points is
  float64, so the distance to the card is its fp32 rounding and nothing else; a wrong kernel
  detail (a RoPE theta, a norm epsilon, the KV layout) moves it far more.

Neither ever runs the simulator or a compiled program. `forward(tokens)` continues the
sequence (its KV cache grows) and returns the logits of every token it was given.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import formats
from .. import fp32 as F
from ..kernels import reference as R
from .config import ModelConfig

MASKED = -1.0e30
SIGMOID_NORM_EPS = 1e-6       # transformers' Lfm2MoeTopKRouter: weights / (sum + 1e-6)
LOG2E = 1.4426950408889634


class SourceWeights:
    """The checkpoint's own weights, held as float64 (8 bytes a weight: a 0.6B model needs 4.8 GB)."""

    def __init__(self, ckpt):
        self.ckpt = ckpt
        self._cache: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = self.ckpt.get(name).astype(np.float64)
        return self._cache[name]

    def embed(self, tok: int) -> np.ndarray:
        return self.get("embed")[tok].astype(np.float64)

    def ple_row(self, tok: int) -> np.ndarray:
        """A row of the per-layer table, read alone from the file (E2B's is 9.4 GB as float32)."""
        return self.ckpt.read_rows("ple", int(tok), 1)[0].astype(np.float64)

    def down_parts(self, name: str) -> list[np.ndarray]:
        """A down projection (`wd.3`, an expert's `ed.3.5`) as the column parts the MLP sums."""
        return [self.get(name)]


class CardWeights:
    """What the card multiplies: the converted tensors, dequantised by the format definitions."""

    def __init__(self, conv, embed_kind: str):
        self.conv, self.embed_kind = conv, embed_kind      # layout.embed_kind: "f32", "head" or "int8"
        self._cache: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray:
        if name not in self._cache:
            t = self.conv.tensors[name]
            if isinstance(t, list):
                self._cache[name] = np.concatenate([p.dequantize() for p in t], axis=1)
            elif isinstance(t, formats.PackedWeights):
                self._cache[name] = t.dequantize()
            else:
                self._cache[name] = np.asarray(t, np.float64)
        return self._cache[name]

    def embed(self, tok: int) -> np.ndarray:
        if self.embed_kind == "f32":
            return np.asarray(self.conv.tensors["embed"][tok], np.float64)
        t = self.conv.tensors["head" if self.embed_kind == "head" else "embed"]
        row = formats.PackedWeights(t.wf, t.d, 1, t.k, np.asarray(t.rows[tok:tok + 1]), np.asarray(t.scales[tok:tok + 1]))
        return row.dequantize()[0]

    def ple_row(self, tok: int) -> np.ndarray:
        """The per-layer table's row as the host serves it (fp32 rows)."""
        return np.asarray(self.conv.tensors["ple"][tok], np.float64)

    def down_parts(self, name: str) -> list[np.ndarray]:
        return [p.dequantize() for p in self.conv.tensors[name]]


@dataclass(frozen=True)
class CardNumerics:
    """The card's quantisation points: block size D, attention page, activation quantiser."""
    D: int
    page: int
    seed_acts: bool          # seed formats: one scale per row with sub-block offsets (QACT ROW + SUB)


class Golden:
    def __init__(self, cfg: ModelConfig, weights, card: CardNumerics | None = None, positions: int | None = None):
        self.cfg, self.w, self.card = cfg, weights, card
        n = positions or cfg.context
        self.cos, self.sin = cfg.rope_tables(n)
        self.tables = {kind: cfg.rope_tables(n, kind) for kind in set(cfg.kinds)}
        self.reset()

    def reset(self) -> None:
        c, n = self.cfg, self.cos.shape[0]
        # per layer that keeps a KV cache: keys as stored (card: dequantised), values (fp) or V codes
        # (card), the card's V scale per (token, head); a KV-sharing layer has none of its own
        own = [i for i in range(c.layers) if not c.shares_kv(i)]
        self.k = {i: np.zeros((n, c.kv_heads, c.head_dim_of(i))) for i in own}
        self.v = {i: np.zeros((n, c.kv_heads, c.head_dim_of(i))) for i in own}
        self.vs = {i: np.zeros((n, c.kv_heads)) for i in own}
        self.bx = np.zeros((c.layers, max(c.conv_taps - 1, 0), c.d))   # conv layers: B*x of the last taps-1 tokens
        if "deltanet" in c.kinds:                                     # DeltaNet: conv inputs of the last taps-1
            self.gx = np.zeros((c.layers, c.conv_taps - 1, c.gdn_conv_dim))   # tokens and the state per head
            self.S = np.zeros((c.layers, c.lin_v_heads, c.lin_k_dim, c.lin_v_dim))
        self.routes: list[tuple[int, ...]] = []      # a mixture of experts: each (position, layer)'s experts, best first
        self.n = 0

    # -- the card's quantisation points ----------------------------------------------------------
    def _act(self, x: np.ndarray) -> np.ndarray:
        """A matmul input as QACT leaves it (identity for the fp32 golden)."""
        if self.card is None:
            return x
        if self.card.seed_acts:
            q, s, e = formats.quantize_suboffsets(F.from_float(x.astype(np.float32))[None, :], self.card.D)
            return formats.act_values(q, s, e, self.card.D)[0]
        return R.quantize_rows(x[None, :], self.card.D)[0]

    def _store_kv(self, layer: int, k: np.ndarray, v: np.ndarray) -> None:
        t = self.n
        if self.card is None:
            self.k[layer][t], self.v[layer][t] = k, v
            return
        self.k[layer][t] = R.quantize_rows(k, self.card.D)
        codes, scale = F.quantize(v.astype(np.float32))            # one scale per token and head (QST ROW)
        self.v[layer][t], self.vs[layer][t] = codes, F.to_float(scale)

    # -- attention ---------------------------------------------------------------------------------
    def _attend(self, layer: int, q: np.ndarray, lo: int = 0) -> np.ndarray:
        """q over the cache of `layer` from position `lo` (a sliding window's first) to the current one."""
        cfg, n = self.cfg, self.n + 1
        K, V = self.k[layer][:n], self.v[layer][:n]                       # [n, KV, hd]
        hd = K.shape[2]
        scale = 1.0 if cfg.spec.unit_scores else 1.0 / np.sqrt(hd)
        if self.card is None:                                             # softmax(q K^T * scale) V, per group
            qg = q.reshape(cfg.kv_heads, cfg.group, hd)
            s = np.einsum("kgd,nkd->kgn", qg, K[lo:]) * scale
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            return (np.einsum("kgn,nkd->kgd", p, V[lo:]) / p.sum(axis=-1)[..., None]).reshape(q.shape)
        out = np.empty_like(q)
        for g in range(cfg.kv_heads):
            rows = slice(g * cfg.group, (g + 1) * cfg.group)
            out[rows] = self._flash(q[rows], K[:, g], V[:, g], self.vs[layer][:n, g], scale, lo)
        return out

    def _flash(self, q: np.ndarray, K: np.ndarray, Vq: np.ndarray, vs: np.ndarray, scale: float,
               lo: int = 0) -> np.ndarray:
        """The card's blocks: pages of P tokens from the one holding `lo`, keys before `lo` masked."""
        D, P = self.card.D, self.card.page
        c = float(F.to_float(F.from_float(LOG2E * scale)))
        qq = R.quantize_rows(q * c, D)
        m = np.full(q.shape[0], MASKED)
        l = np.zeros(q.shape[0])
        acc = np.zeros(q.shape)
        n = K.shape[0]
        for t0 in range(lo // P * P, n, P):
            t1 = min(n, t0 + P)
            s = qq @ K[t0:t1].T
            if t0 < lo:
                s[:, :lo - t0] = MASKED
            m_new = np.maximum(m, s.max(axis=1))
            p = np.exp2(s - m_new[:, None])
            alpha = np.exp2(m - m_new)
            pq = R.quantize_rows(p * vs[None, t0:t1], D)[:, :t1 - t0]
            acc = acc * alpha[:, None] + pq @ Vq[t0:t1]
            l = l * alpha + p.sum(axis=1)
            m = m_new
        return acc / l[:, None]

    # -- the layer kinds' mixers -------------------------------------------------------------------
    def _attention(self, li: int, xn: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
        cfg, w, hd = self.cfg, self.w, self.cfg.head_dim_of(li)
        src = cfg.kv_source(li)
        q = (xn @ w.get(f"wq.{li}").T).reshape(cfg.heads, -1)
        q, gate = q[:, :hd], q[:, hd:]             # Qwen3.5: query and output gate per head
        if cfg.qk_norm:
            q = R.rmsnorm(q, w.get(f"qn.{li}"), cfg.qk_eps)
        if cfg.uses_rope(li):
            q = _rope_part(q, c, s, cfg.rotary_dim or hd)
        if src == li:
            k = (xn @ w.get(f"wk.{li}").T).reshape(cfg.kv_heads, hd)
            v = (xn @ w.get(f"wv.{li}").T).reshape(cfg.kv_heads, hd)
            if cfg.qk_norm:
                k = R.rmsnorm(k, w.get(f"kn.{li}"), cfg.qk_eps)
            if cfg.spec.v_norm:
                v = R.rmsnorm(v, np.ones(hd), cfg.norm_eps)
            if cfg.uses_rope(li):
                k = _rope_part(k, c, s, cfg.rotary_dim or hd)
            self._store_kv(li, k, v)
        lo = max(0, self.n + 1 - cfg.sliding_window) if cfg.kinds[li] == "sliding" else 0
        att = self._attend(src, q, lo)
        if gate.size:
            att = att * R.sigmoid(gate)
        return self._act(att.reshape(-1)) @ w.get(f"wo.{li}").T

    def _conv(self, li: int, xn: np.ndarray) -> np.ndarray:
        """LFM2's gated short convolution of one token; its B*x joins the layer's history."""
        d, w = self.cfg.d, self.w
        bcx = xn @ w.get(f"cin.{li}").T
        b, cgate, x = bcx[:d], bcx[d:2 * d], bcx[2 * d:]
        bx = b * x
        window = np.vstack([self.bx[li], bx[None, :]])                  # [taps, d], oldest first
        conv = np.einsum("td,dt->d", window, w.get(f"conv.{li}"))
        self.bx[li] = window[1:]
        return self._act(cgate * conv) @ w.get(f"cout.{li}").T

    def _deltanet(self, li: int, xn: np.ndarray) -> np.ndarray:
        """Qwen3.5's Gated DeltaNet of one token; its conv input joins the layer's history, its state moves on."""
        cfg, w = self.cfg, self.w
        hk, hv, dk, dv = cfg.lin_k_heads, cfg.lin_v_heads, cfg.lin_k_dim, cfg.lin_v_dim
        window = np.vstack([self.gx[li], (xn @ w.get(f"gqkv.{li}").T)[None, :]])      # [taps, channels]
        self.gx[li] = window[1:]
        mixed = R.silu(np.einsum("tc,ct->c", window, w.get(f"gconv.{li}")))
        q, k, v = mixed[:hk * dk], mixed[hk * dk:2 * hk * dk], mixed[2 * hk * dk:]
        z, b, a = (xn @ w.get(f"{n}.{li}").T for n in ("gz", "gb", "ga"))
        y, self.S[li] = R.gated_deltanet(q.reshape(1, hk, dk), k.reshape(1, hk, dk), v.reshape(1, hv, dv),
                                         z.reshape(1, hv, dv), a[None], b[None], w.get(f"galog.{li}"),
                                         w.get(f"gdt.{li}"), w.get(f"gnorm.{li}"), state=self.S[li], eps=cfg.norm_eps)
        return self._act(y.reshape(-1)) @ w.get(f"gout.{li}").T

    # -- the MLPs -------------------------------------------------------------------------------------
    def _gated_mlp(self, xn: np.ndarray, gate: str, up: str, down: str) -> np.ndarray:
        """down(act(xn Wg^T) * (xn Wu^T)) with the family's activation (SwiGLU, GeGLU), the hidden
        vector quantised part by part for W_down's parts."""
        w = self.w
        hh = _activation(self.cfg.spec)(xn @ w.get(gate).T) * (xn @ w.get(up).T)
        y = np.zeros(self.cfg.d)
        parts = w.down_parts(down)
        fc = parts[0].shape[1]
        for ci, wd in enumerate(parts):
            y += self._act(hh[ci * fc:(ci + 1) * fc]) @ wd.T
        return y

    def _experts(self, li: int, xn: np.ndarray) -> np.ndarray:
        """The routed experts' weighted sum (Qwen3-MoE; renormalised with norm_topk_prob). A sigmoid
        router (LFM2-MoE): scores sigmoid(logits), the k best of score + ebias, weighted by their
        unbiased scores (renormalised over the k as transformers does, sum + 1e-6), times routed_scale."""
        cfg = self.cfg
        logits = xn @ self.w.get(f"router.{li}").T
        if cfg.spec.moe_gating == "sigmoid":
            p = R.sigmoid(logits)
            pick = p + self.w.get(f"ebias.{li}") if cfg.expert_bias else p
            best = np.argsort(-pick, kind="stable")[:cfg.experts_used]
            weights = p[best] / (p[best].sum() + SIGMOID_NORM_EPS) if cfg.norm_topk else p[best]
            weights = weights * cfg.routed_scale
        else:
            p = np.exp(logits - logits.max())
            p /= p.sum()
            best = np.argsort(-logits, kind="stable")[:cfg.experts_used]
            weights = p[best] / p[best].sum() if cfg.norm_topk else p[best]
        self.routes.append(tuple(int(e) for e in best))
        return sum(wj * self._gated_mlp(xn, f"eg.{li}.{e}", f"eu.{li}.{e}", f"ed.{li}.{e}")
                   for wj, e in zip(weights, best))

    # -- the forward pass --------------------------------------------------------------------------
    def _per_layer_inputs(self, tok: int, e: np.ndarray) -> np.ndarray:
        """Gemma's per-layer inputs [layers, ple]: (norm(e Wp^T / sqrt(d)) + row * sqrt(ple)) / sqrt(2)."""
        cfg, w, ple = self.cfg, self.w, self.cfg.ple_dim
        proj = (self._act(e) @ w.get("plp").T).reshape(cfg.layers, ple) * (1.0 / np.sqrt(cfg.d))
        proj = R.rmsnorm(proj, w.get("pln"), cfg.norm_eps)
        return (proj + w.ple_row(tok).reshape(cfg.layers, ple) * np.sqrt(ple)) * np.sqrt(0.5)

    def _post(self, name: str, y: np.ndarray) -> np.ndarray:
        """A sandwich norm of a sub-block's output (identity for the families without them)."""
        return R.rmsnorm(y, self.w.get(name), self.cfg.norm_eps) if self.cfg.spec.sandwich_norms else y

    def step(self, tok: int) -> np.ndarray:
        """Feed one token at the next position; its logits (float64 [vocab])."""
        cfg, w, pos, spec = self.cfg, self.w, self.n, self.cfg.spec
        if pos >= self.cos.shape[0]:
            raise ValueError(f"position {pos} past the {self.cos.shape[0]} RoPE positions of this reference")
        h = w.embed(tok).astype(np.float64)
        if spec.embed_scaled:
            h = h * float(F.to_float(F.from_float(np.sqrt(cfg.d))))
        per = self._per_layer_inputs(tok, h) if cfg.ple_dim else None
        act = _activation(spec)
        for li, kind in enumerate(cfg.kinds):
            c, s = self.tables[kind][0][pos], self.tables[kind][1][pos]
            xn = self._act(R.rmsnorm(h, w.get(f"ln1.{li}"), cfg.norm_eps))
            mixer = {"conv": self._conv, "deltanet": self._deltanet}.get(kind)
            h = h + self._post(f"an.{li}", mixer(li, xn) if mixer else self._attention(li, xn, c, s))
            xn = self._act(R.rmsnorm(h, w.get(f"ln2.{li}"), cfg.norm_eps))
            y = self._experts(li, xn) if cfg.moe_layer(li) else self._gated_mlp(xn, f"wg.{li}", f"wu.{li}", f"wd.{li}")
            h = h + self._post(f"fn.{li}", y)
            if per is not None:
                g = act(self._act(h) @ w.get(f"pg.{li}").T) * per[li]
                h = h + R.rmsnorm(self._act(g) @ w.get(f"pp.{li}").T, w.get(f"pn.{li}"), cfg.norm_eps)
            if spec.layer_scalar:
                h = h * w.get(f"ls.{li}")[0]
        self.n += 1
        hn = self._act(R.rmsnorm(h, w.get("final_norm"), cfg.norm_eps))
        logits = hn @ w.get("head").T
        if cfg.logit_softcap:
            logits = cfg.logit_softcap * np.tanh(logits / cfg.logit_softcap)
        return logits

    def forward(self, tokens) -> np.ndarray:
        return np.stack([self.step(int(t)) for t in tokens])


def _activation(spec):
    """The gated MLP's (and Gemma's per-layer gate's) activation."""
    return R.gelu_tanh if spec.act == "gelu_tanh" else R.silu


def _rope_part(x: np.ndarray, c: np.ndarray, s: np.ndarray, rot: int) -> np.ndarray:
    """RoPE (rotate-half) over the first `rot` dims of each head, the rest passed through."""
    if rot == x.shape[-1]:
        return R.rope(x, c, s)
    return np.concatenate([R.rope(x[..., :rot], c[:rot // 2], s[:rot // 2]), x[..., rot:]], -1)


def next_token_nll(golden: Golden, tokens, start: int = 1) -> tuple[float, int]:
    """From a fresh sequence: (sum of -log p(token t | tokens before t) over t >= start, how many t);
    exp(sum / count) is the perplexity of tokens[start:] (start = 1: the whole text)."""
    golden.reset()
    logits = golden.forward(tokens[:-1])
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    idx = np.arange(start - 1, len(tokens) - 1)
    return -float(logp[idx, np.asarray(tokens)[idx + 1]].sum()), int(idx.size)
