"""The kernel library as small programs for the RTL: one `KernelCase` per kernel (and per weight
format for the matrix kernels), each compiled for a target with its DRAM image and run values,
so tests and benchmarks run the same programs on the RTL and on the golden simulator.

`kernel_cases(target)` lists them; `KernelCase.build()` returns (Image, Program, run values).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import ol
from .kernels import (GdnWeights, Mamba2Weights, append_kv, argmax, attention, embed, gated_deltanet_step, geglu_mlp,
                      gla_step, greedy_head, linear, mamba2_step, matmul, paged_attention, retnet_step, rmsnorm,
                      rmsnorm_quantized, rope, softcap_rows, softmax, swiglu_mlp, topk)
from .kernels import conv
from .target import load as load_target
from .kernels.decoder import DecoderShape, check_layers, decoder_step, plan_layer
from .ol.runtime import Image


@dataclass(frozen=True)
class KernelCase:
    name: str
    make: Callable[[str], tuple]
    target: str

    def build(self) -> tuple:
        """(Image, compiled Program, run values)"""
        return self.make(self.target)


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def _matmul(fmt: str, m: int = 3, k: int = 96, n: int = 40):
    def make(t):
        rng = _rng("matmul" + fmt)
        img = Image(t)
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        x, wq, y = img.tensor(a), img.weight(w, fmt), img.tensor(shape=(m, n))
        return img, ol.compile_kernel(matmul, t, x=x, w=wq, y=y, n_chunk=16), {}
    return make


def _rmsnorm(t):
    rng = _rng("rmsnorm")
    img = Image(t)
    x, w = rng.standard_normal((3, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    xt, wt, out = img.tensor(x), img.tensor(w), img.tensor(shape=x.shape)

    def k(x, w, out):
        ol.store(out, rmsnorm(ol.load(x), ol.load(w)))
    return img, ol.compile_kernel(k, t, x=xt, w=wt, out=out), {}


def _rmsnorm_quantized(t):
    rng = _rng("rmsnorm_quantized")
    img = Image(t)
    x, w = rng.standard_normal((2, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    xt, wt, wq, out = img.tensor(x), img.tensor(w), img.weight(rng.standard_normal((8, 64))), img.tensor(shape=(2, 8))

    def k(x, w, wq, out):
        ol.store(out, ol.dot(rmsnorm_quantized(ol.load(x), ol.load(w)), wq))
    return img, ol.compile_kernel(k, t, x=xt, w=wt, wq=wq, out=out), {}


def _softmax(t):
    rng = _rng("softmax")
    img = Image(t)
    x = (rng.standard_normal((3, 70)) * 3).astype(np.float32)
    xt, out = img.tensor(x), img.tensor(shape=x.shape)

    def k(x, out):
        ol.store(out, softmax(ol.load(x)))
    return img, ol.compile_kernel(k, t, x=xt, out=out), {}


def _rope(t):
    rng = _rng("rope")
    img = Image(t)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    theta = rng.uniform(-np.pi, np.pi, (8, 16))
    xt, ct, st, out = img.tensor(x), img.tensor(np.cos(theta)), img.tensor(np.sin(theta)), img.tensor(shape=x.shape)

    def k(x, c, s, out):
        ol.store(out, rope(ol.load(x), c, s, ol.runvar("pos")))
    return img, ol.compile_kernel(k, t, x=xt, c=ct, s=st, out=out), {"pos": 5}


def _attention(t):
    rng = _rng("attention")
    g, d, n, cap = 2, 32, 40, 64
    img = Image(t)
    q, kk, vv = (rng.standard_normal(s).astype(np.float32) for s in ((g, d), (n, d), (n, d)))
    qt, kt, vt, kv, out = img.tensor(q), img.tensor(kk), img.tensor(vv), img.kv_cache(cap, d), img.tensor(shape=(g, d))

    def kernel(q, kk, vv, kv, out):
        for i in ol.range(n):
            append_kv(kv, i, ol.load(kk[i]), ol.load(vv[i]))
        ol.store(out, attention(ol.load(q), kv, n, 32))
    return img, ol.compile_kernel(kernel, t, q=qt, kk=kt, vv=vt, kv=kv, out=out), {}


def _mlp(fmt: str, mlp=swiglu_mlp):
    def make(t):
        rng = _rng("mlp" + fmt)
        d, fc, f = 64, 32, 64
        img = Image(t)
        x = rng.standard_normal((2, d)).astype(np.float32)
        wg, wu = (rng.standard_normal((f, d)) * 0.2).astype(np.float32), (rng.standard_normal((f, d)) * 0.2).astype(np.float32)
        wd = (rng.standard_normal((d, f)) * 0.2).astype(np.float32)
        xt, gq, uq, dq, out = img.tensor(x), img.weight(wg, fmt), img.weight(wu, fmt), img.weight_parts(wd, fc, fmt), \
            img.tensor(shape=(2, d))

        def kernel(x, wg, wu, wd, out):
            ol.store(out, mlp(ol.load(x), wg, wu, wd, fc))
        return img, ol.compile_kernel(kernel, t, x=xt, wg=gq, wu=uq, wd=dq, out=out), {}
    return make


def _gated_deltanet(t):
    """Two tokens through a 2-head Gated DeltaNet layer (dk 64, dv 16): two DSTEPs per token on the
    DRAM states, the second token reading what the first wrote."""
    rng = _rng("gated_deltanet")
    hk = hv = 2
    dk, dv, steps = 64, 16, 2
    img = Image(t)

    def tensor(*shape, scale=1.0):
        return img.tensor((rng.standard_normal(shape) * scale).astype(np.float32))
    q, k, v, z, a, b = tensor(steps, hk * dk), tensor(steps, hk * dk), tensor(steps, hv * dv), \
        tensor(steps, hv * dv), tensor(steps, hv, scale=2.0), tensor(steps, hv, scale=2.0)
    w = GdnWeights(img.tensor(np.log(rng.uniform(1, 16, hv)).astype(np.float32)), tensor(hv, scale=0.5),
                   img.tensor((1 + 0.1 * rng.standard_normal(dv)).astype(np.float32)))
    state, y = img.tensor(shape=(hv * dv, dk)), img.tensor(shape=(steps, hv * dv))

    def kernel(q, k, v, z, a, b, w, state, y):
        for s in ol.static_range(steps):
            out = gated_deltanet_step(ol.load(q[s]).reshape(hk, dk), ol.load(k[s]).reshape(hk, dk),
                                      ol.load(v[s]).reshape(hv, dv), ol.load(z[s]).reshape(hv, dv), ol.load(a[s]),
                                      ol.load(b[s]), w, state)
            ol.store(y[s], out.reshape(hv * dv))
    return img, ol.compile_kernel(kernel, t, q=q, k=k, v=v, z=z, a=a, b=b, w=w, state=state, y=y), {}



def _mamba2(t):
    """Two tokens of a 2-head Mamba2 SSM (headdim 16, d_state 64, gated): the stream engine's step as
    VOPs on a target without STREAM (as STREAMs on one with it), the second token on the first's state."""
    rng = _rng("mamba2")
    H, P, N, steps = 2, 16, 64, 2
    img = Image(t)

    def tensor(*shape, shift=0.0):
        return img.tensor((rng.standard_normal(shape) + shift).astype(np.float32))
    x, dt, b, c, z = tensor(steps, H * P), tensor(steps, H, shift=-1.0), tensor(steps, N), tensor(steps, N), \
        tensor(steps, H * P)
    w = Mamba2Weights(img.tensor(np.log(rng.uniform(1, 16, H)).astype(np.float32)), tensor(H), tensor(H))
    state, y = img.tensor(shape=(H * P, N)), img.tensor(shape=(steps, H * P))

    def kernel(x, dt, b, c, z, w, state, y):
        for s in ol.static_range(steps):
            out = mamba2_step(ol.load(x[s]).reshape(H, P), ol.load(dt[s]), ol.load(b[s]).reshape(1, N),
                              ol.load(c[s]).reshape(1, N), w, state, z=ol.load(z[s]).reshape(H, P))
            ol.store(y[s], out.reshape(H * P))
    return img, ol.compile_kernel(kernel, t, x=x, dt=dt, b=b, c=c, z=z, w=w, state=state, y=y), {}


