"""The host's half of expert offload: serving the card's mailbox requests (kernels/moe.py) by copying
missing experts into LRU slots, and counting what that costs.

`ExpertServer(dram, layout, expert_bytes)` works through any object with `read(addr, n)` and
`write(addr, data)` (every Backend). `reset()` writes an empty mailbox and a directory with
every expert absent; `preload(layer, experts)` places some before a run. `poll()` is called
while a program runs (`run_serving` does it): when the card's seq is one past `served`, it reads
the request row and, for each chosen expert not present, evicts its layer's least recently
requested expert (its entry first marked absent), writes the expert's blob into that slot, marks
the entry {slot, 1.0}; then writes served = seq, which releases the card's WAITW. Every expert of
a request counts as used, so recency is per request: the card sends none when its experts are all
present, and the host cannot see those uses.

`Stats`: requests, experts streamed, bytes, evictions; `hit_rate(chosen)` against the number of
expert choices the card made (tokens x layers x k, which the caller knows).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import UsageError
from ..kernels.moe import OffloadLayout

PRESENT, ABSENT = 1.0, 0.0


class OffloadError(UsageError):
    """The card's mailbox says something the protocol does not allow."""


@dataclass
class Stats:
    requests: int = 0
    streamed: int = 0          # experts copied into slots
    bytes: int = 0
    evictions: int = 0
    seconds: float = 0.0       # host time spent serving

    def hit_rate(self, chosen: int) -> float:
        """Share of `chosen` expert choices found present (1.0 when there were none)."""
        return 1.0 - self.streamed / chosen if chosen else 1.0


def _f32(x: float) -> np.ndarray:
    return np.array([x], np.float32)


class ExpertServer:
    def __init__(self, dram, layout: OffloadLayout, expert_bytes: Callable[[int, int], np.ndarray]):
        self.dram, self.lay, self.expert_bytes = dram, layout, expert_bytes
        self.resident: list[OrderedDict[int, int]] = [OrderedDict() for _ in range(layout.layers)]  # expert -> slot
        self.stats = Stats()

    def reset(self) -> None:
        """Empty mailbox (seq = served = 0.0), every expert absent, no slot used."""
        lay = self.lay
        self.dram.write(lay.mbox, _f32(0.0))
        self.dram.write(lay.served, _f32(0.0))
        entries = np.zeros((lay.layers * lay.experts, 2), np.uint32)
        self.dram.write(lay.dir, entries)
        for r in self.resident:
            r.clear()
        self.stats = Stats()

    def preload(self, layer: int, experts) -> None:
        for e in experts:
            self._place(layer, int(e))

    def _word(self, addr: int) -> float:
        return float(self.dram.read(addr, 4).view(np.float32)[0])

    def poll(self) -> bool:
        """Serve the card's request if there is one; True if it did."""
        lay = self.lay
        seq, served = self._word(lay.mbox), self._word(lay.served)
        if seq == served:
            return False
        if seq != served + 1:
            raise OffloadError(f"the card's request {seq:g} is not the one after the last served ({served:g}): "
                               "a request was made before the previous one was served (the card must wait for "
                               "served >= seq)")
        t0 = time.perf_counter()
        ids = self.dram.read(lay.row, 4 * lay.k).view(np.float32)
        wanted: dict[int, list[int]] = {}
        for g in ids:
            if not (g == int(g) and 0 <= g < lay.layers * lay.experts):
                raise OffloadError(f"the card asked for expert id {g:g}; ids are 0..{lay.layers * lay.experts - 1}")
            layer, e = divmod(int(g), lay.experts)
            wanted.setdefault(layer, []).append(e)
        for layer, experts in wanted.items():
            res = self.resident[layer]
            for e in experts:
                if e in res:
                    res.move_to_end(e)
            for e in experts:
                if e not in res:
                    self._place(layer, e, keep=set(experts))
        self.dram.write(lay.served, _f32(seq))
        self.stats.requests += 1
        self.stats.seconds += time.perf_counter() - t0
        return True

    def _place(self, layer: int, e: int, keep: set[int] = frozenset()) -> None:
        lay, res = self.lay, self.resident[layer]
        if e in res:
            res.move_to_end(e)
            return
        used = set(res.values())
        free = [s for s in range(lay.slots) if s not in used]
        if free:
            slot = free[0]
        else:
            victim = next(v for v in res if v not in keep)
            slot = res.pop(victim)
            self.dram.write(lay.entry(layer, victim), np.zeros(2, np.uint32))
            self.stats.evictions += 1
        blob = np.ascontiguousarray(self.expert_bytes(layer, e), np.uint8)
        if blob.size != lay.blob.nbytes:
            raise OffloadError(f"expert {e} of layer {layer} is {blob.size} bytes; a slot holds {lay.blob.nbytes}")
        at = lay.slot(layer, slot)
        self.dram.write(at, blob)
        self.dram.write(lay.entry(layer, e), np.array([at, np.float32(PRESENT).view(np.uint32)], np.uint32))
        res[e] = slot
        self.stats.streamed += 1
        self.stats.bytes += blob.size


def run_serving(backend, program, args, server: ExpertServer, budget: int = 4096):
    """Run `program` on `backend` to its HALT, serving the mailbox while it runs; the run's stats."""
    backend.start(program, args)
    while backend.poll(budget):
        server.poll()
    return backend.wait()
