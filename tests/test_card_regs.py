"""The card contract: the register table, the DRAM interleave, and the simulated card's register semantics."""
import numpy as np
import pytest

from otpu_core import target as target_mod
from otpu_core.card import regs
from otpu_core.card.simcard import SimCard


@pytest.fixture
def card():
    c = SimCard("sim", "sim-small")
    yield c
    c.close()


def test_table_is_complete_and_documented():
    assert regs.off("CFG_HASH") == 0x05C
    assert {r.name for r in regs.REGS} >= {"ID", "VERSION", "CTRL", "STATUS", "SNAP", "TRACE_HI", "I2C_IN", "ARG7"}
    assert all(r.desc for r in regs.REGS)
    # Offsets as the reference tables give them.
    assert (regs.off("SCRATCH"), regs.off("TEMP"), regs.off("UPTIME"), regs.off("MXU_STARVE"), regs.off("TRACE_HI"),
            regs.off("I2C_CTRL"), regs.off("ARG0")) == (0x38, 0x4C, 0x100, 0x160, 0x214, 0x220, 0x60)
    assert (regs.ST_HALTED, regs.ST_WR_IDLE, regs.ST_CALIB1, regs.ST_WAIT_TO) == (1, 8, 64, 256)
    assert regs.counter_names(2)[-1] == "INSTR" and regs.counter_names(3)[-1] == "MXU_STARVE"


def _reference_channel(addr: int, chash: bool) -> tuple[int, int]:
    """Independent per-beat formula: beat b, chunk m = b // 2, channel b % 2 flipped by popcount parity of m."""
    b = addr // 64
    m = b // 2
    ch = (b % 2) ^ (bin(m).count("1") % 2 if chash else 0)
    return ch, m * 64 + addr % 64


