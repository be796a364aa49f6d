"""The `otpu-tt` command (also `otpu tt`), and `ft_tt_core` which is its `core` group on its own."""
from __future__ import annotations

import time
from contextlib import contextmanager

import typer
from rich.live import Live
from rich.text import Text

from otpu_core import cliopts
from otpu_core.cli import tool_main
from otpu_core.console import print_json, stderr, stdout
from otpu_core.errors import EXIT_CHECKS_FAILED, EXIT_USAGE, DeviceError, UsageError
from otpu_core.tt import faults as tt_faults
from otpu_core.tt.card import Card, power_cycle_sim
from otpu_core.tt.coords import parse_xy
from otpu_core.tt.kmd import present_minors
from otpu_core.tt.probe import probe_many
from otpu_core.tt.simdev import existing_sims

from . import snapshot, views
from .recover import RUNGS, TOP_RUNG, Ladder

app = typer.Typer(name="tt", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Tenstorrent Blackhole cards: list, smi, core status / probe / recover, sim reset.")
core_app = typer.Typer(name="core", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                       help="Per-Tensix status, safe probe and the recovery ladder.")
app.add_typer(core_app, name="core")
sim_app = typer.Typer(name="sim", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                      help="Simulated Blackhole cards (tt:sim[:NAME]).")
app.add_typer(sim_app, name="sim")

DEV_HELP = "Card: tt:0 (first real card), tt:sim or tt:sim:NAME (simulated). Default: first /dev/tenstorrent node, else tt:sim."
FAULT_HELP = f"Inject faults into a simulated card (also ${tt_faults.ENV}): " + "; ".join(tt_faults.KINDS)


def dev_option():
    return typer.Option(None, "--dev", "-d", help=DEV_HELP)


def fault_option():
    return typer.Option(None, "--fault", help=FAULT_HELP)


@contextmanager
def opened(dev: str | None, fault: str | None = None, need_noc: bool = True):
    """An open card; errors of the OS or driver reach the user as DeviceError, never as a traceback.

    With `need_noc`, a card whose NoC is hung or whose link is gone is an error (exit 3, with the
    hint to recover); recovery itself opens without it.
    """
    card = None
    cliopts.nonempty(dev, "--dev", "a Blackhole card: tt:N, tt:sim or tt:sim:NAME")
    try:
        card = Card(dev, tt_faults.parse(fault))
        note = card.fault_note()
        if note:
            stderr().print(Text.assemble(("note:", "bold yellow"), " ", note))
        if need_noc:
            card.require()
        yield card
    except OSError as e:
        raise DeviceError(f"{dev or 'tt'}: {e.strerror or e}", hint="`otpu-tt list` shows the cards present") from None
    finally:
        if card is not None:
            try:
                card.close()
            except OSError:
                pass


def _pause(seconds: float) -> None:
    time.sleep(seconds)


def _live(render, interval: float) -> None:
    """Refresh a renderable every `interval` seconds until Ctrl-C (which exits 0)."""
    cliopts.seconds(interval, "-l")
    try:
        with Live(render(), console=stdout(), refresh_per_second=4, auto_refresh=False) as live:
            while True:
                _pause(interval)
                live.update(render(), refresh=True)
    except KeyboardInterrupt:
        raise typer.Exit(0)


# ---- list / smi ------------------------------------------------------------------------------

@app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List Blackhole cards: every /dev/tenstorrent node and every simulated card in the run directory."""
    rows = []
    for spec in [f"tt:{m}" for m in present_minors()] + [f"tt:sim:{n}" for n in existing_sims()]:
        row = {"dev": spec}
        try:
            with opened(spec) as card:
                d = snapshot.device_snapshot(card)
                row.update(node=card.dev.path, **{k: d["board_info"][k] for k in ("bus_id", "board_type", "board_id", "tensix_enabled")})
        except (DeviceError, UsageError) as e:
            row["error"] = e.message
        rows.append(row)
    if json_out:
        print_json(rows)
        return
    if not rows:
        stdout().print("no Blackhole cards (no /dev/tenstorrent nodes, no simulated cards yet; `otpu-tt smi --dev tt:sim` makes one)")
        return
    stdout().print(views.card_list(rows))


@app.command("smi")
def smi_cmd(dev: str = dev_option(), fault: str = fault_option(),
            loop: float = typer.Option(None, "-l", "--loop", min=0.1, help="Refresh every SEC seconds until Ctrl-C."),
            json_out: bool = typer.Option(False, "--json", help="Print a tt-smi style JSON snapshot.")) -> None:
    """Card type, serial, firmware, ASIC id, AICLK, voltage, power, current, temperature, heartbeat,
    throttling, DRAM, PCIe link and processes."""
    with opened(dev, fault) as card:
        def take() -> dict:
            card.ensure_alive()          # a reset elsewhere disowns our descriptor: reopen
            return snapshot.snapshot([card])
        if json_out:
            print_json(take())
        elif loop:
            _live(lambda: views.smi(take()), loop)
        else:
            stdout().print(views.smi(take()))


# ---- core ------------------------------------------------------------------------------------

@core_app.command("status")
def status_cmd(dev: str = dev_option(), fault: str = fault_option(),
               loop: float = typer.Option(None, "-l", "--loop", min=0.1, help="Refresh every SEC seconds until Ctrl-C."),
               json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """A grid of every Tensix with its state (off, in reset, idle, resident, running, hung, wedged) and what it does."""
    with opened(dev, fault) as card:
        def states():
            card.ensure_alive()
            return probe_many(card.noc, card.tiles.tensix)
        if json_out:
            s = states()
            print_json({"dev": card.spec, "tiles": card.tiles.as_dict(), "cores": [c.as_dict() for c in s],
                        "healthy": all(c.healthy for c in s)})
        elif loop:
            _live(lambda: views.core_grid(card.tiles, states()), loop)
        else:
            stdout().print(views.core_grid(card.tiles, states()))


@core_app.command("probe")
def probe_cmd(xy: str = typer.Argument(..., metavar="X,Y", help="Translated coordinates of a live Tensix."),
              dev: str = dev_option(), fault: str = fault_option(),
              json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """A safe liveness probe of one Tensix (registers and mailbox only; coordinates checked against telemetry)."""
    x, y = parse_xy(xy)
    with opened(dev, fault) as card:
        tile = card.tiles.tile("tensix", x, y)
        state = probe_many(card.noc, [tile])[0]
    if json_out:
        print_json(state.as_dict())
    else:
        stdout().print(views.probe_view(state))
    if not state.healthy:
        raise typer.Exit(EXIT_CHECKS_FAILED)


RECOVER_HELP = ("Climb the recovery ladder, lowest rung first, probing after each and climbing only while the core "
                "stays bad; rungs 3 to 6 need --yes (without it: print what would run, exit 2); rung 7 is the answer "
                "'needs a power cycle', not an action. Rungs: "
                + "; ".join(f"{r.number} {r.name}" for r in RUNGS) + ". Exit 0 recovered, 1 still bad.")


@core_app.command("recover", help=RECOVER_HELP)
def recover_cmd(xy: str = typer.Argument(None, metavar="[X,Y]", help="The core to recover (translated)."),
                all_cores: bool = typer.Option(False, "--all", help="Every Tensix that probes bad."),
                max_rung: int = typer.Option(TOP_RUNG, "--max-rung", min=1, max=TOP_RUNG, help="Climb no higher than this rung."),
                yes: bool = typer.Option(False, "--yes", "-y", help="Allow rungs 3 to 6 (tile, Tensix, ASIC, PCIe resets)."),
                settle: float = typer.Option(2.0, "--settle", min=0.0, help="Seconds to wait after an ASIC reset before looking for the card."),
                dev: str = dev_option(), fault: str = fault_option(),
                json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    if (xy is None) == (not all_cores):
        raise UsageError("name one core X,Y or --all")
    with opened(dev, fault, need_noc=False) as card:
        xys = None if all_cores else [parse_xy(xy)]
        if xys and card.tiles is not None:
            card.tiles.tile("tensix", *xys[0])      # refuse a coordinate that is not a live Tensix
        if json_out:
            report = Ladder(card, max_rung=max_rung, yes=yes, settle=settle).run(xys)
        else:
            con = stdout()
            with con.status("probing") as status:     # a reset rung takes seconds: show which one runs
                def say(text: str) -> None:
                    con.print(f"[dim]{text}[/]")
                    status.update(text)
                report = Ladder(card, max_rung=max_rung, yes=yes, settle=settle, say=say).run(xys)
    if json_out:
        print_json(report.as_dict())
    else:
        stdout().print(views.recover_view(report))
    if report.needs_yes:
        raise typer.Exit(EXIT_USAGE)
    if not report.recovered:
        raise typer.Exit(EXIT_CHECKS_FAILED)


# ---- sim -------------------------------------------------------------------------------------

@sim_app.command("reset")
def sim_reset_cmd(dev: str = typer.Option("tt:sim", "--dev", "-d", help="A simulated card: tt:sim or tt:sim:NAME.")) -> None:
    """Power a simulated card off and on: L1, DRAM, registers, hangs (even a lost link), locks and the
    record of applied faults are cleared, so `--fault` specs apply again. Refused while a process has it open."""
    name = power_cycle_sim(dev)
    stdout().print(f"tt:sim:{name}: powered off and on (state and faults cleared)", markup=False)


def main() -> None:
    tool_main(app, "otpu-tt")


def core_main() -> None:
    tool_main(core_app, "ft_tt_core")
