"""Copying an FTTW file into card DRAM: a byte copy through the NoC, no transpose, nothing decoded.

Bank 0 gets the file's header and directory at DRAM address 0 (a program on the card finds the
tensors there); each tensor's bytes go to the bank and address its directory entry names, over
the guarded NoC path (`noc`), in chunks, each checked against the entry's CRC-32 as it is read
from the file. With `verify`, every chunk is read back from the card and compared (slow on a real
card: reads from the card run at a few MB/s). The card's advisory lock file is held throughout,
so no tool resets the card under a half-done copy. Every bank the file uses must be enabled on
the card; that is checked, with every tensor's place, before anything is written.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Callable

from ..card.runstate import DeviceLock
from ..errors import DeviceError
from .card import Card
from .fttw import FttwError, FttwFile

CHUNK = 1 << 20


@dataclass
class Uploaded:
    tensors: int
    bytes: int
    seconds: float
    verified: bool
    banks: list[int]

    def as_dict(self) -> dict:
        return {"tensors": self.tensors, "bytes": self.bytes, "seconds": round(self.seconds, 3),
                "mb_per_s": round(self.bytes / self.seconds / 1e6, 1) if self.seconds else None,
                "verified": self.verified, "banks": self.banks}


def upload(card: Card, f: FttwFile, verify: bool = False,
           progress: Callable[[int, int, str], None] | None = None) -> Uploaded:
    card.require()
    t0 = time.perf_counter()
    banks = sorted({e.bank for e in f.entries} | {0})
    tiles = {b: card.tiles.dram(b) for b in banks}         # refuses a bank this card does not have
    total = sum(e.nbytes for e in f.entries)
    with DeviceLock(card.lock_name):
        noc = card.noc
        head = f.head_bytes()
        if len(head) > f.header.dram_base:
            raise FttwError(f"{f.path}: header and directory ({len(head)} bytes) overlap the weights at "
                            f"{f.header.dram_base:#x}")
        _put(noc, tiles[0], 0, head, verify)
        done = 0
        for e in f.entries:
            crc = 0
            for pos, data in f.chunks(e, CHUNK):
                crc = zlib.crc32(data, crc)
                _put(noc, tiles[e.bank], e.dram_addr + pos, data, verify, e.name)
                done += len(data)
                if progress:
                    progress(done, total, e.name)
            if crc != e.crc32:
                raise FttwError(f"{f.path}: tensor '{e.name}' does not match its CRC-32 (the file is corrupt); "
                                f"the card now holds a bad copy of it, and nothing after it was copied",
                                hint="convert the model again with `otpu-tt convert`, then upload again")
    return Uploaded(len(f.entries), total, time.perf_counter() - t0, verify, banks)


def _put(noc, tile, addr: int, data: bytes, verify: bool, name: str = "directory") -> None:
    noc.write(tile, addr, data)
    if verify and noc.read(tile, addr, len(data)) != data:
        raise DeviceError(f"DRAM bank {tile.index} at {addr:#x}: '{name}' read back different from what was "
                          f"written", hint="the bank may be faulty; `otpu-tt smi` shows whether its training passed")
