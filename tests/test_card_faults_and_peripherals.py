"""Every fault kind reached through the Board, and the peripherals answering through BAR0."""
import time

import numpy as np
import pytest

from otpu_core.board import Board, BoardBackend, IsaBackend
from otpu_core.card import regs
from otpu_core.card.i2c import LM73_ADDR
from otpu_i2c.bitbang import BitBangMaster
from otpu_core.errors import DeviceError, UsageError

VOP_ADD = """ld dram=0 tmem=0 n=16
vop.add dst=64 a=0 b=0 rows=1 cols=16
st dram=4096 tmem=64 n=16
halt
"""


def test_vpu_lane_flips_one_bit_in_the_words_its_lane_writes():
    x = np.arange(1, 17, dtype=np.float32)
    golden = IsaBackend("sim-small")
    golden.write(0, x.view(np.uint8))
    golden.run(VOP_ADD)
    want = golden.read(4096, 64).view(np.uint32)
    assert np.array_equal(want.view(np.float32), 2 * x)       # float64 reference: x + x, exact
    card = BoardBackend(Board.open("sim:lane", "sim-small", faults="vpu_lane:lane=3,bit=31"))
    try:
        card.write(0, x.view(np.uint8))
        card.run(VOP_ADD)
        got = card.read(4096, 64).view(np.uint32)
    finally:
        card.close()
    diff = np.flatnonzero(got != want)
    lanes = card.board.target.config().LANES
    assert list(diff) == [i for i in range(16) if (64 + i) % lanes == 3]
    assert np.all(got[diff] ^ want[diff] == 1 << 31)


def test_stuck_dq_bit_shows_on_reads_of_its_lane():
    with Board.open("sim:dq", "sim-small", faults="stuck_dq:ch=1,bit=44,val=1") as b:
        b.write_channel(1, 0, np.zeros(256, np.uint8))
        got = b.read_channel(1, 0, 256)
        # DQ44 = byte lane 5, bit 4: every byte at channel offset 5 mod 8 reads 0x10.
        expect = np.zeros(256, np.uint8)
        expect[5::8] = 0x10
        assert np.array_equal(got, expect)
        b.write_channel(0, 0, np.zeros(256, np.uint8))
        assert not b.read_channel(0, 0, 256).any()                 # the other channel is healthy


def test_aliased_address_line_makes_two_addresses_share_cells():
    with Board.open("sim:alias", "sim-small", faults="addr_alias:ch=0,bit=12") as b:
        b.write_channel(0, 0, np.full(64, 1, np.uint8))
        b.write_channel(0, 4096, np.full(64, 2, np.uint8))         # bit 12 stuck low: lands on offset 0
        assert b.read_channel(0, 0, 64).tolist() == [2] * 64
        b.write_channel(1, 0, np.full(64, 1, np.uint8))
        b.write_channel(1, 4096, np.full(64, 2, np.uint8))
        assert b.read_channel(1, 0, 64).tolist() == [1] * 64       # channel 1 is healthy


def test_uncalibrated_channel_garbles_its_data():
    with Board.open("sim:nocal", "sim-small", faults="no_calib:ch=1") as b:
        assert b.info.calibrated == (True, False)
        data = np.arange(256, dtype=np.uint8)
        b.write_channel(1, 0, data)
        assert not np.array_equal(b.read_channel(1, 0, 256), data)
        b.write_channel(0, 0, data)
        assert np.array_equal(b.read_channel(0, 0, 256), data)


def test_overheating_and_link_down():
    with Board.open("sim:hot", "sim-small", faults="hot:c=95") as b:
        assert b.info.temp_c >= 94.5
    with pytest.raises(DeviceError, match="PCIe link is down"):
        Board.open("sim:down", "sim-small", faults="link_down")


def test_faults_from_the_environment_and_changing_them_power_cycles(monkeypatch):
    monkeypatch.setenv("OTPU_SIM_FAULTS", "no_calib:ch=0")
    with Board.open("sim:env", "sim-small") as b:
        assert b.info.calibrated == (False, True)
    monkeypatch.setenv("OTPU_SIM_FAULTS", "")
    with Board.open("sim:env", "sim-small") as b:              # no spec given: the card keeps its faults
        assert b.info.calibrated == (False, True)
    with Board.open("sim:env", "sim-small", faults="") as b:   # an empty spec: a healthy card again
        assert b.info.calibrated == (True, True)
    with pytest.raises(UsageError, match="unknown fault kind"):
        Board.open("sim:env", "sim-small", faults="gremlins")


def test_i2c_devices_answer_a_bit_banged_read_through_bar0():
    with Board.open("sim", "sim-small") as b:
        assert b.info.caps["i2c"]
        base = regs.I2C_BASE
        master = BitBangMaster(lambda o: b.t.reg_read(base + o), lambda o, v: b.t.reg_write(base + o, v), bus=0)
        assert master.probe(LM73_ADDR) and not master.probe(0x33)
        raw = master.read(LM73_ADDR, 0x00, 2)
        lm73_c = int.from_bytes(raw, "big", signed=True) / 128        # LM73 datasheet: 1/128 C per LSB
        assert abs(lm73_c - b.info.temp_c) < 25 and 15 < lm73_c < 90
        assert master.read(LM73_ADDR, 0x07, 2) == bytes.fromhex("0190")     # LM73 ID register


def test_xadc_and_litedram_windows_answer_through_bar0():
    with Board.open("sim", "sim-small") as b:
        temp = b.t.reg_read(regs.XADC_BASE + 0x200) >> 4              # XADC temperature result
        assert abs(regs.temp_code_to_c(temp) - b.info.temp_c) < 0.5
        scratch = regs.LITEDRAM_BASE + 0x2004                          # LiteDRAM ctrl_scratch
        assert b.t.reg_read(scratch) == 0x12345678
        b.t.reg_write(scratch, 0xA5A5)
        assert b.t.reg_read(scratch) == 0xA5A5
        assert b.t.reg_read(regs.LITEDRAM_BASE + 0x1000) == 1          # cal_ready of channel 0


def _wait_for(read, done, limit_s: float = 60.0):
    """Poll a reading until `done` holds (or the limit passes): the card runs in wall time, so a
    loaded machine only makes it take longer, never changes the outcome."""
    deadline = time.monotonic() + limit_s
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = read()
    return value


def test_die_warms_under_load_and_cools_when_idle():
    from otpu_core.board import prepare
    with Board.open("sim", "sim-small") as b:
        card = b.t.card
        die = lambda: (b.t.reg_read(regs.off("TEMP")), card.periph_state["thermal"]["die_c"])[1]   # noqa: E731
        idle0 = die()
        b.load_program(0x80000, prepare("loop count=400000 body=@e\nld dram=0 tmem=0 n=64\ne:\nhalt\n").image)
        b.start()
        die()            # the sensor's window starts with the run (the idle time of loading it would dilute it)
        hot = _wait_for(die, lambda t: t > idle0 + 0.005)
        b.set_reg("CTRL", 0)
        cooled = _wait_for(die, lambda t: t < hot)
    power = card.periph_state["thermal"]["power"]
    assert hot > idle0 + 0.005, (idle0, hot)              # DMA busy: more FPGA power, the die warms
    assert cooled < hot and power["fpga_w"] < 3.5           # idle again: it cools towards idle power
