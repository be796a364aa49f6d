"""otpu-memcal speed: a full two-channel host calibration on the simulated card.

Two ratios, both from runs in this process:
- register accesses per second of the calibration against a plain loop of single BAR0 reads of a
  LiteDRAM CSR (ctrl_scratch) on the same card: what the calibration's own work (patterns, scans,
  window analysis) and its batching add or save per access;
- the time the calibration would take on a card against the reference's measured ~25 s per
  channel (host.md 6.3). The card's access rate is inferred from the reference itself: its
  algorithm makes a known number of CSR accesses per channel (counted below from its structure:
  at each of 113 CK/DQS steps a JEDEC init, a read scan at 4 write bitslips and one more for read
  leveling, 8 x 32 taps each, 56 accesses per DFII test), and the card runs them in 25 s.

Usage: python benchmarks/bench_memcal.py [--target ypcb-00338] [--stride 1]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from otpu_core.card import litedram_map as M
from otpu_core.card import regs

REFERENCE_S_PER_CHANNEL = 25.0


def reference_accesses_per_channel() -> int:
    """CSR accesses of the reference's host calibration of one channel at stride 1 (ddrcal's structure)."""
    test = 4 * 4 + 4 * M.DATA_WORDS + 4 * M.DATA_WORDS          # ACT, write, read, PRE commands; wrdata; rddata
    strobe = 3                                                   # select, pulse, deselect
    scan = M.BITSLIPS * (strobe + M.DELAYS * (test + strobe) + strobe)
    init = 40
    calibrate = init + 4 * (2 * strobe + scan) + scan + M.LANES * 12 + 3 * test
    return (M.PERIOD_STEPS + 1) * calibrate + calibrate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ypcb-00338")
    ap.add_argument("--stride", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        os.environ["OTPU_RUN_DIR"] = d
        from otpu_core.board import Board
        from otpu_memcal.ensure import Options, ensure

        with Board.open("sim:bench", args.target) as b:
            scratch = regs.LITEDRAM_BASE + M.B_CTRL + M.CTRL_SCRATCH
            n = 20000
            t0 = time.perf_counter()
            for _ in range(n):
                b.t.reg_read(scratch)
            plain_rate = n / (time.perf_counter() - t0)
            t0, c0 = time.perf_counter(), time.process_time()
            out = ensure(b, (0, 1), force=True, opts=Options(stride=args.stride))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert not out.failures, out.failures
    accesses = sum(r["accesses"] for r in out.channels.values())
    rate = accesses / wall
    ref = reference_accesses_per_channel()
    card_rate = ref / REFERENCE_S_PER_CHANNEL
    on_card = accesses / 2 / card_rate
    print(f"two-channel host calibration, stride {args.stride}: {accesses} CSR accesses in {wall:.2f} s "
          f"({cpu:.2f} s CPU), {rate / 1e3:.1f} k accesses/s")
    print(f"plain loop of single BAR0 reads of a LiteDRAM CSR: {plain_rate / 1e3:.1f} k accesses/s   "
          f"ratio {rate / plain_rate:.2f}x")
    print(f"reference: {ref / 1e6:.2f} M accesses per channel in ~{REFERENCE_S_PER_CHANNEL:.0f} s on the card "
          f"({card_rate / 1e3:.0f} k accesses/s)")
    print(f"this calibration on the card at that rate: {on_card:.2f} s per channel   "
          f"ratio {REFERENCE_S_PER_CHANNEL / on_card:.0f}x faster than the reference")
    for ch, r in sorted(out.channels.items()):
        print(f"  channel {ch}: {r['accesses']} accesses, window {r['window_ps']} ps at CK step {r['dqs_steps']}, "
              f"BIST read {r['bist']['read']['gbs']:.2f} GB/s")


if __name__ == "__main__":
    main()
