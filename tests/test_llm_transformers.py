"""Every family's fp32 golden against the library that defines the models: Hugging Face transformers.

Each test builds a tiny random model with transformers itself (eager attention, fp32, seeded, every
norm randomised around its identity so a misread norm shows), saves it with `save_pretrained`, opens
the directory with our loader (`checkpoint.open_checkpoint`: config.json parsing and tensor names)
and compares the fp32 golden's logits over 14 tokens with transformers' forward: max-abs and cosine,
printed and asserted. A second run of the golden with the family's distinguishing feature switched
off (Llama 3's rope scaling, SmolLM3's NoPE layers, Qwen3-MoE's renormalisation, LFM2-MoE's
selection bias, ...) must be far off, so the bound is tight enough to see that feature. Qwen3,
Llama, SmolLM3, LFM2, Qwen3-MoE (whose GGUF always renormalises) and LFM2-MoE are also written as GGUF the way llama.cpp's converter writes them
(gguf's writer and tensor name map, q/k rows permuted, `rope_freqs`, experts stacked, taps squeezed)
and that file's golden held to the same logits and bounds; Qwen3.5's and Gemma 4's GGUF conversions
(norm offsets, value-head reordering, proportional-RoPE divisors) are not written here.

torch and transformers come from the `reference` extra (`pip install -e '.[reference]'`); without
them the tests skip, and under CI (OTPU_CI=1) they fail.
"""
import math
import os

import llmtiny
import numpy as np
import pytest

from otpu_core.kernels import reference as R
from otpu_core.llm import checkpoint, reference
from otpu_core.llm.errors import ModelError

pytestmark = pytest.mark.slow

N_TOKENS = 14
MAX_ABS = 2e-5           # fp32 transformers against the float64 golden on the same fp32 weights
MIN_COS = 1 - 1e-10
FAR = 1e-3               # the golden with a feature switched off must miss transformers by more than this


def _libs():
    """(torch, transformers), or a skip (a failure under OTPU_CI) naming what is missing."""
    return llmtiny.reference_modules("torch", "transformers")


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


