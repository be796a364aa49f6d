"""Which boards the simulated card models: LiteDRAM boards calibrate through the CSR window,
other two-channel boards calibrate themselves (MIG-style), four-channel boards are refused."""
import pytest

from otpu_core.board import Board
from otpu_core.card import regs
from otpu_core.card.simcard import SimCard
from otpu_core.errors import TargetError


def mig_target(tmp_path):
    """sim-small with DDR4 memory: a two-channel board whose controller is not LiteDRAM."""
    text = open("targets/sim-small.toml").read().replace('memory = "DDR3-1066"', 'memory = "DDR4-2400"')
    path = tmp_path / "mig-small.toml"
    path.write_text(text)
    return str(path)


def test_litedram_board_has_hostcal_and_its_csr_window(tmp_path):
    card = SimCard("sim-ld", "sim-small", directory=tmp_path)
    try:
        assert regs.decode_caps(card.reg_read(regs.off("CAPS")))["hostcal"]
        ident = "".join(chr(card.reg_read(regs.LITEDRAM_BASE + 0x4800 + 4 * i)) for i in range(7))
        assert ident == "openTPU"
    finally:
        card.close()


@pytest.mark.parametrize("faults, calib", [("", regs.ST_CALIB0 | regs.ST_CALIB1), ("no_calib:ch=1", regs.ST_CALIB0)])
def test_mig_board_calibrates_itself_and_has_no_csr_window(tmp_path, faults, calib):
    card = SimCard("sim-mig", mig_target(tmp_path), faults=faults or None, directory=tmp_path)
    try:
        assert not regs.decode_caps(card.reg_read(regs.off("CAPS")))["hostcal"]
        assert card.reg_read(regs.off("STATUS")) & (regs.ST_CALIB0 | regs.ST_CALIB1) == calib
        for off in (0x0, 0x1000, 0x1800, 0x4800, 0x8008):
            assert card.reg_read(regs.LITEDRAM_BASE + off) == regs.UNMAPPED
        card.reg_write(regs.LITEDRAM_BASE + 0x2004, 0x1234)         # the LiteDRAM scratch CSR: nothing there
        assert card.reg_read(regs.LITEDRAM_BASE + 0x2004) == regs.UNMAPPED
        assert "litedram" not in card.periphs and "i2c" in card.periphs
    finally:
        card.close()


def test_four_channel_board_is_refused_clearly_and_leaves_no_card(tmp_path):
    with pytest.raises(TargetError) as e:
        SimCard("sim-bcu", "bcu1525", directory=tmp_path)
    assert "bcu1525" in e.value.message and "2 DRAM channels" in e.value.message and "has 4" in e.value.message
    assert "two-channel target" in e.value.hint
    assert not (tmp_path / "sim-bcu.card.json").exists()
    SimCard("sim-bcu", "sim-small", directory=tmp_path).close()     # the name is free for a card it can model


def test_four_channel_board_through_board_open_exits_2():
    with pytest.raises(TargetError) as e:
        Board.open("sim:bcu", "bcu1525")
    assert e.value.exit_code == 2
