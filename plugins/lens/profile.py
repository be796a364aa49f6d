"""One recorded run turned into a profile: the dict that `fileformat` writes and the page draws.

`build(capture)` decodes each slice's trace records, joins them with the program table (class,
unit, nominal work, source line per pc), rebuilds the DRAM streams, and computes the cycle
account, unit busy cycles, the per-class and per-source tables, the roofline and the findings.
A `Capture` is what an engine (`recorder`) hands over: the records and counters of each slice,
the program, the target and, for a card, the trace buffer's own report (count, drops, wraps).

Instruction rows are stored by column (`INSTR_COLUMNS`), times relative where that keeps the
numbers short: d (dispatch cycle), rdy (ready - d), wait (start - ready), dur (end - start),
rel (MM release - start, else 0), dsw (stream start - start), dsl (stream cycles), starve, deny
(MM: U-record counters). pc indexes the slice's program rows (`PROGRAM_COLUMNS`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from otpu_core.target import Target

from . import analysis, findings, program_table
from .records import Decoded, decode

INSTR_COLUMNS = ("slice", "pc", "d", "rdy", "wait", "dur", "rel", "dsw", "dsl", "starve", "deny")
WINDOW_FIELDS = ("cycle", "n", "bm", "bd", "am", "aq", "mx", "fm", "bs", "as", "ms", "ff", "ld")


@dataclass
class SliceCapture:
    records: np.ndarray | None          # None: the card has no trace (a counters-only profile)
    counters: dict


@dataclass
class Capture:
    kind: str                           # "sim" (timing model), "hw" (a card's trace), "board" (counters only)
    name: str
    workload: str
    target: Target
    instrs: list
    sources: list                       # per pc: source frames (ol.Program.sources)
    slices: list
    clock_mhz: float
    device: str | None = None
    trace: dict | None = None           # a card's trace buffer report (count, drop, depth, keep, wrapped, lost)
    board: dict | None = None           # a card's run statistics and counter deltas
    notes: list = field(default_factory=list)


def config_of(target: Target) -> dict:
    cfg, ua = target.config(), target.uarch
    return {"target": target.name, "S": cfg.S, "D": cfg.D, "MCOLS": cfg.MCOLS, "LANES": cfg.LANES,
            "ACT_BLOCKS": cfg.ACT_BLOCKS, "TMEM_WORDS": cfg.TMEM_WORDS, "DRAM_BYTES": cfg.DRAM_BYTES,
            "IMEM_WORDS": cfg.IMEM_WORDS, "WIN": ua.WIN, "TRACE_DEPTH": ua.TRACE_DEPTH,
            "DRAM_BYTES_PER_CYCLE": ua.DRAM_BYTES_PER_CYCLE, "DRAM_EFFICIENCY": ua.DRAM_EFFICIENCY,
            "DRAM_LATENCY": ua.DRAM_LATENCY, "MXU_LATENCY": ua.MXU_LATENCY, "FIFO_DEPTH": ua.FIFO_DEPTH,
            "MEM": target.platform.get("memory", "")}


def timing_arrays(dec: Decoded, prog: program_table.ProgramTable, fetch: int) -> dict:
    """Absolute per-instruction arrays of one slice, with the program's static columns joined by pc."""
    pc = np.clip(dec.pc, 0, max(prog.size - 1, 0))
    t = {"pc": dec.pc, "dispatch": dec.dispatch, "ready": dec.ready, "start": dec.start, "end": dec.end,
         "release": dec.release, "starve": dec.starve, "bp": dec.bp, "deny": dec.deny, "unit": dec.unit}
    for k in ("cls", "work", "bbytes", "abytes", "macs", "stream", "src"):
        t[k] = getattr(prog, k)[pc] if prog.size else np.zeros(dec.n, np.int64)
    t["ds"], t["de"] = analysis.dram_streams(dec.start, t["stream"], fetch)
    return t


def _instr_columns(sid: int, t: dict) -> dict:
    rel = np.where(t["release"] >= 0, t["release"] - t["start"], 0)
    return {"slice": np.full(t["pc"].size, sid, np.int64), "pc": t["pc"], "d": t["dispatch"],
            "rdy": t["ready"] - t["dispatch"], "wait": t["start"] - t["ready"], "dur": t["end"] - t["start"],
            "rel": rel, "dsw": t["ds"] - t["start"], "dsl": t["de"] - t["ds"], "starve": t["starve"],
            "deny": t["deny"]}


def _windows(dec: Decoded) -> dict:
    return {k: dec.windows.get(k, np.zeros(0, np.int64)) for k in WINDOW_FIELDS}


