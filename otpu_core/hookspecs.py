"""Every hook a plugin may implement: the whole contract between the core and the tools.

Plugins are modules (or objects) with functions marked `@hookimpl`, found through the
entry-point group `otpu` or registered as built-ins by `otpu_core.plugins`. Hooks are called
with keyword arguments only; an implementation may accept a subset of a spec's arguments.
Plugins never import one another: whatever two tools share goes through these hooks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import typer

PROJECT = "otpu"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# ---- start-up ---------------------------------------------------------------------------

@hookspec
def otpu_commands(app: "typer.Typer") -> None:
    """Attach this plugin's commands to the root `otpu` command.

    Called once, after every plugin has loaded, while `otpu` builds its command tree. A tool
    with sub-commands mounts its Typer sub-app with `app.add_typer(tool_app, name="tt")`; a
    tool that is one command mounts its function with `app.command("smi")(smi_main)`. Either
    way the same object is what its `otpu-<tool>` console script runs, so both spellings are
    one command. Returns nothing.
    """


@hookspec
def otpu_transports() -> list[Any]:
    """Name the device specs this plugin can open.

    Called when a `--dev` spec is resolved. Return a list of `otpu_core.devspec.TransportSpec`:
    a prefix such as `sim`, `/dev/xdma` or `tt:`, a one-line description, an opener
    `open(dev, *, target=None, faults=None, lock=True)` returning a transport (DeviceError
    when the device is absent, UsageError when the spec is wrong; `lock=False` opens for
    monitoring without the device lock), and optionally `list()` naming the devices present
    and `accepts(dev)` deciding whether a spec is this kind's. The first spec that matches
    wins, so prefixes must not overlap between plugins.
    """


# ---- checks -----------------------------------------------------------------------------

@hookspec
def otpu_checks(registry: Any) -> None:
    """Contribute checks to the one check DAG that selftest and diag both run.

    Called once per run of a checking tool with an `otpu_core.checks.Registry`. Call
    `registry.add(Check(section=..., name=..., needs=[...], fn=...))` for each check this
    plugin owns; `needs` names checks of any plugin, so the DAG spans plugins without imports.
    Returns nothing.
    """


# ---- reporting --------------------------------------------------------------------------

@hookspec
def otpu_smi_fields(board: Any) -> list[Any] | None:
    """Contribute measured fields to `otpu-smi` for one open card.

    Called once per card per sample with an open `otpu_core.board.Board`. Return a list of
    `otpu_core.smi_fields.Field` (query name such as `power.draw`, value, unit, source), or
    None when this plugin has nothing to say about that card. A measured field replaces the
    `~ estimate` smi would otherwise show for the same name. Must not hold the card longer than
    one sample needs.
    """
