"""otpu-diag plugin: mounts `otpu diag` (the checks themselves live in otpu_core.corechecks)."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl

from . import cli


@hookimpl
def otpu_commands(app) -> None:
    # the same function as otpu-diag: one command under two names
    app.command("diag", help=cli.HELP)(cli.diag)
