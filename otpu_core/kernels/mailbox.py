"""The card's half of a host mailbox (the public openTPU's protocol, reference host.md 1.9): the
card asks the host for something while a program runs, and waits for the answer in a WAITW.

`Mailbox(base)` is three 64-byte-aligned words: seq at base (float32: the card's last request,
0.0 before the first), the request row at base + 64 (up to 16 float32 words) and served at
base + 128 (float32: the last request the host finished). `request(mb, row)` stores the row,
then seq + 1 (or + `when`, 0 or 1: a conditional request without a loop), and waits until served >= seq (float32 bits of positive values order as the
values do, so WAITW's GE on the raw words compares the numbers). Whatever the host writes before
served (a slot, a table row) is in DRAM when the WAITW completes, and everything after the WAITW
on the LD queue (or depending on a word loaded there) sees it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ol
from ..ol import CompileError, Tensor, Tile

MAX_ROW = 16
BYTES = 192


@dataclass(frozen=True)
class Mailbox:
    base: int

    def __post_init__(self):
        if self.base % 64:
            raise ValueError(f"the mailbox base 0x{self.base:x} is not 64-byte aligned")

    @property
    def seq(self) -> int: return self.base

    @property
    def row(self) -> int: return self.base + 64

    @property
    def served(self) -> int: return self.base + 128


def request(mb: Mailbox, row: Tile, when: Tile | None = None) -> None:
    """Post `row` (a (n,) tile, n <= 16) as the next request and wait until the host has served it.
    `when` (a (1,) tile of 1.0 or 0.0): a request only if 1.0; with 0.0 seq stays as it is, so the
    host sees none and the WAITW is already satisfied (a condition without a loop level)."""
    if row.ndim != 1 or not 1 <= row.cols <= MAX_ROW:
        raise CompileError(f"a mailbox request is 1..{MAX_ROW} words, not a tile of shape {row.shape}")
    seq = ol.load(Tensor(mb.seq, (1,))) + (1.0 if when is None else when)
    ol.store(Tensor(mb.row, (row.cols,)), row)
    ol.store(Tensor(mb.seq, (1,)), seq)
    ol.waitw(Tensor(mb.served, (1,)), ol.empty((1,)), ref=ol.rld(seq, raw=True), cmp="ge")


def host_row(mb: Mailbox, landing: Tensor, index: Tile) -> Tile:
    """Row `index` (a (1,) tile the program computed) of a table kept on the host: requested through
    the mailbox, written by the host into `landing` (fp32 words), loaded from there."""
    if index.rows * index.cols != 1:
        raise CompileError(f"host_row takes the row index as one word, not a tile of shape {index.shape}")
    request(mb, index)
    return ol.load(landing)