def _gguf_as_llama_cpp_writes_it(model, hf_dir, arch: str, path):
    """The saved model (`hf_dir`'s safetensors, what the converter reads: transformers 5 keeps a layer's
    experts fused in memory but saves them one by one) as llama.cpp's convert_hf_to_gguf.py writes a
    dense decoder, LFM2 or Qwen3-MoE, with gguf's own writer and tensor name map: its hyperparameter
    keys, q/k rows permuted for interleaved-pair RoPE (Llama, SmolLM3: `LlamaModel.permute`), Llama 3
    scaling as the `rope_freqs` divisors computed in float32, a layer's experts stacked, LFM2's KV
    heads per layer and squeezed convolution taps, every tensor F32."""
    import gguf
    torch, _ = _libs()
    import safetensors.torch                 # needs torch: imported once _libs has it (or skipped)
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    sd = {k: v.float().numpy() for f in sorted(hf_dir.glob("*.safetensors"))
          for k, v in safetensors.torch.load_file(f).items()}
    w.add_feed_forward_length(sd["model.layers.0.feed_forward.w1.weight"].shape[0] if arch == "lfm2"
                              else c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    lfm = arch in ("lfm2", "lfm2moe")
    if lfm:           # KV heads per layer, 0 for a convolution layer; the convolution's length
        w.add_head_count_kv([c.num_key_value_heads if t == "full_attention" else 0 for t in c.layer_types])
        w.add_shortconv_l_cache(c.conv_L_cache)
    else:
        w.add_head_count_kv(c.num_key_value_heads)
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.norm_eps if lfm else c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    if arch in ("qwen3moe", "lfm2moe"):
        w.add_expert_count(c.num_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
    if arch == "lfm2moe":        # the sigmoid router and the leading dense layers
        w.add_leading_dense_block_count(c.num_dense_layers)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    names = gguf.get_tensor_name_map({v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch], c.num_hidden_layers)
    if c.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    for i in range(c.num_hidden_layers):
        for part in ("gate_proj", "up_proj", "down_proj", "w1", "w2", "w3"):
            stem = "feed_forward" if lfm else "mlp"
            es = [sd.pop(f"model.layers.{i}.{stem}.experts.{e}.{part}.weight")
                  for e in range(getattr(c, "num_experts", 0)) if f"model.layers.{i}.{stem}.experts.{e}.{part}.weight" in sd]
            if es:            # LFM2-MoE's merged name (convert_hf_to_gguf.py: layers.{bid}.feed_forward.experts.w1)
                sd[f"layers.{i}.{stem}.experts.{part}.weight" if lfm else f"model.layers.{i}.mlp.experts.{part}.weight"] \
                    = np.stack(es)
        if f"model.layers.{i}.feed_forward.expert_bias" in sd:     # the converter's rename to a .bias tensor
            sd[f"model.layers.{i}.feed_forward.expert_bias.bias"] = sd.pop(f"model.layers.{i}.feed_forward.expert_bias")
    permute = arch in ("llama", "smollm3")
    for name, a in sd.items():
        heads = c.num_attention_heads if name.endswith("q_proj.weight") else c.num_key_value_heads
        if permute and name.endswith(("q_proj.weight", "k_proj.weight")):
            a = a.reshape(heads, 2, a.shape[0] // heads // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)
        if "conv.conv" in name:                   # LFM2's depthwise taps [d, 1, L] as [d, L]
            a = a.squeeze(1)
        w.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), np.ascontiguousarray(a, np.float32))
    rope = c.rope_parameters
    if rope.get("rope_type") == "llama3":
        freqs = 1.0 / (rope["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        old, lo, hi, f = (rope["original_max_position_embeddings"], rope["low_freq_factor"], rope["high_freq_factor"],
                          rope["factor"])
        out = []
        for freq in freqs.tolist():
            wavelen = 2 * math.pi / freq
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 if wavelen < old / hi else f if wavelen > old / lo else 1 / ((1 - smooth) / f + smooth))
        w.add_tensor("rope_freqs.weight", np.asarray(out, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _golden_line(capsys, label: str, path, tokens, want, family: str):
    """Our loader on `path`, the fp32 golden's logits against `want`: printed, asserted; the checkpoint."""
    _, transformers = _libs()
    ck = checkpoint.open_checkpoint(path)
    assert ck.config.family == family
    got = reference.Golden(ck.config, reference.SourceWeights(ck), positions=64).forward(tokens)
    err, cos = R.max_abs(got, want), R.cosine(got, want)
    with capsys.disabled():
        print(f"\n{label} fp32 golden vs transformers {transformers.__version__}: max-abs {err:.3g} "
              f"(logits up to {np.abs(want).max():.2f}), cosine {cos:.13f}")
    assert err < MAX_ABS and cos > MIN_COS, (label, err, cos)
    return ck


def _compare(tmp_path, capsys, model, family: str, label: str, vocab: int, off: dict, gguf_arch: str = "",
             bf16: bool = False):
    """save_pretrained, our loader, the fp32 golden against transformers' logits; `off`: config fields
    whose change (the feature switched off) must put the golden far from transformers; `gguf_arch`:
    the same model written as llama.cpp's converter writes that architecture, held to the same bounds;
    `bf16`: saved as bfloat16 (as models are published), transformers then loading that file in fp32
    (a fresh model: casting this one back would leave its RoPE frequencies rounded to bfloat16)."""
    torch, _ = _libs()
    model.to(torch.bfloat16 if bf16 else torch.float32).save_pretrained(tmp_path, safe_serialization=True)
    if bf16:
        model = type(model).from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager").eval()
    tokens = llmtiny.prompts(1, vocab, length=N_TOKENS)[0]
    with torch.no_grad():
        want = model(torch.tensor([tokens])).logits[0].double().numpy()
    ck = _golden_line(capsys, label, tmp_path, tokens, want, family)
    if gguf_arch:
        _gguf_as_llama_cpp_writes_it(model, tmp_path, gguf_arch, tmp_path / "model.gguf")
        _golden_line(capsys, f"{label} GGUF", tmp_path / "model.gguf", tokens, want, family)
    wrong = reference.Golden(ck.config.with_(**off), reference.SourceWeights(ck), positions=64).forward(tokens)
    far = R.max_abs(wrong, want)
    with capsys.disabled():
        print(f"{label} with {off}: max-abs {far:.3g}")
    assert far > FAR, (off, far)
    return ck.config


@pytest.mark.parametrize("bf16", [False, True])
def test_qwen3(tmp_path, capsys, bf16):
    """q/k norms, a head_dim wider than hidden / heads, untied head; also saved as bfloat16."""
    m = _model("Qwen3ForCausalLM:Qwen3Config", vocab_size=256, hidden_size=64, intermediate_size=96,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
               rope_parameters={"rope_type": "default", "rope_theta": 1e4}, rms_norm_eps=1e-6,
               tie_word_embeddings=False, initializer_range=0.1)
    _randomise_norms(m)
    cfg = _compare(tmp_path, capsys, m, "qwen3", "qwen3 bf16" if bf16 else "qwen3", 256, off={"family": "llama"},
                   gguf_arch="qwen3", bf16=bf16)   # no q/k norms
    assert cfg.head_dim == 32 and not cfg.tied


def test_qwen3_sliding_window_layers_are_refused(tmp_path):
    """A Qwen3 with use_sliding_window (layers from max_window_layers on attend over 4 positions in
    transformers) is refused by the layer_types entry transformers saves, not read as full attention."""
    m = _model("Qwen3ForCausalLM:Qwen3Config", vocab_size=256, hidden_size=64, intermediate_size=96,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
               use_sliding_window=True, sliding_window=4, max_window_layers=1)
    m.save_pretrained(tmp_path, safe_serialization=True)
    with pytest.raises(ModelError, match=r"layer_types\[1\] = 'sliding_attention' is not supported in a qwen3 model"):
        checkpoint.open_checkpoint(tmp_path)


def test_llama_with_llama3_rope_scaling(tmp_path, capsys):
    """Llama 3's rope scaling over a short original context, so every band (kept, blended, scaled)
    has pairs that turn within 14 tokens; tied head."""
    m = _model("LlamaForCausalLM:LlamaConfig", vocab_size=256, hidden_size=64, intermediate_size=128,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
               rope_parameters={"rope_theta": 1e4, **llmtiny.LLAMA3_SCALING}, rms_norm_eps=1e-5,
               tie_word_embeddings=True, initializer_range=0.1)
    _randomise_norms(m)
    cfg = _compare(tmp_path, capsys, m, "llama", "llama (llama3 rope scaling)", 256, off={"rope_factors": None},
                   gguf_arch="llama")
    assert cfg.rope_factors is not None and any(1.0 < f < 8.0 for f in cfg.rope_factors)      # a blended band


def test_smollm3_with_nope_layers(tmp_path, capsys):
    """SmolLM3: every 4th layer without RoPE, written by transformers as no_rope_layers."""
    m = _model("SmolLM3ForCausalLM:SmolLM3Config", vocab_size=256, hidden_size=64, intermediate_size=128,
               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
               rope_parameters={"rope_type": "default", "rope_theta": 1e4}, pad_token_id=0, bos_token_id=1,
               eos_token_id=2, initializer_range=0.1)
    _randomise_norms(m)
    cfg = _compare(tmp_path, capsys, m, "smollm3", "smollm3 (NoPE layer 3)", 256, off={"nope_layers": ()},
                   gguf_arch="smollm3")
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
    cfg = _compare(tmp_path, capsys, m, "lfm2", "lfm2", 256, off={"rope_theta": 1e4},
                   gguf_arch="lfm2")
    assert cfg.ffn == m.model.layers[0].feed_forward.w1.out_features


@pytest.mark.parametrize("multimodal,tied", [(False, False), (True, False), (True, True)])
def test_qwen35(tmp_path, capsys, multimodal, tied):
    """Qwen3.5's text model (`Qwen3_5ForCausalLM`, and inside the multimodal
    `Qwen3_5ForConditionalGeneration` of the published checkpoints, with a one-block vision tower;
    tied, it is saved with the wrapper's tie_word_embeddings true and text_config's false):
    `D D D A` with Gated DeltaNet layers of 4 value heads on 2 key heads, attention with partial RoPE
    (a quarter of each head) and the output gate, zero-centred norms (randomised around 0: weights
    around 1)."""
    torch, _ = _libs()
    text = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
                initializer_range=0.1)
    if multimodal:
        m = _model("Qwen3_5ForConditionalGeneration:Qwen3_5Config", text_config=text, tie_word_embeddings=tied,
                   vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
                                      out_hidden_size=64, num_position_embeddings=16))
    else:
        m = _model("Qwen3_5ForCausalLM:Qwen3_5TextConfig", tie_word_embeddings=False, **text)
    _randomise_norms(m, centre=0.0)
    with torch.no_grad():                       # decays and step sizes away from their defaults
        for name, p in m.named_parameters():
            if name.endswith("A_log") or name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn_like(p))
    label = ("qwen35 multimodal" + (" tied" if tied else "")) if multimodal else "qwen35"
    cfg = _compare(tmp_path, capsys, m, "qwen35", label, 256, off={"rotary_dim": 0})
    assert cfg.kinds == ("deltanet",) * 3 + ("attention",) and cfg.rotary_dim == 8
    assert (cfg.lin_k_heads, cfg.lin_v_heads) == (2, 4) and cfg.tied == tied


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
                   off={"norm_topk": not norm_topk}, gguf_arch="qwen3moe" if norm_topk else "")
    assert (cfg.experts, cfg.experts_used, cfg.norm_topk) == (8, 3, norm_topk)


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_lfm2moe(tmp_path, capsys, scale):
    """LFM2-MoE: `c c A c A`, the first two layers dense (of their own width), then 8 experts of
    which 3 a token chosen by sigmoid score + selection bias (randomised: transformers initialises
    it to zero) and weighted by the unbiased scores, renormalised, times routed_scaling_factor. The
    bias switched off must be far; the GGUF (llama.cpp's lfm2moe: unscaled weights) for scale 1."""
    torch, _ = _libs()
    m = _model("Lfm2MoeForCausalLM:Lfm2MoeConfig", vocab_size=256, hidden_size=64, intermediate_size=96,
               moe_intermediate_size=32, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2,
               layer_types=["conv", "conv", "full_attention", "conv", "full_attention"], conv_L_cache=3,
               num_dense_layers=2, num_experts=8, num_experts_per_tok=3, routed_scaling_factor=scale,
               rope_parameters={"rope_type": "default", "rope_theta": 1e6}, norm_eps=1e-5, initializer_range=0.1)
    _randomise_norms(m)
    with torch.no_grad():
        for name, b in m.named_buffers():
            if name.endswith("expert_bias"):
                b.copy_(0.2 * torch.randn_like(b))
    cfg = _compare(tmp_path, capsys, m, "lfm2moe", f"lfm2moe (routed_scaling_factor {scale})", 256,
                   off={"expert_bias": False}, gguf_arch="lfm2moe" if scale == 1.0 else "")
    assert (cfg.experts, cfg.experts_used, cfg.dense_layers, cfg.dense_ffn, cfg.ffn) == (8, 3, 2, 96, 32)
    assert cfg.expert_bias and cfg.norm_topk and cfg.routed_scale == scale and cfg.tied