@pytest.mark.parametrize("chash", [False, True])
def test_split_and_join_follow_the_interleave(chash):
    rng = np.random.default_rng(1)
    for addr in (0, 128 * 7, 128 * 1023, 1 << 20):
        data = rng.integers(0, 256, 128 * 37, dtype=np.uint8)
        ch0, ch1 = regs.split(addr, data, chash)
        chans = (ch0, ch1)
        for i in range(0, data.size, 64):
            ch, off = _reference_channel(addr + i, chash)
            assert np.array_equal(chans[ch][off - addr // 2: off - addr // 2 + 64], data[i:i + 64])
            assert regs.beat_channel(addr + i, chash) == (ch, off)
        assert np.array_equal(regs.join(addr, ch0, ch1, chash), data)


def test_chash_spreads_power_of_two_strides():
    # A 4 KiB stride hits one channel without the hash; the hash spreads it over both.
    hits = [regs.beat_channel(k * 4096, True)[0] for k in range(64)]
    assert [regs.beat_channel(k * 4096, False)[0] for k in range(64)] == [0] * 64
    assert 24 <= sum(hits) <= 40


def test_identity_registers(card):
    cfg = card.target.config()
    assert card.reg_read(regs.off("ID")) == regs.ID_OTPU
    assert card.reg_read(regs.off("VERSION")) == (cfg.D << 16) | (cfg.MCOLS << 8) | cfg.LANES
    assert card.reg_read(regs.off("CFG_HASH")) == target_mod.load("sim-small").arch_hash()
    assert card.reg_read(regs.off("REGMAP")) == 3
    caps = regs.decode_caps(card.reg_read(regs.off("CAPS")))
    assert caps["trace"] and caps["args"] and caps["chash"] and caps["pair"] and caps["trace_depth"] == 4096


def test_read_only_registers_ignore_writes_and_unmapped_offsets_read_deadbeef(card):
    for name in ("ID", "VERSION", "CFG_HASH", "REGMAP", "CAPS", "ICOUNT"):
        before = card.reg_read(regs.off(name))
        card.reg_write(regs.off(name), 0x12345678)
        assert card.reg_read(regs.off(name)) == before
    for off in (0xFFC, 0x0F0, 0x1FC, 0x168, 0x20000, 0x2FFFC):
        assert card.reg_read(off) == regs.UNMAPPED, hex(off)


def test_control_map_repeats_every_4k_and_scratch_is_read_write(card):
    card.reg_write(regs.off("SCRATCH"), 0xCAFEF00D)
    assert card.reg_read(regs.off("SCRATCH")) == 0xCAFEF00D
    assert card.reg_read(0x1000 + regs.off("SCRATCH")) == 0xCAFEF00D
    assert card.reg_read(0xF000) == regs.ID_OTPU
    card.reg_write(0x3000 + regs.off("SCRATCH"), 7)
    assert card.reg_read(regs.off("SCRATCH")) == 7


def test_args_persist_and_a_byte_wise_copy_keeps_only_the_last_byte(card):
    for i in range(8):
        card.reg_write(regs.ARG_BASE + 4 * i, 1000 + i)
    assert [card.reg_read(regs.ARG_BASE + 4 * i) for i in range(8)] == [1000 + i for i in range(8)]
    card.bar_write_bytes(regs.off("SCRATCH"), (0x11223344).to_bytes(4, "little"))
    assert card.reg_read(regs.off("SCRATCH")) == 0x11000000     # four 1-byte writes: only the last lane survives


def test_snap_latches_all_counters_at_once(card):
    card.reg_write(regs.off("SNAP"), 1)
    first = card.reg_read(regs.off("UPTIME"))
    assert card.reg_read(regs.off("SNAP")) == 1
    assert card.reg_read(regs.off("UPTIME")) == first          # a shadow: it does not move between SNAPs
    card.reg_write(regs.off("SNAP"), 1)
    assert card.reg_read(regs.off("SNAP")) == 2
    assert card.reg_read(regs.off("UPTIME")) > first


def test_link_down_reads_all_ones():
    c = SimCard("sim-down", "sim-small", faults="link_down")
    try:
        assert c.reg_read(regs.off("ID")) == regs.LINK_DOWN
        assert c.reg_read(regs.off("SCRATCH")) == regs.LINK_DOWN
        assert c.link()["width"] == 0
    finally:
        c.close()


def test_trace_ring_keeps_last_and_stop_when_full_keeps_first(card):
    depth = card.trace.size
    recs = np.arange(1, depth + 11, dtype=np.uint64) | (np.uint64(3) << np.uint64(60))
    for keep, expect in (("last", recs[-depth:]), ("first", recs[:depth])):
        card.reg_write(regs.off("TRACE_CTRL"), regs.TR_CLEAR)
        assert card.reg_read(regs.off("TRACE_COUNT")) == 0
        card.reg_write(regs.off("TRACE_CTRL"), regs.TR_ENABLE | (regs.TR_STOP_WHEN_FULL if keep == "first" else 0))
        card.record(recs)
        count = card.reg_read(regs.off("TRACE_COUNT"))
        assert count == (depth + 10 if keep == "last" else depth)
        start = count % depth if keep == "last" else 0
        card.reg_write(regs.off("TRACE_ADDR"), start)
        got = []
        for _ in range(depth):
            lo = card.reg_read(regs.off("TRACE_LO"))
            got.append(lo | card.reg_read(regs.off("TRACE_HI")) << 32)   # reading HI advances TRACE_ADDR
        assert np.array_equal(np.array(got, dtype=np.uint64), expect)
    card.reg_write(regs.off("TRACE_CTRL"), 0)
    card.record(recs)            # not enabled: nothing recorded
    assert card.reg_read(regs.off("TRACE_COUNT")) == depth


def test_calibration_bits_and_no_calib_fault():
    good = SimCard("sim-a", "sim-small")
    bad = SimCard("sim-b", "sim-small", faults="no_calib:ch=1")
    try:
        assert good.reg_read(regs.off("STATUS")) & (regs.ST_CALIB0 | regs.ST_CALIB1) == regs.ST_CALIB0 | regs.ST_CALIB1
        assert bad.reg_read(regs.off("STATUS")) & (regs.ST_CALIB0 | regs.ST_CALIB1) == regs.ST_CALIB0
    finally:
        good.close()
        bad.close()


def test_temperature_register_and_power_off(card):
    temp = card.reg_read(regs.off("TEMP"))
    assert temp & regs.TEMP_VALID and 20 < regs.temp_code_to_c(temp & 0xFFF) < 90
    card.reg_write(regs.off("SCRATCH"), regs.DRAM_INIT)
    card.dram.write_channel(0, 0, np.full(64, 7, np.uint8))
    card.power_off()
    assert card.reg_read(regs.off("SCRATCH")) == 0                     # configuration resets the scrub marker
    assert not card.dram.read_channel(0, 0, 64).any()                  # DRAM forgotten


def test_dram_is_sparse_and_survives_between_processes():
    import os
    import subprocess
    import sys
    code = ("import numpy as np\nfrom otpu_core.board import Board\n"
            "b = Board.open('sim:big')\nb.write(3 << 30, np.full(1 << 20, 7, np.uint8))\nb.close()\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    c = SimCard("sim-big")
    try:
        assert c.dram.size == 4 << 30
        assert os.stat(c.dram.path).st_blocks * 512 < 8 << 20         # 4 GiB card, about 1 MiB touched
        assert (c.dram.mem[3 << 30:(3 << 30) + (1 << 20)] == 7).all()  # what the other process wrote
    finally:
        c.close()
