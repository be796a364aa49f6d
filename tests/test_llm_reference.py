"""The fp32 golden against a second, loop-by-loop decoder written here from the Hugging Face modeling
code (rotate_half RoPE on duplicated cos/sin, causal softmax per head, SwiGLU), for Qwen3, Llama
(with Llama 3 rope scaling, read from safetensors and from a GGUF with permuted q/k) and SmolLM3
(NoPE layers); the shipped model's perplexity on held-out text."""
import math
import os

import numpy as np
import pytest

import llmtiny
from otpu_core.kernels import reference as R
from otpu_core.llm import checkpoint, models
from otpu_core.llm.reference import Golden, SourceWeights, perplexity


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


def held_out_text() -> str:
    """Text the shipped model was not trained on: the topics after the training split (the train branch's
    docs/shipped-model.md names the split), else the last topics of pydoc_data."""
    from pydoc_data.topics import topics
    keys = sorted(topics)
    return "\n".join(topics[k] for k in keys[-3:])


def test_shipped_model_has_a_low_perplexity_on_held_out_text():
    path = models.shipped().get(models.DEFAULT_MODEL)
    if path is None:
        if os.environ.get("OTPU_CI"):
            pytest.fail(f"the shipped model {models.DEFAULT_MODEL} is missing from {models.SHIPPED_DIR}")
        pytest.skip(f"the shipped model {models.DEFAULT_MODEL} is not in this checkout yet")
    m = models.open_model(models.DEFAULT_MODEL)
    ids = m.tokenizer.encode(held_out_text())[:256]
    ppl = perplexity(Golden(m.config, SourceWeights(m.ckpt), positions=len(ids)), ids)
    assert ppl < 60, ppl            # a uniform guess over the vocabulary would be vocab-sized
