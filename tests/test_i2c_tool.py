"""otpu-i2c: conversions against datasheet worked examples, read-only by construction (a bus analyser
on the pins sees no data byte written by any command or option), the documented error of each
bus fault, refused codes and addresses, the I2C lock, and a host adapter through smbus2."""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import numpy as np
import pytest

from otpu_core.board import Board
from otpu_core.card import regs
from otpu_core.card.i2c import I2C_IN, I2cBuses
from otpu_core.cli import run_app
from otpu_i2c import cli, devices

CARD = ["--dev", "sim:i2c", "--target", "sim-small"]


def i2c(*args):
    return run_app(cli.app, "otpu-i2c", list(args))


# ---- conversions: worked examples computed from the datasheets' formulas -------------------------

@pytest.mark.parametrize("word,value", [
    (0xD3C0, 15.0),            # PMBus spec example: N = -6, Y = 960
    (0x0000, 0.0),
    (0xF800 | 0x3FF, 1023 * 2.0 ** -1),   # N = -1, largest positive mantissa
    (0x0400, -1024.0),         # N = 0, Y = -1024 (the most negative mantissa)
    (0x7BFF, 1023 * 2.0 ** 15),
    (0xE2E0, 46.0),            # N = -4, Y = 736
])
def test_linear11(word, value):
    assert devices.linear11(word) == value


def test_linear16_follows_vout_mode():
    assert devices.linear16(0x0180, 0x17) == 0.75          # VOUT_MODE 0x17: exponent -9, 384 / 512
    assert devices.linear16(0x1000, 0x14) == 1.0           # exponent -12
    assert devices.linear16(0xFFFF, 0x00) == 65535.0
    assert devices.linear16(0x1000, 0x20) is None and devices.linear16(0x1000, 0x40) is None   # VID, direct


@pytest.mark.parametrize("raw,celsius", [(0x1900, 50.0), (0x0000, 0.0), (0xE700, -50.0), (0x0080, 1.0),
                                         (0x4B00, 150.0), (0xFFE0, -0.25), (0x0C90, 25.125)])
def test_lm73_temperature(raw, celsius):
    assert devices.lm73_celsius(raw) == celsius


@pytest.mark.parametrize("kind,shunt,bus,volts", [
    ("INA226", 0x0FA0, 0x2580, (4000 * 2.5e-6, 9600 * 1.25e-3)),      # 10 mV over the shunt, 12 V bus
    ("INA226", 0xF060, 0x0000, (-4000 * 2.5e-6, 0.0)),                # -10 mV: current flows back
    ("INA230", 0x7FFF, 0x7FFF, (32767 * 2.5e-6, 32767 * 1.25e-3)),
    ("INA3221", 0x0FA0, 0x2EE0, (500 * 40e-6, 1500 * 8e-3)),          # bits 15:3: 20 mV, 12 V
    ("INA3221", 0xF060, 0x0008, (-500 * 40e-6, 8e-3)),
])
def test_ina_voltages(kind, shunt, bus, volts):
    got = devices.ina_volts(kind, shunt, bus)
    assert got[0] == pytest.approx(volts[0], abs=1e-12) and got[1] == pytest.approx(volts[1], abs=1e-12)


# ---- read-only by construction --------------------------------------------------------------------

class Analyser:
    """A passive bus analyser on the card's pins: every level I2C_IN showed, decoded into transactions."""

    def __init__(self):
        self.samples: list[int] = []

    def attach(self, monkeypatch):
        real = I2cBuses.read

        def read(buses, off):
            v = real(buses, off)
            if off == I2C_IN:
                self.samples.append(v)
            return v
        monkeypatch.setattr(I2cBuses, "read", read)

    def segments(self, bus: int) -> list[list[int]]:
        """Per START / repeated START: the bytes clocked after it (address first), until the next START or STOP."""
        scl_bit, sda_bit = regs.i2c_scl(bus), regs.i2c_sda(bus)
        out, cur, bits, prev = [], None, [], (1, 1)
        for v in self.samples:
            scl, sda = int(bool(v & scl_bit)), int(bool(v & sda_bit))
            if prev[0] and scl and prev[1] != sda:          # SDA moved with SCL high: START or STOP
                if cur is not None:
                    out.append(cur)
                cur, bits = ([], []) if not sda else (None, [])
            elif scl and not prev[0] and cur is not None:   # SCL rose: a bit
                bits.append(sda)
                if len(bits) == 9:
                    cur.append(int("".join(map(str, bits[:8])), 2))
                    bits = []
            prev = (scl, sda)
        if cur:
            out.append(cur)
        return [s for s in out if s]


