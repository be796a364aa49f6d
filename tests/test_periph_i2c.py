"""I2C: every device answers real bit-banged transactions through I2C_CTRL/I2C_IN only; readings
decoded with the datasheet formulas match independently computed values and follow load."""
import numpy as np
import pytest

from otpu_core import target
from otpu_core.card import faults as F
from otpu_core.card.i2c import I2C_CTRL, I2C_IN, INA226_ADDR, LM73_ADDR, PMBUS_ADDR, STRETCH_POLLS, I2cBuses
from otpu_i2c.bitbang import BitBangMaster, I2cError, I2cNack
from otpu_core.card.thermal import ACTIVITY_UNITS, DRAM_RATE_KEY, Thermal

YPCB = target.load("ypcb-00338")
FULL = {**{u: 1.0 for u in ACTIVITY_UNITS}, DRAM_RATE_KEY: 12e9}


class Recorder:
    """The card's pin registers with a log of every access: (op, value) with I2C_IN levels."""

    def __init__(self, serial=1, spec=""):
        faults = F.parse(spec)
        self.thermal = Thermal(YPCB, serial, {}, faults)
        self.bus = I2cBuses(YPCB, serial, {}, faults, self.thermal)
        self.log = []

    def read(self, off):
        v = self.bus.read(off)
        self.log.append(("r", off, v))
        return v

    def write(self, off, v):
        self.bus.write(off, v)
        self.log.append(("w", off, v))

    def master(self, bus):
        return BitBangMaster(self.read, self.write, bus)

    def levels(self, bus):
        """(scl, sda) after every access, as the wires were."""
        out = []
        for op, off, v in self.log:
            if op == "r" and off == I2C_IN:
                out.append(((v >> 2 * bus) & 1, (v >> 2 * bus + 1) & 1))
        return out


def compare(got, want):
    got, want = np.asarray(got, float), np.asarray(want, float)
    maxabs = float(np.max(np.abs(got - want)))
    cos = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
    return maxabs, cos


def linear11(word):
    """Independent LINEAR11 decoder (PMBus spec: bits 15:11 exponent, 10:0 mantissa, both signed)."""
    n = word >> 11
    n = n - 32 if n & 0x10 else n
    y = word & 0x7FF
    y = y - 2048 if y & 0x400 else y
    return y * 2.0 ** n


def test_scan_finds_each_device_and_absent_addresses_nack():
    rec = Recorder()
    found = {b: [a for a in range(0x08, 0x78) if rec.master(b).probe(a)] for b in (0, 1)}
    assert found == {0: [LM73_ADDR], 1: [INA226_ADDR, PMBUS_ADDR]}
    with pytest.raises(I2cNack, match="0x4a on bus smbus did not acknowledge its address") as e:
        rec.master(1).read(LM73_ADDR, 0, 2)
    assert e.value.exit_code == 3
    assert rec.master(1).levels() == (1, 1)      # the NACKed transaction ended with a STOP


def test_pointer_read_uses_a_repeated_start_and_no_stop_before_it():
    rec = Recorder()
    rec.master(0).read(LM73_ADDR, 0x07, 2)
    lv = rec.levels(0)
    events = []
    for (scl0, sda0), (scl1, sda1) in zip(lv, lv[1:]):
        if scl0 and scl1 and sda0 != sda1:
            events.append("START" if not sda1 else "STOP")
    assert events == ["START", "START", "STOP"]


def test_lm73_id_temperature_and_resolution():
    rec = Recorder(serial=3)
    m = rec.master(0)
    assert m.read(LM73_ADDR, 0x07, 2) == b"\x01\x90"
    assert m.read(LM73_ADDR, None, 2) == b"\x01\x90"          # the pointer stays where it was set
    got, want, true = [], [], []
    for step in range(6):
        rec.thermal.tick(60, FULL if step < 3 else {})
        raw = int.from_bytes(m.read(LM73_ADDR, 0x00, 2), "big", signed=True)
        got.append(raw / 128)                                    # datasheet: C = raw / 128
        want.append(np.floor(rec.thermal.board_c / 0.25) * 0.25)  # 11-bit power-on resolution
        true.append(rec.thermal.board_c)
        assert raw & 0x1F == 0
    maxabs, cos = compare(got, want)
    assert maxabs == 0.0 and cos > 0.999999, (maxabs, cos)
    maxabs, cos = compare(got, true)
    assert maxabs < 0.25 and cos > 0.99999 and got[2] > got[0], (maxabs, cos)
    # 14-bit resolution: RES = 11 in the control register (written as pointer 0x04, data 0x60)
    m.start()
    assert m.write_byte(LM73_ADDR << 1) and m.write_byte(0x04) and m.write_byte(0x60)
    m.stop()
    raw = int.from_bytes(m.read(LM73_ADDR, 0x00, 2), "big", signed=True)
    assert abs(raw / 128 - rec.thermal.board_c) < 0.03125
    assert m.read(LM73_ADDR, 0x04, 1)[0] & 0x61 == 0x61       # RES kept, DAV set
    # power-down keeps the last conversion while the board warms
    m.start()
    assert m.write_byte(LM73_ADDR << 1) and m.write_byte(0x01) and m.write_byte(0xC0)
    m.stop()
    frozen = m.read(LM73_ADDR, 0x00, 2)
    rec.thermal.tick(600, FULL)
    assert m.read(LM73_ADDR, 0x00, 2) == frozen
    m.start()
    assert m.write_byte(LM73_ADDR << 1) and m.write_byte(0x01) and m.write_byte(0x40)
    m.stop()
    assert int.from_bytes(m.read(LM73_ADDR, 0x00, 2), "big") > int.from_bytes(frozen, "big")
    # an undefined pointer is NACKed
    with pytest.raises(I2cNack, match="command 0x05"):
        m.read(LM73_ADDR, 0x05, 1)


