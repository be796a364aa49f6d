"""Models on the card: simulator speed, modelled card speed, host overhead, conversion; ratios in one run.

1. sim: the golden simulator's seconds for one whole Qwen3-0.6B decode token (every instruction of
   the step program at position 512, random int8 weights, weight cache warm; timing model on and
   off; wall and CPU seconds, native kernels unless OTPU_NATIVE=0) against a numpy float32
   forward of the same shapes. openTPU's simulator: about 3 s; goal: under 1 s.
2. card: the timing model's tok/s on ypcb-00338 at 133.33 MHz (as shipped and as build B) of
   Qwen3-0.6B, LFM2.5-230M, LFM2-2.6B and Qwen3.5-0.8B shapes, int8 and 4-bit (int8 head), decode
   at position 544 (in the first half of its page, as the card's 64 decode tokens from 512 are) and a
   512-token prefill in runs of 4 rows, against the card's measured decode /
   prefill tok/s (models.md 4a: Qwen3 21.6 / 92.1 int8, 31.3 / 103.4 4-bit; LFM2.5 59.0 / 295.6,
   85.8 / 335.4; LFM2-2.6B 6.05 / 21.4, 10.96 / 20.6; Qwen3.5-0.8B 17.6 / 61.4, 24.5 / 66.7).
   Goal: within 15%. Where the card's own prefill ran other rows than this program's 4 (`CARD_PREFILL`:
   LFM2-2.6B, whose unrolled attention did not fit IMEM at 4 rows past position 256), the bench also
   gives the prefill of the card's run shapes, so the timing model meets the card's program and this
   program's rate stays its own. The Gemma 4 E2B shape runs 4-bit only (int8 does not fit the card;
   measured 10.57 / 32.1 with an int8 head), its per-layer embedding rows served by the host
   through the mailbox from a random table, its prefill in runs of 4 rows too (the per-row work a
   hardware loop over the rows): modelled 6.82 (0.65) / 31.0 (0.97) tok/s as shipped, 9.68 (0.92)
   / 31.4 (0.98) on build B (a row per run, before, gave prefill 8.8 / 14.1).
2b. batch (`--only batch`, not in the default run): batched decode, one step of 1-4 sequences (a row
   group each) at position 544 on ypcb-00338 as shipped and on bcu1525, 4-bit: aggregate tok/s,
   or why the step does not fit the card.
3. host: the host's CPU time per generated token on the card path (the generate loop on the
   simulated card: the main thread only polls the state block and reads ids; the simulated card
   runs on its own thread) against the 0.17-0.30 ms the real card's host measured.
4. convert: conversion of a Qwen3-0.6B-shaped safetensors file (bf16, random) to int8 in a child
   process: seconds against reading every tensor, and peak RSS against the card-format size + 1 GiB.

Run: python benchmarks/bench_llm.py [--only sim,card,batch,host,convert] [--models Qwen3-0.6B,...] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from otpu_core import isa, simnative
from otpu_core.board import IsaBackend
from otpu_core.llm import image, layout, programs
from otpu_core.llm.config import ModelConfig
from otpu_core.llm.layout import S_POS, STATE_WORDS
from otpu_core.target import load

QWEN3_0_6B = ModelConfig("qwen3", vocab=151936, d=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072,
                         tied=True, context=40960, name="qwen3-0.6b-shaped")
# LFM2 shapes: layer orders assumed (the 14- and 30-layer `layer_types` are not in models.md): attention at
# every other layer from 2 in the 230M, 8 of 30 in the 2.6B; the 2.6B's MLP is its block_ff_dim 10752
# unadjusted (2.57B parameters, the 2.66 GB a token its measured 16.1 GB/s at 6.05 tok/s implies)
LFM2_5_230M = ModelConfig("lfm2", vocab=65536, d=1024, layers=14, heads=16, kv_heads=8, head_dim=64, ffn=2560,
                          tied=True, context=32768, conv_taps=3, name="lfm2.5-230m-shaped",
                          layer_kinds=tuple("attention" if i in (2, 4, 6, 8, 10, 12) else "conv" for i in range(14)))
LFM2_2_6B = ModelConfig("lfm2", vocab=65536, d=2048, layers=30, heads=32, kv_heads=8, head_dim=64, ffn=10752,
                        tied=True, context=32768, conv_taps=3, name="lfm2-2.6b-shaped",
                        layer_kinds=tuple("attention" if i in (2, 6, 10, 14, 18, 21, 24, 27) else "conv"
                                          for i in range(30)))
# Qwen3.5-0.8B: models.md gives 24 layers of 6 x (DeltaNet x 3, gated attention), hidden 1024, vocab 248,320 and
# the 16 x 128 x 128 state; the rest is the published config (assumed here): 8 query / 2 KV heads of 256 with RoPE
# on 64 dims, 16 key and 16 value DeltaNet heads of 128, 4 taps, MLP 3584, tied head
QWEN3_5_0_8B = ModelConfig("qwen35", vocab=248320, d=1024, layers=24, heads=8, kv_heads=2, head_dim=256, ffn=3584,
                           tied=True, context=262144, conv_taps=4, rotary_dim=64, lin_k_heads=16, lin_v_heads=16,
                           lin_k_dim=128, lin_v_dim=128, name="qwen3.5-0.8b-shaped",
                           layer_kinds=tuple("attention" if i % 4 == 3 else "deltanet" for i in range(24)))
# Gemma 4 E2B (models.md section 1, gemma.cpp's E2B config): 35 layers `s s s s A` x 7, heads 8 / KV 1 of 256
# (the full layers' 512, proportional RoPE on a quarter of their pairs), window 512, the last 20 layers reading
# layers 13 and 14's KV with a double-wide MLP, per-layer inputs of 256, soft cap 30
GEMMA4_E2B = ModelConfig("gemma4", vocab=262144, d=1536, layers=35, heads=8, kv_heads=1, head_dim=256, ffn=6144,
                         tied=True, context=131072, layer_kinds=tuple("attention" if i % 5 == 4 else "sliding"
                                                                       for i in range(35)),
                         sliding_window=512, global_head_dim=512, global_rope_theta=1e6, global_rope_pairs=64,
                         kv_shared=20, ple_dim=256, layer_ffn=tuple(6144 if i < 15 else 12288 for i in range(35)),
                         logit_softcap=30.0, name="gemma-4-e2b-shaped")
# model -> format -> (decode, prefill) device tok/s measured on the card (models.md 4a)
MEASURED = {"Qwen3-0.6B": (QWEN3_0_6B, {"int8": (21.6, 92.1), "fp4": (31.3, 103.4)}),
            "LFM2.5-230M": (LFM2_5_230M, {"int8": (59.0, 295.6), "fp4": (85.8, 335.4)}),
            "LFM2-2.6B": (LFM2_2_6B, {"int8": (6.05, 21.4), "fp4": (10.96, 20.6)}),
            "Qwen3.5-0.8B": (QWEN3_5_0_8B, {"int8": (17.6, 61.4), "fp4": (24.5, 66.7)}),
            "Gemma-4-E2B": (GEMMA4_E2B, {"fp4": (10.57, 32.1)})}
# The rows per prefill run the card ran, per 256-position bucket of perf.py's 512-token prompt, where they
# differ from this program's MCOLS (models.md 2 "Prefill" and 7; openTPU docs/prefill.md 7 and 9). openTPU's
# attention is unrolled per row x head x block, so a run's program grows with its positions: LFM2-2.6B's
# 4-row run is 3620 instructions in bucket 1 but 4676 (4484 with the additive mask) in bucket 2, over IMEM's
# 4096, so positions 256-511 ran 3 rows a run, 4 MMs' MXU time for 3 rows (int8 and unpaired 4-bit alike). The
# 4-bit row is every layer fp4 with an int8 head, one layout like int8 (not the "mix" of the TTFT table).
# prefer_rows (R - 1 for an odd R where a 4-bit run's MXU time a row drops >= 10%; the 2.6B's mix: -22.3%)
# would have made those runs 2 paired rows; whether perf.py's run predates it is not recorded (the 4B's 12.9
# tok/s equals its 237-token prefill at R = 3, 12.94, not at R = 2, 14.95), so the 4-bit row gives both.
CARD_PREFILL = {("LFM2-2.6B", "int8"): ((4, 3),), ("LFM2-2.6B", "fp4"): ((4, 3), (4, 2))}
T = "ypcb-00338"


def _random_rows(q, rng) -> tuple[np.ndarray, np.ndarray]:
    """Random rows and side data of a weight in its format, valid for the MM (finite scales, legal shifts)."""
    n = q.N
    rows = rng.integers(0, 256, (n, q.rs), dtype=np.uint8)
    if q.wf == isa.WF_INT8:
        rows = rng.integers(-127, 128, (n, q.rs), dtype=np.int8).view(np.uint8)
        scales = rng.uniform(1e-3, 2e-3, (n, q.srs // 4)).astype(np.float32).view(np.uint8)
    else:   # e2m1: bf16 scale in the low half, 4-bit multipliers 1..15 above
        words = (np.float32(2e-3).view(np.uint32) >> 16) | (rng.integers(1, 16, (n, q.srs // 4, 4)).astype(np.uint32)
                                                             << (16 + 4 * np.arange(4, dtype=np.uint32))).sum(-1)
        scales = words.astype(np.uint32).view(np.uint8).reshape(n, q.srs)
    return rows, scales


def _random_weight(be, q, rng) -> None:
    rows, scales = _random_rows(q, rng)
    be.write(q.data.const, rows)
    be.write(q.scale.const, scales)


def random_gemma_layers(be, plan, rng) -> None:
    """Gemma's per-layer blocks random (norms and scalars 1), its PLE projection, the full layers' tables."""
    cfg, G = plan.cfg, plan.gemma
    for Ly in G.layers:
        for k in ("ln1", "an", "ln2", "fn", "qn", "kn", "ls", "pn"):
            t = getattr(Ly, k)
            if t is not None:
                be.write(t.base.const, np.ones(t.shape, np.float32))
        for k in ("wq", "wk", "wv", "wo", "wg", "wu", "pg", "pp"):
            if getattr(Ly, k) is not None:
                _random_weight(be, getattr(Ly, k), rng)
        for c in range(Ly.wg.N // plan.f_chunk):
            _random_weight(be, Ly.wd.part(c), rng)
    if G.plp is not None:
        _random_weight(be, G.plp, rng)
        be.write(G.pln.base.const, np.ones(cfg.ple_dim, np.float32))
    cos, sin = cfg.rope_tables(plan.opts.ctx, "attention")
    be.write(G.gcos.base.const, cos.astype(np.float32))
    be.write(G.gsin.base.const, sin.astype(np.float32))


class RandomRows:
    """A host table of random fp32 rows made on request (Gemma E2B's is 262,144 x 8,960: 9.4 GB as fp32)."""

    def __init__(self, n: int, width: int):
        self.n, self.width = n, width

    def __len__(self) -> int: return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return np.random.default_rng(i).standard_normal(self.width).astype(np.float32)


def random_image(be, plan, rng) -> None:
    """Every weight of the plan random (as the format allows), norms 1, tables as the model's."""
    cfg = plan.cfg
    if plan.gemma is not None:
        random_gemma_layers(be, plan, rng)
    ones_d, ones_h = np.ones(cfg.d, np.float32), np.ones(cfg.head_dim, np.float32)
    for kind in ("attention", "conv", "deltanet") if plan.gemma is None else ():
        for l in range(len(cfg.kind_layers(kind))):
            Ly = plan.block(kind).at(l)
            for t in (Ly.ln1, Ly.ln2):
                be.write(t.base.const, ones_d)
            if kind == "attention":
                for t in (Ly.qn, Ly.kn):
                    be.write(t.base.const, ones_h)
                be.write(Ly.gate.base.const, np.array([1, 0], np.float32))
            else:
                be.write(Ly.taps.base.const, rng.standard_normal(Ly.taps.shape).astype(np.float32))
            if kind == "deltanet":
                for t in (Ly.a_log, Ly.dt_bias, Ly.norm):
                    be.write(t.base.const, np.ones(t.shape, np.float32))
            for k in {"attention": ("wq", "wk", "wv", "wo"), "conv": ("cin", "cout"),
                      "deltanet": ("gqkv", "gz", "gb", "ga", "gout")}[kind]:
                _random_weight(be, getattr(Ly, k), rng)
            for k in ("wg", "wu"):
                _random_weight(be, getattr(Ly, k), rng)
            for c in range(cfg.ffn // plan.f_chunk):
                _random_weight(be, Ly.wd.part(c), rng)
    be.write(plan.final_norm.base.const, ones_d)
    _random_weight(be, plan.head, rng)
    image.write_tables(be, plan)
    for s in range(plan.opts.slots):
        be.write(plan.io(s)["ids"].base.const, rng.integers(0, cfg.vocab, plan.opts.ctx).astype(np.float32))


def _at(be, plan, pos: int, slots: int = 1) -> None:
    st = np.zeros(STATE_WORDS, np.float32)
    st[S_POS] = pos
    for s in range(slots):
        be.write(plan.io(s)["state"].base.const, st)


def _step(be, plan, t, pos: int, rows: int = 1, logits: bool = True, seqs: int = 1):
    """The step of `seqs` sequences (slot s on pages s*b.. of b = its bucket + 1) at `pos`, `rows` rows each."""
    b = pos // plan.opts.page + 1
    spec = programs.StepSpec(tuple(programs.Group(s, rows, tuple(range(s * b, (s + 1) * b))) for s in range(seqs)),
                             logits=logits)
    prog = be.prepare(programs.compile_program(plan, spec, t).instrs)
    _at(be, plan, pos, seqs)
    return prog


def numpy_forward_s(cfg: ModelConfig, pos: int, rng) -> tuple[float, float]:
    """(wall, CPU over all threads) seconds of one float32 decode token with the same shapes
    (weights in RAM, a KV cache of pos tokens)."""
    d, hd, H, KV = cfg.d, cfg.head_dim, cfg.heads, cfg.kv_heads
    layer = {k: rng.standard_normal(s).astype(np.float32) * 0.02 for k, s in
             (("wq", (H * hd, d)), ("wk", (KV * hd, d)), ("wv", (KV * hd, d)), ("wo", (d, H * hd)),
              ("wg", (cfg.ffn, d)), ("wu", (cfg.ffn, d)), ("wd", (d, cfg.ffn)))}
    layers = [{k: v.copy() for k, v in layer.items()} for _ in range(cfg.layers)]   # distinct memory per layer
    head = rng.standard_normal((cfg.vocab, d)).astype(np.float32) * 0.02
    K = rng.standard_normal((cfg.layers, KV, pos + 1, hd)).astype(np.float32)
    V = rng.standard_normal((cfg.layers, KV, pos + 1, hd)).astype(np.float32)
    x = rng.standard_normal(d).astype(np.float32)

    def norm(v):
        return v / np.sqrt(np.mean(v * v) + 1e-6)

    def token():
        h = x.copy()
        for li, w in enumerate(layers):
            a = norm(h)
            q = (w["wq"] @ a).reshape(H, hd)
            out = np.empty((H, hd), np.float32)
            for g in range(KV):
                qs = q[g * (H // KV):(g + 1) * (H // KV)]
                s = qs @ K[li, g].T / np.float32(np.sqrt(hd))
                p = np.exp(s - s.max(axis=1, keepdims=True))
                out[g * (H // KV):(g + 1) * (H // KV)] = (p / p.sum(axis=1, keepdims=True)) @ V[li, g]
            h = h + w["wo"] @ out.reshape(-1)
            a = norm(h)
            gt, up = w["wg"] @ a, w["wu"] @ a
            h = h + w["wd"] @ (gt / (1 + np.exp(-gt)) * up)
        return head @ norm(h)
    token()
    t0, c0 = time.perf_counter(), time.process_time()
    token()
    return time.perf_counter() - t0, time.process_time() - c0


def bench_sim(rng) -> None:
    t = load(T)
    plan = layout.plan(QWEN3_0_6B, t.config(), layout.ImageOptions(fmt="int8", pages=3, ctx=768))
    for timing in (True, False):
        be = IsaBackend(t, timing=timing)
        random_image(be, plan, rng)
        prog = _step(be, plan, t, 512)
        be.run(prog)                                 # decodes the weights into the simulator's cache
        _at(be, plan, 512)
        t0, c0 = time.perf_counter(), time.process_time()
        be.run(prog)
        t_sim, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"sim: Qwen3-0.6B decode token at position 512 ({len(prog.image) // 32} instructions), timing model "
              f"{'on ' if timing else 'off'}: {t_sim:.2f} s, CPU {cpu:.2f} s over all threads (goal < 1 s; openTPU's "
              f"simulator ~3 s; native kernels {'on' if simnative.lib() is not None else 'off'})")
        del be
    t_np, cpu_np = numpy_forward_s(QWEN3_0_6B, 512, rng)
    print(f"sim: numpy float32 forward of the same token: {t_np:.3f} s, CPU {cpu_np:.3f} s; simulator/numpy ratio "
          f"{t_sim / t_np:.1f}x wall, {cpu / cpu_np:.1f}x CPU (timing off)")


def _card(cfg: ModelConfig, t, fmt: str, rng, slots: int = 1):
    """(plan, backend, run) of a random image of `slots` slots (3 pages each) on the timing model; `run`
    serves a host-kept table (Gemma's per-layer rows) while the program runs."""
    from otpu_core.llm.offload import RowServer
    rows = layout.prefill_rows(cfg, t.config())          # MCOLS: 4
    plan = layout.plan(cfg, t.config(), layout.ImageOptions(fmt=fmt, slots=slots, pages=3 * slots, ctx=768,
                                                            rows=max(rows, slots)))
    be = IsaBackend(t, timing=True)
    random_image(be, plan, rng)
    server = None
    if plan.gemma is not None and plan.gemma.mailbox is not None:
        server = RowServer(be, plan.gemma.mailbox, plan.gemma.landing.base.const,
                           RandomRows(cfg.vocab, cfg.layers * cfg.ple_dim))
        server.reset()

    def run(prog):
        if server is None:
            return be.run(prog)
        be.start(prog)
        while be.poll(1 << 14):
            server.poll()
        return be.wait()
    return plan, be, run


def _modelled(cfg: ModelConfig, t, fmt: str, rng, card_rows=()) -> tuple[float, float, dict, list[float]]:
    """(decode tok/s at 544, 512-token prefill tok/s in runs of MCOLS rows, the decode step's unit
    utilisation, and the prefill tok/s of each of `card_rows`: rows a run per 256-position bucket)."""
    hz = t.core_hz
    rows = layout.prefill_rows(cfg, t.config())
    plan, be, run = _card(cfg, t, fmt, rng)
    c0 = be.counters()
    dec = run(_step(be, plan, t, 544, logits=True)).cycles
    c1 = be.counters()
    util = {k: (c1[k] - c0[k]) / dec for k in ("MXU_BUSY", "DMA_BUSY", "VPU_BUSY", "QNT_BUSY")}
    page, cycles = plan.opts.page, {}

    def prefill(by_bucket: tuple[int, ...]) -> float:
        """512 tokens: bucket b's 256 positions in runs of by_bucket[b] rows (the last one shorter,
        costed as a whole run: its weights stream once all the same), a run timed at 4 into each half
        of its bucket (a run whose rows lie in its last page's first half attends over that half)."""
        total = 0
        for b, r in enumerate(by_bucket):
            if (b, r) not in cycles:
                cycles[b, r] = sum(run(_step(be, plan, t, b * page + h + 4, rows=r, logits=False)).cycles
                                   for h in (0, page // 2)) / 2
            total += -(-page // r) * cycles[b, r]
        return len(by_bucket) * page * hz / total
    return hz / dec, prefill((rows, rows)), util, [prefill(c) for c in card_rows]


def bench_card(rng, models=tuple(MEASURED)) -> None:
    """The target as shipped, then as the measured card is: build B has MM PAIR (the target file says
    PAIR = false) and DSTEP (the Qwen3.5 runs' recurrence, models.md 2; the file says DSTEP = false,
    so the shipped target runs the DeltaNet heads as VOPs), and its V^T appends cost about 3 cycles
    per byte (1.05-1.37% of a decode token's cycles on the card; the target's VT_APPEND_CYCLES is 8)."""
    import dataclasses
    base = load(T)
    card = dataclasses.replace(base, name="build B", arch=base.arch.replace(PAIR=True, DSTEP=True),
                               uarch=dataclasses.replace(base.uarch, VT_APPEND_CYCLES=3))
    for name in models:
        cfg, measured = MEASURED[name]
        for fmt, t in (("int8", base), ("fp4", base), ("int8", card), ("fp4", card)):
            if fmt not in measured:
                continue
            shapes = CARD_PREFILL.get((name, fmt), ())
            dec, pre, util, pre_card = _modelled(cfg, t, fmt, rng, shapes)
            m_dec, m_pre = measured[fmt]
            busy = " ".join(f"{k[:3]} {100 * v:.0f}%" for k, v in util.items())
            card_runs = "".join(f"; the card's runs, {' then '.join(map(str, c))} rows a run by bucket, prefill "
                                f"{v:6.1f} tok/s (ratio {v / m_pre:.2f})" for c, v in zip(shapes, pre_card))
            print(f"card: {name} {fmt:4s} on {t.name:10s} decode {dec:6.2f} tok/s, measured {m_dec} (ratio "
                  f"{dec / m_dec:.2f}; {busy}); prefill {pre:6.1f} tok/s, measured {m_pre} (ratio {pre / m_pre:.2f})"
                  f"{card_runs}; goal within 15%", flush=True)


def bench_batch(rng, models=tuple(MEASURED), seqs=(1, 2, 3, 4)) -> None:
    """Batched decode: one step of n sequences (a row group each, at position 544) on ypcb-00338 as
    shipped and on bcu1525 (8192-instruction IMEM), in 4-bit: the aggregate tok/s, or why the step
    does not fit the card (the caller then steps fewer sequences a program)."""
    from otpu_core.ol import CompileError
    for name in models:
        cfg, _ = MEASURED[name]
        for t in (load(T), load("bcu1525")):
            plan, be, run = _card(cfg, t, "fp4", rng, slots=max(seqs))
            one = None
            for n in seqs:
                try:
                    prog = _step(be, plan, t, 544, seqs=n)
                except CompileError as e:
                    print(f"batch: {name} fp4 on {t.name:10s} {n} sequences a step: does not fit "
                          f"({e.message.splitlines()[0]})", flush=True)
                    continue
                rate = n * t.core_hz / run(prog).cycles
                one = one or rate
                print(f"batch: {name} fp4 on {t.name:10s} {n} sequences a step: {rate:6.2f} tok/s ({rate / n:.2f} "
                      f"each, {rate / one:.2f}x one a step; {prog.instructions} instructions)", flush=True)


def bench_host(rng) -> None:
    import threading

    from otpu_core.board import Board, BoardBackend
    from otpu_core.llm import checkpoint, convert, engine, synthetic
    from otpu_core.llm.sampling import Sampling
    with tempfile.TemporaryDirectory() as d:
        cfg = ModelConfig("qwen3", vocab=4096, d=256, layers=4, heads=2, kv_heads=1, head_dim=128, ffn=768,
                          tied=True, context=512, eos_ids=(2,), name="pydoc-shaped")
        tk = synthetic.tokenizer(512)
        ck = checkpoint.open_checkpoint(synthetic.write_gguf(Path(d) / "m.gguf", cfg.with_(vocab=tk.get_vocab_size()),
                                                             synthetic.random_weights(
                                                                 cfg.with_(vocab=tk.get_vocab_size()), 0), tk))
        tgt = load(T)
        conv = convert.convert(ck, "int8", tgt, cache=False)
        board = Board.open("sim:bench-host", T)
        try:
            eng = engine.Engine(conv, ck.config, BoardBackend(board), tgt,
                                layout.ImageOptions(pages=2, ctx=512), core_hz=board.info.core_khz * 1000)
            seq = eng.new_sequence()
            eng.submit(seq, list(range(3, 20)))
            eng.generate(seq, Sampling(temperature=0), 4)
            eng.reset(seq)
            eng.submit(seq, list(range(3, 20)))
            c0, w0 = time.thread_time(), time.perf_counter()
            turn = eng.generate(seq, Sampling(temperature=0), 48)
            host, wall = time.thread_time() - c0, time.perf_counter() - w0
            c1 = time.thread_time()                  # one poll: STATUS, the state block, one id
            for _ in range(200):
                eng.backend.poll()
                eng._read_state(seq)
                eng._read_ids(seq, 0, 1)
            per_poll = (time.thread_time() - c1) / 200
        finally:
            board.close()
        n = len(turn.tokens)
        at_card = 4 * per_poll                       # the loop polls about four times per token
        print(f"host: {1e3 * host / n:.2f} ms of host CPU per token on the simulated card ({n} tokens in one device "
              f"run at {n / wall:.1f} tok/s, threads {threading.active_count()}); one poll costs {1e3 * per_poll:.3f} ms, "
              f"so about {1e3 * at_card:.2f} ms per token at the real card's speed; the real card's host measured "
              "0.17-0.30 ms")


CONVERT_CHILD = """
import sys, time
from otpu_core.llm import checkpoint, convert
from otpu_core.target import load
ck = checkpoint.open_checkpoint(sys.argv[1])
t0 = time.perf_counter()
if sys.argv[2] == "read":
    for name in ck.config.tensor_shapes():
        ck.get(name).sum()
    size = 0
else:
    size = convert.convert(ck, sys.argv[2], load("ypcb-00338"), cache=False).nbytes()
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))   # this image's peak
print(time.perf_counter() - t0, hwm * 1024, size)
"""


def bench_convert(rng, keep: str | None) -> None:
    from otpu_core.llm import synthetic
    d = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="bench-llm-"))
    model = d / "qwen3-0.6b-shaped"
    if not (model / "model.safetensors").exists():
        t0 = time.perf_counter()
        w = {}
        for name, shape in QWEN3_0_6B.tensor_shapes().items():
            w[name] = (rng.standard_normal(shape, dtype=np.float32) * (0.02 if len(shape) == 2 else 1.0) +
                       (0 if len(shape) == 2 else 1)).astype(np.float32)
        synthetic.write_hf(model, QWEN3_0_6B, w, dtype="BF16")
        del w
        print(f"convert: wrote a {os.path.getsize(model / 'model.safetensors') / 2**30:.2f} GiB bf16 safetensors in "
              f"{time.perf_counter() - t0:.0f} s")
    env = {**os.environ, "OTPU_CACHE": str(d / "cache")}
    runs = {}
    for what in ("read", "int8"):
        out = subprocess.run([sys.executable, "-c", CONVERT_CHILD, str(model), what], capture_output=True, text=True,
                             env=env, check=True).stdout.split()
        runs[what] = (float(out[0]), int(out[1]), int(out[2]))
    (t_read, rss_read, _), (t_conv, rss_conv, size) = runs["read"], runs["int8"]
    limit = size + (1 << 30)
    print(f"convert: int8 conversion {t_conv:.1f} s against reading every tensor {t_read:.1f} s (ratio "
          f"{t_conv / t_read:.1f}x); peak RSS {rss_conv / 2**30:.2f} GiB against card-format size {size / 2**30:.2f} GiB "
          f"+ 1 GiB = {limit / 2**30:.2f} GiB ({'within' if rss_conv < limit else 'OVER'}); reading alone peaks at "
          f"{rss_read / 2**30:.2f} GiB")
    if not keep:
        import shutil
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="sim,card,host,convert")
    ap.add_argument("--models", default=",".join(MEASURED), help=f"card part: some of {', '.join(MEASURED)}")
    ap.add_argument("--keep", help="directory for the 0.6B-shaped safetensors (kept between runs)")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    parts = a.only.split(",")
    os.environ.setdefault("OTPU_CACHE", tempfile.mkdtemp(prefix="bench-llm-cache-"))
    os.environ.setdefault("OTPU_RUN_DIR", tempfile.mkdtemp(prefix="bench-llm-run-"))
    if "host" in parts:
        bench_host(rng)
    if "card" in parts:
        bench_card(rng, a.models.split(","))
    if "batch" in parts:
        bench_batch(rng, a.models.split(","))
    if "sim" in parts:
        bench_sim(rng)
    if "convert" in parts:
        bench_convert(rng, a.keep)


if __name__ == "__main__":
    main()
