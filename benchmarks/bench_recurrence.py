"""Modelled cycles of the linear-recurrence layer steps on the stream engine against the same
steps as VOPs, in one process on one target.

1. Gated DeltaNet, Qwen3.5-0.8B's layer shape (16 heads, 128 x 128 fp32 state each: 1 MiB in
   DRAM): one token through `gated_deltanet_step` with a DSTEP per head, against the VOP form
   (the state loaded into TMEM in row chunks, RDOT, MUL, SUB, MUL, OUTER, RDOT, stored back).
2. Mamba2 (Granite-4-like heads: 16 heads of 64 x 128, one group): one token through
   `mamba2_step` with a STREAM per head, against its VOP form.

Both forms are bit-identical (tests/test_kernels_deltanet.py, tests/test_kernels_recurrent.py);
the cycles come from the timing model (otpu_core/timing.py) on sim-small, the one target with
DSTEP and STREAM and TMEM for the VOP chunks. Printed per step: modelled cycles, instructions,
DRAM bytes, TMEM words moved, and the ratio VOPs / stream engine.

Run: python benchmarks/bench_recurrence.py
"""
from __future__ import annotations

import argparse

import numpy as np

from otpu_core import ol
from otpu_core.isasim import Machine
from otpu_core.kernels import GdnWeights, Mamba2Weights, gated_deltanet_step, mamba2_step
from otpu_core.ol.runtime import Image
from otpu_core.timing import BEAT

TARGET = "sim-small"


def _run(img: Image, prog) -> dict:
    m = Machine(img.target, timing=True)
    m.write_dram(0, img.dram[: img.cursor])
    m.load(prog.instrs, prog.arg_words())
    m.run()
    c = m.timing.counters(0)
    return {"cycles": c["CYCLES"], "instrs": len(prog.instrs), "dram": BEAT * (c["B_RD"] + c["B_WR"]),
            "tmem": prog.stats.tmem_traffic}


def gdn(engine: str, heads: int, dk: int, dv: int) -> dict:
    rng = np.random.default_rng(0)
    img = Image(TARGET)

    def t(*shape):
        return img.tensor(rng.standard_normal(shape).astype(np.float32))
    q, k, v, z, a, b = t(heads, dk), t(heads, dk), t(heads, dv), t(heads, dv), t(heads), t(heads)
    w = GdnWeights(t(heads), t(heads), t(dv))
    state, y = img.tensor(shape=(heads * dv, dk)), img.tensor(shape=(heads, dv))

    def kern(q, k, v, z, a, b, w, state, y):
        ol.store(y, gated_deltanet_step(ol.load(q), ol.load(k), ol.load(v), ol.load(z), ol.load(a), ol.load(b), w,
                                        state, engine=engine))
    return _run(img, ol.compile_kernel(kern, TARGET, q=q, k=k, v=v, z=z, a=a, b=b, w=w, state=state, y=y))


def mamba2(engine: str, heads: int, p: int, n: int) -> dict:
    rng = np.random.default_rng(1)
    img = Image(TARGET)

    def t(*shape):
        return img.tensor(rng.standard_normal(shape).astype(np.float32))
    x, dt, bb, cc = t(heads, p), t(heads), t(1, n), t(1, n)
    w = Mamba2Weights(t(heads), t(heads), t(heads))
    state, y = img.tensor(shape=(heads * p, n)), img.tensor(shape=(heads, p))

    def kern(x, dt, bb, cc, w, state, y):
        ol.store(y, mamba2_step(ol.load(x), ol.load(dt), ol.load(bb), ol.load(cc), w, state, engine=engine))
    return _run(img, ol.compile_kernel(kern, TARGET, x=x, dt=dt, bb=bb, cc=cc, w=w, state=state, y=y))


def report(title: str, fast: dict, slow: dict, fast_name: str) -> None:
    print(title)
    print(f"  {'':10s} {'cycles':>9s} {'instrs':>7s} {'DRAM bytes':>11s} {'TMEM words':>11s}")
    for name, r in ((fast_name, fast), ("VOPs", slow)):
        print(f"  {name:10s} {r['cycles']:9d} {r['instrs']:7d} {r['dram']:11d} {r['tmem']:11d}")
    print(f"  ratio VOPs / {fast_name} = {slow['cycles'] / fast['cycles']:.2f}x cycles, "
          f"{slow['tmem'] / max(fast['tmem'], 1):.1f}x TMEM words")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args()
    h = args.heads
    report(f"Gated DeltaNet token step, {h} heads of 128 x 128 ({4 * h * 128 * 128 >> 10} KiB of state), {TARGET}",
           gdn("dstep", h, 128, 128), gdn("vops", h, 128, 128), "DSTEP")
    report(f"Mamba2 token step, {h} heads of 64 x 128, {TARGET}",
           mamba2("stream", h, 64, 128), mamba2("vops", h, 64, 128), "STREAM")


if __name__ == "__main__":
    main()
