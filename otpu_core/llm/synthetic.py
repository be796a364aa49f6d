"""Random models of any supported shape, written as real files (for tests and benchmarks).

`random_weights(cfg, seed)` draws every tensor a `ModelConfig` needs (Hugging Face orientation,
norms around 1, matrices scaled so activations stay near unit size and logits spread out);
`tokenizer(size, pre)` trains a byte-level BPE on text every Python install has (the standard
library's pydoc topics) with ChatML's special tokens, split as the GGUF pre-tokenizer `pre`
names (`FAMILY_PRE`: what each family's real files carry); `gemma4_tokenizer(size)` makes Gemma
4's SentencePiece-style BPE (its specials, 256 byte-fallback tokens, U+2581 for a space);
`write_hf` writes a Hugging Face directory (config.json, safetensors in F32, F16 or BF16,
tokenizer.json, tokenizer_config.json with the chat template) and `write_gguf` a GGUF file the
way llama.cpp's converter lays it out (its metadata keys, tensor names, the permuted q/k rows of
Llama-family files, a `rope_freqs` tensor for Llama 3 scaling, Qwen3.5's ssm.* keys, -exp(A_log)
and tiled value heads, a mixture of experts' keys and each layer's experts stacked in one tensor
per projection, the vocabulary: `gpt2` with its pre, merges and token types, or `gemma4` with
scores, token types and merges). Norms a family stores zero-centred in Hugging Face files
(Qwen3.5) are written as w - 1 there.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from . import families
from .checkpoint import file_names
from .config import ModelConfig
from .gguf_file import v_heads

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def corpus(chars: int = 200_000) -> str:
    from pydoc_data.topics import topics
    text, n = [], 0
    for key in sorted(topics):
        text.append(topics[key])
        n += len(topics[key])
        if n >= chars:
            break
    return "\n".join(text)


def tokenizer(size: int = 384, pre: str = "gpt-2", text: str | None = None):
    """A byte-level BPE of about `size` tokens (the 3 ChatML specials first), as `tokenizers.Tokenizer`, its text
    split the way the GGUF `tokenizer.ggml.pre` value `pre` names (Llama 3's and LFM2's ignore merges too, as their
    tokenizer.json files do), learned from `text` (default `corpus()`)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from .tokenizer import PRE_TOKENIZERS
    splits, ignore_merges = PRE_TOKENIZERS[pre]
    tk = Tokenizer(models.BPE())
    if pre == "gpt-2":
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        cut = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in splits]
        tk.pre_tokenizer = pre_tokenizers.Sequence(cut + [pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                   use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=list(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator([text or corpus()], trainer)
    if ignore_merges:
        js = json.loads(tk.to_str())
        js["model"]["ignore_merges"] = True
        tk = Tokenizer.from_str(json.dumps(js))
    return tk


# the GGUF tokenizer.ggml.pre llama.cpp's converter writes for each family's published tokenizer
FAMILY_PRE = {"llama": "llama-bpe", "smollm3": "llama-bpe", "lfm2": "lfm2", "lfm2moe": "lfm2", "qwen3": "qwen2",
              "qwen3moe": "qwen2", "qwen35": "qwen35"}
GEMMA4_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|channel>", "<channel|>")
GEMMA4_VISIBLE = ("<|channel>", "<channel|>")     # llama.cpp's converter types these USER_DEFINED (rendered)
GEMMA4_TEMPLATE = ("{{- bos_token -}}{%- for message in messages -%}"
                   "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
                   "{{- '<|turn>' + role + '\n' + message['content'] | trim + '<turn|>\n' -}}{%- endfor -%}"
                   "{%- if add_generation_prompt -%}{{- '<|turn>model\n' -}}{%- endif -%}")


def gemma4_tokenizer(size: int = 384, alphabet: int = 48, text: str | None = None):
    """Gemma 4's tokenizer shape at `size` tokens: its specials first, the 256 `<0xXX>` byte tokens, then a BPE
    over SentencePiece-spelled text (a space is U+2581) on `alphabet` characters, merged without crossing a
    newline; spaces become U+2581, a character outside the vocabulary falls back to its bytes (transformers'
    GemmaTokenizer: byte fallback, the Replace normalizer, the Replace/ByteFallback/Fuse decoder)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    fixed = list(GEMMA4_SPECIALS) + [f"<0x{b:02X}>" for b in range(256)]
    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.Replace(" ", "\u2581")
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"\n+"), behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=size - len(fixed), limit_alphabet=alphabet, show_progress=False)
    tk.train_from_iterator([text or corpus()], trainer)
    learned = json.loads(tk.to_str())["model"]
    order = [t for t, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1])]
    vocab = {t: i for i, t in enumerate(fixed + order)}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    out = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    out.normalizer = normalizers.Replace(" ", "\u2581")
    out.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    out.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in GEMMA4_SPECIALS])
    return out


EMBED_STD = 0.05                 # like trained models: small embeddings, so the first norm's epsilon matters


def random_weights(cfg: ModelConfig, seed: int = 0, gain: float = 1.5) -> dict[str, np.ndarray]:
    """Norm weights 1 + 0.1 N(0, 1); matrices N(0, gain^2 / fan_in); embeddings N(0, EMBED_STD^2)."""
    rng = np.random.default_rng(seed)
    out = {}
    unit = cfg.spec.unit_scores
    for name, shape in cfg.tensor_shapes().items():
        kind = name.split(".")[0]
        if len(shape) == 1:
            # scores q.k without 1/sqrt(head_dim) (Gemma): q/k norm weights near head_dim^-1/4 keep them
            # near unit size, as a trained model's are
            scale = shape[0] ** -0.25 if unit and kind in ("qn", "kn") else 1.0
            out[name] = (scale * (1.0 + 0.1 * rng.standard_normal(shape))).astype(np.float32)
        else:
            scale = EMBED_STD if kind == "embed" else gain / np.sqrt(shape[1])
            out[name] = (scale * rng.standard_normal(shape)).astype(np.float32)
    return out


def _file_names(cfg: ModelConfig, gguf: bool) -> dict[str, str]:
    names = file_names(cfg, gguf)
    return {k: names[k] for k in cfg.tensor_shapes()}


def hf_config(cfg: ModelConfig, rope_scaling: dict | None = None) -> dict:
    arch = families.by_name(cfg.family).hf_architectures[0]
    out = {"architectures": [arch], "model_type": cfg.family, "vocab_size": cfg.vocab, "hidden_size": cfg.d,
           "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
           "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.norm_eps,
           "rope_theta": cfg.rope_theta, "tie_word_embeddings": cfg.tied, "max_position_embeddings": cfg.context,
           "hidden_act": "silu", "attention_bias": False, "bos_token_id": cfg.bos_id,
           "eos_token_id": list(cfg.eos_ids) if len(cfg.eos_ids) > 1 else (cfg.eos_ids[0] if cfg.eos_ids else None)}
    if rope_scaling:
        out["rope_scaling"] = rope_scaling
    if cfg.family == "smollm3":
        out["no_rope_layers"] = [0 if i in cfg.nope_layers else 1 for i in range(cfg.layers)]
    fam = families.by_name(cfg.family)
    if "sliding" in dict(fam.layer_types).values():
        return _gemma_hf_config(cfg, out)
    if fam.layer_types:
        kind_name = {kind: name for name, kind in fam.layer_types}
        out["layer_types"] = [kind_name[k] for k in cfg.kinds]
    if "conv" in cfg.kinds:           # LFM2: its own key names
        out["norm_eps"] = out.pop("rms_norm_eps")
        out.update(conv_L_cache=cfg.conv_taps, conv_bias=False, block_auto_adjust_ff_dim=False, block_ff_dim=cfg.ffn)
    if "deltanet" in cfg.kinds:       # Qwen3.5's text config
        out.update(model_type="qwen3_5_text", linear_conv_kernel_dim=cfg.conv_taps,
                   linear_num_key_heads=cfg.lin_k_heads, linear_num_value_heads=cfg.lin_v_heads,
                   linear_key_head_dim=cfg.lin_k_dim, linear_value_head_dim=cfg.lin_v_dim, attn_output_gate=True)
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": out.pop("rope_theta"),
                                  "partial_rotary_factor": cfg.rot_dim / cfg.head_dim, "mrope_interleaved": True,
                                  "mrope_section": [11, 11, 10]}
    if fam.moe and fam.moe_gating == "sigmoid":      # LFM2-MoE (transformers' Lfm2MoeConfig keys)
        for k in ("block_auto_adjust_ff_dim", "block_ff_dim"):
            out.pop(k, None)
        out.update(model_type="lfm2_moe", num_experts=cfg.experts, num_experts_per_tok=cfg.experts_used,
                   moe_intermediate_size=cfg.ffn, intermediate_size=cfg.dense_ffn or cfg.ffn,
                   num_dense_layers=cfg.dense_layers, use_expert_bias=cfg.expert_bias, norm_topk_prob=cfg.norm_topk,
                   routed_scaling_factor=cfg.routed_scale)
    elif fam.moe:                     # Qwen3-MoE: every layer routed, the chosen experts' weights renormalised
        out.update(model_type="qwen3_moe", num_experts=cfg.experts, num_experts_per_tok=cfg.experts_used,
                   moe_intermediate_size=cfg.ffn, norm_topk_prob=cfg.norm_topk, decoder_sparse_step=1,
                   mlp_only_layers=[])
    return out


def _gemma_hf_config(cfg: ModelConfig, base: dict) -> dict:
    """Gemma 4's text config.json keys (transformers' Gemma4TextConfig)."""
    kind_name = {kind: name for name, kind in families.by_name(cfg.family).layer_types}
    hd_full = cfg.global_head_dim or cfg.head_dim
    full = {"rope_type": "default", "rope_theta": cfg.global_rope_theta or cfg.rope_theta}
    if cfg.global_rope_pairs:
        full = {"rope_type": "proportional", "partial_rotary_factor": 2 * cfg.global_rope_pairs / hd_full,
                "rope_theta": full["rope_theta"]}
    out = {k: v for k, v in base.items() if k not in ("hidden_act",)}
    out.update(model_type="gemma4_text", hidden_activation="gelu_pytorch_tanh", global_head_dim=hd_full,
               layer_types=[kind_name[k] for k in cfg.kinds], sliding_window=cfg.sliding_window,
               rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": cfg.rope_theta},
                                "full_attention": full},
               num_kv_shared_layers=cfg.kv_shared, hidden_size_per_layer_input=cfg.ple_dim,
               vocab_size_per_layer_input=cfg.vocab, use_double_wide_mlp=bool(cfg.layer_ffn),
               final_logit_softcapping=cfg.logit_softcap or None, attention_k_eq_v=False, enable_moe_block=False,
               pad_token_id=cfg.pad_id)
    out.pop("rope_theta")
    return out


def _safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: str) -> None:
    """Write a safetensors file (the format's header, then the raw tensors), in F32, F16 or BF16."""
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, np.float32)
        if dtype == "BF16":
            raw = (a.view(np.uint32) >> 16).astype(np.uint16).tobytes()     # truncation: exact for bf16 inputs
        elif dtype == "F16":
            raw = a.astype(np.float16).tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for raw in blobs:
            f.write(raw)


def write_hf(d: Path, cfg: ModelConfig, weights: dict[str, np.ndarray], tk=None, template: str | None = CHATML,
             dtype: str = "F32", rope_scaling: dict | None = None, multimodal: bool = False) -> Path:
    """`multimodal`: as Qwen3.5's published files: the text config under `text_config`, its tensors
    under the family's `hf_text_prefix`, beside a vision tensor (with a bias) and an MTP tensor."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    fam = families.by_name(cfg.family)
    names = _file_names(cfg, gguf=False)
    offset = set(fam.hf_norm_offset)
    tensors = {names[k]: _hf_shaped(k, weights[k] - (k.split(".")[0] in offset)) for k in names}
    js = hf_config(cfg, rope_scaling)
    if multimodal:
        tensors = {(fam.hf_text_prefix + n[len("model."):] if n.startswith("model.") else n): a
                   for n, a in tensors.items()}
        tensors["model.visual.blocks.0.attn.qkv.bias"] = np.zeros(8, np.float32)
        tensors["mtp.fc.weight"] = np.zeros((cfg.d, 2 * cfg.d), np.float32)
        js = {"architectures": [fam.hf_architectures[-1]], "model_type": cfg.family, "text_config": js,
              "vision_config": {"depth": 1}, "tie_word_embeddings": cfg.tied}
    _safetensors(d / "model.safetensors", tensors, dtype)
    (d / "config.json").write_text(json.dumps(js, indent=1))
    if tk is not None:
        tk.save(str(d / "tokenizer.json"))
        gemma = json.loads(tk.to_str())["model"].get("byte_fallback")
        roles = ({"eos_token": "<turn|>", "bos_token": "<bos>", "pad_token": "<pad>", "unk_token": "<unk>"}
                 if gemma else {"eos_token": "<|im_end|>", "bos_token": None, "pad_token": "<|endoftext|>"})
        (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, **roles}))
    return d


def _hf_shaped(canon: str, a: np.ndarray) -> np.ndarray:
    """Hugging Face keeps the depthwise conv as nn.Conv1d's [d, 1, taps]."""
    return a[:, None, :] if canon.split(".")[0] in families.DEPTHWISE_TENSORS else a


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permute: rotate-half rows to interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path, cfg: ModelConfig, weights: dict[str, np.ndarray], tk=None, template: str | None = CHATML,
               types: dict[str, str] | None = None, rope_factors=None, mtp_layers: int = 0, pre: str = "gpt-2") -> Path:
    """`types`: canonical name (or kind such as 'wq') -> GGUF type name; default F16 matrices, F32 norms.
    `pre`: the byte-level vocabulary's tokenizer.ggml.pre (a `gemma4_tokenizer` writes Gemma 4's keys instead).
    `mtp_layers`: counted in the block count after the decoder's, as llama.cpp writes Qwen3.5's MTP
    layer (their tensors are left out)."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    fam = families.by_name(cfg.family)
    arch = fam.gguf_architectures[0]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(cfg.name)
    w.add_context_length(cfg.context)
    w.add_embedding_length(cfg.d)
    w.add_block_count(cfg.layers + mtp_layers)
    w.add_feed_forward_length(list(cfg.layer_ffn) if cfg.layer_ffn else cfg.dense_ffn or cfg.ffn)
    if fam.moe:
        if not cfg.norm_topk:
            raise ValueError(f"a {arch} GGUF always renormalises the chosen experts' weights (llama.cpp)")
        w.add_expert_count(cfg.experts)
        w.add_expert_used_count(cfg.experts_used)
        w.add_expert_feed_forward_length(cfg.ffn)
    if fam.moe_gating == "sigmoid":   # llama.cpp's lfm2moe: the gating function, the leading dense layers
        if not cfg.expert_bias or cfg.routed_scale != 1.0:
            raise ValueError("an lfm2moe GGUF has every routed layer's exp_probs_b bias and unscaled weights")
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_leading_dense_block_count(cfg.dense_layers)
    w.add_head_count(cfg.heads)
    if "conv" in cfg.kinds:           # llama.cpp's LFM2 layout: KV heads per layer, 0 for a convolution layer
        w.add_head_count_kv([cfg.kv_heads if k == "attention" else 0 for k in cfg.kinds])
        w.add_shortconv_l_cache(cfg.conv_taps)
    else:
        w.add_head_count_kv(cfg.kv_heads)
    if "deltanet" in cfg.kinds:       # llama.cpp's qwen35 keys (attention every n-th layer, the DeltaNet's sizes)
        n = cfg.kinds.index("attention") + 1
        if cfg.kinds != tuple("attention" if (i + 1) % n == 0 else "deltanet" for i in range(cfg.layers)):
            raise ValueError(f"GGUF qwen35 files give the layer order as attention every n-th layer, not {cfg.kinds}")
        w.add_full_attention_interval(n)
        w.add_ssm_conv_kernel(cfg.conv_taps)
        w.add_ssm_state_size(cfg.lin_k_dim)
        w.add_ssm_group_count(cfg.lin_k_heads)
        w.add_ssm_time_step_rank(cfg.lin_v_heads)
        w.add_ssm_inner_size(cfg.lin_v_heads * cfg.lin_v_dim)
        w.add_rope_dimension_sections([11, 11, 10, 0])     # the text model's M-RoPE sections (as hf_config's)
    if cfg.rotary_dim:
        w.add_rope_dimension_count(cfg.rotary_dim)
    if "sliding" in cfg.kinds:
        rope_factors = _gemma_gguf_keys(w, cfg)
    else:
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
        w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_vocab_size(cfg.vocab)
    if mtp_layers:
        w.add_nextn_predict_layers(mtp_layers)
    if tk is not None:
        _tokenizer_keys(w, cfg, tk, template, pre)
    types = types or {}
    gguf_names = _file_names(cfg, gguf=True)
    for name in cfg.tensor_shapes():
        kind = name.split(".")[0]
        if kind in families.EXPERT_TENSORS:           # one stacked tensor per layer, written at its expert 0
            layer, e = name.split(".")[1:]
            if e != "0":
                continue
            a = np.stack([np.asarray(weights[f"{kind}.{layer}.{x}"], np.float32) for x in range(cfg.experts)])
        else:
            a = np.ascontiguousarray(weights[name], np.float32)
        if fam.gguf_permuted_qk and kind in ("wq", "wk"):
            a = _permute(a, cfg.heads if kind == "wq" else cfg.kv_heads)
        if kind == "galog":
            a = -np.exp(a.astype(np.float64)).astype(np.float32)
        if fam.gguf_tiled_v:
            a = np.ascontiguousarray(v_heads(kind, a, cfg, tiled=True), np.float32)
        t = types.get(name, types.get(kind, "F32" if a.ndim == 1 else "F16"))
        if t == "F32":
            w.add_tensor(gguf_names[name], a)
        elif t == "F16":
            w.add_tensor(gguf_names[name], a.astype(np.float16))
        else:
            qt = Q[t]
            data = raw_blocks(a, qt)
            w.add_tensor(gguf_names[name], data, raw_shape=data.shape, raw_dtype=qt)
    if rope_factors is not None:
        w.add_tensor("rope_freqs.weight", np.asarray(rope_factors, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def _tokenizer_keys(w, cfg: ModelConfig, tk, template: str | None, pre: str) -> None:
    """The vocabulary as llama.cpp's converter writes it: a byte-level BPE as `gpt2` with `pre`, its merges and
    token types; a byte-fallback BPE (Gemma 4) as `gemma4`: tokens, scores (-1000, gguf's LlamaHfVocab),
    types (byte, control, the visible tokens user-defined), merges, BOS added, no prefix space."""
    vocab = tk.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    model = json.loads(tk.to_str())["model"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    special = {a.content for a in tk.get_added_tokens_decoder().values()}
    if model.get("byte_fallback"):
        w.add_tokenizer_model("gemma4")
        w.add_token_list(tokens)
        w.add_token_scores([-1000.0] * len(tokens))
        w.add_token_types([6 if len(t) == 6 and t.startswith("<0x") else 4 if t in GEMMA4_VISIBLE else
                           3 if t in special else 1 for t in tokens])
        w.add_token_merges(merges)
        w.add_add_space_prefix(False)
        w.add_add_bos_token(True)
        for role, tok in (("bos", "<bos>"), ("unk", "<unk>"), ("pad", "<pad>")):
            getattr(w, f"add_{role}_token_id")(vocab[tok])
    else:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types([3 if t in special else 1 for t in tokens])
        w.add_token_merges(merges)
        w.add_pad_token_id(vocab["<|endoftext|>"])
        if cfg.bos_id is not None:
            w.add_bos_token_id(cfg.bos_id)
    if cfg.eos_ids:
        w.add_eos_token_id(cfg.eos_ids[0])
    if template:
        w.add_chat_template(template)


def _gemma_gguf_keys(w, cfg: ModelConfig):
    """llama.cpp's Gemma 4 keys; the full layers' proportional RoPE as the rope_freqs divisors it writes."""
    hd_full = cfg.global_head_dim or cfg.head_dim
    w.add_key_length(hd_full)
    w.add_value_length(hd_full)
    w.add_key_length_swa(cfg.head_dim)
    w.add_value_length_swa(cfg.head_dim)
    w.add_rope_dimension_count(hd_full)
    w.add_rope_dimension_count_swa(cfg.head_dim)
    w.add_rope_freq_base(cfg.global_rope_theta or cfg.rope_theta)
    w.add_rope_freq_base_swa(cfg.rope_theta)
    w.add_sliding_window(cfg.sliding_window)
    w.add_sliding_window_pattern([k == "sliding" for k in cfg.kinds])
    w.add_shared_kv_layers(cfg.kv_shared)
    w.add_embedding_length_per_layer_input(cfg.ple_dim)
    if cfg.logit_softcap:
        w.add_final_logit_softcapping(cfg.logit_softcap)
    if not cfg.global_rope_pairs:
        return None
    return [1.0] * cfg.global_rope_pairs + [1e30] * (hd_full // 2 - cfg.global_rope_pairs)


def raw_blocks(a: np.ndarray, qt) -> np.ndarray:
    """GGML blocks of a float matrix: gguf's own quantiser where it has one (Q8_0, Q4_0, BF16), else
    (Q4_K, Q6_K, which gguf only dequantises) random valid blocks scaled like the matrix."""
    from gguf import GGML_QUANT_SIZES, quants
    rows, cols = int(np.prod(a.shape[:-1])), a.shape[-1]       # a stack of matrices: its rows in order
    try:
        return quants.quantize(a.reshape(rows, cols), qt).reshape(*a.shape[:-1], -1)
    except NotImplementedError:
        pass
    block, size = GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng(rows * 131 + cols)
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    d = np.float16(np.abs(a).max() / 64 + 1e-6)
    if qt.name == "Q4_K":          # d, dmin (fp16) lead the block
        raw[..., 0:2] = np.frombuffer(d.tobytes(), np.uint8)
        raw[..., 2:4] = np.frombuffer(np.float16(d / 4).tobytes(), np.uint8)
    elif qt.name == "Q6_K":        # d (fp16) ends the block
        raw[..., size - 2:size] = np.frombuffer(np.float16(d / 16).tobytes(), np.uint8)
    return raw.reshape(*a.shape[:-1], -1)
