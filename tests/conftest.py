"""Shared fixtures: every test gets its own run directory, so simulated cards never leak between tests."""
import pytest


@pytest.fixture(autouse=True)
def _isolated_run_dir(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("OTPU_RUN_DIR", str(run))
    monkeypatch.setenv("OTPU_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OTPU_TARGET", raising=False)
    monkeypatch.delenv("OTPU_DEV", raising=False)
    for var in ("OTPU_SIM_FAULTS", "OTPU_TT_SIM_FAULTS", "OTPU_TT_DEV", "OTPU_LOCK_WAIT", "OTPU_TRACE_BAR"):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture
def sim():
    """A simulated sim-small card's transport (device lock held), closed after the test."""
    from otpu_core.transport.sim import SimTransport
    t = SimTransport(target="sim-small")
    yield t
    t.close()
