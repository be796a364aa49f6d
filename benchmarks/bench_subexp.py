"""The MXU's exact path over activations with sub-block offsets (QACT SUB) against the same path
without them and against a plain numpy float64 matmul, all in this process.

Activations are what QACT SUB writes for LLM-like rows (Gaussian, 1 channel in 64 an outlier).
1. One MM of 4096 x 1024 int8x (or fp4x6) weights with 1 and 8 activation rows, warm weight
   cache: the offsets path against the plain exact path (goal: within 2x) and against a float64
   numpy matmul of the same shape (bench_mxu's goal: within 3x).
2. The matmuls of one Qwen3-0.6B decode token in int8x with offsets (goal: under 0.5 s, as for
   int8 in bench_mxu).

Run: python benchmarks/bench_subexp.py [int8x] [fp4x6] [--no-token]
"""
from __future__ import annotations

import argparse

import numpy as np

from otpu_core import formats, mxu
from otpu_core.isa import WF_NAMES

from bench_mxu import D, QWEN_HEAD, QWEN_LAYER, QWEN_LAYERS, best_of, random_weight_bytes


def activations(rng, rows: int, kb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What QACT SUB writes for LLM-like rows: Gaussian with a few outlier channels (1 in 64,
    20-100x larger), as codes, one scale per row (repeated per block) and offset side words."""
    x = rng.standard_normal((rows, kb * D)).astype(np.float32)
    outliers = rng.random(kb * D) < 1 / 64
    x[:, outliers] *= rng.uniform(20, 100, outliers.sum()).astype(np.float32)
    q, s, e = formats.quantize_suboffsets(x.view(np.uint32), D)
    return q, np.ascontiguousarray(np.broadcast_to(s[:, None], (rows, kb))), formats.pack_suboffsets(e)


def bench_single(rng, wf: int, n: int = 4096, k: int = 1024) -> None:
    packed = random_weight_bytes(rng, wf, n, k)
    dec = formats.decode(wf, D, k // D, *packed)          # what a warm weight cache hands the MXU
    w64 = rng.normal(size=(k, n))
    for r in (1, 8):
        q, s, side = activations(rng, r, k // D)
        x64 = rng.normal(size=(r, k))
        t_sub = best_of(lambda: mxu.mm(q, s, dec, act_sub=side), 20)
        t_plain = best_of(lambda: mxu.mm(q, s, dec), 20)
        t_ref = best_of(lambda: x64 @ w64, 20)
        print(f"MM {n}x{k} WF={wf} {r} row(s): offsets {t_sub * 1e3:7.2f} ms   plain exact {t_plain * 1e3:7.2f} ms "
              f"(ratio {t_sub / t_plain:4.2f}x, goal <= 2x)   numpy float64 {t_ref * 1e3:6.2f} ms "
              f"(ratio {t_sub / t_ref:4.2f}x, goal <= 3x)")


def bench_token(rng, wf: int) -> None:
    shapes = [(f"L{i}.{name}", n, k) for i in range(QWEN_LAYERS) for name, n, k in QWEN_LAYER]
    shapes.append(QWEN_HEAD)
    cache = mxu.WeightCache(max_bytes=1 << 40)
    placed = {}
    for key, n, k in shapes:
        rows, scales = random_weight_bytes(rng, wf, n, k)
        cache.get(key, wf, D, k // D, rows, scales, False)
        placed[key] = (rows, scales, n, k)
    acts = {k: activations(rng, 1, k // D) for k in {k for _, _, k in shapes}}

    def token(with_offsets: bool):
        for key, (rows, scales, n, k) in placed.items():
            q, s, side = acts[k]
            mxu.mm(q, s, cache.get(key, wf, D, k // D, rows, scales, False), act_sub=side if with_offsets else None)

    t_sub = best_of(lambda: token(True), 3)
    t_plain = best_of(lambda: token(False), 3)
    print(f"Qwen3-0.6B decode token matmuls (WF={wf}): offsets {t_sub:.3f} s, plain exact {t_plain:.3f} s "
          f"(ratio {t_sub / t_plain:.2f}x); goal < 0.5 s, ratio to goal {t_sub / 0.5:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("formats", nargs="*", default=["int8x", "fp4x6"], help="seed formats for the single MM")
    ap.add_argument("--no-token", action="store_true", help="skip the Qwen3-0.6B token (int8x)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for name in args.formats:
        bench_single(rng, WF_NAMES[name])
    if not args.no_token:
        bench_token(rng, WF_NAMES["int8x"])


if __name__ == "__main__":
    main()
