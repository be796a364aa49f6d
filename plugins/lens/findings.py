"""Findings: what a profile says about its run, in plain sentences, each with a level.

Levels are good, info, warn and bad. The thresholds are those a reader would act on: at (95%)
or near (85%) the roofline, cycles off the DRAM stream before, between and after the
transfers, the source lines the MXU waited on (each at least 1% of the cycles), TMEM
arbitration losses, MXU starvation and port-B waiting above 2%, a VPU busy over 85% of the
run, a DMA share of port B above 10%, and anything the trace lost.
"""
from __future__ import annotations

import numpy as np

AT_ROOF, NEAR_ROOF = 0.95, 0.85
SMALL = 0.02                 # counters worth a sentence above 2% of the cycles
SOURCE_SHARE = 0.01


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _where(src: dict) -> str:
    text = f"{src['file']}:{src['line']} ({src['func']})"
    if src["chain"]:
        outer = src["chain"][-1]
        text += f" called from {outer['file']}:{outer['line']}"
    return text


def notes(p: dict, t: dict | None) -> list[dict]:
    out: list[dict] = []

    def say(level: str, text: str) -> None:
        out.append({"level": level, "text": text})
    cycles = max(int(p["cycles"]), 1)
    roof = p["roofline"]
    eff, bound = roof["efficiency"], roof["bound"]
    limit = (f"{roof['bytes']:,} DRAM bytes at {roof['peak_bytes']:g} bytes/cycle" if bound == "DRAM"
             else f"{roof['macs']:,} MACs at {roof['peak_macs']} per cycle")
    if eff >= AT_ROOF:
        say("good", f"At the roofline: {limit} need {roof['bound_cycles']:,.0f} cycles, the run took {cycles:,} "
                    f"({_pct(eff)}).")
    elif eff >= NEAR_ROOF:
        say("good", f"Near the roofline: {limit} need {roof['bound_cycles']:,.0f} cycles, the run took {cycles:,} "
                    f"({_pct(eff)}).")
    else:
        say("warn" if eff < 0.5 else "info",
            f"At {_pct(eff)} of the roofline: {limit} need {roof['bound_cycles']:,.0f} cycles, the run took "
            f"{cycles:,}; the cycle account shows where the rest went.")
    _trace_notes(p, say)
    counters = p["slices"][0]["counters"] if p["slices"] else {}
    traced = p.get("traced", 0)
    if p["instructions"] > traced and t is not None:
        say("info", f"{p['instructions'] - traced:,} of {p['instructions']:,} instructions retire in the sequencer "
                    "(LI, ADDI, LOOP, NOP, RLD, HALT) and leave no trace record.")
    if t is not None and t["pc"].size:
        _stream_notes(p, t, cycles, say)
        _mxu_wait_notes(p, t, cycles, say)
    for name, text in (("TMEM_DENY", "MM write-backs lost TMEM bank arbitration"),
                       ("MXU_STARVE", "The MXU was starved of weight chunks"),
                       ("B_STALL", "Port-B users waited for DRAM")):
        v = int(counters.get(name, 0))
        if v > SMALL * cycles:
            say("warn", f"{text} for {v:,} cycles ({_pct(v / cycles)}; counter {name}).")
    busy = p["slices"][0]["busy"] if p["slices"] else {}
    if busy.get("VPU", 0) > 0.85 * cycles:
        say("warn", f"VPU-bound: the VPU was busy {_pct(busy['VPU'] / cycles)} of the run; fewer or fused vector "
                    "operations (peepholes) shorten it.")
    ports = p["slices"][0].get("ports") if p["slices"] else {}
    if ports and ports.get("bmxu", 0) + ports.get("bdma", 0):
        share = ports["bdma"] / (ports["bmxu"] + ports["bdma"])
        if share > 0.10:
            say("info", f"DMA (LD, ST) moved {_pct(share)} of the port-B beats ({ports['bdma']:,} of "
                        f"{ports['bmxu'] + ports['bdma']:,}); MXU weights the rest.")
    return out


def _trace_notes(p: dict, say) -> None:
    tr = p.get("trace") or {}
    if p["kind"] == "board":
        say("warn", "This bitstream has no trace buffer: the profile holds the card's counters only "
                    "(no timeline, no instruction or source tables).")
        return
    if tr.get("drop"):
        say("bad", f"The trace capture queue dropped {tr['drop']:,} events (TRACE_DROP): some instructions have "
                   "no start or end record and their timing is approximate.")
    if tr.get("wrapped"):
        first = p["instrs"]["data"]["d"]
        begin = int(first[0]) if len(first) else 0
        say("warn", f"The trace ring wrapped: {tr.get('lost', 0):,} of {tr.get('count', 0):,} records were "
                    f"overwritten (depth {tr.get('depth', 0):,}); the profile starts at cycle {begin:,} and "
                    f"{tr.get('orphans', 0):,} records of instructions dispatched before it were dropped.")
    elif tr.get("full"):
        say("warn", f"The trace buffer filled at {tr.get('depth', 0):,} records (keep first): the trace stops at "
                    f"cycle {tr.get('traced_to', 0):,} of {p['cycles']:,}, later instructions are not in it, and "
                    f"{tr.get('open_at_end', 0):,} still running there are closed at that cycle.")
    if tr.get("mismatched"):
        say("bad", f"{tr['mismatched']:,} traced instructions name a pc outside the loaded program: the trace is "
                   "not this program's.")


def _stream_notes(p: dict, t: dict, cycles: int, say) -> None:
    streams = t["de"] > t["ds"]
    if not streams.any() or p["roofline"]["bound"] != "DRAM":
        return
    first, last = int(t["ds"][streams].min()), int(t["de"][streams].max())
    busy = p["slices"][0]["buckets"]
    streaming = busy.get("port B streaming", 0) + busy.get("port A streaming", 0)
    gaps = max(0, (last - first) - streaming)
    tail = max(0, cycles - last)
    off = first + gaps + tail
    if off > SMALL * cycles:
        say("info", f"{off:,} cycles ({_pct(off / cycles)}) are off the DRAM stream: {first:,} before the first "
                    f"transfer (prologue), {gaps:,} in gaps between transfers, {tail:,} after the last (epilogue).")


def _mxu_wait_notes(p: dict, t: dict, cycles: int, say) -> None:
    src = t["src"]
    ok = (src >= 0) & (t["starve"] > 0)
    if not ok.any():
        return
    per = np.bincount(src[ok], weights=t["starve"][ok], minlength=len(p["sources"]))
    top = [i for i in np.argsort(-per)[:3] if per[i] >= SOURCE_SHARE * cycles]
    if top:
        parts = [f"{_where(p['sources'][i])} {int(per[i]):,} cycles ({_pct(per[i] / cycles)})" for i in top]
        say("info", "The MXU waited for weights longest at " + "; ".join(parts) + ".")
