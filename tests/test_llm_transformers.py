"""Every family's fp32 golden against the library that defines the models: Hugging Face transformers.

Each test builds a tiny random model with transformers itself (eager attention, fp32, seeded, every
norm randomised around its identity so a misread norm shows), saves it with `save_pretrained`, opens
the directory with our loader (`checkpoint.open_checkpoint`: config.json parsing and tensor names)
and compares the fp32 golden's logits over 14 tokens with transformers' forward: max-abs and cosine,
printed and asserted. A second run of the golden with the family's distinguishing feature switched
off (Llama 3's rope scaling, SmolLM3's NoPE layers, Qwen3-MoE's renormalisation, ...) must be far
off, so the bound is tight enough to see that feature.

torch and transformers come from the `reference` extra (`pip install -e '.[reference]'`); without
them the tests skip, and under CI (OTPU_CI=1) they fail.
"""
import os

import llmtiny
import numpy as np
import pytest

from otpu_core.kernels import reference as R
from otpu_core.llm import checkpoint, reference

pytestmark = pytest.mark.slow

N_TOKENS = 14
MAX_ABS = 2e-5           # fp32 transformers against the float64 golden on the same fp32 weights
MIN_COS = 1 - 1e-10
FAR = 1e-3               # the golden with a feature switched off must miss transformers by more than this


def _libs():
    """(torch, transformers), or a skip (a failure under OTPU_CI) naming what is missing."""
    try:
        import torch
        import transformers
    except ImportError as e:
        why = f"{e.name} is not installed (pip install -e '.[reference]')"
        if os.environ.get("OTPU_CI"):
            pytest.fail(why)
        pytest.skip(why)
    return torch, transformers


def _model(name: str, **kw):
    """A seeded tiny random `transformers.<name>` (fp32, eager attention) from its config's keywords."""
    torch, transformers = _libs()
    arch, conf = name.split(":")
    if not hasattr(transformers, arch):
        why = f"transformers {transformers.__version__} has no {arch} (the reference extra needs >= 5.22)"
        if os.environ.get("OTPU_CI"):
            pytest.fail(why)
        pytest.skip(why)
    torch.manual_seed(0)
    cfg = getattr(transformers, conf)(attn_implementation="eager", dtype=torch.float32, **kw)
    return getattr(transformers, arch)(cfg).eval()


def _randomise_norms(model, centre: float = 1.0, scale_qk: bool = False) -> None:
    """Every norm weight `centre` + N(0, 0.1) (zero-centred norms: centre 0); q/k norms optionally
    times hd^-1/4, so Gemma's unscaled scores stay moderate."""
    torch, _ = _libs()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "layernorm" in name:
                c = 1.0 if name.endswith("linear_attn.norm.weight") else centre   # the gated norm is not offset
                q = p.shape[0] ** -0.25 if scale_qk and ("q_norm" in name or "k_norm" in name) else 1.0
                p.copy_((c + 0.1 * torch.randn_like(p)) * q)


def _compare(tmp_path, capsys, model, family: str, label: str, vocab: int, off: dict):
    """save_pretrained, our loader, the fp32 golden against transformers' logits; `off`: config fields
    whose change (the feature switched off) must put the golden far from transformers."""
    torch, transformers = _libs()
    model.save_pretrained(tmp_path, safe_serialization=True)
    tokens = llmtiny.prompts(1, vocab, length=N_TOKENS)[0]
    with torch.no_grad():
        want = model(torch.tensor([tokens])).logits[0].double().numpy()
    ck = checkpoint.open_checkpoint(tmp_path)
    assert ck.config.family == family
    got = reference.Golden(ck.config, reference.SourceWeights(ck), positions=64).forward(tokens)
    err, cos = R.max_abs(got, want), R.cosine(got, want)
    with capsys.disabled():
        print(f"\n{label} fp32 golden vs transformers {transformers.__version__}: max-abs {err:.3g} "
              f"(logits up to {np.abs(want).max():.2f}), cosine {cos:.13f}")
    assert err < MAX_ABS and cos > MIN_COS, (label, err, cos)
    wrong = reference.Golden(ck.config.with_(**off), reference.SourceWeights(ck), positions=64).forward(tokens)
    far = R.max_abs(wrong, want)
    with capsys.disabled():
        print(f"{label} with {off}: max-abs {far:.3g}")
    assert far > FAR, (off, far)
    return ck.config


def test_qwen3(tmp_path, capsys):
    """q/k norms, a head_dim wider than hidden / heads, untied head."""
    m = _model("Qwen3ForCausalLM:Qwen3Config", vocab_size=256, hidden_size=64, intermediate_size=96,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
               rope_parameters={"rope_type": "default", "rope_theta": 1e4}, rms_norm_eps=1e-6,
               tie_word_embeddings=False, initializer_range=0.1)
    _randomise_norms(m)
    cfg = _compare(tmp_path, capsys, m, "qwen3", "qwen3", 256, off={"family": "llama"})   # no q/k norms
    assert cfg.head_dim == 32 and not cfg.tied


