"""otpu-selftest plugin: mounts `otpu selftest` (the checks themselves live in otpu_core.corechecks)."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl

from . import cli


@hookimpl
def otpu_commands(app) -> None:
    # the same function as otpu-selftest: one command under two names
    app.command("selftest", help=cli.HELP)(cli.selftest)
