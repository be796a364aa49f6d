"""otpu-serve on the simulated card: what continuous batching buys, what a reused prefix saves, and
what the scheduler costs.

One server (in this process, on a loopback port, the shipped model, one simulated card) answers,
through the official openai client:
- 8 requests one after another (the baseline) and the same 8 as concurrent streams: aggregate
  generated tokens/s of each and their ratio, by the wall clock and as the card models it (tokens
  over the card's counted cycles at its core clock);
- time to first token of a long system prompt the first time and again with its page reused;
- the scheduler's own time per generated token (admission, host sampling, streaming: the
  worker's wall time outside the card's runs).
Every program is compiled in a warm-up pass first, so compile time is in no number.

Usage: python benchmarks/bench_serve.py [--tokens 16] [--streams 8] [--no-prefix]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

SYSTEM = ("You answer questions about the Python language and its standard library. Keep every answer short, "
          "precise and correct, and show code where code helps. ") * 7      # its own tokens fill the first page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=16, help="tokens each request generates")
    ap.add_argument("--streams", type=int, default=8, help="requests (sequential, then concurrent)")
    ap.add_argument("--no-prefix", action="store_true", help="skip the reused-prefix TTFT (a 306-token prefill)")
    ap.add_argument("--no-batching", action="store_true", help="skip the sequential / concurrent comparison")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        os.environ["OTPU_RUN_DIR"], os.environ["OTPU_CACHE"] = f"{d}/run", f"{d}/cache"
        Path(f"{d}/run").mkdir()
        run(args)


def run(args) -> None:
    import openai

    from otpu_serve.cards import ServeOptions
    from otpu_serve.server import HttpOptions, Server
    server = Server(ServeOptions(["sim:bench"], max_batch=args.streams), HttpOptions(port=0, queue=args.streams))
    t = threading.Thread(target=server.serve, daemon=True)
    t.start()
    oa = openai.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0, timeout=3600)
    worker = server.sched.workers[0]
    hz = server.cards[0].core_hz
    prompts = [f"Item {i}:" for i in range(args.streams)]

    def one(p: str, n: int) -> int:
        r = oa.completions.create(model=server.model.name, prompt=p, temperature=0, max_tokens=n)
        return r.usage.completion_tokens

    def stream(p: str, n: int, out: list) -> None:
        got = 0
        for c in oa.completions.create(model=server.model.name, prompt=p, temperature=0, max_tokens=n, stream=True):
            got += bool(c.choices[0].text)
        out.append(got)

    def concurrent(n: int) -> None:
        out: list = []
        ts = [threading.Thread(target=stream, args=(p, n, out)) for p in prompts]
        for x in ts:
            x.start()
        for x in ts:
            x.join()

    def measure(fn):
        c0 = worker.prefill_cost.cycles + worker.decode_cost.cycles
        tok0 = server.metrics.generated._value.get()
        host0, t0 = worker.host_s, time.monotonic()
        fn()
        wall = time.monotonic() - t0
        toks = int(server.metrics.generated._value.get() - tok0)
        cyc = worker.prefill_cost.cycles + worker.decode_cost.cycles - c0
        return toks, wall, cyc / hz, worker.host_s - host0

    try:
        if not args.no_batching:
            batching(args, one, concurrent, measure, prompts)
        if not args.no_prefix:
            prefix(oa, server)
    finally:
        server.stop()
        t.join(timeout=60)


def batching(args, one, concurrent, measure, prompts) -> None:
    """The same requests one after another, then as concurrent streams."""
    print("warm-up (compiling every program once) ...", flush=True)
    for p in prompts:
        one(p, 2)
    concurrent(2)
    seq = measure(lambda: [one(p, args.tokens) for p in prompts])
    con = measure(lambda: concurrent(args.tokens))
    print(f"{'':28} {'tokens':>7} {'wall s':>8} {'tok/s':>8} {'card s':>9} {'card tok/s':>11}")
    for name, (toks, wall, card, _) in ((f"{args.streams} sequential requests", seq),
                                        (f"{args.streams} concurrent streams", con)):
        print(f"{name:28} {toks:7d} {wall:8.2f} {toks / wall:8.2f} {card:9.4f} {toks / card:11.1f}")
    print(f"continuous batching: x{(con[0] / con[1]) / (seq[0] / seq[1]):.2f} aggregate tok/s (wall), "
          f"x{(con[0] / con[2]) / (seq[0] / seq[2]):.2f} (card-modelled)")
    for name, (toks, _, _, host) in (("sequential", seq), ("concurrent", con)):
        print(f"scheduler overhead ({name}): {1000 * host / toks:.2f} ms per token "
              f"(worker wall time outside the card's runs)")


def prefix(oa, server) -> None:
    """TTFT of a long system prompt the first time, then with its first page reused."""
    worker, hz = server.sched.workers[0], server.cards[0].core_hz

    def ttft(q: str) -> tuple[float, int, float]:
        c0, t0 = worker.prefill_cost.cycles, time.monotonic()
        s = oa.chat.completions.create(model=server.model.name, temperature=0, max_tokens=1, stream=True,
                                       stream_options={"include_usage": True},
                                       messages=[{"role": "system", "content": SYSTEM},
                                                 {"role": "user", "content": q}])
        first, cached = None, 0
        for c in s:
            if first is None and c.choices and (c.choices[0].delta.content or c.choices[0].finish_reason):
                first = time.monotonic() - t0
            if c.usage:
                cached = c.usage.prompt_tokens_details.cached_tokens
        return first, cached, (worker.prefill_cost.cycles - c0) / hz
    cold, n0, card0 = ttft("How do I sort a list?")
    warm, n1, card1 = ttft("What is a tuple?")
    print(f"TTFT, a long system prompt: {cold:.2f} s cold ({n0} cached tokens), {warm:.2f} s with its "
          f"page reused ({n1} cached tokens): x{cold / warm:.1f}; card prefill {1000 * card0:.1f} ms vs "
          f"{1000 * card1:.1f} ms: x{card0 / card1:.1f}")


if __name__ == "__main__":
    main()
