"""Placement of on-chip storage: the TMEM word allocator and the ACT RAM block allocator.

TMEM: next-fit from a moving cursor (the first gap at or after it); after each allocation the
cursor moves past it and, if needed, one word further so that consecutive temporaries start in
different banks (bank = address mod LANES), which keeps the scoreboard from seeing false
conflicts between them. When no gap after the cursor fits, the allocator takes the smallest gap
anywhere that fits (best fit); when that fails too it raises "TMEM exhausted: needed N words,
largest free M".

ACT RAM: KB contiguous blocks not held by a live Stationary, searched round-robin from the end
of the previous allocation, so blocks freed most recently are reused last.
"""
from __future__ import annotations

import bisect

from .errors import CompileError


class TmemAllocator:
    def __init__(self, capacity: int, lanes: int):
        self.capacity, self.lanes = capacity, lanes
        self.starts: list[int] = []          # sorted starts of live allocations
        self.ends: dict[int, int] = {}       # start -> end (exclusive)
        self.cursor = 0
        self.peak = 0

    def gaps(self):
        """Free [lo, hi) ranges in address order."""
        prev = 0
        for s in self.starts:
            if s > prev:
                yield prev, s
            prev = self.ends[s]
        if prev < self.capacity:
            yield prev, self.capacity

    def largest_free(self) -> int: return max((hi - lo for lo, hi in self.gaps()), default=0)

    def alloc(self, words: int) -> int:
        if words <= 0:
            raise CompileError(f"a TMEM buffer needs at least one word, not {words}")
        start = self._next_fit(words)
        if start is None:
            start = self._best_fit(words)
        if start is None:
            raise CompileError(f"TMEM exhausted: needed {words} words, largest free {self.largest_free()}",
                               hint="free temporaries earlier (drop references) or work in smaller chunks")
        bisect.insort(self.starts, start)
        self.ends[start] = start + words
        end = start + words
        self.cursor = end + 1 if (end - start) % self.lanes == 0 else end
        self.peak = max(self.peak, end)
        return start

    def reserve(self, lo: int, words: int) -> None:
        """Take [lo, lo + words) for the rest of the program (it must be free)."""
        if any(s < lo + words and lo < self.ends[s] for s in self.starts) or lo + words > self.capacity:
            raise CompileError(f"internal: TMEM words {lo}..{lo + words - 1} are not free to reserve")
        bisect.insort(self.starts, lo)
        self.ends[lo] = lo + words

    def free(self, start: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        if i == len(self.starts) or self.starts[i] != start:
            raise CompileError(f"internal: TMEM buffer at {start} freed twice")
        del self.starts[i]
        del self.ends[start]

    def _next_fit(self, words: int) -> int | None:
        """The first gap at or after the cursor that fits (no wrap-around: that is best fit's job)."""
        for lo, hi in self.gaps():
            lo = max(lo, self.cursor)
            if hi - lo >= words:
                return lo
        return None

    def _best_fit(self, words: int) -> int | None:
        fits = [(hi - lo, lo) for lo, hi in self.gaps() if hi - lo >= words]
        return min(fits)[1] if fits else None


class ActAllocator:
    def __init__(self, blocks: int):
        self.blocks = blocks
        self.owner: list[int] = [0] * blocks    # 0 = free, else the holder's token
        self.cursor = 0

    def alloc(self, kb: int, token: int) -> int:
        if kb > self.blocks:
            raise CompileError(f"ACT RAM too small: needed {kb} blocks of {self.blocks}")
        for i in range(self.blocks):
            ab = (self.cursor + i) % self.blocks
            if ab + kb <= self.blocks and not any(self.owner[ab:ab + kb]):
                self.owner[ab:ab + kb] = [token] * kb
                self.cursor = (ab + kb) % self.blocks
                return ab
        free = self._largest_free()
        raise CompileError(f"ACT RAM exhausted: needed {kb} contiguous blocks, largest free {free}",
                           hint="let earlier quantized operands die before quantizing new ones")

    def alloc_runs(self, kb: int, token: int) -> list[tuple[int, int]]:
        """kb blocks as one contiguous range if possible, else as several free runs (block
        ranges of one operand, each quantised and multiplied separately)."""
        try:
            return [(self.alloc(kb, token), kb)]
        except CompileError:
            pass
        runs, start = [], None
        for b in range(self.blocks + 1):
            free = b < self.blocks and not self.owner[b]
            if free and start is None:
                start = b
            elif not free and start is not None:
                runs.append((start, b - start))
                start = None
        if sum(n for _, n in runs) < kb:
            raise CompileError(f"ACT RAM exhausted: needed {kb} blocks, {sum(n for _, n in runs)} free",
                               hint="let earlier quantized operands die before quantizing new ones")
        taken, left = [], kb
        for ab, n in sorted(runs, key=lambda r: -r[1]):
            n = min(n, left)
            self.owner[ab:ab + n] = [token] * n
            taken.append((ab, n))
            left -= n
            if not left:
                break
        return taken

    def free(self, ab: int, kb: int, token: int) -> None:
        for b in range(ab, ab + kb):
            if self.owner[b] == token:
                self.owner[b] = 0

    def holds(self, ab: int, kb: int, token: int) -> bool:
        return all(o == token for o in self.owner[ab:ab + kb])

    def _largest_free(self) -> int:
        best = run = 0
        for o in self.owner:
            run = run + 1 if not o else 0
            best = max(best, run)
        return best
