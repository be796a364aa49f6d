"""The card's 64-bit counters as Board reads them, on file-backed XDMA nodes whose BAR0 holds
values past 2^32 (a counter passes 2^32 after 32 s at 133 MHz). Offsets and the read rule come
from shared/reference/host.md 1.3 (FeSens/openTPU regs.py, observability.md), written here as data:
SNAP, then each counter's low word at its offset and high word at offset + 4; MXU_STARVE only
from register map 3 on (a v2 bitstream reads 0xDEADBEEF there)."""
import os

import pytest

from otpu_core.board import Board
from otpu_core.transport.xdma import XdmaTransport

COUNTER_OFFSETS = {"UPTIME": 0x100, "RUNNING": 0x108, "MXU_BUSY": 0x110, "MXU_MAC": 0x118, "VPU_BUSY": 0x120,
                   "QNT_BUSY": 0x128, "DMA_BUSY": 0x130, "TMEM_DENY": 0x138, "DRAM_RD": 0x140, "DRAM_WR": 0x148,
                   "DRAM_WAIT": 0x150, "INSTR": 0x158, "MXU_STARVE": 0x160}
ID, VERSION, REGMAP, CAPS, CORE_KHZ = 0x000, 0x004, 0x03C, 0x040, 0x044
OTPU = 0x4F545055


def word(f, off, value):
    f.seek(off)
    f.write((value & 0xFFFFFFFF).to_bytes(4, "little"))


@pytest.fixture
def card(tmp_path):
    """BAR0 and DRAM as files; BAR0 of a register-map `regmap` bitstream with every counter at
    (i + 1) * 2^32 + 1000 * i + 7, so its high word matters."""
    def make(regmap):
        base = tmp_path / f"xdma{regmap}"
        with open(f"{base}_user", "wb") as f:
            f.truncate(1 << 20)
            word(f, ID, OTPU)
            word(f, VERSION, (128 << 16) | (4 << 8) | 8)
            word(f, REGMAP, regmap)
            word(f, CORE_KHZ, 133330)
            for i, off in enumerate(COUNTER_OFFSETS.values()):
                value = ((i + 1) << 32) + 1000 * i + 7
                word(f, off, value)
                word(f, off + 4, value >> 32)
            if regmap < 3:
                word(f, COUNTER_OFFSETS["MXU_STARVE"], 0xDEADBEEF)
                word(f, COUNTER_OFFSETS["MXU_STARVE"] + 4, 0xDEADBEEF)
        with open(f"{base}_h2c_0", "wb") as f:
            f.truncate(1 << 22)
        os.link(f"{base}_h2c_0", f"{base}_c2h_0")
        return Board(XdmaTransport(str(base), channel_bytes=1 << 20), check=False)
    return make


def test_snapshot_joins_low_and_high_words_of_every_counter(card):
    b = card(3)
    snap = b.snapshot()
    b.close()
    want = {n: ((i + 1) << 32) + 1000 * i + 7 for i, n in enumerate(COUNTER_OFFSETS)}
    assert {n: snap[n] for n in want} == want


def test_a_v2_bitstream_has_no_mxu_starve(card):
    b = card(2)
    snap = b.snapshot()
    b.close()
    assert "MXU_STARVE" not in snap
    assert snap["INSTR"] == (12 << 32) + 11007
