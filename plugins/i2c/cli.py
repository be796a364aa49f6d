"""The `otpu-i2c` command (also `otpu i2c`): scan, read, pmbus-dump, sensors, levels; read-only by construction.

BUS is one of the card's bit-banged buses (`sensor` or 0, `smbus` or 1; `--dev` picks the card)
or a host adapter `/dev/i2c-N` through smbus2. The card is opened as a monitor (no device
lock: the sensors can be read while a model runs); every transaction takes the card's I2C
lock instead.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Optional

import typer

from otpu_core import cliopts
from otpu_core.board import Board
from otpu_core.cli import add_version_option, tool_main
from otpu_core.console import WorkProgress, print_json, stdout
from otpu_core.errors import EXIT_DEVICE, UsageError

from . import devices, discovery, render
from .bitbang import BUS_NAMES
from .bus import (CardBus, Guard, HostBus, I2cError, I2cLock, host_adapter, parse_addr, parse_bus, parse_byte,
                  refuse_pointer)

PROG = "otpu-i2c"
HELP = ("Read-only I2C/SMBus on an openTPU card's buses (sensor, smbus) or a host adapter (/dev/i2c-N): scan, "
        "read, pmbus-dump, sensors, levels. Never writes a data byte. Exit 0 ok, 2 bad options, 3 bus or card "
        "error (NACK, stuck bus, busy lock, no card).")

app = typer.Typer(name="i2c", no_args_is_help=True, add_completion=False, rich_markup_mode=None, help=HELP)


add_version_option(app, PROG)


KhzOpt = typer.Option(100.0, "--khz", help="SCL rate bound of the card's bit-banged buses, 1..400 kHz (the host "
                                           "holds every half bit at least 1/(2 x kHz))")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document.")


def _half_s(khz: float) -> float:
    if not math.isfinite(khz) or not 1 <= khz <= 400:
        raise UsageError(f"--khz {khz}: must be 1..400 (standard mode is 100, fast mode 400)")
    return 0.5 / (khz * 1e3)


def _open_card(dev, target, fault) -> Board:
    board = Board.open(dev, target, check=False, faults=fault, lock=fault is not None)
    if board.info.regmap < 2 or not board.info.caps.get("i2c"):
        board.close()
        raise UsageError(f"{board.t.dev}: this bitstream has no I2C pins (CAPS bit2 I2C clear)",
                         hint="a host adapter may reach the card's sensors: `otpu-i2c scan --bus /dev/i2c-N`")
    return board


@contextmanager
def _buses(spec: str, dev, target, fault, khz: float):
    """Guarded buses for a BUS argument (`all`: both of the card's), and the card when they are its."""
    half = _half_s(khz)
    if spec.strip().lower() == "all":
        board = _open_card(dev, target, fault)
        try:
            yield discovery.card_buses(board, half), board
        finally:
            board.close()
        return
    name = parse_bus(spec)
    adapter = host_adapter(name)
    if adapter is not None:
        g = Guard(HostBus(adapter), I2cLock(f"i2c-{adapter}"))
        try:
            yield [g], None
        finally:
            g.close()
        return
    board = _open_card(dev, target, fault)
    try:
        yield [Guard(CardBus(board.t, BUS_NAMES.index(name), half), I2cLock(board.t.devname))], board
    finally:
        board.close()


@contextmanager
def _bus(spec: str, dev, target, fault, khz: float):
    if spec.strip().lower() == "all":
        raise UsageError("BUS 'all': this command reads one bus (sensor, smbus or /dev/i2c-N)")
    with _buses(spec, dev, target, fault, khz) as (guards, board):
        yield guards[0], board


def _known_plain(bus: Guard, board, addr: int) -> None:
    """Let the PMBus send-byte codes reach `addr` only if it is an LM73 / INA2xx (cache, else its ID registers)."""
    doc = discovery.load_cache(board.t.devname) if board is not None else None
    cached = discovery.cached_devices(doc, bus.name) if doc else None
    kinds = {d.addr: d for d in cached or []}
    dev = kinds.get(addr)
    if dev is None and bus.probe(addr):
        dev = devices.identify(bus, addr)
    if dev is not None and dev.plain_registers:
        bus.plain_registers.add(addr)


def _print(lines) -> None:
    con = stdout()
    for line in lines:
        con.print(line, highlight=False, markup=False) if isinstance(line, str) else con.print(line, highlight=False)


# ---- scan --------------------------------------------------------------------------------------

@app.command()
def scan(bus: str = typer.Option("all", "--bus", "-b", help="sensor, smbus, all (both card buses) or /dev/i2c-N."),
         identify: bool = typer.Option(True, "--identify/--no-identify", help="Name what answers from its ID registers."),
         first: str = typer.Option("0x08", "--first", help="First address probed."),
         last: str = typer.Option("0x77", "--last", help="Last address probed."),
         dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
         khz: float = KhzOpt, json_out: bool = JsonOpt) -> None:
    """Probe every address (address + read, one byte NACKed, STOP): an i2cdetect grid and what answers."""
    lo, hi = parse_addr(first), parse_addr(last)
    if lo > hi:
        raise UsageError(f"--first 0x{lo:02x} is above --last 0x{hi:02x}")
    results: dict[str, dict] = {}
    found: dict[str, list] = {}
    with _buses(bus, dev, target, fault, khz) as (guards, board), WorkProgress(PROG) as prog:
        for g in guards:
            try:
                found[g.name] = discovery.scan(g, range(lo, hi + 1), identify,
                                               progress=lambda k, n, name=g.name: prog.update(f"scan {name}", k, n))
                results[g.name] = {"ok": True, "error": None, "devices": [d.as_dict() for d in found[g.name]]}
            except I2cError as e:
                found[g.name] = []
                results[g.name] = {"ok": False, "error": e.message, "hint": e.hint, "devices": []}
        full = board is not None and len(guards) == len(BUS_NAMES) and (lo, hi, identify) == (0x08, 0x77, True)
        if full:                                   # what sensors and smi read without scanning again
            discovery.save_cache(board.t.devname, results)
    if json_out:
        print_json({"buses": results, "first": f"0x{lo:02x}", "last": f"0x{hi:02x}"})
    else:
        for name, r in results.items():
            _print([f"bus {name}:"])
            if not r["ok"]:
                _print([f"  error: {r['error']}"] + ([f"  hint: {r['hint']}"] if r.get("hint") else []))
                continue
            _print(render.grid(found[name], lo, hi))
            for d in found[name]:
                _print([f"  0x{d.addr:02x}  {d.name}"])
    if any(not r["ok"] for r in results.values()):
        raise typer.Exit(EXIT_DEVICE)


# ---- read --------------------------------------------------------------------------------------

@app.command()
def read(bus: str = typer.Argument(..., help="sensor, smbus (the card's) or /dev/i2c-N."),
         addr: str = typer.Argument(..., help="7-bit device address (0x48)."),
         reg: Optional[str] = typer.Argument(None, help="Register pointer / command code sent first (omitted: read "
                                                        "from the current pointer)."),
         n: int = typer.Option(1, "-n", min=1, max=32, help="Bytes to read (1..32)."),
         block: bool = typer.Option(False, "--block", help="SMBus block read: the device sends a count byte first."),
         dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
         khz: float = KhzOpt, json_out: bool = JsonOpt) -> None:
    """Read bytes from a device: the one byte ever sent is REG, then a repeated START and reads."""
    a = parse_addr(addr)
    cmd = None if reg is None else parse_byte(reg, "register")
    if block and cmd is None:
        raise UsageError("--block needs REG: an SMBus block read starts with its command code")
    if cmd is not None:
        refuse_pointer(a)
    with _bus(bus, dev, target, fault, khz) as (g, board):
        if cmd is not None:
            _known_plain(g, board, a)
        data = g.read(a, cmd, n, block)
    doc = {"bus": g.name, "addr": f"0x{a:02x}", "reg": None if cmd is None else f"0x{cmd:02x}", "block": block,
           "bytes": [f"0x{b:02x}" for b in data]}
    if len(data) == 2:
        doc["word_msb_first"] = f"0x{int.from_bytes(data, 'big'):04x}"
        doc["word_smbus"] = f"0x{int.from_bytes(data, 'little'):04x}"
    if json_out:
        print_json(doc)
        return
    _print([" ".join(doc["bytes"]) or "(empty block)"])
    if len(data) == 2:
        _print([f"word: 0x{int.from_bytes(data, 'big'):04x} MSB first (LM73, INA2xx), "
                f"0x{int.from_bytes(data, 'little'):04x} SMBus / PMBus little-endian"])
    if block and data and devices.printable(data):
        _print([f"text: {data.decode()}"])


# ---- pmbus-dump --------------------------------------------------------------------------------

@app.command("pmbus-dump")
def pmbus_dump(bus: str = typer.Argument(..., help="sensor, smbus (the card's) or /dev/i2c-N."),
               addr: str = typer.Argument(..., help="7-bit address of the PMBus device."),
               dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
               khz: float = KhzOpt, json_out: bool = JsonOpt) -> None:
    """Every standard PMBus status and reading command, raw and decoded (LINEAR11, VOUT_MODE / LINEAR16)."""
    a = parse_addr(addr)
    with _bus(bus, dev, target, fault, khz) as (g, _board):
        with g.lock:
            if not g.probe(a):
                raise I2cError(f"nothing answers at 0x{a:02x} on {g.name}", hint="`otpu-i2c scan` lists what answers")
            rows = devices.pmbus_dump(g, a)
    if json_out:
        print_json({"bus": g.name, "addr": f"0x{a:02x}", "commands": rows})
        return
    stdout().print(render.dump_table(a, g.name, rows))


# ---- sensors -----------------------------------------------------------------------------------

@app.command()
def sensors(refresh: bool = typer.Option(False, "--refresh", help="Scan the buses again instead of using the cache."),
            dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
            khz: float = KhzOpt, json_out: bool = JsonOpt) -> None:
    """Every identified device on the card's buses with its readings in units, board power and temperature."""
    half = _half_s(khz)
    board = _open_card(dev, target, fault)
    try:
        guards = discovery.card_buses(board, half)
        with guards[0].lock, WorkProgress(PROG) as prog:
            found = discovery.discover(board, guards, refresh, progress=prog.update)
            report = discovery.measure(board, found, {g.name: g for g in guards})
        cache = discovery.load_cache(board.t.devname) or {"buses": {}}
    finally:
        board.close()
    buses = {name: cache["buses"].get(name, {}) for name in BUS_NAMES}
    if json_out:
        print_json({**report, "buses": buses})
        return
    _print(render.sensors_lines(report, buses))
    if any(entry.get("error") for entry in buses.values()):
        raise typer.Exit(EXIT_DEVICE)


# ---- levels ------------------------------------------------------------------------------------

@app.command()
def levels(bus: str = typer.Option("all", "--bus", "-b", help="sensor, smbus or all."),
           dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
           json_out: bool = JsonOpt) -> None:
    """The SCL and SDA levels of the card's buses as I2C_IN reads them, and the LM73's ALERT pin."""
    if bus.strip().lower() != "all" and host_adapter(parse_bus(bus)) is not None:
        raise UsageError(f"{parse_bus(bus)}: a host adapter does not show its pin levels",
                         hint="`otpu-i2c levels` reads the card's buses (sensor, smbus)")
    with _buses(bus, dev, target, fault, 100.0) as (guards, _board):
        out = [g.levels() for g in guards]
    if json_out:
        print_json(out)
        return
    _print(render.levels_lines(out))


def main() -> None:
    tool_main(app, PROG)