def _linear_recurrence(kind: str):
    """Two tokens of 2-head gated linear attention or retention (dk 64, dv 16) on a DRAM state."""
    def make(t):
        rng = _rng(kind)
        H, dk, dv, steps = 2, 64, 16, 2
        img = Image(t)
        q, k, v = (img.tensor(rng.standard_normal((steps, H * n)).astype(np.float32)) for n in (dk, dk, dv))
        if kind == "gla":        # a log decay per key dimension: logsigmoid(.) / 16
            g = img.tensor((-np.logaddexp(0, -2 * rng.standard_normal((steps, H * dk))) / 16).astype(np.float32))
        else:                    # gamma_h = 1 - 2^(-5-h)
            g = img.tensor((1 - 2.0 ** (-5 - np.arange(H))).astype(np.float32))
        state, o = img.tensor(shape=(H * dv, dk)), img.tensor(shape=(steps, H * dv))

        def kernel(q, k, v, g, state, o):
            for s in ol.static_range(steps):
                qs, ks, vs = ol.load(q[s]).reshape(H, dk), ol.load(k[s]).reshape(H, dk), ol.load(v[s]).reshape(H, dv)
                out = gla_step(qs, ks, vs, ol.load(g[s]).reshape(H, dk), state) if kind == "gla" else \
                    retnet_step(qs, ks, vs, ol.load(g), state)
                ol.store(o[s], out.reshape(H * dv))
        return img, ol.compile_kernel(kernel, t, q=q, k=k, v=v, g=g, state=state, o=o), {}
    return make

