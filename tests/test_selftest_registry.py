"""Check collection: a broken plugin is left out, a plugin takes over a core check by name."""
from __future__ import annotations

import io

import pytest

from otpu_core import plugins
from otpu_core.checks import Check, Result, Status, collect
from otpu_core.corechecks import names as N
from otpu_core.hookspecs import hookimpl


class MemcalLike:
    @hookimpl
    def otpu_checks(self, registry):
        registry.add(Check("platform", N.calib(0), lambda ctx: Result(Status.PASS, "calibrated by memcal"),
                           needs=(N.ID,), stage="calib"))


class Broken:
    @hookimpl
    def otpu_checks(self, registry):
        raise RuntimeError("no")


@pytest.fixture(autouse=True)
def _without_memcal(monkeypatch):
    """The core's calib checks as they are without otpu-memcal, which takes them over when installed."""
    monkeypatch.setattr("otpu_memcal.checks.checks", lambda: [], raising=False)


def _with(*objs):
    mgr = plugins.get()
    for i, o in enumerate(objs):
        mgr.pm.register(o, name=f"test-plugin-{i}")
    return mgr, objs


def test_a_plugin_takes_over_a_core_check_in_place():
    base = [c.name for c in collect(plugins.get().hook, report=None)]
    mgr, objs = _with(MemcalLike())
    try:
        reg = collect(plugins.get().hook, report=None)
    finally:
        for o in objs:
            mgr.pm.unregister(o)
    assert [c.name for c in reg] == base
    assert reg.get(N.calib(0)).fn(None).message == "calibrated by memcal"


def test_broken_and_conflicting_plugins_are_reported():
    mgr, objs = _with(MemcalLike(), MemcalLike(), Broken())
    err = io.StringIO()
    try:
        reg = collect(plugins.get().hook, report=err)
    finally:
        for o in objs:
            mgr.pm.unregister(o)
    text = err.getvalue()
    assert "plugin 'test-plugin-2' could not add its checks: RuntimeError: no" in text
    assert "adds check 'DDR3 calibration channel 0', which plugin 'test-plugin-0' already provides" in text
    assert N.ID in reg