def test_lm73_alert_pin_follows_thigh_in_comparator_mode():
    cool = Recorder()
    assert cool.read(I2C_IN) & 0x10                            # released: board below 64 C
    hot = Recorder(spec="hot:c=95")
    assert hot.thermal.board_c > 64
    assert not hot.read(I2C_IN) & 0x10                         # ALERT0 pulled low
    assert hot.master(0).read(LM73_ADDR, 0x04, 1)[0] & 0x0C == 0x0C   # ALRT_STAT and THI


def test_ina226_ids_bus_shunt_and_calibrated_current():
    rec = Recorder(serial=5)
    m = rec.master(1)
    assert m.read(INA226_ADDR, 0xFE, 2) == b"\x54\x49" and m.read(INA226_ADDR, 0xFF, 2) == b"\x22\x60"
    assert m.read(INA226_ADDR, 0x00, 2) == b"\x41\x27"
    assert m.read(INA226_ADDR, 0x04, 2) == b"\x00\x00"        # no calibration yet: current reads 0
    rails = rec.thermal.rails()
    bus_v = int.from_bytes(m.read(INA226_ADDR, 0x02, 2), "big") * 1.25e-3
    shunt_v = int.from_bytes(m.read(INA226_ADDR, 0x01, 2), "big", signed=True) * 2.5e-6
    assert abs(bus_v - rails["input_v"]) <= 0.625e-3
    assert abs(shunt_v / 0.002 - rails["input_a"]) <= 1.25e-6 / 0.002
    # calibrate for a 1 mA current LSB: CAL = 0.00512 / (1e-3 A x 0.002 ohm) = 2560
    m.start()
    for byte in (INA226_ADDR << 1, 0x05, 2560 >> 8, 2560 & 0xFF):
        assert m.write_byte(byte)
    m.stop()
    got_a, want_a, got_w, want_w = [], [], [], []
    for step in range(5):
        rec.thermal.tick(20, {u: step / 4 for u in ACTIVITY_UNITS})
        r = rec.thermal.rails()
        got_a.append(int.from_bytes(m.read(INA226_ADDR, 0x04, 2), "big", signed=True) * 1e-3)
        got_w.append(int.from_bytes(m.read(INA226_ADDR, 0x03, 2), "big") * 25e-3)   # Power_LSB = 25 x Current_LSB
        want_a.append(r["input_a"])
        want_w.append(r["input_a"] * r["input_v"])
    maxabs, cos = compare(got_a, want_a)
    assert maxabs < 2.5e-3 and cos > 0.99999, (maxabs, cos)
    maxabs, cos = compare(got_w, want_w)
    assert maxabs < 0.06 and cos > 0.99999, (maxabs, cos)
    assert got_a[-1] > got_a[0] * 1.2                           # the 12 V input follows the load
    # reads of read-only registers ignore nothing and writes to them are NACKed
    m.start()
    assert m.write_byte(INA226_ADDR << 1) and m.write_byte(0x02)
    assert not m.write_byte(0x12)
    m.stop()


def test_pmbus_regulator_readings_strings_and_faults():
    rec = Recorder(serial=9)
    m = rec.master(1)
    assert m.read(PMBUS_ADDR, 0x98, 1) == b"\x22"
    assert m.read(PMBUS_ADDR, 0x99, 0, block=True) == b"OTPU-SIM"
    assert m.read(PMBUS_ADDR, 0x9A, 0, block=True) == b"VCCINT-VR"
    mode = m.read(PMBUS_ADDR, 0x20, 1)[0]
    assert mode >> 5 == 0                                      # linear VOUT mode
    exp = (mode & 0x1F) - 32 if mode & 0x10 else mode & 0x1F
    got, want = [], []
    for step in range(5):
        rec.thermal.tick(45, {u: step / 4 for u in ACTIVITY_UNITS})
        r, board = rec.thermal.rails(), rec.thermal.board_c
        word = {cmd: int.from_bytes(m.read(PMBUS_ADDR, cmd, 2), "little") for cmd in (0x88, 0x8B, 0x8C, 0x8D, 0x96, 0x97)}
        got += [linear11(word[0x88]), word[0x8B] * 2.0 ** exp, linear11(word[0x8C]), linear11(word[0x96]),
                linear11(word[0x97])]
        want += [r["input_v"], r["vccint_v"], r["vccint_w"] / r["vccint_v"], r["vccint_w"], r["vccint_w"] / 0.87]
        assert linear11(word[0x8D]) > board
    maxabs, cos = compare(got, want)
    assert maxabs < 0.02 and cos > 0.99999, (maxabs, cos)
    # an unsupported command is NACKed and latched as a CML fault until CLEAR_FAULTS
    with pytest.raises(I2cNack, match="command 0x55"):
        m.read(PMBUS_ADDR, 0x55, 2)
    assert m.read(PMBUS_ADDR, 0x7E, 1)[0] & 0x80 and m.read(PMBUS_ADDR, 0x78, 1)[0] & 0x02
    m.start()
    assert m.write_byte(PMBUS_ADDR << 1) and m.write_byte(0x03)
    m.stop()
    assert m.read(PMBUS_ADDR, 0x7E, 1) == b"\x00"


