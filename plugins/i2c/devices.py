"""What answers at an I2C address, from read-only ID registers, and its readings in units.

Identification (reference host.md 7, the datasheets):
- LM73 at 0x48-0x4A, 0x4C-0x4E: register 0x07 (MSB first) reads 0x0190;
- TI INA2xx at 0x40-0x4F: manufacturer ID 0x5449 ("TI") at 0xFE, die ID at 0xFF: 0x2260 INA226,
  0x3220 INA3221, 0x2270 INA230 / INA231;
- PMBus: PMBUS_REVISION (0x98) has both revision nibbles at most 3, and MFR_ID (0x99, a block)
  is printable or VOUT_MODE (0x20) is linear (bits 7:5 zero); otherwise "pmbus?".
EEPROMs (0x50-0x57), I/O expanders (0x20-0x27, 0x38-0x3F) and muxes (0x70-0x77) are listed,
never probed further.

Conversions:
- LM73 temperature: 16 bits two's complement, MSB first, left-justified: C = raw / 128;
- INA226 / INA230: shunt voltage (0x01) signed x 2.5 uV, bus voltage (0x02) x 1.25 mV;
  INA3221: per channel shunt (0x01/0x03/0x05) signed, bits 15:3 x 40 uV, bus (0x02/0x04/0x06)
  bits 15:3 x 8 mV. Current = shunt / R and power = bus x current where the board says R;
- PMBus LINEAR11: 5-bit two's complement exponent N (bits 15:11), 11-bit two's complement
  mantissa Y (bits 10:0): Y x 2^N; READ_VOUT in LINEAR16: unsigned word x 2^(VOUT_MODE[4:0],
  signed), None for VID and direct modes; words are little-endian (SMBus). Power is READ_PIN,
  else READ_POUT, else READ_VOUT x READ_IOUT.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LM73_ADDRS = (0x48, 0x49, 0x4A, 0x4C, 0x4D, 0x4E)
INA_ADDRS = range(0x40, 0x50)
LM73_ID = 0x0190
TI_MFR = 0x5449
INA_DIES = {0x2260: "INA226", 0x3220: "INA3221", 0x2270: "INA230"}
LISTED_ONLY = {**{a: "EEPROM (not probed further)" for a in range(0x50, 0x58)},
               **{a: "I/O expander (not probed further)" for a in (*range(0x20, 0x28), *range(0x38, 0x40))},
               **{a: "I2C mux (not probed further)" for a in range(0x70, 0x78)}}

VOUT_MODE, READ_VIN, READ_IIN, READ_VOUT, READ_IOUT, READ_TEMPERATURE_1 = 0x20, 0x88, 0x89, 0x8B, 0x8C, 0x8D
READ_POUT, READ_PIN, PMBUS_REVISION, MFR_ID, MFR_MODEL, MFR_REVISION = 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B
STATUS_WORD = 0x79
# name, command, kind (word: LINEAR11; vout: LINEAR16 with VOUT_MODE; byte; block), unit
PMBUS_READINGS = (("vin", READ_VIN, "V"), ("iin", READ_IIN, "A"), ("vout", READ_VOUT, "V"), ("iout", READ_IOUT, "A"),
                  ("temp", READ_TEMPERATURE_1, "C"), ("pout", READ_POUT, "W"), ("pin", READ_PIN, "W"))
# The dump reads only commands every PMBus regulator has: one it lacked would set its CML fault
# bit, which only CLEAR_FAULTS (a write) clears. STATUS_CML comes last and shows whether it did.
PMBUS_DUMP = ((0x00, "PAGE", "byte"), (0x01, "OPERATION", "byte"), (0x19, "CAPABILITY", "byte"),
              (VOUT_MODE, "VOUT_MODE", "byte"), (0x78, "STATUS_BYTE", "byte"), (STATUS_WORD, "STATUS_WORD", "word"),
              (READ_VIN, "READ_VIN", "linear11"), (READ_IIN, "READ_IIN", "linear11"), (READ_VOUT, "READ_VOUT", "vout"),
              (READ_IOUT, "READ_IOUT", "linear11"), (READ_TEMPERATURE_1, "READ_TEMPERATURE_1", "linear11"),
              (READ_POUT, "READ_POUT", "linear11"), (READ_PIN, "READ_PIN", "linear11"),
              (PMBUS_REVISION, "PMBUS_REVISION", "byte"), (MFR_ID, "MFR_ID", "block"), (MFR_MODEL, "MFR_MODEL", "block"),
              (MFR_REVISION, "MFR_REVISION", "block"), (0x7E, "STATUS_CML", "byte"))


# ---- number formats ----------------------------------------------------------------------------

def s16(v: int) -> int: return v - 0x10000 if v & 0x8000 else v


def lm73_celsius(raw: int) -> float:
    return s16(raw) / 128


def linear11(word: int) -> float:
    n = (word >> 11) & 0x1F
    n = n - 32 if n & 0x10 else n
    y = word & 0x7FF
    y = y - 2048 if y & 0x400 else y
    return y * 2.0 ** n


def vout_exponent(vout_mode: int) -> int | None:
    """The LINEAR16 exponent of a VOUT_MODE byte; None for VID (0x20) and direct (0x40) modes."""
    if vout_mode >> 5:
        return None
    e = vout_mode & 0x1F
    return e - 32 if e & 0x10 else e


def linear16(word: int, vout_mode: int) -> float | None:
    e = vout_exponent(vout_mode)
    return None if e is None else word * 2.0 ** e


def ina_volts(kind: str, shunt_raw: int, bus_raw: int) -> tuple[float, float]:
    """(shunt V, bus V) from the raw registers of an INA226 / INA230 or of one INA3221 channel."""
    if kind == "INA3221":
        return (s16(shunt_raw) >> 3) * 40e-6, (bus_raw >> 3) * 8e-3
    return s16(shunt_raw) * 2.5e-6, bus_raw * 1.25e-3


def printable(b: bytes) -> bool:
    return bool(b) and all(0x20 <= c < 0x7F for c in b)


# ---- devices -------------------------------------------------------------------------------------

@dataclass
class Device:
    bus: str
    addr: int
    kind: str                          # LM73, INA226, INA3221, INA230, PMBus, pmbus?, listed, unknown
    name: str
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def plain_registers(self) -> bool: return self.kind == "LM73" or self.kind.startswith("INA")

    def as_dict(self) -> dict: return {"bus": self.bus, "addr": f"0x{self.addr:02x}", "kind": self.kind, "name": self.name,
                                       **self.info}


def _word_be(bus, addr: int, reg: int) -> int: return int.from_bytes(bus.read(addr, reg, 2), "big")


def _word_le(bus, addr: int, reg: int) -> int: return int.from_bytes(bus.read(addr, reg, 2), "little")


def identify(bus, addr: int) -> Device:
    """What answers at `addr` (it answered a probe), from read-only ID registers only."""
    from .bus import I2cNack
    if addr in LISTED_ONLY:
        return Device(bus.name, addr, "listed", LISTED_ONLY[addr])
    try:
        if addr in LM73_ADDRS and _word_be(bus, addr, 0x07) == LM73_ID:
            bus.read(addr, 0x00, 2)                  # leave the pointer at the temperature, as at power-up
            return Device(bus.name, addr, "LM73", "LM73 temperature sensor")
        if addr in INA_ADDRS and _word_be(bus, addr, 0xFE) == TI_MFR:
            die = _word_be(bus, addr, 0xFF)
            kind = INA_DIES.get(die, "INA2xx")
            return Device(bus.name, addr, kind, f"{kind} {'power' if kind == 'INA3221' else 'current'} monitor",
                          {"die_id": f"0x{die:04x}"})
        rev = bus.read(addr, PMBUS_REVISION, 1)[0]
    except I2cNack:
        return Device(bus.name, addr, "unknown", "unknown device")
    if rev >> 4 > 3 or rev & 0xF > 3:
        return Device(bus.name, addr, "unknown", "unknown device")
    try:
        mfr = bus.read(addr, MFR_ID, 0, block=True)
    except I2cNack:
        mfr = b""
    try:
        mode = bus.read(addr, VOUT_MODE, 1)[0]
    except I2cNack:
        mode = None
    model = b""
    if printable(mfr):
        try:
            model = bus.read(addr, MFR_MODEL, 0, block=True)
        except I2cNack:
            pass
    info = {"revision": f"1.{rev >> 4}", "mfr_id": mfr.decode() if printable(mfr) else None,
            "mfr_model": model.decode() if printable(model) else None,
            "vout_mode": None if mode is None else f"0x{mode:02x}"}
    if printable(mfr) or (mode is not None and vout_exponent(mode) is not None):
        name = " ".join(x for x in ("PMBus", info["mfr_id"], info["mfr_model"]) if x)
        return Device(bus.name, addr, "PMBus", name, info)
    return Device(bus.name, addr, "pmbus?", "PMBus? (revision only)", info)


def readings(bus, dev: Device, shunt_ohm: float | None = None) -> dict[str, Any]:
    """A device's readings with units: {name: (value, unit)} plus `power` / `how` where it has one."""
    from .bus import I2cNack
    out: dict[str, Any] = {}
    if dev.kind == "LM73":
        out["temp"] = (round(lm73_celsius(_word_be(bus, dev.addr, 0x00)), 5), "C")
    elif dev.kind.startswith("INA"):
        chans = ((0x01, 0x02, ""),) if dev.kind != "INA3221" else ((0x01, 0x02, "1"), (0x03, 0x04, "2"), (0x05, 0x06, "3"))
        for sreg, breg, tag in chans:
            shunt_v, bus_v = ina_volts(dev.kind, _word_be(bus, dev.addr, sreg), _word_be(bus, dev.addr, breg))
            out[f"bus{tag}"] = (round(bus_v, 5), "V")
            out[f"shunt{tag}"] = (round(shunt_v * 1e6, 2), "uV")
            if shunt_ohm and not tag:
                amps = shunt_v / shunt_ohm
                out["current"] = (round(amps, 4), "A")
                out["power"], out["how"] = (round(amps * bus_v, 3), "W"), "bus x shunt / R"
    elif dev.kind == "PMBus":
        mode = bus.read(dev.addr, VOUT_MODE, 1)[0]
        for name, cmd, unit in PMBUS_READINGS:
            try:
                word = _word_le(bus, dev.addr, cmd)
            except I2cNack:
                continue                     # a command this device does not have
            value = linear16(word, mode) if cmd == READ_VOUT else linear11(word)
            if value is not None:
                out[name] = (round(value, 4), unit)
        for name, how in (("pin", "PIN"), ("pout", "POUT")):
            if name in out:
                out["power"], out["how"] = out[name], how
                break
        else:
            if "vout" in out and "iout" in out:
                out["power"], out["how"] = (round(out["vout"][0] * out["iout"][0], 4), "W"), "VOUT x IOUT"
    return out


