"""The card's 64-bit trace records: pack, unpack, text lines, ring order, Chrome-trace export.

One format for simulated and hardware runs (host.md 1.4), so every profile tool reads both.
A record is `[63:60]` type and `[59:0]` payload; some records are followed by records that
complete them (a group): D by two O halves of the 104-bit {op, w3, w2, w1}, S by an R when
the start delay overflows 16 bits, U/P/Q/H by one V per counter.

Public API: the type constants (`D, O, S, R, G, E, U, P, Q, H, V`), `UNIT_NAMES`,
`U_FIELDS/P_FIELDS/Q_FIELDS/H_FIELDS`, the packers `dispatch, start, release, end, unit_counters,
halt, window`, `unpack(records) -> list[dict]` (one dict per group, cut groups skipped),
`to_lines(records, sid=0)` (the `T0 D c= ...` text), `ring_order(raw, count, depth)`,
`write(path, records)` / `read(path)` (little-endian uint64 file) and `to_chrome(records)`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .isa import Op

D, S, G, E, U, P, Q, H, O, R, V = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
TYPE_NAMES = {D: "D", S: "S", G: "G", E: "E", U: "U", P: "P", Q: "Q", H: "H", O: "O", R: "R", V: "V"}
UNIT_NAMES = ("DMA", "MXU", "QUANT", "VPU", "COLL")
# The V records following a U record, per unit (units without counters get no U record).
U_FIELDS = {1: ("starve", "bp", "frz", "deny"), 2: ("frz",), 3: ("frz",)}
P_FIELDS = ("bm", "bd", "am", "aq", "mx", "fm", "fq", "fv", "fc")
Q_FIELDS = ("bs", "as", "ms", "mb", "ff", "ld")
H_FIELDS = ("bmxu", "bdma", "amxu", "aq")
M32, M52 = (1 << 32) - 1, (1 << 52) - 1


def _rec(kind: int, payload: int) -> int:
    return (kind << 60) | (payload & ((1 << 60) - 1))


def _values(values) -> list[int]:
    return [_rec(V, (i << 56) | (int(v) & M32)) for i, v in enumerate(values)]


def dispatch(cycle: int, slot: int, pc: int, op: int, w1: int, w2: int, w3: int) -> list[int]:
    """D plus its two O halves carrying {op[7:0], w3, w2, w1} (104 bits, w1 lowest)."""
    wide = (op & 0xFF) << 96 | (w3 & M32) << 64 | (w2 & M32) << 32 | (w1 & M32)
    return [_rec(D, (slot & 15) << 52 | (pc & 0xFFFF) << 32 | cycle & M32),
            _rec(O, wide & M52), _rec(O, 1 << 52 | (wide >> 52) & M52)]


def start(cycle: int, slot: int, unit: int, ready: int) -> list[int]:
    """S (unit start) with the delay since ready; an R follows when the delay needs more than 16 bits."""
    delay = cycle - ready
    if 0 <= delay < 0xFFFF:
        return [_rec(S, (slot & 15) << 52 | (unit & 15) << 48 | delay << 32 | cycle & M32)]
    return [_rec(S, (slot & 15) << 52 | (unit & 15) << 48 | 0xFFFF << 32 | cycle & M32), _rec(R, ready & M32)]


def release(cycle: int, slot: int) -> list[int]:
    return [_rec(G, (slot & 15) << 52 | cycle & M32)]


def end(cycle: int, slot: int) -> list[int]:
    return [_rec(E, (slot & 15) << 52 | cycle & M32)]


def unit_counters(cycle: int, unit: int, values) -> list[int]:
    return [_rec(U, (unit & 15) << 48 | cycle & M32), *_values(values)]


def halt(cycle: int, values) -> list[int]:
    return [_rec(H, cycle & M32), *_values(values)]


def window(kind: int, cycle: int, n: int, values) -> list[int]:
    """A P or Q activity window ending at `cycle`, n cycles long."""
    return [_rec(kind, (n & 0xFFFFFF) << 32 | cycle & M32), *_values(values)]


# -- reading ------------------------------------------------------------------------------------
def _group_len(kind: int, payload: int) -> int:
    if kind == D:
        return 2
    if kind == S:
        return 1 if (payload >> 32) & 0xFFFF == 0xFFFF else 0
    if kind == U:
        return len(U_FIELDS.get((payload >> 48) & 15, ()))
    if kind == P:
        return len(P_FIELDS)
    if kind == Q:
        return len(Q_FIELDS)
    if kind == H:
        return len(H_FIELDS)
    return 0


def unpack(records) -> list[dict]:
    """Decode records (oldest first) into one dict per complete group; groups cut at either end are skipped."""
    recs = [int(r) for r in np.asarray(records, dtype=np.uint64)]
    out, i = [], 0
    while i < len(recs):
        kind, payload = recs[i] >> 60, recs[i] & ((1 << 60) - 1)
        if kind not in (D, S, G, E, U, P, Q, H):  # a follower without its head: cut by the ring start
            i += 1
            continue
        n = _group_len(kind, payload)
        tail = recs[i + 1: i + 1 + n]
        if len(tail) < n or any((t >> 60) != (O if kind == D else R if kind == S else V) for t in tail):
            i += 1 + len(tail) if len(tail) < n else 1
            continue
        cycle = payload & M32
        ev: dict = {"type": TYPE_NAMES[kind], "cycle": cycle}
        if kind in (D, S, G, E):
            ev["slot"] = (payload >> 52) & 15
        if kind == D:
            wide = (tail[0] & M52) | (tail[1] & M52) << 52
            ev.update(pc=(payload >> 32) & 0xFFFF, op=(wide >> 96) & 0xFF, w1=wide & M32,
                      w2=(wide >> 32) & M32, w3=(wide >> 64) & M32)
        elif kind == S:
            ev["unit"] = (payload >> 48) & 15
            delay = (payload >> 32) & 0xFFFF
            ev["ready"] = (tail[0] & M32) if n else cycle - delay
        elif kind == U:
            ev["unit"] = (payload >> 48) & 15
            ev.update(zip(U_FIELDS[ev["unit"]], (t & M32 for t in tail)))
        elif kind in (P, Q):
            ev["n"] = (payload >> 32) & 0xFFFFFF
            ev.update(zip(P_FIELDS if kind == P else Q_FIELDS, (t & M32 for t in tail)))
        elif kind == H:
            ev.update(zip(H_FIELDS, (t & M32 for t in tail)))
        out.append(ev)
        i += 1 + n
    return out


def to_lines(records, sid: int = 0) -> list[str]:
    """The `T<sid> D c= s= ...` lines the RTL simulation prints for the same events."""
    lines = []
    for ev in unpack(records):
        t, c = ev["type"], ev["cycle"]
        if t == "D":
            lines.append(f"T{sid} D c={c} s={ev['slot']} pc={ev['pc']} op={ev['op']:#x} "
                         f"w1={ev['w1']:#x} w2={ev['w2']:#x} w3={ev['w3']:#x}")
        elif t == "S":
            lines.append(f"T{sid} S c={c} s={ev['slot']} u={ev['unit']} r={ev['ready']}")
        elif t in ("G", "E"):
            lines.append(f"T{sid} {t} c={c} s={ev['slot']}")
        elif t == "U":
            kv = " ".join(f"{k}={ev[k]}" for k in U_FIELDS[ev["unit"]])
            lines.append(f"T{sid} U c={c} u={ev['unit']} {kv}")
        elif t in ("P", "Q"):
            kv = " ".join(f"{k}={ev[k]}" for k in (P_FIELDS if t == "P" else Q_FIELDS))
            lines.append(f"T{sid} {t} c={c} n={ev['n']} {kv}")
        else:
            lines.append(f"T{sid} H c={c} " + " ".join(f"{k}={ev[k]}" for k in H_FIELDS))
    return lines


def ring_order(raw, count: int, depth: int) -> np.ndarray:
    """Oldest-first records of a ring buffer that kept the last `depth` of `count` records."""
    raw = np.asarray(raw, dtype=np.uint64)
    if count <= depth:
        return raw[:count].copy()
    k = count % depth
    return np.concatenate([raw[k:depth], raw[:k]])


def write(path: str | Path, records) -> None:
    np.asarray(records, dtype="<u8").tofile(str(path))


def read(path: str | Path) -> np.ndarray:
    return np.fromfile(str(path), dtype="<u8")


def to_chrome(records, core_mhz: float, sid: int = 0) -> str:
    """Chrome trace JSON (chrome://tracing, Perfetto): one complete event per started instruction."""
    events, pending, started = [], {}, {}
    us = 1.0 / core_mhz
    for ev in unpack(records):
        if ev["type"] == "D":
            pending[ev["slot"]] = ev
        elif ev["type"] == "S":
            started[ev["slot"]] = ev
        elif ev["type"] == "E" and ev["slot"] in started:
            s, d = started.pop(ev["slot"]), pending.pop(ev["slot"], {})
            op = d.get("op", 0)
            name = Op(op).name if op in Op._value2member_map_ else f"op {op:#x}"
            events.append({"name": f"{name} pc {d.get('pc', '?')}", "ph": "X", "pid": sid,
                           "tid": UNIT_NAMES[s["unit"]] if s["unit"] < len(UNIT_NAMES) else s["unit"],
                           "ts": s["cycle"] * us, "dur": max(ev["cycle"] - s["cycle"], 1) * us,
                           "args": {k: d[k] for k in ("w1", "w2", "w3") if k in d}})
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns"})
