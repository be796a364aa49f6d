"""What otpu-chat prints about a turn: the stats line, the JSON document, the session summary, progress.

`turn_stats(ex)` is the data (prompt tokens, time to first token, host tok/s, the card's decode
and prefill tok/s at its core clock, Mcycles per token, DRAM GB/s and unit utilisation from the
run counters, a mixture of experts' experts streamed and bytes per token fed, context use, how
the answer ended); `stats_line` renders it as one line and
`--json` serialises the same dict. `StepProgress` shows conversion and image loading: a bar on a
terminal once a step has taken two seconds, plain lines on stderr when piped.
"""
from __future__ import annotations

import sys
import time

UNIT_NAMES = {"MXU_BUSY": "MXU", "VPU_BUSY": "VPU", "DMA_BUSY": "DMA", "QNT_BUSY": "QNT"}
AFTER_S = 2.0
LINE_EVERY_S = 2.0


def _r(x, n=2):
    return None if x is None else round(x, n)


def turn_stats(ex, session) -> dict:
    t = ex.turn
    hz = t.core_hz
    card = session.opts.engine == "card" and hz
    out = {"prompt_tokens": len(ex.prompt_ids), "fed_tokens": t.prompt_tokens, "tokens": len(t.tokens),
           "ttft_s": _r(t.ttft, 3), "seconds": _r(t.seconds, 3), "host_tok_s": _r(t.host_tok_s),
           "end": t.end, "context": t.context, "context_max": min(session.opts.ctx, session.model.config.context)}
    if card:
        dec, pre = t.decode, t.prefill
        out["card"] = {
            "core_mhz": round(hz / 1e6, 2),
            "decode_tok_s": _r(dec.tok_s(hz)), "prefill_tok_s": _r(pre.tok_s(hz)),
            "mcycles_per_token": _r(dec.cycles / dec.tokens / 1e6, 3) if dec.tokens else None,
            "dram_gbs": _r(dec.dram_gbs(hz)), "util": {UNIT_NAMES[k]: round(v, 3) for k, v in dec.util().items()},
            "runs": dec.runs + pre.runs,
        }
        if t.experts is not None:          # a mixture of experts: what the host streamed into the card's slots
            fed = t.prompt_tokens + max(len(t.tokens) - 1, 0)
            out["card"]["experts"] = {"requests": t.experts.requests, "streamed": t.experts.streamed,
                                      "bytes": t.experts.bytes, "bytes_per_token": round(t.experts.bytes / fed)}
    return out


def stats_line(st: dict) -> str:
    parts = [f"prompt {st['prompt_tokens']} tok"]
    if st["ttft_s"] is not None:
        parts.append(f"TTFT {st['ttft_s']:.2f} s")
    host = f", {st['host_tok_s']:.1f} tok/s host" if st["host_tok_s"] else ""
    parts.append(f"{st['tokens']} tok{host}")
    c = st.get("card")
    if c:
        card = []
        if c["decode_tok_s"]:
            card.append(f"{c['decode_tok_s']:.1f} tok/s decode")
        if c["prefill_tok_s"]:
            card.append(f"{c['prefill_tok_s']:.1f} prefill")
        if c["mcycles_per_token"]:
            card.append(f"{c['mcycles_per_token']:.2f} Mcyc/tok at {c['core_mhz']:g} MHz")
        if c["dram_gbs"] is not None:
            card.append(f"DRAM {c['dram_gbs']:.2f} GB/s")
        if c["util"]:
            card.append(" ".join(f"{k} {100 * v:.0f}%" for k, v in c["util"].items()))
        if c.get("experts"):
            card.append(f"{c['experts']['streamed']} experts streamed, {c['experts']['bytes_per_token'] / 1024:.1f} "
                        "KiB/tok")
        parts.append("card " + ", ".join(card))
    parts.append(f"ctx {st['context']}/{st['context_max']}")
    if st["end"] not in ("eos", ""):
        parts.append({"max_tokens": "stopped at --max-tokens", "stopped": "interrupted",
                      "context": "context full"}.get(st["end"], st["end"]))
    return "[" + " · ".join(parts) + "]"


def session_summary(session) -> str:
    h = session.history
    if not h:
        return "no turns yet"
    tin = sum(len(e.prompt_ids) for e in h)
    tout = sum(len(e.turn.tokens) for e in h)
    rates = [e.turn.host_tok_s for e in h if e.turn.host_tok_s]
    lines = [f"model {session.model.name} ({session.model.config.family}, {session.opts.fmt}) on {session.device}, "
             f"engine {session.opts.engine}",
             f"sampling: temperature {session.sampling.temperature:g}, top-k {session.sampling.top_k}, "
             f"top-p {session.sampling.top_p:g}, repeat penalty {session.sampling.repeat_penalty:g}, "
             f"seed {session.sampling.seed}",
             f"turns {len(h)}, prompt tokens {tin}, generated {tout}"
             + (f", average {sum(rates) / len(rates):.1f} tok/s host" if rates else ""),
             "last turn " + stats_line(turn_stats(h[-1], session))]
    return "\n".join(lines)


class StepProgress:
    """progress(step, done, total, what): a Rich bar on a terminal after AFTER_S, lines on stderr otherwise."""

    def __init__(self, console, enabled: bool = True):
        self.console, self.enabled = console, enabled
        self.t0: dict[str, float] = {}
        self.last_line = 0.0
        self.bar = None
        self.task = None

    def __call__(self, step: str, done: int, total: int, what: str) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        t0 = self.t0.setdefault(step, now)
        finished = done >= total
        if self.console.is_terminal:
            if self.bar is None and now - t0 >= AFTER_S and not finished:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
                self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                    TimeElapsedColumn(), console=self.console, transient=True)
                self.bar.start()
                self.task = self.bar.add_task(step, total=total)
            if self.bar is not None:
                self.bar.update(self.task, completed=done, total=total, description=f"{step} {what}")
                if finished:
                    self.stop()
        elif now - t0 >= AFTER_S and (finished or now - self.last_line >= LINE_EVERY_S):
            print(f"otpu-chat: {step}: {done}/{total} {what}", file=sys.stderr, flush=True)
            self.last_line = now
        if finished:
            self.t0.pop(step, None)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
