"""otpu-smi plugin: mounts `otpu smi`."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl

from . import cli


@hookimpl
def otpu_commands(app) -> None:
    # the same app as otpu-smi: one command (with its dmon sub-command) under two names
    app.add_typer(cli.app, name="smi")