def test_no_command_or_option_writes_a_data_byte(monkeypatch, tmp_path, capsys):
    a = Analyser()
    a.attach(monkeypatch)
    runs = [("scan",), ("scan", "--bus", "smbus", "--no-identify", "--first", "0x3c", "--last", "0x44"),
            ("scan", "--bus", "sensor", "--first", "0x48", "--last", "0x4f"), ("read", "sensor", "0x4a"), ("read", "sensor", "0x4a", "7", "-n", "2"),
            ("read", "sensor", "0x4a", "0x03", "-n", "2"), ("read", "smbus", "0x60", "0x9a", "--block"),
            ("read", "smbus", "0x40", "0xfe", "-n", "2", "--json"), ("read", "smbus", "0x60", "0x8b", "-n", "2", "--khz", "400"),
            ("pmbus-dump", "smbus", "0x60"), ("pmbus-dump", "smbus", "0x60", "--json"), ("sensors",),
            ("sensors", "--refresh", "--json"), ("levels",), ("levels", "--bus", "smbus", "--json")]
    for args in runs:
        assert i2c(*args, *CARD) == 0, (args, capsys.readouterr())
    for bus in (0, 1):
        segs = a.segments(bus)
        assert len(segs) > 50
        for seg in segs:
            if seg[0] & 1 == 0:                             # address + W: only the command / pointer byte follows
                assert len(seg) <= 2, [hex(b) for b in seg]
    writes = [s for s in a.segments(1) if s[0] & 1 == 0]
    assert {s[1] for s in writes if len(s) == 2} >= {0x98, 0x99, 0x9A, 0x8B, 0xFE, 0xFF}


@pytest.mark.parametrize("args,words", [
    (("read", "smbus", "0x60", "0x03"), "command 0x03 is PMBus CLEAR_FAULTS"),
    (("read", "smbus", "0x60", "0x15"), "a STORE_ / RESTORE_ command"),
    (("read", "smbus", "0x41", "0x11"), "(0x41 is not)"),
    (("read", "sensor", "0x30", "0"), "0x30 is a DIMM SPD write-protect / page address"),
    (("read", "smbus", "0x0c", "1"), "0x0c is the SMBus alert response address"),
    (("read", "smbus", "0x61", "1"), "0x61 is the SMBus ARP address"),
])
def test_refused_codes_and_addresses(args, words, capsys):
    assert i2c(*args, *CARD) == 2
    assert words in capsys.readouterr().err


def test_a_send_byte_code_is_a_plain_register_of_an_identified_lm73(capsys):
    assert i2c("read", "sensor", "0x4a", "3", "-n", "2", "--json", *CARD) == 0
    assert json.loads(capsys.readouterr().out)["word_msb_first"] == f"0x{32 * 128:04x}"      # TLOW at power-on: 32 C


# ---- bus faults and their documented errors -------------------------------------------------------

