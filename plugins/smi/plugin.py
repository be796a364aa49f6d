"""otpu-smi plugin: mounts `otpu smi`."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl

from . import cli


@hookimpl
def otpu_commands(app) -> None:
    # the same function as otpu-smi: one command under two names
    app.command("smi", help=cli.HELP)(cli.smi)
