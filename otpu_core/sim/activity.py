"""Activity windows: the card's P and Q trace records from the timing model's intervals.

The card closes a window every WINDOW_CYCLES cycles (CAPS[23:16] = 10 on the board) and records
how many of its cycles each port and unit spent on what (host.md 1.4). The timing model keeps,
per activity, intervals [lo, hi) with a weight (the fraction of each cycle the activity used);
a window's count is the weighted overlap, computed for all windows at once from the piecewise
linear integral F(t) = sum_i w_i * clip(t - lo_i, 0, hi_i - lo_i).
"""
from __future__ import annotations

import numpy as np

from .. import tracefmt

WINDOW_CYCLES = 1024
P_KEYS = tracefmt.P_FIELDS      # bm bd am aq mx fm fq fv fc
Q_KEYS = tracefmt.Q_FIELDS      # bs as ms mb ff ld


class Activity:
    """Weighted intervals per field of the P and Q records."""

    def __init__(self):
        self.spans: dict[str, list[tuple[int, int, float]]] = {k: [] for k in P_KEYS + Q_KEYS}

    def add(self, key: str, lo: int, hi: int, weight: float = 1.0) -> None:
        if hi > lo and weight > 0:
            self.spans[key].append((lo, hi, weight))

    def clear(self) -> None:
        for v in self.spans.values():
            v.clear()

    def windows(self, start: int, stop: int, size: int = WINDOW_CYCLES) -> tuple[np.ndarray, np.ndarray]:
        """(window end cycles, counts [windows, fields]) over [start, stop); the last window may be short."""
        edges = np.arange(start, stop, size, dtype=np.int64)
        edges = np.append(edges, stop)
        counts = np.zeros((len(edges) - 1, len(P_KEYS) + len(Q_KEYS)), np.int64)
        for j, key in enumerate(P_KEYS + Q_KEYS):
            if self.spans[key]:
                integral = _integral(np.array(self.spans[key], np.float64), edges.astype(np.float64))
                counts[:, j] = np.rint(np.diff(integral)).astype(np.int64)
        return edges[1:], counts

    def records(self, start: int, stop: int, size: int = WINDOW_CYCLES) -> list[tuple[int, list[int]]]:
        """(cycle, records) per window: a P group then a Q group at the window's last cycle,
        cycles counted from `start` (the run's first cycle)."""
        ends, counts = self.windows(start, stop, size)
        out = []
        prev = start
        for end, row in zip(ends.tolist(), counts.tolist()):
            last = end - 1 - start
            n = end - prev
            out.append((end - 1, tracefmt.window(tracefmt.P, last, n, row[:len(P_KEYS)])
                        + tracefmt.window(tracefmt.Q, last, n, row[len(P_KEYS):])))
            prev = end
        return out


def _integral(spans: np.ndarray, t: np.ndarray) -> np.ndarray:
    """F(t) for intervals spans[:, 0..1] with weights spans[:, 2]: sum of w * overlap([lo, hi), (-inf, t))."""
    out = np.zeros_like(t)
    for col, sign in ((0, 1.0), (1, -1.0)):
        order = np.argsort(spans[:, col])
        at, w = spans[order, col], spans[order, 2]
        cw, cwa = np.concatenate([[0], np.cumsum(w)]), np.concatenate([[0], np.cumsum(w * at)])
        k = np.searchsorted(at, t, side="left")            # intervals whose edge is before t
        out += sign * (cw[k] * t - cwa[k])
    return out
