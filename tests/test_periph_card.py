"""The peripherals as a host sees them on a simulated card: through BAR0 register accesses only."""
import pytest

from otpu_core.card import regs
from otpu_core.card.i2c import LM73_ADDR
from otpu_i2c.bitbang import BitBangMaster
from otpu_core.card.simcard import SimCard


@pytest.fixture
def faulty_card(tmp_path):
    card = SimCard("sim-periph", "sim-small", faults="no_calib:ch=1", directory=tmp_path)
    yield card
    card.close()


def test_status_calib_bits_temp_xadc_and_i2c_through_bar0(faulty_card):
    c = faulty_card
    status = c.reg_read(regs.off("STATUS"))
    assert status & regs.ST_CALIB0 and not status & regs.ST_CALIB1          # no_calib:ch=1
    assert c.reg_read(regs.LITEDRAM_BASE + 0x1000) == 1 and c.reg_read(regs.LITEDRAM_BASE + 0x1800) == 0
    ident = "".join(chr(c.reg_read(regs.LITEDRAM_BASE + 0x4800 + 4 * i)) for i in range(16))
    assert ident == "openTPU LiteDRAM"
    temp = c.reg_read(regs.off("TEMP"))
    assert temp >> 31 and 30 < (temp & 0xFFF) * 503.975 / 4096 - 273.15 < 60
    assert c.reg_read(regs.XADC_BASE + 0x200) >> 4 == temp & 0xFFF
    base = regs.I2C_BASE
    m = BitBangMaster(lambda o: c.reg_read(base + o), lambda o, v: c.reg_write(base + o, v), 0)
    assert m.read(LM73_ADDR, 0x07, 2) == b"\x01\x90"
