"""Built-in plugin: the core's transports (`sim`, `/dev/xdma`) and the `otpu card ...` / `otpu sim reset` commands."""
from __future__ import annotations

import os
import time

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import cliopts
from .. import target as target_mod
from ..board import Board
from ..card import regs
from ..card.runstate import DeviceLock, read_status, run_dir
from ..console import SPIN_AFTER, print_json, spin_while, stderr, stdout
from ..devspec import TransportSpec, available
from ..errors import UsageError
from ..hookspecs import hookimpl

app = typer.Typer(name="card", no_args_is_help=True, add_completion=False,
                  help="Open a card (real or simulated) and show what it says about itself.")


# -- transports -----------------------------------------------------------------------------------

def _open_sim(dev: str, *, target: str | None = None, faults: str | None = None, lock: bool = True):
    from ..transport.sim import SimTransport
    name = dev.partition(":")[2] or None
    if name is not None and (not name.replace("-", "").replace("_", "").isalnum()):
        raise UsageError(f"simulated card name '{name}' must be letters, digits, '-' or '_'")
    return SimTransport(name, target=target, faults=faults, lock=lock)


def _open_xdma(dev: str, *, target: str | None = None, faults: str | None = None, lock: bool = True):
    from ..transport.xdma import XdmaTransport
    if faults:
        raise UsageError(f"--fault / OTPU_SIM_FAULTS apply to simulated cards only, not {dev}")
    channel_bytes = int(target_mod.load(target).platform["channel_bytes"])    # the board's DDR3, per channel
    return XdmaTransport(dev, lock=lock, channel_bytes=channel_bytes)


def _list_sims() -> list[str]:
    names = sorted(p.name[:-len(".card.json")] for p in run_dir().glob("sim*.card.json"))
    return [("sim:" + n[4:]) if n.startswith("sim-") else n for n in names] or ["sim"]


def _list_xdma() -> list[str]:
    from ..transport.xdma import present
    return present()


def _is_sim(dev: str) -> bool: return dev == "sim" or dev.startswith("sim:")


def _is_xdma(dev: str) -> bool: return dev.startswith("/dev/xdma") or os.path.exists(dev + "_user")


@hookimpl
def otpu_transports() -> list[TransportSpec]:
    return [TransportSpec("sim", "simulated card in the run directory (sim or sim:NAME)", _open_sim, _list_sims, _is_sim),
            TransportSpec("/dev/xdma", "real card through the XDMA driver (/dev/xdmaN)", _open_xdma, _list_xdma, _is_xdma)]


# -- otpu card ------------------------------------------------------------------------------------

@app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the cards the transports can see, and who holds each."""
    rows = []
    for d in available():
        devname = os.path.basename(d["dev"]) if d["kind"] != "sim" else d["dev"].replace(":", "-")
        status = read_status(run_dir() / f"{devname}.json")
        holder = None if not status or status.get("stale") else {"pid": status.get("pid"), "cmd": status.get("cmd")}
        rows.append({**d, "held_by": holder})
    if json_out:
        print_json(rows)
        return
    table = Table(title="cards")
    for col in ("dev", "kind", "held by"):
        table.add_column(col)
    for r in rows:
        held = f"PID {r['held_by']['pid']} ({r['held_by']['cmd']})" if r["held_by"] else "free"
        table.add_row(r["dev"], r["description"], held)
    stdout().print(table)


@app.command("info")
def info_cmd(dev: cliopts.Dev = None, target: cliopts.TargetName = None, no_check: cliopts.NoCheck = False,
             fault: cliopts.Fault = None, json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Identify a card: ID, VERSION, CAPS, REGMAP, BUILD_ID, CFG_HASH, calibration, PCIe link."""
    with Board.open(dev, target, check=not no_check, faults=fault, lock=False) as board:
        info = board.info
    if json_out:
        print_json(info.as_dict())
        return
    if info.fault_note:
        stdout().print(f"[bold yellow]{escape(info.fault_note)}[/]")
    table = Table(title=f"card {info.dev}", show_header=False, title_justify="left")
    table.add_column("field")
    table.add_column("value")
    caps = [k for k, v in info.caps.items() if v is True]
    link = info.link
    for k, v in (("MXU", f"D={info.d} MCOLS={info.mcols} LANES={info.lanes} ACT_ROWS={info.act_rows}"),
                 ("register map", str(info.regmap)), ("CFG_HASH", _hex(info.cfg_hash)), ("BUILD_ID", _hex(info.build_id)),
                 ("core clock", f"{info.core_khz / 1000:g} MHz" if info.core_khz else "n/a"),
                 ("DDR", f"{info.ddr_mts} MT/s" if info.ddr_mts else "n/a"),
                 ("calibrated", ", ".join(f"ch{c} {'yes' if ok else 'no'}" for c, ok in enumerate(info.calibrated))),
                 ("temperature", f"{info.temp_c:.2f} C" if info.temp_c is not None else "n/a"),
                 ("running", "yes" if info.running else "no"),
                 ("injected faults", (info.fault_note or "none")),
                 ("health", "\n".join(info.problems) or "ok"),
                 ("capabilities", " ".join(caps)),
                 ("trace", f"{info.caps.get('trace_depth', 0)} records, P/Q window {info.caps.get('pq_window', 0)} cycles"),
                 ("PCIe", f"{link.get('vendor') or 0:04x}:{link.get('device') or 0:04x} {link.get('speed') or 'link down'}"
                          f" x{link.get('width') or 0}")):
        table.add_row(k, v)
    stdout().print(table)


