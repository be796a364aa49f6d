"""The LiteDRAM CSR window of one card, as the host reaches it: 32-bit accesses at BAR0 0x10000.

`Csr` wraps a transport (the Board's), counts every access (the calibration benchmark divides
by it) and hands runs of accesses to the transport in one call (`batch`), which a real card
executes one access after another and the simulated card in one state update.
`Chan` is one channel's view: offsets are (block, register) pairs of `litedram_map`, and the
per-channel blocks of channel 1 follow those of channel 0.
"""
from __future__ import annotations

from otpu_core.card import litedram_map as M
from otpu_core.card import regs
from otpu_core.errors import UsageError


class Csr:
    """The CSR window over a transport; `accesses` counts register accesses made through it."""

    def __init__(self, transport, base: int = regs.LITEDRAM_BASE):
        self.t, self.base = transport, base
        self.accesses = 0

    def r(self, off: int) -> int:
        self.accesses += 1
        return self.t.reg_read(self.base + off)

    def w(self, off: int, value: int) -> None:
        self.accesses += 1
        self.t.reg_write(self.base + off, value & 0xFFFFFFFF)

    def batch(self, ops: list[tuple[int, int | None]]) -> list[int]:
        """Accesses in order, `(off, value)` writes and `(off, None)` reads, in one transport call;
        returns what the reads gave."""
        self.accesses += len(ops)
        return self.t.reg_batch([(self.base + o, None if v is None else v & 0xFFFFFFFF) for o, v in ops])

    def chan(self, ch: int) -> "Chan":
        if not 0 <= ch < M.NCHANNELS:
            raise UsageError(f"channel {ch} does not exist: the LiteDRAM core has channels 0 and 1")
        return Chan(self, ch)


class Chan:
    """Channel `ch`'s registers: `r(block, rel)`, `w(block, rel, value)` and batched forms."""

    def __init__(self, csr: Csr, ch: int):
        self.csr, self.ch = csr, ch
        # BAR0 offset of each block for this channel (a scan makes tens of thousands of accesses)
        self._bar = {b: csr.base + M.channel_offset(b, ch, 0) for b in range(0, regs.LITEDRAM_BYTES, M.BLOCK)}

    def off(self, block: int, rel: int) -> int: return M.channel_offset(block, self.ch, rel)

    def r(self, block: int, rel: int) -> int: return self.csr.r(self.off(block, rel))

    def w(self, block: int, rel: int, value: int) -> None: self.csr.w(self.off(block, rel), value)

    def batch(self, ops: list[tuple[int, int, int | None]]) -> list[int]:
        """Accesses of (block, rel, value) writes and (block, rel, None) reads, in order; the reads' values."""
        bar = self._bar
        self.csr.accesses += len(ops)
        return self.csr.t.reg_batch([(bar[b] + r, v) for b, r, v in ops])

    def rm(self, block: int, rels: list[int]) -> list[int]: return self.batch([(block, r, None) for r in rels])

    def wm(self, writes: list[tuple[int, int, int]]) -> None:
        """Writes of (block, rel, value), in order."""
        self.batch(writes)

    def word(self, block: int, rel: int, words: int) -> int:
        """A multi-word CSR (most significant word first) as one integer."""
        return M.words_to_int(self.rm(block, [rel + 4 * i for i in range(words)]))
