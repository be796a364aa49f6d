"""KV pages of one card for the server: admission by free pages, and shared prompt prefixes.

A `PagePool` wraps the engine's `KVStore`. A request is admitted only when every page its
prompt and its `max_tokens` can reach is available (free, or cached and unreferenced), and
takes them all at once, so a running sequence never waits for a page and none is preempted.
A page whose positions all hold prompt tokens is registered under those tokens (the whole
prefix up to the page's end, since a page's K and V depend on every earlier token); a later
prompt starting with the same tokens reuses the page instead of prefilling it again. A cached
page is shared read-only: every sequence writes only positions past its reused prefix. Pages
nobody references stay cached until the pool needs them (least recently used first). A model
with state outside the KV pages (LFM2's convolution rings, one per sequence slot) cannot resume
from pages alone: its pool is made with `sharing=False` and never caches or matches a prefix.
Gemma 4's sliding layers keep their window in each slot's ring of pages, which the sequence that
wrote a prefix overwrites as it goes on: a page is cached there with a private copy of the window
before its end (`register(..., windows=)`, host memory), which a sequence resuming after it gets
written into its own ring (`Lease.window`); a page without one is not cached.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from otpu_core.llm.engine import KVStore


@dataclass
class Lease:
    """The pages a sequence holds: `shared` (cached prefix pages, in order) then `own`."""
    shared: list[int] = field(default_factory=list)
    own: list[int] = field(default_factory=list)
    window: object = None          # the sliding layers' window before the shared pages' end (Gemma 4)

    @property
    def pages(self) -> list[int]: return self.shared + self.own


class PagePool:
    def __init__(self, store: KVStore, page: int, sharing: bool = True):
        self.store, self.page, self.sharing = store, page, sharing
        self._by_prefix: dict[tuple[int, ...], int] = {}       # prefix tokens -> page
        self._prefix_of: dict[int, tuple[int, ...]] = {}
        self._refs: dict[int, int] = {}                          # cached page -> sequences using it
        self._idle: OrderedDict[int, None] = OrderedDict()       # cached, unreferenced (LRU first)
        self._window: dict[int, object] = {}                     # cached page -> the window before its end

    @property
    def total(self) -> int: return self.store.pages

    @property
    def free(self) -> int: return len(self.store.free)

    @property
    def cached(self) -> int: return len(self._prefix_of)

    @property
    def available(self) -> int: return self.free + len(self._idle)

    def pages_for(self, positions: int) -> int: return -(-positions // self.page)

    def match(self, tokens: list[int]) -> list[int]:
        """The cached pages that hold a prefix of `tokens`, leaving at least the last token to feed."""
        out, P = [], self.page
        if not self.sharing:
            return out
        while (len(out) + 1) * P <= len(tokens) - 1:
            p = self._by_prefix.get(tuple(tokens[:(len(out) + 1) * P]))
            if p is None:
                break
            out.append(p)
        return out

    def lease(self, tokens: list[int], positions: int) -> Lease | None:
        """Pages for a sequence of `positions` positions whose prompt is `tokens`, or None when the
        pool cannot hold it now."""
        shared = self.match(tokens)
        need = self.pages_for(positions) - len(shared)
        idle_needed = sum(1 for p in shared if p in self._idle)
        if need > self.available - idle_needed:
            return None
        for p in shared:
            self._idle.pop(p, None)
            self._refs[p] = self._refs.get(p, 0) + 1
        while need > self.free:
            self._evict()
        return Lease(shared, self.store.take(need), self._window.get(shared[-1]) if shared else None)

    def register(self, lease: Lease, tokens: list[int], fed: int, windows: dict | None = None) -> None:
        """Cache the lease's own pages whose positions are all in the first `fed` (prompt) tokens (none
        without sharing: nothing could match them). `windows` (sliding layers kept in rings): page index k
        -> the window before page k's end; a page without one is not cached."""
        P = self.page
        if not self.sharing:
            return
        while len(lease.shared) < fed // P and lease.own:
            k = len(lease.shared)
            key = tuple(tokens[:(k + 1) * P])
            if key in self._by_prefix or (windows is not None and k not in windows):
                break                     # cached by another sequence meanwhile, or no window to resume with
            p = lease.own.pop(0)
            self._by_prefix[key], self._prefix_of[p], self._refs[p] = p, key, 1
            if windows is not None:
                self._window[p] = windows[k]
            lease.shared.append(p)

    def release(self, lease: Lease) -> None:
        self.store.give(lease.own)
        for p in lease.shared:
            self._refs[p] -= 1
            if self._refs[p] == 0:
                del self._refs[p]
                self._idle[p] = None
        lease.shared, lease.own = [], []

    def _evict(self) -> None:
        p, _ = self._idle.popitem(last=False)
        del self._by_prefix[self._prefix_of.pop(p)]
        self._window.pop(p, None)
        self.store.give([p])
