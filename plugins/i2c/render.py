"""How otpu-i2c prints: the i2cdetect grid, the `sensors`-style device list, PMBus dumps, pin levels."""
from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from .devices import Device

UNITS = {"C": "C", "V": "V", "A": "A", "W": "W", "uV": "uV"}


def grid(found: list[Device], first: int, last: int) -> list[str]:
    """i2cdetect's table: `--` no answer, the address where a device answered, blank outside the range."""
    seen = {d.addr for d in found}
    lines = ["     " + " ".join(f"{c:2x}" for c in range(16))]
    for row in range(0, 0x80, 16):
        cells = []
        for a in range(row, row + 16):
            cells.append("  " if not first <= a <= last else f"{a:02x}" if a in seen else "--")
        lines.append(f"{row:02x}:  " + " ".join(cells))
    return lines


def _value(v: Any, unit: str) -> str:
    if unit == "uV":
        return f"{v / 1000:.3f} mV" if abs(v) >= 1000 else f"{v:.1f} uV"
    if unit == "C":
        return f"{v:+.2f} C"
    if unit == "V":
        return f"{v:.3f} V"
    if unit == "A":
        return f"{v:.3f} A"
    return f"{v:.2f} {unit}"


def reading_text(readings: dict[str, Any]) -> str:
    parts = []
    for name, value in readings.items():
        if name == "how" or not isinstance(value, (list, tuple)):
            continue
        if name == "power" and any(readings.get(k) == value for k in ("pin", "pout")):
            continue                                   # a PMBus device's power is one of its readings
        label = "" if name == "temp" and len(readings) == 1 else f"{name} "
        parts.append(f"{label}{_value(value[0], value[1])}")
    return "  ".join(parts)


def sensors_lines(report: dict[str, Any], buses: dict[str, dict]) -> list[str | Text]:
    """Per bus its devices with converted readings, then board power and where it came from."""
    out: list[str | Text] = []
    by_bus: dict[str, list[dict]] = {}
    for s in report["sensors"]:
        by_bus.setdefault(s["bus"], []).append(s)
    for bus, entry in buses.items():
        out.append(Text(f"{bus}", style="bold"))
        if entry.get("error"):
            out.append(Text(f"  error: {entry['error']}", style="red"))
            continue
        for s in by_bus.get(bus, []):
            if s.get("error"):
                out.append(Text(f"  {s['addr']}  {s['name']:<28} error: {s['error']}", style="red"))
            elif s.get("readings"):
                out.append(f"  {s['addr']}  {s['name']:<28} {reading_text(s['readings'])}")
            else:
                out.append(f"  {s['addr']}  {s['name']}")
        if not by_bus.get(bus):
            out.append("  no devices")
    if report["w"] is not None:
        out.append(f"board power {report['w']:.2f} W ({report['how']})")
    if report["board_temp_c"] is not None:
        out.append(f"board temperature {report['board_temp_c']:.2f} C (LM73)")
    return out


def dump_table(addr: int, bus: str, rows: list[dict]) -> Table:
    t = Table(title=f"PMBus device 0x{addr:02x} on {bus}", title_justify="left")
    for col in ("cmd", "name", "raw", "value"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["cmd"], r["name"], r["raw"] or "-", str(r["value"]))
    return t


def levels_lines(levels: list[dict]) -> list[str]:
    out = []
    for lv in levels:
        driven = [k.upper() for k, v in lv["driven"].items() if v]
        out.append(f"{lv['bus']:<7} SCL {lv['scl']} SDA {lv['sda']}"
                   + (f"  (this host pulls {' and '.join(driven)} low)" if driven else ""))
        if "alert0" in lv:
            out.append(f"ALERT0 {lv['alert0']}")
    return out
