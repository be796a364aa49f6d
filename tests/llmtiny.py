"""Tiny random models for the model-layer tests, written as real files (GGUF, safetensors + config.json).

Shapes are the smallest the card's block size allows: D=32 on sim-small (fast tests), D=128 on
ypcb-00338 (the chat target). Programs compiled by one test are reused by the next through a
program cache shared by the tests of one process (compiling is deterministic, so sharing cannot
hide a bug: every test still runs its own programs on its own simulator).
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from otpu_core.board import IsaBackend
from otpu_core.kernels import reference as R
from otpu_core.llm import checkpoint, convert, engine, layout, reference, synthetic
from otpu_core.llm.config import ModelConfig, llama3_factors
from otpu_core.target import load as load_target

def reference_modules(*names: str) -> tuple:
    """The `reference` extra's modules (torch, transformers) by name, or a skip (a failure under OTPU_CI)
    naming the one missing."""
    import importlib
    import os
    try:
        return tuple(importlib.import_module(n) for n in names)
    except ImportError as e:
        why = f"{e.name} is not installed (pip install -e '.[reference]')"
        if os.environ.get("OTPU_CI"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module", autouse=True)
def shared_cache(tmp_path_factory):
    """One program and conversion cache for a test module (import this fixture and `_shared` into it).
    Module fixtures run before the per-test environment exists, so this one sets OTPU_CACHE itself."""
    with pytest.MonkeyPatch.context() as mp:
        d = tmp_path_factory.mktemp("llm-cache")
        mp.setenv("OTPU_CACHE", str(d))
        yield d


@pytest.fixture(autouse=True)
def _shared(shared_cache, monkeypatch):
    """Each test back on the module's cache (conftest gives every test its own first)."""
    monkeypatch.setenv("OTPU_CACHE", str(shared_cache))


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}


@functools.lru_cache(maxsize=1)
def tokenizer():
    return synthetic.tokenizer(384)