def _sliding_window(t):
    """Paged attention over 3 pages of 32 tokens (80 written) with a window of 40: the first page
    is not read, the second is masked before the window."""
    rng = _rng("sliding_window")
    g, d, page, n = 2, 32, 32, 80
    img = Image(t)
    q, kk, vv = (img.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((g, d), (n, d), (n, d)))
    pages, out = [img.kv_cache(page, d) for _ in range(3)], img.tensor(shape=(g, d))

    def kernel(q, kk, vv, pages, out):
        for i in ol.static_range(3):
            for j in ol.range(min(page, n - i * page)):
                append_kv(pages[i], j, ol.load(kk[i * page + j]), ol.load(vv[i * page + j]))
        ol.store(out, paged_attention(ol.load(q), pages, last_n=n - 2 * page, window=40))
    return img, ol.compile_kernel(kernel, t, q=q, kk=kk, vv=vv, pages=pages, out=out), {}


def _softcap(t):
    rng = _rng("softcap")
    img = Image(t)
    src, dst = img.tensor((rng.standard_normal(150) * 20).astype(np.float32)), img.tensor(shape=(150,))

    def kernel(src, dst):
        softcap_rows(src, dst, 30.0, 64)
    return img, ol.compile_kernel(kernel, t, src=src, dst=dst), {}


def _sampling(t):
    rng = _rng("sampling")
    img = Image(t)
    logits = rng.standard_normal(150).astype(np.float32)
    lt, o1, o2 = img.tensor(logits), img.tensor(shape=(2,)), img.tensor(shape=(3, 2))

    def kernel(l, o1, o2):
        ol.store(o1, argmax(l, 64))
        ol.store(o2, topk(l, 3, 64))
    return img, ol.compile_kernel(kernel, t, l=lt, o1=o1, o2=o2), {}


def _greedy_head(t):
    """The LM head's logits and their argmax straight from the MMs (the embedding gather of the
    picked token is its own case: on a 2-row ACT RAM its one-hot needs every ACT block)."""
    rng = _rng("head")
    img = Image(t)
    head = rng.standard_normal((100, 64)).astype(np.float32)
    hq, xt = img.weight(head), img.tensor(rng.standard_normal(64).astype(np.float32))
    logits, pick = img.tensor(shape=(100,)), img.tensor(shape=(2,))

    def kernel(x, head, logits, pick):
        xq = ol.quantize(ol.load(x).reshape(1, 64))
        ol.store(logits, linear(xq, head))
        ol.store(pick, greedy_head(xq, head, chunk=64))
    return img, ol.compile_kernel(kernel, t, x=xt, head=hq, logits=logits, pick=pick), {}


