"""otpu-lens plugin: mounts `otpu lens`."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl


@hookimpl
def otpu_commands(app) -> None:
    from .cli import app as lens_app
    app.add_typer(lens_app, name="lens")