@pytest.mark.parametrize("multimodal", [False, True])
def test_gemma4(tmp_path, capsys, multimodal):
    """Gemma 4 (`Gemma4ForCausalLM`, and the text model of `Gemma4ForConditionalGeneration` with a
    one-layer vision tower): window 5, three shared layers, double-wide MLP, proportional RoPE, PLE,
    random layer scalars, the soft cap."""
    torch, _ = _libs()
    text = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, global_head_dim=64,
                layer_types=list(("sliding_attention",) * 2 + ("full_attention",)) * 2, sliding_window=5,
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                 "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                    "rope_theta": 1e6}},
                num_kv_shared_layers=3, use_double_wide_mlp=True, hidden_size_per_layer_input=32,
                vocab_size_per_layer_input=384, final_logit_softcapping=30.0, rms_norm_eps=1e-6,
                initializer_range=0.2, max_position_embeddings=1024)
    if multimodal:
        m = _model("Gemma4ForConditionalGeneration:Gemma4Config", text_config=text, audio_config=None,
                   vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=2, head_dim=16))
    else:
        m = _model("Gemma4ForCausalLM:Gemma4TextConfig", tie_word_embeddings=True, **text)
    _randomise_norms(m, scale_qk=True)
    with torch.no_grad():
        for name, b in m.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(1.0 + 0.1 * torch.randn_like(b))
    cfg = _compare(tmp_path, capsys, m, "gemma4", "gemma4 multimodal" if multimodal else "gemma4", 384,
                   off={"sliding_window": 6})
    assert cfg.kinds == ("sliding", "sliding", "attention") * 2 and cfg.global_head_dim == 64 and cfg.kv_shared == 3
