"""Expert offload at the LFM2.5-8B-A1B shape: bytes streamed per token and slot hit rate against the card's.

The host side exactly as a run uses it (llm/offload.py `ExpertServer`, its LRU slots, the
directory and mailbox of kernels/moe.py `OffloadLayout`, blobs sized by `ExpertBlob` in the
card format) driven by the card's protocol (`offload.replay`: per token and MoE layer the card
reads the k chosen experts' directory entries and posts a request only when one is absent, so
the host sees no use of a token whose experts were all present; tests/test_llm_qwen3moe.py
holds it to the card's own counts). The DRAM is the directory and mailbox only; a
slot write is counted, not stored.

Shape: an `lfm2moe` ModelConfig (`SHAPE`) with LFM2-8B-A1B's config.json values (hidden 2048,
24 layers of which the first 2 are dense, 32 experts of width 1792 a layer, 4 per token); the
routed layers, experts, k and expert width below are what that config gives (`moe_layers`,
`experts`, `experts_used`, `ffn`), as the card's offload layout reads them. LFM2.5-8B-A1B is
documented with the same 32 experts and top-4, the rest is assumed equal. Experts in fp4 (E2M1,
4.25 bits a weight, D=128): the measured run's experts ran PAIR MMs, a 4-bit mode.

Routing trace (synthetic, stated; it decides the hit rate, so this measures the slot policy and
the blob size on it, not the model's routing): per layer a Zipf(1.1) popularity over a random
order of the experts; each token keeps each of the previous token's experts with probability
0.6 and draws the rest from the popularity without replacement; 512 tokens, seed 0. The family's
own router (sigmoid scores plus the selection bias, llm/reference.py) on random weights would be
no less synthetic: random hidden states have neither the popularity skew nor the token-to-token
reuse that decide the hit rate, so it is not used here.

Against the card's measured run (models.md 4a: 98.5% slot hits, 5.2 MB a token): the hit rate
and MB a token at each slot count, and their ratios at 24 slots a layer.

Run: python benchmarks/bench_moe.py [--tokens N] [--slots 8,16,24,28]
"""
from __future__ import annotations

import argparse

import numpy as np

from otpu_core import isa
from otpu_core.kernels.moe import ExpertBlob, OffloadLayout
from otpu_core.llm.config import ModelConfig
from otpu_core.llm.layout import f_chunk_for
from otpu_core.llm.offload import ExpertServer, replay

SHAPE = ModelConfig("lfm2moe", vocab=65536, d=2048, layers=24, heads=32, kv_heads=8, head_dim=64, ffn=1792,
                    experts=32, experts_used=4, dense_layers=2, dense_ffn=7168, expert_bias=True,
                    name="lfm2-8b-a1b-shaped").check("bench_moe")
D_MODEL, MOE_LAYERS, EXPERTS, K, WIDTH, D = SHAPE.d, len(SHAPE.moe_layers), SHAPE.experts, SHAPE.experts_used, \
    SHAPE.ffn, 128
MEASURED_HITS, MEASURED_MB = 0.985, 5.2
ZIPF, STAY, SEED = 1.1, 0.6, 0
HEADLINE_SLOTS = 24


class DirectoryDram:
    """The mailbox and directory of an OffloadLayout as bytes; writes into the slots are counted only."""

    def __init__(self, lay: OffloadLayout):
        self.lay, self.b = lay, np.zeros(lay.slots_base, np.uint8)
        self.slot_bytes = 0

    def read(self, addr: int, n: int) -> np.ndarray:
        return self.b[addr:addr + n].copy()

    def write(self, addr: int, data) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if addr >= self.lay.slots_base:
            self.slot_bytes += raw.size
            return
        self.b[addr:addr + raw.size] = raw


def trace(tokens: int, rng: np.random.Generator) -> np.ndarray:
    """[tokens, layers, k] expert ids: per layer Zipf popularity, each previous expert kept with STAY."""
    out = np.zeros((tokens, MOE_LAYERS, K), np.int64)
    for layer in range(MOE_LAYERS):
        pop = 1.0 / np.arange(1, EXPERTS + 1) ** ZIPF
        pop = pop[rng.permutation(EXPERTS)] / pop.sum()
        prev: list[int] = []
        for t in range(tokens):
            keep = [e for e in prev if rng.random() < STAY]
            p = pop.copy()
            p[keep] = 0.0
            fresh = rng.choice(EXPERTS, K - len(keep), replace=False, p=p / p.sum())
            prev = keep + [int(e) for e in fresh]
            out[t, layer] = prev
    return out


def run(route: np.ndarray, slots: int, blob: ExpertBlob) -> tuple[float, float, int]:
    """(hit rate, bytes a token, requests) of the card's protocol over `route` with `slots` a layer."""
    lay = OffloadLayout(0, MOE_LAYERS, EXPERTS, K, slots, blob)
    dram = DirectoryDram(lay)
    data = np.zeros(blob.nbytes, np.uint8)
    server = ExpertServer(dram, lay, lambda layer, e: data)
    server.reset()
    st = replay(server, route)
    assert st.bytes == dram.slot_bytes
    return st.hit_rate(route.size), st.bytes / len(route), st.requests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--slots", default="8,16,24,28")
    a = ap.parse_args()
    blob = ExpertBlob(D_MODEL, WIDTH, f_chunk_for(WIDTH, D, wf=isa.WF_E2M1), isa.WF_E2M1, D)
    route = trace(a.tokens, np.random.default_rng(SEED))
    print(f"LFM2.5-8B-A1B shape: {MOE_LAYERS} MoE layers x {EXPERTS} experts, k={K}, expert {blob.nbytes / 1e6:.2f} MB "
          f"in fp4; trace: Zipf({ZIPF}) popularity, previous experts kept with {STAY}, {a.tokens} tokens")
    print(f"{'slots':>5} {'hit rate':>9} {'MB/token':>9} {'requests/token':>15}")
    rows = {}
    for slots in sorted({int(s) for s in a.slots.split(",")} | {HEADLINE_SLOTS}):
        hits, per_token, requests = run(route, slots, blob)
        rows[slots] = (hits, per_token)
        print(f"{slots:5d} {hits:9.4f} {per_token / 1e6:9.2f} {requests / a.tokens:15.2f}")
    hits, per_token = rows[HEADLINE_SLOTS]
    print(f"at {HEADLINE_SLOTS} slots a layer: hit rate {hits:.4f} vs measured {MEASURED_HITS} (ratio {hits / MEASURED_HITS:.3f}); "
          f"{per_token / 1e6:.2f} MB a token vs measured {MEASURED_MB} (ratio {per_token / 1e6 / MEASURED_MB:.2f})")


if __name__ == "__main__":
    main()
