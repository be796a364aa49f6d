"""The bit-bang master on the simulated buses: arbitration lost to another master (back-off, retries,
then a clear error), the half-bit pacing of --khz, a stretched clock, and each I2C check's row."""
from __future__ import annotations

import time

import pytest

from otpu_core import target
from otpu_core.card import faults as F
from otpu_core.card.i2c import I2C_CTRL, I2C_IN, LM73_ADDR, I2cBuses
from otpu_core.checks import CheckContext, Status
from otpu_core.corechecks import device
from otpu_i2c import checks
from otpu_i2c.bitbang import BitBangMaster, BusBusy, StuckBus, scl_bit, sda_bit

YPCB = target.load("ypcb-00338")


class Pins:
    """The pin window of a simulated bus pair. Another master starts with ours in the first
    `contend` transactions on bus 0: it drives SDA low whenever SCL is high for the next 30 reads
    of I2C_IN (its own address wins, then its transfer ends and the bus is idle again)."""
    CONTENDED_READS = 30

    def __init__(self, contend: int = 0, spec: str = ""):
        self.bus = I2cBuses(YPCB, 1, {}, F.parse(spec))
        self.contend, self.reads_left, self.ctrl = contend, 0, 0
        self.writes: list[float] = []

    def write(self, off, v):
        if off == I2C_CTRL:
            self.writes.append(time.perf_counter())
            start = not self.ctrl & sda_bit(0) and v & sda_bit(0) and not v & scl_bit(0)
            if start and self.contend and not self.reads_left:
                self.contend -= 1
                self.reads_left = self.CONTENDED_READS
            self.ctrl = v
        self.bus.write(off, v)

    def read(self, off):
        v = self.bus.read(off)
        if off == I2C_IN and self.reads_left:
            self.reads_left -= 1
            if v & scl_bit(0):
                v &= ~sda_bit(0)
        return v


def test_lost_arbitration_backs_off_and_retries():
    pins = Pins(contend=2)
    m = BitBangMaster(pins.read, pins.write, 0)
    assert m.read(LM73_ADDR, 0x07, 2) == b"\x01\x90"             # the third attempt wins the bus
    assert pins.contend == 0 and not pins.reads_left


def test_a_master_that_never_lets_go_ends_in_bus_busy():
    pins = Pins(contend=99)
    with pytest.raises(BusBusy, match="I2C bus sensor: lost arbitration 5 times") as e:
        BitBangMaster(pins.read, pins.write, 0).read(LM73_ADDR, 0x07, 2)
    assert e.value.exit_code == 3 and "SMBus controller" in e.value.hint
    assert pins.ctrl & (scl_bit(0) | sda_bit(0)) == 0            # both lines released


def test_khz_holds_every_half_bit():
    pins = Pins()
    half = 0.5 / 20e3                                             # 20 kHz
    BitBangMaster(pins.read, pins.write, 0, half_s=half).read(LM73_ADDR, 0x07, 2)
    gaps = [b - a for a, b in zip(pins.writes, pins.writes[1:])]
    assert len(gaps) > 80 and min(gaps) >= half


def test_a_clock_stretched_past_the_timeout_is_a_stuck_bus():
    pins = Pins()
    m = BitBangMaster(pins.read, pins.write, 1, stretch_timeout_s=0.005)
    m.start()
    assert m.write_byte(0x60 << 1)
    assert m.write_byte(0x98)                                     # PMBus: it stretches after the command
    pins.bus.state["buses"][1]["stretch"] = 10 ** 9              # ... and now never lets go
    with pytest.raises(StuckBus, match="SCL held low for more than 5 ms"):
        m.repeated_start()
    assert pins.ctrl & (scl_bit(1) | sda_bit(1)) == 0


@pytest.fixture
def ctx():
    c = CheckContext("sim:i2c", {"target": "sim-small"})
    yield c
    device.close(c)


def test_checks_name_what_answers(ctx):
    assert checks.pins(ctx).message == "pins ok: SCL and SDA idle high, follow the drive"
    assert checks.scan(ctx, bus=0).message == "bus 0 (sensor): 0x4a LM73"
    r = checks.scan(ctx, bus=1)
    assert r.message == "bus 1 (smbus): 0x40 INA226, 0x60 PMBus 1.2" and r.data["found"] == {"0x40": "INA226", "0x60": "PMBus 1.2"}


def test_checks_fail_on_a_grounded_line():
    ctx = CheckContext("sim:i2c", {"target": "sim-small", "fault": "i2c_stuck:bus=1,line=1"})
    try:
        pins = checks.pins(ctx)
        assert pins.status == Status.FAIL and pins.message == "bus 1 SDA low while released" and "pull-up" in pins.hint
        scan = checks.scan(ctx, bus=1)
        assert scan.status == Status.FAIL and "SDA stays low after nine clocks" in scan.message
        assert checks.scan(ctx, bus=0).status == Status.PASS
    finally:
        device.close(ctx)


def test_without_the_plugin_the_core_keeps_the_rows(ctx):
    from otpu_core.corechecks import i2cchecks
    assert i2cchecks.pins(ctx).message == "pins ok: SCL and SDA idle high, follow the drive"
    r = i2cchecks.scan(ctx, bus=1)
    assert r.status == Status.SKIP and "needs the otpu-i2c plugin" in r.message
