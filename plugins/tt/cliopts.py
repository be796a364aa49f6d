"""What every `otpu-tt` sub-command shares: the --dev and --fault options, opening a card, live refresh."""
from __future__ import annotations

import time
from contextlib import contextmanager

import typer
from rich.live import Live
from rich.text import Text

from otpu_core import cliopts
from otpu_core.console import stderr, stdout
from otpu_core.errors import DeviceError
from otpu_core.tt import faults as tt_faults
from otpu_core.tt.card import Card

DEV_HELP = "Card: tt:0 (first real card), tt:sim or tt:sim:NAME (simulated). Default: first /dev/tenstorrent node, else tt:sim."
FAULT_HELP = f"Inject faults into a simulated card (also ${tt_faults.ENV}): " + "; ".join(tt_faults.KINDS)


def dev_option():
    return typer.Option(None, "--dev", "-d", help=DEV_HELP)


def fault_option():
    return typer.Option(None, "--fault", help=FAULT_HELP)


def json_option():
    return typer.Option(False, "--json", help="Print JSON.")


def loop_option():
    return typer.Option(None, "-l", "--loop", min=0.1, help="Refresh every SEC seconds until Ctrl-C.")


@contextmanager
def opened(dev: str | None, fault: str | None = None, need_noc: bool = True):
    """An open card; errors of the OS or driver reach the user as DeviceError, never as a traceback.

    With `need_noc`, a card whose NoC is hung, whose link is gone or that waits for POST_RESET is
    an error (exit 3, with the hint to recover); recovery and monitors open without it.
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


def pause(seconds: float) -> None:
    time.sleep(seconds)


def live(render, interval: float) -> None:
    """Refresh a renderable every `interval` seconds until Ctrl-C (which exits 0)."""
    cliopts.seconds(interval, "-l")
    try:
        with Live(render(), console=stdout(), refresh_per_second=4, auto_refresh=False) as view:
            while True:
                pause(interval)
                view.update(render(), refresh=True)
    except KeyboardInterrupt:
        raise typer.Exit(0)
