"""MM throughput of the bit-exact MXU model against plain numpy float64 matmuls in the same process.

1. One MM of 4096 x 1024 int8 weights with 1 and 8 activation rows (warm weight cache) against
   a float64 numpy matmul of the same shape: goal within 3x.
2. The matmuls of one Qwen3-0.6B decode token (28 layers of q 2048x1024, k and v 1024x1024,
   o 1024x2048, gate and up 3072x1024, down 1024x3072, plus the 151936x1024 LM head), int8 with a
   warm cache: goal under 0.5 s.
--wf picks the weight format (default int8; the goals are stated for int8).

Run: python benchmarks/bench_mxu.py [--wf int8|int4|e2m1|int8x|fp4x6] [--skip-token]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from otpu_core import formats, mxu
from otpu_core.isa import WF_NAMES

D = 128
QWEN_LAYER = [("q", 2048, 1024), ("k", 1024, 1024), ("v", 1024, 1024), ("o", 1024, 2048),
              ("gate", 3072, 1024), ("up", 3072, 1024), ("down", 1024, 3072)]
QWEN_LAYERS = 28
QWEN_HEAD = ("head", 151936, 1024)


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def random_weight_bytes(rng, wf: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """DRAM bytes of an n x k matrix with random codes and plausible side data (no quantiser run:
    the token benchmark would spend minutes quantising 600M weights)."""
    kb = k // D
    rows = rng.integers(-127, 128, (n, formats.row_bytes(wf, D, kb)), dtype=np.int8).view(np.uint8)
    scales = np.zeros((n, formats.scale_row_bytes(wf, kb)), np.uint8)
    if wf == WF_NAMES["int8x"]:
        scales[:, :4] = np.array([1e-3], np.float32).view(np.uint8)[None, :]
        scales[:, 4:4 + kb] = rng.integers(0, 17, (n, kb), dtype=np.uint8)
        return rows, scales
    if wf == WF_NAMES["int8"]:
        words = rng.uniform(1e-4, 1e-3, (n, kb)).astype(np.float32).view(np.uint32)
    else:                       # 4-bit: a scale or exponent in the low bits, multipliers above
        mult = rng.integers(1, 16, (n, kb), dtype=np.uint32) * np.uint32(0x11110000)
        if wf == WF_NAMES["fp4x6"]:
            low = rng.integers(110, 127, (n, kb), dtype=np.uint32)          # exponents within 16
        else:
            low = np.uint32(0x3A83)                                          # bf16 0.001
        words = mult | low
    scales[:, :4 * kb] = words.astype("<u4").view(np.uint8).reshape(n, -1)
    return rows, scales


def activations(rng, rows: int, kb: int, row_mode: bool) -> tuple[np.ndarray, np.ndarray]:
    q = rng.integers(-127, 128, (rows, kb * D), dtype=np.int8)
    s = rng.uniform(1e-3, 1e-2, (rows, 1 if row_mode else kb)).astype(np.float32).view(np.uint32)
    return q, np.ascontiguousarray(np.broadcast_to(s, (rows, kb)))


def bench_single(rng, wf: int) -> None:
    n, k = 4096, 1024
    kb = k // D
    cache = mxu.WeightCache()
    rows, scales = random_weight_bytes(rng, wf, n, k)
    w64 = rng.normal(size=(k, n))
    for r in (1, 8):
        q, s = activations(rng, r, kb, wf in (3, 4))
        x64 = rng.normal(size=(r, k))

        def ours():
            dec = cache.get(("w", 0), wf, D, kb, rows, scales, False)
            mxu.mm(q, s, dec)

        ours()                                              # warm the cache
        t_ours = best_of(ours, 20)
        t_ref = best_of(lambda: x64 @ w64, 20)
        print(f"MM {n}x{k} WF={wf} {r} row(s): mxu {t_ours * 1e3:7.2f} ms   numpy float64 {t_ref * 1e3:7.2f} ms   "
              f"ratio {t_ours / t_ref:5.2f}x (goal <= 3x)")


def bench_token(rng, wf: int) -> None:
    shapes = [(f"L{i}.{name}", n, k) for i in range(QWEN_LAYERS) for name, n, k in QWEN_LAYER]
    shapes.append(QWEN_HEAD)
    cache = mxu.WeightCache(max_bytes=1 << 40)
    t0 = time.perf_counter()
    placed = {}
    for key, n, k in shapes:
        rows, scales = random_weight_bytes(rng, wf, n, k)
        cache.get(key, wf, D, k // D, rows, scales, False)
        placed[key] = (rows, scales, n, k)
    print(f"token: decoded {len(shapes)} matrices ({cache.bytes / 2**30:.2f} GiB cache) "
          f"in {time.perf_counter() - t0:.1f} s")
    acts = {k: activations(rng, 1, k // D, wf in (3, 4)) for k in {k for _, _, k in shapes}}

    def token():
        for key, (rows, scales, n, k) in placed.items():
            dec = cache.get(key, wf, D, k // D, rows, scales, False)
            q, s = acts[k]
            mxu.mm(q, s, dec)

    t_tok = best_of(token, 3)
    print(f"Qwen3-0.6B decode token matmuls (WF={wf}): {t_tok:.3f} s (goal < 0.5 s, ratio to goal "
          f"{t_tok / 0.5:.2f})   cache hits {cache.hits}, misses {cache.misses}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wf", default="int8", choices=sorted(WF_NAMES))
    ap.add_argument("--skip-token", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    wf = WF_NAMES[args.wf]
    bench_single(rng, wf)
    if not args.skip_token:
        bench_token(rng, wf)


if __name__ == "__main__":
    main()
