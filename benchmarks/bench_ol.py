"""Compile speed of `ol` on a Qwen3-0.6B-shaped decode step, and what the peepholes save.

The program: 28 layers (d=1024, 16 q / 8 kv heads of 128, MLP 3072) in one hardware loop, the
LM head over a 151936-token vocabulary in 8192-row chunks, at position 1000 (three full
256-token attention blocks plus a tail), on ypcb-00338. Addresses come from an address-only
plan (no weights are made).

Printed:
1. compile time cold and from the on-disk cache (in a fresh temporary directory), and their ratio,
   and the resident form (one program per 256-position bucket, the position a run-time value);
2. WAITC generation time against the goal of 0.2 s (the seed reports 4.2-4.9 s per program on a
   35B model);
3. instructions and TMEM words moved per token with and without the fusion peepholes.

Run: python benchmarks/bench_ol.py
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from otpu_core import ol
from otpu_core.kernels.decoder import QWEN3_0_6B, decoder_step, plan_addresses
from otpu_core.ol.cache import cached_compile
from otpu_core.ol.lower import lower
from otpu_core.ol.program import trace
from otpu_core.ol.waitc import generate_waits
from otpu_core.target import load

TARGET = "ypcb-00338"
POS = 1000
WAITC_GOAL_S = 0.2


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pos", type=int, default=POS)
    args = ap.parse_args()
    target = load(TARGET)
    cfg = target.config()
    kargs = dict(plan_addresses(QWEN3_0_6B, cfg.D), shape=QWEN3_0_6B, pos=args.pos)

    cold_s, prog = timed(lambda: ol.compile_kernel(decoder_step, target, **kargs))
    with tempfile.TemporaryDirectory() as d:
        first = cached_compile(decoder_step, target, directory=d, **kargs)
        warm_s, warm = timed(lambda: cached_compile(decoder_step, target, directory=d, **kargs))
        assert warm.stats.cached and not first.stats.cached
        assert [i.words for i in warm.instrs] == [i.words for i in prog.instrs]
    print(f"compile (Qwen3-0.6B decode step, pos {args.pos}, {TARGET}): {len(prog.instrs)} instructions")
    print(f"  cold            {cold_s * 1e3:8.1f} ms")
    print(f"  from the cache  {warm_s * 1e3:8.1f} ms   ratio cold/cache = {cold_s / warm_s:.1f}x")

    bucket = args.pos // QWEN3_0_6B.attn_block
    rargs = dict(plan_addresses(QWEN3_0_6B, cfg.D, resident=True), shape=QWEN3_0_6B, bucket=bucket)
    res_s, res = timed(lambda: ol.compile_kernel(decoder_step, target, **rargs))
    print(f"  resident form (bucket {bucket}, position at run time): {len(res.instrs)} instructions, "
          f"{res_s * 1e3:.1f} ms cold")

    low = lower(trace(decoder_step, cfg, True, kargs).root, cfg)
    waitc_s, waits = timed(lambda: generate_waits(low))
    print(f"WAITC generation  {waitc_s * 1e3:8.1f} ms for {len(low.instrs)} instructions "
          f"({sum(1 for w in waits if w.waits)} wait); goal {WAITC_GOAL_S * 1e3:.0f} ms -> "
          f"{waitc_s / WAITC_GOAL_S:.2f} of the goal")

    off = ol.compile_kernel(decoder_step, target, peepholes=False, **kargs)
    on = prog
    print("peepholes           on          off      saved")
    print(f"  instructions  {on.stats.instrs:8d}  {off.stats.instrs:10d}  {off.stats.instrs - on.stats.instrs:8d}"
          f"   (static program)")
    print(f"  TMEM words    {on.stats.tmem_traffic:8d}  {off.stats.tmem_traffic:10d}  "
          f"{off.stats.tmem_traffic - on.stats.tmem_traffic:8d}   (per token, loops counted per iteration)"
          f"   ratio off/on = {off.stats.tmem_traffic / on.stats.tmem_traffic:.3f}")
    for rule, s in sorted(on.stats.peepholes.items()):
        print(f"    {rule:16s} {s['instrs']:4d} instructions  {s['words']:8d} words (static)")


if __name__ == "__main__":
    main()
