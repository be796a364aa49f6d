"""Where the cycles went: DRAM streams, the port-B cycle account, class and source tables, roofline.

Inputs are one slice's decoded trace (`records.Decoded`) and its program table. All of it is
numpy over the instruction arrays, so a million instructions take well under a second.

DRAM streams. The machine serves DRAM transfers in issue order at the sustained rate
(docs/simulator.md): an instruction's stream starts at max(its start, the previous stream's
end) and lasts ceil(bytes / rate) cycles, after the program fetch at the run start. That is a
max-plus scan, computed in closed form: de_i = C_i + max_{j<=i}(start_j - C_{j-1}).

The cycle account gives every cycle of the run one reason, the first that holds in this order:
port B streaming (MXU weights, DMA), port A streaming (MM scales, QST writes), program fetch
(until its data are in),
DRAM latency (a transfer's data still in flight), MXU computing, VPU busy, quantiser busy,
collective busy, DMA busy (not streaming), waiting on dependencies (an instruction dispatched and
not started), nothing in flight. The buckets add up to the run's cycles.
"""
from __future__ import annotations

import numpy as np

UNITS = ("DMA", "MXU", "QUANT", "VPU", "COLL")
BUCKETS = ("port B streaming", "port A streaming", "program fetch", "DRAM latency", "MXU computing", "VPU busy",
           "quantiser busy", "collective busy", "DMA busy", "waiting on dependencies", "nothing in flight")


def dram_streams(start: np.ndarray, length: np.ndarray, fetch: int) -> tuple[np.ndarray, np.ndarray]:
    """(stream start, stream end) per instruction in issue order; length 0 = no DRAM (ds = de = start)."""
    uses = length > 0
    s = np.concatenate([[0], start[uses]]).astype(np.int64)
    ln = np.concatenate([[fetch], length[uses]]).astype(np.int64)
    c = np.cumsum(ln)
    c_prev = c - ln
    de_all = c + np.maximum.accumulate(s - c_prev)
    ds, de = start.astype(np.int64).copy(), start.astype(np.int64).copy()
    de[uses] = de_all[1:]
    ds[uses] = de_all[1:] - ln[1:]
    return ds, de


def _union(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if not lo.size:
        return lo, hi
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    top = np.maximum.accumulate(hi)
    new = np.concatenate([[True], lo[1:] > top[:-1]])
    starts = lo[new]
    ends = np.maximum.reduceat(top, np.nonzero(new)[0])
    return starts, ends


def _covered(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    if not starts.size:
        return np.zeros(points.size, bool)
    i = np.searchsorted(starts, points, side="right") - 1
    ok = i >= 0
    out = np.zeros(points.size, bool)
    out[ok] = ends[i[ok]] > points[ok]
    return out


def account(cycles: int, spans: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Cycles per category (len(spans) + 1, the last 'none') over [0, cycles): each cycle goes to the
    first category whose intervals cover it."""
    unions = [_union(np.clip(lo, 0, cycles), np.clip(hi, 0, cycles)) for lo, hi in spans]
    points = np.sort(np.concatenate([np.array([0, cycles], np.int64)] + [a for u in unions for a in u]))
    # repeated points leave empty segments, which count nothing
    seg = np.diff(points)
    left = points[:-1]
    first = np.full(left.size, len(spans))
    todo = np.flatnonzero(seg)               # segments not yet given to a category, in priority order
    for c, (s, e) in enumerate(unions):
        if not todo.size:
            break
        cov = _covered(left[todo], s, e)
        first[todo[cov]] = c
        todo = todo[~cov]
    return np.bincount(first, weights=seg, minlength=len(spans) + 1).astype(np.int64)


def cycle_account(t: dict, cycles: int, fetch: int, latency: int) -> dict[str, int]:
    """The port-B cycle account of one slice (`t`: the instruction arrays of `timing_arrays`)."""
    streams = t["de"] > t["ds"]
    b, a = streams & (t["bbytes"] > 0), streams & (t["bbytes"] == 0)
    unit = t["unit"]

    def on(u):
        m = unit == u
        return t["start"][m], t["end"][m]
    spans = [(t["ds"][b], t["de"][b]), (t["ds"][a], t["de"][a]), (np.array([0]), np.array([fetch + latency])),
             (t["de"][streams], t["de"][streams] + latency), on(1), on(3), on(2), on(4), on(0),
             (t["dispatch"], t["start"])]
    return dict(zip(BUCKETS, (int(v) for v in account(cycles, spans))))


def unit_busy(t: dict) -> dict[str, int]:
    dur = t["end"] - t["start"]
    return {name: int(dur[t["unit"] == u].sum()) for u, name in enumerate(UNITS)}


def grouped(keys: np.ndarray, t: dict, n_keys: int) -> dict[str, np.ndarray]:
    """Per key: count, busy, nominal work, dependency wait, unit wait, MACs, DRAM bytes, MXU starve."""
    ok = keys >= 0
    every = bool(ok.all())
    k = keys if every else keys[ok]

    def total(v):
        return np.bincount(k, weights=v if every else v[ok], minlength=n_keys).astype(np.int64)
    dep = np.maximum(t["ready"] - t["dispatch"] - 1, 0)
    return {"count": np.bincount(k, minlength=n_keys).astype(np.int64), "busy": total(t["end"] - t["start"]),
            "work": total(t["work"]), "dep_wait": total(dep), "unit_wait": total(t["start"] - t["ready"]),
            "macs": total(t["macs"]), "bytes": total(t["bbytes"] + t["abytes"]), "starve": total(t["starve"])}


def table_rows(groups: dict[str, np.ndarray], names: list, key: str) -> list[dict]:
    out = []
    for i, name in enumerate(names):
        if groups["count"][i]:
            out.append({key: name, **{k: int(v[i]) for k, v in groups.items()}})
    return sorted(out, key=lambda r: -r["busy"])


def roofline(cfg, ua, cycles: int, macs: int, nbytes: int, slices: int) -> dict:
    """Arithmetic intensity (MACs per DRAM byte) against attained MACs per cycle, with the ridge point:
    the bound is the fewer-cycles-impossible limit max(bytes / DRAM rate, MACs / MXU peak)."""
    peak_macs = cfg.D * cfg.MCOLS * slices
    peak_bytes = ua.DRAM_BYTES_PER_CYCLE * ua.DRAM_EFFICIENCY * slices
    mem_cycles, mxu_cycles = nbytes / peak_bytes, macs / peak_macs
    bound_cycles = max(mem_cycles, mxu_cycles)
    return {"macs": int(macs), "bytes": int(nbytes), "peak_macs": peak_macs, "peak_bytes": peak_bytes,
            "ridge": peak_macs / peak_bytes, "intensity": macs / nbytes if nbytes else 0.0,
            "attained": macs / cycles if cycles else 0.0,
            "bound": "DRAM" if mem_cycles >= mxu_cycles else "MXU", "bound_cycles": bound_cycles,
            "efficiency": bound_cycles / cycles if cycles else 0.0}
