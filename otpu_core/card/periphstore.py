"""Peripheral state of a simulated card, shared by every process that has the card open.

Each peripheral keeps its state in a small dict of plain values (numbers, strings, lists,
dicts). The dicts live in this process (`state[part]`, handed to the peripheral objects once
and updated in place), and each part has a fixed slot in the card's `<card>.periph` file,
mapped into every process: a 4-byte length and the part serialised with `marshal` (a few
microseconds for the biggest part, where JSON took tens).

Consistency between processes: the file starts with 64-bit words, a sequence word and one
write generation per part. A writer (always under the card lock) makes the sequence odd,
stores the parts whose bytes changed, bumps their generations and makes it even again. A
reader compares one word with what it saw last; only when it moved does it reload, and only
the parts whose generation moved. A reader without the card lock retries while the sequence
is odd or changed under it, so it never sees half a state. Stores happen only for parts the
caller names and only when their bytes differ from what is already stored.
"""
from __future__ import annotations

import marshal
import mmap
import os
import time
from pathlib import Path

from ..errors import DeviceError

PARTS = ("thermal", "litedram", "i2c", "card")
FILE_BYTES = 1 << 20
HEADER_BYTES = 4096
SLOT_BYTES = (FILE_BYTES - HEADER_BYTES) // len(PARTS)
_SEQ = 0                       # header word 0; word 1 + i is the generation of PARTS[i]
_M64 = (1 << 64) - 1


class PeriphStore:
    """The `<card>.periph` file and this process's decoded copy of every part."""

    def __init__(self, path: Path, card: str):
        self.card = card
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            if os.fstat(fd).st_size < FILE_BYTES:
                os.ftruncate(fd, FILE_BYTES)
            self.mm = mmap.mmap(fd, FILE_BYTES)
        finally:
            os.close(fd)
        self.words = memoryview(self.mm)[:HEADER_BYTES].cast("Q")    # plain ints: cheaper than numpy scalars
        self.state: dict[str, dict] = {p: {} for p in PARTS}
        self._seen_seq = -1
        self._seen = [-1] * len(PARTS)
        self._stored = [b""] * len(PARTS)

    def _read_slot(self, i: int) -> bytes:
        at = HEADER_BYTES + i * SLOT_BYTES
        n = min(int.from_bytes(self.mm[at:at + 4], "little"), SLOT_BYTES - 4)
        return self.mm[at + 4:at + 4 + n]

    def _write_slot(self, i: int, blob: bytes) -> None:
        at = HEADER_BYTES + i * SLOT_BYTES
        self.mm[at + 4:at + 4 + len(blob)] = blob
        self.mm[at:at + 4] = len(blob).to_bytes(4, "little")

    def sync(self) -> bool:
        """Bring every part up to what the file holds; True when something was reloaded."""
        if self.words[_SEQ] == self._seen_seq:
            return False
        for _ in range(100_000):
            seq = self.words[_SEQ]
            if not seq & 1:
                gens = self.words[1:1 + len(PARTS)].tolist()
                blobs = {i: self._read_slot(i) for i, g in enumerate(gens) if g != self._seen[i]}
                if self.words[_SEQ] == seq:
                    break
            time.sleep(0)
        else:
            raise DeviceError(f"simulated card {self.card}: its peripheral state never settled")
        for i, blob in blobs.items():
            part = self.state[PARTS[i]]
            part.clear()
            if blob:
                try:
                    part.update(marshal.loads(blob))
                except (ValueError, EOFError, TypeError):
                    pass         # written by another Python: the peripheral powers on afresh
            self._stored[i], self._seen[i] = blob, gens[i]
        self._seen_seq = seq
        return bool(blobs)

    def reset(self) -> None:
        """Power-on (the caller holds the card lock): every part empty, here and in the file,
        whatever the file held before (a card saved by an older layout included)."""
        self.words[_SEQ] = (self.words[_SEQ] | 1) & _M64         # odd: being written
        for i in range(len(PARTS)):
            self._write_slot(i, b"")
            self.words[1 + i] = (self.words[1 + i] + 1) & _M64
            self._stored[i], self._seen[i] = b"", self.words[1 + i]
        for part in self.state.values():
            part.clear()
        self.words[_SEQ] = (self.words[_SEQ] + 1) & _M64
        self._seen_seq = self.words[_SEQ]

    @property
    def seen(self) -> int:
        """The sequence word this process's copy corresponds to."""
        return self._seen_seq

    def store(self, parts=PARTS) -> None:
        """Write the named parts whose bytes changed (the caller holds the card lock)."""
        dirty = []
        for name in parts:
            i = PARTS.index(name)
            blob = marshal.dumps(self.state[name])
            if blob != self._stored[i]:
                if len(blob) + 4 > SLOT_BYTES:
                    raise DeviceError(f"simulated card {self.card}: {name} state of {len(blob)} bytes does not fit "
                                      f"its {SLOT_BYTES}-byte slot")
                dirty.append((i, blob))
        if not dirty:
            return
        self.words[_SEQ] += 1                       # odd: being written
        for i, blob in dirty:
            self._write_slot(i, blob)
            self.words[1 + i] += 1
            self._stored[i], self._seen[i] = blob, self.words[1 + i]
        self.words[_SEQ] += 1                       # even: complete
        self._seen_seq = self.words[_SEQ]

    def close(self) -> None:
        self.words.release()
        self.mm.close()
