"""The server's KV page pool: admission by free pages, shared prompt prefixes, eviction, no page lost."""
from __future__ import annotations

import random

from otpu_core.llm.engine import KVStore
from otpu_serve.pages import PagePool

P = 4


def pool(pages=8) -> PagePool:
    return PagePool(KVStore(pages), P)


def test_admission_waits_for_free_pages():
    p = pool(4)
    a = p.lease(list(range(5)), 12)              # 3 pages
    assert a is not None and len(a.pages) == 3 and p.free == 1
    assert p.lease(list(range(100, 105)), 8) is None        # 2 needed, 1 free: not admitted, nothing taken
    assert p.free == 1
    p.release(a)
    assert p.free == 4 and p.lease(list(range(100, 105)), 8) is not None
    assert [p.pages_for(n) for n in (1, 4, 5, 9)] == [1, 1, 2, 3]            # a part page is a whole page
    assert len(pool(4).lease(list(range(5)), 9).pages) == 3


def test_a_shared_prefix_reuses_whole_prompt_pages_only():
    p = pool(12)
    system = list(range(50, 59))                  # 9 tokens: pages 0 and 1 are whole prompt pages
    a = p.lease(system + [1, 2], 16)
    p.register(a, system + [1, 2], fed=10)        # the prompt minus its last token went through the card
    assert len(a.shared) == 2 and p.cached == 2
    b = p.lease(system + [7, 8, 9], 16)
    assert b.shared == a.shared and len(b.own) == 2 and set(b.own).isdisjoint(a.own)
    c = p.lease(list(range(50, 57)) + [0, 0, 0], 16)      # differs inside page 1: only page 0 is reused
    assert c.shared == a.shared[:1]
    # a prompt that is exactly the cached prefix still feeds its last token itself
    assert p.match(system[:8]) == a.shared[:1] and p.match(system[:9]) == a.shared


def test_cached_pages_stay_until_needed_then_go_least_recent_first():
    p = pool(4)
    a = p.lease(list(range(9)), 9)
    p.register(a, list(range(9)), fed=8)
    p.release(a)
    assert p.cached == 2 and p.free == 2 and p.available == 4
    b = p.lease(list(range(200, 215)), 16)        # needs all four: both cached pages are evicted
    assert b is not None and p.cached == 0 and p.free == 0
    p.release(b)
    assert p.free == 4


def test_random_traffic_never_loses_or_doubles_a_page():
    rng = random.Random(3)
    p = pool(16)
    live = []
    for _ in range(400):
        if live and rng.random() < 0.45:
            p.release(live.pop(rng.randrange(len(live))))
        else:
            toks = [rng.randrange(3) for _ in range(rng.randrange(2, 14))]
            lease = p.lease(toks, len(toks) + rng.randrange(1, 6))
            if lease is not None:
                p.register(lease, toks, len(toks) - 1)
                live.append(lease)
        held = [q for lease in live for q in lease.own]
        assert len(held) == len(set(held))                      # an own page belongs to one sequence
        cached = set(p._prefix_of)
        assert not cached & set(held) and not cached & set(p.store.free)
        assert len(held) + len(cached) + p.free == 16           # every page is somewhere, once
    for lease in live:
        p.release(lease)
    assert p.free + p.cached == 16 and not p._refs


class _CharTokenizer:
    """Token t is the character chr(t): stop strings can be written as text."""
    class _Stream:
        def push(self, token: int) -> str: return chr(token)

    def stream(self): return self._Stream()


def test_text_that_could_start_a_stop_string_is_held_then_cut_before_it():
    from otpu_serve.textout import TextOut
    out = TextOut(_CharTokenizer(), ["END"], (0,))
    sent = "".join(out.push(ord(c)) for c in "abcEN")
    assert sent == "abc" and not out.stopped                  # "EN" may still become "END"
    sent += out.push(ord("X")) + out.flush()                  # it did not
    assert sent == "abcENX"
    out = TextOut(_CharTokenizer(), ["END", "!"], (0,))
    sent = "".join(out.push(ord(c)) for c in "abEND") + out.push(ord("z"))
    assert sent == "ab" and out.stopped and out.tokens == [ord(c) for c in "abEND"]
    out = TextOut(_CharTokenizer(), [], (0,))
    assert out.push(ord("a")) + out.push(0) + out.push(ord("b")) == "ab"   # an end token adds no text


def test_windowed_pages_are_cached_with_their_window_and_lease_the_last_ones():
    """Sliding layers kept in rings (Gemma 4): a page is cached only with the window before its end, a lease
    of shared pages carries the last one's, an evicted page's window goes with it; no sharing caches nothing."""
    p = pool(8)
    a = p.lease(list(range(13)), 13)
    p.register(a, list(range(13)), fed=12, windows={0: "w0", 2: "w2"})     # page 1's window missing
    assert len(a.shared) == 1 and p.cached == 1          # page 2 stops behind page 1
    b = p.lease(list(range(13)), 13)
    assert b.shared == a.shared and b.window == "w0"
    p.release(a)
    p.release(b)
    assert p.lease(list(range(100, 132)), 32) is not None and p.cached == 0 and p._window == {}
    off = PagePool(KVStore(8), P, sharing=False)
    c = off.lease(list(range(9)), 9)
    off.register(c, list(range(9)), fed=8)
    assert off.cached == 0 and c.shared == [] and off.lease(list(range(9)), 9).shared == []
