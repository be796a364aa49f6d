"""The card's two bit-banged I2C buses, the sensors on them, and a bit-bang master.

The FPGA has no I2C controller: the host drives the lines open-drain through I2C_CTRL (bit
2b = SCL of bus b, 2b+1 = SDA, 1 = pull low) and reads the wired-AND levels in I2C_IN (plus
bit 4, the LM73's ALERT, active low). The simulated buses decode what the lines do, edge by
edge: START and repeated START (SDA falls while SCL is high), STOP, eight data bits sampled
on SCL rising, ACK/NACK in the ninth clock, a device changing SDA only while SCL is low, and
clock stretching (a device holds SCL low for a few polls of I2C_IN after it took a command).

Devices, with register pointer semantics as their datasheets describe:
- bus 0 "sensor": LM73 at 0x4A (board temperature; ALERT in comparator mode);
- bus 1 "smbus":  INA226 at 0x40 on the 12 V input (2 mOhm shunt) and a PMBus regulator at
  0x60 for VCCINT (LINEAR11/LINEAR16 readings, block MFR strings, stretches after commands).
Readings come from the card's `Thermal` model, so they follow load and temperature.

The host side (a bit-bang master over these two registers) is otpu-i2c's (`otpu_i2c.bitbang`).
Wiring faults: `i2c_stuck` grounds a line, `i2c_pullup` leaves a bus without pull-ups (released
lines read low), `i2c_nack` makes a device stop answering its address.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from . import regs
from .faults import FaultSet
from .thermal import Thermal

# Offsets inside the pin registers' window (regs.I2C_BASE).
I2C_CTRL, I2C_IN = regs.off("I2C_CTRL") - regs.I2C_BASE, regs.off("I2C_IN") - regs.I2C_BASE
ALERT0_BIT = regs.I2C_ALERT0
BUS_NAMES = regs.I2C_BUS_NAMES
scl_bit, sda_bit = regs.i2c_scl, regs.i2c_sda
STRETCH_POLLS = 3            # I2C_IN reads a stretching device keeps SCL low

LM73_ADDR, INA226_ADDR, PMBUS_ADDR = 0x4A, 0x40, 0x60


# ---- number formats ---------------------------------------------------------------------------

def linear11(value: float) -> int:
    """PMBus LINEAR11 word: 5-bit two's-complement exponent N, 11-bit mantissa Y, value = Y x 2^N."""
    for n in range(-16, 16):
        y = round(value / 2.0 ** n)
        if -1024 <= y <= 1023:
            return ((n & 0x1F) << 11) | (y & 0x7FF)
    raise ValueError(f"{value} does not fit LINEAR11")


def linear16(value: float, exponent: int) -> int:
    """PMBus LINEAR16 mantissa for VOUT_MODE exponent `exponent` (unsigned 16-bit)."""
    return max(0, min(0xFFFF, round(value / 2.0 ** exponent)))


