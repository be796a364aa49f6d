"""The host's half of the card's mailbox requests (kernels/mailbox.py, kernels/moe.py): experts
copied into LRU slots, rows of a table kept on the host, and what that costs.

`HostMailbox` is the protocol: a request is pending when the card's seq is one past served; it
is answered by writing served = seq (anything else the card reads must be written before).
The servers work through any object with `read(addr, n)` and `write(addr, data)` (every Backend)
and are polled while a program runs (`run_serving`).

`RowServer(dram, mailbox, landing, table)`: the card asks for row i of `table` (`table[i]`, float32:
Gemma's per-layer embeddings, a `checkpoint.RowTable` reading each row from the model's file); the
host writes it at `landing`.

`ExpertServer(dram, layout, expert_bytes)`: `reset()` writes an empty mailbox and a directory with
every expert absent; `preload(layer, experts)` places some before a run. `poll()` is called
while a program runs (`run_serving` does it): when the card's seq is one past `served`, it reads
the request row and, for each chosen expert not present, evicts its layer's least recently
requested expert (its entry first marked absent), writes the expert's blob into that slot, marks
the entry {slot, 1.0}; then writes served = seq, which releases the card's WAITW. Every expert of
a request counts as used, so recency is per request: the card sends none when its experts are all
present, and the host cannot see those uses.

`Stats`: requests, experts streamed, bytes, evictions; `hit_rate(chosen)` against the number of
expert choices the card made (tokens x layers x k, which the caller knows). `replay(server,
route)` plays the card's side of the protocol over a routing trace on the host alone (what a
decode would ask for; benchmarks/bench_moe.py sizes offload with it).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import UsageError
from ..kernels.mailbox import Mailbox
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

    def since(self, before: "Stats") -> "Stats":
        """What was served after `before` (a copy of these stats taken earlier)."""
        return Stats(*(getattr(self, f) - getattr(before, f) for f in ("requests", "streamed", "bytes", "evictions",
                                                                         "seconds")))

    def hit_rate(self, chosen: int) -> float:
        """Share of `chosen` expert choices found present (1.0 when there were none)."""
        return 1.0 - self.streamed / chosen if chosen else 1.0


def _f32(x: float) -> np.ndarray:
    return np.array([x], np.float32)


class HostMailbox:
    def __init__(self, dram, mb: Mailbox, row_words: int):
        self.dram, self.mb, self.row_words = dram, mb, row_words
        self._seq = 0.0

    def reset(self) -> None:
        """seq = served = 0.0: no request made, none pending."""
        self.dram.write(self.mb.seq, _f32(0.0))
        self.dram.write(self.mb.served, _f32(0.0))

    def _word(self, addr: int) -> float:
        return float(self.dram.read(addr, 4).view(np.float32)[0])

    def pending(self) -> np.ndarray | None:
        """The request row (float32 [row_words]) when the card has posted one, else None."""
        seq, served = self._word(self.mb.seq), self._word(self.mb.served)
        if seq == served:
            return None
        if seq != served + 1:
            raise OffloadError(f"the card's request {seq:g} is not the one after the last served ({served:g}): "
                               "a request was made before the previous one was served (the card must wait for "
                               "served >= seq)")
        self._seq = seq
        return self.dram.read(self.mb.row, 4 * self.row_words).view(np.float32).copy()

    def done(self) -> None:
        """Answer the pending request (everything it needs must be written already)."""
        self.dram.write(self.mb.served, _f32(self._seq))


def _index(value: float, n: int, what: str) -> int:
    if not (value == int(value) and 0 <= value < n):
        raise OffloadError(f"the card asked for {what} {value:g}; there are {n} (0..{n - 1})")
    return int(value)


class RowServer:
    def __init__(self, dram, mb: Mailbox, landing: int, table):
        self.dram, self.landing, self.table = dram, landing, table
        self.box = HostMailbox(dram, mb, 1)
        self.stats = Stats()

    def reset(self) -> None:
        self.box.reset()
        self.stats = Stats()

    def poll(self) -> bool:
        row = self.box.pending()
        if row is None:
            return False
        t0 = time.perf_counter()
        data = np.ascontiguousarray(self.table[_index(float(row[0]), len(self.table), "table row")])
        self.dram.write(self.landing, data)
        self.box.done()
        self.stats.requests += 1
        self.stats.streamed += 1
        self.stats.bytes += data.nbytes
        self.stats.seconds += time.perf_counter() - t0
        return True


class ExpertServer:
    def __init__(self, dram, layout: OffloadLayout, expert_bytes: Callable[[int, int], np.ndarray]):
        self.dram, self.lay, self.expert_bytes = dram, layout, expert_bytes
        self.box = HostMailbox(dram, layout.mailbox, layout.k)
        self.resident: list[OrderedDict[int, int]] = [OrderedDict() for _ in range(layout.layers)]  # expert -> slot
        self.stats = Stats()

    def reset(self) -> None:
        """Empty mailbox, every expert absent, no slot used."""
        lay = self.lay
        self.box.reset()
        entries = np.zeros((lay.layers * lay.experts, 2), np.uint32)
        self.dram.write(lay.dir, entries)
        for r in self.resident:
            r.clear()
        self.stats = Stats()

    def preload(self, layer: int, experts) -> None:
        for e in experts:
            self._place(layer, int(e))

    def poll(self) -> bool:
        """Serve the card's request if there is one; True if it did."""
        lay = self.lay
        ids = self.box.pending()
        if ids is None:
            return False
        t0 = time.perf_counter()
        wanted: dict[int, list[int]] = {}
        for g in ids:
            layer, e = divmod(_index(float(g), lay.layers * lay.experts, "expert id"), lay.experts)
            wanted.setdefault(layer, []).append(e)
        for layer, experts in wanted.items():
            res = self.resident[layer]
            for e in experts:
                if e in res:
                    res.move_to_end(e)
            for e in experts:
                if e not in res:
                    self._place(layer, e, keep=set(experts))
        self.box.done()
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


def replay(server: ExpertServer, route) -> Stats:
    """What the card's protocol makes `server` do over a routing trace ([tokens, layers, k] expert ids
    of one token at a time, as `moe_ffn` decodes): per token and layer the chosen experts'
    directory entries are read and a request posted only when one is absent. The server's DRAM
    need hold only the mailbox and the directory."""
    lay, seq = server.lay, server.box._seq
    for chosen in np.asarray(route):
        for layer, ids in enumerate(chosen):
            if all(server.dram.read(lay.entry(layer, int(e)) + 4, 4).view(np.float32)[0] == PRESENT for e in ids):
                continue
            seq += 1
            server.dram.write(lay.mailbox.row, (np.asarray(ids) + layer * lay.experts).astype(np.float32))
            server.dram.write(lay.mailbox.seq, _f32(seq))
            if not server.poll():
                raise OffloadError(f"request {seq:g} was not served")
    return server.stats


def run_serving(backend, program, args, server: ExpertServer, budget: int = 4096):
    """Run `program` on `backend` to its HALT, serving the mailbox while it runs; the run's stats."""
    backend.start(program, args)
    while backend.poll(budget):
        server.poll()
    return backend.wait()
