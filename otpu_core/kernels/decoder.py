"""A Qwen3-style decoder step (one token) from the library kernels: the shape a model program takes.

Layers are identical DRAM blocks `stride` bytes apart, so the layer loop is one hardware LOOP
and every layer address is `layer-0 address + l * stride` (one address register). Per layer:
RMSNorm folded into the QACT, q/k/v MMs, per-head q/k RMSNorm, RoPE from the position's table
rows, K/V appends, flash attention per KV head (query groups of heads/kv_heads rows), o_proj
with the residual, then the SwiGLU MLP with the residual. After the layers: the final norm and
the LM head in row chunks (logits to DRAM).

`plan_layer` lays out a layer block through any `alloc_weight(shape, parts)` /
`alloc_tensor(shape)` / `alloc_kv(cap, d)`: the runtime Image (real weights, for tests) or the
address-only `AddressPlan` (for compiling full-size models). The step comes in two forms: per
position (a compile-time position) and resident (the position a run-time argument, one
program per attention bucket).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .. import ol
from ..ol import Affine, CompileError, KVCache, QTensor, Tensor
from .attention import append_kv, attention
from .mlp import swiglu_mlp
from .norm import rmsnorm, rmsnorm_quantized
from .rope import rope


@dataclass(frozen=True)
class DecoderShape:
    layers: int
    d: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    cap: int                  # KV capacity in tokens
    f_chunk: int = 1024
    head_chunk: int = 8192
    eps: float = 1e-6
    attn_block: int = 256

    @property
    def group(self) -> int: return self.heads // self.kv_heads


QWEN3_0_6B = DecoderShape(layers=28, d=1024, heads=16, kv_heads=8, head_dim=128, ffn=3072, vocab=151936, cap=2048)


@dataclass
class Layer:
    """Layer 0's descriptors; `at(l)` shifts every address by l * stride."""
    ln1: Tensor
    wq: QTensor
    wk: QTensor
    wv: QTensor
    wo: QTensor
    qn: Tensor
    kn: Tensor
    ln2: Tensor
    wg: QTensor
    wu: QTensor
    wd: QTensor
    kv: list
    stride: int = 0

    def at(self, l) -> "Layer":
        delta = Affine.of(l) * self.stride
        return Layer(*(ol.shift(getattr(self, f.name), delta) for f in dataclasses.fields(self)[:-1]), self.stride)


def plan_layer(shape: DecoderShape, alloc_weight, alloc_tensor, alloc_kv) -> Layer:
    s = shape
    return Layer(ln1=alloc_tensor((s.d,)), wq=alloc_weight((s.heads * s.head_dim, s.d)),
                 wk=alloc_weight((s.kv_heads * s.head_dim, s.d)), wv=alloc_weight((s.kv_heads * s.head_dim, s.d)),
                 wo=alloc_weight((s.d, s.heads * s.head_dim)), qn=alloc_tensor((s.head_dim,)),
                 kn=alloc_tensor((s.head_dim,)), ln2=alloc_tensor((s.d,)), wg=alloc_weight((s.ffn, s.d)),
                 wu=alloc_weight((s.ffn, s.d)), wd=alloc_weight((s.d, s.ffn), parts=s.f_chunk),
                 kv=[alloc_kv(s.cap, s.head_dim) for _ in range(s.kv_heads)])


def check_layers(layers: list) -> Layer:
    """Layer 0 with its stride, after checking every layer block sits at l * stride."""
    first = layers[0]
    stride = layers[1].ln1.base.const - first.ln1.base.const if len(layers) > 1 else 0
    for l, layer in enumerate(layers):
        if layer.ln1.base.const != first.ln1.base.const + l * stride or \
                layer.kv[-1].v_scale.const - layer.ln1.base.const != first.kv[-1].v_scale.const - first.ln1.base.const:
            raise ValueError(f"layer {l} is not laid out like layer 0 at {stride} bytes per layer")
    first.stride = stride
    return first


