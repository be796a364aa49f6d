"""Qwen3-MoE (routed experts with offload) from real files to the card.

Loaders: tiny random models written as GGUF (llama.cpp's `qwen3moe` layout: expert_count,
expert_used_count, expert_feed_forward_length, each layer's experts stacked in
`ffn_{gate,up,down}_exps`, the router `ffn_gate_inp`) and as a Hugging Face directory
(`Qwen3MoeForCausalLM`, one tensor per expert, `norm_topk_prob`) read back tensor for tensor, and
bad input refused by file, key and value. References: the fp32 golden (token by token) against
a whole-sequence float64 formula written here (every expert computed, the routing as a 0/1 mask
of the k largest router probabilities). Tiny models on sim-small (D=32).
"""
import json

import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)
from otpu_core.kernels import reference as R
from otpu_core.llm import checkpoint, reference, synthetic
from otpu_core.llm.errors import ModelError


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3moe")
    cfg = llmtiny.config("qwen3moe", D=32)
    gguf, w = llmtiny.write(d, cfg, "gguf")
    hf_cfg = llmtiny.config("qwen3moe", D=32, name="tiny-qwen3moe-hf")
    hf, hw = llmtiny.write(d, hf_cfg, "hf", seed=1, dtype="BF16")
    return {"gguf": (gguf, cfg, w), "hf": (hf, hf_cfg, hw), "dir": d}


# -- files ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gguf", "hf"])
def test_qwen3moe_files_read_back_as_written(models, kind):
    path, cfg, w = models[kind]
    ck = checkpoint.open_checkpoint(path)
    c = ck.config
    assert c.family == "qwen3moe" and (c.experts, c.experts_used, c.ffn) == (8, 2, 64) and not c.tied
    assert set(c.tensor_shapes()) == set(cfg.tensor_shapes())
    assert "eg.1.7" in c.tensor_shapes() and "router.0" in c.tensor_shapes() and "wg.0" not in c.tensor_shapes()
    tol = 2 ** -7 if kind == "hf" else 2 ** -10          # BF16 / F16 matrices (norms F32 in GGUF)
    for name in cfg.tensor_shapes():
        got = ck.get(name)
        assert got.shape == w[name].shape, name
        assert np.abs(got - w[name]).max() <= tol * np.abs(w[name]).max(), name


def test_gguf_experts_are_the_slices_of_the_stacked_tensors(models):
    """Read back with the gguf library itself: blk.1.ffn_down_exps is [experts, d, ffn] in numpy order."""
    import gguf
    path, cfg, _ = models["gguf"]
    t = {x.name: x for x in gguf.GGUFReader(str(path)).tensors}["blk.1.ffn_down_exps.weight"]
    stacked = np.asarray(t.data, np.float32).reshape(cfg.experts, cfg.d, cfg.ffn)
    ck = checkpoint.open_checkpoint(path)
    for e in range(cfg.experts):
        assert np.array_equal(ck.get(f"ed.1.{e}"), stacked[e]), e


def _hf_dir(models, name, edit):
    path, cfg, w = models["hf"]
    d = synthetic.write_hf(models["dir"] / name, cfg, w, llmtiny.tokenizer())
    js = json.loads((d / "config.json").read_text())
    edit(js)
    (d / "config.json").write_text(json.dumps(js))
    return d


@pytest.mark.parametrize("edit,message", [
    (lambda js: js.pop("num_experts"), "missing key 'num_experts'"),
    (lambda js: js.__setitem__("num_experts", 0), "num_experts = 0; it must be a positive integer"),
    (lambda js: js.__setitem__("num_experts_per_tok", 9), "num_experts_per_tok = 9 exceeds num_experts = 8"),
    (lambda js: js.__setitem__("moe_intermediate_size", "64"), "moe_intermediate_size = '64'; it must be a positive"),
    (lambda js: js.__setitem__("norm_topk_prob", False), "norm_topk_prob = False"),
    (lambda js: js.pop("norm_topk_prob"), "the key is missing: transformers takes false"),
    (lambda js: js.__setitem__("mlp_only_layers", [1]), "mlp_only_layers = [1]: layers with a dense MLP"),
    (lambda js: js.__setitem__("moe_intermediate_size", 96), "tensor 'model.layers.0.mlp.experts.0.gate_proj.weight' "
                                                             "has shape [64, 64] but the config needs [96, 64]"),
])
def test_bad_hf_configs_are_refused_by_key_and_value(models, edit, message):
    d = _hf_dir(models, f"bad-{abs(hash(message))}", edit)
    with pytest.raises(ModelError) as e:
        checkpoint.open_checkpoint(d)
    assert message in e.value.message and str(d) in e.value.message