def config(family: str = "qwen3", D: int = 32, **kw) -> ModelConfig:
    tk = tokenizer()
    eos = tk.token_to_id("<|im_end|>")
    base = dict(vocab=tk.get_vocab_size(), d=2 * D, layers=2, heads=4, kv_heads=2, head_dim=D, ffn=4 * D,
                eos_ids=(eos,), tied=family == "qwen3", context=1024, rope_theta=10000.0, norm_eps=1e-5,
                name=f"tiny-{family}")
    if family == "smollm3":          # SmolLM3's pattern (every 4th layer without RoPE), as llama.cpp assumes it
        base["layers"], base["nope_layers"] = 4, (3,)
    if family == "lfm2":             # `c A c A c`; heads half a block wide, so the card zero-pads them
        base.update(layers=5, layer_kinds=("conv", "attention", "conv", "attention", "conv"), conv_taps=3,
                    head_dim=D // 2, heads=4, kv_heads=2, tied=True)
    if family == "qwen35":           # `D D D A D`: attention every 4th layer; 2 value heads on 1 key head of 64
        base.update(layers=5, layer_kinds=("deltanet",) * 3 + ("attention", "deltanet"), conv_taps=4,
                    rotary_dim=D // 4, lin_k_heads=1, lin_v_heads=2, lin_k_dim=64, lin_v_dim=D, tied=True)
    if family == "qwen3moe":         # 8 experts of width 2D a layer, 3 per token (Qwen3-30B-A3B: 128 of 768, 8)
        base.update(experts=8, experts_used=3, ffn=2 * D, tied=False)
    if family == "lfm2moe":          # `c c A c A`, the first two dense (LFM2-8B-A1B: 24 layers, 2 dense, 32 experts
        # of width 1792, 4 per token); 8 experts of width 2D, 3 a token, the selection bias
        base.update(layers=5, layer_kinds=("conv", "conv", "attention", "conv", "attention"), conv_taps=3,
                    experts=8, experts_used=3, ffn=2 * D, dense_layers=2, dense_ffn=4 * D, expert_bias=True, tied=True)
    if family == "gemma4":           # `s s A s s A`, the last three reading layers 1, 1 and 2's KV (double-wide MLP);
        # runs of one shape (layers 0-1, 3-4) are hardware loops on the card
        base.update(layers=6, layer_kinds=("sliding", "sliding", "attention") * 2,
                    tied=True, sliding_window=D, global_head_dim=2 * D, global_rope_theta=1e6, global_rope_pairs=D // 4,
                    kv_shared=3, ple_dim=D, layer_ffn=(4 * D,) * 3 + (8 * D,) * 3, logit_softcap=30.0, norm_eps=1e-6,
                    bos_id=None)
    base.update(kw)
    return ModelConfig(family, **base)


def write(d: Path, cfg: ModelConfig, kind: str = "hf", seed: int = 0, gain: float = 1.0, **kw) -> tuple[Path, dict]:
    """A model of `cfg` in `d`: kind 'hf' (a directory) or 'gguf' (a file). Returns (path, weights).
    gain 1 keeps int8's distance to the float model (at D=32) near what real models show."""
    w = synthetic.random_weights(cfg, seed, gain=gain)
    scaling = kw.pop("rope_scaling", None)
    if kind == "gguf":
        factors = llama3_factors(scaling, cfg.head_dim, cfg.rope_theta, "test") if scaling else None
        return synthetic.write_gguf(d / f"{cfg.name}.gguf", cfg, w, tokenizer(), rope_factors=factors, **kw), w
    return synthetic.write_hf(d / cfg.name, cfg, w, tokenizer(), rope_scaling=scaling, **kw), w


def gguf_and_hf(tmp_path_factory, family: str) -> dict:
    """A tiny D=32 `family` model written as a GGUF (seed 0) and as an HF directory (seed 1; F32, as BF16
    puts QACT inputs on exact rounding ties where fp32 and float64 round apart):
    {"gguf": (path, config, weights), "hf": (...), "dir": the directory}."""
    d = tmp_path_factory.mktemp(family)
    cfg = config(family, D=32)
    gguf, w = write(d, cfg, "gguf")
    hf_cfg = config(family, D=32, name=f"tiny-{family}-hf")
    hf, hw = write(d, hf_cfg, "hf", seed=1)
    return {"gguf": (gguf, cfg, w), "hf": (hf, hf_cfg, hw), "dir": d}


def prompts(n: int, vocab: int, length: int = 6, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(3, vocab, length + i))) for i in range(n)]


def whole_sequence(cfg, W, tokens, mlp=None):
    """float64 logits of every position at once: causal-masked attention, the convolution as shifted
    sums; `mlp(layer, x)` replaces the dense SwiGLU MLP (a mixture of experts)."""
    n, d, hd = len(tokens), cfg.d, cfg.head_dim
    cos, sin = cfg.rope_tables(n)

    def norm(x, w, eps):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rot(x):                                           # [n, heads, hd], rotate-half
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([a * c - b * s, b * c + a * s], -1)
    h = W["embed"][tokens].astype(np.float64)
    for i, kind in enumerate(cfg.kinds):
        x = norm(h, W[f"ln1.{i}"], cfg.norm_eps)
        if kind == "conv":
            b, c, v = np.split(x @ W[f"cin.{i}"].T, 3, axis=1)
            bx = np.vstack([np.zeros((cfg.conv_taps - 1, d)), b * v])
            taps = W[f"conv.{i}"]                         # [d, taps]
            h = h + (c * sum(bx[k:k + n] * taps[:, k] for k in range(cfg.conv_taps))) @ W[f"cout.{i}"].T
        else:
            q = rot(norm((x @ W[f"wq.{i}"].T).reshape(n, cfg.heads, hd), W[f"qn.{i}"], cfg.norm_eps))
            k = rot(norm((x @ W[f"wk.{i}"].T).reshape(n, cfg.kv_heads, hd), W[f"kn.{i}"], cfg.norm_eps))
            v = (x @ W[f"wv.{i}"].T).reshape(n, cfg.kv_heads, hd)
            k, v = np.repeat(k, cfg.group, 1), np.repeat(v, cfg.group, 1)
            s = np.einsum("thd,uhd->htu", q, k) / np.sqrt(hd) + np.triu(np.full((n, n), -np.inf), 1)
            p = np.exp(s - s.max(-1, keepdims=True))
            att = np.einsum("htu,uhd->thd", p / p.sum(-1, keepdims=True), v).reshape(n, -1)
            h = h + att @ W[f"wo.{i}"].T
        x = norm(h, W[f"ln2.{i}"], cfg.norm_eps)
        if mlp is not None:
            h = h + mlp(i, x)
            continue
        g = x @ W[f"wg.{i}"].T
        h = h + (g / (1 + np.exp(-g)) * (x @ W[f"wu.{i}"].T)) @ W[f"wd.{i}"].T
    return norm(h, W["final_norm"], cfg.norm_eps) @ W["embed" if cfg.tied else "head"].T


