"""`otpu-tt core status | probe | recover` (also `ft_tt_core`): per-Tensix state, the safe probe, the ladder."""
from __future__ import annotations

import typer

from otpu_core.console import print_json, stdout
from otpu_core.errors import EXIT_CHECKS_FAILED, EXIT_DEVICE, EXIT_USAGE, UsageError
from otpu_core.tt.coords import parse_xy
from otpu_core.tt.probe import CoreState, probe_many

from . import views
from .cliopts import dev_option, fault_option, json_option, live, loop_option, opened
from .cmd_cards import broken_state
from .recover import RUNGS, TOP_RUNG, Ladder, recover_command, remember_stuck


def card_states(card, reprobe: bool) -> list[CoreState]:
    """Every live Tensix's state. A card that cannot be reached is one state for every core (the grid
    then shows `!` or `L`); tiles found stuck before are not read again unless `reprobe`."""
    if card.broken is None:
        card.ensure_alive()
    if card.broken is not None:
        return [CoreState(t, broken_state(card), card.broken.message) for t in card.tiles.tensix]
    states = probe_many(card.noc, card.tiles.tensix, skip=frozenset() if reprobe else card.memo.stuck())
    remember_stuck(card, states)
    return states


def status_cmd(dev: str = dev_option(), fault: str = fault_option(), loop: float = loop_option(),
               reprobe: bool = typer.Option(False, "--reprobe", help="Read tiles found unresponsive before again "
                                            "(each read of a stuck tile costs the NoC a transaction it never gets back)."),
               json_out: bool = json_option()) -> None:
    """A grid of every Tensix with its state and a table of what the busy or bad cores do.
    Exit 0 every core healthy, 1 a core (or the chip) is bad, 3 no card or one that waits for POST_RESET."""
    with opened(dev, fault, need_noc=False) as card:
        if card.needs_post_reset:
            card.require()
        if json_out:
            s = card_states(card, reprobe)
            healthy = all(c.healthy for c in s)
            print_json({"dev": card.spec, "tiles": card.tiles.as_dict(), "cores": [c.as_dict() for c in s],
                        "healthy": healthy, **({"broken": card.broken.message} if card.broken else {})})
        elif loop:
            live(lambda: views.core_grid(card.tiles, card_states(card, reprobe)), loop)
            return
        else:
            s = card_states(card, reprobe)
            healthy = all(c.healthy for c in s)
            stdout().print(views.core_grid(card.tiles, s))
            if not healthy:
                stdout().print(f"to recover: {recover_command(card, [c for c in s if not c.healthy])}", markup=False)
    if not healthy:
        raise typer.Exit(EXIT_CHECKS_FAILED)


def probe_cmd(xy: str = typer.Argument(..., metavar="X,Y", help="Translated coordinates of a live Tensix."),
              dev: str = dev_option(), fault: str = fault_option(), json_out: bool = json_option()) -> None:
    """A safe liveness probe of one Tensix (registers and our mailbox only; coordinates checked against
    telemetry). Exit 0 healthy, 1 bad, 2 not a live Tensix, 3 no card."""
    x, y = parse_xy(xy)
    with opened(dev, fault) as card:
        tile = card.tiles.tile("tensix", x, y)
        state = probe_many(card.noc, [tile])[0]
        remember_stuck(card, [state])
        fix = None if state.healthy else recover_command(card, [state], (x, y))
    if json_out:
        print_json({**state.as_dict(), **({"recover": fix.strip("`")} if fix else {})})
    else:
        stdout().print(views.probe_view(state, fix))
    if not state.healthy:
        raise typer.Exit(EXIT_CHECKS_FAILED)


RECOVER_HELP = ("Climb the recovery ladder, lowest rung first, probing after each and climbing only while the core "
                "stays bad; rungs 3 to 6 need --yes (without it: print what would run, exit 2) and run under the card's "
                "advisory lock; rung 7 is the answer 'needs a power cycle', not an action. Rungs: "
                + "; ".join(f"{r.number} {r.name}" for r in RUNGS) + " (0 only for a card someone left needing "
                "POST_RESET). Exit 0 recovered, 1 still bad, 2 needs --yes, 3 another process holds the card.")


def recover_cmd(xy: str = typer.Argument(None, metavar="[X,Y]", help="The core to recover (translated)."),
                all_cores: bool = typer.Option(False, "--all", help="Every Tensix that probes bad."),
                max_rung: int = typer.Option(TOP_RUNG, "--max-rung", min=1, max=TOP_RUNG, help="Climb no higher than this rung."),
                yes: bool = typer.Option(False, "--yes", "-y", help="Allow rungs 3 to 6 (tile, Tensix, ASIC, PCIe resets)."),
                force: bool = typer.Option(False, "--force", help="Let rung 4 reset every Tensix although other "
                                           "processes have the card open (they are named)."),
                settle: float = typer.Option(2.0, "--settle", min=0.0, help="Seconds to wait after an ASIC reset before looking for the card."),
                dev: str = dev_option(), fault: str = fault_option(), json_out: bool = json_option()) -> None:
    if (xy is None) == (not all_cores):
        raise UsageError("name one core X,Y or --all")
    with opened(dev, fault, need_noc=False) as card:
        xys = None if all_cores else [parse_xy(xy)]
        if xys:
            card.tiles.tile("tensix", *xys[0])      # refuse a coordinate that is not a live Tensix
        if json_out:
            report = Ladder(card, max_rung=max_rung, yes=yes, settle=settle, force=force).run(xys)
        else:
            con = stdout()
            with con.status("probing") as status:     # a reset rung takes seconds: show which one runs
                def say(text: str) -> None:
                    con.print(f"[dim]{text}[/]")
                    status.update(text)
                report = Ladder(card, max_rung=max_rung, yes=yes, settle=settle, force=force, say=say).run(xys)
    if json_out:
        print_json(report.as_dict())
    else:
        stdout().print(views.recover_view(report))
    if report.busy:
        raise typer.Exit(EXIT_DEVICE)
    if report.needs_yes:
        raise typer.Exit(EXIT_USAGE)
    if not report.recovered:
        raise typer.Exit(EXIT_CHECKS_FAILED)
