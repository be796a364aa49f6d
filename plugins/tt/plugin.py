"""Hook implementations of the tt plugin: the `tt` command group and the Blackhole checks."""
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
