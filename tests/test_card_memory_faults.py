"""Memory faults act on whatever passes the pins: a lane the host detunes on a calibrated
channel garbles host DMA until recalibration; stuck DQ bits, aliased address lines and an
uncalibrated channel reach the engine's view of DRAM too."""
import numpy as np
import pytest

from otpu_core.board import Board
from otpu_core.card import litedram as L
from otpu_core.card import regs

CH = 0
PHY = regs.LITEDRAM_BASE + L.B_DDRPHY + CH * L.BLOCK


def detune_read(board, lane):
    """Move one lane's IDELAY outside its eye, through BAR0 (the channel stays cal_ready)."""
    phy = board.t.card.periphs["litedram"]
    w, rbs = phy.windows[CH][lane], phy.state["ch"][CH]["rbs"][lane]
    tap = next(t for t in range(L.DELAYS) if abs(rbs * L.TAPS_PER_UI + t - w.read_centre) > w.read_half + 3)
    board.t.reg_write(PHY + L.PHY_DLY_SEL, 1 << lane)
    board.t.reg_write(PHY + L.PHY_RDLY_DQ_RST, 1)
    for _ in range(tap):
        board.t.reg_write(PHY + L.PHY_RDLY_DQ_INC, 1)


def detune_write(board, lane):
    """One more write bitslip on a lane: its writes land a bit time late."""
    board.t.reg_write(PHY + L.PHY_DLY_SEL, 1 << lane)
    board.t.reg_write(PHY + L.PHY_WDLY_DQ_BITSLIP, 1)


def recalibrate(board):
    """Hold the LiteDRAM core CPU and release it: it calibrates both channels from the top."""
    sc = regs.LITEDRAM_BASE + L.B_SELFCAL
    board.t.reg_write(sc + L.SC_HOLD, 1)
    board.t.reg_write(sc + L.SC_HOLD, 0)
    assert board.t.reg_read(sc + L.SC_STATE) & L.SC_DONE


def wrong_lanes(got, want, offset=0):
    return sorted(set(((np.flatnonzero(got != want) + offset) % 8).tolist()))


@pytest.fixture
def board():
    with Board.open("sim:lanes", "sim-small") as b:
        yield b


def test_a_detuned_read_lane_garbles_host_reads_until_recalibration(board):
    data = np.random.default_rng(1).integers(0, 256, 8192, dtype=np.uint8)
    board.write_channel(CH, 4096, data)
    assert np.array_equal(board.read_channel(CH, 4096, data.size), data)
    detune_read(board, 3)
    assert board.info.calibrated[CH] and board.t.reg_read(regs.off("STATUS")) & regs.ST_CALIB0   # still cal_ready
    got = board.read_channel(CH, 4096, data.size)
    assert wrong_lanes(got, data, 4096) == [3]
    assert np.count_nonzero(got != data) == data.size // 8          # every byte of lane 3, nothing else
    assert np.array_equal(board.read_channel(1, 0, 64), np.zeros(64, np.uint8))   # the other channel is untouched
    recalibrate(board)
    assert np.array_equal(board.read_channel(CH, 4096, data.size), data)          # the cells were right all along


def test_a_detuned_write_lane_stores_garbage_that_outlives_recalibration(board):
    data = np.arange(4096, dtype=np.uint8)
    detune_write(board, 5)
    board.write_channel(CH, 0, data)
    recalibrate(board)
    got = board.read_channel(CH, 0, data.size)
    assert wrong_lanes(got, data) == [5]
    board.write_channel(CH, 0, data)                                 # written again on a tuned lane
    assert np.array_equal(board.read_channel(CH, 0, data.size), data)