def random_decoder(img, shape: DecoderShape, rng: np.random.Generator) -> tuple[list, dict, np.ndarray]:
    """Random weights for a decoder of `shape` placed in a runtime Image (tests, profiling
    workloads): the layers, every argument of `decoder_step` but the position, and the RoPE
    angles [cap, head_dim / 2] whose cos and sin tables are in DRAM."""
    s = shape

    def weight(sh, parts=None):
        w = (rng.standard_normal(sh) / np.sqrt(sh[1])).astype(np.float32)
        return img.weight_parts(w, parts) if parts else img.weight(w)

    def tensor(sh):
        return img.tensor((1.0 + 0.1 * rng.standard_normal(sh)).astype(np.float32))
    layers = [plan_layer(s, weight, tensor, img.kv_cache) for _ in range(s.layers)]
    args = dict(layer=check_layers(layers), final_norm=tensor((s.d,)), head=weight((s.vocab, s.d)),
                x=img.tensor(shape=(s.d,)), logits=img.tensor(shape=(s.vocab,)))
    theta = np.outer(np.arange(s.cap), 1.0 / 10000 ** (np.arange(s.head_dim // 2) / (s.head_dim // 2)))
    args["cos"], args["sin"] = img.tensor(np.cos(theta)), img.tensor(np.sin(theta))
    return layers, args, theta


def decoder_step(x: Tensor, logits: Tensor, layer: Layer, final_norm: Tensor, head: QTensor, cos: Tensor,
                 sin: Tensor, shape: DecoderShape, pos: int | None = None, bucket: int | None = None,
                 mask: Tensor | None = None) -> None:
    """One token (its embedding in x): appends K/V and writes the logits.

    Per-position form: `pos` a compile-time position. Resident form: `pos=None` and `bucket` b
    with the attention `mask` table; the position is the run-time value `pos` (one program
    serves positions [256b, 256b + 256), `Program.arg_words(pos=p)`)."""
    s = shape
    if pos is None:
        if bucket is None or mask is None:
            raise CompileError("a resident decode step needs bucket= and mask= (attention.mask_table())")
        pos, blocks = ol.runvar("pos"), bucket
        n_tokens = pos + 1
    else:
        if not 0 <= pos < s.cap:
            raise CompileError(f"position {pos} outside the KV capacity {s.cap}")
        n_tokens, blocks = pos + 1, None
    h = ol.load(x)
    c, sn = ol.load(cos[pos]), ol.load(sin[pos])
    att = ol.empty((s.heads, s.head_dim), banked=False)
    for li in ol.range(s.layers):
        L = layer.at(li)
        xn = rmsnorm_quantized(h, ol.load(L.ln1), s.eps)
        q = rope(rmsnorm(ol.dot(xn, L.wq).reshape(s.heads, s.head_dim), ol.load(L.qn), s.eps), c, sn)
        k = rope(rmsnorm(ol.dot(xn, L.wk).reshape(s.kv_heads, s.head_dim), ol.load(L.kn), s.eps), c, sn)
        v = ol.dot(xn, L.wv).reshape(s.kv_heads, s.head_dim)
        for g in ol.static_range(s.kv_heads):
            append_kv(L.kv[g], pos, k[g], v[g])
            att[g * s.group:(g + 1) * s.group].set(
                attention(q[g * s.group:(g + 1) * s.group], L.kv[g], n_tokens, s.attn_block,
                          full_blocks=blocks, mask=mask))
        h += ol.dot(att.reshape(s.heads * s.head_dim), L.wo)
        h += swiglu_mlp(rmsnorm_quantized(h, ol.load(L.ln2), s.eps), L.wg, L.wu, L.wd, s.f_chunk)
    hn = rmsnorm_quantized(h, ol.load(final_norm), s.eps)
    full, tail = divmod(s.vocab, s.head_chunk)
    for ci in ol.range(full):
        ol.store(logits.window(0, 1, ci * s.head_chunk, s.head_chunk), ol.dot(hn, head.rows(ci * s.head_chunk, s.head_chunk)))
    if tail:
        ol.store(logits.window(0, 1, full * s.head_chunk, tail), ol.dot(hn, head.rows(full * s.head_chunk, tail)))


class AddressPlan:
    """Descriptors with DRAM addresses but no data (same layout rules as the runtime Image):
    enough to compile a full-size model's programs."""
    ALIGN = 128

    def __init__(self, D: int, base: int = 128):
        self.D, self.cursor = D, base

    def alloc(self, nbytes: int) -> int:
        addr = self.cursor
        self.cursor = -(-(addr + max(nbytes, 1)) // self.ALIGN) * self.ALIGN
        return addr

    def tensor(self, shape) -> Tensor:
        n = 1
        for v in shape:
            n *= v
        return Tensor(self.alloc(4 * n), tuple(shape))

    def weight(self, shape, parts: int | None = None) -> QTensor:
        n, k = shape
        cols = parts or k
        kb = -(-cols // self.D)
        first = None
        for _ in range(k // cols):
            data, scale = self.alloc(n * kb * self.D), self.alloc(n * 4 * kb)
            first = first or (data, scale)
        q = QTensor(first[0], first[1], (n, kb * self.D), kb * self.D, 4 * kb, 0, self.D)
        if parts:
            q.part_stride = (-(-n * kb * self.D // self.ALIGN) * self.ALIGN + -(-n * 4 * kb // self.ALIGN) * self.ALIGN,) * 2
        return q

    def kv(self, cap: int, d: int) -> KVCache:
        D = self.D
        return KVCache(self.alloc(cap * d), self.alloc(4 * cap * (d // D)), self.alloc(d * cap), self.alloc(4 * cap),
                       cap, d)


def plan_addresses(shape: DecoderShape, D: int, resident: bool = False) -> dict:
    """Every argument of `decoder_step` for a model of this shape, addresses only (with the
    attention mask table for the resident form)."""
    p = AddressPlan(D)
    args = dict(x=p.tensor((shape.d,)), logits=p.tensor((shape.vocab,)), final_norm=p.tensor((shape.d,)),
                cos=p.tensor((shape.cap, shape.head_dim // 2)), sin=p.tensor((shape.cap, shape.head_dim // 2)))
    layers = [plan_layer(shape, lambda sh, parts=None: p.weight(sh, parts), p.tensor, p.kv) for _ in range(shape.layers)]
    args["layer"] = check_layers(layers)
    args["head"] = p.weight((shape.vocab, shape.d))
    if resident:
        args["mask"] = p.tensor((shape.attn_block, shape.attn_block))
    return args
