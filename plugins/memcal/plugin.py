"""otpu-memcal plugin: mounts `otpu memcal`, takes over the calib checks, gives smi the calibration field."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl

from . import checks, cli, smi


@hookimpl
def otpu_commands(app) -> None:
    app.add_typer(cli.app, name="memcal")


@hookimpl
def otpu_checks(registry) -> None:
    for check in checks.checks():
        registry.add(check)


@hookimpl
def otpu_smi_fields(board):
    return smi.fields(board)