@app.command("regs")
def regs_cmd(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
             json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Read every control register (counters after a SNAP); reading them changes nothing."""
    with Board.open(dev, target, check=False, faults=fault, lock=False) as board:
        board.t.reg_write(regs.off("SNAP"), 1)
        values = {r.name: board.reg(r.name) for r in regs.REGS if r.access is not regs.Access.ACTION}
    if json_out:
        print_json(values)
        return
    table = Table(title="control registers")
    for col in ("offset", "name", "value", "meaning"):
        table.add_column(col)
    for r in regs.REGS:
        if r.name in values:
            table.add_row(f"0x{r.offset:03x}", r.name, f"0x{values[r.name]:0{2 * r.size}x}", r.desc)
    stdout().print(table)


@app.command("reg")
def reg_cmd(name: str = typer.Argument(..., help="Register name, e.g. SCRATCH."),
            value: str = typer.Argument(None, help="Value to write (decimal or 0x hex); omit to read."),
            dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
            json_out: bool = typer.Option(False, "--json", help="Print JSON: name, offset, value (after a write: its read-back).")) -> None:
    """Read or write one control register by name (takes the device lock to write; a counter is latched by SNAP first)."""
    with Board.open(dev, target, check=False, faults=fault, lock=value is not None) as board:
        if value is not None:
            try:
                number = int(value, 0)
            except ValueError:
                raise UsageError(f"'{value}' is not an integer") from None
            board.set_reg(name, number)
        reg = board.register(name)
        if reg.size == 8:
            board.set_reg("SNAP", 1)             # counters read their shadows: latch them first
        read = board.reg(reg.name)
    if json_out:
        print_json({"name": reg.name, "offset": reg.offset, "value": read, **({"written": number} if value is not None else {})})
        return
    stdout().print(f"{reg.name} = 0x{read:0{2 * reg.size}x}")


@app.command("run")
def run_cmd(program: str = typer.Argument(..., help="Program: assembly (.s) or an image (.bin)."),
            dev: cliopts.Dev = None, target: cliopts.TargetName = None, no_check: cliopts.NoCheck = False,
            fault: cliopts.Fault = None,
            arg: list[str] = typer.Option([], "--arg", help="Run argument ARGn (R8+n) as N=VALUE; repeatable."),
            timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for HALTED."),
            json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Run one program on a card (loaded into the program area at the top of DRAM) and print its counters."""
    from pathlib import Path

    from ..board import BoardBackend, prepare
    from .sim_cmd import parse_args, read_program
    cliopts.seconds(timeout, "--timeout")
    path = Path(program)
    if path.is_dir():
        raise UsageError(f"program file {path} is a directory")
    instrs, _ = read_program(path)
    if not instrs:
        raise UsageError(f"{program}: program has no instructions", hint="a program ends with halt")
    prog = prepare(instrs)
    args = parse_args(arg)
    with Board.open(dev, target, check=not no_check, faults=fault) as board:
        backend = BoardBackend(board)
        backend.start(prog, args=args)
        stats = wait_showing_cycles(backend, board, timeout, stderr())
    if json_out:
        print_json(stats.as_dict())
        return
    stdout().print(f"{prog.instructions} instructions loaded, {stats.instructions} retired in {stats.cycles} cycles "
                   f"({stats.seconds * 1000:.1f} ms wall); port B reads {stats.b_reads}, writes {stats.b_writes}")


def wait_showing_cycles(backend, board: Board, timeout: float, console: Console, after: float = SPIN_AFTER):
    """`backend.wait(timeout)`; on a terminal, a run still going after `after` seconds gets a
    spinner with the cycles the card has counted so far (CYCLES) and the wall time."""
    deadline = time.monotonic() + timeout

    def running() -> bool:
        return not board.status() & regs.ST_HALTED and time.monotonic() < deadline

    def cycles() -> str:
        lo, hi = board.t.reg_read_many([regs.off("CYCLES_LO"), regs.off("CYCLES_HI")])
        return f"{board.t.dev}: running, {lo | hi << 32:,} cycles"

    spin_while(running, cycles, console, after, poll=0.02)
    return backend.wait(max(0.1, deadline - time.monotonic()))


def _hex(v: int | None) -> str: return "n/a" if v is None else f"0x{v:08x}"


# -- otpu sim reset ---------------------------------------------------------------------------------

def reset_cmd(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.ResetFault = None) -> None:
    """Power-cycle a simulated card: DRAM, registers, calibration and hazards forgotten.

    With --target the card comes back as that target (a new bitstream); with --fault it comes
    back with those faults (default: none)."""
    from ..card.simcard import card_name, destroy, open_card
    dev = "sim" if dev is None else cliopts.nonempty(dev, "--dev", "a simulated card: sim or sim:NAME")
    if not _is_sim(dev):
        raise UsageError(f"`otpu sim reset` resets simulated cards; {dev} is not one (use sim or sim:NAME)")
    devname = card_name(dev.partition(":")[2] or None)
    with DeviceLock(devname):
        destroy(devname)
        card = open_card(devname, target, fault or "")
        what = (f"{devname}: power-cycled, back on as {card.target.name}"
                + (f" with faults {card.faults}" if card.faults else ""))
        card.close()
    print(what)


@hookimpl
def otpu_commands(app: typer.Typer) -> None:
    from . import sim_cmd    # `otpu sim reset` joins the simulator's `otpu sim` group
    app.add_typer(globals()["app"], name="card")
    if not any(c.name == "reset" for c in sim_cmd.app.registered_commands):
        sim_cmd.app.command("reset")(reset_cmd)
