"""Collecting the check DAG for a checking tool, one plugin at a time.

A plugin whose `otpu_checks` raises is reported once on stderr and left out; the checks of the
other plugins still run (the tools must work while any one plugin is broken). A plugin may
take over a core check by adding a check of the same name (otpu-memcal the calibration rows,
otpu-i2c the bus scans): it replaces the core one in place, keeping its position in the order.
Two plugins adding one name is a conflict: the second is reported and left out.
"""
from __future__ import annotations

import sys

from .. import plugins
from ..checks import Check, Registry

CORE_PLUGIN = "otpu_core.corechecks.plugin"


def collect(report=sys.stderr) -> Registry:
    found: dict[str, tuple[Check, str]] = {}
    for impl in plugins.get().hook.otpu_checks.get_hookimpls():   # in registration order
        scratch = Registry()
        try:
            impl.function(registry=scratch)
        except Exception as e:
            _say(report, f"plugin '{impl.plugin_name}' could not add its checks: {type(e).__name__}: {e}")
            continue
        for check in scratch:
            held = found.get(check.name)
            if held is None or held[1] == CORE_PLUGIN:
                found[check.name] = (check, impl.plugin_name)
            elif impl.plugin_name != CORE_PLUGIN:
                _say(report, f"plugin '{impl.plugin_name}' adds check '{check.name}', which plugin "
                             f"'{held[1]}' already provides; keeping the first")
    registry = Registry()
    for check, _ in found.values():
        registry.add(check)
    return registry


def _say(report, text: str) -> None:
    if report is not None:
        print(f"otpu: {text}", file=report)
