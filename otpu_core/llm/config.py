"""A decoder's shape and numerics (`ModelConfig`), read from a Hugging Face `config.json` or GGUF metadata.

The config is everything the references and the card program need besides the weights: sizes,
RMSNorm epsilon, RoPE base and per-frequency scaling (Llama 3's, given as divisors of the base
frequencies exactly as llama.cpp's `rope_freqs` tensor holds them), which layers skip RoPE,
whether the LM head is the embedding, the special token ids, the kind of every layer
(`layer_kinds`, families.KINDS; empty: attention throughout), the short convolution's taps and,
for a mixture of experts, the experts per layer and how many each token uses (`ffn` is then
each expert's width) and whether the k chosen experts' router probabilities are renormalised to
sum to 1 (`norm_topk`: Qwen3-MoE's `norm_topk_prob`, false when missing as in transformers;
llama.cpp's qwen3moe always renormalises).
`real_head_dim` is set only on the card's view of a model whose heads were zero-padded to the
block size (`layout.card_config`): RoPE then turns the real dims only and the q/k norms divide
by the real width. `tensor_shapes()` says what
every tensor of such a model must look like, so a checkpoint whose tensors disagree with its
config is refused by name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import families
from .errors import ModelError
from .families import (EXPERT_TENSORS, GLOBAL_TENSORS, KIND_TENSORS, KINDS, MLP_TENSORS, MOE_TENSORS,
                       QK_NORM_TENSORS, Family)


@dataclass(frozen=True)
class ModelConfig:
    family: str
    vocab: int
    d: int                       # hidden size
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_factors: tuple[float, ...] | None = None    # divisors of the base frequencies (Llama 3 scaling)
    nope_layers: tuple[int, ...] = ()                # layers without RoPE
    tied: bool = True
    context: int = 4096
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    pad_id: int | None = None
    name: str = "model"
    layer_kinds: tuple[str, ...] = ()                # per layer (families.KINDS); () = attention throughout
    conv_taps: int = 0                               # short convolution length (LFM2's L_cache)
    real_head_dim: int = 0                           # card view of zero-padded heads: the model's head_dim
    experts: int = 0                                 # routed experts per layer (0: a dense MLP)
    experts_used: int = 0                            # experts each token uses (top-k)
    norm_topk: bool = True                           # the chosen experts' weights renormalised to sum to 1
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def spec(self) -> Family: return families.by_name(self.family)

    @property
    def qk_norm(self) -> bool: return self.spec.qk_norm

    @property
    def group(self) -> int: return self.heads // self.kv_heads

    def uses_rope(self, layer: int) -> bool: return layer not in self.nope_layers

    @property
    def kinds(self) -> tuple[str, ...]: return self.layer_kinds or ("attention",) * self.layers

    def kind_layers(self, kind: str) -> list[int]:
        """The layers of one kind, in order (a layer's index among them is its block number)."""
        return [i for i, k in enumerate(self.kinds) if k == kind]

    @property
    def rope_dim(self) -> int: return self.real_head_dim or self.head_dim

    @property
    def qk_eps(self) -> float:
        """The q/k norms' epsilon over head_dim values (padded heads: scaled so the mean is the real one's)."""
        return self.norm_eps * self.rope_dim / self.head_dim if self.real_head_dim else self.norm_eps

    def layer_tensors(self, layer: int = 0) -> list[str]:
        kinds = KIND_TENSORS[self.kinds[layer]]
        if self.experts:
            kinds = tuple(k for k in kinds if k not in MLP_TENSORS) + MOE_TENSORS
        return [k for k in kinds if self.qk_norm or k not in QK_NORM_TENSORS]

    def layer_names(self, layer: int) -> list[tuple[str, str, int | None]]:
        """(canonical name, tensor kind, expert or None) of every tensor of a layer: `wq.3`, `eg.3.5`."""
        out = []
        for k in self.layer_tensors(layer):
            if k in EXPERT_TENSORS:
                out += [(f"{k}.{layer}.{e}", k, e) for e in range(self.experts)]
            else:
                out.append((f"{k}.{layer}", k, None))
        return out

    def global_tensors(self) -> list[str]:
        return [k for k in GLOBAL_TENSORS if not (self.tied and k == "head")]

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical name (layer tensors as `wq.3`) -> Hugging Face shape [out, in] or (n,)."""
        s, q, kv = self, self.heads * self.head_dim, self.kv_heads * self.head_dim
        per = {"ln1": (s.d,), "wq": (q, s.d), "wk": (kv, s.d), "wv": (kv, s.d), "wo": (s.d, q), "qn": (s.head_dim,),
               "kn": (s.head_dim,), "ln2": (s.d,), "wg": (s.ffn, s.d), "wu": (s.ffn, s.d), "wd": (s.d, s.ffn),
               "cin": (3 * s.d, s.d), "conv": (s.d, s.conv_taps), "cout": (s.d, s.d),
               "router": (s.experts, s.d), "eg": (s.ffn, s.d), "eu": (s.ffn, s.d), "ed": (s.d, s.ffn)}
        out = {"embed": (s.vocab, s.d), "final_norm": (s.d,), "head": (s.vocab, s.d)}
        out = {k: v for k, v in out.items() if k in self.global_tensors()}
        for i in range(s.layers):
            for name, k, _ in self.layer_names(i):
                out[name] = per[k]
        return out

    def inv_freq(self) -> np.ndarray:
        """float64 [head_dim/2] RoPE frequencies: theta^(-2i/d), divided by the scaling factors. Padded
        heads: the real frequencies first, then zeros (the padding's pairs stay unturned)."""
        half, real = self.head_dim // 2, self.rope_dim
        f = 1.0 / self.rope_theta ** (np.arange(real // 2, dtype=np.float64) * 2.0 / real)
        if self.rope_factors is not None:
            f = f / np.asarray(self.rope_factors, np.float64)
        return np.concatenate([f, np.zeros(half - real // 2)])

    def rope_tables(self, positions: int) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin float64 [positions, head_dim/2] (rotate-half layout)."""
        ang = np.outer(np.arange(positions, dtype=np.float64), self.inv_freq())
        return np.cos(ang), np.sin(ang)

    def check(self, where: str) -> "ModelConfig":
        bad = [(k, getattr(self, k)) for k in ("vocab", "d", "layers", "heads", "kv_heads", "head_dim", "ffn")
               if not isinstance(getattr(self, k), int) or getattr(self, k) < 1]
        if bad:
            k, v = bad[0]
            raise ModelError(f"{where}: {k} = {v!r}; it must be a positive integer")
        if self.heads % self.kv_heads:
            raise ModelError(f"{where}: {self.heads} attention heads do not split into {self.kv_heads} KV heads",
                             hint="heads must be a multiple of the KV heads (grouped-query attention)")
        if self.head_dim % 2:
            raise ModelError(f"{where}: head_dim {self.head_dim} is odd; RoPE rotates pairs")
        if not self.norm_eps > 0 or not self.rope_theta > 0:
            raise ModelError(f"{where}: norm epsilon {self.norm_eps} and RoPE theta {self.rope_theta} must be positive")
        if self.rope_factors is not None and len(self.rope_factors) != self.rope_dim // 2:
            raise ModelError(f"{where}: {len(self.rope_factors)} RoPE frequency factors for head_dim {self.rope_dim} "
                             f"(need {self.rope_dim // 2})")
        for e in self.eos_ids:
            if not 0 <= e < self.vocab:
                raise ModelError(f"{where}: end-of-sequence id {e} is outside the vocabulary of {self.vocab}")
        if self.layer_kinds:
            if len(self.layer_kinds) != self.layers:
                raise ModelError(f"{where}: {len(self.layer_kinds)} layer types for {self.layers} layers")
            bad = [k for k in self.layer_kinds if k not in KINDS]
            if bad:
                raise ModelError(f"{where}: layer kind '{bad[0]}' is not supported", hint=f"kinds: {', '.join(KINDS)}")
        if "conv" in self.kinds and not (isinstance(self.conv_taps, int) and self.conv_taps >= 2):
            raise ModelError(f"{where}: short convolution length {self.conv_taps!r}; it must be an integer >= 2")
        if self.spec.moe and not (isinstance(self.experts, int) and self.experts >= 1):
            raise ModelError(f"{where}: {self.experts!r} experts; a {self.family} model needs a positive number of them")
        if not self.spec.moe and self.experts:
            raise ModelError(f"{where}: {self.experts} experts in a {self.family} model, which has a dense MLP")
        if self.experts and not (isinstance(self.experts_used, int) and 1 <= self.experts_used <= self.experts):
            raise ModelError(f"{where}: {self.experts_used!r} experts per token; it must be 1..{self.experts} "
                             f"(the experts of a layer)")
        return self

    def with_(self, **kw) -> "ModelConfig": return replace(self, **kw)


# -- Hugging Face config.json ----------------------------------------------------------------------

def llama3_factors(scaling: dict, head_dim: int, theta: float, where: str) -> tuple[float, ...]:
    """Llama 3.x rope scaling as per-frequency divisors (the values llama.cpp's converter writes
    into `rope_freqs`): 1 for short wavelengths, `factor` for long ones, a smooth blend between."""
    try:
        factor = float(scaling["factor"])
        low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
        old = float(scaling.get("original_max_position_embeddings", 8192))
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{where}: rope_scaling {scaling!r} needs a numeric factor (llama3 scaling)") from None
    out = []
    for i in range(head_dim // 2):
        freq = 1.0 / theta ** (2.0 * i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return tuple(out)


def _need(cfg: dict, key: str, where: str):
    if key not in cfg:
        raise ModelError(f"{where}: missing key '{key}'")
    return cfg[key]


def _ids(v) -> tuple[int, ...]:
    if v is None:
        return ()
    return tuple(int(x) for x in (v if isinstance(v, (list, tuple)) else [v]))


def from_hf(cfg: dict, where: str, generation: dict | None = None, name: str = "model") -> ModelConfig:
    """A ModelConfig from a parsed config.json (and generation_config.json for the stop ids)."""
    archs = cfg.get("architectures") or ([cfg["model_type"]] if "model_type" in cfg else None)
    if not archs:
        raise ModelError(f"{where}: missing key 'architectures'")
    fam = families.for_hf(archs[0], where)
    for key, allowed in (("hidden_act", ("silu",)), ("attention_bias", (False,)), ("mlp_bias", (False,))):
        if key in cfg and cfg[key] not in allowed:
            raise ModelError(f"{where}: {key} = {cfg[key]!r}; this layer supports {', '.join(map(str, allowed))}")
    heads = int(_need(cfg, "num_attention_heads", where))
    d = int(_need(cfg, "hidden_size", where))
    head_dim = int(cfg.get("head_dim") or d // heads)
    layers = int(_need(cfg, "num_hidden_layers", where))
    params = cfg.get("rope_parameters") or {}
    theta = float(cfg.get("rope_theta", params.get("rope_theta", 10000.0)))
    scaling = cfg.get("rope_scaling") or (params if params.get("rope_type") not in (None, "default") else None)
    factors = None
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "llama3":
            factors = llama3_factors(scaling, head_dim, theta, where)
        elif kind not in (None, "default"):
            raise ModelError(f"{where}: rope_scaling type '{kind}' is not supported", hint="supported: llama3")
    if cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise ModelError(f"{where}: partial_rotary_factor {cfg['partial_rotary_factor']} is not supported (RoPE on "
                         "the whole head only)")
    nope: tuple[int, ...] = ()
    if "no_rope_layers" in cfg:
        flags = cfg["no_rope_layers"]
        if len(flags) != layers:
            raise ModelError(f"{where}: no_rope_layers has {len(flags)} entries for {layers} layers")
        nope = tuple(i for i, use in enumerate(flags) if not use)
    elif fam.nope_every:
        step = int(cfg.get("no_rope_layer_interval", fam.nope_every))
        nope = tuple(i for i in range(layers) if (i + 1) % step == 0)
    eos = _ids((generation or {}).get("eos_token_id", cfg.get("eos_token_id")))
    kinds, taps = _hf_layer_kinds(cfg, fam, layers, where), 0
    experts, used, ffn, norm_topk = _hf_experts(cfg, where) if fam.moe else (0, 0, _hf_ffn(cfg, where), True)
    if "conv" in kinds:
        if cfg.get("conv_bias", False):
            raise ModelError(f"{where}: conv_bias = true; this layer runs bias-free convolutions")
        taps = int(_need(cfg, "conv_L_cache", where))
    return ModelConfig(
        family=fam.name, vocab=int(_need(cfg, "vocab_size", where)), d=d, layers=layers, heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=head_dim,
        ffn=ffn, norm_eps=float(cfg.get("rms_norm_eps", cfg.get("norm_eps", 1e-6))), layer_kinds=kinds, conv_taps=taps,
        experts=experts, experts_used=used, norm_topk=norm_topk,
        rope_theta=theta, rope_factors=factors, nope_layers=nope,
        tied=bool(cfg.get("tie_word_embeddings", False)), context=int(cfg.get("max_position_embeddings", 4096)),
        bos_id=cfg.get("bos_token_id") if isinstance(cfg.get("bos_token_id"), int) else None, eos_ids=eos,
        pad_id=cfg.get("pad_token_id") if isinstance(cfg.get("pad_token_id"), int) else None, name=name,
    ).check(where)


def _hf_layer_kinds(cfg: dict, fam: Family, layers: int, where: str) -> tuple[str, ...]:
    """Per-layer kinds from `layer_types` (or LFM2's older `full_attn_idxs`); () for one-kind families."""
    if not fam.layer_types:
        return ()
    names = dict(fam.layer_types)
    types = cfg.get("layer_types")
    if types is None:                  # as transformers: the older attention list, else attention throughout
        idx = set(cfg.get("full_attn_idxs") or range(layers))
        types = ["full_attention" if i in idx else "conv" for i in range(layers)]
    if not isinstance(types, list):
        raise ModelError(f"{where}: missing key 'layer_types'")
    if len(types) != layers:
        raise ModelError(f"{where}: layer_types has {len(types)} entries for {layers} layers")
    for i, t in enumerate(types):
        if t not in names:
            raise ModelError(f"{where}: layer_types[{i}] = {t!r} is not supported", hint=f"supported: {', '.join(names)}")
    return tuple(names[t] for t in types)


def _positive(cfg: dict, key: str, where: str) -> int:
    v = _need(cfg, key, where)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ModelError(f"{where}: {key} = {v!r}; it must be a positive integer")
    return v


def _hf_experts(cfg: dict, where: str) -> tuple[int, int, int, bool]:
    """(experts, experts per token, expert width, renormalised) of a Qwen3-MoE config.json; every
    layer sparse."""
    experts, used = _positive(cfg, "num_experts", where), _positive(cfg, "num_experts_per_tok", where)
    width = _positive(cfg, "moe_intermediate_size", where)
    if used > experts:
        raise ModelError(f"{where}: num_experts_per_tok = {used} exceeds num_experts = {experts}")
    norm_topk = cfg.get("norm_topk_prob", False)
    if not isinstance(norm_topk, bool):
        raise ModelError(f"{where}: norm_topk_prob = {norm_topk!r}; it must be true or false")
    if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
        raise ModelError(f"{where}: decoder_sparse_step = {cfg.get('decoder_sparse_step', 1)!r}, mlp_only_layers = "
                         f"{cfg.get('mlp_only_layers', [])!r}: layers with a dense MLP are not supported",
                         hint="supported: decoder_sparse_step 1 and no mlp_only_layers (every layer routed)")
    return experts, used, width, norm_topk


def _hf_ffn(cfg: dict, where: str) -> int:
    """The MLP width; LFM2's `block_auto_adjust_ff_dim` shrinks `block_ff_dim` as llama.cpp's converter does
    (2/3, times the multiplier, rounded up to `block_multiple_of`)."""
    ffn = int(cfg["block_ff_dim"] if "block_ff_dim" in cfg else _need(cfg, "intermediate_size", where))
    if cfg.get("block_auto_adjust_ff_dim"):
        ffn = int(2 * ffn / 3)
        if cfg.get("block_ffn_dim_multiplier") is not None:
            ffn = int(float(cfg["block_ffn_dim_multiplier"]) * ffn)
        m = int(cfg.get("block_multiple_of", 256))
        ffn = m * ((ffn + m - 1) // m)
    return ffn


# -- GGUF metadata -------------------------------------------------------------------------------------

def from_gguf(meta: dict[str, Any], where: str, tied: bool, rope_factors: tuple[float, ...] | None,
              vocab: int | None, name: str = "model") -> ModelConfig:
    """A ModelConfig from GGUF key/values (`meta`: key -> Python value) as llama.cpp's converter
    writes them; `tied` when the file has no output.weight, `rope_factors` from its rope_freqs."""
    arch = meta.get("general.architecture")
    if arch is None:
        raise ModelError(f"{where}: missing key 'general.architecture'")
    fam = families.for_gguf(str(arch), where)

    def get(key: str, default=None, required: bool = True):
        full = f"{arch}.{key}"
        if full in meta:
            return meta[full]
        if required and default is None:
            raise ModelError(f"{where}: missing key '{full}'")
        return default

    d, heads = int(get("embedding_length")), int(get("attention.head_count"))
    head_dim = int(get("attention.key_length", d // heads))
    vdim = int(get("attention.value_length", head_dim))
    if vdim != head_dim:
        raise ModelError(f"{where}: {arch}.attention.value_length {vdim} differs from key_length {head_dim}")
    rot = int(get("rope.dimension_count", head_dim))
    if rot != head_dim:
        raise ModelError(f"{where}: {arch}.rope.dimension_count {rot} is not the head dim {head_dim} "
                         "(partial RoPE is not supported)")
    kind = get("rope.scaling.type", "none", required=False)
    if str(kind) not in ("none", "llama3"):
        raise ModelError(f"{where}: {arch}.rope.scaling.type '{kind}' is not supported", hint="supported: none, llama3")
    layers = int(get("block_count"))
    nope: tuple[int, ...] = ()
    step = int(get("no_rope_layer_step", fam.nope_every or 0, required=False))
    if step:
        nope = tuple(i for i in range(layers) if (i + 1) % step == 0)
    kv = get("attention.head_count_kv", heads)
    kinds, taps = (), 0
    if isinstance(kv, (list, tuple)):             # per layer; LFM2 writes 0 for its convolution layers
        if len(kv) != layers:
            raise ModelError(f"{where}: {arch}.attention.head_count_kv has {len(kv)} entries for {layers} layers")
        counts = {int(x) for x in kv if int(x)}
        if len(counts) != 1:
            raise ModelError(f"{where}: {arch}.attention.head_count_kv {list(kv)}: the attention layers must share "
                             "one KV head count")
        if 0 in [int(x) for x in kv]:
            if not fam.layer_types:
                raise ModelError(f"{where}: {arch}.attention.head_count_kv has layers without attention, which a "
                                 f"{fam.name} model does not have")
            kinds = tuple("attention" if int(x) else "conv" for x in kv)
            taps = int(get("shortconv.l_cache"))
        kv = counts.pop()
    experts, used, ffn = 0, 0, None
    if fam.moe:
        experts, used = int(get("expert_count")), int(get("expert_used_count"))
        if not 1 <= used <= experts:
            raise ModelError(f"{where}: {arch}.expert_used_count {used} for {arch}.expert_count {experts}: it must be "
                             f"1..{experts}")
        scale = float(get("expert_weights_scale", 1.0, required=False))
        if scale not in (0.0, 1.0):               # llama.cpp scales the routing weights only for other values
            raise ModelError(f"{where}: {arch}.expert_weights_scale {scale}: scaled routing weights are not "
                             "supported", hint="supported: 1.0")
        ffn = get("expert_feed_forward_length", 0, required=False) or int(get("feed_forward_length")) // used
    eos = meta.get("tokenizer.ggml.eos_token_id")
    extra_eos = meta.get("tokenizer.ggml.eot_token_id")
    return ModelConfig(
        family=fam.name, vocab=int(get("vocab_size", vocab)), d=d, layers=layers, heads=heads,
        kv_heads=int(kv), head_dim=head_dim, layer_kinds=kinds, conv_taps=taps,
        ffn=int(ffn or get("feed_forward_length")), norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        experts=experts, experts_used=used,
        rope_theta=float(get("rope.freq_base", 10000.0)), rope_factors=rope_factors, nope_layers=nope, tied=tied,
        context=int(get("context_length", 4096)), bos_id=_opt_int(meta.get("tokenizer.ggml.bos_token_id")),
        eos_ids=tuple(dict.fromkeys(_ids(eos) + _ids(extra_eos))),
        pad_id=_opt_int(meta.get("tokenizer.ggml.padding_token_id")), name=name,
    ).check(where)


def _opt_int(v) -> int | None:
    return None if v is None else int(v)
