"""Collecting the check DAG for a checking tool, one plugin at a time.

A plugin whose `otpu_checks` raises is reported once on stderr and left out; the checks of the
other plugins still run (the tools must work while any one plugin is broken).
"""
from __future__ import annotations

import sys

from .. import plugins
from ..checks import Registry


def collect(report=sys.stderr) -> Registry:
    registry = Registry()
    for impl in plugins.get().hook.otpu_checks.get_hookimpls():
        scratch = Registry()
        try:
            impl.function(registry=scratch)
        except Exception as e:
            if report is not None:
                print(f"otpu: plugin '{impl.plugin_name}' could not add its checks: {type(e).__name__}: {e}",
                      file=report)
            continue
        for check in scratch:
            registry.add(check)
    return registry
