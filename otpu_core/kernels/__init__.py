"""The kernel library, written in `ol`: the pieces a transformer decode step is made of.

- matmul: `linear` (a tile times a quantised weight, N in chunks) and `matmul` (DRAM to DRAM,
  any M, K up to ACT capacity with zero padding, N chunked in a hardware loop)
- norm: `rmsnorm`, `rmsnorm_quantized` (one RSSQ plus one QACT with RSCALE and CSCALE)
- rope: `rope` (rotate-half RoPE from cos/sin table rows)
- softmax: `softmax` (base-2 with log2(e) folded in, EXP2SUB)
- attention: `attention` and `paged_attention` (flash attention over a quantised KV cache in
  256-token blocks or pages with the online rescaling: RMAX, EXP2SUB, QACT CSCALE, MM
  ACC+ASCALE; paged with a sliding `window`), `append_kv`
- deltanet: `gated_deltanet_step` (one token through a Gated DeltaNet layer's heads: q/k L2
  norm, decay and beta, one DSTEP per head on its DRAM state, the gated RMSNorm)
- mlp: `swiglu_mlp` and `geglu_mlp` (gate/up per F-chunk in a hardware loop, down-projection
  accumulated; silu or gelu-tanh on the gate)
- recurrent: `mamba2_step`, `gla_step`, `retnet_step` (one token of a Mamba2 SSM, gated linear
  attention or retention: one descriptor-programmed STREAM per head on its DRAM state)
- activations: `gelu_tanh`, `softcap` and `softcap_rows` (Gemma's final logit soft cap)
- sampling: `argmax` and `topk` over a vocabulary in chunks, `greedy_head` (argmax straight from
  the LM head's MMs)
- embedding: `embed` (a row of the tied int8 LM head gathered on the card through the MXU)
- conv: `conv.short_conv` (the causal depthwise convolution over time of LFM2's convolution
  layers, L taps, its state a ring in DRAM addressed from the run-time position)
"""
from .activations import gelu_tanh, softcap, softcap_rows
from .attention import append_kv, attention, paged_attention
from .deltanet import GdnWeights, gated_deltanet_step
from .embedding import embed
from .matmul import linear, matmul
from .mlp import geglu_mlp, swiglu_mlp
from .recurrent import Mamba2Weights, gla_step, mamba2_step, retnet_step
from .norm import rmsnorm, rmsnorm_quantized
from .rope import rope
from .sampling import argmax, greedy_head, topk
from .softmax import softmax

__all__ = ["append_kv", "attention", "paged_attention", "GdnWeights", "gated_deltanet_step", "embed", "linear",
           "matmul", "swiglu_mlp", "geglu_mlp", "gelu_tanh", "softcap", "softcap_rows", "rmsnorm",
           "rmsnorm_quantized", "rope", "argmax", "greedy_head", "topk", "softmax", "Mamba2Weights", "mamba2_step",
           "gla_step", "retnet_step"]
