"""The kernel library, written in `ol`: the pieces a transformer decode step is made of.

- matmul: `linear` (a tile times a quantised weight, N in chunks) and `matmul` (DRAM to DRAM,
  any M, K up to ACT capacity with zero padding, N chunked in a hardware loop)
- norm: `rmsnorm`, `rmsnorm_quantized` (one RSSQ plus one QACT with RSCALE and CSCALE)
- rope: `rope` (rotate-half RoPE from cos/sin table rows)
- softmax: `softmax` (base-2 with log2(e) folded in, EXP2SUB)
- attention: `attention` (flash attention over a quantised KV cache in 256-token blocks with
  the online rescaling: RMAX, EXP2SUB, QACT CSCALE, MM ACC+ASCALE), `append_kv`
- mlp: `swiglu_mlp` (gate/up per F-chunk in a hardware loop, down-projection accumulated)
- sampling: `argmax` and `topk` over a vocabulary in chunks, `greedy_head` (argmax straight from
  the LM head's MMs)
- embedding: `embed` (a row of the tied int8 LM head gathered on the card through the MXU)
- conv: `conv.short_conv` (the causal depthwise convolution over time of LFM2's convolution
  layers, L taps, its state a ring in DRAM addressed from the run-time position)
"""
from .attention import append_kv, attention
from .embedding import embed
from .matmul import linear, matmul
from .mlp import swiglu_mlp
from .norm import rmsnorm, rmsnorm_quantized
from .rope import rope
from .sampling import argmax, greedy_head, topk
from .softmax import softmax

__all__ = ["append_kv", "attention", "embed", "linear", "matmul", "swiglu_mlp", "rmsnorm", "rmsnorm_quantized",
           "rope", "argmax", "greedy_head", "topk", "softmax"]
