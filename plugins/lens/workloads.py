"""The work `otpu-lens record` can run: a registry of named workloads, each a generator of steps.

A workload is a function `build(ctx) -> Iterator[Step]` registered with `@workload(name, help,
takes=...)`. A `Step` is one run of a compiled `ol` program: the DRAM writes to make before it,
its eight argument words, and whether it is traced. The recorder runs the steps in order on one
engine, so DRAM (weights, KV caches) carries over between them; after each step the generator
resumes and may read the engine's DRAM through `ctx.read` (a decode loop picks the next token
from the logits this way). A model's decode token is a workload like any other, e.g.

    @workload("qwen-token", "one decode token of a model", takes=("model", "prompt", "tokens"))
    def _model_token(ctx):
        ...  # load ctx.model, yield untraced prompt steps, then ctx.tokens traced decode steps

`ctx.takes` tells which of `--model`, `--prompt`, `--tokens`, `--pos` a workload accepts; the
command line refuses the others for it. Shipped: the library's kernels (matmul in each weight
format, rmsnorm, softmax, rope, attention, SwiGLU MLP, greedy LM head) and a tiny decoder layer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from otpu_core import ol
from otpu_core.errors import UsageError
from otpu_core.kernels import attention, greedy_head, matmul, rmsnorm, rope, softmax, swiglu_mlp
from otpu_core.kernels.decoder import DecoderShape, decoder_step, random_decoder
from otpu_core.kernels.norm import rmsnorm_quantized
from otpu_core.ol.runtime import Image
from otpu_core.target import Target

OPTIONS = ("model", "prompt", "tokens", "pos")


@dataclass
class Step:
    """One traced (or untraced) run of a program."""
    name: str
    program: ol.Program
    args: list[int]
    writes: list[tuple[int, np.ndarray]] = field(default_factory=list)   # (DRAM address, bytes) before the run
    traced: bool = True


@dataclass
class Context:
    """What a workload is built for: the target, the user's options, and the engine's DRAM."""
    target: Target
    options: dict
    read: Callable[[int, int], np.ndarray] = lambda addr, n: np.zeros(n, np.uint8)
    seed: int = 0

    @property
    def cfg(self): return self.target.config()

    def option(self, name: str, default=None):
        v = self.options.get(name)
        return default if v is None else v

    def image(self, size: int = 32 << 20) -> Image:
        return Image(self.target, size=min(size, self.cfg.DRAM_BYTES))

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)


@dataclass(frozen=True)
class Workload:
    name: str
    help: str
    build: Callable[[Context], Iterator[Step]]
    takes: tuple[str, ...] = ()


REGISTRY: dict[str, Workload] = {}


def workload(name: str, help: str, takes: tuple[str, ...] = ()):
    """Register `build(ctx)` under `name` (names are unique; `takes` are option names of OPTIONS)."""
    def deco(fn):
        if name in REGISTRY:
            raise ValueError(f"workload {name!r} is registered twice")
        bad = set(takes) - set(OPTIONS)
        if bad:
            raise ValueError(f"workload {name!r}: unknown options {sorted(bad)}")
        REGISTRY[name] = Workload(name, help, fn, tuple(takes))
        return fn
    return deco


def get(name: str) -> Workload:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"--workload {name}: no such workload",
                         hint="`otpu-lens list` names them: " + ", ".join(sorted(REGISTRY))) from None


def check_options(w: Workload, options: dict) -> None:
    for name, value in options.items():
        if value is not None and name not in w.takes:
            takes = ", ".join(f"--{t}" for t in w.takes) or "no options"
            raise UsageError(f"--{name}: workload {w.name} does not take it (it takes {takes})")


def _image_step(name: str, img: Image, program: ol.Program, **run_values) -> Step:
    return Step(name, program, program.arg_words(**run_values), [(0, img.dram[: img.cursor].copy())])


def _weights(rng, img: Image, shape, fmt: str = "int8"):
    w = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
    return img.weight(w, fmt)


# -- the kernels of the library --------------------------------------------------------------------
def _k_matmul(x, w, y):
    matmul(x, w, y)


def _matmul(fmt: str, rows_of: Callable[[object], int]):
    def build(ctx: Context) -> Iterator[Step]:
        cfg, rng = ctx.cfg, ctx.rng()
        img = ctx.image()
        m, k, n = rows_of(cfg), 8 * cfg.D, 16 * cfg.D
        x = img.tensor(rng.standard_normal((m, k)).astype(np.float32))
        w = _weights(rng, img, (n, k), fmt)
        y = img.tensor(shape=(m, n))
        prog = ol.compile_kernel(_k_matmul, ctx.target, x=x, w=w, y=y)
        yield _image_step(f"matmul {fmt} {m}x{k} @ {n}x{k}", img, prog)
    return build


for _fmt in ("int8", "int4", "e2m1"):
    workload(f"matmul-{_fmt}", f"one decode row times a [16D, 8D] {_fmt} weight (DRAM-bound)")(
        _matmul(_fmt, lambda cfg: 1))
workload("matmul-prefill", "MCOLS rows times a [16D, 8D] int8 weight (near the ridge point)")(
    _matmul("int8", lambda cfg: cfg.MCOLS))


def _k_rmsnorm(x, w, out):
    ol.store(out, rmsnorm(ol.load(x), ol.load(w)))


def _k_softmax(x, out):
    ol.store(out, softmax(ol.load(x)))


def _k_rope(x, c, s, out):
    ol.store(out, rope(ol.load(x), c, s, ol.runvar("pos")))


@workload("rmsnorm", "RMSNorm of 4 rows of 8D (VPU-bound)")
def _rmsnorm(ctx: Context) -> Iterator[Step]:
    rng, img = ctx.rng(), ctx.image()
    cols = 8 * ctx.cfg.D
    x = img.tensor(rng.standard_normal((4, cols)).astype(np.float32))
    w = img.tensor(rng.standard_normal(cols).astype(np.float32))
    out = img.tensor(shape=(4, cols))
    yield _image_step("rmsnorm 4x8D", img, ol.compile_kernel(_k_rmsnorm, ctx.target, x=x, w=w, out=out))


@workload("softmax", "softmax of 4 rows of 4D (VPU composites)")
def _softmax(ctx: Context) -> Iterator[Step]:
    rng, img = ctx.rng(), ctx.image()
    x = img.tensor(rng.standard_normal((4, 4 * ctx.cfg.D)).astype(np.float32))
    out = img.tensor(shape=(4, 4 * ctx.cfg.D))
    yield _image_step("softmax 4x4D", img, ol.compile_kernel(_k_softmax, ctx.target, x=x, out=out))


@workload("rope", "rotate-half RoPE of 8 heads at a run-time position", takes=("pos",))
def _rope(ctx: Context) -> Iterator[Step]:
    rng, img = ctx.rng(), ctx.image()
    hd, cap = ctx.cfg.D, 64
    pos = ctx.option("pos", 3)
    if not 0 <= pos < cap:
        raise UsageError(f"--pos {pos}: the rope workload's tables hold positions 0..{cap - 1}")
    theta = np.outer(np.arange(cap), 1.0 / 10000 ** (np.arange(hd // 2) / (hd // 2)))
    x = img.tensor(rng.standard_normal((8, hd)).astype(np.float32))
    c, s = img.tensor(np.cos(theta)), img.tensor(np.sin(theta))
    out = img.tensor(shape=(8, hd))
    prog = ol.compile_kernel(_k_rope, ctx.target, x=x, c=c, s=s, out=out)
    yield _image_step(f"rope 8 heads at pos {pos}", img, prog, pos=pos)


def _k_attention(q, kv, out, n_tokens):
    ol.store(out, attention(ol.load(q), kv, n_tokens))


@workload("attention", "flash attention of MCOLS query heads over 600 cached tokens", takes=("tokens",))
def _attention(ctx: Context) -> Iterator[Step]:
    cfg, rng, img = ctx.cfg, ctx.rng(), ctx.image()
    d, n_tokens = cfg.D, ctx.option("tokens", 600)
    cap = -(-max(n_tokens, 1) // 256) * 256
    kv = img.kv_cache(cap, d)
    g = cfg.MCOLS
    keys = rng.standard_normal((cap, d)).astype(np.float32)
    q = img.tensor(rng.standard_normal((g, d)).astype(np.float32))
    out = img.tensor(shape=(g, d))
    _fill_cache(img, kv, keys, rng)
    prog = ol.compile_kernel(_k_attention, ctx.target, q=q, kv=kv, out=out, n_tokens=n_tokens)
    yield _image_step(f"attention {g} heads x {n_tokens} tokens", img, prog)


def _fill_cache(img: Image, kv, keys: np.ndarray, rng) -> None:
    """Quantised K rows and V^T columns with per-block scales, as QST would have written them."""
    cap, d = keys.shape
    D = img.cfg.D
    blocks = keys.reshape(cap, d // D, D)
    ks = np.maximum(np.abs(blocks).max(-1), 1e-8) / 127.0
    img.write(kv.k.const, np.clip(np.rint(blocks / ks[..., None]), -127, 127).astype(np.int8))
    img.write(kv.k_scale.const, ks.astype(np.float32))
    vals = rng.standard_normal((cap, d)).astype(np.float32)
    vs = np.maximum(np.abs(vals).max(-1), 1e-8) / 127.0
    img.write(kv.vt.const, np.clip(np.rint(vals / vs[:, None]), -127, 127).astype(np.int8).T.copy())
    img.write(kv.v_scale.const, vs.astype(np.float32))


def _k_mlp(x, wg, wu, wd, out, f_chunk):
    ol.store(out, swiglu_mlp(ol.load(x), wg, wu, wd, f_chunk))


@workload("mlp", "SwiGLU MLP of one row: d=2D, F=8D in chunks of 2D")
def _mlp(ctx: Context) -> Iterator[Step]:
    cfg, rng, img = ctx.cfg, ctx.rng(), ctx.image()
    d, f, fc = 2 * cfg.D, 8 * cfg.D, 2 * cfg.D
    x = img.tensor(rng.standard_normal(d).astype(np.float32))
    wg, wu = _weights(rng, img, (f, d)), _weights(rng, img, (f, d))
    wd = img.weight_parts((rng.standard_normal((d, f)) / np.sqrt(f)).astype(np.float32), fc)
    out = img.tensor(shape=(d,))
    yield _image_step("swiglu mlp", img, ol.compile_kernel(_k_mlp, ctx.target, x=x, wg=wg, wu=wu, wd=wd, out=out,
                                                            f_chunk=fc))


def _k_head(x, w, head, out):
    ol.store(out, greedy_head(rmsnorm_quantized(ol.load(x), ol.load(w)), head, 4 * ol.config().D))


@workload("greedy-head", "final norm and a 1000-word int8 LM head, argmax straight from the MMs")
def _head(ctx: Context) -> Iterator[Step]:
    cfg, rng, img = ctx.cfg, ctx.rng(), ctx.image()
    d = 2 * cfg.D
    x = img.tensor(rng.standard_normal(d).astype(np.float32))
    w = img.tensor((1 + 0.1 * rng.standard_normal(d)).astype(np.float32))
    head = _weights(rng, img, (1000, d))
    out = img.tensor(shape=(2,))
    yield _image_step("greedy head over 1000 words", img, ol.compile_kernel(_k_head, ctx.target, x=x, w=w, head=head,
                                                                           out=out))


# -- a tiny decoder layer --------------------------------------------------------------------------
def tiny_shape(cfg, layers: int = 1) -> DecoderShape:
    """A Qwen3-shaped decoder small enough to profile in a second: hidden 2D, 4 query and 2 KV
    heads of D, MLP 4D, 1000 words, 256 cached tokens."""
    D = cfg.D
    return DecoderShape(layers=layers, d=2 * D, heads=4, kv_heads=2, head_dim=D, ffn=4 * D, vocab=1000, cap=256,
                        f_chunk=2 * D, head_chunk=512, attn_block=256)


@workload("decoder-layer", "one decode token of a tiny random Qwen3-style decoder layer (positions --pos "
          "onwards, --tokens of them)", takes=("tokens", "pos"))
def _decoder(ctx: Context) -> Iterator[Step]:
    cfg, rng, img = ctx.cfg, ctx.rng(), ctx.image()
    s = tiny_shape(cfg)
    tokens, pos0 = ctx.option("tokens", 1), ctx.option("pos", 8)
    if tokens < 1 or not 0 <= pos0 or pos0 + tokens > s.cap:
        raise UsageError(f"--pos {pos0} --tokens {tokens}: the tiny decoder's cache holds positions 0..{s.cap - 1}")
    layers, args, _ = random_decoder(img, s, rng)
    for layer in layers:                          # the positions before --pos: an earlier context
        for kv in layer.kv:
            _fill_cache(img, kv, rng.standard_normal((kv.cap, kv.d)).astype(np.float32), rng)
    x_at = args["x"].base.const
    writes = [(0, img.dram[: img.cursor].copy())]
    for pos in range(pos0, pos0 + tokens):
        prog = ol.compile_kernel(decoder_step, ctx.target, shape=s, pos=pos, **args)
        emb = rng.standard_normal(s.d).astype(np.float32)
        yield Step(f"decoder layer token at pos {pos}", prog, prog.arg_words(), writes + [(x_at, emb.view(np.uint8))])
        writes = []

