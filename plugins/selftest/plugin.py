"""otpu-selftest plugin: mounts `otpu selftest` (the checks themselves live in otpu_core.corechecks)."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl

from . import cli


@hookimpl
def otpu_commands(app) -> None:
    app.add_typer(cli.app, name="selftest")
