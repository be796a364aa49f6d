"""otpu-i2c plugin: mounts `otpu i2c`, contributes the i2c checks and smi's measured sensors."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl

from . import checks, cli, smi


@hookimpl
def otpu_commands(app) -> None:
    app.add_typer(cli.app, name="i2c")


@hookimpl
def otpu_checks(registry) -> None:
    for check in checks.checks():
        registry.add(check)


@hookimpl
def otpu_smi_fields(board):
    return smi.fields(board)
