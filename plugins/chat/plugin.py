"""otpu-chat plugin: mounts `otpu chat` and adds the model stage / section to the check DAG."""
from __future__ import annotations

from otpu_core.hookspecs import hookimpl

MODEL_ROW = "model on the card = golden simulator"


@hookimpl
def otpu_commands(app) -> None:
    from . import cli
    app.add_typer(cli.app, name="chat", help=cli.HELP)


@hookimpl
def otpu_checks(registry) -> None:
    from otpu_core.checks import Check
    from otpu_core.corechecks import names as N

    from .check import model_row, prepare_model
    registry.add(Check(section="model", name=MODEL_ROW, fn=model_row, needs=(N.DEMO,), stage="model",
                       title="a model's greedy tokens, logits and KV cache on the card against the golden simulator",
                       prepare=prepare_model))
