"""Card DRAM tests on raw channel offsets, and what their errors say about the board.

Every test works through a `ChannelMemory` (raw byte offsets inside one DDR3 channel, as the
host's DMA sees them), so the same code runs on a real card, the simulated card or a numpy
array in a test. Each test returns a `MemResult`: errors counted per DQ byte lane and per DQ
bit (channel byte offset b travels on lane b mod 8: a 64-byte beat is one BL8 burst of the
64-bit channel) and, where the test can tell, the address bits that alias. `lane_hints` and
`address_hints` turn those counts into the diagnosis lines otpu-diag prints.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

BEAT = 64                 # bytes in one 64-byte beat (one BL8 burst of the 64-bit channel)
LANES = 8                 # DQ byte lanes of a channel
DQ_BITS = 64
ADDR_TAG = 0xA5A5 << 48   # address-bit tags: ADDR_TAG | ch << 40 | offset
MARCH_TAG = 0x5A << 56    # March C- background A: MARCH_TAG | ch << 40 | word offset
MARCH_CHUNK = 64 << 20
SUBBEAT_WRITES = 200
SUBBEAT_AREA = 4096
RANDOM_BLOCKS = 16


class ChannelMemory(Protocol):
    """Raw access to the DRAM channels of one card (offsets inside one channel)."""
    channels: int
    channel_bytes: int

    def write_channel(self, ch: int, offset: int, data: np.ndarray) -> None: ...

    def read_channel(self, ch: int, offset: int, nbytes: int) -> np.ndarray: ...


@dataclass
class ErrorTally:
    """Wrong bytes of one test, counted where they travel: byte lanes, DQ bits, 8-byte words."""
    bytes: int = 0
    lanes: np.ndarray = field(default_factory=lambda: np.zeros(LANES, np.int64))
    bits: np.ndarray = field(default_factory=lambda: np.zeros(DQ_BITS, np.int64))
    first: int | None = None            # channel byte offset of the first wrong byte
    words: list[np.ndarray] = field(default_factory=list)  # offsets of wrong 8-byte words (for address analysis)

    def add(self, base: int, expected: np.ndarray, got: np.ndarray) -> None:
        diff = np.bitwise_xor(expected.view(np.uint8), got.view(np.uint8))
        idx = np.flatnonzero(diff)
        if idx.size == 0:
            return
        offs = idx.astype(np.int64) + base
        self.bytes += int(idx.size)
        lane = offs % LANES
        self.lanes += np.bincount(lane, minlength=LANES)
        bitmat = np.unpackbits(diff[idx][:, None], axis=1, bitorder="little")   # (n, 8): bit k of the byte
        self.bits += np.bincount((lane[:, None] * 8 + np.arange(8)).ravel(), weights=bitmat.ravel(),
                                 minlength=DQ_BITS).astype(np.int64)
        first = int(offs[0])
        self.first = first if self.first is None else min(self.first, first)
        self.words.append(np.unique(offs // 8 * 8))

    @property
    def ok(self) -> bool: return self.bytes == 0

    def word_offsets(self) -> np.ndarray:
        return np.unique(np.concatenate(self.words)) if self.words else np.zeros(0, np.int64)

    def bad_lanes(self) -> list[int]: return [int(i) for i in np.flatnonzero(self.lanes)]

    def bad_bits(self) -> list[int]: return [int(i) for i in np.flatnonzero(self.bits)]

    def as_dict(self) -> dict:
        return {"bytes": self.bytes, "lanes": self.lanes.tolist(), "bits": self.bits.tolist(), "first": self.first,
                "bad_lanes": self.bad_lanes(), "bad_bits": self.bad_bits()}


@dataclass
class MemResult:
    """Outcome of one memory test on one channel."""
    test: str
    channel: int
    tested_bytes: int
    errors: ErrorTally
    message: str
    # address bit -> what was seen: "aliases with ...", "1 in every wrong word"
    addr_bits: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool: return self.errors.ok and not self.addr_bits

    def data(self) -> dict:
        return {"test": self.test, "channel": self.channel, "tested_bytes": self.tested_bytes,
                **self.errors.as_dict(), "addr_bits": {str(k): v for k, v in self.addr_bits.items()}}


def _fail_message(t: ErrorTally) -> str:
    lanes = ",".join(str(x) for x in t.bad_lanes())
    bits = t.bad_bits()
    dq = ",".join(f"DQ{b}" for b in bits[:8]) + (" ..." if len(bits) > 8 else "")
    return f"{t.bytes} wrong bytes from offset 0x{t.first:x}, byte lanes {lanes} ({dq})"


def _words_as_bytes(words: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(words.astype("<u8")).view(np.uint8)


# ---- walking data bits -------------------------------------------------------------------

def walking_beats() -> np.ndarray:
    """512 beats with one bit set (bit i of the little-endian 512-bit beat), then 512 with one bit clear."""
    ones = np.zeros((BEAT * 8, BEAT), np.uint8)
    i = np.arange(BEAT * 8)
    ones[i, i // 8] = (1 << (i % 8)).astype(np.uint8)
    return np.concatenate([ones, ~ones]).ravel()


def data_bits(mem: ChannelMemory, ch: int) -> MemResult:
    """Walking 1 and walking 0 over every bit of the 512-bit beat, at a quarter of the channel."""
    base = mem.channel_bytes // 4
    pattern = walking_beats()
    mem.write_channel(ch, base, pattern)
    tally = ErrorTally()
    tally.add(base, pattern, mem.read_channel(ch, base, pattern.size))
    msg = f"{pattern.size // BEAT} beats walking 1 / 0" if tally.ok else _fail_message(tally)
    return MemResult("data bits", ch, pattern.size, tally, msg)


# ---- address bits ------------------------------------------------------------------------

def tag_offsets(channel_bytes: int) -> list[int]:
    """Offset 0 and every power of two from one beat up to half the channel."""
    offs, step = [0], BEAT
    while step < channel_bytes:
        offs.append(step)
        step <<= 1
    return offs


_ONES = (1 << 64) - 1
_OFFSET_MASK = (1 << 40) - 1
WORDS = BEAT // 8


def address_tag(ch: int, offset: int) -> np.ndarray:
    """The 64-byte tag of the beat at `offset`: word i holds ADDR_TAG | ch << 40 | its own offset
    (offset + 8i), complemented when i has an odd number of bits set. Each word names its
    address, so an aliased line inside the beat (bits 3..5) shows as well as one between beats;
    and every DQ bit is 1 in half the words and 0 in the other half (the complement pattern
    differs from every offset bit inside the beat), so a stuck or shorted data bit changes only
    some words and can never make the beat read as another address's tag: only an address
    fault can."""
    words = [(ADDR_TAG | ch << 40 | (offset + 8 * i)) ^ (_ONES if bin(i).count("1") % 2 else 0)
             for i in range(WORDS)]
    return _words_as_bytes(np.array(words, np.uint64))


def _beat_alias(ch: int, off: int, got: np.ndarray, offs: list[int]) -> tuple[int, str] | None:
    """(offset it reads instead, what) when a beat holds exactly another tagged beat, or its own
    words in the order an aliased line inside the beat (bit 3, 4 or 5) leaves them; else None
    (data errors, not an alias)."""
    other = int(got[:8].view("<u8")[0]) & _OFFSET_MASK
    if other != off and other in offs and np.array_equal(got, address_tag(ch, other)):
        return other, f"aliases with offset 0x{other:x} (0x{off:x} reads its tag)"
    words = address_tag(ch, off).view("<u8")
    got_words = got.view("<u8")
    for bit in range(3, 6):
        m = 1 << (bit - 3)
        if np.array_equal(got_words, words[np.arange(WORDS) | m]):
            return off ^ (1 << bit), (f"aliases inside the beat (bytes 0x{off:x}+8k read those at +8k+{8 * m}, "
                                      f"for k without bit {bit - 3})")
    return None


def address_bits(mem: ChannelMemory, ch: int) -> MemResult:
    """Tag offset 0 and each power of two, read all back: a beat holding another's whole tag (or
    its own words moved by one address line) names the address bits that alias; anything else
    wrong is a data fault, counted by lane and DQ bit like the other tests."""
    offs = tag_offsets(mem.channel_bytes)
    for off in offs:
        mem.write_channel(ch, off, address_tag(ch, off))
    tally, aliases = ErrorTally(), {}
    for off in offs:
        expected = address_tag(ch, off)
        got = mem.read_channel(ch, off, BEAT)
        if np.array_equal(got, expected):
            continue
        alias = _beat_alias(ch, off, got, offs)
        if alias is None:
            tally.add(off, expected, got)
            continue
        other, what = alias
        for bit in range((off ^ other).bit_length()):
            if (off ^ other) >> bit & 1:
                aliases.setdefault(bit, what)
    if aliases:
        msg = "; ".join(f"address bit {b} {aliases[b]}" for b in sorted(aliases))
    elif tally.ok:
        msg = f"{len(offs)} tags at 0 and 2^6..2^{len(offs) + 4}"
    else:
        msg = "data errors, no aliased address bit: " + _fail_message(tally)
    return MemResult("address bits", ch, len(offs) * BEAT, tally, msg, aliases)


# ---- random blocks -----------------------------------------------------------------------

def random_block_offsets(channel_bytes: int, blocks: int = RANDOM_BLOCKS) -> tuple[int, list[int]]:
    """Block size (1 MiB or channel/32) and `blocks` offsets spread evenly, the last at the top."""
    size = min(1 << 20, channel_bytes // 32)
    span = channel_bytes - size
    return size, [(span * i // (blocks - 1)) // BEAT * BEAT for i in range(blocks)]


def random_blocks(mem: ChannelMemory, ch: int, blocks: int = RANDOM_BLOCKS) -> MemResult:
    """Random data (seed 5 + channel) in evenly spread blocks, written all first, then read back."""
    size, offs = random_block_offsets(mem.channel_bytes, blocks)
    rng = np.random.default_rng(5 + ch)
    data = [rng.integers(0, 256, size, dtype=np.uint8) for _ in offs]
    for off, d in zip(offs, data):
        mem.write_channel(ch, off, d)
    tally = ErrorTally()
    for off, d in zip(offs, data):
        tally.add(off, d, mem.read_channel(ch, off, size))
    msg = f"{len(offs)} blocks of {size >> 10} KiB" if tally.ok else _fail_message(tally)
    return MemResult("random blocks", ch, size * len(offs), tally, msg)


# ---- sub-beat updates --------------------------------------------------------------------

def subbeat_updates(mem: ChannelMemory, ch: int, writes: int = SUBBEAT_WRITES, seed: int = 11) -> MemResult:
    """Random 1..63-byte writes into a 4 KiB area at half the channel, merged into a host copy, then compared."""
    base = mem.channel_bytes // 2
    rng = np.random.default_rng(seed + ch)
    image = rng.integers(0, 256, SUBBEAT_AREA, dtype=np.uint8)
    mem.write_channel(ch, base, image)
    for _ in range(writes):
        n = int(rng.integers(1, BEAT))
        at = int(rng.integers(0, SUBBEAT_AREA - n + 1))
        piece = rng.integers(0, 256, n, dtype=np.uint8)
        mem.write_channel(ch, base + at, piece)
        image[at:at + n] = piece
    tally = ErrorTally()
    tally.add(base, image, mem.read_channel(ch, base, SUBBEAT_AREA))
    msg = f"{writes} partial writes" if tally.ok else _fail_message(tally)
    return MemResult("sub-beat updates", ch, SUBBEAT_AREA, tally, msg)


# ---- March C- ----------------------------------------------------------------------------

# van de Goor's March C-: (direction, ops) per element; "r0" reads background A, "w1" writes B.
MARCH_C_MINUS = (
    ("up", ("w0",)),
    ("up", ("r0", "w1")),
    ("up", ("r1", "w0")),
    ("down", ("r0", "w1")),
    ("down", ("r1", "w0")),
    ("up", ("r0",)),
)


def march_background(ch: int, offset: int, nbytes: int) -> np.ndarray:
    """Background A over [offset, offset+nbytes): each 8-byte word holds MARCH_TAG | ch << 40 | its offset."""
    words = np.arange(offset, offset + nbytes, 8, dtype=np.uint64)
    return _words_as_bytes(words | np.uint64(MARCH_TAG | ch << 40))


def march_c_minus(mem: ChannelMemory, ch: int, chunk: int = MARCH_CHUNK,
                  progress: Callable[[int, float, float], None] | None = None) -> MemResult:
    """March C- over the whole channel, chunk by chunk in each element's direction.

    `progress(element, fraction_of_element, seconds)` is called after each chunk (element 1..6).
    """
    size = mem.channel_bytes
    chunk = min(chunk, size)
    starts = list(range(0, size, chunk))
    tally, t0 = ErrorTally(), time.perf_counter()
    for e, (direction, ops) in enumerate(MARCH_C_MINUS, 1):
        order = starts if direction == "up" else starts[::-1]
        for k, off in enumerate(order):
            n = min(chunk, size - off)
            a = march_background(ch, off, n)
            for op in ops:
                want = a if op[1] == "0" else ~a
                if op[0] == "w":
                    mem.write_channel(ch, off, want)
                else:
                    tally.add(off, want, mem.read_channel(ch, off, n))
            if progress:
                progress(e, (k + 1) / len(order), time.perf_counter() - t0)
    addr_bits: dict[int, str] = {}
    offsets = tally.word_offsets()
    if offsets.size >= 16:
        for bit in range(3, max(size - 1, 1).bit_length()):
            col = offsets >> bit & 1
            if col.all():
                addr_bits.setdefault(bit, "1 in every wrong word")
            elif not col.any() and size >> bit > 1:
                addr_bits.setdefault(bit, "0 in every wrong word")
    ops = sum(len(o) for _, o in MARCH_C_MINUS)
    if tally.ok:
        msg = f"{len(MARCH_C_MINUS)} elements, {ops}N over {size >> 20} MiB"
    else:
        msg = _fail_message(tally)
    return MemResult("march C-", ch, size, tally, msg, {} if tally.ok else addr_bits)


# ---- diagnosis ---------------------------------------------------------------------------

def lane_hints(ch: int, lanes: np.ndarray, bits: np.ndarray) -> list[str]:
    """What the per-lane and per-DQ-bit error counts of one channel point at."""
    lanes = np.asarray(lanes)
    bits = np.asarray(bits)
    bad = np.flatnonzero(lanes)
    if bad.size == 0:
        return []
    if bad.size == LANES:
        return [f"channel {ch}: errors on every byte lane -> the whole channel "
                "(calibration, CK / address / command, or its path)"]
    out = []
    for lane in bad:
        text = f"channel {ch} byte lane {lane} errors -> DQ[{8 * lane + 7}:{8 * lane}] pinout / calibration of that lane"
        dq = np.flatnonzero(bits[8 * lane:8 * lane + 8])
        if dq.size == 1:
            text += f"; only DQ{8 * lane + dq[0]} (stuck or shorted bit)"
        out.append(text)
    return out


def address_hints(ch: int, addr_bits: dict) -> list[str]:
    """One line per address bit a test singled out."""
    return [f"channel {ch} address bit {bit} {addr_bits[bit]} -> that address line "
            "(A / BA pinout) or the controller's address width" for bit in sorted(addr_bits, key=int)]
