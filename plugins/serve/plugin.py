"""otpu-serve plugin: mounts `otpu serve`."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl


@hookimpl
def otpu_commands(app) -> None:
    from . import cli
    app.command("serve", help=cli.HELP)(cli.serve)
