"""Built-in plugin contributing the core checks to the one check DAG."""
from __future__ import annotations

from ..hookspecs import hookimpl
from . import calib, i2cchecks, isachecks, memchecks, platform, regchecks


@hookimpl
def otpu_checks(registry) -> None:
    for module in (platform, calib, regchecks, i2cchecks, memchecks, isachecks):
        for check in module.checks():
            registry.add(check)
