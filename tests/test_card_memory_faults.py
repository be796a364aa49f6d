"""Memory faults act on whatever passes the pins: a lane the host detunes on a calibrated
channel garbles host DMA until recalibration; stuck DQ bits, aliased address lines and an
uncalibrated channel reach the engine's view of DRAM too."""
import numpy as np
import pytest

from otpu_core.board import Board, BoardBackend, prepare
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


def beat_on(ch, chash, skip=0):
    """Logical address of a 64-byte beat that lives on channel `ch` (the skip-th such beat from 64 KiB)."""
    found = [a for a in range(1 << 16, 1 << 18, regs.BEAT) if regs.beat_channel(a, chash)[0] == ch]
    return found[skip]


def run(b, src, dst):
    """Copy one beat with the engine."""
    BoardBackend(b).run(f"ld dram={src} tmem=0 n=16\nst dram={dst} tmem=0 n=16\nhalt\n")


def run_from(b, at, *steps):
    """Run one-beat programs (an instruction and HALT) stored at `at`: none of them touches the
    other channel's pins. TMEM carries data from one program to the next."""
    for step in steps:
        b.load_program(at, prepare(step + "\nhalt\n").image)
        b.run(timeout=30)


def test_engine_stores_and_reads_pass_a_stuck_dq_bit():
    # DQ63 (bit 31 of odd words) stuck low: the programs themselves pass those pins unharmed
    with Board.open("sim:stuck", "sim-small", faults="stuck_dq:ch=0,bit=63,val=0") as b:
        healthy, stuck, back = beat_on(1, b.chash), beat_on(0, b.chash), beat_on(1, b.chash, 1)
        b.write(healthy, np.full(64, 0xFF, np.uint8))
        run(b, healthy, stuck)            # the engine's store to channel 0 lands with DQ63 low
        run(b, stuck, back)               # the engine reads it back and copies it to channel 1
        got = b.read(back, 64)
        assert np.array_equal(got, np.tile(np.array([0xFF] * 7 + [0x7F], np.uint8), 8))


def test_engine_stores_to_an_uncalibrated_channel_come_back_garbled():
    with Board.open("sim:nocal5", "sim-small", faults="no_calib:ch=1") as b:
        good, bad, back = beat_on(0, b.chash), beat_on(1, b.chash), beat_on(0, b.chash, 1)
        data = np.arange(64, dtype=np.uint8) + 1
        b.write(good, data)
        prog = beat_on(0, b.chash, 2)      # the programs must not pass the uncalibrated pins either
        run_from(b, prog, f"ld dram={good} tmem=0 n=16", f"st dram={bad} tmem=0 n=16",
                 f"ld dram={bad} tmem=0 n=16", f"st dram={back} tmem=0 n=16")
        got = b.read(back, 64)
        assert np.count_nonzero(got != data) >= 48 and wrong_lanes(got, data) == list(range(8))


def test_engine_reads_what_the_host_wrote_through_an_aliased_line():
    with Board.open("sim:alias", "sim-small", faults="addr_alias:ch=0,bit=20") as b:
        cell = beat_on(0, b.chash)
        ch, off = regs.beat_channel(cell, b.chash)
        alias_off = off | 1 << 20
        b.write_channel(0, off, np.full(64, 1, np.uint8))
        b.write_channel(0, alias_off, np.full(64, 2, np.uint8))      # overwrites the cell both names reach
        alias = next(a for a in range(0, 1 << 23, regs.BEAT) if regs.beat_channel(a, b.chash) == (0, alias_off))
        out = beat_on(1, b.chash)
        for src in (cell, alias):
            run(b, src, out)
            assert b.read(out, 64).tolist() == [2] * 64


def test_engine_stores_through_an_aliased_line_reach_the_cell_in_store_order():
    with Board.open("sim:alias2", "sim-small", faults="addr_alias:ch=0,bit=20") as b:
        cell = beat_on(0, b.chash)
        _, off = regs.beat_channel(cell, b.chash)
        alias = next(a for a in range(0, 1 << 24, regs.BEAT) if regs.beat_channel(a, b.chash) == (0, off | 1 << 20))
        one, two, out = beat_on(1, b.chash), beat_on(1, b.chash, 1), beat_on(1, b.chash, 2)
        b.write(one, np.full(64, 1, np.uint8))
        b.write(two, np.full(64, 2, np.uint8))
        # one program stores to the alias, then to the cell: the later store wins at both addresses
        BoardBackend(b).run(f"ld dram={two} tmem=0 n=16\nst dram={alias} tmem=0 n=16\n"
                            f"ld dram={one} tmem=0 n=16\nst dram={cell} tmem=0 n=16\nhalt\n")
        assert b.read_channel(0, off, 64).tolist() == [1] * 64
        assert b.read_channel(0, off | 1 << 20, 64).tolist() == [1] * 64
        b.write(cell, np.zeros(64, np.uint8))
        run(b, two, alias)                # a store to the alias alone lands in the cell
        assert b.read_channel(0, off, 64).tolist() == [2] * 64
        run(b, one, cell)
        run(b, alias, out)                # and the engine reads the alias as the cell
        assert b.read(out, 64).tolist() == [1] * 64