def pmbus_dump(bus, addr: int) -> list[dict[str, Any]]:
    """Every standard PMBus status and reading command the device answers, raw and decoded."""
    from .bus import I2cNack
    rows = []
    mode = None
    for cmd, name, kind in PMBUS_DUMP:
        try:
            if kind == "block":
                raw = bus.read(addr, cmd, 0, block=True)
                value = raw.decode(errors="replace") if printable(raw) else raw.hex()
                rows.append({"cmd": f"0x{cmd:02x}", "name": name, "raw": raw.hex(), "value": value})
                continue
            data = bus.read(addr, cmd, 1 if kind == "byte" else 2)
        except I2cNack:
            rows.append({"cmd": f"0x{cmd:02x}", "name": name, "raw": None, "value": "not supported (NACK)"})
            continue
        word = int.from_bytes(data, "little")
        if cmd == VOUT_MODE:
            mode = word
        if kind == "linear11":
            value: Any = round(linear11(word), 4)
        elif kind == "vout":
            value = None if mode is None else linear16(word, mode)
            value = round(value, 4) if value is not None else "VOUT_MODE not linear"
        else:
            value = f"0x{word:0{2 * len(data)}x}"
        rows.append({"cmd": f"0x{cmd:02x}", "name": name, "raw": data.hex(), "value": value})
    return rows