def _trace_report(cap: Capture, decs: list[Decoded], prog: program_table.ProgramTable) -> dict:
    rep = dict(cap.trace or {})
    rep.update(records=sum(d.records for d in decs), orphans=sum(d.orphans for d in decs),
               unmatched=sum(d.unmatched for d in decs), cut_groups=sum(d.cut_groups for d in decs),
               open_at_end=int(sum(int(d.open.sum()) for d in decs)),
               traced_to=max((d.traced_to for d in decs), default=0),
               mismatched=int(sum(int((d.pc >= prog.size).sum()) for d in decs)))
    # kept first, a full buffer stops recording: its count saturates at the depth, the rest is gone
    rep["full"] = rep.get("keep") == "first" and rep.get("count", 0) >= rep.get("depth", 1 << 62)
    rep["complete"] = not (rep["full"] or rep.get("wrapped") or rep.get("lost") or rep.get("drop") or rep["orphans"]
                           or rep["open_at_end"] or rep["cut_groups"] or rep["mismatched"])
    return rep


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The slices' columns end to end (one slice's as they are: no copy of a million rows)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def build(cap: Capture) -> dict:
    target, cfg, ua = cap.target, cap.target.config(), cap.target.uarch
    sources = program_table.Sources()
    classes: list = []
    prog = program_table.build(cap.name, cap.instrs, cap.sources, target, sources, classes, {})
    profile = {"kind": cap.kind, "name": cap.name, "workload": cap.workload, "device": cap.device,
               "clock_mhz": cap.clock_mhz, "config": config_of(target), "units": list(analysis.UNITS)}
    counters = [s.counters for s in cap.slices]
    cycles = max(int(c.get("CYCLES", 0)) for c in counters)
    instructions = sum(int(c.get("ICOUNT", 0)) for c in counters)
    profile.update(cycles=cycles, instructions=instructions, seconds=cycles / (cap.clock_mhz * 1e6))
    if cap.kind == "board" or any(s.records is None for s in cap.slices):
        return _board_profile(profile, cap, counters, prog, sources, classes)
    decs = [decode(s.records) for s in cap.slices]
    fetch = -(-prog.fetch_bytes // int(ua.DRAM_BYTES_PER_CYCLE * ua.DRAM_EFFICIENCY))
    arrays = [timing_arrays(d, prog, fetch) for d in decs]
    slices = []
    for sid, (dec, t, c) in enumerate(zip(decs, arrays, counters)):
        slices.append({"busy": analysis.unit_busy(t), "counters": {k: int(v) for k, v in c.items()},
                       "buckets": analysis.cycle_account(t, int(c.get("CYCLES", cycles)), fetch, ua.DRAM_LATENCY),
                       "ports": dec.ports, "halt": dec.halt, "fetch": fetch})
    cat = {k: _joined([t[k] for t in arrays]) for k in arrays[0]}
    by_class = analysis.grouped(cat["cls"], cat, len(classes))
    by_src = analysis.grouped(cat["src"], cat, len(sources.entries))
    cols = [_instr_columns(sid, t) for sid, t in enumerate(arrays)]
    macs = int(cat["macs"].sum())
    nbytes = sum(64 * (int(c.get("DRAM_RD", 0)) + int(c.get("DRAM_WR", 0))) for c in counters) or \
        int((cat["bbytes"] + cat["abytes"]).sum()) + prog.fetch_bytes * len(arrays)
    profile.update(
        traced=int(cat["pc"].size),
        roofline=analysis.roofline(cfg, ua, cycles, macs, nbytes, len(arrays)),
        slices=slices, classes=classes,
        class_table=analysis.table_rows(by_class, classes, "class"),
        source_table=analysis.table_rows(by_src, list(range(len(sources.entries))), "src"),
        instrs={"columns": list(INSTR_COLUMNS),
                "data": {k: _joined([c[k] for c in cols]) for k in INSTR_COLUMNS}},
        windows=[_windows(d) for d in decs],
        programs=[{"name": cap.name, "columns": program_table.PROGRAM_COLUMNS, "rows": prog.rows}],
        sources=sources.entries, trace=_trace_report(cap, decs, prog))
    if cap.board is not None:
        profile["board"] = cap.board
    profile["notes"] = cap.notes + findings.notes(profile, cat)
    return profile


def _board_profile(profile: dict, cap: Capture, counters: list, prog, sources, classes) -> dict:
    """No trace: cycles, unit busy and DRAM traffic from the card's counters alone."""
    cfg, ua = cap.target.config(), cap.target.uarch
    c = counters[0]
    beats = sum(int(c.get(k, 0)) for k in ("B_RD", "B_WR", "A_RD", "SW_WR"))
    # no per-instruction MAC count without a trace: the bound is the DRAM traffic alone
    profile.update(traced=0, roofline=analysis.roofline(cfg, ua, profile["cycles"], 0, 64 * beats, 1),
                   slices=[{"busy": {u: int(c.get(k, 0)) for u, k in zip(analysis.UNITS, (
                       "DMA_BUSY", "MXU_BUSY", "QNT_BUSY", "VPU_BUSY", "COLL_BUSY"))},
                       "counters": {k: int(v) for k, v in c.items()}, "buckets": {}, "ports": {}, "halt": None}],
                   classes=classes, class_table=[], source_table=[],
                   instrs={"columns": list(INSTR_COLUMNS), "data": {k: np.zeros(0, np.int64) for k in INSTR_COLUMNS}},
                   windows=[], programs=[{"name": cap.name, "columns": program_table.PROGRAM_COLUMNS,
                                          "rows": prog.rows}],
                   sources=sources.entries, trace=dict(cap.trace or {}, complete=False))
    if cap.board is not None:
        profile["board"] = cap.board
    profile["notes"] = cap.notes + findings.notes(profile, None)
    return profile