def lm73_raw(celsius: float, resolution: float) -> int:
    """LM73 temperature word: two's complement, C x 128, truncated to the resolution."""
    steps = int((celsius / resolution) // 1)
    raw = int(round(steps * resolution * 128))
    return max(-0x8000, min(0x7FFF, raw)) & 0xFFFF


# ---- devices ----------------------------------------------------------------------------------

class Device(ABC):
    """An I2C target. `st` is its part of the state dict; `rx` the bytes of the current write."""
    addr: int
    stretches = False

    def __init__(self, bus: "I2cBuses"):
        self.bus = bus

    def fresh(self) -> dict: return {"ptr": 0, "rx": [], "ri": 0}

    def start(self, st: dict, read: bool) -> None:
        st["rx"], st["ri"] = [], 0

    @abstractmethod
    def write_byte(self, st: dict, byte: int) -> bool:
        """A byte the master wrote; return False to NACK it."""

    @abstractmethod
    def read_byte(self, st: dict) -> int:
        """The next byte the master clocks out."""

    def stop(self, st: dict) -> None:
        st["rx"] = []


class Register16Device(Device):
    """Pointer-register devices (LM73, INA226): the first byte of a write sets the pointer, the
    following bytes are a register value MSB first; reads return the pointed register MSB first
    and repeat it; the pointer stays where it was last set."""
    widths: dict[int, int] = {}          # pointer -> register bytes
    writable: set[int] = set()

    @abstractmethod
    def value(self, st: dict, ptr: int) -> int:
        """The register at `ptr` as the device would send it now."""

    @abstractmethod
    def store(self, st: dict, ptr: int, value: int) -> None:
        """A complete register write."""

    def write_byte(self, st: dict, byte: int) -> bool:
        if not st["rx"]:
            if byte not in self.widths:
                return False
            st["ptr"] = byte
            st["rx"].append(byte)
            return True
        if st["ptr"] not in self.writable or len(st["rx"]) > self.widths[st["ptr"]]:
            return False
        st["rx"].append(byte)
        if len(st["rx"]) == 1 + self.widths[st["ptr"]]:
            v = 0
            for b in st["rx"][1:]:
                v = (v << 8) | b
            self.store(st, st["ptr"], v)
        return True

    def read_byte(self, st: dict) -> int:
        width = self.widths[st["ptr"]]
        v = self.value(st, st["ptr"])
        i = st["ri"] % width
        st["ri"] += 1
        return (v >> (8 * (width - 1 - i))) & 0xFF


class Lm73(Register16Device):
    """TI LM73 temperature sensor on the board."""
    addr = LM73_ADDR
    TEMP, CONFIG, THIGH, TLOW, CTRL, ID = 0x00, 0x01, 0x02, 0x03, 0x04, 0x07
    widths = {TEMP: 2, CONFIG: 1, THIGH: 2, TLOW: 2, CTRL: 1, ID: 2}
    writable = {CONFIG, THIGH, TLOW, CTRL}
    ID_VALUE = 0x0190
    CONFIG_POR, THIGH_POR, TLOW_POR = 0x40, 64 * 128, 32 * 128
    CFG_PD, CFG_ALRT_DIS, CFG_ALRT_POL, CFG_ALRT_RST = 1 << 7, 1 << 5, 1 << 4, 1 << 3
    RESOLUTIONS = (0.25, 0.125, 0.0625, 0.03125)

    def fresh(self) -> dict:
        return {**super().fresh(), "config": self.CONFIG_POR, "thigh": self.THIGH_POR, "tlow": self.TLOW_POR,
                "ctrl": 0, "alert": False, "held": None}

    def resolution(self, st: dict) -> float: return self.RESOLUTIONS[(st["ctrl"] >> 5) & 3]

    def temp_raw(self, st: dict) -> int:
        if st["config"] & self.CFG_PD:
            return st["held"]                     # shut down: the last conversion stays
        return lm73_raw(self.bus.thermal.board_c, self.resolution(st))

    def update_alert(self, st: dict) -> None:
        t = _s16(self.temp_raw(st))
        if t > _s16(st["thigh"]):
            st["alert"] = True
        elif t < _s16(st["tlow"]):
            st["alert"] = False

    def alert_pin_low(self, st: dict) -> bool:
        self.update_alert(st)
        if st["config"] & self.CFG_ALRT_DIS:
            return False
        active_high = bool(st["config"] & self.CFG_ALRT_POL)
        return st["alert"] != active_high

    def value(self, st: dict, ptr: int) -> int:
        if ptr == self.TEMP:
            return self.temp_raw(st)
        if ptr == self.CTRL:
            self.update_alert(st)
            t = _s16(self.temp_raw(st))
            return (st["ctrl"] & 0xE0) | (st["alert"] << 3) | ((t > _s16(st["thigh"])) << 2) \
                | ((t < _s16(st["tlow"])) << 1) | 1
        return {self.CONFIG: st["config"], self.THIGH: st["thigh"], self.TLOW: st["tlow"], self.ID: self.ID_VALUE}[ptr]

    def store(self, st: dict, ptr: int, value: int) -> None:
        if ptr == self.CONFIG:
            if value & self.CFG_ALRT_RST:
                st["alert"] = False
            if value & self.CFG_PD and not st["config"] & self.CFG_PD:
                st["held"] = self.temp_raw(st)
            st["config"] = (value & ~self.CFG_ALRT_RST & 0xFF) | 0x40
        elif ptr in (self.THIGH, self.TLOW):
            st["thigh" if ptr == self.THIGH else "tlow"] = value & 0xFFE0
        elif ptr == self.CTRL:
            st["ctrl"] = value & 0xE0


class Ina226(Register16Device):
    """TI INA226 current/power monitor on the board's 12 V input."""
    addr = INA226_ADDR
    CONFIG, SHUNT, BUS, POWER, CURRENT, CALIB, MASK, ALERT, MFR, DIE = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0xFE, 0xFF
    widths = {r: 2 for r in (CONFIG, SHUNT, BUS, POWER, CURRENT, CALIB, MASK, ALERT, MFR, DIE)}
    writable = {CONFIG, CALIB, MASK, ALERT}
    CONFIG_POR, MFR_ID, DIE_ID = 0x4127, 0x5449, 0x2260
    SHUNT_OHM, SHUNT_LSB_V, BUS_LSB_V = 0.002, 2.5e-6, 1.25e-3
    MASK_CVRF = 1 << 3

    def fresh(self) -> dict:
        return {**super().fresh(), "config": self.CONFIG_POR, "calib": 0, "mask": 0, "alert": 0}

    def shunt_reg(self) -> int:
        r = self.bus.thermal.rails()
        ohm = float(self.bus.target.platform.get("input_shunt_mohm", self.SHUNT_OHM * 1e3)) / 1e3
        return max(-0x8000, min(0x7FFF, int(round(r["input_a"] * ohm / self.SHUNT_LSB_V))))

    def bus_reg(self) -> int:
        return max(0, min(0x7FFF, int(round(self.bus.thermal.rails()["input_v"] / self.BUS_LSB_V))))

    def value(self, st: dict, ptr: int) -> int:
        if ptr == self.SHUNT:
            return self.shunt_reg() & 0xFFFF
        if ptr == self.BUS:
            return self.bus_reg()
        current = int(self.shunt_reg() * st["calib"] / 2048)     # datasheet: Current = Shunt x CAL / 2048
        if ptr == self.CURRENT:
            return max(-0x8000, min(0x7FFF, current)) & 0xFFFF
        if ptr == self.POWER:
            return max(0, min(0xFFFF, int(abs(current) * self.bus_reg() / 20000)))
        if ptr == self.MASK:
            return (st["mask"] & 0xFC00) | self.MASK_CVRF
        return {self.CONFIG: st["config"], self.CALIB: st["calib"], self.ALERT: st["alert"],
                self.MFR: self.MFR_ID, self.DIE: self.DIE_ID}[ptr]

    def store(self, st: dict, ptr: int, value: int) -> None:
        if ptr == self.CONFIG:
            if value & 0x8000:                   # RST: every register to its power-on value
                st.update(config=self.CONFIG_POR, calib=0, mask=0, alert=0)
            else:
                st["config"] = value & 0x0FFF | 0x4000
        elif ptr == self.CALIB:
            st["calib"] = value & 0x7FFF
        elif ptr == self.MASK:
            st["mask"] = value
        elif ptr == self.ALERT:
            st["alert"] = value


class PmbusRegulator(Device):
    """A PMBus VCCINT regulator: command code then data, words little-endian, block reads with a count."""
    addr = PMBUS_ADDR
    stretches = True
    PAGE, OPERATION, CLEAR_FAULTS, CAPABILITY, VOUT_MODE, VOUT_COMMAND = 0x00, 0x01, 0x03, 0x19, 0x20, 0x21
    STATUS_BYTE, STATUS_WORD, STATUS_CML = 0x78, 0x79, 0x7E
    READ_VIN, READ_IIN, READ_VOUT, READ_IOUT, READ_TEMPERATURE_1 = 0x88, 0x89, 0x8B, 0x8C, 0x8D
    READ_POUT, READ_PIN, PMBUS_REVISION, MFR_ID, MFR_MODEL, MFR_REVISION = 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B
    VOUT_EXP = -12
    VOUT_MODE_VALUE = VOUT_EXP & 0x1F            # linear mode, exponent -12
    REVISION = 0x22                              # PMBus 1.2 parts I and II
    MFR_STRINGS = {MFR_ID: b"OTPU-SIM", MFR_MODEL: b"VCCINT-VR", MFR_REVISION: b"A1"}
    CML_INVALID_CMD, CML_INVALID_DATA = 1 << 7, 1 << 6
    STATUS_CML_BIT = 1 << 1
    TEMP_RISE_PER_A = 2.0

    BYTE_CMDS = {PAGE, OPERATION, CAPABILITY, VOUT_MODE, STATUS_BYTE, STATUS_CML, PMBUS_REVISION}
    WORD_CMDS = {VOUT_COMMAND, STATUS_WORD, READ_VIN, READ_IIN, READ_VOUT, READ_IOUT, READ_TEMPERATURE_1,
                 READ_POUT, READ_PIN}
    WRITABLE = {PAGE: 1, OPERATION: 1}

    def fresh(self) -> dict:
        return {**super().fresh(), "page": 0, "operation": 0x80, "cml": 0}

    def known(self, cmd: int) -> bool:
        return cmd in self.BYTE_CMDS or cmd in self.WORD_CMDS or cmd in self.MFR_STRINGS or cmd == self.CLEAR_FAULTS

    def write_byte(self, st: dict, byte: int) -> bool:
        if not st["rx"]:
            if not self.known(byte):
                st["cml"] |= self.CML_INVALID_CMD
                return False
            st["ptr"] = byte
            st["rx"].append(byte)
            if byte == self.CLEAR_FAULTS:
                st["cml"] = 0
            return True
        cmd = st["ptr"]
        if cmd not in self.WRITABLE or len(st["rx"]) > self.WRITABLE[cmd] or (cmd == self.PAGE and byte != 0):
            st["cml"] |= self.CML_INVALID_DATA
            return False
        st["rx"].append(byte)
        st["page" if cmd == self.PAGE else "operation"] = byte
        return True

    def readings(self) -> dict:
        r, th = self.bus.thermal.rails(), self.bus.thermal
        return {"vin": r["input_v"], "iin": r["vccint_in_w"] / r["input_v"], "vout": r["vccint_v"],
                "iout": r["vccint_a"], "pout": r["vccint_w"], "pin": r["vccint_in_w"],
                "temp": th.board_c + self.TEMP_RISE_PER_A * r["vccint_a"]}

    def response(self, st: dict) -> bytes:
        cmd = st["ptr"]
        if cmd in self.MFR_STRINGS:
            s = self.MFR_STRINGS[cmd]
            return bytes([len(s)]) + s
        if cmd in self.BYTE_CMDS:
            status_byte = self.STATUS_CML_BIT if st["cml"] else 0
            return bytes([{self.PAGE: st["page"], self.OPERATION: st["operation"], self.CAPABILITY: 0xB0,
                           self.VOUT_MODE: self.VOUT_MODE_VALUE, self.STATUS_BYTE: status_byte,
                           self.STATUS_CML: st["cml"], self.PMBUS_REVISION: self.REVISION}[cmd]])
        if cmd in self.WORD_CMDS:
            v = self.readings()
            word = {self.VOUT_COMMAND: linear16(1.0, self.VOUT_EXP), self.STATUS_WORD: self.STATUS_CML_BIT if st["cml"] else 0,
                    self.READ_VIN: linear11(v["vin"]), self.READ_IIN: linear11(v["iin"]),
                    self.READ_VOUT: linear16(v["vout"], self.VOUT_EXP), self.READ_IOUT: linear11(v["iout"]),
                    self.READ_TEMPERATURE_1: linear11(v["temp"]), self.READ_POUT: linear11(v["pout"]),
                    self.READ_PIN: linear11(v["pin"])}[cmd]
            return word.to_bytes(2, "little")
        return b"\xff"

    def start(self, st: dict, read: bool) -> None:
        super().start(st, read)
        if read:     # latch the whole response so a multi-byte read is one consistent sample
            st["tx"] = list(self.response(st))

    def read_byte(self, st: dict) -> int:
        tx = st.get("tx") or [0xFF]
        i = st["ri"]
        st["ri"] += 1
        return tx[i] if i < len(tx) else 0xFF


def _s16(v: int) -> int: return v - 0x10000 if v & 0x8000 else v


# ---- the buses --------------------------------------------------------------------------------

def _fresh_bus() -> dict:
    return {"scl": 1, "sda": 1, "phase": "idle", "bits": 0, "shift": 0, "dev": None, "read": False,
            "out": 0, "sda_out": 1, "stretch": 0, "acked": False, "first": True}


class I2cBuses:
    """The pin registers I2C_CTRL / I2C_IN and the devices on both buses."""

    def __init__(self, target, serial: int, state: dict, faults: FaultSet, thermal: Thermal | None = None):
        # The sensors read the card's thermal model; without one (a bus on its own) they read a
        # model of their own kept in this state, which only changes through `tick`.
        self.thermal = thermal if thermal is not None else Thermal(target, serial, state.setdefault("thermal", {}), faults)
        self.target, self.serial, self.state, self.faults = target, serial, state, faults
        self.devices: list[dict[int, Device]] = [{LM73_ADDR: Lm73(self)},
                                                 {INA226_ADDR: Ina226(self), PMBUS_ADDR: PmbusRegulator(self)}]
        # wiring faults: lines shorted to ground, buses without pull-ups, devices that never answer
        self.grounded = {(int(f["bus"]), int(f["line"])) for f in faults.get("i2c_stuck")}
        self.grounded |= {(int(f["bus"]), line) for f in faults.get("i2c_pullup") for line in (0, 1)}
        self.dead = {(int(f["bus"]), int(f["addr"])) for f in faults.get("i2c_nack")}
        if "ctrl" not in state:
            self.reset()

    def reset(self) -> None:
        own_thermal = self.state.get("thermal")
        self.state.clear()
        if own_thermal is not None:
            self.state["thermal"] = own_thermal
            self.thermal.reset()
        self.state.update(ctrl=0, buses=[_fresh_bus() for _ in BUS_NAMES],
                          devs={f"{b}:{a:02x}": d.fresh() for b, devs in enumerate(self.devices) for a, d in devs.items()})

    def tick(self, seconds: float, activity: dict) -> None:
        """Advance the bus's own thermal model; a shared one is ticked by its owner, the card."""
        if "thermal" in self.state:
            self.thermal.tick(seconds, activity)

    def _dev_state(self, bus: int, addr: int) -> dict: return self.state["devs"][f"{bus}:{addr:02x}"]

    # ---- registers ---------------------------------------------------------------------------

    def read(self, offset: int) -> int:
        if offset == I2C_CTRL:
            return self.state["ctrl"]
        if offset != I2C_IN:
            return 0
        if self.grounded:                    # a grounded line reads low from power-on, before any edge
            for b in range(len(BUS_NAMES)):
                self._settle(b)
        value = 0
        for b, bus in enumerate(self.state["buses"]):
            value |= bus["scl"] << (2 * b) | bus["sda"] << (2 * b + 1)
        lm73 = self.devices[0][LM73_ADDR]
        if not lm73.alert_pin_low(self._dev_state(0, LM73_ADDR)):
            value |= ALERT0_BIT
        for b, bus in enumerate(self.state["buses"]):
            # a stretching device lets go after the master has seen SCL low STRETCH_POLLS times
            if bus["stretch"] and not self.state["ctrl"] & scl_bit(b):
                bus["stretch"] -= 1
                self._settle(b)
        return value

    def write(self, offset: int, value: int) -> None:
        if offset != I2C_CTRL:
            return
        self.state["ctrl"] = value & 0xF
        for b in range(len(BUS_NAMES)):
            self._settle(b)

    # ---- line decoding -----------------------------------------------------------------------

    def _levels(self, b: int) -> tuple[int, int]:
        bus, ctrl = self.state["buses"][b], self.state["ctrl"]
        scl = 0 if ctrl & scl_bit(b) or bus["stretch"] or (b, 0) in self.grounded else 1
        sda = 0 if ctrl & sda_bit(b) or not bus["sda_out"] or (b, 1) in self.grounded else 1
        return scl, sda

    def _settle(self, b: int) -> None:
        bus = self.state["buses"][b]
        for _ in range(4):                 # a device's reaction may change SDA once more
            scl, sda = self._levels(b)
            old_scl, old_sda = bus["scl"], bus["sda"]
            if (scl, sda) == (old_scl, old_sda):
                return
            bus["scl"], bus["sda"] = scl, sda
            if old_scl and scl:
                (self._start if not sda else self._stop)(b, bus)
            elif scl and not old_scl:
                self._rise(bus, sda)
            elif old_scl and not scl:
                self._fall(b, bus)

    def _start(self, b: int, bus: dict) -> None:
        bus.update(phase="addr", bits=0, shift=0, sda_out=1, first=True)

    def _stop(self, b: int, bus: dict) -> None:
        if bus["dev"] is not None:
            self.devices[b][bus["dev"]].stop(self._dev_state(b, bus["dev"]))
        bus.update(phase="idle", dev=None, sda_out=1, bits=0)

    def _rise(self, bus: dict, sda: int) -> None:
        if bus["phase"] in ("addr", "rx") and bus["bits"] < 8:
            bus["shift"] = (bus["shift"] << 1) | sda
            bus["bits"] += 1
        elif bus["phase"] == "ack_tx":
            bus["acked"] = not sda

    def _fall(self, b: int, bus: dict) -> None:
        phase = bus["phase"]
        if phase == "addr" and bus["bits"] == 8:
            addr, read = bus["shift"] >> 1, bool(bus["shift"] & 1)
            dev = None if (b, addr) in self.dead else self.devices[b].get(addr)
            if dev is None:
                bus.update(phase="nack", dev=None)
                return
            dev.start(self._dev_state(b, addr), read)
            bus.update(phase="ack_addr", dev=addr, read=read, sda_out=0)
        elif phase == "ack_addr":
            dev, st = self.devices[b][bus["dev"]], self._dev_state(b, bus["dev"])
            if bus["read"]:
                self._present(bus, dev.read_byte(st))
            else:
                bus.update(phase="rx", bits=0, shift=0, sda_out=1)
        elif phase == "rx" and bus["bits"] == 8:
            dev, st = self.devices[b][bus["dev"]], self._dev_state(b, bus["dev"])
            ack = dev.write_byte(st, bus["shift"])
            bus.update(phase="ack_rx", sda_out=0 if ack else 1, acked=ack)
        elif phase == "ack_rx":
            dev = self.devices[b][bus["dev"]]
            if bus["acked"] and bus["first"] and dev.stretches:
                bus["stretch"] = STRETCH_POLLS          # the command is being decoded
            bus.update(phase="rx" if bus["acked"] else "nack", bits=0, shift=0, sda_out=1, first=False)
        elif phase == "tx":
            if bus["bits"] < 8:
                bus["sda_out"] = (bus["out"] >> (7 - bus["bits"])) & 1
                bus["bits"] += 1
            else:
                bus.update(phase="ack_tx", sda_out=1)
        elif phase == "ack_tx":
            if bus["acked"]:
                dev, st = self.devices[b][bus["dev"]], self._dev_state(b, bus["dev"])
                self._present(bus, dev.read_byte(st))
            else:
                bus.update(phase="nack", sda_out=1)

    @staticmethod
    def _present(bus: dict, byte: int) -> None:
        bus.update(phase="tx", out=byte, bits=1, sda_out=(byte >> 7) & 1)
