"""Scanning buses, the discovery cache, and the measured values otpu-smi shows.

`scan(bus)` probes 0x08-0x77 (address + R, one byte read and NACKed, STOP) and identifies
what answers. A full scan of the card's buses is cached in `<run dir>/<card>.i2c.json`
({version, time, buses: {name: {ok, error, devices: [...]}}}), so `sensors` and otpu-smi read
the known devices without scanning again. `measured(board)` gives board power (the input
monitor the board describes, `[platform] input_monitor` and `input_shunt_mohm`, else the sum of
the PMBus regulators' input power), the board temperature (the LM73) and the rail voltages;
None when the I2C lock is busy, so a monitor never waits on another user.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from otpu_core.card.runstate import run_dir
from otpu_core.errors import DeviceBusy

from . import devices
from .bitbang import BUS_NAMES
from .bus import SCAN_RANGE, CardBus, Guard, I2cError, I2cLock

VERSION = 1


def cache_path(devname: str | None):
    return run_dir() / f"{devname or 'card'}.i2c.json"


def scan(bus: Guard, addrs=SCAN_RANGE, identify: bool = True,
         progress: Callable[[int, int], None] | None = None) -> list[devices.Device]:
    """Every device that answers on a bus (identified from its ID registers unless `identify` is False)."""
    found = []
    with bus.lock:
        addrs = list(addrs)
        for k, a in enumerate(addrs):
            if bus.probe(a):
                dev = devices.identify(bus, a) if identify else devices.Device(bus.name, a, "unknown", "not identified")
                if dev.plain_registers:
                    bus.plain_registers.add(a)
                found.append(dev)
            if progress:
                progress(k + 1, len(addrs))
    return found


def save_cache(devname: str | None, buses: dict[str, dict]) -> None:
    path = cache_path(devname)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"version": VERSION, "time": time.time(), "buses": buses}, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass                                   # a cache only: the next run scans again


def load_cache(devname: str | None) -> dict | None:
    try:
        doc = json.loads(cache_path(devname).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("version") == VERSION and isinstance(doc.get("buses"), dict) else None


def cached_devices(doc: dict, bus: str) -> list[devices.Device] | None:
    entry = doc["buses"].get(bus)
    if not isinstance(entry, dict) or not entry.get("ok"):
        return None
    out = []
    for d in entry.get("devices", []):
        try:
            info = {k: v for k, v in d.items() if k not in ("bus", "addr", "kind", "name")}
            out.append(devices.Device(bus, int(d["addr"], 16), d["kind"], d["name"], info))
        except (KeyError, TypeError, ValueError):
            return None
    return out


def card_buses(board, half_s: float = 0.0) -> list[Guard]:
    lock = I2cLock(board.t.devname)
    return [Guard(CardBus(board.t, n, half_s), lock) for n in range(len(BUS_NAMES))]


def discover(board, buses: list[Guard], refresh: bool = False,
             progress: Callable[[str, int, int], None] | None = None) -> dict[str, list[devices.Device]]:
    """The devices of the card's buses: from the cache, or a scan of both (which refreshes it)."""
    doc = None if refresh else load_cache(board.t.devname)
    if doc is not None:
        known = {g.name: cached_devices(doc, g.name) for g in buses}
        if all(v is not None for v in known.values()):
            for g in buses:
                g.plain_registers |= {d.addr for d in known[g.name] if d.plain_registers}
            return known
    out, entries = {}, {}
    for g in buses:
        try:
            out[g.name] = scan(g, progress=(lambda k, n, name=g.name: progress(f"scan {name}", k, n)) if progress else None)
            entries[g.name] = {"ok": True, "error": None, "devices": [d.as_dict() for d in out[g.name]]}
        except I2cError as e:
            out[g.name] = []
            entries[g.name] = {"ok": False, "error": e.message, "devices": []}
    save_cache(board.t.devname, entries)
    return out


def _input_monitor(target) -> tuple[str, int, float] | None:
    plat = target.platform
    spec, mohm = plat.get("input_monitor"), plat.get("input_shunt_mohm")
    if not spec or not mohm:
        return None
    bus, _, addr = spec.partition(":")
    try:
        return bus, int(addr, 0), float(mohm) / 1e3
    except ValueError:
        return None


def measure(board, found: dict[str, list[devices.Device]], guards: dict[str, Guard]) -> dict[str, Any]:
    """Readings of every identified sensor; board power, its source, board temperature and rails."""
    monitor = _input_monitor(board.target)
    rails, sensors, temps = [], [], []
    for bus, devs in found.items():
        for dev in devs:
            shunt = monitor[2] if monitor and (bus, dev.addr) == monitor[:2] else None
            try:
                r = devices.readings(guards[bus], dev, shunt)
            except I2cError as e:
                sensors.append({**dev.as_dict(), "error": e.message})
                continue
            sensors.append({**dev.as_dict(), "readings": {k: v for k, v in r.items() if k != "how"}})
            if dev.kind == "LM73":
                temps.append(r["temp"][0])
            if "power" in r:
                rails.append({"bus": bus, "addr": f"0x{dev.addr:02x}", "kind": dev.kind, "w": r["power"][0],
                              "how": r["how"], "input": shunt is not None,
                              "v": (r.get("bus") or r.get("vout") or (None,))[0], "a": (r.get("current") or r.get("iout") or (None,))[0]})
    inputs = [r for r in rails if r["input"]]
    pmbus = [r for r in rails if r["kind"] == "PMBus"]
    if inputs:
        w, how = inputs[0]["w"], f"input monitor {inputs[0]['kind']} at {inputs[0]['bus']}:{inputs[0]['addr']}"
    elif pmbus:
        w, how = round(sum(r["w"] for r in pmbus), 3), "sum of the PMBus regulators' " + "/".join(sorted({r["how"] for r in pmbus}))
    else:
        w, how = None, None
    return {"w": w, "how": how, "rails": rails, "board_temp_c": temps[0] if temps else None, "sensors": sensors}


def measured(board) -> dict[str, Any] | None:
    """What smi shows: None when another process holds the I2C lock or the card has no I2C pins."""
    if board.info.regmap < 2 or not board.info.caps.get("i2c"):
        return None
    buses = card_buses(board)
    lock = buses[0].lock
    lock.timeout = 0.0
    try:
        with lock:
            return measure(board, discover(board, buses), {g.name: g for g in buses})
    except DeviceBusy:
        return None
