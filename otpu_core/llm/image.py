"""Writing a converted model into card DRAM at the places its `ImagePlan` gives.

`write_model(backend, plan, conv)` writes every layer block of its kind (norms, the rope gate, the
quantised projections, W_down's parts or a mixture of experts' router (and selection bias); a convolution block's
taps as [taps, d] and its rings zeroed; a DeltaNet block's taps as [taps, C], its gate constants
and norm, its rings and states zeroed) and zeroes its KV pool (stale bits in a scale would turn into NaN
when the attention multiplies padding by zero), the final norm, LM head and embedding table,
the tables (RoPE cos/sin in fp32 from the float64 angles, attention mask rows, the sampler's
triangle of ones, a two-kind model's layer order), the chain table and the HALT program, and clears every slot's I/O area.
Gemma 4's blocks are one per layer (`write_gemma_layers`): its norms, scalar, projections, PLE
weights, and the full layers' RoPE tables; its per-layer embedding table is not written (the
host serves its rows, llm/offload.RowServer). It
works through any Backend (`write(addr, data)`), so the same bytes reach the golden simulator's
DRAM and a card's.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import isa
from ..kernels.attention import mask_table
from .convert import Converted
from .errors import ModelError
from ..kernels.mailbox import BYTES as MAILBOX_BYTES
from .layout import KMAX, ImagePlan, block_of, conv_runs

ZERO_CHUNK = 16 << 20


def _packed(backend, q, packed, name: str) -> None:
    if (packed.rs, packed.srs, packed.n) != (q.rs, q.srs, q.N):
        raise ModelError(f"converted tensor '{name}' is laid out {packed.n} x {packed.rs} (+{packed.srs}) bytes, "
                         f"the image wants {q.N} x {q.rs} (+{q.srs}): the conversion cache is stale",
                         hint="run `otpu-chat convert` again")
    backend.write(q.data.const, np.ascontiguousarray(packed.rows))
    backend.write(q.scale.const, np.ascontiguousarray(packed.scales))


def _zeros(backend, addr: int, n: int) -> None:
    z = np.zeros(min(n, ZERO_CHUNK), np.uint8)
    for at in range(0, n, z.size):
        backend.write(addr + at, z[:min(z.size, n - at)])


def halt_image(seq_wc: bool) -> bytes:
    return isa.encode_program([isa.halt()], [isa.WaitEntry(sync=True)] if seq_wc else None)


def write_tables(backend, plan: ImagePlan) -> None:
    cos, sin = plan.cfg.rope_tables(plan.opts.ctx)
    backend.write(plan.cos.base.const, cos.astype(np.float32))
    backend.write(plan.sin.base.const, sin.astype(np.float32))
    backend.write(plan.mask.base.const, mask_table(plan.opts.page))
    backend.write(plan.tri.base.const, np.tril(np.ones((KMAX, KMAX), np.float32)))
    if plan.mixed:                    # the layer order: each attention block's count of other-kind layers after it
        for a, (_, n) in enumerate(conv_runs(plan.cfg)[1]):
            backend.write(plan.layer.at(a).convs_after.base.const, np.array([n], np.float32))

    words = []
    for slot in plan.prog_slots:
        words += [plan.halt_slot, slot, 1, 0]
    backend.write(plan.chain.base.const, np.array(words, np.uint32))


def clear_io(backend, plan: ImagePlan) -> None:
    """Zero every slot's state, ids, uniforms and seen mask, the logits rows and the mailbox."""
    for io in plan.slot_io:
        for name in ("state", "ids", "uniforms", "seen"):
            t = io[name]
            _zeros(backend, t.base.const, 4 * int(np.prod(t.shape)))
    _zeros(backend, plan.mailbox.base.const, 4 * plan.mailbox.cols)


def write_gemma_layers(backend, plan: ImagePlan, conv: Converted,
                       progress: Callable[[int, int, str], None] | None = None) -> None:
    cfg, T, G = plan.cfg, conv.tensors, plan.gemma
    for l, Ly in enumerate(G.layers):
        if progress is not None:
            progress(l, cfg.layers + 2, f"layer {l}")
        for k in ("ln1", "an", "ln2", "fn", "qn", "kn", "ls", "pn"):
            if getattr(Ly, k) is not None:
                backend.write(getattr(Ly, k).base.const, np.asarray(T[f"{k}.{l}"], np.float32))
        for k in ("wq", "wk", "wv", "wo", "wg", "wu", "pg", "pp"):
            if getattr(Ly, k) is not None:
                _packed(backend, getattr(Ly, k), T[f"{k}.{l}"], f"{k}.{l}")
        for c, part in enumerate(T[f"wd.{l}"]):
            _packed(backend, Ly.wd.part(c), part, f"wd.{l}")
        if Ly.kv is not None:
            _zeros(backend, Ly.kv.k.const, Ly.pool_pages * Ly.page_stride)
    cos, sin = cfg.rope_tables(plan.opts.ctx, "attention")
    backend.write(G.gcos.base.const, cos.astype(np.float32))
    backend.write(G.gsin.base.const, sin.astype(np.float32))
    if G.plp is not None:
        _packed(backend, G.plp, T["plp"], "plp")
        backend.write(G.pln.base.const, np.asarray(T["pln"], np.float32))
        _zeros(backend, G.mailbox.base, MAILBOX_BYTES)


