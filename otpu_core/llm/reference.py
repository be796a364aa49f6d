"""The two references a card's logits are judged against (models.md section 3), in float64 numpy.

- fp32 golden (`Golden(cfg, SourceWeights(ckpt))`): the model as its checkpoint defines it:
  unquantised weights, RMSNorm, RoPE (with the family's theta, Llama 3 scaling, NoPE layers),
  q/k norms, grouped-query softmax attention, SwiGLU, tied or untied head; LFM2's convolution
  layers: in_proj to B, C, x, the causal depthwise convolution of B*x over the last taps
  positions (zeros before the first), C times it, out_proj; a mixture of experts (Qwen3-MoE):
  the router's softmax over every expert, the k most probable (ties: the lower index), their
  probabilities (renormalised to sum to 1 with `norm_topk`), the weighted sum of their SwiGLU outputs.
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
        cos, sin = cfg.rope_tables(positions or cfg.context)
        self.cos, self.sin = cos, sin
        self.reset()

    def reset(self) -> None:
        c, n = self.cfg, self.cos.shape[0]
        self.k = np.zeros((c.layers, n, c.kv_heads, c.head_dim))      # keys as stored (card: dequantised)
        self.v = np.zeros((c.layers, n, c.kv_heads, c.head_dim))      # values (fp) or V codes (card)
        self.vs = np.zeros((c.layers, n, c.kv_heads))                 # card: V scale per (token, head)
        self.bx = np.zeros((c.layers, max(c.conv_taps - 1, 0), c.d))   # conv layers: B*x of the last taps-1 tokens
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
            self.k[layer, t], self.v[layer, t] = k, v
            return
        self.k[layer, t] = R.quantize_rows(k, self.card.D)
        codes, scale = F.quantize(v.astype(np.float32))            # one scale per token and head (QST ROW)
        self.v[layer, t], self.vs[layer, t] = codes, F.to_float(scale)

    # -- attention ---------------------------------------------------------------------------------
    def _attend(self, layer: int, q: np.ndarray) -> np.ndarray:
        cfg, n = self.cfg, self.n + 1
        K, V = self.k[layer, :n], self.v[layer, :n]                       # [n, KV, hd]
        if self.card is None:                                             # softmax(q K^T / sqrt(d)) V, per group
            qg = q.reshape(cfg.kv_heads, cfg.group, cfg.head_dim)
            s = np.einsum("kgd,nkd->kgn", qg, K) / np.sqrt(cfg.head_dim)
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            return (np.einsum("kgn,nkd->kgd", p, V) / p.sum(axis=-1)[..., None]).reshape(q.shape)
        out = np.empty_like(q)
        for g in range(cfg.kv_heads):
            rows = slice(g * cfg.group, (g + 1) * cfg.group)
            out[rows] = self._flash(q[rows], K[:, g], V[:, g], self.vs[layer, :n, g])
        return out

    def _flash(self, q: np.ndarray, K: np.ndarray, Vq: np.ndarray, vs: np.ndarray) -> np.ndarray:
        D, P, d = self.card.D, self.card.page, q.shape[1]
        c = float(F.to_float(F.from_float(LOG2E / np.sqrt(d))))
        qq = R.quantize_rows(q * c, D)
        m = np.full(q.shape[0], MASKED)
        l = np.zeros(q.shape[0])
        acc = np.zeros(q.shape)
        n = K.shape[0]
        for t0 in range(0, n, P):
            t1 = min(n, t0 + P)
            s = qq @ K[t0:t1].T
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
        cfg, w = self.cfg, self.w
        q = (xn @ w.get(f"wq.{li}").T).reshape(cfg.heads, cfg.head_dim)
        k = (xn @ w.get(f"wk.{li}").T).reshape(cfg.kv_heads, cfg.head_dim)
        v = (xn @ w.get(f"wv.{li}").T).reshape(cfg.kv_heads, cfg.head_dim)
        if cfg.qk_norm:
            q = R.rmsnorm(q, w.get(f"qn.{li}"), cfg.qk_eps)
            k = R.rmsnorm(k, w.get(f"kn.{li}"), cfg.qk_eps)
        if cfg.uses_rope(li):
            q, k = R.rope(q, c, s), R.rope(k, c, s)
        self._store_kv(li, k, v)
        att = self._attend(li, q).reshape(-1)
        return self._act(att) @ w.get(f"wo.{li}").T

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

    # -- the MLPs -------------------------------------------------------------------------------------
    def _swiglu(self, xn: np.ndarray, gate: str, up: str, down: str) -> np.ndarray:
        """down(silu(xn Wg^T) * (xn Wu^T)), the hidden vector quantised part by part for W_down's parts."""
        w = self.w
        hh = R.silu(xn @ w.get(gate).T) * (xn @ w.get(up).T)
        y = np.zeros(self.cfg.d)
        parts = w.down_parts(down)
        fc = parts[0].shape[1]
        for ci, wd in enumerate(parts):
            y += self._act(hh[ci * fc:(ci + 1) * fc]) @ wd.T
        return y

    def _experts(self, li: int, xn: np.ndarray) -> np.ndarray:
        """The routed experts' weighted sum (Qwen3-MoE; renormalised with norm_topk_prob)."""
        logits = xn @ self.w.get(f"router.{li}").T
        p = np.exp(logits - logits.max())
        p /= p.sum()
        best = np.argsort(-logits, kind="stable")[:self.cfg.experts_used]
        self.routes.append(tuple(int(e) for e in best))
        weights = p[best] / p[best].sum() if self.cfg.norm_topk else p[best]
        return sum(wj * self._swiglu(xn, f"eg.{li}.{e}", f"eu.{li}.{e}", f"ed.{li}.{e}")
                   for wj, e in zip(weights, best))

    # -- the forward pass --------------------------------------------------------------------------
    def step(self, tok: int) -> np.ndarray:
        """Feed one token at the next position; its logits (float64 [vocab])."""
        cfg, w, pos = self.cfg, self.w, self.n
        if pos >= self.cos.shape[0]:
            raise ValueError(f"position {pos} past the {self.cos.shape[0]} RoPE positions of this reference")
        h = w.embed(tok).astype(np.float64)
        c, s = self.cos[pos], self.sin[pos]
        for li, kind in enumerate(cfg.kinds):
            xn = self._act(R.rmsnorm(h, w.get(f"ln1.{li}"), cfg.norm_eps))
            h = h + (self._conv(li, xn) if kind == "conv" else self._attention(li, xn, c, s))
            xn = self._act(R.rmsnorm(h, w.get(f"ln2.{li}"), cfg.norm_eps))
            h = h + (self._experts(li, xn) if cfg.experts else self._swiglu(xn, f"wg.{li}", f"wu.{li}", f"wd.{li}"))
        self.n += 1
        hn = self._act(R.rmsnorm(h, w.get("final_norm"), cfg.norm_eps))
        return hn @ w.get("head").T

    def forward(self, tokens) -> np.ndarray:
        return np.stack([self.step(int(t)) for t in tokens])


def next_token_nll(golden: Golden, tokens, start: int = 1) -> tuple[float, int]:
    """From a fresh sequence: (sum of -log p(token t | tokens before t) over t >= start, how many t);
    exp(sum / count) is the perplexity of tokens[start:] (start = 1: the whole text)."""
    golden.reset()
    logits = golden.forward(tokens[:-1])
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    idx = np.arange(start - 1, len(tokens) - 1)
    return -float(logp[idx, np.asarray(tokens)[idx + 1]].sum()), int(idx.size)
