"""memtest.py against numpy-backed channels with hand-made board faults.

Each fault model here is written independently of memtest.py (a stuck DQ bit forces bit
`bit % 8` of every byte at offset = bit // 8 mod 8; an aliased address line drops one offset
bit), so the lane, DQ-bit and address-bit conclusions are checked against what the fault
really is, not against memtest's own earlier output.
"""
from __future__ import annotations

import numpy as np
import pytest

from otpu_core import memtest


class ArrayMemory:
    def __init__(self, channels=2, channel_bytes=1 << 20, stuck=None, alias=None):
        self.channels, self.channel_bytes = channels, channel_bytes
        self.cells = [np.zeros(channel_bytes, np.uint8) for _ in range(channels)]
        self.stuck = stuck or {}   # ch -> (dq bit, value)
        self.alias = alias or {}   # ch -> address bit ignored by the "controller"

    def _where(self, ch, offset, n):
        offs = np.arange(offset, offset + n)
        if ch in self.alias:
            offs &= ~(1 << self.alias[ch])
        return offs

    def write_channel(self, ch, offset, data):
        data = np.asarray(data, np.uint8).ravel()
        self.cells[ch][self._where(ch, offset, data.size)] = data

    def read_channel(self, ch, offset, nbytes):
        out = self.cells[ch][self._where(ch, offset, nbytes)].copy()
        if ch in self.stuck:
            bit, val = self.stuck[ch]
            lane_bytes = np.flatnonzero((np.arange(offset, offset + nbytes) % 8) == bit // 8)
            m = np.uint8(1 << (bit % 8))
            out[lane_bytes] = (out[lane_bytes] | m) if val else (out[lane_bytes] & ~m)
        return out


def test_walking_beats_cover_every_bit_once():
    p = memtest.walking_beats().reshape(1024, 64)
    bits = np.unpackbits(p, axis=1, bitorder="little")
    assert (bits[:512].sum(axis=1) == 1).all() and (bits[512:].sum(axis=1) == 511).all()
    assert (np.argmax(bits[:512], axis=1) == np.arange(512)).all()


@pytest.mark.parametrize("test", [memtest.data_bits, memtest.address_bits, memtest.random_blocks,
                                  memtest.subbeat_updates, memtest.march_c_minus])
def test_clean_memory_passes(test):
    mem = ArrayMemory()
    for ch in range(2):
        r = test(mem, ch)
        assert r.ok, r.message
        assert r.errors.bytes == 0 and r.tested_bytes > 0


@pytest.mark.parametrize("bit,val", [(44, 0), (44, 1), (3, 1), (63, 0)])
def test_stuck_dq_bit_is_named(bit, val):
    mem = ArrayMemory(stuck={1: (bit, val)})
    for test in (memtest.data_bits, memtest.random_blocks, memtest.subbeat_updates):
        r0, r1 = test(mem, 0), test(mem, 1)
        assert r0.ok
        assert not r1.ok
        assert r1.errors.bad_lanes() == [bit // 8]
        assert r1.errors.bad_bits() == [bit]
    hints = memtest.lane_hints(1, r1.errors.lanes, r1.errors.bits)
    lane = bit // 8
    assert hints == [f"channel 1 byte lane {lane} errors -> DQ[{8 * lane + 7}:{8 * lane}] pinout / calibration "
                     f"of that lane; only DQ{bit} (stuck or shorted bit)"]


def test_walking_bits_count_every_wrong_bit_of_a_stuck_line():
    # DQ44 stuck at 0 = bit 4 of the 8 lane-5 bytes of each beat. Walking 1: only the 8 beats whose single
    # set bit is one of those lose it (8). Walking 0: every beat has those 8 bits set except the 8 beats
    # that clear one of them: 512 * 8 - 8. Total 8 + 4088 = 4096 wrong bits, all on DQ44.
    mem = ArrayMemory(stuck={0: (44, 0)})
    r = memtest.data_bits(mem, 0)
    assert r.errors.bits[44] == 8 + 512 * 8 - 8
    assert r.errors.bits.sum() == r.errors.bits[44] == r.errors.lanes[5]


def test_all_lanes_bad_blames_the_channel():
    lanes = np.ones(8, int)
    bits = np.ones(64, int)
    assert memtest.lane_hints(0, lanes, bits) == [
        "channel 0: errors on every byte lane -> the whole channel (calibration, CK / address / command, or its path)"]


@pytest.mark.parametrize("abit", [12, 17, 19])
def test_address_alias_names_the_bit(abit):
    mem = ArrayMemory(alias={0: abit})
    r = memtest.address_bits(mem, 0)
    assert not r.ok
    assert list(r.addr_bits) == [abit]
    assert memtest.address_bits(mem, 1).ok
    hint = memtest.address_hints(0, r.addr_bits)[0]
    assert hint.startswith(f"channel 0 address bit {abit} aliases with offset 0x{1 << abit:x}")
    assert hint.endswith("-> that address line (A / BA pinout) or the controller's address width")


def test_march_c_minus_element_sequence_and_alias():
    assert [d for d, _ in memtest.MARCH_C_MINUS] == ["up", "up", "up", "down", "down", "up"]
    assert [o for _, o in memtest.MARCH_C_MINUS] == [("w0",), ("r0", "w1"), ("r1", "w0"), ("r0", "w1"),
                                                      ("r1", "w0"), ("r0",)]
    assert sum(len(o) for _, o in memtest.MARCH_C_MINUS) == 10
    seen = []
    mem = ArrayMemory(channel_bytes=1 << 18, alias={1: 15})
    r = memtest.march_c_minus(mem, 1, chunk=1 << 16, progress=lambda e, f, s: seen.append((e, f)))
    assert not r.ok and 15 in r.addr_bits
    assert [e for e, f in seen if f == 1.0] == [1, 2, 3, 4, 5, 6]


def test_march_background_words():
    a = memtest.march_background(1, 4096, 24).view("<u8")
    assert a.tolist() == [0x5A << 56 | 1 << 40 | 4096, 0x5A << 56 | 1 << 40 | 4104, 0x5A << 56 | 1 << 40 | 4112]


def test_march_finds_stuck_bit_and_lane():
    mem = ArrayMemory(channel_bytes=1 << 16, stuck={0: (9, 1)})
    r = memtest.march_c_minus(mem, 0, chunk=1 << 14)
    assert r.errors.bad_bits() == [9]
    assert r.errors.bad_lanes() == [1]


def test_random_block_layout():
    size, offs = memtest.random_block_offsets(1 << 31)
    assert size == 1 << 20 and len(offs) == 16 and offs[0] == 0 and offs[-1] == (1 << 31) - size
    size, offs = memtest.random_block_offsets(1 << 20)
    assert size == 1 << 15


class HalfStuck(ArrayMemory):
    """DQ3 stuck at 1, but only in cells whose address has bit 14 set (one bank / row range is bad)."""

    def read_channel(self, ch, offset, nbytes):
        out = super().read_channel(ch, offset, nbytes)
        offs = np.arange(offset, offset + nbytes)
        out[(offs % 8 == 0) & (offs >> 14 & 1 == 1)] |= 1 << 3
        return out


def test_march_names_an_address_bit_set_in_every_wrong_word():
    r = memtest.march_c_minus(HalfStuck(channel_bytes=1 << 16), 0, chunk=1 << 13)
    assert r.errors.bad_bits() == [3]
    assert r.addr_bits == {14: "1 in every wrong word"}
    assert memtest.address_hints(0, r.addr_bits) == [
        "channel 0 address bit 14 1 in every wrong word -> that address line (A / BA pinout) or the controller's "
        "address width"]
