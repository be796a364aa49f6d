"""Speed of the operator tools on the simulated card (default target ypcb-00338).

Goals (issue 6): otpu-selftest ALL PASS in under 20 s; otpu-diag --mem quick in under 60 s,
against the openTPU diag's ~80 s on its board model. Each tool runs in this process on a
fresh simulated card of its own in a temporary run directory; the ratios printed are elapsed / goal
(below 1.0 meets it) and the openTPU figure / elapsed (the speed-up over it). A third line
runs March C- (--mem full) over sim-small's two 8 MiB channels as the memory-test rate.

    python benchmarks/bench_tools.py [--target T]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time

from otpu_core.cli import run_app
from otpu_diag import cli as diag_cli
from otpu_selftest import cli as selftest_cli

SELFTEST_GOAL_S, DIAG_GOAL_S, OPENTPU_DIAG_S = 20.0, 60.0, 80.0


def timed(app, prog: str, args: list[str]) -> tuple[float, int, str]:
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = run_app(app, prog, args)
    return time.perf_counter() - t0, rc, out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ypcb-00338")
    target = ap.parse_args().target
    with tempfile.TemporaryDirectory() as run_dir:
        os.environ["OTPU_RUN_DIR"] = run_dir
        os.environ.pop("OTPU_SIM_FAULTS", None)
        s, rc, out = timed(selftest_cli.app, "otpu-selftest", ["--dev", "sim:bench-selftest", "--target", target])
        verdict = out.strip().splitlines()[-1]
        print(f"otpu-selftest ({target}): {s:.2f} s, {verdict} (exit {rc}); "
              f"ratio to the {SELFTEST_GOAL_S:g} s goal {s / SELFTEST_GOAL_S:.3f}")
        d, rc, out = timed(diag_cli.app, "otpu-diag", ["--dev", "sim:bench-diag", "--target", target])
        verdict = out.strip().splitlines()[-1]
        print(f"otpu-diag --mem quick ({target}): {d:.2f} s, {verdict} (exit {rc}); "
              f"ratio to the {DIAG_GOAL_S:g} s goal {d / DIAG_GOAL_S:.3f}; "
              f"openTPU's ~{OPENTPU_DIAG_S:g} s / ours = {OPENTPU_DIAG_S / d:.1f}x")
        report = os.path.join(run_dir, "march.json")
        m, rc, out = timed(diag_cli.app, "otpu-diag", ["--dev", "sim:march", "--target", "sim-small", "--only", "mem",
                                                        "--mem", "full", "--json", report])
        with open(report) as f:
            march_s = sum(r["seconds"] for r in json.load(f)["rows"] if r["name"].endswith("march C-"))
        print(f"March C- over sim-small's 2 x 8 MiB channels: {march_s:.2f} s of a {m:.2f} s diag (exit {rc}), "
              f"{2 * 10 * 8 / march_s:.0f} MiB of March operations per second")

if __name__ == "__main__":
    main()
