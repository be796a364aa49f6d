"""The `otpu-tt` command (also `otpu tt`), and `ft_tt_core`, which is its `core` group on its own.

The commands live in modules by subject (`cmd_cards`: list, smi, sim reset; `cmd_core`: core
status, probe, recover) and share `cliopts`; this module builds the Typer apps and registers
every sub-command in the one block below.
"""
from __future__ import annotations

import typer

from otpu_core.cli import add_version_option, tool_main

from . import cmd_cards, cmd_core, weights

app = typer.Typer(name="tt", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Tenstorrent Blackhole cards: list, smi, core status / probe / recover, sim reset, "
                       "convert / weights info / weights check / upload.")
core_app = typer.Typer(name="core", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                       help="Per-Tensix status, safe probe and the recovery ladder.")
sim_app = typer.Typer(name="sim", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                      help="Simulated Blackhole cards (tt:sim[:NAME]).")


add_version_option(app, "otpu-tt")
add_version_option(core_app, "ft_tt_core")


# ---- sub-commands: every one is registered here ----------------------------------------------
app.command("list")(cmd_cards.list_cmd)
app.command("smi", help=cmd_cards.SMI_HELP)(cmd_cards.smi_cmd)
core_app.command("status")(cmd_core.status_cmd)
core_app.command("probe")(cmd_core.probe_cmd)
core_app.command("recover", help=cmd_core.RECOVER_HELP)(cmd_core.recover_cmd)
sim_app.command("reset")(cmd_cards.sim_reset_cmd)
app.command("convert")(weights.convert_cmd)
app.command("upload")(weights.upload_cmd)
app.add_typer(weights.weights_app, name="weights")
app.add_typer(core_app, name="core")
app.add_typer(sim_app, name="sim")


def main() -> None:
    tool_main(app, "otpu-tt")


def core_main() -> None:
    tool_main(core_app, "ft_tt_core")
