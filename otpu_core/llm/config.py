"""A decoder's shape and numerics (`ModelConfig`), read from a Hugging Face `config.json` or GGUF metadata.

The config is everything the references and the card program need besides the weights: sizes,
RMSNorm epsilon, RoPE base and per-frequency scaling (Llama 3's, given as divisors of the base
frequencies exactly as llama.cpp's `rope_freqs` tensor holds them), which layers skip RoPE,
whether the LM head is the embedding, the special token ids, the kind of every layer
(`layer_kinds`, families.KINDS; empty: attention throughout), the short convolution's taps,
the rotated part of a head (`rotary_dim`, Qwen3.5's partial RoPE; 0: all of it), the Gated
DeltaNet's heads (`lin_k_heads` of `lin_k_dim` for q and k, `lin_v_heads` of `lin_v_dim`) and,
for a mixture of experts, the experts per layer and how many each token uses (`ffn` is then
each expert's width) and whether the k chosen experts' router probabilities are renormalised to
sum to 1 (`norm_topk`: Qwen3-MoE's `norm_topk_prob`, false when missing as in transformers;
llama.cpp's qwen3moe always renormalises); LFM2-MoE's: the leading `dense_layers` keep a dense
MLP `dense_ffn` wide (`moe_layer(i)` says which layers route), `expert_bias` (each routed layer
has the selection bias `ebias`) and `routed_scale` (the routing weights' factor).
Gemma 4's fields: `sliding_window` (the "sliding" layers attend to that many last positions),
the full layers' own head width (`global_head_dim`), RoPE base and rotated pairs
(`global_rope_theta`, `global_rope_pairs`: proportional RoPE turns the first pairs with
theta^(-2i/head_dim) and leaves the rest), `kv_shared` (the last layers read the KV of the
last earlier layer of their kind, `kv_source`), `ple_dim` (the per-layer input width),
`layer_ffn` (per-layer MLP widths: the double-wide MLP of the shared layers) and `logit_softcap`.
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
from .families import (EXPERT_TENSORS, GLOBAL_TENSORS, KIND_TENSORS, KINDS, KV_TENSORS, MLP_TENSORS, MOE_TENSORS,
                       PLE_GLOBAL_TENSORS, PLE_LAYER_TENSORS, QK_NORM_TENSORS, SANDWICH_TENSORS, Family)


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
    rotary_dim: int = 0                              # RoPE on the first rotary_dim dims of a head (0: all)
    lin_k_heads: int = 0                             # Gated DeltaNet: q/k heads
    lin_v_heads: int = 0                             # value heads (each reads key head h // (Hv / Hk))
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    experts: int = 0                                 # routed experts per layer (0: a dense MLP)
    experts_used: int = 0                            # experts each token uses (top-k)
    sliding_window: int = 0                          # "sliding" layers: positions attended (the current one too)
    global_head_dim: int = 0                         # "attention" layers of a model with sliding ones (0: head_dim)
    global_rope_theta: float = 0.0                   # their RoPE base (0: rope_theta)
    global_rope_pairs: int = 0                       # their rotated pairs, the rest unturned (0: all)
    kv_shared: int = 0                               # the last kv_shared layers read an earlier layer's KV
    ple_dim: int = 0                                 # per-layer input width (Gemma's PLE; 0: none)
    layer_ffn: tuple[int, ...] = ()                  # per-layer MLP width (() = ffn everywhere)
    logit_softcap: float = 0.0                       # logits = cap * tanh(logits / cap) (0: none)
    norm_topk: bool = True                           # the chosen experts' weights renormalised to sum to 1
    dense_layers: int = 0                            # a mixture of experts: leading layers with a dense MLP
    dense_ffn: int = 0                               # their MLP width
    expert_bias: bool = False                        # routed layers add `ebias` to the scores for the top-k
    routed_scale: float = 1.0                        # the chosen experts' weights times this
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

    def head_dim_of(self, layer: int) -> int:
        """A layer's head width: the full layers' own in a model with sliding layers."""
        return self.global_head_dim if self.global_head_dim and self.kinds[layer] == "attention" else self.head_dim

    def ffn_of(self, layer: int) -> int:
        if layer < self.dense_layers:
            return self.dense_ffn
        return self.layer_ffn[layer] if self.layer_ffn else self.ffn

    def moe_layer(self, layer: int) -> bool:
        """Does this layer route its MLP through experts (a mixture of experts past its dense layers)?"""
        return bool(self.experts) and layer >= self.dense_layers

    @property
    def moe_layers(self) -> list[int]: return [i for i in range(self.layers) if self.moe_layer(i)]

    def kv_source(self, layer: int) -> int:
        """The layer whose KV cache `layer` attends over: itself, or for the last `kv_shared` layers the
        last layer of its kind before them."""
        first = self.layers - self.kv_shared
        if not self.kv_shared or layer < first:
            return layer
        kind = self.kinds[layer]
        return max(i for i in range(first) if self.kinds[i] == kind)

    def shares_kv(self, layer: int) -> bool: return self.kv_source(layer) != layer

    @property
    def rot_dim(self) -> int:
        """The dims RoPE turns: the first rotary_dim of a head (partial RoPE), else the real head."""
        return self.rotary_dim or self.rope_dim

    @property
    def attn_gate(self) -> bool: return self.spec.attn_gate

    @property
    def gdn_conv_dim(self) -> int:
        """Channels of the DeltaNet's convolution: q, k (Hk x dk each), v (Hv x dv)."""
        return 2 * self.lin_k_heads * self.lin_k_dim + self.lin_v_heads * self.lin_v_dim

    @property
    def qk_eps(self) -> float:
        """The q/k norms' epsilon over head_dim values (padded heads: scaled so the mean is the real one's)."""
        return self.norm_eps * self.rope_dim / self.head_dim if self.real_head_dim else self.norm_eps

    def layer_tensors(self, layer: int = 0) -> list[str]:
        spec, shared = self.spec, self.shares_kv(layer)
        kinds = KIND_TENSORS[self.kinds[layer]]
        if self.moe_layer(layer):
            kinds = tuple(k for k in kinds if k not in MLP_TENSORS) + MOE_TENSORS + (("ebias",) if self.expert_bias
                                                                                     else ())
        out = [k for k in kinds if (self.qk_norm or k not in QK_NORM_TENSORS) and not (shared and k in KV_TENSORS)]
        out += list(SANDWICH_TENSORS) if spec.sandwich_norms else []
        out += list(PLE_LAYER_TENSORS) if self.ple_dim else []
        return out + (["ls"] if spec.layer_scalar else [])

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
        return [k for k in GLOBAL_TENSORS if not (self.tied and k == "head")
                and (self.ple_dim or k not in PLE_GLOBAL_TENSORS)]

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical name (layer tensors as `wq.3`) -> Hugging Face shape [out, in] or (n,)."""
        s, ple = self, self.ple_dim
        vd, hv = self.lin_v_heads * self.lin_v_dim, self.lin_v_heads
        out = {"embed": (s.vocab, s.d), "final_norm": (s.d,), "head": (s.vocab, s.d),
               "ple": (s.vocab, s.layers * ple), "plp": (s.layers * ple, s.d), "pln": (ple,)}
        out = {k: v for k, v in out.items() if k in self.global_tensors()}
        for i in range(s.layers):
            hd, f = s.head_dim_of(i), s.ffn_of(i)
            q, kv = s.heads * hd, s.kv_heads * hd
            per = {"ln1": (s.d,), "wq": (2 * q if self.attn_gate else q, s.d), "wk": (kv, s.d), "wv": (kv, s.d),
                   "wo": (s.d, q), "qn": (hd,), "kn": (hd,), "ln2": (s.d,), "wg": (f, s.d), "wu": (f, s.d),
                   "wd": (s.d, f), "cin": (3 * s.d, s.d), "conv": (s.d, s.conv_taps), "cout": (s.d, s.d),
                   "gqkv": (s.gdn_conv_dim, s.d), "gz": (vd, s.d), "gb": (hv, s.d), "ga": (hv, s.d),
                   "gconv": (s.gdn_conv_dim, s.conv_taps), "galog": (hv,), "gdt": (hv,), "gnorm": (s.lin_v_dim,),
                   "gout": (s.d, vd),
                   "router": (s.experts, s.d), "ebias": (s.experts,), "eg": (s.ffn, s.d), "eu": (s.ffn, s.d), "ed": (s.d, s.ffn),
                   "an": (s.d,), "fn": (s.d,), "ls": (1,), "pg": (ple, s.d), "pp": (s.d, ple), "pn": (s.d,)}
            for name, k, _ in self.layer_names(i):
                out[name] = per[k]
        return out

    def inv_freq(self) -> np.ndarray:
        """float64 [head_dim/2] RoPE frequencies: theta^(-2i/d), divided by the scaling factors. Padded
        heads: the real frequencies first, then zeros (the padding's pairs stay unturned)."""
        half, real = self.head_dim // 2, self.rot_dim
        f = 1.0 / self.rope_theta ** (np.arange(real // 2, dtype=np.float64) * 2.0 / real)
        if self.rope_factors is not None:
            f = f / np.asarray(self.rope_factors, np.float64)
        return np.concatenate([f, np.zeros(half - real // 2)])

    def rope_tables(self, positions: int, kind: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin float64 [positions, head_dim/2] (rotate-half layout); `kind` "attention" in a model
        with sliding layers: the full layers' tables (their head width, base and rotated pairs)."""
        ang = np.outer(np.arange(positions, dtype=np.float64),
                       self.global_inv_freq() if kind == "attention" and self.sliding_window else self.inv_freq())
        return np.cos(ang), np.sin(ang)

    def global_inv_freq(self) -> np.ndarray:
        """The full layers' frequencies: theta_g^(-2i/head_dim) for the first `global_rope_pairs` pairs, 0 after."""
        hd = self.global_head_dim or self.head_dim
        pairs = self.global_rope_pairs or hd // 2
        f = 1.0 / (self.global_rope_theta or self.rope_theta) ** (np.arange(pairs, dtype=np.float64) * 2.0 / hd)
        return np.concatenate([f, np.zeros(hd // 2 - pairs)])

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
        if self.rope_factors is not None and len(self.rope_factors) != self.rot_dim // 2:
            raise ModelError(f"{where}: {len(self.rope_factors)} RoPE frequency factors for {self.rot_dim} rotated "
                             f"dims (need {self.rot_dim // 2})")
        if self.rotary_dim and not (0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            raise ModelError(f"{where}: RoPE over {self.rotary_dim} dims of a {self.head_dim}-dim head; it must be "
                             "an even count, at most the head")
        for e in self.eos_ids:
            if not 0 <= e < self.vocab:
                raise ModelError(f"{where}: end-of-sequence id {e} is outside the vocabulary of {self.vocab}")
        if self.layer_kinds:
            if len(self.layer_kinds) != self.layers:
                raise ModelError(f"{where}: {len(self.layer_kinds)} layer types for {self.layers} layers")
            bad = [k for k in self.layer_kinds if k not in KINDS]
            if bad:
                raise ModelError(f"{where}: layer kind '{bad[0]}' is not supported", hint=f"kinds: {', '.join(KINDS)}")
        if ("conv" in self.kinds or "deltanet" in self.kinds) and not (isinstance(self.conv_taps, int)
                                                                       and self.conv_taps >= 2):
            raise ModelError(f"{where}: short convolution length {self.conv_taps!r}; it must be an integer >= 2")
        if "deltanet" in self.kinds:
            bad = [(k, getattr(self, k)) for k in ("lin_k_heads", "lin_v_heads", "lin_k_dim", "lin_v_dim")
                   if not isinstance(getattr(self, k), int) or getattr(self, k) < 1]
            if bad:
                raise ModelError(f"{where}: Gated DeltaNet {bad[0][0]} = {bad[0][1]!r}; it must be a positive integer")
            if self.lin_v_heads % self.lin_k_heads:
                raise ModelError(f"{where}: {self.lin_v_heads} DeltaNet value heads do not share "
                                 f"{self.lin_k_heads} key heads evenly")
        if self.spec.moe and not (isinstance(self.experts, int) and self.experts >= 1):
            raise ModelError(f"{where}: {self.experts!r} experts; a {self.family} model needs a positive number of them")
        if not self.spec.moe and self.experts:
            raise ModelError(f"{where}: {self.experts} experts in a {self.family} model, which has a dense MLP")
        if self.experts and not (isinstance(self.experts_used, int) and 1 <= self.experts_used <= self.experts):
            raise ModelError(f"{where}: {self.experts_used!r} experts per token; it must be 1..{self.experts} "
                             f"(the experts of a layer)")
        if not (isinstance(self.dense_layers, int) and 0 <= self.dense_layers <= self.layers) or \
                (self.dense_layers and not (self.experts and isinstance(self.dense_ffn, int) and self.dense_ffn >= 1)):
            raise ModelError(f"{where}: {self.dense_layers!r} leading dense layers of width {self.dense_ffn!r}; a "
                             f"mixture of experts may have 0..{self.layers}, of a positive width")
        if not (self.routed_scale > 0 and math.isfinite(self.routed_scale)):
            raise ModelError(f"{where}: routed_scaling_factor = {self.routed_scale!r}; it must be a positive number")
        self._check_gemma(where)
        return self

    def _check_gemma(self, where: str) -> None:
        if "sliding" in self.kinds and not (isinstance(self.sliding_window, int) and self.sliding_window >= 1):
            raise ModelError(f"{where}: sliding_window {self.sliding_window!r}; sliding layers need a positive integer")
        for what, v in (("global_head_dim", self.global_head_dim), ("ple_dim", self.ple_dim)):
            if not isinstance(v, int) or v < 0 or v % 2:
                raise ModelError(f"{where}: {what} = {v!r}; it must be an even integer >= 0")
        if not 0 <= self.global_rope_pairs <= (self.global_head_dim or self.head_dim) // 2:
            raise ModelError(f"{where}: {self.global_rope_pairs} rotated RoPE pairs in heads of "
                             f"{self.global_head_dim or self.head_dim}")
        if not (isinstance(self.kv_shared, int) and 0 <= self.kv_shared < self.layers):
            raise ModelError(f"{where}: num_kv_shared_layers = {self.kv_shared!r}; it must be 0..{self.layers - 1}")
        first = self.layers - self.kv_shared
        for i in range(first, self.layers if self.kv_shared else 0):
            if self.kinds[i] not in self.kinds[:first]:
                raise ModelError(f"{where}: layer {i} shares the KV of an earlier {self.kinds[i]} layer, and none of "
                                 f"the first {first} layers is one")
        if self.layer_ffn and (len(self.layer_ffn) != self.layers or min(self.layer_ffn) < 1):
            raise ModelError(f"{where}: per-layer MLP widths {list(self.layer_ffn)} for {self.layers} layers")
        if not self.logit_softcap >= 0:
            raise ModelError(f"{where}: final_logit_softcapping {self.logit_softcap}; it must be positive")

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


def _int(cfg: dict, key: str, where: str) -> int:
    v = _need(cfg, key, where)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ModelError(f"{where}: {key} = {v!r}; it must be a positive integer")
    return v


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
    if "sliding" in dict(fam.layer_types).values():
        return _from_hf_gemma(cfg, fam, where, generation, name)
    if fam.hf_text_prefix and isinstance(cfg.get("text_config"), dict):     # a multimodal file: its text model
        # tied or not is the wrapper's key, as transformers ties it (text_config keeps its own default)
        text = cfg["text_config"]
        cfg = {**text, "tie_word_embeddings": cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False)),
               "architectures": archs}
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
    partial = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor", fam.partial_rope or 1.0))
    rotary = 0
    if partial != 1.0:
        if not fam.partial_rope:
            raise ModelError(f"{where}: partial_rotary_factor {partial} is not supported (RoPE on the whole head "
                             f"only in a {fam.name} model)")
        if not isinstance(partial, (int, float)) or not 0 < partial < 1:
            raise ModelError(f"{where}: partial_rotary_factor = {partial!r}; it must be a number in (0, 1]")
        rotary = int(head_dim * partial)
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
    _hf_no_sliding(cfg, fam, where)
    kinds, taps = _hf_layer_kinds(cfg, fam, layers, where), 0
    experts, used, ffn, norm_topk = _hf_experts(cfg, where) if fam.moe else (0, 0, _hf_ffn(cfg, where), True)
    sigmoid = _hf_sigmoid_router(cfg, layers, where) if fam.moe_gating == "sigmoid" else {}
    norm_topk = sigmoid.pop("norm_topk", norm_topk)
    lin: dict[str, int] = {}
    if "conv" in kinds:
        if cfg.get("conv_bias", False):
            raise ModelError(f"{where}: conv_bias = true; this layer runs bias-free convolutions")
        taps = int(_need(cfg, "conv_L_cache", where))
    if "deltanet" in kinds:
        taps = _int(cfg, "linear_conv_kernel_dim", where)
        lin = {k: _int(cfg, f"linear_{n}", where) for k, n in (("lin_k_heads", "num_key_heads"),
               ("lin_v_heads", "num_value_heads"), ("lin_k_dim", "key_head_dim"), ("lin_v_dim", "value_head_dim"))}
    return ModelConfig(
        family=fam.name, vocab=int(_need(cfg, "vocab_size", where)), d=d, layers=layers, heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=head_dim,
        ffn=ffn, norm_eps=float(cfg.get("rms_norm_eps", cfg.get("norm_eps", 1e-6))), layer_kinds=kinds, conv_taps=taps,
        experts=experts, experts_used=used, norm_topk=norm_topk, **sigmoid,
        rope_theta=theta, rope_factors=factors, nope_layers=nope, rotary_dim=rotary, **lin,
        tied=bool(cfg.get("tie_word_embeddings", cfg.get("tie_embedding", bool(sigmoid)))),
        context=int(cfg.get("max_position_embeddings", 4096)),
        bos_id=cfg.get("bos_token_id") if isinstance(cfg.get("bos_token_id"), int) else None, eos_ids=eos,
        pad_id=cfg.get("pad_token_id") if isinstance(cfg.get("pad_token_id"), int) else None, name=name,
    ).check(where)


HF_ACTIVATIONS = {"silu": ("silu",), "gelu_tanh": ("gelu_pytorch_tanh", "gelu_tanh")}
GEMMA_ROPE_TYPES = ("default", "proportional")


def _from_hf_gemma(top: dict, fam: Family, where: str, generation: dict | None, name: str) -> ModelConfig:
    """Gemma 4's text decoder from its config.json (`Gemma4ForCausalLM`, or the text_config of
    `Gemma4ForConditionalGeneration`, whose weights live under model.language_model.), with the
    defaults transformers' Gemma4TextConfig takes; every feature this layer does not run refused."""
    cfg = top.get("text_config") or top
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: text_config is {type(cfg).__name__}; it must be an object")
    act = cfg.get("hidden_activation", cfg.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in HF_ACTIVATIONS[fam.act]:
        raise ModelError(f"{where}: hidden_activation = {act!r}; this layer supports {', '.join(HF_ACTIVATIONS[fam.act])}")
    for key, allowed in (("attention_bias", (False,)), ("attention_k_eq_v", (False,)), ("enable_moe_block", (False,)),
                         ("use_bidirectional_attention", (None,)), ("num_experts", (None, 0))):
        if cfg.get(key, allowed[0]) not in allowed:
            raise ModelError(f"{where}: {key} = {cfg[key]!r}; this layer runs the dense causal decoder only "
                             f"({key} = {allowed[0]})")
    d, heads, layers = (int(_need(cfg, k, where)) for k in ("hidden_size", "num_attention_heads", "num_hidden_layers"))
    vocab = int(_need(cfg, "vocab_size", where))
    head_dim = int(cfg.get("head_dim") or 256)
    global_hd = int(cfg.get("global_head_dim") or 512)
    types = cfg.get("layer_types")
    if types is None:                 # transformers' default: every sixth layer full
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        raise ModelError(f"{where}: layer_types must list {layers} layer types, not {types!r}")
    names = dict(fam.layer_types)
    for i, t in enumerate(types):
        if t not in names:
            raise ModelError(f"{where}: layer_types[{i}] = {t!r} is not supported", hint=f"supported: {', '.join(names)}")
    types = types[:-1] + ["full_attention"]          # as transformers: the last layer is always a full one
    global_hd = _gemma_per_layer(cfg, types, global_hd, where)
    rope = cfg.get("rope_parameters") or {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                          "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                             "rope_theta": 1_000_000.0}}
    thetas, pairs = {}, {}
    for t, hd in (("sliding_attention", head_dim), ("full_attention", global_hd)):
        r = rope.get(t) if isinstance(rope, dict) else None
        if not isinstance(r, dict) or "rope_theta" not in r:
            raise ModelError(f"{where}: rope_parameters['{t}'] needs a rope_theta")
        kind, frac = r.get("rope_type", "default"), float(r.get("partial_rotary_factor", 1.0))
        if kind not in GEMMA_ROPE_TYPES or float(r.get("factor", 1.0)) != 1.0 or (kind == "default" and frac != 1.0):
            raise ModelError(f"{where}: rope_parameters['{t}'] = {r!r} is not supported",
                             hint="supported: rope_type default (whole heads) or proportional, no scaling factor")
        thetas[t], pairs[t] = float(r["rope_theta"]), int(frac * hd // 2)
    if pairs["sliding_attention"] != head_dim // 2:
        raise ModelError(f"{where}: proportional RoPE on the sliding layers is not supported")
    ple = int(cfg.get("hidden_size_per_layer_input", 256) or 0)
    if ple and int(cfg.get("vocab_size_per_layer_input", 262_144)) != vocab:
        raise ModelError(f"{where}: vocab_size_per_layer_input = {cfg.get('vocab_size_per_layer_input', 262_144)} "
                         f"differs from vocab_size {vocab}", hint="the per-layer table must have a row per token")
    shared = int(cfg.get("num_kv_shared_layers", 0) or 0)
    ffn = int(_need(cfg, "intermediate_size", where))
    layer_ffn = ()
    if cfg.get("use_double_wide_mlp"):
        layer_ffn = tuple(ffn * (2 if shared and i >= layers - shared else 1) for i in range(layers))
    cap = cfg.get("final_logit_softcapping")
    gen = generation or {}
    eos = _ids(gen.get("eos_token_id", top.get("eos_token_id", cfg.get("eos_token_id", 1))))
    bos = cfg.get("bos_token_id", 2)
    pad = cfg.get("pad_token_id", 0)
    out = ModelConfig(
        family=fam.name, vocab=vocab, d=d, layers=layers, heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or 4),
        head_dim=head_dim, ffn=ffn, norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=thetas["sliding_attention"], layer_kinds=tuple(names[t] for t in types),
        tied=bool(top.get("tie_word_embeddings", cfg.get("tie_word_embeddings", True))),
        context=int(cfg.get("max_position_embeddings", 131_072)), bos_id=bos if isinstance(bos, int) else None,
        eos_ids=eos, pad_id=pad if isinstance(pad, int) else None, name=name,
        sliding_window=int(cfg.get("sliding_window", 512)), global_head_dim=global_hd if global_hd != head_dim else 0,
        global_rope_theta=thetas["full_attention"],
        global_rope_pairs=pairs["full_attention"] if pairs["full_attention"] != global_hd // 2 else 0,
        kv_shared=shared, ple_dim=ple, layer_ffn=layer_ffn, logit_softcap=float(cap) if cap else 0.0,
        extra={"hf_prefix": "model.language_model."} if "text_config" in top else {})
    return out.check(where)


def _gemma_per_layer(cfg: dict, types: list[str], global_hd: int, where: str) -> int:
    """The full layers' head width from `per_layer_config` (what save_pretrained writes instead of
    global_head_dim: {layer: {"head_dim": n}} for the full layers), which must be one width."""
    plc = cfg.get("per_layer_config")
    if plc is None:
        return global_hd
    widths = set()
    for key, over in (plc.items() if isinstance(plc, dict) else [("?", plc)]):
        if not (isinstance(over, dict) and set(over) <= {"head_dim"} and str(key).isdigit()
                and int(key) < len(types) and types[int(key)] == "full_attention"):
            raise ModelError(f"{where}: per_layer_config[{key!r}] = {over!r} is not supported",
                             hint="supported: {layer: {\"head_dim\": n}} for full-attention layers")
        widths.add(int(over.get("head_dim", global_hd)))
    if len(widths) > 1:
        raise ModelError(f"{where}: per_layer_config gives the full layers head widths {sorted(widths)}; "
                         "they must share one")
    return widths.pop() if widths else global_hd


def _hf_no_sliding(cfg: dict, fam: Family, where: str) -> None:
    """Refuse sliding-window layers in a family read as attention throughout (Qwen3, Llama, SmolLM3,
    Qwen3-MoE): transformers gives a layer a window when `layer_types` names it sliding_attention, or,
    without layer_types, when use_sliding_window is true with a sliding_window."""
    if fam.layer_types:
        return
    types = cfg.get("layer_types")
    bad = next(((i, t) for i, t in enumerate(types) if t != "full_attention"), None) if isinstance(types, list) else None
    if bad:
        raise ModelError(f"{where}: layer_types[{bad[0]}] = {bad[1]!r} is not supported in a {fam.name} model",
                         hint="supported: full_attention in every layer")
    if types is None and cfg.get("use_sliding_window") and cfg.get("sliding_window") is not None:
        raise ModelError(f"{where}: use_sliding_window = true (sliding_window {cfg['sliding_window']!r}): "
                         f"sliding-window attention is not supported in a {fam.name} model",
                         hint="supported: use_sliding_window false (full attention in every layer)")


def _hf_layer_kinds(cfg: dict, fam: Family, layers: int, where: str) -> tuple[str, ...]:
    """Per-layer kinds from `layer_types` (or LFM2's older `full_attn_idxs`); () for one-kind families."""
    if not fam.layer_types:
        return ()
    names = dict(fam.layer_types)
    types = cfg.get("layer_types")
    other = next(n for n, k in fam.layer_types if k != "attention")
    if types is None and "full_attention_interval" in cfg:      # Qwen3.5: attention every n-th layer
        n = _int(cfg, "full_attention_interval", where)
        types = ["full_attention" if (i + 1) % n == 0 else other for i in range(layers)]
    if types is None:                  # as transformers: the older attention list, else attention throughout
        idx = set(cfg.get("full_attn_idxs") or range(layers))
        types = ["full_attention" if i in idx else other for i in range(layers)]
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
    layer sparse. The expert count is `num_experts`, or `num_local_experts` as transformers 5 writes it."""
    key = "num_local_experts" if "num_experts" not in cfg and "num_local_experts" in cfg else "num_experts"
    experts, used = _positive(cfg, key, where), _positive(cfg, "num_experts_per_tok", where)
    width = _positive(cfg, "moe_intermediate_size", where)
    if used > experts:
        raise ModelError(f"{where}: num_experts_per_tok = {used} exceeds {key} = {experts}")
    norm_topk = cfg.get("norm_topk_prob", False)
    if not isinstance(norm_topk, bool):
        raise ModelError(f"{where}: norm_topk_prob = {norm_topk!r}; it must be true or false")
    if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
        raise ModelError(f"{where}: decoder_sparse_step = {cfg.get('decoder_sparse_step', 1)!r}, mlp_only_layers = "
                         f"{cfg.get('mlp_only_layers', [])!r}: layers with a dense MLP are not supported",
                         hint="supported: decoder_sparse_step 1 and no mlp_only_layers (every layer routed)")
    return experts, used, width, norm_topk


def _hf_sigmoid_router(cfg: dict, layers: int, where: str) -> dict:
    """LFM2-MoE's routing keys with transformers' Lfm2MoeConfig defaults: the leading dense layers
    (`num_dense_layers`, 2) and their width (`intermediate_size`), the selection bias
    (`use_expert_bias`, true), `routed_scaling_factor` (1.0) and `norm_topk_prob` (true)."""
    dense = cfg.get("num_dense_layers", 2)
    if isinstance(dense, bool) or not isinstance(dense, int) or not 0 <= dense <= layers:
        raise ModelError(f"{where}: num_dense_layers = {dense!r}; it must be an integer 0..{layers}")
    out = {"dense_layers": dense, "dense_ffn": _positive(cfg, "intermediate_size", where) if dense else 0}
    for key, field_, default in (("use_expert_bias", "expert_bias", True), ("norm_topk_prob", "norm_topk", True)):
        v = cfg.get(key, default)
        if not isinstance(v, bool):
            raise ModelError(f"{where}: {key} = {v!r}; it must be true or false")
        out[field_] = v
    scale = cfg.get("routed_scaling_factor", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ModelError(f"{where}: routed_scaling_factor = {scale!r}; it must be a positive number")
    out["routed_scale"] = float(scale)
    return out


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
    if "sliding" in dict(fam.layer_types).values():
        return _from_gguf_gemma(meta, str(arch), fam, where, tied, rope_factors, vocab, name)

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
    if rot != head_dim and not fam.partial_rope:
        raise ModelError(f"{where}: {arch}.rope.dimension_count {rot} is not the head dim {head_dim} "
                         f"(partial RoPE is not supported in a {fam.name} model)")
    kind = get("rope.scaling.type", "none", required=False)
    if str(kind) not in ("none", "llama3"):
        raise ModelError(f"{where}: {arch}.rope.scaling.type '{kind}' is not supported", hint="supported: none, llama3")
    # llama.cpp counts the MTP (NextN) layers, which follow the decoder's, in the block count
    layers = int(get("block_count")) - int(get("nextn_predict_layers", 0, required=False))
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
    lin: dict[str, int] = {}
    if "deltanet" in dict(fam.layer_types).values():      # Qwen3.5: llama.cpp's ssm.* keys, attention every n-th
        n = _gguf_int(get("full_attention_interval", 4), f"{arch}.full_attention_interval", where)
        kinds = tuple("attention" if (i + 1) % n == 0 else "deltanet" for i in range(layers))
        taps = _gguf_int(get("ssm.conv_kernel"), f"{arch}.ssm.conv_kernel", where)
        lin = {k: _gguf_int(get(f"ssm.{key}"), f"{arch}.ssm.{key}", where) for k, key in (
            ("lin_k_dim", "state_size"), ("lin_k_heads", "group_count"), ("lin_v_heads", "time_step_rank"))}
        inner = _gguf_int(get("ssm.inner_size"), f"{arch}.ssm.inner_size", where)
        if inner % lin["lin_v_heads"]:
            raise ModelError(f"{where}: {arch}.ssm.inner_size {inner} is not a multiple of the "
                             f"{lin['lin_v_heads']} value heads ({arch}.ssm.time_step_rank)")
        lin["lin_v_dim"] = inner // lin["lin_v_heads"]
    experts, used, ffn, sigmoid = 0, 0, None, {}
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
        if fam.moe_gating == "sigmoid":
            sigmoid = _gguf_sigmoid_router(get, arch, layers, where)
            ffn = _gguf_int(get("expert_feed_forward_length"), f"{arch}.expert_feed_forward_length", where)
    eos = meta.get("tokenizer.ggml.eos_token_id")
    extra_eos = meta.get("tokenizer.ggml.eot_token_id")
    return ModelConfig(
        family=fam.name, vocab=int(get("vocab_size", vocab)), d=d, layers=layers, heads=heads,
        kv_heads=int(kv), head_dim=head_dim, layer_kinds=kinds, conv_taps=taps,
        rotary_dim=rot if rot != head_dim else 0, **lin,
        ffn=int(ffn or get("feed_forward_length")), norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        experts=experts, experts_used=used, **sigmoid,
        rope_theta=float(get("rope.freq_base", 10000.0)), rope_factors=rope_factors, nope_layers=nope, tied=tied,
        context=int(get("context_length", 4096)), bos_id=_opt_int(meta.get("tokenizer.ggml.bos_token_id")),
        eos_ids=tuple(dict.fromkeys(_ids(eos) + _ids(extra_eos))),
        pad_id=_opt_int(meta.get("tokenizer.ggml.padding_token_id")), name=name,
    ).check(where)


SIGMOID_GATING = 2          # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID (gguf.ExpertGatingFuncType)


def _gguf_sigmoid_router(get, arch: str, layers: int, where: str) -> dict:
    """LFM2-MoE's routing keys as llama.cpp's converter writes them: expert_gating_func (sigmoid),
    leading_dense_block_count, feed_forward_length (the dense layers' width); every routed layer
    has its exp_probs_b bias and renormalised weights (llama.cpp's lfm2moe graph always renormalises)."""
    func = get("expert_gating_func")
    if func != SIGMOID_GATING:
        raise ModelError(f"{where}: {arch}.expert_gating_func {func!r} is not supported",
                         hint=f"supported: {SIGMOID_GATING} (sigmoid)")
    if not bool(get("expert_weights_norm", True, required=False)):
        raise ModelError(f"{where}: {arch}.expert_weights_norm {get('expert_weights_norm')!r}: routing weights that "
                         "are not renormalised are not supported", hint="supported: true")
    dense = get("leading_dense_block_count")
    if isinstance(dense, bool) or not isinstance(dense, (int, np.integer)) or not 0 <= dense <= layers:
        raise ModelError(f"{where}: {arch}.leading_dense_block_count = {dense!r}; it must be 0..{layers}")
    width = _gguf_int(get("feed_forward_length"), f"{arch}.feed_forward_length", where) if dense else 0
    return {"dense_layers": int(dense), "dense_ffn": width, "expert_bias": True, "norm_topk": True}


def _gguf_int(v, key: str, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ModelError(f"{where}: {key} = {v!r}; it must be a positive integer")
    return int(v)


def _opt_int(v) -> int | None:
    return None if v is None else int(v)


UNROTATED = 1e29     # llama.cpp's converter marks proportional RoPE's unturned pairs with a divisor of 1e30


def _from_gguf_gemma(meta: dict[str, Any], arch: str, fam: Family, where: str, tied: bool,
                     rope_factors: tuple[float, ...] | None, vocab: int | None, name: str) -> ModelConfig:
    """Gemma 4 as llama.cpp's converter writes it: key_length the full layers' heads, key_length_swa the
    sliding ones', sliding_window_pattern per layer, rope_freqs (full layers only) 1 for a turned pair
    and 1e30 for an unturned one, feed_forward_length per layer with the double-wide MLP."""
    def get(key: str, default=None):
        full = f"{arch}.{key}"
        if full in meta:
            return meta[full]
        if default is None:
            raise ModelError(f"{where}: missing key '{full}'")
        return default

    layers = int(get("block_count"))
    pattern = get("attention.sliding_window_pattern")
    if not isinstance(pattern, (list, tuple)) or len(pattern) != layers:
        raise ModelError(f"{where}: {arch}.attention.sliding_window_pattern must list {layers} flags")
    hd_full, hd_swa = int(get("attention.key_length")), int(get("attention.key_length_swa"))
    for key, want in (("attention.value_length", hd_full), ("attention.value_length_swa", hd_swa),
                      ("rope.dimension_count", hd_full), ("rope.dimension_count_swa", hd_swa)):
        if int(get(key, want)) != want:
            raise ModelError(f"{where}: {arch}.{key} = {get(key)}; this layer needs {want} (whole heads)")
    kv = get("attention.head_count_kv")
    kvs = {int(x) for x in kv} if isinstance(kv, (list, tuple)) else {int(kv)}
    if len(kvs) != 1:
        raise ModelError(f"{where}: {arch}.attention.head_count_kv {list(kv)}: full and sliding layers with their own "
                         "KV head counts are not supported")
    ff = get("feed_forward_length")
    layer_ffn = tuple(int(x) for x in ff) if isinstance(ff, (list, tuple)) else ()
    if layer_ffn and len(layer_ffn) != layers:
        raise ModelError(f"{where}: {arch}.feed_forward_length has {len(layer_ffn)} entries for {layers} layers")
    pairs = 0
    if rope_factors is not None:
        turned = [f == 1.0 for f in rope_factors]
        if len(rope_factors) != hd_full // 2 or any(not t and f < UNROTATED for t, f in zip(turned, rope_factors)) \
                or turned != sorted(turned, reverse=True):
            raise ModelError(f"{where}: rope_freqs.weight must hold {hd_full // 2} divisors, 1 for the turned pairs "
                             "then 1e30 (proportional RoPE)")
        pairs = sum(turned) if sum(turned) != hd_full // 2 else 0
    cap = float(get("final_logit_softcapping", 0.0))
    eos = _ids(meta.get("tokenizer.ggml.eos_token_id")) + _ids(meta.get("tokenizer.ggml.eot_token_id"))
    return ModelConfig(
        family=fam.name, vocab=int(get("vocab_size", vocab)), d=int(get("embedding_length")), layers=layers,
        heads=int(get("attention.head_count")), kv_heads=kvs.pop(), head_dim=hd_swa,
        ffn=layer_ffn[0] if layer_ffn else int(ff), norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        rope_theta=float(get("rope.freq_base_swa")), tied=tied, context=int(get("context_length", 4096)),
        layer_kinds=tuple("sliding" if p else "attention" for p in pattern),
        bos_id=_opt_int(meta.get("tokenizer.ggml.bos_token_id")), eos_ids=tuple(dict.fromkeys(eos)),
        pad_id=_opt_int(meta.get("tokenizer.ggml.padding_token_id")), name=name,
        sliding_window=int(get("attention.sliding_window")), global_head_dim=hd_full if hd_full != hd_swa else 0,
        global_rope_theta=float(get("rope.freq_base")), global_rope_pairs=pairs,
        kv_shared=int(get("attention.shared_kv_layers", 0)), ple_dim=int(get("embedding_length_per_layer_input", 0)),
        layer_ffn=layer_ffn if len(set(layer_ffn)) > 1 else (), logit_softcap=cap,
    ).check(where)
