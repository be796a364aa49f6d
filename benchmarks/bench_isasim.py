"""Speed of the golden simulator, as ratios against baselines run in the same process.

1. MM throughput: one MM instruction over 4096 x 1024 int8 weights (decoded-weight cache warm),
   1 and 8 activation rows, against a plain numpy float64 matmul of the same shape. Goal: <= 3x.
2. The matmuls of one Qwen3-0.6B decode token (28 layers of q 2048x1024, k and v 1024x1024,
   o 1024x2048, gate and up 3072x1024, down 1024x3072, plus the 151936x1024 LM head) as MM
   instructions on ypcb-00338, weights in DRAM with distinct addresses, cache warm. Goal: < 0.5 s.

Run: python benchmarks/bench_isasim.py [--skip-token]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from otpu_core import isa
from otpu_core.isasim import Machine
from otpu_core.target import load

D = 128
OUT = 0


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def place_weights(m: Machine, addr: int, n: int, k: int, rng) -> tuple[int, int]:
    """Random int8 rows and fp32 block scales at addr; returns (rows address, scales address)."""
    kb = k // D
    m.write_dram(addr, rng.integers(-127, 128, n * k, dtype=np.int8))
    ssa = addr + n * k
    m.write_dram(ssa, rng.uniform(1e-3, 2e-3, n * kb).astype(np.float32))
    return addr, ssa


def mm(sa: int, ssa: int, n: int, k: int, rows: int, ab: int, out: int = OUT) -> isa.Instr:
    kb = k // D
    return isa.mm(sa=sa, ssa=ssa, out=out, n=n, kb=kb, rs=k, srs=4 * kb, m=rows, ors=n, ab=ab)


def bench_mm(rows: int, rng) -> None:
    n, k = 4096, 1024
    t = load("ypcb-00338")
    m = Machine(t, cfg=t.config().replace(ACT_ROWS=max(rows, t.config().MCOLS)))
    sa, ssa = place_weights(m, 0, n, k, rng)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    m.slice.act.q[:rows, :k] = rng.integers(-127, 128, (rows, k), dtype=np.int8)
    m.slice.act.scale[:rows, :k // D] = np.float32(0.01).view(np.uint32)
    prog = [mm(sa, ssa, n, k, rows, 0), isa.halt()]

    def sim():
        m.load(prog)
        m.run()
    sim()                                           # decode the weights once (cold cache)
    w64 = rng.standard_normal((n, k))
    x64 = x.astype(np.float64)
    t_sim = best(sim)
    t_np = best(lambda: x64 @ w64.T)
    print(f"MM 4096x1024 int8, {rows} row(s): simulator {t_sim * 1e3:7.2f} ms, numpy float64 {t_np * 1e3:7.2f} ms, "
          f"ratio {t_sim / t_np:5.2f}x (goal <= 3x)")


QWEN_LAYER = (("q", 2048, 1024), ("k", 1024, 1024), ("v", 1024, 1024), ("o", 1024, 2048),
              ("gate", 3072, 1024), ("up", 3072, 1024), ("down", 1024, 3072))
LAYERS, VOCAB, HIDDEN = 28, 151936, 1024


def bench_token(rng) -> None:
    t = load("ypcb-00338")
    m = Machine(t)
    ab_of = {1024: 0, 2048: 8, 3072: 24}             # one QACT'd activation per distinct K
    for k, ab in ab_of.items():
        m.slice.act.q[:1, ab * D:(ab + k // D) * D] = rng.integers(-127, 128, (1, k), dtype=np.int8)
        m.slice.act.scale[:1, ab:ab + k // D] = np.float32(0.01).view(np.uint32)
    prog, addr = [], 0
    t0 = time.perf_counter()
    for _ in range(LAYERS):
        for _, n, k in QWEN_LAYER:
            sa, ssa = place_weights(m, addr, n, k, rng)
            addr = -(-(ssa + 4 * n * (k // D)) // D) * D
            prog.append(mm(sa, ssa, n, k, 1, ab_of[k]))
    head = VOCAB // 4                                 # N is 16 bits and TMEM holds 64K words: 4 MMs
    for part in range(4):
        sa, ssa = place_weights(m, addr, head, HIDDEN, rng)
        addr = -(-(ssa + 4 * head * (HIDDEN // D)) // D) * D
        prog.append(mm(sa, ssa, head, HIDDEN, 1, 0))
    prog.append(isa.halt())
    placed = time.perf_counter() - t0
    params = sum(n * k for _, n, k in QWEN_LAYER) * LAYERS + VOCAB * HIDDEN

    def token():
        m.load(prog)
        m.run()
    t_cold = best(token, 1)
    t_warm = best(token, 3)
    x64 = np.ones(HIDDEN)
    w_probe = rng.standard_normal((4096, HIDDEN))
    t_np = best(lambda: x64 @ w_probe.T) * params / (4096 * HIDDEN)
    cycles = m.counters()["CYCLES"]
    print(f"Qwen3-0.6B decode token: {len(prog) - 1} MMs, {params / 1e6:.0f}M int8 weights "
          f"({addr / 2**20:.0f} MiB DRAM, placed in {placed:.1f} s)")
    print(f"  simulator: cold {t_cold:.3f} s, warm {t_warm:.3f} s (goal < 0.5 s); "
          f"numpy float64 gemv of the same size ~{t_np:.3f} s, ratio {t_warm / t_np:.2f}x")
    print(f"  modelled card time: {cycles:,} cycles = {cycles / t.core_hz * 1e3:.1f} ms at {t.platform['core_mhz']} MHz "
          f"({addr / (cycles / t.core_hz) / 1e9:.2f} GB/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-token", action="store_true", help="only the MM throughput benchmark")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    for rows in (1, 8):
        bench_mm(rows, rng)
    if not a.skip_token:
        bench_token(rng)


if __name__ == "__main__":
    main()
