"""Model families as data: what differs between Qwen3, Llama, SmolLM3, LFM2, Qwen3.5, Qwen3-MoE, LFM2-MoE and Gemma 4
decoders, and tensor names.

A family is a row of facts, not code: the architecture names a Hugging Face `config.json` or a
GGUF file uses for it, whether it has per-head q/k RMSNorm, whether llama.cpp's converter
permuted its q/k rows (the interleaved-pair RoPE layout of Llama GGUFs), how often a layer
skips RoPE (SmolLM3's NoPE layers) and its sampling defaults. Every other part of the model
layer (loaders, references, the card program) reads these fields and never tests a family's
name, so a new dense family of this shape is one more entry in `FAMILIES`.

Layer kinds: a layer is one of `KINDS` (its mixer: "attention", the GQA block; "conv", LFM2's
gated short convolution; "deltanet", Qwen3.5's Gated DeltaNet: a short SiLU convolution over
the q/k/v projection, then the gated delta rule with its state per head; "sliding", attention
over the last `sliding_window` positions, Gemma 4's local layers, whose full layers are
"attention"), each with the canonical tensors `KIND_TENSORS` lists; every kind ends in the same
gated MLP. A family whose config names the kind of each layer (LFM2's, Qwen3.5's and Gemma 4's
`layer_types`) maps those names through `layer_types`; the others are attention throughout. A
new kind is a `KINDS` entry, its tensors and its mixer in the references and the card program.

Qwen3.5's attention differs by data too: `attn_gate` (q_proj gives per head the query and an
output gate, the attention output is multiplied by sigmoid(gate)), `partial_rope` (RoPE on the
first part of each head only; the factor its config defaults to), `hf_norm_offset` (its
Hugging Face RMSNorm weights are stored zero-centred, w - 1; llama.cpp's converter adds the 1
back) and `gguf_tiled_v` (llama.cpp reorders the DeltaNet value heads from grouped by key head
to tiled when there are more value heads than key heads; the loader puts them back). Its
published checkpoints are multimodal (`Qwen3_5ForConditionalGeneration`): the text model's
config is `text_config` and its tensors sit under `hf_text_prefix`; the vision tower and the
MTP layer are not read.

Mixture of experts: a family with `moe` (Qwen3-MoE) replaces every layer's SwiGLU MLP by a
router (`router`, [experts, d]) and `experts` SwiGLU experts (`eg`, `eu`, `ed`; canonical names
carry the expert after the layer, `eg.3.5`). Hugging Face stores one tensor per expert; GGUF
stacks a layer's experts in one tensor ([experts, out, in]), which the loader splits. LFM2-MoE
(`lfm2moe`) is LFM2's layers with that MLP after the config's leading dense layers
(`ModelConfig.dense_layers`, which keep a dense MLP of their own width) and a router whose
scores are sigmoids (`moe_gating`): the top-k is taken over score + a per-expert bias (`ebias`,
llama.cpp's `exp_probs_b`), the chosen experts weighted by their unbiased scores.

Gemma 4's decoder differs in fields, not names: the MLP's activation (`act`: gelu with the tanh
approximation), the embedding scaled by sqrt(hidden) (`embed_scaled`), norms after the mixer
and after the MLP too (`sandwich_norms`: canonical `an`, `fn`), a scale-free RMSNorm of v
(`v_norm`), scores not divided by sqrt(head_dim) (`unit_scores`: q and k are normed), a scalar
per layer multiplying the layer's output (`layer_scalar`: `ls`), and, when the config has a
per-layer input width, the per-layer embeddings (`PLE_LAYER_TENSORS`, `PLE_GLOBAL_TENSORS`).

Tensor names: `LAYER_TENSORS` and `GLOBAL_TENSORS` map the layer's canonical names (`wq`,
`ln1`, ...) to the Hugging Face and llama.cpp (GGUF) names; a family's `hf_names` /
`gguf_names` override them (LFM2 calls o_proj `out_proj` and the final norm
`embedding_norm`); shapes are Hugging Face's [out, in].
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ModelError
from .sampling import Sampling


@dataclass(frozen=True)
class Family:
    name: str
    hf_architectures: tuple[str, ...]
    gguf_architectures: tuple[str, ...]
    qk_norm: bool                    # per-head RMSNorm of q and k before RoPE (Qwen3)
    gguf_permuted_qk: bool           # llama.cpp stored q/k rows permuted for interleaved-pair RoPE
    nope_every: int = 0              # default: every n-th layer (1-based) has no RoPE (SmolLM3: 4)
    sampling: Sampling = Sampling()  # recommended: what otpu-chat uses unless told otherwise (seed aside)
    layer_types: tuple[tuple[str, str], ...] = ()   # config.json layer_types value -> kind
    hf_names: tuple[tuple[str, str], ...] = ()      # canonical -> Hugging Face name template (overrides)
    gguf_names: tuple[tuple[str, str], ...] = ()    # canonical -> GGUF name template (overrides)
    attn_gate: bool = False                         # q_proj rows per head: query, then an output gate
    partial_rope: float = 0.0                       # > 0: RoPE may cover part of a head (the default factor)
    hf_norm_offset: tuple[str, ...] = ()            # canonical norms Hugging Face stores as w - 1
    gguf_tiled_v: bool = False                      # DeltaNet value heads tiled in GGUF (llama.cpp's reorder)
    moe: bool = False                # routed experts instead of the dense MLP in every layer
    act: str = "silu"                # the gated MLP's activation: "silu" or "gelu_tanh"
    embed_scaled: bool = False       # the embedding row times sqrt(hidden size) (Gemma)
    sandwich_norms: bool = False     # RMSNorms of the mixer's and the MLP's outputs too (`an`, `fn`)
    v_norm: bool = False             # v RMSNormed per head without a weight
    unit_scores: bool = False        # attention scores q.k without the 1/sqrt(head_dim)
    layer_scalar: bool = False       # each layer's output times its scalar `ls`
    hf_text_prefix: str = ""                        # multimodal files: the text model's tensors under this prefix
    moe_gating: str = "softmax"      # router scores: "softmax" over every expert, or each expert's "sigmoid"

    def hf_name(self, canon: str) -> str:
        return dict(self.hf_names).get(canon) or {**LAYER_TENSORS, **GLOBAL_TENSORS}[canon][0]

    def gguf_name(self, canon: str) -> str:
        return dict(self.gguf_names).get(canon) or {**LAYER_TENSORS, **GLOBAL_TENSORS}[canon][1]


LFM2_NAMES = (("ln1", "model.layers.{i}.operator_norm.weight"), ("ln2", "model.layers.{i}.ffn_norm.weight"),
              ("wo", "model.layers.{i}.self_attn.out_proj.weight"),
              ("qn", "model.layers.{i}.self_attn.q_layernorm.weight"),
              ("kn", "model.layers.{i}.self_attn.k_layernorm.weight"),
              ("wg", "model.layers.{i}.feed_forward.w1.weight"), ("wu", "model.layers.{i}.feed_forward.w3.weight"),
              ("wd", "model.layers.{i}.feed_forward.w2.weight"), ("final_norm", "model.embedding_norm.weight"))
LFM2_LAYER_TYPES = (("full_attention", "attention"), ("conv", "conv"))

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("qwen3", ("Qwen3ForCausalLM",), ("qwen3",), qk_norm=True, gguf_permuted_qk=False,
           sampling=Sampling(0.7, 20, 0.8, 1.0)),
    Family("llama", ("LlamaForCausalLM",), ("llama",), qk_norm=False, gguf_permuted_qk=True,
           sampling=Sampling(0.6, 40, 0.9, 1.0)),
    Family("smollm3", ("SmolLM3ForCausalLM",), ("smollm3",), qk_norm=False, gguf_permuted_qk=True, nope_every=4,
           sampling=Sampling(0.6, 40, 0.95, 1.0)),
    Family("lfm2", ("Lfm2ForCausalLM",), ("lfm2",), qk_norm=True, gguf_permuted_qk=False,
           sampling=Sampling(0.3, 50, 1.0, 1.05),
           layer_types=LFM2_LAYER_TYPES, hf_names=LFM2_NAMES, gguf_names=(("final_norm", "token_embd_norm.weight"),)),
    Family("lfm2moe", ("Lfm2MoeForCausalLM",), ("lfm2moe",), qk_norm=True, gguf_permuted_qk=False,
           sampling=Sampling(0.3, 50, 1.0, 1.05), layer_types=LFM2_LAYER_TYPES, moe=True, moe_gating="sigmoid",
           hf_names=LFM2_NAMES + (("router", "model.layers.{i}.feed_forward.gate.weight"),
                                  ("eg", "model.layers.{i}.feed_forward.experts.{e}.w1.weight"),
                                  ("eu", "model.layers.{i}.feed_forward.experts.{e}.w3.weight"),
                                  ("ed", "model.layers.{i}.feed_forward.experts.{e}.w2.weight"),
                                  ("ebias", "model.layers.{i}.feed_forward.expert_bias")),
           gguf_names=(("final_norm", "token_embd_norm.weight"),)),
    Family("qwen35", ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"), ("qwen35",), qk_norm=True,
           gguf_permuted_qk=False, hf_text_prefix="model.language_model.",
           sampling=Sampling(0.7, 20, 0.8, 1.0),
           layer_types=(("full_attention", "attention"), ("linear_attention", "deltanet")),
           gguf_names=(("ln2", "blk.{i}.post_attention_norm.weight"),),
           attn_gate=True, partial_rope=0.25, hf_norm_offset=("ln1", "ln2", "qn", "kn", "final_norm"),
           gguf_tiled_v=True),
    Family("qwen3moe", ("Qwen3MoeForCausalLM",), ("qwen3moe",), qk_norm=True, gguf_permuted_qk=False,
           sampling=Sampling(0.7, 20, 0.8, 1.0), moe=True),
    Family("gemma4", ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"), ("gemma4",), qk_norm=True,
           gguf_permuted_qk=False, sampling=Sampling(1.0, 64, 0.95, 1.0),
           layer_types=(("full_attention", "attention"), ("sliding_attention", "sliding")),
           act="gelu_tanh", embed_scaled=True, sandwich_norms=True, v_norm=True, unit_scores=True, layer_scalar=True,
           hf_names=(("ln2", "model.layers.{i}.pre_feedforward_layernorm.weight"),
                     ("an", "model.layers.{i}.post_attention_layernorm.weight"),
                     ("fn", "model.layers.{i}.post_feedforward_layernorm.weight"))),
)}

# canonical layer tensor -> (Hugging Face name, GGUF name); {i} is the layer index
LAYER_TENSORS: dict[str, tuple[str, str]] = {
    "ln1": ("model.layers.{i}.input_layernorm.weight", "blk.{i}.attn_norm.weight"),
    "wq": ("model.layers.{i}.self_attn.q_proj.weight", "blk.{i}.attn_q.weight"),
    "wk": ("model.layers.{i}.self_attn.k_proj.weight", "blk.{i}.attn_k.weight"),
    "wv": ("model.layers.{i}.self_attn.v_proj.weight", "blk.{i}.attn_v.weight"),
    "wo": ("model.layers.{i}.self_attn.o_proj.weight", "blk.{i}.attn_output.weight"),
    "qn": ("model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight"),
    "kn": ("model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight"),
    "ln2": ("model.layers.{i}.post_attention_layernorm.weight", "blk.{i}.ffn_norm.weight"),
    "wg": ("model.layers.{i}.mlp.gate_proj.weight", "blk.{i}.ffn_gate.weight"),
    "wu": ("model.layers.{i}.mlp.up_proj.weight", "blk.{i}.ffn_up.weight"),
    "wd": ("model.layers.{i}.mlp.down_proj.weight", "blk.{i}.ffn_down.weight"),
    "cin": ("model.layers.{i}.conv.in_proj.weight", "blk.{i}.shortconv.in_proj.weight"),
    "conv": ("model.layers.{i}.conv.conv.weight", "blk.{i}.shortconv.conv.weight"),
    "cout": ("model.layers.{i}.conv.out_proj.weight", "blk.{i}.shortconv.out_proj.weight"),
    "gqkv": ("model.layers.{i}.linear_attn.in_proj_qkv.weight", "blk.{i}.attn_qkv.weight"),
    "gz": ("model.layers.{i}.linear_attn.in_proj_z.weight", "blk.{i}.attn_gate.weight"),
    "gb": ("model.layers.{i}.linear_attn.in_proj_b.weight", "blk.{i}.ssm_beta.weight"),
    "ga": ("model.layers.{i}.linear_attn.in_proj_a.weight", "blk.{i}.ssm_alpha.weight"),
    "gconv": ("model.layers.{i}.linear_attn.conv1d.weight", "blk.{i}.ssm_conv1d.weight"),
    "galog": ("model.layers.{i}.linear_attn.A_log", "blk.{i}.ssm_a"),            # GGUF: -exp(A_log)
    "gdt": ("model.layers.{i}.linear_attn.dt_bias", "blk.{i}.ssm_dt.bias"),
    "gnorm": ("model.layers.{i}.linear_attn.norm.weight", "blk.{i}.ssm_norm.weight"),
    "gout": ("model.layers.{i}.linear_attn.out_proj.weight", "blk.{i}.ssm_out.weight"),
    "router": ("model.layers.{i}.mlp.gate.weight", "blk.{i}.ffn_gate_inp.weight"),
    "eg": ("model.layers.{i}.mlp.experts.{e}.gate_proj.weight", "blk.{i}.ffn_gate_exps.weight"),
    "eu": ("model.layers.{i}.mlp.experts.{e}.up_proj.weight", "blk.{i}.ffn_up_exps.weight"),
    "ed": ("model.layers.{i}.mlp.experts.{e}.down_proj.weight", "blk.{i}.ffn_down_exps.weight"),
    "ebias": ("model.layers.{i}.mlp.expert_bias", "blk.{i}.exp_probs_b.bias"),   # added to the scores for the top-k
    # Gemma 4: the norms after the mixer and the MLP, the layer's output scalar, the per-layer input
    "an": ("model.layers.{i}.post_attention_norm.weight", "blk.{i}.post_attention_norm.weight"),
    "fn": ("model.layers.{i}.post_feedforward_norm.weight", "blk.{i}.post_ffw_norm.weight"),
    "ls": ("model.layers.{i}.layer_scalar", "blk.{i}.layer_output_scale.weight"),
    "pg": ("model.layers.{i}.per_layer_input_gate.weight", "blk.{i}.inp_gate.weight"),
    "pp": ("model.layers.{i}.per_layer_projection.weight", "blk.{i}.proj.weight"),
    "pn": ("model.layers.{i}.post_per_layer_input_norm.weight", "blk.{i}.post_norm.weight"),
}
MLP_TENSORS = ("ln2", "wg", "wu", "wd")
KIND_TENSORS: dict[str, tuple[str, ...]] = {
    "attention": ("ln1", "wq", "wk", "wv", "wo", "qn", "kn") + MLP_TENSORS,
    "conv": ("ln1", "cin", "conv", "cout") + MLP_TENSORS,     # in_proj rows: B, C, x (d each); conv: [d, taps]
    # in_proj_qkv rows: q (Hk x dk), k (Hk x dk), v (Hv x dv), the convolution's channels in that order
    "deltanet": ("ln1", "gqkv", "gz", "gb", "ga", "gconv", "galog", "gdt", "gnorm", "gout") + MLP_TENSORS,
    "sliding": ("ln1", "wq", "wk", "wv", "wo", "qn", "kn") + MLP_TENSORS,
}
KV_TENSORS = ("wk", "wv", "kn")              # absent from a layer that reads an earlier layer's KV
SANDWICH_TENSORS = ("an", "fn")
PLE_LAYER_TENSORS = ("pg", "pp", "pn")       # gate [ple, d], projection [d, ple], its norm [d]
KINDS = tuple(KIND_TENSORS)
EXPERT_TENSORS = ("eg", "eu", "ed")        # one per expert (GGUF: stacked, experts first)
MOE_TENSORS = ("ln2", "router") + EXPERT_TENSORS    # a moe family's layers end in these instead of MLP_TENSORS
GLOBAL_TENSORS: dict[str, tuple[str, str]] = {
    "embed": ("model.embed_tokens.weight", "token_embd.weight"),
    "final_norm": ("model.norm.weight", "output_norm.weight"),
    "head": ("lm_head.weight", "output.weight"),
    # Gemma 4's per-layer embeddings: the table [vocab, layers*ple], the model projection, its norm
    "ple": ("model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"),
    "plp": ("model.per_layer_model_projection.weight", "per_layer_model_proj.weight"),
    "pln": ("model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"),
}
PLE_GLOBAL_TENSORS = ("ple", "plp", "pln")
QK_NORM_TENSORS = ("qn", "kn")
NORM_TENSORS = ("ln1", "ln2", "qn", "kn", "conv", "gconv", "galog", "gdt", "gnorm", "an", "fn", "ls", "pn",
                "pln", "ebias")   # kept fp32 (conv taps, gates, scalars too)
DEPTHWISE_TENSORS = ("conv", "gconv")     # nn.Conv1d's [channels, 1, taps] in Hugging Face files, [channels, taps] here
# tensors whose presence means a computation this layer does not do (refused, never ignored)
REFUSED_SUFFIXES = (".bias",)


def by_name(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ModelError(f"model family '{name}' is not supported", hint=f"supported: {', '.join(FAMILIES)}") from None


def _find(names: str, arch: str, where: str, key: str) -> Family:
    for f in FAMILIES.values():
        if arch in getattr(f, names):
            return f
    known = ", ".join(a for f in FAMILIES.values() for a in getattr(f, names))
    raise ModelError(f"{where}: {key} '{arch}' is not supported", hint=f"supported: {known}")


def for_hf(architecture: str, where: str) -> Family:
    return _find("hf_architectures", architecture, where, "architecture")


def for_gguf(architecture: str, where: str) -> Family:
    return _find("gguf_architectures", architecture, where, "general.architecture")