def test_bad_gguf_is_refused_by_key_and_tensor(models, tmp_path):
    _, cfg, w = models["gguf"]
    bad = synthetic.write_gguf(tmp_path / "nine.gguf", cfg.with_(experts=9), {**w, **{
        f"{k}.{i}.8": w[f"{k}.{i}.0"] for k in ("eg", "eu", "ed") for i in range(cfg.layers)}}, llmtiny.tokenizer())
    with pytest.raises(ModelError) as e:
        checkpoint.open_checkpoint(bad)
    assert "tensor 'blk.0.ffn_gate_inp.weight' has shape [8, 64] but the config needs [9, 64]" in e.value.message
    import gguf
    src = gguf.GGUFReader(str(models["gguf"][0]))
    meta = {f.name: f.contents() for f in src.fields.values()}
    from otpu_core.llm import config as config_mod
    for key, value, message in (("qwen3moe.expert_used_count", 9, "expert_used_count 9 for qwen3moe.expert_count 8"),
                                ("qwen3moe.expert_weights_scale", 2.5, "expert_weights_scale 2.5")):
        with pytest.raises(ModelError) as e:
            config_mod.from_gguf({**meta, key: value}, "x.gguf", tied=False, rope_factors=None, vocab=None)
        assert message in e.value.message
    gone = {k: v for k, v in meta.items() if k != "qwen3moe.expert_count"}
    with pytest.raises(ModelError, match="missing key 'qwen3moe.expert_count'"):
        config_mod.from_gguf(gone, "x.gguf", tied=False, rope_factors=None, vocab=None)


# -- references ---------------------------------------------------------------------------------------------

def _dense_moe(cfg, W):
    """The MoE block as a dense formula: every expert's SwiGLU, weighted by the router probabilities
    masked to the k largest per row and rescaled to sum to 1."""
    def mlp(i, x):
        z = x @ W[f"router.{i}"].T
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        kth = -np.sort(-p, axis=1)[:, cfg.experts_used - 1:cfg.experts_used]
        gate = np.where(p >= kth, p, 0.0)
        gate /= gate.sum(1, keepdims=True)
        y = np.zeros_like(x)
        for e in range(cfg.experts):
            g = x @ W[f"eg.{i}.{e}"].T
            y += gate[:, e:e + 1] * ((g / (1 + np.exp(-g)) * (x @ W[f"eu.{i}.{e}"].T)) @ W[f"ed.{i}.{e}"].T)
        return y
    return mlp


@pytest.mark.parametrize("kind", ["gguf", "hf"])
def test_fp32_golden_equals_the_whole_sequence_formula(models, kind):
    path, _, _ = models[kind]
    ck = checkpoint.open_checkpoint(path)
    W = {n: ck.get(n).astype(np.float64) for n in ck.config.tensor_shapes()}
    tokens = llmtiny.prompts(1, ck.config.vocab, length=12)[0]
    got = reference.Golden(ck.config, reference.SourceWeights(ck), positions=64).forward(tokens)
    ref = llmtiny.whole_sequence(ck.config, W, tokens, mlp=_dense_moe(ck.config, W))
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    print(f"\nqwen3moe {kind} fp32 golden vs the whole-sequence formula: max-abs {err:.3g}, cosine {cos:.15f}")
    assert err < 1e-9 and cos > 1 - 1e-12, (err, cos)
