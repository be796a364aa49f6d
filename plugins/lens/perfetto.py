"""Chrome trace-event JSON of a profile, for ui.perfetto.dev and chrome://tracing.

One process per slice ("slice N (target)"), one thread (track) per unit with its instructions
as complete `X` slices (name = mnemonic class, args: pc, assembly, source line, dispatch,
ready, DRAM stream), plus a "DRAM" track with each transfer as a slice; units run one
instruction at a time, so every track's slices are disjoint and nest trivially. The activity
windows become counter (`C`) tracks in percent of each window: port B, port A, MXU compute,
DRAM stalls, TMEM losses, MXU FIFO empty (starved while streaming); with a card's records that
carry it, the MXU FIFO's mean level in chunks too. Timestamps are microseconds at the profile's clock (fractional),
`displayTimeUnit` ns. Metadata (`M`) names processes and threads and orders the tracks.
"""
from __future__ import annotations

import json

import numpy as np

from .analysis import UNITS

DRAM_TID = len(UNITS)
COUNTERS = (("port B %", ("bm", "bd")), ("port A %", ("am", "aq")), ("MXU compute %", ("mx",)),
            ("DRAM stalls %", ("bs", "as")), ("TMEM losses %", ("fm",)), ("MXU FIFO empty %", ("ms",)))
FIFO_LEVEL = "MXU FIFO level (chunks)"


def events(p: dict) -> list[dict]:
    us = 1.0 / float(p["clock_mhz"])
    cols = p["instrs"]["data"]
    prog = p["programs"][0]["rows"]
    srcs = p["sources"]
    out: list[dict] = []
    nslices = max(1, len(p.get("slices", [])))
    for sid in range(nslices):
        out.append({"name": "process_name", "ph": "M", "pid": sid, "tid": 0,
                    "args": {"name": f"slice {sid} ({p['config']['target']})"}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": sid, "tid": 0, "args": {"sort_index": sid}})
        for tid, name in enumerate(UNITS + ("DRAM",)):
            out.append({"name": "thread_name", "ph": "M", "pid": sid, "tid": tid, "args": {"name": name}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": sid, "tid": tid, "args": {"sort_index": tid}})
    d = cols["d"]
    ready = d + cols["rdy"]
    start = ready + cols["wait"]
    end = start + cols["dur"]
    ds = start + cols["dsw"]
    de = ds + cols["dsl"]
    for i in range(d.size):
        pc = int(cols["pc"][i])
        row = prog[pc] if 0 <= pc < len(prog) else [pc, "?", "?", -1, -1]
        sid, unit = int(cols["slice"][i]), int(row[3])
        src = srcs[row[4]] if row[4] >= 0 else None
        args = {"pc": pc, "asm": row[2], "dispatch": int(d[i]), "ready": int(ready[i]), "index": i}
        if src is not None:
            args["source"] = f"{src['file']}:{src['line']} {src['text']}"
        if cols["dsl"][i]:
            args["dram_cycles"] = int(cols["dsl"][i])
        out.append({"name": row[1], "cat": UNITS[unit] if 0 <= unit < len(UNITS) else "unit", "ph": "X",
                    "pid": sid, "tid": max(unit, 0), "ts": float(start[i]) * us,
                    "dur": float(max(int(end[i] - start[i]), 0)) * us, "args": args})
        if cols["dsl"][i]:
            out.append({"name": f"{row[1]} transfer", "cat": "DRAM", "ph": "X", "pid": sid, "tid": DRAM_TID,
                        "ts": float(ds[i]) * us, "dur": float(de[i] - ds[i]) * us, "args": {"pc": pc, "index": i}})
    for sid, w in enumerate(p.get("windows", [])):
        if not len(w.get("cycle", [])):
            continue
        n = np.maximum(np.asarray(w["n"]), 1)
        begin = np.asarray(w["cycle"]) - np.asarray(w["n"])
        tracks = [(name, sum(np.asarray(w[k]) for k in keys) * 100.0 / n) for name, keys in COUNTERS]
        if np.any(np.asarray(w.get("ff", [])) > 0):          # a card's records: the FIFO's mean level
            tracks.append((FIFO_LEVEL, np.asarray(w["ff"]) / n))
        for name, val in tracks:
            for t, v in zip(begin.tolist(), val.tolist()):
                out.append({"name": name, "ph": "C", "pid": sid, "tid": 0, "ts": t * us,
                            "args": {"value": round(v, 2)}})
    return out


def chrome_json(p: dict) -> str:
    meta = {"profile": p["name"], "kind": p["kind"], "cycles": p["cycles"], "clock_mhz": p["clock_mhz"]}
    return json.dumps({"traceEvents": events(p), "displayTimeUnit": "ns", "metadata": meta}, separators=(",", ":"))