def write_model(backend, plan: ImagePlan, conv: Converted, seq_wc: bool = False,
                progress: Callable[[int, int, str], None] | None = None) -> None:
    cfg, T = plan.cfg, conv.tensors
    total = cfg.layers + 2
    if plan.gemma is not None:
        write_gemma_layers(backend, plan, conv, progress)
    for l, kind in enumerate(cfg.kinds if plan.gemma is None else ()):
        if progress is not None:
            progress(l, total, f"layer {l}")
        blocks, block = block_of(cfg, l)
        if kind == "conv":
            Ly = (plan.conv_dense if blocks == "dense" else plan.conv).at(block)
            backend.write(Ly.taps.base.const, np.ascontiguousarray(np.asarray(T[f"conv.{l}"], np.float32).T))
            for k in ("cin", "cout"):
                _packed(backend, getattr(Ly, k), T[f"{k}.{l}"], f"{k}.{l}")
            _zeros(backend, Ly.ring.base.const, Ly.slot_stride * plan.opts.slots)
        elif kind == "deltanet":
            Ly = plan.gdn.at(block)
            backend.write(Ly.taps.base.const, np.ascontiguousarray(np.asarray(T[f"gconv.{l}"], np.float32).T))
            for k, t in (("galog", Ly.a_log), ("gdt", Ly.dt_bias), ("gnorm", Ly.norm)):
                backend.write(t.base.const, np.asarray(T[f"{k}.{l}"], np.float32))
            for k in ("gqkv", "gz", "gb", "ga", "gout"):
                _packed(backend, getattr(Ly, k), T[f"{k}.{l}"], f"{k}.{l}")
            _zeros(backend, Ly.ring.base.const, plan.gdn.slot_stride * plan.opts.slots)
        else:
            Ly = plan.layer.at(block)
            if cfg.qk_norm:
                backend.write(Ly.qn.base.const, T[f"qn.{l}"])
                backend.write(Ly.kn.base.const, T[f"kn.{l}"])
            backend.write(Ly.gate.base.const, np.array([1.0, 0.0] if cfg.uses_rope(l) else [0.0, 1.0], np.float32))
            for k in ("wq", "wk", "wv", "wo"):
                _packed(backend, getattr(Ly, k), T[f"{k}.{l}"], f"{k}.{l}")
            _zeros(backend, Ly.kv.k.const, plan.opts.pages * plan.layer.page_stride)
        backend.write(Ly.ln1.base.const, T[f"ln1.{l}"])
        backend.write(Ly.ln2.base.const, T[f"ln2.{l}"])
        if cfg.moe_layer(l):              # the experts reach the offload slots through the host (llm/offload.py)
            _packed(backend, Ly.router, T[f"router.{l}"], f"router.{l}")
            if Ly.ebias is not None:
                backend.write(Ly.ebias.base.const, np.asarray(T[f"ebias.{l}"], np.float32))
            continue
        for k in ("wg", "wu"):
            _packed(backend, getattr(Ly, k), T[f"{k}.{l}"], f"{k}.{l}")
        for c, part in enumerate(T[f"wd.{l}"]):
            _packed(backend, Ly.wd.part(c), part, f"wd.{l}")
    if progress is not None:
        progress(cfg.layers, total, "head")
    backend.write(plan.final_norm.base.const, T["final_norm"])
    _packed(backend, plan.head, T["head"], "head")
    if plan.embed_kind == "int8":
        _packed(backend, plan.embed, T["embed"], "embed")
    elif plan.embed_kind == "f32":
        backend.write(plan.embed.base.const, np.ascontiguousarray(T["embed"], np.float32))
    write_tables(backend, plan)
    backend.write(plan.halt_slot, np.frombuffer(halt_image(seq_wc), np.uint8))
    clear_io(backend, plan)
    if progress is not None:
        progress(total, total, "done")
