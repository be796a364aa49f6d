"""Hook implementations of the tt plugin: the `tt` command group, the Blackhole checks, the `tt:` device prefix."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl


@hookimpl
def otpu_commands(app) -> None:
    from .cli import app as tt_app
    app.add_typer(tt_app, name="tt")


@hookimpl
def otpu_checks(registry) -> None:
    from .checks import add_checks
    add_checks(registry)


@hookimpl
def otpu_transports():
    """`tt:` names a Blackhole card: not an openTPU transport, so openTPU tools point to otpu-tt."""
    from otpu_core.devspec import TransportSpec
    from otpu_core.errors import UsageError

    def refuse(dev: str, **_):
        raise UsageError(f"{dev} is a Tenstorrent Blackhole card, not an openTPU card",
                         hint=f"use `otpu-tt smi --dev {dev}`, `otpu-tt core status --dev {dev}` or `otpu-diag --dev {dev}`")
    return [TransportSpec("tt:", "Tenstorrent Blackhole (tt:N, tt:sim[:NAME]); driven by otpu-tt", refuse)]