def test_llama_with_llama3_rope_scaling(tmp_path, capsys):
    """Llama 3's rope scaling over a short original context, so every band (kept, blended, scaled)
    has pairs that turn within 14 tokens; tied head."""
    m = _model("LlamaForCausalLM:LlamaConfig", vocab_size=256, hidden_size=64, intermediate_size=128,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
               rope_parameters={"rope_theta": 1e4, **llmtiny.LLAMA3_SCALING}, rms_norm_eps=1e-5,
               tie_word_embeddings=True, initializer_range=0.1)
    _randomise_norms(m)
    cfg = _compare(tmp_path, capsys, m, "llama", "llama (llama3 rope scaling)", 256, off={"rope_factors": None})
    assert cfg.rope_factors is not None and any(1.0 < f < 8.0 for f in cfg.rope_factors)      # a blended band


def test_smollm3_with_nope_layers(tmp_path, capsys):
    """SmolLM3: every 4th layer without RoPE, written by transformers as no_rope_layers."""
    m = _model("SmolLM3ForCausalLM:SmolLM3Config", vocab_size=256, hidden_size=64, intermediate_size=128,
               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
               rope_parameters={"rope_type": "default", "rope_theta": 1e4}, pad_token_id=0, bos_token_id=1,
               eos_token_id=2, initializer_range=0.1)
    _randomise_norms(m)
    cfg = _compare(tmp_path, capsys, m, "smollm3", "smollm3 (NoPE layer 3)", 256, off={"nope_layers": ()})
    assert cfg.nope_layers == (3,)


def test_lfm2(tmp_path, capsys):
    """LFM2: `c c A c A` with the gated short convolution, q/k layernorms, and the MLP width
    transformers derives (block_auto_adjust_ff_dim with a multiple of 32: 100 -> 66 -> 96)."""
    m = _model("Lfm2ForCausalLM:Lfm2Config", vocab_size=256, hidden_size=64, intermediate_size=100,
               num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2,
               layer_types=["conv", "conv", "full_attention", "conv", "full_attention"], conv_L_cache=3,
               block_multiple_of=32, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True,
               rope_parameters={"rope_type": "default", "rope_theta": 1e6}, norm_eps=1e-5, initializer_range=0.1)
    _randomise_norms(m)
    cfg = _compare(tmp_path, capsys, m, "lfm2", "lfm2", 256, off={"rope_theta": 1e4})
    assert cfg.ffn == m.model.layers[0].feed_forward.w1.out_features


def test_qwen35_text_model(tmp_path, capsys):
    """Qwen3.5's text model (`Qwen3_5ForCausalLM`): `D D D A` with Gated DeltaNet layers of 4 value
    heads on 2 key heads, attention with partial RoPE (a quarter of each head) and the output gate,
    zero-centred norms (randomised around 0: weights around 1)."""
    torch, _ = _libs()
    m = _model("Qwen3_5ForCausalLM:Qwen3_5TextConfig", vocab_size=256, hidden_size=64, intermediate_size=96,
               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
               linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
               linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.1)
    _randomise_norms(m, centre=0.0)
    with torch.no_grad():                       # decays and step sizes away from their defaults
        for name, p in m.named_parameters():
            if name.endswith("A_log") or name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn_like(p))
    cfg = _compare(tmp_path, capsys, m, "qwen35", "qwen35", 256, off={"rotary_dim": 0})
    assert cfg.kinds == ("deltanet",) * 3 + ("attention",) and cfg.rotary_dim == 8
    assert (cfg.lin_k_heads, cfg.lin_v_heads) == (2, 4)


@pytest.mark.parametrize("norm_topk", [True, False])
def test_qwen3moe(tmp_path, norm_topk, capsys):
    """Qwen3-MoE: 8 experts, 3 a token, with and without the chosen experts' renormalisation."""
    m = _model("Qwen3MoeForCausalLM:Qwen3MoeConfig", vocab_size=256, hidden_size=64, intermediate_size=128,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8,
               num_experts_per_tok=3, moe_intermediate_size=32, norm_topk_prob=norm_topk, decoder_sparse_step=1,
               rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False,
               initializer_range=0.1)
    _randomise_norms(m)
    cfg = _compare(tmp_path, capsys, m, "qwen3moe", f"qwen3moe (norm_topk_prob {norm_topk})", 256,
                   off={"norm_topk": not norm_topk})
    assert (cfg.experts, cfg.experts_used, cfg.norm_topk) == (8, 3, norm_topk)


def test_gemma4(tmp_path, capsys):
    """Gemma 4 (`Gemma4ForCausalLM`): window 5, three shared layers, double-wide MLP, proportional RoPE,
    PLE, random layer scalars, the soft cap."""
    torch, _ = _libs()
    m = _model("Gemma4ForCausalLM:Gemma4TextConfig",
               vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, global_head_dim=64,
               layer_types=list(("sliding_attention",) * 2 + ("full_attention",)) * 2, sliding_window=5,
               rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                   "rope_theta": 1e6}},
               num_kv_shared_layers=3, use_double_wide_mlp=True, hidden_size_per_layer_input=32,
               vocab_size_per_layer_input=384, final_logit_softcapping=30.0, rms_norm_eps=1e-6,
               tie_word_embeddings=True, initializer_range=0.2, max_position_embeddings=1024)
    _randomise_norms(m, scale_qk=True)
    with torch.no_grad():
        for name, b in m.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(1.0 + 0.1 * torch.randn_like(b))
    cfg = _compare(tmp_path, capsys, m, "gemma4", "gemma4", 384, off={"sliding_window": 6})
    assert cfg.kinds == ("sliding", "sliding", "attention") * 2 and cfg.global_head_dim == 64 and cfg.kv_shared == 3