def _embed(t):
    rng = _rng("embed")
    img = Image(t)
    hq, out = img.weight(rng.standard_normal((50, 64)).astype(np.float32)), img.tensor(shape=(64,))

    def kernel(head, out):
        ol.store(out, embed(head, ol.runvar("tok")))
    return img, ol.compile_kernel(kernel, t, head=hq, out=out), {"tok": 17}


def _short_conv(t):
    """Two rows at position 7 over a ring holding the history (kernels/conv.py: the ring row from the
    position word on the card, the stores of each row's copies)."""
    rng = _rng("short_conv")
    taps, d = 3, 32
    img = Image(t)
    u, w = rng.standard_normal((2, d)).astype(np.float32), rng.standard_normal((taps, d)).astype(np.float32)
    ring = rng.standard_normal((conv.ring_rows(taps), d)).astype(np.float32)
    ut, wt, rt = img.tensor(u), img.tensor(w), img.tensor(ring)
    pos, out = img.tensor(np.array([7.0], np.float32)), img.tensor(shape=(2, d))

    def kernel(u, w, ring, pos, out):
        rows = conv.RingRows(ol.load(pos), taps, 4 * d)
        for j, y in enumerate(conv.short_conv([ol.load(u[0]), ol.load(u[1])], w, ring, rows)):
            ol.store(out[j], y)
    return img, ol.compile_kernel(kernel, t, u=ut, w=wt, ring=rt, pos=pos, out=out), {}


DECODER = DecoderShape(layers=2, d=64, heads=2, kv_heads=1, head_dim=32, ffn=64, vocab=64, cap=32, f_chunk=32,
                       head_chunk=64, attn_block=32)


def _decoder(t):
    rng = _rng("decoder")
    img = Image(t)
    s = DECODER

    def weight(shape, parts=None):
        w = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        return img.weight_parts(w, parts) if parts else img.weight(w)

    def tensor(shape):
        return img.tensor((1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
    layers = [plan_layer(s, weight, tensor, img.kv_cache) for _ in range(s.layers)]
    args = dict(layer=check_layers(layers), final_norm=tensor((s.d,)), head=weight((s.vocab, s.d)),
                x=img.tensor(rng.standard_normal(s.d).astype(np.float32)), logits=img.tensor(shape=(s.vocab,)))
    theta = np.outer(np.arange(s.cap), 1.0 / 10000 ** (np.arange(s.head_dim // 2) / (s.head_dim // 2)))
    args["cos"], args["sin"] = img.tensor(np.cos(theta)), img.tensor(np.sin(theta))
    return img, ol.compile_kernel(decoder_step, t, shape=s, pos=0, **args), {}


def kernel_cases(target: str = "nangate45-small") -> list[KernelCase]:
    cases = [KernelCase(f"matmul {fmt}", _matmul(fmt), target) for fmt in ("int8", "int4", "e2m1", "int8x", "fp4x6")]
    cases += [KernelCase(name, fn, target) for name, fn in (
        ("rmsnorm", _rmsnorm), ("rmsnorm_quantized", _rmsnorm_quantized), ("softmax", _softmax), ("rope", _rope),
        ("attention", _attention), ("sampling argmax topk", _sampling), ("greedy_head", _greedy_head),
        ("embed", _embed), ("short_conv", _short_conv))]
    cases += [KernelCase(f"swiglu_mlp {fmt}", _mlp(fmt), target) for fmt in ("int8", "fp4x6")]
    cases.append(KernelCase("decoder_step", _decoder, target))
    cases += [KernelCase("sliding_window attention", _sliding_window, target),
              KernelCase("geglu_mlp int8", _mlp("int8", geglu_mlp), target),
              KernelCase("softcap", _softcap, target),
              KernelCase("mamba2_step", _mamba2, target), KernelCase("gla_step", _linear_recurrence("gla"), target),
              KernelCase("retnet_step", _linear_recurrence("retnet"), target)]
    if load_target(target).config().DSTEP:
        cases.append(KernelCase("gated_deltanet", _gated_deltanet, target))
    return cases