def test_pmbus_stretches_the_clock_and_the_lm73_does_not():
    def held_polls(addr, bus, cmd):
        rec = Recorder()
        rec.master(bus).read(addr, cmd, 1)
        held, ctrl = 0, 0
        for op, off, v in rec.log:
            if op == "w":
                ctrl = v
            elif off == I2C_IN and not ctrl & (1 << 2 * bus) and not v & (1 << 2 * bus):
                held += 1                     # the master released SCL but it reads low
        return held

    assert held_polls(PMBUS_ADDR, 1, 0x98) == STRETCH_POLLS
    assert held_polls(LM73_ADDR, 0, 0x07) == 0
    assert held_polls(INA226_ADDR, 1, 0xFE) == 0


def test_master_keeps_the_other_bus_and_detects_stuck_lines():
    rec = Recorder()
    rec.write(I2C_CTRL, 0b10)                # another user of the pins holds SDA0 low
    rec.master(1).read(INA226_ADDR, 0xFE, 2)
    assert all(v & 0b10 for op, off, v in rec.log if op == "w")
    grounded = Recorder(spec="i2c_stuck:bus=0,line=1")
    with pytest.raises(I2cError, match="bus sensor: SDA stays low after nine clocks and a STOP"):
        grounded.master(0).start()
    rec.write(I2C_CTRL, 0)
    rec.bus.state["buses"][1]["stretch"] = 10 ** 9     # a device that never lets go of SCL
    with pytest.raises(I2cError, match=r"SCL stays low with the host released \(stuck bus\)"):
        BitBangMaster(rec.read, rec.write, 1, stretch_timeout_s=0.005).read(PMBUS_ADDR, 0x98, 1)


def test_bus_state_is_json_and_survives_a_reload():
    import json
    rec = Recorder()
    m = rec.master(0)
    m.read(LM73_ADDR, 0x07, 2)
    state = json.loads(json.dumps(rec.bus.state))
    again = I2cBuses(YPCB, 1, state, F.NO_FAULTS, rec.thermal)
    assert BitBangMaster(again.read, again.write, 0).read(LM73_ADDR, None, 2) == b"\x01\x90"


def test_standalone_bus_has_its_own_thermal_model_that_ticks():
    bus = I2cBuses(YPCB, 2, {}, F.NO_FAULTS)
    m = BitBangMaster(bus.read, bus.write, 1)
    before = int.from_bytes(m.read(PMBUS_ADDR, 0x8C, 2), "little")
    bus.tick(120, FULL)
    assert linear11(int.from_bytes(m.read(PMBUS_ADDR, 0x8C, 2), "little")) > linear11(before) + 1


def test_recover_frees_a_bus_left_mid_read():
    rec = Recorder()
    m = rec.master(1)
    m.start()
    assert m.write_byte((INA226_ADDR << 1) | 1)    # the INA226 now sends CONFIG 0x4127: bit 7 = 0 on SDA
    m._drive(False, False)                          # ... and the master lets go of SCL and walks away
    assert m.levels() == (1, 0)
    m.wait_idle()                                   # busy past the timeout: nine clocks and a STOP free it
    assert m.levels() == (1, 1)
    assert m.read(INA226_ADDR, 0xFF, 2) == b"\x22\x60"


from hypothesis import given, strategies as st  # noqa: E402

from otpu_core.card.i2c import linear11 as encode_linear11, lm73_raw  # noqa: E402


@given(st.floats(-1000.0, 1000.0, allow_nan=False))
def test_linear11_keeps_ten_bits_of_any_reading(value):
    word = encode_linear11(value)
    assert 0 <= word <= 0xFFFF
    got = linear11(word)
    assert abs(got - value) <= max(abs(value) * 2.0 ** -10, 2.0 ** -17)


@given(st.floats(-55.0, 150.0, allow_nan=False), st.sampled_from([0.25, 0.125, 0.0625, 0.03125]))
def test_lm73_word_truncates_to_the_resolution(celsius, res):
    raw = lm73_raw(celsius, res)
    signed = raw - 0x10000 if raw & 0x8000 else raw
    assert 0 <= celsius - signed / 128 < res + 1e-12       # two's complement truncation: towards -inf
