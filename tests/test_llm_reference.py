"""The fp32 golden against a second, loop-by-loop decoder written here from the Hugging Face modeling
code (rotate_half RoPE on duplicated cos/sin, causal softmax per head, SwiGLU), for Qwen3, Llama
(with Llama 3 rope scaling, read from safetensors and from a GGUF with permuted q/k) and SmolLM3
(NoPE layers); the shipped model's perplexity on held-out text."""
import math
import os
import sys

import numpy as np
import pytest

import llmtiny
from otpu_core.kernels import reference as R
from otpu_core.llm import checkpoint, models
from otpu_core.llm.reference import Golden, SourceWeights, next_token_nll


def naive_logits(ck, tokens):
    """Every position's logits, one head at a time, from the checkpoint's tensors."""
    cfg = ck.config
    hd, half = cfg.head_dim, cfg.head_dim // 2
    inv = 1.0 / cfg.rope_theta ** (np.arange(0, hd, 2) / hd)
    if cfg.rope_factors is not None:
        inv = inv / np.array(cfg.rope_factors)
    W = {n: ck.get(n).astype(np.float64) for n in cfg.tensor_shapes()}
    head = W["head"] if "head" in W else W["embed"]

    def norm(x, w):
        return x / math.sqrt(float(np.mean(x * x)) + cfg.norm_eps) * w

    def rot(x, pos):
        emb = np.concatenate([pos * inv, pos * inv])          # HF: cat(freqs, freqs)
        rotated = np.concatenate([-x[half:], x[:half]])       # rotate_half
        return x * np.cos(emb) + rotated * np.sin(emb)

    keys = [[[] for _ in range(cfg.kv_heads)] for _ in range(cfg.layers)]
    vals = [[[] for _ in range(cfg.kv_heads)] for _ in range(cfg.layers)]
    out = []
    for pos, tok in enumerate(tokens):
        h = W["embed"][tok].copy()
        for li in range(cfg.layers):
            x = norm(h, W[f"ln1.{li}"])
            heads_out = []
            for kv in range(cfg.kv_heads):
                k = W[f"wk.{li}"][kv * hd:(kv + 1) * hd] @ x
                v = W[f"wv.{li}"][kv * hd:(kv + 1) * hd] @ x
                if cfg.qk_norm:
                    k = norm(k, W[f"kn.{li}"])
                keys[li][kv].append(rot(k, pos) if li not in cfg.nope_layers else k)
                vals[li][kv].append(v)
            for hh in range(cfg.heads):
                q = W[f"wq.{li}"][hh * hd:(hh + 1) * hd] @ x
                if cfg.qk_norm:
                    q = norm(q, W[f"qn.{li}"])
                if li not in cfg.nope_layers:
                    q = rot(q, pos)
                kv = hh // (cfg.heads // cfg.kv_heads)
                scores = [float(q @ k) / math.sqrt(hd) for k in keys[li][kv]]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                heads_out.append(sum(w * v for w, v in zip(e, vals[li][kv])) / sum(e))
            h = h + W[f"wo.{li}"] @ np.concatenate(heads_out)
            x = norm(h, W[f"ln2.{li}"])
            g, u = W[f"wg.{li}"] @ x, W[f"wu.{li}"] @ x
            h = h + W[f"wd.{li}"] @ (g / (1 + np.exp(-g)) * u)
        out.append(head @ norm(h, W["final_norm"]))
    return np.stack(out)


CASES = [("qwen3", "hf", {}), ("qwen3", "gguf", {}), ("llama", "hf", {"rope_scaling": llmtiny.LLAMA3_SCALING}),
         ("llama", "gguf", {"rope_scaling": llmtiny.LLAMA3_SCALING}), ("smollm3", "gguf", {})]


@pytest.mark.parametrize("family,kind,extra", CASES, ids=[f"{f}-{k}" for f, k, _ in CASES])
def test_fp32_golden_matches_the_loop_decoder(tmp_path, family, kind, extra):
    cfg = llmtiny.config(family, D=32, rope_theta=500000.0 if family == "llama" else 10000.0)
    p, _ = llmtiny.write(tmp_path, cfg, kind, **extra)
    ck = checkpoint.open_checkpoint(p)
    tokens = llmtiny.prompts(1, cfg.vocab, length=80)[0]      # past the scaled wavelengths of the tiny llama
    got = Golden(ck.config, SourceWeights(ck), positions=128).forward(tokens)
    want = naive_logits(ck, tokens)
    err, cos = R.max_abs(got, want), R.cosine(got, want)
    assert err < 1e-9 * np.abs(want).max() and cos > 1 - 1e-12, (err, cos)


def test_the_golden_sees_a_rope_theta_mistake(tmp_path):
    cfg = llmtiny.config("qwen3", D=32)
    ck = checkpoint.open_checkpoint(llmtiny.write(tmp_path, cfg)[0])
    tokens = llmtiny.prompts(1, cfg.vocab, length=40)[0]
    want = naive_logits(ck, tokens)
    bad = Golden(ck.config.with_(rope_theta=20000.0), SourceWeights(ck), positions=64).forward(tokens)
    assert R.cosine(bad[-10:], want[-10:]) < 0.9999


def _held_out_questions(tok, n: int):
    """The shipped model's held-out phrasing set, built by its own training script (no torch needed):
    (prompt + answer ids, where the answer starts) for the first n questions."""
    import importlib.util
    import random
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "tools" / "train_shipped_model.py"
    spec = importlib.util.spec_from_file_location("train_shipped_model", path)
    T = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = T                 # its dataclasses look their module up
    spec.loader.exec_module(T)
    encode = lambda text: tok.encode(text)                                   # noqa: E731
    stream = T.SampleStream(T.build_corpus(), encode, random.Random(1234))
    out = []
    for subjects, chunks in stream.qa[::3][:n]:
        prompt = encode(T.chat([("user", T.HELD_OUT_PHRASING.format(s=subjects[0]))]) + "<|im_start|>assistant\n")
        out.append((prompt + encode(chunks[0] + "<|im_end|>"), len(prompt)))
    return out


def test_shipped_model_has_a_low_perplexity_on_held_out_questions():
    """docs/shipped-model.md: 1.19 over the 69 held-out-phrasing answers; here the first 4, through the
    float64 golden reading the shipped GGUF: the file, the loader and the forward agree."""
    path = models.shipped().get(models.DEFAULT_MODEL)
    if path is None:
        if os.environ.get("OTPU_CI"):
            pytest.fail(f"the shipped model {models.DEFAULT_MODEL} is missing from {models.SHIPPED_DIR}")
        pytest.skip(f"the shipped model {models.DEFAULT_MODEL} is not in this checkout")
    m = models.open_model(models.DEFAULT_MODEL)
    g = Golden(m.config, SourceWeights(m.ckpt), positions=m.config.context)
    nll, n = 0.0, 0
    for ids, start in _held_out_questions(m.tokenizer, 4):
        d_nll, d_n = next_token_nll(g, ids, start)
        nll, n = nll + d_nll, n + d_n
    ppl = math.exp(nll / n)
    assert ppl < 5.0, f"perplexity {ppl:.2f} over {n} answer tokens (docs: 1.19 over all 69 questions)"