def kl(p_logits, q_logits) -> np.ndarray:
    """KL(p || q) per row, natural log, from logits."""
    lp = p_logits - p_logits.max(1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
    lq = q_logits - q_logits.max(1, keepdims=True)
    lq = lq - np.log(np.exp(lq).sum(1, keepdims=True))
    return (np.exp(lp) * (lp - lq)).sum(1)


# ---- the tiny models on a golden-simulator card: what the family tests share ------------------------

def edited_hf_dir(models: dict, name: str, edit) -> Path:
    """The module's HF model (`models["hf"]`: path, config, weights) written again under `name`,
    its config.json passed through `edit` (a function that changes the dict in place)."""
    _, cfg, w = models["hf"]
    d = synthetic.write_hf(models["dir"] / name, cfg, w, tokenizer())
    js = json.loads((d / "config.json").read_text())
    edit(js)
    (d / "config.json").write_text(json.dumps(js))
    return d


def card_engine(path, fmt: str = "int8", target: str = "sim-small", rows: int = 4, slots: int = 1,
                expert_slots: int = 0, ctx: int = 128):
    """(Engine, Checkpoint, converted model, IsaBackend) of a model file on the golden simulator:
    32-token pages, `ctx` positions (128), a full context of pages a slot, the generate loop's ring."""
    t = load_target(target)
    ck = checkpoint.open_checkpoint(path)
    conv = convert.convert(ck, fmt, t)
    opts = layout.ImageOptions(fmt=fmt, page=32, ctx=ctx, pages=ctx // 32 * slots, ring=True, rows=rows, slots=slots,
                               expert_slots=expert_slots)
    be = IsaBackend(t, timing=False)
    return engine.Engine(conv, ck.config, be, t, opts), ck, conv, be


def quant_golden(eng, conv) -> reference.Golden:
    """The quantised golden of the model an Engine runs (its card view, page and format)."""
    numerics = reference.CardNumerics(eng.plan.D, eng.opts.page, eng.opts.fmt in ("int8x", "fp4x6"))
    return reference.Golden(eng.plan.cfg, reference.CardWeights(conv, eng.plan.embed_kind), numerics,
                            positions=eng.opts.ctx)


def u32(x) -> np.ndarray:
    """fp32 values as their bit patterns (bit-for-bit comparisons)."""
    return np.asarray(x, np.float32).view(np.uint32)


def greedy(golden, prompt, n: int) -> list[int]:
    """n greedy tokens of a golden from a fresh sequence after `prompt`."""
    golden.reset()
    logits = golden.forward(prompt)[-1]
    out = []
    for _ in range(n):
        out.append(int(np.argmax(logits)))
        logits = golden.step(out[-1])
    return out


class Distances(NamedTuple):
    min: float          # the lowest per-position cosine
    mean: float
    max_abs: float
    top1: float         # positions whose argmax agrees
    each: np.ndarray    # per-position cosines


def distances(label: str, got, ref) -> Distances:
    """How far per-position logits `got` (the card's) are from `ref` (a golden's), printed under `label`."""
    got, ref = np.asarray(got), np.asarray(ref)
    each = np.array([R.cosine(a, b) for a, b in zip(got, ref)])
    d = Distances(float(each.min()), float(each.mean()), R.max_abs(got, ref),
                  float(np.mean(np.argmax(got, 1) == np.argmax(ref, 1))), each)
    print(f"{label}: min cosine {d.min:.7f}, mean {d.mean:.7f}, max-abs {d.max_abs:.3g}, top-1 {d.top1:.3f}")
    return d


def steps_match_the_loop(make, path, prompt, turn, **kw):
    """Host-driven one-row steps of the prompt and the loop's tokens on a second card (`make(path,
    rows=1, **kw)`): each step's logits bit for bit the generate loop's. Returns (Engine, backend)."""
    steps, *_, be = make(path, rows=1, **kw)
    seq = steps.new_sequence()
    steps.submit(seq, prompt)
    for i, tok in enumerate(turn.tokens):
        assert np.array_equal(u32(steps.logits(seq)), u32(turn.logits[i])), f"logits of token {i}"
        steps.submit(seq, [tok])
    return steps, be


def formats_against_fp32(label: str, path, make, capsys, card_bound: float = 0.99999) -> dict[str, tuple]:
    """int8, the public 4-bit E2M1 (int8 head) and the seed fp4x6 (int8x head) of a model file,
    teacher-forced over 48 tokens through the quantised golden: {format: (mean KL from the fp32
    golden in nats, top-1 agreement)}, printed; each format's card checked against its golden on
    6 steps (cosine above `card_bound`)."""
    ck = checkpoint.open_checkpoint(path)
    tokens = prompts(1, ck.config.vocab, length=48, seed=3)[0]
    fp = reference.Golden(ck.config, reference.SourceWeights(ck), positions=64).forward(tokens)
    rows = {}
    for fmt in ("int8", "fp4", "fp4x6"):
        eng, _, conv, _ = make(path, fmt=fmt)
        q = quant_golden(eng, conv).forward(tokens)
        rows[fmt] = (float(kl(fp, q).mean()), float(np.mean(np.argmax(q, 1) == np.argmax(fp, 1))))
        seq = eng.new_sequence()
        eng.submit(seq, tokens[:6])
        got = eng.logits(seq)
        assert R.cosine(got, q[5]) > card_bound, (fmt, R.cosine(got, q[5]), R.max_abs(got, q[5]))
    with capsys.disabled():
        for fmt, (k, top1) in rows.items():
            print(f"\n{label} tiny {fmt:5s}: mean KL from fp32 {k:.5f} nats, top-1 agreement {top1:.3f}")
    return rows


def assert_refused(d: Path, message: str) -> None:
    """Opening the model at d is refused with a ModelError naming the file and saying `message`."""
    from otpu_core.llm.errors import ModelError
    with pytest.raises(ModelError) as e:
        checkpoint.open_checkpoint(d)
    assert message in e.value.message and str(d) in e.value.message, e.value.message


def against_goldens(label: str, turn, prompt, quant, ck, ctx: int, fp32_bound: float,
                    quant_bound: float = 0.99999) -> dict[str, Distances]:
    """The generate loop's logits (`turn`, after `prompt`) against the quantised golden `quant` and
    the fp32 golden of checkpoint ck, both fed the same tokens; each golden's min cosine bound held."""
    got, fed = np.stack(turn.logits), prompt + turn.tokens[:-1]
    out = {}
    for name, g, bound in (("quantised", quant, quant_bound),
                           ("fp32", reference.Golden(ck.config, reference.SourceWeights(ck), positions=ctx), fp32_bound)):
        g.reset()
        out[name] = d = distances(f"{label} card vs {name} golden", got, g.forward(fed)[len(prompt) - 1:])
        assert d.min > bound, (name, d)
    return out


def greedy_loop(eng, prompt, n: int = 32):
    """(sequence, Turn) of n greedy tokens after `prompt` from the generate loop, logits kept."""
    from otpu_core.llm.sampling import Sampling
    seq = eng.new_sequence()
    eng.submit(seq, prompt)
    return seq, eng.generate(seq, Sampling(temperature=0), n, want_logits=True)


def goldens_greedy_tokens(eng, conv, prompt, turn):
    """The quantised golden of the engine's model, after checking that its own greedy run gives the
    loop's tokens."""
    quant = quant_golden(eng, conv)
    assert greedy(quant, prompt, len(turn.tokens)) == turn.tokens, "the quantised golden's greedy tokens"
    return quant


def batched_equals_alone(make, path, prompts_, eng, conv, tokens: bool = False) -> None:
    """The prompts as sequences of one step on `eng` (one slot each) against each alone on a second
    card (a slot released and reused between them): logits bit for bit, and the quantised golden's
    (`tokens`: its greedy token too)."""
    seqs = [eng.new_sequence() for _ in prompts_]
    for s, p in zip(seqs, prompts_):
        eng.submit(s, p)
    batched = eng.logits(seqs)
    one, *_ = make(path, slots=len(prompts_))
    for p, got in zip(prompts_, batched):
        s = one.new_sequence()
        one.submit(s, p)
        assert np.array_equal(u32(one.logits(s)), u32(got))
        one.release(s)
        ref = quant_golden(eng, conv).forward(p)[-1]
        assert R.cosine(got, ref) > 0.99999, (R.cosine(got, ref), R.max_abs(got, ref))
        assert not tokens or int(np.argmax(got)) == int(np.argmax(ref))


def moe_on_the_chat_target(tmp_path, family: str, seed: int, n: int = 16) -> None:
    """A D=128 tiny mixture-of-experts `family` model in fp4 on ypcb-00338 (the card otpu-chat drives)
    with 4 expert slots a layer: n greedy tokens token for token the quantised golden's, logits within
    its rounding, experts evicted on the way. `seed` picks the prompt (some put an attention output on
    a QACT rounding tie where fp32 and float64 round apart; the callers say which)."""
    path, _ = write(tmp_path, config(family, D=128), "gguf")
    t = load_target("ypcb-00338")
    ck = checkpoint.open_checkpoint(path)
    conv = convert.convert(ck, "fp4", t)
    eng = engine.Engine(conv, ck.config, IsaBackend(t, timing=False), t, layout.ImageOptions(
        fmt="fp4", page=128, ctx=256, pages=2, ring=True, rows=4, expert_slots=4))
    prompt = prompts(1, 384, length=9, seed=seed)[0]
    seq, turn = greedy_loop(eng, prompt, n)
    quant = quant_golden(eng, conv)
    assert greedy(quant, prompt, n) == turn.tokens
    quant.reset()
    d = distances(f"{family} card vs quantised (ypcb-00338, fp4) golden", np.stack(turn.logits),
                  quant.forward(prompt + turn.tokens[:-1])[len(prompt) - 1:])
    assert d.min > 0.99999, d
    assert eng.experts.stats.evictions > 0


def replay_against_the_card(eng, conv, tokens: list[int], label: str):
    """offload.replay (what benchmarks/bench_moe.py sizes offload with) over the quantised golden's
    routes of `tokens` fed one at a time (a step each) against what the card made the host do with
    the Engine's slots: the same requests, streams, evictions and bytes. Returns the card's stats."""
    from otpu_core.llm.offload import ExpertServer, replay
    seq = eng.new_sequence()
    for t in tokens:
        eng.submit(seq, [t])
        eng.logits(seq)
    quant = quant_golden(eng, conv)
    quant.forward(tokens)
    lay = eng.plan.offload
    host = ExpertServer(Directory(lay), lay, lambda layer, e: np.zeros(lay.blob.nbytes, np.uint8))
    host.reset()
    st = replay(host, np.array(quant.routes).reshape(len(tokens), lay.layers, lay.k))
    card = eng.experts.stats
    print(f"{label} replay: {st.requests} requests, {st.streamed} streamed, {st.evictions} evictions "
          f"(card {card.requests}, {card.streamed}, {card.evictions}) for {len(tokens) * lay.layers} (token, layer)s")
    assert (st.requests, st.streamed, st.evictions, st.bytes) == (card.requests, card.streamed, card.evictions,
                                                                  card.bytes)
    return card


class Directory:
    """A host-only DRAM for offload.replay: the mailbox and the directory as bytes, slot writes dropped."""

    def __init__(self, lay):
        self.lay, self.b = lay, np.zeros(lay.slots_base, np.uint8)

    def read(self, addr, n):
        return self.b[addr:addr + n].copy()

    def write(self, addr, data):
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if addr < self.lay.slots_base:
            self.b[addr:addr + raw.size] = raw
