"""Simulated-card peripheral cost: one I2C byte read over BAR0, against a plain register access.

An I2C byte is bit-banged through I2C_CTRL/I2C_IN (each SCL edge a write and a read), so its
cost is (register accesses per byte) x (cost of one peripheral access). The baseline, run in
the same process, is the same number of SCRATCH accesses (a control register with no
peripheral state behind it); the ratio says what the peripheral state persistence costs on
top of a bare access. Also prints a whole LM73 ID read (START, pointer, repeated START, two
bytes, STOP).

Usage: python benchmarks/bench_card.py [--bytes 200]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from otpu_core.card import regs
from otpu_core.card.i2c import LM73_ADDR
from otpu_i2c.bitbang import BitBangMaster
from otpu_core.card.simcard import SimCard


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=200, help="I2C bytes to read")
    ap.add_argument("--target", default="ypcb-00338")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        card = SimCard("sim-bench", args.target, directory=Path(d))
        base, accesses = regs.I2C_BASE, [0]

        def rd(o):
            accesses[0] += 1
            return card.reg_read(base + o)

        def wr(o, v):
            accesses[0] += 1
            card.reg_write(base + o, v)

        m = BitBangMaster(rd, wr, 0)
        m.start()
        m.write_byte((LM73_ADDR << 1) | 1)
        m.read_byte(True)                       # warm: every peripheral built, state loaded
        accesses[0] = 0
        t0 = time.perf_counter()
        for _ in range(args.bytes):
            m.read_byte(True)
        per_byte = (time.perf_counter() - t0) / args.bytes
        per_byte_accesses = accesses[0] / args.bytes
        m.read_byte(False)
        m.stop()

        scratch = regs.off("SCRATCH")
        n = int(per_byte_accesses * args.bytes)
        t0 = time.perf_counter()
        for i in range(n // 2):
            card.reg_write(scratch, i)
            card.reg_read(scratch)
        baseline = (time.perf_counter() - t0) / args.bytes

        t0 = time.perf_counter()
        for _ in range(20):
            assert m.read(LM73_ADDR, 7, 2) == b"\x01\x90"
        transaction = (time.perf_counter() - t0) / 20
        card.close()
    print(f"I2C byte read over BAR0: {per_byte * 1e6:8.1f} us ({per_byte_accesses:.0f} register accesses, "
          f"{per_byte / per_byte_accesses * 1e6:.2f} us each)")
    print(f"same number of SCRATCH accesses: {baseline * 1e6:8.1f} us   ratio {per_byte / baseline:.1f}x")
    print(f"LM73 ID read (whole transaction): {transaction * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
