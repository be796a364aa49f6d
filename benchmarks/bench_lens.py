"""Speed of otpu-lens on a profile of a million instructions.

Goals (issue 14): the profile of 1 M instructions written in under 10 s; its page interactive
in under 3 s in headless Chromium.

1. Records: one decode token of the tiny decoder layer on the timing model (ypcb-00338), its
   trace records repeated with shifted cycles until they hold 1 M instructions (about 9 M
   records), as a long trace from a card would. Timed: decode the records, build the
   profile, gzip it and write the file. Baseline in the same process: the same instruction
   columns written as plain gzip JSON with no analysis (the floor any profile file costs).
2. Page: the file served by `otpu-lens open`'s server; Chromium loads the page until it says
   it is interactive (data model built, overview drawn). Baseline: a blank page on the same
   server that fetches the same file, inflates and parses it, nothing drawn.

Ratios printed are elapsed / goal (below 1.0 meets it) and elapsed / baseline.

    python benchmarks/bench_lens.py [--instructions N]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from otpu_core import tracefmt as tf
from otpu_core.target import load as load_target
from otpu_lens import fileformat, headless, profile, recorder, serve, workloads

WRITE_GOAL_S, PAGE_GOAL_S = 10.0, 3.0


def long_trace(n_instr: int):
    """(step, records, counters) of a decoder token repeated until n_instr instructions."""
    target = load_target("ypcb-00338")
    eng = recorder.SimEngine(target)
    step = next(workloads.get("decoder-layer").build(workloads.Context(target, {})))
    for addr, data in step.writes:
        eng.write(addr, data.view(np.uint8))
    slices, _, _ = eng.run(step)
    recs, counters = slices[0].records, slices[0].counters
    kind = (recs >> np.uint64(60)).astype(np.int64)
    body = recs[kind != tf.H]                      # one H at the very end
    halt = recs[np.nonzero(kind == tf.H)[0][0]:]
    per = int((kind == tf.D).sum())
    reps = -(-n_instr // per)
    period = int(counters["CYCLES"])
    heads = np.isin((body >> np.uint64(60)).astype(np.int64), (tf.D, tf.S, tf.G, tf.E, tf.U, tf.P, tf.Q, tf.R))
    low = np.uint64(0xFFFFFFFF)
    out = np.tile(body, reps)
    shift = (np.repeat(np.arange(reps, dtype=np.uint64), body.size) * np.uint64(period))
    cyc = (out & low) + shift
    mask = np.tile(heads, reps)
    out[mask] = (out[mask] & ~low) | (cyc[mask] & low)
    h = halt.copy()
    h[0] = (h[0] & ~low) | ((h[0] & low) + np.uint64((reps - 1) * period)) & low
    out = np.concatenate([out, h])
    counts = {k: v * reps for k, v in counters.items()}
    return step, out, counts, per * reps


def bench_write(n_instr: int, out_dir: Path) -> tuple[Path, float, float, int, int]:
    step, records, counters, n = long_trace(n_instr)
    target = load_target("ypcb-00338")
    cap = profile.Capture("sim", f"{n:,} instructions", "decoder-layer", target, list(step.program.instrs),
                          list(step.program.sources), [profile.SliceCapture(records, counters)],
                          float(target.platform["core_mhz"]))
    path = out_dir / "big.otpuprof"
    t0, c0 = time.perf_counter(), time.process_time()
    p = profile.build(cap)
    path.write_bytes(fileformat.encode([p]))
    t_write, c_write = time.perf_counter() - t0, time.process_time() - c0
    cols = p["instrs"]["data"]
    t0 = time.perf_counter()
    plain = json.dumps({k: v.tolist() for k, v in cols.items()}, separators=(",", ":"))
    (out_dir / "baseline.json.gz").write_bytes(gzip.compress(plain.encode(), compresslevel=fileformat.GZIP_LEVEL))
    t_base = time.perf_counter() - t0
    return path, t_write, c_write, t_base, p["traced"], int(records.size)


BASELINE_JS = """async () => {
  const t0 = performance.now();
  const r = await fetch('/profile/0', {cache: 'no-store'});
  const buf = await r.arrayBuffer();
  const text = await new Response(new Blob([buf]).stream().pipeThrough(new DecompressionStream('gzip'))).text();
  const doc = JSON.parse(text);
  return [performance.now() - t0, doc.profiles[0].instrs.data.d.length];
}"""


def bench_page(path: Path, user_dir: Path) -> tuple[float, float]:
    server = serve.serve([path])
    serve.in_thread(server)
    url = serve.url_of(server)
    try:
        with headless.launch(user_dir) as ctx:
            page = ctx.new_page()
            page.goto(url + "#view=overview")
            headless.wait_until(page, "document.documentElement.dataset.lensReady === '1'", 120)
            t_page = page.evaluate("window.lens.readyAt") / 1000.0
            phases = page.evaluate("window.lens.timings")
            blank = ctx.new_page()
            blank.goto(url + "blank")          # a 404 of the same server: same origin, nothing of the page
            t_base = blank.evaluate(BASELINE_JS)[0] / 1000.0
    finally:
        server.shutdown()
        server.server_close()
    return t_page, t_base, phases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instructions", type=int, default=1_000_000)
    n = ap.parse_args().instructions
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("OTPU_RUN_DIR", tmp)
        path, t_write, c_write, t_base, rows, nrec = bench_write(n, Path(tmp))
        size = path.stat().st_size
        print(f"profile of {rows:,} instructions ({nrec:,} records) written in {t_write:.2f} s "
              f"({c_write:.2f} s of CPU), "
              f"{size / 1e6:.1f} MB: goal {WRITE_GOAL_S:g} s, ratio {t_write / WRITE_GOAL_S:.2f}; "
              f"plain columns as gzip JSON {t_base:.2f} s, ratio {t_write / t_base:.2f}")
        why = headless.browser_missing()
        if why:
            print(f"page: not measured ({why})")
            return
        t_page, t_load, phases = bench_page(path, Path(tmp) / "chromium")
        steps = ", ".join(f"{k} {v / 1000:.2f} s" for k, v in phases.items())
        print(f"page interactive in {t_page:.2f} s ({steps}): goal {PAGE_GOAL_S:g} s, "
              f"ratio {t_page / PAGE_GOAL_S:.2f}; "
              f"loading the same JSON with nothing drawn {t_load:.2f} s, ratio {t_page / t_load:.2f}")


if __name__ == "__main__":
    main()