@pytest.mark.parametrize("fault,args,words", [
    ("i2c_stuck:bus=1,line=0", ("scan", "--bus", "smbus"), "I2C bus smbus: SCL stays low with the host released"),
    ("i2c_stuck:bus=0,line=1", ("read", "sensor", "0x4a", "0"), "I2C bus sensor: SDA stays low after nine clocks"),
    ("i2c_pullup:bus=0", ("levels", "--bus", "sensor"), None),
    ("i2c_pullup:bus=0", ("scan", "--bus", "sensor"), "SCL and SDA both read low with every driver released: no pull-ups"),
    ("i2c_nack:bus=0,addr=0x4a", ("read", "sensor", "0x4a", "0"), "I2C device 0x4a on bus sensor did not acknowledge its address"),
])
def test_each_bus_fault_gives_its_error(fault, args, words, capsys):
    rc = i2c(*args, "--dev", "sim:i2c", "--target", "sim-small", "--fault", fault)
    out, err = capsys.readouterr()
    if words is None:                                     # levels shows what the pins say
        assert rc == 0 and "sensor  SCL 0 SDA 0" in out
        return
    assert rc == 3, (out, err)
    assert words in out + err


def test_a_nacking_device_is_absent_from_the_scan(capsys):
    assert i2c("scan", "--bus", "sensor", "--json", "--dev", "sim:i2c", "--target", "sim-small",
               "--fault", "i2c_nack:bus=0,addr=0x4a") == 0
    assert json.loads(capsys.readouterr().out)["buses"]["sensor"]["devices"] == []


def test_the_i2c_lock_names_its_holder(capsys):
    with Board.open("sim:i2c", "sim-small", check=False, lock=False) as b:
        devname = b.t.devname
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom otpu_i2c.bus import I2cLock\n"
                               f"lock = I2cLock({devname!r}).__enter__()\nprint('held', flush=True)\ntime.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert i2c("levels", *CARD) == 3
        err = capsys.readouterr().err
        assert "I2C lock" in err and f"held by PID {holder.pid}" in err and "for more than 2 s" in err
    finally:
        holder.kill()
        holder.wait()
    assert i2c("levels", *CARD) == 0


# ---- options -------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (("scan", "--khz", "0"), "--khz 0.0: must be 1..400"), (("scan", "--khz", "nan"), "--khz nan"),
    (("scan", "--khz", "1000"), "--khz 1000.0"), (("scan", "--bus", "usb"), "bus 'usb': not a bus otpu-i2c knows"),
    (("scan", "--first", "0x50", "--last", "0x40"), "--first 0x50 is above --last 0x40"),
    (("scan", "--first", "zz"), "address 'zz': not a number"),
    (("read", "sensor", "0x80"), "address 0x80: outside the 7-bit device range"),
    (("read", "sensor", "0x4a", "0x100"), "register 0x100: a register or command code is one byte"),
    (("read", "sensor", "0x4a", "7", "-n", "0"), "-n"), (("read", "sensor", "0x4a", "7", "-n", "33"), "-n"),
    (("read", "smbus", "0x60", "--block"), "--block needs REG"),
    (("read", "all", "0x4a"), "BUS 'all': this command reads one bus"),
    (("levels", "--bus", "/dev/i2c-3"), "a host adapter does not show its pin levels"),
    (("pmbus-dump", "smbus", "x"), "address 'x'"),
])
def test_bad_values_exit_2_naming_what_is_allowed(args, words, capsys):
    assert i2c(*args) == 2
    assert words in capsys.readouterr().err


def test_version_and_help(capsys):
    assert i2c("--version") == 0 and capsys.readouterr().out.startswith("otpu-i2c ")
    for command in ("scan", "read", "pmbus-dump", "sensors", "levels"):
        assert i2c(command, "--help") == 0 and "--help" in capsys.readouterr().out


# ---- a host adapter through smbus2 ----------------------------------------------------------------

