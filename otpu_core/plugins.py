"""The plugin manager: built-in plugins, entry-point discovery, and plugins that fail to load.

A plugin that raises while importing is recorded (name, distribution, error), reported once on
stderr and by `otpu plugins`, and the other tools keep working. `OTPU_DISABLE_PLUGINS=a,b`
skips named entry points (tests use it to load nothing from the environment).
"""
from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pluggy

from . import hookspecs

ENTRY_POINT_GROUP = "otpu"
# Built-ins are ordinary plugins registered through the same manager (commands of the core).
BUILTIN_PLUGINS = ("otpu_core.commands.target_cmd", "otpu_core.commands.asm_cmd", "otpu_core.commands.sim_cmd",
                   "otpu_core.commands.card_cmd", "otpu_core.corechecks.plugin", "otpu_core.commands.ol_cmd",
                   "otpu_core.commands.setup_cmd", "otpu_core.commands.rtl_cmd")


@dataclass
class PluginInfo:
    name: str
    module: str
    version: str
    hooks: list[str] = field(default_factory=list)
    error: str | None = None
    builtin: bool = False


@dataclass
class Plugins:
    pm: pluggy.PluginManager
    infos: list[PluginInfo]

    @property
    def hook(self): return self.pm.hook


def _hooks_of(pm: pluggy.PluginManager, plugin: Any) -> list[str]:
    return sorted(h.name for h in (pm.get_hookcallers(plugin) or []))


def _dist_version(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.version if dist is not None else "?"


def build(entry_points: list[md.EntryPoint] | None = None, report=sys.stderr) -> Plugins:
    """Make a manager with the built-ins and every entry point of the `otpu` group."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    from . import __version__
    for modname in BUILTIN_PLUGINS:
        mod = importlib.import_module(modname)
        pm.register(mod, name=modname)
        infos.append(PluginInfo(modname.rsplit(".", 1)[-1], modname, __version__, _hooks_of(pm, mod), builtin=True))
    disabled = {s.strip() for s in os.environ.get("OTPU_DISABLE_PLUGINS", "").split(",") if s.strip()}
    eps = entry_points if entry_points is not None else list(md.entry_points(group=ENTRY_POINT_GROUP))
    seen: set[str] = set()
    for ep in sorted(eps, key=lambda e: e.name):
        if ep.name in disabled or "*" in disabled or ep.name in seen:
            continue
        seen.add(ep.name)
        info = PluginInfo(ep.name, ep.value, _dist_version(ep))
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
            info.hooks = _hooks_of(pm, plugin)
        except Exception as e:  # a broken plugin must not take the other tools down
            info.error = f"{type(e).__name__}: {e}"
            if report is not None:
                print(f"otpu: plugin '{ep.name}' ({ep.value}) failed to load: {info.error}", file=report)
        infos.append(info)
    return Plugins(pm, infos)


@lru_cache(maxsize=1)
def get() -> Plugins:
    """The process-wide manager, built on first use (so a broken plugin is reported once)."""
    return build()