class FakeSMBus:
    """/dev/i2c-N as smbus2 would drive it: an LM73 at 0x48 and a PMBus device at 0x58, every call logged."""
    LM73 = {0x00: b"\x19\x00", 0x07: b"\x01\x90"}
    PMBUS = {0x98: b"\x22", 0x20: b"\x17", 0x8B: (384).to_bytes(2, "little"), 0x97: (0xD3C0).to_bytes(2, "little")}
    BLOCKS = {0x99: b"ACME", 0x9A: b"VR9"}

    def __init__(self, number):
        self.number, self.log = number, []
        FakeSMBus.last = self

    def read_byte(self, addr):
        self.log.append(("read_byte", addr))
        if addr not in (0x48, 0x58):
            raise OSError(6, "No such device or address")
        return 0

    def i2c_rdwr(self, *msgs):
        self.log.append(("i2c_rdwr", [(m.addr, m.flags, bytes(m)) for m in msgs]))
        regmap = {0x48: self.LM73, 0x58: self.PMBUS}.get(msgs[0].addr)
        if regmap is None:
            raise OSError(121, "Remote I/O error")
        reg = bytes(msgs[0])[0] if len(msgs) == 2 else 0x00
        if reg not in regmap:
            raise OSError(121, "Remote I/O error")
        data = regmap[reg][:msgs[-1].len]
        ctypes.memmove(msgs[-1].buf, data, len(data))

    def read_block_data(self, addr, cmd):
        self.log.append(("read_block_data", addr, cmd))
        if addr != 0x58 or cmd not in self.BLOCKS:
            raise OSError(121, "Remote I/O error")
        return list(self.BLOCKS[cmd])

    def close(self):
        pass


def test_a_host_adapter_through_smbus2_is_read_only_too(monkeypatch, capsys):
    import smbus2
    monkeypatch.setattr(smbus2, "SMBus", FakeSMBus)
    assert i2c("scan", "--bus", "/dev/i2c-5", "--json") == 0
    found = json.loads(capsys.readouterr().out)["buses"]["/dev/i2c-5"]["devices"]
    assert [(d["addr"], d["kind"]) for d in found] == [("0x48", "LM73"), ("0x58", "PMBus")]
    assert found[1]["name"] == "PMBus ACME VR9"
    assert i2c("read", "i2c-5", "0x48", "0", "-n", "2") == 0
    assert capsys.readouterr().out.startswith("0x19 0x00")
    assert i2c("pmbus-dump", "/dev/i2c-5", "0x58", "--json") == 0
    rows = {r["name"]: r["value"] for r in json.loads(capsys.readouterr().out)["commands"]}
    assert rows["READ_VOUT"] == 0.75 and rows["READ_PIN"] == 15.0 and rows["MFR_ID"] == "ACME"
    calls = FakeSMBus.last.log
    for call in calls:
        assert call[0] in ("read_byte", "i2c_rdwr", "read_block_data")
        if call[0] == "i2c_rdwr":
            writes = [m for m in call[1] if not m[1] & 1]
            assert len(writes) <= 1 and all(len(m[2]) == 1 for m in writes)


def test_a_host_adapter_that_is_absent_exits_3(capsys):
    assert i2c("scan", "--bus", "/dev/i2c-250") == 3
    assert "/dev/i2c-250: no such I2C adapter" in capsys.readouterr().err


# ---- sensors against the simulated board -----------------------------------------------------------

def test_sensor_readings_match_the_board(capsys):
    assert i2c("sensors", "--json", *CARD) == 0
    doc = json.loads(capsys.readouterr().out)
    with Board.open("sim:i2c", "sim-small", check=False, lock=False) as b:
        therm = b.t.card.periphs["thermal"]
        rails, board_c = therm.rails(), therm.board_c
    got = {(s["addr"], k): v[0] for s in doc["sensors"] for k, v in s.get("readings", {}).items()}
    pairs = [(got[("0x4a", "temp")], board_c), (got[("0x40", "bus")], rails["input_v"]),
             (got[("0x40", "power")], rails["input_w"]), (got[("0x40", "current")], rails["input_a"]),
             (got[("0x60", "vout")], rails["vccint_v"]), (got[("0x60", "iout")], rails["vccint_a"]),
             (got[("0x60", "pin")], rails["vccint_in_w"]), (got[("0x60", "vin")], rails["input_v"])]
    g, w = np.array(pairs).T
    maxabs, cos = float(np.max(np.abs(g - w))), float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w)))
    assert maxabs < 0.3 and cos > 0.99999, (maxabs, cos, pairs)
    assert doc["w"] == got[("0x40", "power")] and doc["how"] == "input monitor INA226 at smbus:0x40"
    assert doc["board_temp_c"] == got[("0x4a", "temp")]
